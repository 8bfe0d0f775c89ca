#!/usr/bin/env bash
# Installs the build into a fresh prefix, then builds and runs
# examples/consumer against it twice: through find_package(meshstore) and
# through pkg-config. Proves an installed meshstore is usable from a project
# of one's own (docs/install.md).
#   consumer_test.sh <build-dir> <consumer-source-dir>
set -euo pipefail
build=$1
consumer=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/meshstore-install-test.XXXXXX")
trap 'rm -rf "$work"' EXIT

echo "== cmake --install $build --prefix $work/prefix"
cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
for f in include/meshstore/store.hpp include/meshstore/version.hpp bin/meshstore bin/meshrun; do
  [ -e "$work/prefix/$f" ] || { echo "missing from the prefix: $f"; exit 1; }
done
# lib/ or lib/<multiarch>/, as GNUInstallDirs chose at configure time.
pc=$(find "$work/prefix" -name meshstore.pc)
config=$(find "$work/prefix" -name meshstoreConfig.cmake)
[ -n "$pc" ] && [ -n "$config" ] || { echo "missing meshstore.pc or meshstoreConfig.cmake"; exit 1; }
# Exactly the API's headers, no internals (installed_headers.txt beside this
# script is the list; change it with the API, and say so in CHANGELOG.md).
expected="$(dirname "$0")/installed_headers.txt"
(cd "$work/prefix/include" && find meshstore -type f | LC_ALL=C sort) > "$work/installed.txt"
if ! diff -u <(LC_ALL=C sort "$expected") "$work/installed.txt"; then
  echo "the installed headers differ from $expected ('+': installed but not listed)"
  exit 1
fi
echo "installed headers: $(wc -l < "$work/installed.txt"), as listed"

echo "== find_package(meshstore)"
cmake -S "$consumer" -B "$work/cmake-build" -DCMAKE_PREFIX_PATH="$work/prefix" > "$work/configure.log" \
  || { cat "$work/configure.log"; exit 1; }
cmake --build "$work/cmake-build" > "$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
"$work/cmake-build/consumer"

echo "== pkg-config meshstore"
flags=$(PKG_CONFIG_PATH="$(dirname "$pc")" pkg-config --cflags --libs meshstore)
c++ -std=c++17 "$consumer/consumer.cpp" -o "$work/consumer-pc" $flags
"$work/consumer-pc"

echo "== the installed meshstore program runs"
"$work/prefix/bin/meshstore" --version

# The Python package, when this build has it (docs/python.md): installed
# where Debian's python3 looks under the prefix, and importable from there.
if compgen -G "$build/python/meshstore/_native*.so" > /dev/null; then
  echo "== the installed Python package imports"
  init=$(find "$work/prefix" -path '*/dist-packages/meshstore/__init__.py' | head -1)
  [ -n "$init" ] || { echo "the Python package is missing from the prefix"; exit 1; }
  site=$(dirname "$(dirname "$init")")
  PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$site" /usr/bin/python3 -c "
import meshstore, meshstore.torchstore as ts, sys
assert meshstore.__file__.startswith('$site'), meshstore.__file__
assert ts.spmd.SPMDEnv and ts.TransportType.SharedMemory, 'the torchstore package is whole'
with meshstore.Store.embedded() as s:
    s.put('k', b'v').result()
    assert s.get('k').result() == b'v'
print('installed meshstore', meshstore.__version__, 'from', '$site')
"
fi
