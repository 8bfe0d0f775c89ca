"""An in-process stand-in for Monarch's actors (the conformance run's shim):
meshstore has no Python actors yet (docs/python.md). See actor.py."""
