/*
 * json_writer.h: a small JSON writer for the responses written once per request (errors,
 * sessions, models): it places the commas and colons, tracks the nesting and escapes strings,
 * so a body cannot come out malformed whatever its field values are. The per-token stream
 * chunks (engine/job.c) stay hand-formatted: they are the hot path.
 *
 *   json_writer w;
 *   jw_init(&w, &b);
 *   jw_object(&w);
 *   jw_kstring(&w, "id", s->id);
 *   jw_kuint(&w, "tokens", n);
 *   jw_end(&w);                 // b: {"id":"...","tokens":12}
 *
 * Misuse (a value without its key inside an object, a key inside an array, jw_end with nothing
 * open, nesting deeper than JW_MAX_DEPTH) writes nothing and marks the writer: jw_ok says
 * whether the document is whole. Thread: any (a writer belongs to its caller).
 */
#ifndef XLS_JSON_WRITER_H
#define XLS_JSON_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"

#define JW_MAX_DEPTH 32

typedef struct json_writer {
  buf *b;
  int depth;         /* containers open */
  uint32_t is_obj;   /* bit d: the container at depth d (1-based) is an object */
  uint32_t has_item; /* bit d: it holds an item already (the next one needs a comma) */
  int after_key;     /* a key was written: its value comes next */
  int values;        /* top-level values written (a document is one) */
  int bad;           /* misuse seen */
} json_writer;

void jw_init(json_writer *w, buf *b);
void jw_object(json_writer *w); /* { */
void jw_array(json_writer *w);  /* [ */
void jw_end(json_writer *w);    /* } or ], whichever is open */
void jw_key(json_writer *w, const char *key);

void jw_string(json_writer *w, const char *s); /* NULL: null */
void jw_string_n(json_writer *w, const char *s, size_t n);
void jw_int(json_writer *w, long long v);
void jw_uint(json_writer *w, unsigned long long v);
void jw_bool(json_writer *w, int v);
void jw_null(json_writer *w);
/* A number with `decimals` digits after the point ("%.*f"); not finite: null. */
void jw_fixed(json_writer *w, double v, int decimals);
/* A value already formatted as JSON (e.g. by the stream's formatters): written as it is. */
void jw_raw(json_writer *w, const char *json, size_t n);

/* key + value */
void jw_kstring(json_writer *w, const char *key, const char *s); /* NULL: null */
void jw_kint(json_writer *w, const char *key, long long v);
void jw_kuint(json_writer *w, const char *key, unsigned long long v);
void jw_kbool(json_writer *w, const char *key, int v);
void jw_knull(json_writer *w, const char *key);
void jw_kfixed(json_writer *w, const char *key, double v, int decimals);

/* 1 when exactly one whole value was written and nothing was misused. */
int jw_ok(const json_writer *w);

#endif
