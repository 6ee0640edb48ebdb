/*
 * api_tokenize.c: the tokenizer endpoints, in the shapes of both vLLM's and llama.cpp's
 * servers (so their clients, e.g. lm-evaluation-harness's remote tokenizer, work unchanged):
 *   POST /tokenize       {"prompt" | "content": text, "with_pieces", "return_token_strs",
 *                         "add_special_tokens" | "add_special" (no effect: no special tokens
 *                         are ever added)} -> {"tokens", "count", "max_model_len"[, "token_strs"]}
 *   POST /detokenize     {"tokens": [ids]} -> {"prompt": text, "content": text}
 *   GET  /tokenizer_info the tokenizer's facts (kind, vocabulary, eos/bos/pad/unk tokens, the
 *                        eos token's id, the kind's options)
 *   GET  /version        {"version"}
 * /v1/-prefixed aliases route here too. Thread: loop thread only.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_tokenizer_body.h"
#include "app.h"
#include "util.h"

void detok_ids(const xl_model *m, const int32_t *ids, size_t n, buf *out) {
  xl_detok d;
  xl_detok_init(&d);
  char tmp[8192];
  for (size_t i = 0; i < n; i++) {
    size_t w = xl_detok_push(m, &d, ids[i], tmp, sizeof tmp);
    if (w <= sizeof tmp) buf_add(out, tmp, w);
  }
  size_t w = xl_detok_flush(m, &d, tmp, sizeof tmp);
  if (w <= sizeof tmp) buf_add(out, tmp, w);
}

/* The body as a JSON object (api_tokenizer_body.h), its `model` naming the served model; NULL
 * after answering an error. */
static json_t *body_object(req *r) {
  api_error e;
  json_t *root = parse_tokenizer_body(r->body.p, r->body.len, &e);
  if (!root) {
    req_error_from(r, &e);
    return NULL;
  }
  json_t *m = json_object_get(root, "model");
  if (json_is_string(m) && strcmp(json_string_value(m), r->a->model_name)) {
    req_error(r, API_ERR_MODEL_NOT_FOUND, "model",
              "model '%s' does not exist (this server serves '%s')", json_string_value(m),
              r->a->model_name);
    json_decref(root);
    return NULL;
  }
  return root;
}

static void tokenize(req *r) {
  app *a = r->a;
  json_t *root = body_object(r);
  if (!root) return;
  tokenize_body tb;
  api_error e;
  if (parse_tokenize(root, &tb, &e)) {
    req_error_from(r, &e);
  } else {
    const char *field = tb.field;
    json_t *text = tb.text;
    int32_t *ids = NULL;
    size_t n = 0;
    xl_error xe;
    memset(&xe, 0, sizeof xe);
    if (json_string_length(text) &&
        xl_tokenize(a->model, json_string_value(text), json_string_length(text), &ids, &n, &xe) != XL_OK) {
      req_error(r, API_ERR_TOKENIZER_ERROR, field, "cannot tokenize: %s",
                xe.message);
    } else if (n > (size_t)a->opt.max_prompt_tokens) { /* bounds the answer's size */
      req_error(r, API_ERR_PROMPT_TOO_LONG, field,
                "the text has %zu tokens; the limit is %lld (max_prompt_tokens)", n,
                a->opt.max_prompt_tokens);
    } else {
      buf b;
      buf_init(&b);
      buf_adds(&b, "{\"tokens\":[");
      for (size_t i = 0; i < n; i++) {
        if (i) buf_addc(&b, ',');
        if (tb.pieces) {
          buf_printf(&b, "{\"id\":%d,\"piece\":", (int)ids[i]);
          job_fmt_token(&b, a->model, ids[i]);
          buf_addc(&b, '}');
        } else {
          buf_printf(&b, "%d", (int)ids[i]);
        }
      }
      buf_printf(&b, "],\"count\":%zu,\"max_model_len\":%lld", n, a->opt.max_prompt_tokens);
      if (tb.strs) {
        buf_adds(&b, ",\"token_strs\":[");
        for (size_t i = 0; i < n; i++) {
          if (i) buf_addc(&b, ',');
          job_fmt_token(&b, a->model, ids[i]);
        }
        buf_addc(&b, ']');
      }
      buf_addc(&b, '}');
      req_reply_json(r, 200, &b);
      buf_free(&b);
    }
    free(ids);
  }
  json_decref(root);
}

static void detokenize(req *r) {
  app *a = r->a;
  json_t *root = body_object(r);
  if (!root) return;
  int32_t *ids;
  size_t n;
  api_error e;
  if (parse_detokenize(root, xl_model_config(a->model)->vocab_size, a->opt.max_prompt_tokens,
                       &ids, &n, &e)) {
    req_error_from(r, &e);
  } else {
    buf text, b;
    buf_init(&text);
    buf_init(&b);
    detok_ids(a->model, ids, n, &text);
    buf_adds(&b, "{\"prompt\":");
    json_escape(&b, text.p ? text.p : "", text.len);
    buf_adds(&b, ",\"content\":");
    json_escape(&b, text.p ? text.p : "", text.len);
    buf_addc(&b, '}');
    req_reply_json(r, 200, &b);
    buf_free(&b);
    buf_free(&text);
  }
  free(ids);
  json_decref(root);
}

