/*
 * api_fields.h: the fields of other servers (and OpenAI fields that need another one) that
 * xlserve refuses by name instead of ignoring (the table is in api_fields.c). Thread: any (pure).
 */
#ifndef XLS_API_FIELDS_H
#define XLS_API_FIELDS_H

#include <jansson.h>

#include "api_errors.h"
#include "job.h"

/* 400 for a field whose meaning xlserve does not implement and that would change the output
 * (another server's extension, or an OpenAI field that needs another one); 0 if none. */
int api_refuse_unimplemented(json_t *root, job_kind kind, api_error *e);

#endif
