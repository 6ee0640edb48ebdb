/*
 * web_ui.c: the built-in chat page (GET/HEAD /). The HTML lives in server/web/index.html; the
 * build turns it into web_page.h (server/web/embed.cmake), so the binary carries it and the
 * daemon reads no file. The Content-Security-Policy allows only what the page needs: its own
 * origin for fetch, and its one inline <style> and <script> by SHA-256 (computed here from the
 * embedded bytes on first use, so the hashes cannot drift from the page).
 * Thread: loop thread (web_ui_response, the first web_ui_csp); the page bytes are immutable.
 */
#define _GNU_SOURCE /* memmem */
#include "web_ui.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "sha256.h"
#include "web_page.h"

const char *web_ui_page(size_t *len) {
  *len = (size_t)web_page_len;
  return (const char *)web_page;
}

static void base64(const uint8_t *in, size_t n, char *out) {
  static const char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  size_t o = 0;
  for (size_t i = 0; i < n; i += 3) {
    uint32_t v = (uint32_t)in[i] << 16;
    if (i + 1 < n) v |= (uint32_t)in[i + 1] << 8;
    if (i + 2 < n) v |= in[i + 2];
    out[o++] = t[v >> 18 & 63];
    out[o++] = t[v >> 12 & 63];
    out[o++] = i + 1 < n ? t[v >> 6 & 63] : '=';
    out[o++] = i + 2 < n ? t[v & 63] : '=';
  }
  out[o] = 0;
}

/* 'sha256-...' of the text between the first `open` and the following `close`, or 'none'
 * when the page has no such element (the page's own comment names no tags literally). */
static void element_hash(const char *page, size_t len, const char *open, const char *close,
                         char *out, size_t cap) {
  const char *b = memmem(page, len, open, strlen(open));
  const char *e = b ? memmem(b, len - (size_t)(b - page), close, strlen(close)) : NULL;
  if (!b || !e) {
    snprintf(out, cap, "'none'");
    return;
  }
  b += strlen(open);
  uint8_t d[32];
  char b64[45];
  sha256(b, (size_t)(e - b), d);
  base64(d, sizeof d, b64);
  snprintf(out, cap, "'sha256-%s'", b64);
}

const char *web_ui_csp(void) {
  static char csp[512];
  if (!csp[0]) {
    size_t len;
    const char *p = web_ui_page(&len);
    char style[64], script[64];
    element_hash(p, len, "<style>", "</style>", style, sizeof style);
    element_hash(p, len, "<script>", "</script>", script, sizeof script);
    snprintf(csp, sizeof csp,
             "default-src 'self'; script-src %s; style-src %s; img-src 'self' data:; "
             "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
             script, style);
  }
  return csp;
}

struct MHD_Response *web_ui_response(void) {
  size_t len;
  const char *p = web_ui_page(&len);
  struct MHD_Response *resp =
      MHD_create_response_from_buffer(len, (void *)p, MHD_RESPMEM_PERSISTENT);
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/html; charset=utf-8");
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
  MHD_add_response_header(resp, "Content-Security-Policy", web_ui_csp());
  MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
  MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
  return resp;
}
