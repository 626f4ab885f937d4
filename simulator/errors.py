"""`ConfigError`, the simulator's one error for bad configuration.

It lives below every other simulator module so that `simulator.methods` (whose classes
validate their own settings) and `simulator.params` (which takes its `spec.method` choices
from that registry) can both raise it without importing each other in a circle.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A configuration value is out of range, of the wrong kind, or inconsistent."""
