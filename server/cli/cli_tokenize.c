/*
 * cli_tokenize.c: `xlserve tokenize --model DIR [--decode] [--bench FILE]`: the model's
 * tokenizer on stdin, one text per line, for scripts and for comparing with a reference.
 *   encode: each line (without its '\n') -> {"ids":[...],"pieces":[...]} or {"error":"..."}
 *   --decode: each line a JSON array of ids -> {"text":"...","stream":"..."}, where stream is
 *             what the streaming detokeniser emitted token by token, then flushed
 *   --bench FILE: encode and decode speed on FILE (MB/s), next to the model's forward pass.
 * Main thread.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "cli.h"
#include "cli_common.h"
#include "util.h"

static void piece(buf *b, const xl_model *m, int32_t id) {
  const char *s = xl_token_symbol(m, id);
  char raw[8];
  size_t n = 0;
  if (!s) { /* bytes: the byte itself */
    n = xl_token_bytes(m, id, 1, raw, sizeof raw);
    s = raw;
  } else {
    n = strlen(s);
  }
  json_escape(b, s, n);
}

static void decode_ids(const xl_model *m, const int32_t *ids, size_t n, buf *whole, buf *stream) {
  xl_detok d;
  char tmp[8192];
  xl_detok_init(&d);
  for (size_t i = 0; i < n; i++)
    buf_add(stream, tmp, xl_detok_push(m, &d, ids[i], tmp, sizeof tmp));
  buf_add(stream, tmp, xl_detok_flush(m, &d, tmp, sizeof tmp));
  /* the whole decode: every token pushed before anything is read out */
  xl_detok_init(&d);
  for (size_t i = 0; i < n; i++) {
    size_t w = xl_detok_push(m, &d, ids[i], tmp, sizeof tmp);
    buf_add(whole, tmp, w);
  }
  buf_add(whole, tmp, xl_detok_flush(m, &d, tmp, sizeof tmp));
}

static int encode_line(const xl_model *m, const char *line, size_t len, buf *o) {
  int32_t *ids = NULL;
  size_t n = 0;
  xl_error e;
  memset(&e, 0, sizeof e);
  if (xl_tokenize(m, line, len, &ids, &n, &e) != XL_OK) {
    buf_adds(o, "{\"error\":");
    json_escape(o, e.message, strlen(e.message));
    buf_adds(o, "}\n");
    return 0;
  }
  buf_adds(o, "{\"ids\":[");
  for (size_t i = 0; i < n; i++) buf_printf(o, "%s%d", i ? "," : "", (int)ids[i]);
  buf_adds(o, "],\"pieces\":[");
  for (size_t i = 0; i < n; i++) {
    if (i) buf_addc(o, ',');
    piece(o, m, ids[i]);
  }
  buf_adds(o, "]}\n");
  free(ids);
  return 0;
}

static int decode_line(const xl_model *m, const char *line, size_t len, buf *o, int lineno) {
  json_error_t je;
  json_t *a = json_loadb(line, len, 0, &je);
  int vocab = xl_model_config(m)->vocab_size;
  size_t n = json_is_array(a) ? json_array_size(a) : 0;
  int32_t *ids = xmalloc(sizeof *ids * (n + 1));
  int ok = json_is_array(a);
  for (size_t i = 0; ok && i < n; i++) {
    json_t *v = json_array_get(a, i);
    ok = json_is_integer(v) && json_integer_value(v) >= 0 && json_integer_value(v) < vocab;
    if (ok) ids[i] = (int32_t)json_integer_value(v);
  }
  json_decref(a);
  if (!ok) {
    buf_printf(o, "{\"error\":\"line %d: expected a JSON array of token ids in [0, %d)\"}\n",
               lineno, vocab);
    free(ids);
    return 0;
  }
  buf whole, stream;
  buf_init(&whole);
  buf_init(&stream);
  decode_ids(m, ids, n, &whole, &stream);
  buf_adds(o, "{\"text\":");
  json_escape(o, whole.p ? whole.p : "", whole.len);
  buf_adds(o, ",\"stream\":");
  json_escape(o, stream.p ? stream.p : "", stream.len);
  buf_adds(o, "}\n");
  buf_free(&whole);
  buf_free(&stream);
  free(ids);
  return 0;
}

