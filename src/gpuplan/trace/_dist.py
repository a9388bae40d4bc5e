"""Placeholder; replaced below."""
import contextlib
@contextlib.contextmanager
def fake_world(scenario, rank, notes):
    yield None
