/*
 * api_tokenizer_body.c: the tokenizer endpoints' request bodies (see api_tokenizer_body.h).
 * Thread: any.
 */
#include "api_tokenizer_body.h"

#include <stdlib.h>

#include "util.h"

json_t *parse_tokenizer_body(const char *body, size_t len, api_error *e) {
  json_error_t je;
  json_t *root = len ? json_loadb(body, len, JSON_REJECT_DUPLICATES, &je) : NULL;
  if (!root || !json_is_object(root)) {
    if (root) json_decref(root);
    api_error_set(e, API_ERR_INVALID_JSON, NULL, "the request body must be a JSON object");
    return NULL;
  }
  json_t *m = json_object_get(root, "model");
  if (m && !json_is_null(m) && !json_is_string(m)) {
    json_decref(root);
    api_error_set(e, API_ERR_INVALID_VALUE, "model", "'model' must be a string");
    return NULL;
  }
  return root;
}

/* A boolean field (absent or null: 0). */
static int flag(json_t *root, const char *name, int *out, api_error *e) {
  json_t *v = json_object_get(root, name);
  *out = 0;
  if (!v || json_is_null(v)) return 0;
  if (!json_is_boolean(v)) {
    api_error_set(e, API_ERR_INVALID_VALUE, name, "'%s' must be a boolean", name);
    return -1;
  }
  *out = json_is_true(v);
  return 0;
}

int parse_tokenize(json_t *root, tokenize_body *t, api_error *e) {
  t->field = json_object_get(root, "prompt") ? "prompt" : "content";
  t->text = json_object_get(root, t->field);
  int ignored; /* add_special_tokens, add_special: no special tokens are ever added */
  if (json_object_get(root, "messages")) {
    api_error_set(e, API_ERR_UNSUPPORTED_FIELD, "messages",
                  "tokenizing chat 'messages' is not supported: send the rendered text as "
                  "'prompt'");
    return -1;
  }
  if (!json_is_string(t->text)) {
    api_error_set(e, API_ERR_INVALID_VALUE, t->field,
                  "'prompt' (or llama.cpp's 'content') must be a string");
    return -1;
  }
  if (flag(root, "with_pieces", &t->pieces, e) || flag(root, "return_token_strs", &t->strs, e) ||
      flag(root, "add_special_tokens", &ignored, e) || flag(root, "add_special", &ignored, e))
    return -1;
  return 0;
}

int parse_detokenize(json_t *root, int vocab, long long max_ids, int32_t **ids, size_t *n,
                     api_error *e) {
  json_t *t = json_object_get(root, "tokens");
  *ids = NULL;
  *n = json_is_array(t) ? json_array_size(t) : 0;
  if (json_is_array(t) && *n > (size_t)max_ids) {
    api_error_set(e, API_ERR_PROMPT_TOO_LONG, "tokens",
                  "'tokens' has %zu ids; the limit is %lld (max_prompt_tokens)", *n, max_ids);
    return -1;
  }
  int32_t *out = xmalloc(sizeof *out * (*n ? *n : 1));
  int ok = json_is_array(t);
  for (size_t i = 0; ok && i < *n; i++) {
    json_t *v = json_array_get(t, i);
    /* llama.cpp's with_pieces shape: [{"id": ..., "piece": ...}] is accepted too */
    if (json_is_object(v)) v = json_object_get(v, "id");
    ok = json_is_integer(v) && json_integer_value(v) >= 0 && json_integer_value(v) < vocab;
    if (ok) out[i] = (int32_t)json_integer_value(v);
  }
  if (!ok) {
    free(out);
    api_error_set(e, API_ERR_INVALID_VALUE, "tokens",
                  "'tokens' must be an array of token ids in [0, %d)", vocab);
    return -1;
  }
  *ids = out;
  return 0;
}