/* Encode then decode FILE several times; the best round of each, and one forward step. */
static int bench(const char *cmd, xl_model *m, const char *path) {
  size_t len = 0;
  char *text = cli_read_file(cmd, path, &len);
  if (!text) return 1;
  int32_t *ids = NULL;
  size_t n = 0;
  double best_enc = 1e30, best_dec = 1e30;
  size_t out_bytes = 0;
  for (int r = 0; r < 3; r++) {
    free(ids);
    xl_error e;
    memset(&e, 0, sizeof e);
    double t0 = now_mono();
    if (xl_tokenize(m, text, len, &ids, &n, &e) != XL_OK) {
      fprintf(stderr, "xlserve %s: %s: %s\n", cmd, path, e.message);
      free(text);
      return 1;
    }
    double t1 = now_mono();
    xl_detok d;
    xl_detok_init(&d);
    char tmp[8192];
    out_bytes = 0;
    for (size_t i = 0; i < n; i++) out_bytes += xl_detok_push(m, &d, ids[i], tmp, sizeof tmp);
    out_bytes += xl_detok_flush(m, &d, tmp, sizeof tmp);
    double t2 = now_mono();
    if (t1 - t0 < best_enc) best_enc = t1 - t0;
    if (t2 - t1 < best_dec) best_dec = t2 - t1;
  }
  /* one decode step (batch 1) of this model, for scale */
  xl_state *st = NULL;
  xl_workspace *ws = NULL;
  xl_error e;
  memset(&e, 0, sizeof e);
  double step = 0;
  int vocab = xl_model_config(m)->vocab_size;
  float *lp = malloc(sizeof *lp * (size_t)vocab);
  if (lp && xl_state_new(m, &st, &e) == XL_OK && xl_workspace_new(m, &ws, &e) == XL_OK) {
    int steps = 0;
    double t0 = now_mono();
    while (steps < 64 && (steps < 8 || now_mono() - t0 < 2.0)) {
      int32_t tok = n ? ids[(size_t)steps % n] : 0;
      xl_feed f = {st, &tok, 1, NULL, NULL, lp, NULL};
      if (xl_forward(m, ws, &f, 1, &e) != XL_OK) break;
      steps++;
    }
    if (steps) step = (now_mono() - t0) / steps;
  }
  xl_state_free(st);
  xl_workspace_free(ws);
  free(lp);
  double tok_s = (best_enc + best_dec) / (n ? (double)n : 1.0);
  printf("file            %s (%zu bytes, %zu tokens, %s tokenizer)\n", path, len, n,
         xl_model_tokenizer(m)->name);
  printf("encode          %.2f MB/s  (%.3f s, %.2f us/token)\n", len / best_enc / 1e6, best_enc,
         best_enc / (n ? (double)n : 1.0) * 1e6);
  printf("decode          %.2f MB/s of text  (%.3f s, %.2f us/token)\n",
         out_bytes / best_dec / 1e6, best_dec, best_dec / (n ? (double)n : 1.0) * 1e6);
  if (step > 0)
    printf("forward step    %.1f us/token (this model, batch 1); tokenizer/forward = %.4f\n",
           step * 1e6, tok_s / step);
  free(ids);
  free(text);
  return 0;
}

int cli_tokenize_main(int argc, char **argv) {
  const char *cmd = "tokenize";
  cli_engine_flags ef = {NULL, NULL, NULL, NULL};
  xl_load_options opts = XL_LOAD_OPTIONS_DEFAULT;
  int decode = 0;
  const char *bench_file = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int ok = 1;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      printf("usage: xlserve tokenize [--model DIR] [--decode] [--bench FILE]\n"
             "  reads stdin, one text per line (without its newline); prints one JSON object\n"
             "  per line: {\"ids\":[...],\"pieces\":[...]} or {\"error\":\"...\"}\n"
             "  --decode      each line is a JSON array of ids; prints\n"
             "                {\"text\":...,\"stream\":...}\n"
             "                (stream: the streaming detokeniser's output, token by token)\n"
             "  --bench FILE  encode/decode speed on FILE in MB/s, next to one forward step\n");
      return 0;
    } else if (cli_engine_arg(cmd, argc, argv, &i, &ef, &ok)) {
    } else if (!strcmp(a, "--decode")) {
      decode = 1;
    } else if (!strcmp(a, "--bench")) {
      ok = cli_str_arg(cmd, argc, argv, &i, &bench_file);
    } else {
      fprintf(stderr, "xlserve tokenize: unknown option '%s'\n", a);
      return 2;
    }
    if (!ok) return 2;
  }
  if (!cli_engine_select(cmd, &ef, &opts)) return 2;
  xl_model *m = cli_load_model(cmd, ef.model_dir, &opts);
  if (!m) return 1;
  int rc = 0;
  if (bench_file) {
    rc = bench(cmd, m, bench_file);
  } else {
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    int lineno = 0;
    buf o;
    buf_init(&o);
    while ((got = getline(&line, &cap, stdin)) >= 0) {
      size_t len = (size_t)got;
      if (len && line[len - 1] == '\n') len--;
      lineno++;
      buf_clear(&o);
      if (decode) decode_line(m, line, len, &o, lineno);
      else encode_line(m, line, len, &o);
      fwrite(o.p, 1, o.len, stdout);
    }
    fflush(stdout);
    buf_free(&o);
    free(line);
  }
  xl_model_free(m);
  return rc;
}
