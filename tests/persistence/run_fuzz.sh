#!/usr/bin/env bash
# Runs a libFuzzer target for SECONDS from a copy of the seed corpus (new
# inputs it finds stay in the copy, not in the source tree). A crash fails
# with the fuzzer's report and the input that caused it.
set -u
FUZZER=$1 SEEDS=$2 SECONDS_=$3
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cp "$SEEDS"/* "$WORK"/
cd "$WORK" || exit 1
if "$FUZZER" -max_total_time="$SECONDS_" -rss_limit_mb=1024 -timeout=10 -print_final_stats=1 \
     "$WORK" >"$WORK/log" 2>&1; then
  grep -E "stat::number_of_executed_units|Done" "$WORK/log"
  echo "run_fuzz: ok"
else
  tail -n 60 "$WORK/log"
  echo "run_fuzz: the fuzzer found a failure"
  exit 1
fi
