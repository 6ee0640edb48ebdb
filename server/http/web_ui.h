/*
 * web_ui.h: the built-in chat page served at / (server/web/index.html, compiled in).
 * Thread: loop thread (web_ui_response); web_ui_page and web_ui_csp are pure once computed.
 */
#ifndef XLS_WEB_UI_H
#define XLS_WEB_UI_H

#include <microhttpd.h>
#include <stddef.h>

/* The page's bytes (static storage, not NUL-terminated in the count). */
const char *web_ui_page(size_t *len);
/* The Content-Security-Policy header value: default-src 'self' plus the SHA-256 hashes of the
 * page's one inline <style> and one inline <script> (computed on first use). */
const char *web_ui_csp(void);
/* A new 200 response for GET/HEAD /: the page with Content-Type, Cache-Control: no-cache,
 * the CSP, X-Content-Type-Options: nosniff, Referrer-Policy. The caller queues and destroys it. */
struct MHD_Response *web_ui_response(void);

#endif
