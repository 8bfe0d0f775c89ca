#!/usr/bin/env python3
"""Keeps the library's modules apart: every #include under runtime/,
transports/, actors/ and persistence/ must follow an edge that
module_edges.txt names, and those edges must form no cycle.

Usage: check_modules.py SOURCE_DIR        check the tree; prints "check_modules: ok"
       check_modules.py --self-test       shows the check fails where it must
"""
import os
import re
import sys
import tempfile

LAYERS = ("runtime", "transports", "actors", "persistence")
INCLUDE = re.compile(r'^\s*#\s*include\s+"(meshstore/[^"]+)"', re.M)


def module_of(root, path):
    """The module of a file under `root`, or None outside the libraries."""
    rel = os.path.relpath(path, root).split(os.sep)
    if rel[0] not in LAYERS or len(rel) < 3 or rel[1] != "meshstore":
        return None
    if rel[0] != "actors":
        return rel[0]
    # actors/meshstore/<module>/...; the public headers at its root
    # (store.hpp, store_mesh.hpp) are the API every module may name.
    return rel[2] if len(rel) > 3 else "api"


def resolve(root, include):
    """The module that provides `include` ("meshstore/..."), or None."""
    candidates = [include]
    if include.endswith(".pb.h"):  # generated from the .proto beside it
        candidates.append(include[: -len(".pb.h")] + ".proto")
    if include.endswith(".hpp"):  # configured, such as version.hpp.in
        candidates.append(include + ".in")
    for layer in LAYERS:
        for c in candidates:
            path = os.path.join(root, layer, c)
            if os.path.exists(path):
                return module_of(root, path)
    return None


def read_edges(path):
    edges = set()
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            m = re.fullmatch(r"([a-z_]+)\s*->\s*([a-z_]+)", line)
            if not m:
                raise SystemExit(f"{path}:{n}: not 'from -> to': {line!r}")
            edges.add((m.group(1), m.group(2)))
    return edges


def find_cycle(edges):
    graph = {}
    for a, b in edges:
        graph.setdefault(a, []).append(b)
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, [])):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def check(root, edges_path):
    """The problems found, one line each."""
    allowed = read_edges(edges_path)
    problems = []
    cycle = find_cycle(allowed)
    if cycle:
        problems.append(f"{edges_path}: the allowed edges form a cycle: {' -> '.join(cycle)}")
    seen = set()
    for layer in LAYERS:
        for dirpath, _, files in os.walk(os.path.join(root, layer)):
            for name in sorted(files):
                if not name.endswith((".hpp", ".cpp", ".h", ".cu")):
                    continue
                path = os.path.join(dirpath, name)
                src = module_of(root, path)
                if src is None:
                    continue
                with open(path, encoding="utf-8") as f:
                    text = f.read()
                for include in INCLUDE.findall(text):
                    dst = resolve(root, include)
                    if dst is None:
                        problems.append(f"{os.path.relpath(path, root)}: includes "
                                        f"\"{include}\", which no library folder holds")
                    elif dst != src:
                        seen.add((src, dst))
                        if (src, dst) not in allowed:
                            problems.append(f"{os.path.relpath(path, root)}: {src} -> {dst} "
                                            f"(\"{include}\") is not an allowed edge")
    cycle = find_cycle(seen)
    if cycle:
        problems.append(f"the includes form a cycle: {' -> '.join(cycle)}")
    return problems


def self_test():
    """The check must catch a back edge, a cycle and an unknown header."""
    with tempfile.TemporaryDirectory() as root:
        def write(rel, text):
            path = os.path.join(root, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
        write("runtime/meshstore/status.hpp", "#pragma once\n")
        write("actors/meshstore/client/client.hpp", '#include "meshstore/status.hpp"\n')
        write("actors/meshstore/store/store.cpp", '#include "meshstore/client/client.hpp"\n')
        write("edges.txt", "client -> runtime\nstore -> client\n")
        edges = os.path.join(root, "edges.txt")
        assert check(root, edges) == [], check(root, edges)
        write("actors/meshstore/client/back.cpp", '#include "meshstore/store/impl.hpp"\n'
                                                  '#include "meshstore/gone.hpp"\n')
        write("actors/meshstore/store/impl.hpp", "#pragma once\n")
        problems = check(root, edges)
        assert any("client -> store" in p and "not an allowed edge" in p for p in problems), problems
        assert any("the includes form a cycle" in p for p in problems), problems
        assert any("meshstore/gone.hpp" in p for p in problems), problems
        write("edges.txt", "client -> runtime\nstore -> client\nclient -> store\n")
        problems = check(root, edges)
        assert any("the allowed edges form a cycle" in p for p in problems), problems
    print("check_modules: self-test ok")


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) != 2:
        raise SystemExit(__doc__)
    root = argv[1]
    problems = check(root, os.path.join(root, "tests", "layout", "module_edges.txt"))
    for p in problems:
        print(p)
    if problems:
        return 1
    print("check_modules: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
