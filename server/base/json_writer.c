/*
 * json_writer.c: the small JSON writer (see json_writer.h). Thread: any (a writer belongs to
 * its caller).
 */
#include "json_writer.h"

#include <math.h>

#include <string.h>

#include "util.h"

void jw_init(json_writer *w, buf *b) {
  memset(w, 0, sizeof *w);
  w->b = b;
}

static int in_object(const json_writer *w) { return w->depth && (w->is_obj >> w->depth & 1); }

/* Before a value: the comma of an array item; refuses a value where a key belongs, or a
 * second top-level value. */
static int value_start(json_writer *w) {
  if (w->bad) return 0;
  if (!w->depth) {
    if (w->values) {
      w->bad = 1;
      return 0;
    }
    w->values++;
    return 1;
  }
  if (in_object(w)) {
    if (!w->after_key) {
      w->bad = 1;
      return 0;
    }
    w->after_key = 0;
    return 1;
  }
  if (w->has_item >> w->depth & 1) buf_addc(w->b, ',');
  w->has_item |= 1u << w->depth;
  return 1;
}

void jw_key(json_writer *w, const char *key) {
  if (w->bad) return;
  if (!in_object(w) || w->after_key) {
    w->bad = 1;
    return;
  }
  if (w->has_item >> w->depth & 1) buf_addc(w->b, ',');
  w->has_item |= 1u << w->depth;
  json_escape(w->b, key, strlen(key));
  buf_addc(w->b, ':');
  w->after_key = 1;
}

static void open_container(json_writer *w, int obj) {
  if (w->depth + 1 >= JW_MAX_DEPTH) {
    w->bad = 1;
    return;
  }
  if (!value_start(w)) return;
  w->depth++;
  w->has_item &= ~(1u << w->depth);
  if (obj) w->is_obj |= 1u << w->depth;
  else w->is_obj &= ~(1u << w->depth);
  buf_addc(w->b, obj ? '{' : '[');
}

void jw_object(json_writer *w) { open_container(w, 1); }

void jw_array(json_writer *w) { open_container(w, 0); }

void jw_end(json_writer *w) {
  if (w->bad) return;
  if (!w->depth || w->after_key) {
    w->bad = 1;
    return;
  }
  buf_addc(w->b, in_object(w) ? '}' : ']');
  w->depth--;
}

void jw_string_n(json_writer *w, const char *s, size_t n) {
  if (value_start(w)) json_escape(w->b, s, n);
}

void jw_string(json_writer *w, const char *s) {
  if (!s) jw_null(w);
  else jw_string_n(w, s, strlen(s));
}

void jw_int(json_writer *w, long long v) {
  if (value_start(w)) buf_printf(w->b, "%lld", v);
}

void jw_uint(json_writer *w, unsigned long long v) {
  if (value_start(w)) buf_printf(w->b, "%llu", v);
}

void jw_fixed(json_writer *w, double v, int decimals) {
  if (!isfinite(v)) jw_null(w);
  else if (value_start(w)) buf_printf(w->b, "%.*f", decimals, v);
}

void jw_bool(json_writer *w, int v) {
  if (value_start(w)) buf_adds(w->b, v ? "true" : "false");
}

void jw_null(json_writer *w) {
  if (value_start(w)) buf_adds(w->b, "null");
}

void jw_raw(json_writer *w, const char *json, size_t n) {
  if (value_start(w)) buf_add(w->b, json, n);
}

void jw_kstring(json_writer *w, const char *key, const char *s) {
  jw_key(w, key);
  jw_string(w, s);
}

void jw_kint(json_writer *w, const char *key, long long v) {
  jw_key(w, key);
  jw_int(w, v);
}

void jw_kfixed(json_writer *w, const char *key, double v, int decimals) {
  jw_key(w, key);
  jw_fixed(w, v, decimals);
}

void jw_kuint(json_writer *w, const char *key, unsigned long long v) {
  jw_key(w, key);
  jw_uint(w, v);
}

void jw_kbool(json_writer *w, const char *key, int v) {
  jw_key(w, key);
  jw_bool(w, v);
}

void jw_knull(json_writer *w, const char *key) {
  jw_key(w, key);
  jw_null(w);
}

int jw_ok(const json_writer *w) { return !w->bad && !w->depth && !w->after_key && w->values == 1; }
