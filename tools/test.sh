#!/usr/bin/env bash
# The whole test suite: builds xlserve twice (release and ASan+UBSan) and runs every ctest test
# (C unit tests, parity against the numpy reference, trainer/converter, HTTP integration) in
# both. Usage: tools/test.sh [ctest args...]   e.g. tools/test.sh -R parity
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)

run_suite() { # name, cmake args...
  local dir=$1; shift
  echo "=== $dir: configure and build"
  cmake -S . -B "$dir" "$@" >/dev/null
  cmake --build "$dir" -j "$jobs"
  echo "=== $dir: test"
  ctest --test-dir "$dir" --output-on-failure -j 1 "${CTEST_ARGS[@]}"
}

CTEST_ARGS=("$@")
run_suite build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DXL_SANITIZE=OFF
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
run_suite build-asan -DCMAKE_BUILD_TYPE=Debug -DXL_SANITIZE=ON
echo "=== all suites passed (release and ASan+UBSan)"
