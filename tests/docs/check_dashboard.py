#!/usr/bin/env python3
"""Checks docs/operations/grafana-dashboard.json: it parses, every panel has
a Prometheus query, and every meshstore series a query names is one
docs/operations.md documents."""
import json
import re
import sys

root = sys.argv[1] if len(sys.argv) > 1 else "."
with open(f"{root}/docs/operations/grafana-dashboard.json") as f:
    board = json.load(f)
with open(f"{root}/docs/operations.md") as f:
    documented = set(re.findall(r"`(meshstore_[a-z_]+)`", f.read()))
errors = []
if not board.get("panels"):
    errors.append("no panels")
for p in board.get("panels", []):
    targets = p.get("targets") or []
    if not targets:
        errors.append(f"panel {p.get('title')!r} has no query")
    for t in targets:
        for name in re.findall(r"\bmeshstore_[a-z_]+", t.get("expr", "")):
            base = re.sub(r"_(bucket|count|sum)$", "", name)
            if name not in documented and base not in documented:
                errors.append(f"panel {p.get('title')!r}: {name} is not in docs/operations.md")
for e in errors:
    print("check_dashboard:", e)
if errors:
    sys.exit(1)
print(f"check_dashboard: ok ({len(board['panels'])} panels)")
