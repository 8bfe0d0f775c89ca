#!/usr/bin/env bash
# Builds the Debian packages (cpack -G DEB, cmake/MeshstorePackaging.cmake),
# checks what each holds and declares, unpacks both into a scratch root with
# dpkg-deb (no root, nothing touches the system's dpkg database), runs the
# packaged program and builds and runs examples/consumer against that root
# through find_package (docs/install.md).
#   deb_test.sh <build-dir> <consumer-source-dir>
set -euo pipefail
build=$1
consumer=$2
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/meshstore-deb-test.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "deb_test: $*"; exit 1; }

echo "== cpack -G DEB"
cpack -G DEB --config "$build/CPackConfig.cmake" -B "$work/out" > "$work/cpack.log" 2>&1 \
  || { cat "$work/cpack.log"; fail "cpack failed"; }
version=$(sed -n 's/^#define MESHSTORE_VERSION_STRING "\(.*\)"$/\1/p' "$build/runtime/meshstore/version.hpp")
[ -n "$version" ] || fail "no version in $build/runtime/meshstore/version.hpp"
runtime=$(find "$work/out" -maxdepth 1 -name "meshstore_${version}_*.deb")
dev=$(find "$work/out" -maxdepth 1 -name "meshstore-dev_${version}_*.deb")
python=$(find "$work/out" -maxdepth 1 -name "python3-meshstore_${version}_*.deb")
[ -n "$runtime" ] && [ -n "$dev" ] && [ -n "$python" ] \
  || fail "expected meshstore_, meshstore-dev_ and python3-meshstore_${version}_*.deb, got: $(ls "$work/out")"
for deb in "$runtime" "$dev" "$python"; do
  echo "built $(basename "$deb") ($(du -k "$deb" | cut -f1) KiB)"
done

echo "== what each package holds"
dpkg-deb -c "$runtime" | awk '{print $6}' | sed 's#^\./#/#' > "$work/runtime.txt"
dpkg-deb -c "$dev" | awk '{print $6}' | sed 's#^\./#/#' > "$work/dev.txt"
for f in /usr/bin/meshstore /usr/bin/meshrun; do
  grep -qx "$f" "$work/runtime.txt" || fail "$f is not in $(basename "$runtime")"
done
grep -q '^/usr/include/' "$work/runtime.txt" && fail "headers in $(basename "$runtime")"
grep -q '\.a$' "$work/runtime.txt" && fail "static libraries in $(basename "$runtime")"
grep -q '^/usr/bin/.' "$work/dev.txt" && fail "programs in $(basename "$dev")"
for pattern in '/libmeshstore_store\.a$' '/libmeshstore_runtime\.a$' '/cmake/meshstore/meshstoreConfig\.cmake$' \
               '/pkgconfig/meshstore\.pc$'; do
  grep -q "$pattern" "$work/dev.txt" || fail "nothing matching $pattern in $(basename "$dev")"
done
# The headers: exactly the API's (the list cmake --install is checked against).
sed -n 's#^/usr/include/##p' "$work/dev.txt" | grep '\.hpp$' | LC_ALL=C sort > "$work/headers.txt"
diff -u <(LC_ALL=C sort "$here/installed_headers.txt") "$work/headers.txt" \
  || fail "the packaged headers differ from installed_headers.txt"

dpkg-deb -c "$python" | awk '{print $6}' | sed 's#^\./#/#' > "$work/python.txt"
site=/usr/lib/python3/dist-packages/meshstore
for f in "$site/__init__.py" "$site/torchstore/__init__.py"; do
  grep -qx "$f" "$work/python.txt" || fail "$f is not in $(basename "$python")"
done
grep -q "^$site/_native\.cpython-.*\.so$" "$work/python.txt" \
  || fail "no $site/_native*.so in $(basename "$python")"
grep -qv "^$site\|^/usr/lib/python3/dist-packages/\?$\|^/usr/lib/python3/\?$\|^/usr/lib/\?$\|^/usr/\?$\|^/\?$\|^/usr/share/doc" \
  "$work/python.txt" && fail "$(basename "$python") holds more than the package: $(grep -v "^$site" "$work/python.txt" | head -3)"

echo "== what each package declares"
dpkg-deb -f "$dev" Depends | grep -q "meshstore (= ${version})" \
  || fail "$(basename "$dev") does not depend on meshstore (= $version): $(dpkg-deb -f "$dev" Depends)"
dpkg-deb -f "$runtime" Depends | grep -q 'libcaf' \
  || fail "$(basename "$runtime") does not name CAF's library: $(dpkg-deb -f "$runtime" Depends)"
dpkg-deb -f "$python" Depends | grep -q 'python3 (>= 3\.' \
  || fail "$(basename "$python") does not name its Python: $(dpkg-deb -f "$python" Depends)"
dpkg-deb -f "$python" Depends | grep -q 'libcaf' \
  || fail "$(basename "$python") does not name CAF's library: $(dpkg-deb -f "$python" Depends)"

echo "== unpacked into a scratch root"
dpkg-deb -x "$runtime" "$work/root"
dpkg-deb -x "$dev" "$work/root"
"$work/root/usr/bin/meshstore" --version | grep -q "$version" || fail "the packaged meshstore is not $version"
archive=$(find "$work/root" -name libmeshstore_store.a)
if objdump -h "$archive" | grep -q '\.debug_info'; then fail "$archive keeps its debug info"; fi
dpkg-deb -x "$python" "$work/root"
module=$(find "$work/root$site" -name '_native*.so')
if objdump -h "$module" | grep -q '\.debug_info'; then fail "$module keeps its debug info"; fi

echo "== the Python package from the unpacked python3-meshstore"
(cd "$work" && PYTHONPATH="$work/root/usr/lib/python3/dist-packages" /usr/bin/python3 -c "
import meshstore, numpy
assert meshstore.__file__.startswith('$work/root/'), meshstore.__file__
assert meshstore.__version__ == '$version', meshstore.__version__
with meshstore.Store.embedded() as store:
    store.put('w', numpy.arange(6, dtype=numpy.float32)).result(timeout=30)
    assert (numpy.asarray(store.get('w').result(timeout=30)) == numpy.arange(6)).all()
print('python3-meshstore', meshstore.__version__, 'puts and gets')
") || fail "the packaged Python package does not work"

echo "== find_package(meshstore) from the unpacked -dev"
cmake -S "$consumer" -B "$work/cmake-build" -DCMAKE_PREFIX_PATH="$work/root/usr" > "$work/configure.log" \
  || { cat "$work/configure.log"; fail "configure failed"; }
cmake --build "$work/cmake-build" > "$work/build.log" 2>&1 || { cat "$work/build.log"; fail "build failed"; }
"$work/cmake-build/consumer"
echo "deb_test: ok"
