#!/usr/bin/env bash
# Runs torchstore's own public-API tests against meshstore.torchstore.
#
#   [TESTS="test_keys.py ..."] scripts/torchstore_compat/run.sh TORCHSTORE_SOURCES [PYTEST_ARGS...]
#
# TORCHSTORE_SOURCES is a checkout of torchstore (its tests/ are used as
# they are, copied to a temporary folder, never into this project). `import
# torchstore` becomes meshstore.torchstore through shim/; Monarch's actors
# are an in-process stand-in (shim/monarch/actor.py); conftest.py lets the
# test modules import on torch 1.13, skipping what needs DTensor. Needs
# build/python (scripts/build.sh). Modules testing torchstore's internals
# are not run; conftest.py's NOT_HERE skips, with its reason, each public
# test that the stand-ins cannot run (docs/torchstore.md, "torchstore's own
# tests").
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
src=${1:?usage: run.sh TORCHSTORE_SOURCES [PYTEST_ARGS...]}
shift
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$src/tests" "$work/tests"
cp "$here/conftest.py" "$work/conftest.py"
# TESTS="test_keys.py test_spmd.py" runs only those modules.
read -r -a public <<< "${TESTS:-test_keys.py test_spmd.py test_store.py test_state_dict.py \
test_tensor_slice.py test_resharding_basic.py test_resharding_ext.py}"
cd "$work"
# No RDMA device on a machine without one: MonarchRDMA (meshstore's rdma)
# would fail every case at initialize, as torchstore's does.
export TORCHSTORE_RDMA_ENABLED=${TORCHSTORE_RDMA_ENABLED:-0}
export PYTHONPATH="$here/shim:$root/build/python${PYTHONPATH:+:$PYTHONPATH}"
exec /usr/bin/python3 -m pytest -p no:cacheprovider -o asyncio_mode=strict -rs \
  "${public[@]/#/tests/}" "$@"
