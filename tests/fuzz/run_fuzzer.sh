#!/usr/bin/env bash
# Runs one libFuzzer target for a bounded time on a corpus seeded with valid inputs; fails if
# the fuzzer finds a crash (or cannot run). usage: run_fuzzer.sh FUZZER SEEDER WORKDIR SECONDS
set -euo pipefail
fuzzer=$1 seeder=$2 work=$3 seconds=$4
name=$(basename "$fuzzer")
mkdir -p "$work/blob" "$work/safetensors" "$work/config" "$work/tmp"
XL_TMP="$work/tmp" "$seeder" "$work/blob" "$work/safetensors" "$work/config"
case $name in
  fuzz_state_blob) corpus=$work/blob ;;
  fuzz_safetensors) corpus=$work/safetensors ;;
  fuzz_config) corpus=$work/config ;;
  *) corpus=$work/$name; mkdir -p "$corpus" ;;
esac
seeds=$(dirname "$0")/seeds/${name#fuzz_}
if [ -d "$seeds" ]; then # committed seeds: the first byte selects a variant, so add 0 and 1
  for f in "$seeds"/*; do
    printf '\000' | cat - "$f" > "$corpus/0-$(basename "$f")"
    printf '\001' | cat - "$f" > "$corpus/1-$(basename "$f")"
  done
fi
status=0
XL_TMP="$work/tmp" "$fuzzer" -max_total_time="$seconds" -print_final_stats=1 -rss_limit_mb=2048 \
  -artifact_prefix="$work/" "$corpus" > "$work/log" 2>&1 || status=$?
grep -E "stat::number_of_executed_units|stat::peak_rss|SUMMARY|ERROR" "$work/log" || true
if [ "$status" -ne 0 ]; then
  tail -40 "$work/log"
  echo "$name: fuzzer exited with status $status (artifacts in $work)"
fi
exit "$status"
