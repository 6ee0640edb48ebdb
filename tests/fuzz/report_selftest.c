/*
 * report_selftest.c: a libFuzzer target with a planted bug, for tests/fuzz/check_report.sh: an
 * input starting with "xl" shifts 1 left by 40 (undefined behaviour: UBSan's "runtime error").
 * Not a fuzzer of xlserve; it checks that a fuzzer's failure shows its report and stack.
 */
#include <stddef.h>
#include <stdint.h>

static volatile int shift_base = 1;

static int planted_shift(int by) { return shift_base << by; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size >= 2 && data[0] == 'x' && data[1] == 'l') return planted_shift(40 + (int)(size % 2));
  return 0;
}
