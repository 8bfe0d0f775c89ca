#!/usr/bin/env bash
# The Python package the pip way (docs/install.md, "Python: pip"): pip wheel
# from the repository (offline, Debian's setuptools and wheel, the
# extension taken from this build), then a fresh virtual environment with
# Debian's site-packages (for torch) that installs the wheel and runs a put
# and a get with it, away from the source tree and the build.
#   wheel_test.sh <source-dir> <build-dir> <python>
set -euo pipefail
src=$1
build=$2
python=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/meshstore-wheel-test.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "wheel_test: $*"; exit 1; }

echo "== pip wheel"
(cd "$src" && MESHSTORE_BUILD_DIR="$build" "$python" -m pip wheel --no-build-isolation \
  --no-deps --no-index -w "$work/dist" . > "$work/wheel.log" 2>&1) \
  || { cat "$work/wheel.log"; fail "pip wheel failed"; }
wheel=$(find "$work/dist" -name 'meshstore-*.whl')
[ -n "$wheel" ] || fail "no wheel in $work/dist"
echo "built $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB)"

echo "== a fresh venv (--system-site-packages) installs it"
"$python" -m venv --system-site-packages "$work/venv"
"$work/venv/bin/python" -m pip install --no-index --no-deps "$wheel" > "$work/install.log" 2>&1 \
  || { cat "$work/install.log"; fail "pip install failed"; }

echo "== it imports from the venv and stores"
cd "$work"
PYTHONPATH= "$work/venv/bin/python" - "$work/venv" <<'PY'
import sys, torch, meshstore, meshstore.actor
venv = sys.argv[1]
assert meshstore.__file__.startswith(venv), f"imported {meshstore.__file__}, not the venv's"
with meshstore.Store.embedded() as s:
    s.put("w", torch.arange(6.0)).result(timeout=30)
    got = s.get("w").result(timeout=30).torch()
    assert torch.equal(got, torch.arange(6.0)), got
print("wheel_test: ok", meshstore.__version__, meshstore.__file__)
PY
