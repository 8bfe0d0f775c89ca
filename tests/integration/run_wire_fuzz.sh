#!/usr/bin/env bash
# Writes wire_fuzz's seed corpus (wire_fuzz_seeds: valid encodings of today's
# formats), then runs the fuzzer on it for SECONDS (run_fuzz.sh).
#   run_wire_fuzz.sh SEEDER FUZZER SECONDS
set -eu
SEEDER=$1 FUZZER=$2 SECONDS_=$3
SEEDS=$(mktemp -d)
trap 'rm -rf "$SEEDS"' EXIT
"$SEEDER" "$SEEDS"
"$(dirname "$0")/../persistence/run_fuzz.sh" "$FUZZER" "$SEEDS" "$SECONDS_"
