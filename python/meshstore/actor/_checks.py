"""Argument checks shared by meshstore.actor's calls: each raises
ValueError naming the argument (`what`, e.g. "spawn_procs():
max_relaunches") and the value it got."""

import math


def count(what, value, least):
    """`value` as an int of at least `least` (a bool is not one)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{what} must be an int >= {least}, not {value!r}")
    return value


def seconds(what, value):
    """`value` as a finite number of seconds, at least a millisecond."""
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or not math.isfinite(value) or value < 0.001):
        raise ValueError(f"{what} must be a number of seconds >= 0.001, not {value!r}")
    return float(value)
