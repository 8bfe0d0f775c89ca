#!/usr/bin/env bash
# Resharding across separate launches: a `meshstore serve` holds the store;
# a put world (meshrun -n N) puts a tensor's shards under one placement and
# exits; a get world (meshrun -n M) reads its boxes under another placement
# and checks every element. Loopback only.
set -u
TOOL=$1 MESHRUN=$2 RESHARD=$3
LOG=$(mktemp -d)
SERVE_PID=
cleanup() {
  [ -n "$SERVE_PID" ] && kill "$SERVE_PID" 2>/dev/null && wait "$SERVE_PID" 2>/dev/null
  rm -rf "$LOG"
}
trap cleanup EXIT

"$TOOL" serve --port 0 >"$LOG/serve" 2>&1 &
SERVE_PID=$!
for _ in $(seq 1 300); do grep -q "serving on" "$LOG/serve" && break; sleep 0.1; done
ADDR=$(sed -n 's/.*serving on \([^ ]*\) .*/\1/p' "$LOG/serve")
[ -n "$ADDR" ] || { echo "meshstore serve did not start:"; cat "$LOG/serve"; exit 1; }

n=0
# reshard PUT_RANKS PUT_MESH PUT_PLACEMENT GET_RANKS GET_MESH GET_PLACEMENT SHAPE
reshard() {
  n=$((n + 1))
  local key="t$n"
  echo "== $7: [$3] on ($2) -> [$6] on ($5)"
  "$MESHRUN" -n "$1" -- "$RESHARD" --store "$ADDR" --mode put --key "$key" --shape "$7" \
    --mesh "$2" --placement "$3" || { echo "put world failed"; exit 1; }
  "$MESHRUN" -n "$4" -- "$RESHARD" --store "$ADDR" --mode get --key "$key" --shape "$7" \
    --mesh "$5" --placement "$6" >"$LOG/get" 2>&1 || { cat "$LOG/get"; echo "get world failed"; exit 1; }
  cat "$LOG/get"
  [ "$(grep -c ' ok$' "$LOG/get")" -eq "$4" ] || { echo "not every reader checked its box"; exit 1; }
}

reshard 4 4 S0 2 2 S0 7x10            # shrink 4 -> 2 (uneven rows)
reshard 2 2 S0 4 4 S0 7x10            # grow 2 -> 4
reshard 2 2 S1 4 4 S0 8x12            # columns -> rows
reshard 4 2,2 S0,S1 2 2,1 S1,S0 8x12  # 2D -> 2D, other placement
reshard 4 4 S0 4 2,2 S0,S1 8x12       # 1D -> 2D
reshard 4 2,2 S0,S1 4 4 S1 8x12       # 2D -> 1D
reshard 2 2 R 4 4 R 5x3               # replicated -> replicated
reshard 4 2,2 R,S0 4 4 S1 8x12        # [Replicate, Shard(0)] on (2, 2) -> Shard(1) on (4)
echo "reshard_worlds: ok"
