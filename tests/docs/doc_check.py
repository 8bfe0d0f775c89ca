"""What the docs' checks share (check_readme, check_reference, check_guides):
finding a run of lines in another, and reporting problems as ctest reads
them."""

import sys
from pathlib import Path


def contains_run(lines, part):
    """Whether the lines `part` appear in `lines` together and in order."""
    return any(lines[i:i + len(part)] == part for i in range(len(lines) - len(part) + 1))


def run(name, problems):
    """Prints each problem `problems(REPO_ROOT)` yields, then "NAME: ok" or
    how many there were; returns the exit status."""
    found = list(problems(Path(sys.argv[1])))
    for p in found:
        print(p)
    print(f"{name}: ok" if not found else f"{name}: {len(found)} problem(s)")
    return 1 if found else 0
