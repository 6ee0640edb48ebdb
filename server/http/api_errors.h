/*
 * api_errors.h: the API's error table: every error the daemon answers with, one row each (its
 * code, HTTP status, OpenAI error type and default message). Handlers and the transport raise an
 * api_err with a detail; api_err_body writes the OpenAI error object from the row, so a code's
 * status and type are spelled once. It lives in http/ because the transport raises errors too
 * (no route, 405, 401, 413, 503) and sits below the handlers. Thread: any (constant data).
 */
#ifndef XLS_API_ERRORS_H
#define XLS_API_ERRORS_H

#include "buf.h"

/* X(NAME, status, type, code, default message) */
#define API_ERRORS(X)                                                                              \
  X(INVALID_JSON, 400, "invalid_request_error", "invalid_json", "the body is not valid JSON")      \
  X(INVALID_VALUE, 400, "invalid_request_error", "invalid_value", "a field has an invalid value")  \
  X(EMPTY_PROMPT, 400, "invalid_request_error", "empty_prompt", "the prompt is empty")             \
  X(TOKENIZER_ERROR, 400, "invalid_request_error", "tokenizer_error", "cannot tokenize the text")  \
  X(UNSUPPORTED_FIELD, 400, "invalid_request_error", "unsupported_field",                          \
    "a field this server does not implement")                                                      \
  X(INVALID_STATE, 400, "invalid_request_error", "invalid_state", "not a session state")           \
  X(MALFORMED_REQUEST, 400, "invalid_request_error", "malformed_request",                          \
    "the request's framing cannot be trusted")                                                     \
  X(INVALID_CONTENT_LENGTH, 400, "invalid_request_error", "invalid_content_length",                \
    "the Content-Length header's value is not a plain decimal number")                             \
  X(INVALID_API_KEY, 401, "authentication_error", "invalid_api_key",                               \
    "missing or invalid API key (send 'Authorization: Bearer KEY')")                               \
  X(NOT_FOUND, 404, "invalid_request_error", "not_found", "no route")                              \
  X(MODEL_NOT_FOUND, 404, "invalid_request_error", "model_not_found", "no such model")             \
  X(SESSION_NOT_FOUND, 404, "invalid_request_error", "session_not_found", "no such session")       \
  X(SESSION_EXPIRED, 404, "invalid_request_error", "session_expired", "the session was lost")      \
  X(RESPONSE_NOT_FOUND, 404, "invalid_request_error", "response_not_found", "no such response")    \
  X(METHOD_NOT_ALLOWED, 405, "invalid_request_error", "method_not_allowed",                        \
    "the method is not allowed here")                                                              \
  X(REQUEST_TIMEOUT, 408, "invalid_request_error", "request_timeout",                              \
    "the request did not arrive in time")                                                          \
  X(SESSION_BUSY, 409, "invalid_request_error", "session_busy",                                    \
    "the session is serving another request")                                                      \
  X(SESSION_INCOMPATIBLE, 409, "invalid_request_error", "session_incompatible",                    \
    "the session was made by another model")                                                       \
  X(SESSION_CONFLICT, 409, "invalid_request_error", "session_conflict",                            \
    "another replica committed a turn of this session first")                                      \
  X(RESPONSE_SUPERSEDED, 409, "invalid_request_error", "response_superseded",                      \
    "the response is no longer the latest turn of its session")                                    \
  X(IDEMPOTENCY_IN_PROGRESS, 409, "invalid_request_error", "idempotency_key_in_progress",          \
    "a request with this Idempotency-Key is still running")                                        \
  X(IDEMPOTENT_TURN_KEPT, 409, "invalid_request_error", "idempotent_turn_kept",                    \
    "the turn of this Idempotency-Key was kept; its answer was not recorded")                      \
  X(BODY_TOO_LARGE, 413, "invalid_request_error", "body_too_large",                                \
    "the request body is too large")                                                               \
  X(PROMPT_TOO_LONG, 422, "invalid_request_error", "prompt_too_long", "the prompt is too long")    \
  X(IDEMPOTENCY_KEY_REUSED, 422, "invalid_request_error", "idempotency_key_reused",                \
    "this Idempotency-Key was used with another request body")                                     \
  X(QUEUE_FULL, 429, "rate_limit_error", "queue_full", "the queue is full")                        \
  X(QUOTA_EXCEEDED, 429, "rate_limit_error", "quota_exceeded",                                     \
    "a per-key or per-client limit is reached")                                                    \
  X(GENERATION_FAILED, 500, "server_error", "generation_failed", "the generation failed")          \
  X(STORE_FAILED, 500, "server_error", "store_failed", "the session store failed")                 \
  X(SESSION_CREATE_FAILED, 500, "server_error", "session_create_failed",                           \
    "cannot create a session")                                                                     \
  X(SESSION_FORK_FAILED, 500, "server_error", "session_fork_failed", "cannot fork the session")    \
  X(LOADING, 503, "server_error", "loading", "the model is still loading")                         \
  X(DRAINING, 503, "server_error", "draining", "the server is shutting down")                      \
  X(SHUTTING_DOWN, 503, "server_error", "shutting_down", "the server is shutting down")            \
  X(STORE_UNAVAILABLE, 503, "server_error", "store_unavailable", "the session store failed")       \
  X(STORE_OUTCOME_UNKNOWN, 503, "server_error", "store_outcome_unknown",                           \
    "the session store did not confirm the commit: the turn may or may not have been kept")

typedef enum {
  API_ERR_NONE = 0, /* no error */
#define API_ERR_ENUM(name, status, type, code, message) API_ERR_##name,
  API_ERRORS(API_ERR_ENUM)
#undef API_ERR_ENUM
      API_ERR_COUNT
} api_err;

typedef struct api_err_info {
  int status;
  const char *type;    /* invalid_request_error, authentication_error, rate_limit_error, ... */
  const char *code;    /* machine-readable, e.g. "invalid_value" */
  const char *message; /* the default message */
} api_err_info;

/* A refused request, as the pure parsers report it: its row, the field it names ("": null) and
 * the detail. */
typedef struct api_error {
  api_err err;
  int status; /* the row's HTTP status */
  char param[256];
  char message[512];
} api_error;

void api_error_set(api_error *e, api_err err, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The row of e (API_ERR_NONE and out-of-range values: NULL). */
const api_err_info *api_err_get(api_err e);
int api_err_status(api_err e);       /* 0 for none */
const char *api_err_code(api_err e); /* NULL for none */

/* The OpenAI error object {"error":{"message","type","param","code"}} as given; NULL or ""
 * param and NULL code: null. The writer under the two below. */
void error_body(buf *b, const char *type, const char *code, const char *param, const char *message);
/* The OpenAI error object of e. param NULL or "":
 * null; message NULL: the row's default message. */
void api_err_body(buf *b, api_err e, const char *param, const char *message);
/* An error inside a stream whose 200 status line already went out: the same object with the
 * type "server_error" whatever the row says (the status cannot tell the client any more). */
void api_err_stream_body(buf *b, api_err e, const char *message);

#endif
