#!/usr/bin/env python3
"""The reference pages cannot drift from the code: every `Errc` code in
runtime/meshstore/status.hpp has its entry in docs/errors.md ("### name
(N)", the same number) and no entry names a code that does not exist; every
StoreOptions field in actors/meshstore/store_options.hpp, and every
MeshOptions field in runtime/meshstore/mesh.hpp, has its row in
docs/config.md (`placement.num_volumes`, `listen`, `heartbeat_interval`, ...); every environment
variable the libraries, programs and Python package read ("MESHSTORE_..."
as a string in their sources) is named in docs/config.md.
Usage: check_reference.py REPO_ROOT. Prints "check_reference: ok" or what
is missing."""

import re
import sys

import doc_check

OPTION_GROUPS = {"StorePlacement": "placement", "StoreTransport": "transport",
                 "StoreLimits": "limits", "StoreSecurity": "security", "StoreOptions": ""}
SOURCE_DIRS = ("runtime", "transports", "actors", "persistence", "apps", "python")
FIELD = re.compile(r"^  (?!//|return\b|using\b)[\w:<>, ]+?[\w>]\s+(\w+)\s*(?:=[^;]*|\{[^;]*\})?;")


def errc_codes(root):
    text = (root / "runtime/meshstore/status.hpp").read_text(encoding="utf-8")
    body = re.search(r"enum class Errc[^{]*\{(.*?)\};", text, re.S).group(1)
    return dict((name, int(value)) for name, value in re.findall(r"^\s*(\w+)\s*=\s*(\d+)", body, re.M))


def struct_fields(text, name):
    m = re.search(r"^struct " + name + r" \{\n(.*?)^\};", text, re.S | re.M)
    if m is None:
        return None
    return [f.group(1) for line in m.group(1).splitlines() if (f := FIELD.match(line))]


def option_names(root):
    text = (root / "actors/meshstore/store_options.hpp").read_text(encoding="utf-8")
    names = []
    for struct, group in OPTION_GROUPS.items():
        fields = struct_fields(text, struct)
        if fields is None:
            raise SystemExit(f"check_reference: no struct {struct} in store_options.hpp")
        for field in fields:
            if struct == "StoreOptions" and field in OPTION_GROUPS.values():
                continue  # the groups themselves
            names.append(f"{group}.{field}" if group else field)
    return names


def environment_variables(root):
    found = set()
    for top in SOURCE_DIRS:
        for path in (root / top).rglob("*"):
            if path.suffix in (".cpp", ".hpp", ".h", ".py", ".cu") and path.is_file():
                found.update(re.findall(r"[\"'](MESHSTORE_[A-Z0-9_]+)[\"']",
                                        path.read_text(encoding="utf-8", errors="replace")))
    return sorted(found)


def problems(root):
    errors = (root / "docs/errors.md").read_text(encoding="utf-8")
    documented = dict((n, int(v)) for n, v in re.findall(r"^### (\w+) \((\d+)\)$", errors, re.M))
    codes = errc_codes(root)
    for name, value in codes.items():
        if documented.get(name) != value:
            yield f"docs/errors.md: no entry \"### {name} ({value})\" for Errc::{name}"
    for name in documented.keys() - codes.keys():
        yield f"docs/errors.md: an entry for Errc::{name}, which does not exist"
    config = (root / "docs/config.md").read_text(encoding="utf-8")
    for name in option_names(root):
        if f"| `{name}` |" not in config:
            yield f"docs/config.md: no row for StoreOptions' `{name}`"
    mesh = (root / "runtime/meshstore/mesh.hpp").read_text(encoding="utf-8")
    section = config.split("## MeshOptions", 1)[-1].split("\n## ", 1)[0]
    for field in struct_fields(mesh, "MeshOptions") or ["(no struct MeshOptions in mesh.hpp)"]:
        if f"| `{field}` |" not in section:
            yield f"docs/config.md: no row for MeshOptions' `{field}` under ## MeshOptions"
    for var in environment_variables(root):
        if not re.search(r"\b" + var + r"\b", config):
            yield f"docs/config.md: {var} is read by the code but not named"


if __name__ == "__main__":
    sys.exit(doc_check.run("check_reference", problems))
