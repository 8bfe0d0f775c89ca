#!/usr/bin/env bash
# Runs after every other test (ctest fixture cleanup): /dev/shm must hold no
# meshstore segment whose process is gone. Processes the tests killed on
# purpose were collected by the tests themselves, so anything found here was
# leaked by meshstore (a store that did not unlink at shutdown).
set -u
TOOL=$1
out=$("$TOOL" gc --dry-run) || { echo "meshstore gc failed: $out"; exit 1; }
echo "$out"
if echo "$out" | grep -q "^would remove"; then
  echo "LEAK: shared-memory segments of finished processes are left in /dev/shm"
  "$TOOL" gc >/dev/null  # leave the machine clean for the next run
  exit 1
fi
echo "shm leak check: ok"
