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
[ -n "$runtime" ] && [ -n "$dev" ] \
  || fail "expected meshstore_${version}_*.deb and meshstore-dev_${version}_*.deb, got: $(ls "$work/out")"
echo "built $(basename "$runtime") ($(du -k "$runtime" | cut -f1) KiB)" \
  "and $(basename "$dev") ($(du -k "$dev" | cut -f1) KiB)"

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

echo "== what each package declares"
dpkg-deb -f "$dev" Depends | grep -q "meshstore (= ${version})" \
  || fail "$(basename "$dev") does not depend on meshstore (= $version): $(dpkg-deb -f "$dev" Depends)"
dpkg-deb -f "$runtime" Depends | grep -q 'libcaf' \
  || fail "$(basename "$runtime") does not name CAF's library: $(dpkg-deb -f "$runtime" Depends)"

echo "== unpacked into a scratch root"
dpkg-deb -x "$runtime" "$work/root"
dpkg-deb -x "$dev" "$work/root"
"$work/root/usr/bin/meshstore" --version | grep -q "$version" || fail "the packaged meshstore is not $version"
archive=$(find "$work/root" -name libmeshstore_store.a)
if objdump -h "$archive" | grep -q '\.debug_info'; then fail "$archive keeps its debug info"; fi

echo "== find_package(meshstore) from the unpacked -dev"
cmake -S "$consumer" -B "$work/cmake-build" -DCMAKE_PREFIX_PATH="$work/root/usr" > "$work/configure.log" \
  || { cat "$work/configure.log"; fail "configure failed"; }
cmake --build "$work/cmake-build" > "$work/build.log" 2>&1 || { cat "$work/build.log"; fail "build failed"; }
"$work/cmake-build/consumer"
echo "deb_test: ok"
