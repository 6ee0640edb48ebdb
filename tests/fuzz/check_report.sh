#!/usr/bin/env bash
# Checks that run_fuzzer.sh shows a fuzzer's failure in the test output: it runs the planted-bug
# target (report_selftest.c) seeded with the input that triggers it, and expects a non-zero exit
# with UBSan's "runtime error" line and a symbolized frame (function and file:line) printed.
# usage: check_report.sh FUZZER SEEDER WORKDIR
set -euo pipefail
fuzzer=$1 seeder=$2 work=$3
rm -rf "$work"
mkdir -p "$work/$(basename "$fuzzer")"
printf 'xl' > "$work/$(basename "$fuzzer")/planted"
status=0
out=$("$(dirname "$0")/run_fuzzer.sh" "$fuzzer" "$seeder" "$work" 5 2>&1) || status=$?
fail() { echo "$out"; echo "check_report: $1"; exit 1; }
[ "$status" -ne 0 ] || fail "the planted bug was not found (exit 0)"
grep -q "report_selftest.c:[0-9]*:[0-9]*: runtime error: shift exponent" <<<"$out" ||
  fail "no 'runtime error' line in the output"
grep -qE "#[0-9]+ .* in planted_shift .*report_selftest.c:[0-9]+" <<<"$out" ||
  fail "no symbolized frame (planted_shift, report_selftest.c:LINE) in the output"
echo "check_report: run_fuzzer.sh printed the report and its symbolized stack (exit $status)"