static void opt_string(buf *b, const char *key, const char *v) {
  buf_printf(b, ",\"%s\":", key);
  if (v) json_escape(b, v, strlen(v));
  else buf_adds(b, "null");
}

/* The end/start token scorers put before a text (lm-evaluation-harness conditions a text's
 * first token on it in loglikelihood_rolling): the vocabulary's own end token where it has
 * one; otherwise the document separator of the kind's training text: a newline (byte 10) for
 * byte models (enwik8-style text is lines, and the word models' <eos> stands for the newline
 * too), a space for char_table models (text8 is one line of words). *id: its id when the
 * tokenizer spells it as one token, else -1. */
static const char *start_token(const xl_model *m, const xl_tokenizer_info *t, int *id) {
  const char *text = t->eos_token;
  if (!text) text = t->kind == XL_TOKENIZER_CHAR_TABLE ? " " : "\n";
  *id = -1;
  int32_t *ids = NULL;
  size_t n = 0;
  xl_error xe;
  memset(&xe, 0, sizeof xe);
  if (xl_tokenize(m, text, strlen(text), &ids, &n, &xe) == XL_OK && n == 1) *id = ids[0];
  free(ids);
  if (!t->eos_token && *id < 0) return NULL; /* a table that cannot spell it: none */
  return text;
}

static void tokenizer_info(req *r) {
  app *a = r->a;
  const xl_config *c = xl_model_config(a->model);
  const xl_tokenizer_info *t = xl_model_tokenizer(a->model);
  static const char *const CLASS[XL_TOKENIZER_KIND_COUNT] = {
      "XLByteTokenizer", "XLWordTokenizer", "TransfoXLTokenizer", "XLByteTableTokenizer",
      "XLCharTableTokenizer"};
  buf b;
  buf_init(&b);
  /* eos_token: the vocabulary's end token, else the start token scorers use (start_token);
   * no kind has a bos or pad token; "options" are the model's xlserve_tokenizer_options as in
   * effect */
  buf_printf(&b, "{\"tokenizer_class\":\"%s\",\"tokenizer\":\"%s\",\"vocab_size\":%d",
             CLASS[t->kind], t->name, c->vocab_size);
  int eos_id;
  opt_string(&b, "eos_token", start_token(a->model, t, &eos_id));
  if (eos_id >= 0) buf_printf(&b, ",\"eos_token_id\":%d", eos_id);
  else buf_adds(&b, ",\"eos_token_id\":null");
  buf_adds(&b, ",\"bos_token\":null,\"pad_token\":null");
  opt_string(&b, "unk_token", t->unk_token);
  buf_printf(&b, ",\"add_bos_token\":false,\"add_eos_token\":false,\"model_max_length\":%lld,"
                 "\"max_model_len\":%lld,\"spells_any_text\":%s,\"options\":{",
             a->opt.max_prompt_tokens, a->opt.max_prompt_tokens,
             t->spells_any_text ? "true" : "false");
  switch (t->kind) {
    case XL_TOKENIZER_TRANSFO_XL:
      buf_printf(&b, "\"lower_case\":%s", t->lower_case ? "true" : "false");
      opt_string(&b, "delimiter", t->delimiter);
      buf_adds(&b, ",\"never_split\":[");
      for (int i = 0; i < t->n_never_split; i++) {
        if (i) buf_addc(&b, ',');
        json_escape(&b, t->never_split[i], strlen(t->never_split[i]));
      }
      buf_adds(&b, "],\"newline\":\"eos_token\"");
      break;
    case XL_TOKENIZER_BYTE_TABLE:
      buf_printf(&b, "\"unknown\":\"%s\"", t->unknown_drop ? "drop" : "refuse");
      break;
    case XL_TOKENIZER_CHAR_TABLE:
      buf_printf(&b, "\"unknown\":\"%s\",\"lower_case\":%s,\"spell_digits\":%s",
                 t->unknown_drop ? "drop" : "refuse", t->lower_case ? "true" : "false",
                 t->spell_digits ? "true" : "false");
      opt_string(&b, "space_symbol", t->space_symbol);
      break;
    case XL_TOKENIZER_WORDS: buf_adds(&b, "\"newline\":\"eos_token\""); break;
    default: break;
  }
  buf_adds(&b, "}}");
  req_reply_json(r, 200, &b);
  buf_free(&b);
}

void api_version(req *r) {
  buf b;
  buf_init(&b);
  buf_adds(&b, "{\"version\":\"" XL_VERSION "\",\"name\":\"xlserve\"}");
  req_reply_json(r, 200, &b);
  buf_free(&b);
}

/* The model is loaded (needs_model) once the request runs, but a request that arrived just
 * before the load failed still finds none. */
static int have_model(req *r) {
  if (r->a->model) return 1;
  req_error(r, API_ERR_LOADING, NULL, "the model is still loading");
  return 0;
}

void api_tokenize(req *r) {
  if (have_model(r)) tokenize(r);
}

void api_detokenize(req *r) {
  if (have_model(r)) detokenize(r);
}

void api_tokenizer_info(req *r) {
  if (have_model(r)) tokenizer_info(r);
}
