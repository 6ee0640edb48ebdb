#!/usr/bin/env bash
# The whole test suite: builds xlserve twice (release, and ASan+UBSan) and runs every ctest test
# (C unit tests, parity against the numpy reference, trainer/converter, HTTP integration) in
# both, then builds the libFuzzer targets with clang and runs each for XL_FUZZ_SECONDS (60).
# Usage: tools/test.sh [ctest args...]   e.g. tools/test.sh -R parity   (XL_SKIP_FUZZ=1 skips fuzzing)
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)

build() { # dir, cmake args...
  local dir=$1; shift
  echo "=== $dir: configure and build"
  cmake -S . -B "$dir" "$@" >/dev/null
  cmake --build "$dir" -j "$jobs"
}

build build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DXL_SANITIZE=OFF
echo "=== build: test"
ctest --test-dir build --output-on-failure -E '^fuzz\.' "$@"

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
build build-asan -DCMAKE_BUILD_TYPE=Debug -DXL_SANITIZE=ON
echo "=== build-asan: test"
ctest --test-dir build-asan --output-on-failure -E '^fuzz\.' "$@"

if [ "${XL_SKIP_FUZZ:-0}" != 1 ]; then
  CC=clang build build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DXL_FUZZ=ON \
    -DXL_FUZZ_SECONDS="${XL_FUZZ_SECONDS:-60}"
  echo "=== build-fuzz: fuzzers"
  ctest --test-dir build-fuzz --output-on-failure -R '^fuzz\.'
fi
echo "=== all suites passed (release, ASan+UBSan${XL_SKIP_FUZZ:+}, fuzzers)"
