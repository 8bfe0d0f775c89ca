#!/usr/bin/env bash
# Resharding across separate launches: a `meshstore serve` holds the store;
# a put world (meshrun -n N) puts a tensor's (or a state dict's) shards under
# one placement and exits; a get world (meshrun -n M) reads its boxes under
# another placement and checks every element. Then what users see when a
# mesh misbehaves: a rank missing, ranks disagreeing on the global shape or
# dtype, replicas with different bytes, a state dict entry only one rank
# has, a box outside the tensor. Loopback only.
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
# [SD=--state-dict] reshard PUT_RANKS PUT_MESH PUT_PLACEMENT GET_RANKS GET_MESH GET_PLACEMENT SHAPE
reshard() {
  n=$((n + 1))
  local key="t$n"
  echo "== $7: [$3] on ($2) -> [$6] on ($5) ${SD:-}"
  "$MESHRUN" -n "$1" -- "$RESHARD" --store "$ADDR" --mode put --key "$key" --shape "$7" \
    --mesh "$2" --placement "$3" ${SD:-} || { echo "put world failed"; exit 1; }
  get_world "$key" "$4" "$5" "$6" "$7"
}

# get_world KEY RANKS MESH PLACEMENT SHAPE: every reader checks its box.
get_world() {
  "$MESHRUN" -n "$2" -- "$RESHARD" --store "$ADDR" --mode get --key "$1" --shape "$5" \
    --mesh "$3" --placement "$4" ${SD:-} >"$LOG/get" 2>&1 ||
    { cat "$LOG/get"; echo "get world failed"; exit 1; }
  cat "$LOG/get"
  [ "$(grep -c ' ok$' "$LOG/get")" -eq "$2" ] || { echo "not every reader checked its box"; exit 1; }
}

# refused CODE NEEDLE ARGS...: one process (a rank of its own, or a world
# of readers) whose put or get must fail with CODE and a message with NEEDLE.
refused() {
  local code=$1 needle=$2
  shift 2
  "$@" --store "$ADDR" --expect-error "$code" ${SD:-} >"$LOG/refused" 2>&1 ||
    { cat "$LOG/refused"; echo "expected $code"; exit 1; }
  cat "$LOG/refused"
  grep -qF -- "$needle" "$LOG/refused" || { echo "the message lacks '$needle'"; exit 1; }
}

reshard 4 4 S0 2 2 S0 7x10            # shrink 4 -> 2 (uneven rows)
reshard 2 2 S0 4 4 S0 7x10            # grow 2 -> 4
reshard 2 2 S1 4 4 S0 8x12            # columns -> rows
reshard 4 2,2 S0,S1 2 2,1 S1,S0 8x12  # 2D -> 2D, other placement
reshard 4 4 S0 4 2,2 S0,S1 8x12       # 1D -> 2D
reshard 4 2,2 S0,S1 4 4 S1 8x12       # 2D -> 1D
reshard 2 2 R 4 4 R 5x3               # replicated -> replicated
reshard 4 2,2 R,S0 4 4 S1 8x12        # [Replicate, Shard(0)] on (2, 2) -> Shard(1) on (4)

echo "== 100x100 put by (2, 2) [S0,S1]: boxes inside one shard and across shards"
"$MESHRUN" -n 4 -- "$RESHARD" --store "$ADDR" --mode put --key h --shape 100x100 --mesh 2,2 \
  --placement S0,S1 || { echo "put world failed"; exit 1; }
for box in 10:20,10:30 60:90,51:99 45:55,45:55 0:100,48:52 99:100,0:100 0:100,0:100; do
  "$RESHARD" --store "$ADDR" --mode get --key h --shape 100x100 --mesh 1 --placement R \
    --rank 0 --box $box >"$LOG/box" 2>&1 || { cat "$LOG/box"; echo "box $box failed"; exit 1; }
  cat "$LOG/box"
  grep -q ' ok$' "$LOG/box" || { echo "box $box was not checked"; exit 1; }
done

SD=--state-dict reshard 4 2,2 S0,S1 2 2 S1 7x10   # a sharded state dict, 2D -> 1D
SD=--state-dict reshard 2 2 R 4 2,2 S1,S0 8x12    # replicated -> 2D

echo "== errors: a missing rank, then ranks that disagree with the others"
put() { "$RESHARD" --mode put --key "$KEY" --shape 8x12 "$@"; }
KEY=e1
"$MESHRUN" -n 2 -- "$RESHARD" --store "$ADDR" --mode put --key $KEY --shape 8x12 --mesh 2 \
  --placement S0 --skip-rank 1 || { echo "put world failed"; exit 1; }
refused partially_committed "missing [4:8, 0:12]" "$MESHRUN" -n 2 -- "$RESHARD" --mode get \
  --key $KEY --shape 8x12 --mesh 2 --placement S1
refused shape_mismatch "ranks disagree on the global shape of 'e1': [8, 12] and [9, 12]" \
  put --mesh 2 --placement S0 --rank 1 --odd shape
refused dtype_mismatch "ranks disagree on the dtype of 'e1': float32 and float64" \
  put --mesh 2 --placement S0 --rank 1 --odd dtype
put --store "$ADDR" --mesh 2 --placement S0 --rank 1 || { echo "the good rank 1 failed"; exit 1; }
get_world $KEY 2 2 S1 8x12
refused out_of_range "is not in its global shape [8, 12]" "$RESHARD" --mode get --key $KEY \
  --shape 9x12 --mesh 1 --placement R --rank 0

KEY=e2  # replicas that differ
"$MESHRUN" -n 2 -- "$RESHARD" --store "$ADDR" --mode put --key $KEY --shape 8x12 --mesh 2 \
  --placement R --skip-rank 1 || { echo "put world failed"; exit 1; }
refused invalid_argument "hold different bytes" put --mesh 2 --placement R --rank 1 --odd bytes
put --store "$ADDR" --mesh 2 --placement R --rank 1 || { echo "the good rank 1 failed"; exit 1; }
get_world $KEY 1 1 R 8x12

KEY=e3  # a sharded state dict: a missing rank, then one with an extra entry
SD=--state-dict
"$MESHRUN" -n 4 -- "$RESHARD" --store "$ADDR" --mode put --key $KEY --shape 8x12 --mesh 4 \
  --placement S0 --skip-rank 3 $SD || { echo "put world failed"; exit 1; }
refused partially_committed "it is sharded state dict 'e3', which commits once all its" \
  "$MESHRUN" -n 2 -- "$RESHARD" --mode get --key $KEY --shape 8x12 --mesh 2 --placement S1
refused invalid_argument "ranks disagree on its entries" \
  put --mesh 4 --placement S0 --rank 3 --odd entries
put --store "$ADDR" --mesh 4 --placement S0 --rank 3 $SD || { echo "the good rank 3 failed"; exit 1; }
get_world $KEY 2 2 S1 8x12
unset SD
echo "reshard_worlds: ok"
