"""pytest_unordered.unordered (not a Debian package): equal to any sequence
holding the same items, in any order."""

from collections import Counter


class unordered:  # noqa: N801 (the plugin's name)
    def __init__(self, items):
        self.items = list(items)

    def __eq__(self, other):
        try:
            return Counter(self.items) == Counter(other)
        except TypeError:
            return False

    def __repr__(self):
        return f"unordered({self.items!r})"
