"""Discrete-event (simpy) serving simulator for speculative decoding. Never imports torch."""
