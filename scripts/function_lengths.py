#!/usr/bin/env python3
"""The longest functions and the largest files of the project's code, as
issue 50 measures them: a function's length is the lines from its
definition's start to its end, as universal-ctags reports them
(--fields=+ne); a lambda counts toward the function that holds it.

Usage: scripts/function_lengths.py [--limit N] [--top K]
Prints the functions over N lines (default 80), the K longest (default 5)
and the non-test source files over 600 lines.
"""
import argparse
import os
import subprocess
import sys

FOLDERS = ["runtime", "transports", "actors", "persistence", "apps", "python/src"]
SUFFIXES = (".cpp", ".hpp", ".h", ".cc", ".cu")


def functions(root):
    out = subprocess.run(
        ["ctags", "--fields=+ne", "-R", "-x", "--_xformat=%F\t%n\t%e\t%N", "--kinds-c++=f",
         "--languages=C++", "--map-C++=+.cu"] + FOLDERS,
        cwd=root, check=True, capture_output=True, text=True).stdout
    found = []
    for line in out.splitlines():
        path, start, end, name = line.split("\t", 3)
        if not end.isdigit() or name.startswith("__anon"):
            continue  # a lambda counts toward the function that holds it
        found.append((int(end) - int(start) + 1, path, int(start), name))
    return found


def files(root):
    sizes = []
    for folder in FOLDERS:
        for dirpath, _, names in os.walk(os.path.join(root, folder)):
            for name in names:
                if name.endswith(SUFFIXES):
                    path = os.path.join(dirpath, name)
                    with open(path, encoding="utf-8", errors="replace") as f:
                        sizes.append((sum(1 for _ in f), os.path.relpath(path, root)))
    return sizes


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=80)
    parser.add_argument("--top", type=int, default=5)
    args = parser.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    fns = sorted(functions(root), reverse=True)
    over = [f for f in fns if f[0] > args.limit]
    print(f"functions over {args.limit} lines: {len(over)}")
    for n, path, start, name in fns[: args.top]:
        print(f"  {n:5d}  {name}  ({path}:{start})")
    big = sorted((f for f in files(root) if f[0] > 600), reverse=True)
    print(f"source files over 600 lines: {len(big)}")
    for n, path in big:
        print(f"  {n:5d}  {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
