/*
 * api_tokenizer_body.h: validation of the tokenizer endpoints' request bodies (POST /tokenize,
 * POST /detokenize; api_tokenize.c answers them). An error names the field and its row of the
 * error table (api_errors.h). Thread: any (pure).
 */
#ifndef XLS_API_TOKENIZER_BODY_H
#define XLS_API_TOKENIZER_BODY_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "api_errors.h"

/* The body as a JSON object whose `model`, if any, is a string or null: the object (the
 * caller's), or NULL with *e filled. The caller compares a string `model` with its own. */
json_t *parse_tokenizer_body(const char *body, size_t len, api_error *e);

/* POST /tokenize: {"prompt" | "content": text, "with_pieces", "return_token_strs",
 * "add_special_tokens" | "add_special": booleans or null}. */
typedef struct tokenize_body {
  const char *field; /* "prompt", or llama.cpp's "content" */
  json_t *text;      /* the string to tokenize (borrowed from the body) */
  int pieces;        /* with_pieces: {"id", "piece"} objects instead of ids */
  int strs;          /* return_token_strs: the tokens' strings too */
} tokenize_body;
/* 0, or -1 with *e filled. */
int parse_tokenize(json_t *root, tokenize_body *t, api_error *e);

/* POST /detokenize: {"tokens": [id | {"id": id, ...}]} with at most max_ids ids in [0, vocab).
 * 0 with *ids (malloc'd, n of them), or -1 with *e filled and *ids NULL. */
int parse_detokenize(json_t *root, int vocab, long long max_ids, int32_t **ids, size_t *n,
                     api_error *e);

#endif
