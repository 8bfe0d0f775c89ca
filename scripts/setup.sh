#!/usr/bin/env bash
# Installs every Debian 12 package that meshstore's build, tests and demo need.
# Non-interactive and idempotent: when everything is already installed it
# returns in about a second without touching apt.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config clang-format git iproute2
  libcaf-dev
  # TLS (docs/security.md): OpenSSL's headers, and its CLI for the tests' certificates
  libssl-dev openssl
  libprotobuf-dev protobuf-compiler
  libspdlog-dev libfmt-dev
  libibverbs-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev
  # /metrics (docs/operations.md): the metrics library, Boost.Beast for its
  # HTTP(S); prometheus itself (and promtool) for the tests that scrape a store
  prometheus-cpp-dev libboost-dev prometheus
  clang libclang-rt-dev
  python3 python3-numpy
  # the Python package (docs/python.md) and its tests
  python3-dev pybind11-dev libdlpack-dev python3-torch python3-pytest python3-pytest-asyncio
  # pip wheel and pip install of it (docs/install.md, "Python: pip")
  python3-pip python3-setuptools python3-wheel python3-venv
  # objects of classes defined in functions (meshstore.torchstore, as torchstore)
  python3-cloudpickle
  # peer_bench's contenders (docs/performance.md) and its chart
  redis-server libhiredis-dev
  openmpi-bin libopenmpi-dev
  gnuplot-nox
  # the C++ API reference (docs/reference/, ctest style.api_docs)
  doxygen
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages already installed"
  exit 0
fi

echo "setup: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "setup: done"
