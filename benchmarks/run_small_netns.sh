#!/usr/bin/env bash
# Small operations between two "hosts": network namespaces joined by a veth
# pair, made here and removed on exit. The bench runs in one, its peer
# process (the store and its volume) and Redis in the other, so every call
# crosses the link over tcp: the fast path's tcp connection against Redis
# over the same link (issue 26: 4 KiB put + get within 1.5 x Redis).
# Needs root (skips with exit 77 otherwise). Arguments go to store_bench,
# e.g. --json, --iters 2000, --encrypt-tcp.
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/integration/netns_hosts.sh
netns_require_root
A=msbench_a_$$ B=msbench_b_$$ VA=msba$$ VB=msbb$$
ERR=$(mktemp)
cleanup() {
  ip netns del "$A" 2>/dev/null || true
  ip netns del "$B" 2>/dev/null || true
  rm -f "$ERR"
}
trap cleanup EXIT
netns_two_hosts "$A" "$B" "$VA" "$VB" 10.77.0.1 10.77.0.2 "$ERR"
ip netns exec "$A" build/bin/store_bench --scenario small --transport tcp \
  --peer-netns "$B" --peer-host 10.77.0.2 "$@"
