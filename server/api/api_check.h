/*
 * api_check.h: the shorthand of the request-body checkers (api_parse.c, api_tools.c,
 * api_responses.c): BAD for a refused value, api_is_null for a field not given.
 * Thread: any (pure).
 */
#ifndef XLS_API_CHECK_H
#define XLS_API_CHECK_H

#include <jansson.h>

#include "api_errors.h"

/* In a function with an `api_error *e`: sets 400 invalid_value naming the field `param`
 * (message printf-style) and returns -1. */
#define BAD(param, ...)                                                                            \
  do {                                                                                             \
    api_error_set(e, API_ERR_INVALID_VALUE, param, __VA_ARGS__);                                   \
    return -1;                                                                                     \
  } while (0)

/* Absent or JSON null: the field is not given. */
static inline int api_is_null(const json_t *v) { return !v || json_is_null(v); }

#endif
