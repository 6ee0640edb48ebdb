/*
 * tool_calls.h: tool (function) calls on the engine side, shared by the chat completions and
 * Responses handlers.
 *
 * A call is generated as JSON under a grammar: the reply is an array of call objects
 *   [{"name":"<one of the tools>","arguments":<a value of that tool's parameters schema>},...]
 * with 1..max_calls items (max_calls 1 without parallel calls). tool_call_schema synthesizes
 * that JSON Schema (a oneOf of one object per tool, told apart by the const "name"), which
 * json_constraint compiles into the automaton the sampler masks with, so every call's name is
 * a tool's and its arguments parse and validate.
 *
 * tool_calls_parse reads a reply written under that grammar, complete or still growing (the
 * streamed prefix), into calls: each call's name once its string is complete and the span of
 * its arguments' bytes so far (compact JSON, exactly as generated). tool_calls_render writes
 * calls back in the generated form (the text a conversation's assistant message with
 * tool_calls is rendered to, so it matches what the session's memory holds).
 *
 * Threads: any (pure functions; no I/O).
 */
#ifndef XLS_TOOL_CALLS_H
#define XLS_TOOL_CALLS_H

#include <jansson.h>
#include <stddef.h>

#include "buf.h"

#define TOOL_MAX_CALLS 8   /* calls in one reply with parallel calls */
#define TOOL_MAX_TOOLS 128 /* tools in one request */
#define TOOL_NAME_MAX 64   /* a tool's name: 1-64 characters of [A-Za-z0-9_.-] */

/* Whether s[0..n) is a valid tool name. */
int tool_name_valid(const char *s, size_t n);

/* The call grammar's schema (new reference): names[i] and params[i] (NULL: no parameters, the
 * arguments are {}) for i < n; calls: 1..max_calls. */
json_t *tool_call_schema(const char *const *names, json_t *const *params, int n, int max_calls);

/* The first byte of every reply under the grammar (the auto rule compares against it). */
#define TOOL_CALL_OPEN '['

typedef struct tool_call_span {
  size_t name_off, name_len; /* the name's bytes (inside the quotes); name_len 0: not complete */
  size_t args_off, args_len; /* the arguments' bytes so far */
  int have_args;             /* the arguments' value has started */
  int args_done;             /* the arguments' value is complete */
} tool_call_span;

/* Reads the calls of text[0..n) (a prefix of a reply under the grammar) into calls (at most
 * max); returns the number of calls started. */
int tool_calls_parse(const char *text, size_t n, tool_call_span *calls, int max);

/* Appends [{"name":...,"arguments":...},...] for n calls (names plain; args compact JSON). */
void tool_calls_render(buf *out, const char *const *names, const size_t *name_lens,
                       const char *const *args, const size_t *args_lens, int n);

/* The reply's calls rendered as tool_calls_render does (name first: a model may write
 * "arguments" before "name"); what a session records for an assistant message with calls. */
void tool_calls_canonical(const char *reply, size_t n, buf *out);

/* A call's id: "call_" + the response id's random part (after its last '-' or '_') + "_" + the
 * call's index (stable for a streamed and a full answer of the same response). */
void tool_call_id(char *out, size_t cap, const char *response_id, int choice, int k);

#endif
