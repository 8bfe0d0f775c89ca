#!/usr/bin/env bash
# Writes agent_fuzz's seed corpus (serialized agent requests and structured
# inputs, made by the fuzzer itself so they follow today's message types),
# then runs the fuzzer on it for SECONDS (run_fuzz.sh).
#   run_agent_fuzz.sh FUZZER SECONDS
set -eu
FUZZER=$1 SECONDS_=$2
SEEDS=$(mktemp -d)
trap 'rm -rf "$SEEDS"' EXIT
AGENT_FUZZ_WRITE_SEEDS="$SEEDS" "$FUZZER"
"$(dirname "$0")/../persistence/run_fuzz.sh" "$FUZZER" "$SEEDS" "$SECONDS_"
