/*
 * fuzz_safetensors.c: libFuzzer target for the safetensors reader: any byte string given as
 * a model file must be accepted with every entry in bounds, or refused with XL_FORMAT/XL_TENSOR/
 * XL_IO, never crash or read outside the mapping.
 */
#include "fuzz_util.h" /* first: it defines _GNU_SOURCE */

#include <stdint.h>
#include <string.h>

#include "internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len) {
  xl_safetensors st;
  xl_error err;
  const char *path = fuzz_memfile(data, len);
  if (xl_safetensors_open(path, &st, &err) != XL_OK) return 0;
  const uint8_t *base = st.map;
  volatile uint8_t sink = 0;
  for (int i = 0; i < st.n_tensors; i++) {
    const xl_tensor_entry *t = &st.tensors[i];
    if (t->data < base || t->data + t->nbytes > base + st.map_len) abort(); /* out of bounds */
    if (t->nbytes) sink ^= t->data[0] ^ t->data[t->nbytes - 1];
  }
  (void)sink;
  xl_safetensors_close(&st);
  return 0;
}
