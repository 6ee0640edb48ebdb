/*
 * api_tools.h: the request side of tool calls: `tools`, `tool_choice` and
 * `parallel_tool_calls` validated into the call grammar (engine's tool_calls.h, compiled by
 * json_constraint), and the conversation's tool messages (assistant messages carrying
 * tool_calls, role tool results) rendered into the chat template's text. Errors name the field
 * (OpenAI's param), a bad parameters schema the failing keyword's path.
 * Thread: any (pure; used on the loop thread).
 */
#ifndef XLS_API_TOOLS_H
#define XLS_API_TOOLS_H

#include <jansson.h>

#include "api_errors.h"
#include "buf.h"
#include "job.h"
#include "json_constraint.h"
#include "json_writer.h"

typedef struct tool_request {
  tool_mode mode;     /* TOOLS_OFF: no tools, or tool_choice none */
  jc_schema *grammar; /* the call grammar (mode != TOOLS_OFF), owned */
  int n_tools;
  int parallel; /* several calls may be made (parallel_tool_calls, default true) */
} tool_request;

/* Reads tools / tool_choice / parallel_tool_calls of a request body (the Chat Completions
 * shape {"type":"function","function":{name, description, parameters, strict}}; the Responses
 * shape {"type":"function", name, description, parameters, strict} too). 0, or -1 with *e. */
int api_parse_tools(json_t *root, int byte_model, tool_request *t, api_error *e);
void tool_request_free(tool_request *t);

/* The content an assistant message with tool_calls (OpenAI's array, at param) renders to:
 * its text, then the calls as they are generated. 0, or -1 with *e. */
int api_render_tool_calls(json_t *tool_calls, const char *text, size_t text_len, const char *param,
                          buf *out, api_error *e);

/* A call's reply (job.tools.is_call) as a JSON array: TOOL_CALLS_CHAT, message.tool_calls
 * [{id, type: "function", function: {name, arguments}}]; TOOL_CALLS_RESPONSES, the Responses
 * API's output items [{type: "function_call", id: "fc_...", call_id, name, arguments, status}]
 * (status "incomplete" for a call cut by max_tokens). arguments: the JSON text as generated, a
 * string. */
typedef enum { TOOL_CALLS_CHAT, TOOL_CALLS_RESPONSES } tool_calls_shape;
void api_tool_calls_json(json_writer *w, const job *c, tool_calls_shape shape);

#endif
