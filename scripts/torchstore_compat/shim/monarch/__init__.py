"""An in-process stand-in for Monarch's actors (the conformance run's shim):
it runs each "actor" in the test's own process; meshstore's own Python actors
(docs/python-actors.md) are not what this run drives. See actor.py."""
