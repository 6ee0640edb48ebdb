/*
 * fuzz_json_schema.c: libFuzzer target for structured output (server/engine/json_constraint.c,
 * jc_regex.c). Input: a flag byte (bit 0: json_object's object-only root), a JSON schema, then
 * after a NUL byte the choices of a walk. A schema either compiles or is refused with a message
 * and a path; a compiled one is walked through the allowed bytes (each choice byte picks one),
 * which must never reach a state with no allowed byte, and a completed document must parse.
 * Never a crash, a leak or a sanitizer report. Single-threaded.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "json_constraint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len) {
  if (len < 2) return 0;
  const uint8_t *text = data + 1, *sep = memchr(text, 0, len - 1);
  size_t tlen = sep ? (size_t)(sep - text) : len - 1;
  const uint8_t *walk = sep ? sep + 1 : NULL;
  size_t wlen = sep ? len - 1 - tlen - 1 : 0;
  json_error_t je;
  json_t *schema = json_loadb((const char *)text, tlen, 0, &je);
  if (!schema) return 0;
  char err[400], path[200];
  jc_schema *s = jc_compile_at(schema, data[0] & 1, err, sizeof err, path, sizeof path);
  if (!s) {
    if (!err[0] || strncmp(err, "schema", 6)) __builtin_trap(); /* a message naming the path */
    json_decref(schema);
    return 0;
  }
  jc_state *st = malloc(sizeof *st);
  jc_init(st, s);
  char *doc = malloc(4097);
  size_t n = 0;
  uint32_t x = (uint32_t)len * 2654435761u + 1;
  uint8_t allowed[256];
  while (!jc_done(st) && n < 4096) {
    int k = jc_allowed_bytes(st, allowed);
    if (k == 0) __builtin_trap(); /* a dead end */
    unsigned r;
    if (n < wlen) {
      r = walk[n];
    } else { /* past the given choices: favour closing bytes so that walks end */
      x ^= x << 13, x ^= x >> 17, x ^= x << 5;
      r = x >> 8;
      if ((x & 3) == 0)
        for (const char *p = "\"]}0 "; *p; p++)
          if (allowed[(unsigned char)*p]) {
            r = 0;
            for (int c = 0; c < (unsigned char)*p; c++) r += allowed[c];
            break;
          }
    }
    r %= (unsigned)k;
    int pick = 0;
    for (int c = 0; c < 256; c++)
      if (allowed[c] && r-- == 0) {
        pick = c;
        break;
      }
    if (jc_step(st, (unsigned char)pick)) __builtin_trap(); /* allowed, then refused */
    doc[n++] = (char)pick;
  }
  if (jc_done(st)) {
    json_t *v = json_loadb(doc, n, JSON_DECODE_ANY, &je);
    if (!v) __builtin_trap(); /* a complete document that does not parse */
    json_decref(v);
  }
  free(doc);
  free(st);
  jc_schema_free(s);
  json_decref(schema);
  return 0;
}
