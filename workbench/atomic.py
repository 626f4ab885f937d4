"""Atomic result files: written to a temporary file beside the target, then renamed over it.

A reader (or a later `workbench report`) therefore sees either the previous complete file or
the new complete one, never a truncated one: a full disk, a kill or Ctrl-C in the middle of
a write leaves the target as it was and removes the temporary file. Stdlib only, so the GPU
machine (no hydra, no simpy) writes its results through it too.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(path: Path | str) -> Iterator[Path]:
    """A temporary path in `path`'s folder (same suffix, so writers that infer the format
    from it, like matplotlib's savefig, still do) that replaces `path`, with the usual
    permissions of a new file, when the block ends without an exception; on any exception
    (KeyboardInterrupt included) it is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=path.suffix or ".tmp",
                               dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_open(path: Path | str, mode: str = "w", **kwargs) -> Iterator[IO]:
    """`open(path, mode, **kwargs)` whose content appears at `path` only once complete."""
    with atomic_path(path) as tmp, open(tmp, mode, **kwargs) as f:
        yield f
        f.flush()
        os.fsync(f.fileno())


def write_text(path: Path | str, text: str) -> Path:
    """`Path(path).write_text(text)`, atomically; returns the path."""
    with atomic_open(path) as f:
        f.write(text)
    return Path(path)
