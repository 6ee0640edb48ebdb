/*
 * fuzz_request.c: libFuzzer target for request-body validation (server/api/api_parse.c): any
 * bytes as the body of /v1/completions or /v1/chat/completions are a validated request or a
 * 4xx error naming a field, never a crash or a leak. The first byte picks the endpoint.
 */
#include <stdint.h>
#include <string.h>

#include "api_parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len) {
  if (len < 1) return 0;
  job_kind kind = (data[0] & 1) ? JOB_CHAT : JOB_COMPLETION;
  parse_limits lim = {64, 4096, 256, 0};
  gen_request g;
  api_error e;
  memset(&g, 0, sizeof g);
  if (parse_gen_request((const char *)data + 1, len - 1, kind, &lim, &g, &e) == 0) {
    if (g.n_stops < 0 || g.n_stops > MAX_STOPS || g.max_tokens < 0 || g.max_tokens > 4096)
      __builtin_trap();
  } else if (e.status < 400 || e.status > 499) {
    __builtin_trap();
  }
  gen_request_free(&g); /* owns the parsed JSON on both paths */
  return 0;
}
