/*
 * api_parse.h: validation of /v1/completions and /v1/chat/completions request bodies into a
 * gen_request. Every field is checked for type and range; an error names the field (OpenAI's
 * "param") and its row of the error table (api_errors.h). Unknown fields are ignored; known
 * OpenAI fields this server cannot honour (tools, functions, suffix, echo with stream, and the
 * fields api_fields.c lists) are refused with 400 rather than silently ignored.
 * Thread: any (pure; used on the loop thread). Fuzzable: parse_gen_request has no side effects.
 */
#ifndef XLS_API_PARSE_H
#define XLS_API_PARSE_H

#include <jansson.h>
#include <stdint.h>

#include "api_errors.h"
#include "chat.h"
#include "job.h"
#include "json_constraint.h"
#include "xl.h"

typedef struct parse_limits {
  long long default_max_tokens, max_tokens_limit;
  int vocab_size;
  int words_tokenizer; /* a tokenizer that cannot spell every byte string (words, transfo_xl,
                          byte_table, char_table): structured output is refused */
} parse_limits;

#define MAX_STOPS 16
#define MAX_STOP_BYTES 256

#define MAX_PROMPTS 64   /* prompts in one request */
#define MAX_CHOICES 16   /* n and best_of */
#define MAX_JOBS 128     /* prompts x best_of */

typedef struct gen_prompt {
  const char *text; /* "" for token ids */
  size_t len;
  int32_t *ids; /* malloc'd, else NULL */
  size_t n_ids;
} gen_prompt;

typedef struct gen_request {
  job_kind kind;
  json_t *root; /* owns the strings below */
  const char *model;
  /* completions */
  const char *prompt;
  size_t prompt_len;
  int32_t *prompt_ids; /* token-id prompt (malloc'd), else NULL */
  size_t n_prompt_ids;
  /* a list of prompts: prompts[0] is the one above; each is a string or token ids */
  struct gen_prompt *prompts; /* malloc'd [n_prompts] */
  int n_prompts;
  /* chat */
  chat_message *msgs; /* malloc'd; contents point into root or into parts */
  int n_msgs;
  char **parts; /* joined content-part strings (malloc'd) */
  int n_parts;
  history_mode history;
  /* common */
  int stream, include_usage;
  long long max_tokens;
  xl_sampling sampling;
  int seeded;
  uint64_t seed;
  const char *stops[MAX_STOPS];
  size_t stop_lens[MAX_STOPS];
  int n_stops;
  int n_top; /* -1 = no logprobs */
  /* logit_bias: added to the token's log-probability before sampling (malloc'd) */
  int32_t *bias_ids;
  float *bias_vals;
  int n_bias;
  /* structured output (response_format json_object/json_schema, json_schema, guided_json) */
  jc_schema *constraint;
  const char *constraint_param; /* the field it came from */
  int n, best_of;      /* choices returned per prompt; choices generated per prompt (>= n) */
  int session_choice;  /* -1: none; else the choice whose text the session keeps */
  int echo;  /* completions: the prompt comes back before the completion (scored with logprobs) */
  int prompt_logprobs; /* vLLM's: -1 = none; else alternatives per prompt token (0..20) */
  const char *session_id;
} gen_request;

/* 0 on success; else -1 with *e filled (status 400 mostly). */
int parse_gen_request(const char *body, size_t len, job_kind kind, const parse_limits *lim,
                      gen_request *g, api_error *e);
void gen_request_free(gen_request *g);

/* The session endpoints' inputs. 0 on success; else -1 with *e filled (400 invalid_value). */
/* GET /v1/sessions?limit=N: s NULL (absent) gives 100; else an integer in [1, 10000]. */
int parse_list_limit(const char *s, int *limit, api_error *e);
/* The {id} of a session path (n bytes at id, not terminated): 1-128 characters of
 * [A-Za-z0-9._-], copied into out with a terminating NUL. */
int parse_session_id(const char *id, size_t n, char out[129], api_error *e);

#endif
