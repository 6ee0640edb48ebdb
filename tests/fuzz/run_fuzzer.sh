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
# Reports name functions and lines when a symbolizer is at hand (tools/test.sh sets the options;
# this covers running the ctest test alone).
symbolizer=$(command -v llvm-symbolizer || ls /usr/lib/llvm-*/bin/llvm-symbolizer 2>/dev/null |
             sort -V | tail -1 || true)
if [ -n "$symbolizer" ]; then
  case ${ASAN_OPTIONS:-} in *external_symbolizer_path*) ;; *)
    export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}external_symbolizer_path=$symbolizer ;; esac
  case ${UBSAN_OPTIONS:-} in *external_symbolizer_path*) ;; *)
    export UBSAN_OPTIONS=${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}print_stacktrace=1:external_symbolizer_path=$symbolizer ;; esac
fi
status=0
XL_TMP="$work/tmp" "$fuzzer" -max_total_time="$seconds" -print_final_stats=1 -rss_limit_mb=2048 \
  -artifact_prefix="$work/" "$corpus" > "$work/log" 2>&1 || status=$?
grep -E "stat::number_of_executed_units|stat::peak_rss" "$work/log" || true
if [ "$status" -ne 0 ]; then
  # The report itself: from the first line that names the error (a sanitizer's ERROR line,
  # UBSan's "runtime error", libFuzzer's own: timeout, out of memory, deadly signal) through its
  # stack, then the end of the log (the input that crashed and where it was written).
  first=$(grep -n -m1 -E "runtime error:|ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|\
WARNING: (AddressSanitizer|ThreadSanitizer)|==[0-9]+== ERROR" "$work/log" | cut -d: -f1 || true)
  if [ -n "$first" ]; then
    from=$((first > 2 ? first - 2 : 1))
    echo "--- $name: the report ($work/log from line $from)"
    sed -n "${from},$((from + 100))p" "$work/log"
    if [ "$(wc -l < "$work/log")" -gt $((from + 100)) ]; then
      echo "--- $name: the end of the log"
      tail -15 "$work/log"
    fi
  else
    echo "--- $name: the end of $work/log (no sanitizer report in it)"
    tail -60 "$work/log"
  fi
  echo "$name: fuzzer exited with status $status (log and artifacts in $work)"
fi
exit "$status"
