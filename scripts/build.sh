#!/usr/bin/env bash
# Configures (once) and builds meshstore into build/ with Ninja and ccache.
# Extra arguments go to CMake's configure step, e.g. -DMESHSTORE_WITH_CUDA=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${MESHSTORE_BUILD_DIR:-build}
if [ ! -f "$BUILD_DIR/build.ninja" ] || [ $# -gt 0 ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
fi
# Two cores: two jobs keep memory in check while compiling CAF-heavy units.
cmake --build "$BUILD_DIR" -j "${MESHSTORE_JOBS:-2}"
