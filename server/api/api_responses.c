/*
 * api_responses.c: the Responses API: POST /v1/responses (a flavor of api_generate.c: its body
 * becomes a chat-completions body, its answer a response object, its stream the Responses
 * events), GET and DELETE /v1/responses/{id}, GET /v1/responses/{id}/input_items and
 * POST /v1/responses/{id}/cancel. A response continues the session that produced its
 * previous_response_id (only the new input is fed); store: false keeps no session and no
 * object. The objects live in a bounded table (resp_table.h).
 * Thread: loop thread only.
 */
#define _GNU_SOURCE /* memmem */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api_generate.h"
#include "api_tools.h"
#include "app.h"
#include "resp_store.h"
#include "session_store.h"
#include "strmap.h"
#include "util.h"

#define LOGPROBS_INCLUDE "message.output_text.logprobs"

static strmap g_live; /* "owner hex:id" -> the req making that response */
static int g_live_init;

/* The request's context (the flavor's): its body, ids, and the stream's rewriting state. */
typedef struct resp_ctx {
  json_t *req;   /* the request body */
  json_t *input; /* its input as items (the stored input_items) */
  char id[64], msg_id[64];
  char rnd[49]; /* random hex digits of the ids */
  long long created_at;
  int store;
  const char *prev; /* previous_response_id (in req) */
  resp_lookup prev_rec;
  json_t *final; /* the finished response object (kept with the turn) */
  char rec_key[STORE_RKEY_CAP];
  char live_key[160]; /* "": not in g_live */
  /* stream: chat chunks read (in), Responses events to send (pend) */
  buf in, pend;
  long long seq;
  int msg_open; /* the message item's added events went out */
} resp_ctx;

static void *ctx_new(void) {
  resp_ctx *c = xcalloc(1, sizeof *c);
  buf_init(&c->in);
  buf_init(&c->pend);
  uint8_t rnd[24];
  random_bytes(rnd, sizeof rnd);
  hex_encode(rnd, sizeof rnd, c->rnd);
  snprintf(c->msg_id, sizeof c->msg_id, "msg_%.24s", c->rnd + 24);
  c->created_at = (long long)time(NULL);
  c->store = 1;
  return c;
}

static void live_key(char *k, size_t cap, const uint8_t owner[32], const char *id) {
  char hx[65];
  hex_encode(owner, 32, hx);
  snprintf(k, cap, "%s:%s", hx, id);
}

static req *live_get(const uint8_t owner[32], const char *id) {
  if (!g_live_init) return NULL;
  char k[160];
  live_key(k, sizeof k, owner, id);
  return strmap_get(&g_live, k);
}

static void ctx_free(void *p) {
  resp_ctx *c = p;
  if (c->live_key[0]) strmap_del(&g_live, c->live_key);
  if (c->req) json_decref(c->req);
  if (c->input) json_decref(c->input);
  if (c->final) json_decref(c->final);
  resp_lookup_free(&c->prev_rec);
  buf_free(&c->in);
  buf_free(&c->pend);
  free(c);
}

/* A JSON string of any bytes (invalid UTF-8 becomes U+FFFD, as json_escape writes it). */
static json_t *jtext(const char *p, size_t n) {
  json_t *s = json_stringn(p ? p : "", n);
  if (s) return s;
  buf b;
  buf_init(&b);
  json_escape(&b, p, n);
  s = json_loadb(b.p, b.len, JSON_DECODE_ANY, NULL);
  buf_free(&b);
  return s ? s : json_string("");
}

#define BAD(param, ...)                                                                            \
  do {                                                                                             \
    api_error_set(e, API_ERR_INVALID_VALUE, param, __VA_ARGS__);                                   \
    return -1;                                                                                     \
  } while (0)
#define UNSUPPORTED(param, ...)                                                                    \
  do {                                                                                             \
    api_error_set(e, API_ERR_UNSUPPORTED_FIELD, param, __VA_ARGS__);                               \
    return -1;                                                                                     \
  } while (0)

static int is_null(const json_t *v) { return !v || json_is_null(v); }

/* One input message's content (a string or input_text/output_text parts) as one string. */
static int content_text(json_t *c, const char *pname, buf *out, api_error *e) {
  if (json_is_string(c)) {
    buf_add(out, json_string_value(c), json_string_length(c));
    return 0;
  }
  if (!json_is_array(c)) BAD(pname, "'%s' must be a string or an array of input_text parts", pname);
  for (size_t k = 0; k < json_array_size(c); k++) {
    json_t *part = json_array_get(c, k);
    char pp[128];
    snprintf(pp, sizeof pp, "%s[%zu]", pname, k);
    json_t *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
    if (!json_is_object(part) || !json_is_string(type))
      BAD(pp, "'%s' must be an object with a 'type'", pp);
    const char *ty = json_string_value(type);
    if (strcmp(ty, "input_text") && strcmp(ty, "output_text") && strcmp(ty, "text"))
      UNSUPPORTED(pp,
                  "'%s' is a '%s' part: only input_text (and output_text in assistant "
                  "messages) is supported by this text-only model",
                  pp, ty);
    if (!json_is_string(text)) BAD(pp, "'%s.text' must be a string", pp);
    buf_add(out, json_string_value(text), json_string_length(text));
  }
  return 0;
}

/* A function_call item (the model's call, sent back) joins the assistant message before it
 * as one of its tool_calls (a new assistant message when there is none); a
 * function_call_output item is the call's result: a tool message. */
static int tool_item(json_t *it, const char *ty, const char *pname, json_t *msgs, api_error *e) {
  json_t *cid = json_object_get(it, "call_id");
  char fp[96];
  snprintf(fp, sizeof fp, "%s.call_id", pname);
  if (!json_is_string(cid)) BAD(fp, "'%s' must be a string: the call's id", fp);
  if (!strcmp(ty, "function_call_output")) {
    json_t *out = json_object_get(it, "output");
    snprintf(fp, sizeof fp, "%s.output", pname);
    buf text;
    buf_init(&text);
    if (content_text(out, fp, &text, e)) {
      buf_free(&text);
      return -1;
    }
    json_array_append_new(msgs, json_pack("{s:s,s:O,s:o}", "role", "tool", "tool_call_id", cid,
                                          "content", jtext(text.p, text.len)));
    buf_free(&text);
    return 0;
  }
  json_t *name = json_object_get(it, "name"), *args = json_object_get(it, "arguments");
  snprintf(fp, sizeof fp, "%s.name", pname);
  if (!json_is_string(name)) BAD(fp, "'%s' must be a string", fp);
  snprintf(fp, sizeof fp, "%s.arguments", pname);
  if (!json_is_string(args)) BAD(fp, "'%s' must be a string (the arguments' JSON)", fp);
  json_t *call = json_pack("{s:O,s:s,s:{s:O,s:O}}", "id", cid, "type", "function", "function",
                           "name", name, "arguments", args);
  size_t n = json_array_size(msgs);
  json_t *last = n ? json_array_get(msgs, n - 1) : NULL;
  json_t *role = last ? json_object_get(last, "role") : NULL;
  if (!json_is_string(role) || strcmp(json_string_value(role), "assistant")) {
    last = json_pack("{s:s,s:n,s:[]}", "role", "assistant", "content", "tool_calls");
    json_array_append_new(msgs, last);
  }
  json_t *calls = json_object_get(last, "tool_calls");
  if (!json_is_array(calls)) {
    calls = json_array();
    json_object_set_new(last, "tool_calls", calls);
  }
  json_array_append_new(calls, call);
  return 0;
}

/* input (a string or items) -> chat messages appended to msgs; the stored items into items. */
static int translate_input(json_t *input, json_t *msgs, json_t *items, api_error *e) {
  if (json_is_string(input)) {
    json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", "user", "content", input));
    json_array_append_new(items, json_pack("{s:s,s:s,s:[{s:s,s:O}]}", "type", "message", "role",
                                           "user", "content", "type", "input_text", "text", input));
    return 0;
  }
  if (!json_is_array(input) || json_array_size(input) == 0)
    BAD("input", "'input' must be a string or a non-empty array of input items");
  for (size_t i = 0; i < json_array_size(input); i++) {
    json_t *it = json_array_get(input, i);
    char pname[64];
    snprintf(pname, sizeof pname, "input[%zu]", i);
    if (!json_is_object(it)) BAD(pname, "'%s' must be an object", pname);
    json_t *type = json_object_get(it, "type");
    if (!is_null(type) && !json_is_string(type)) BAD(pname, "'%s.type' must be a string", pname);
    const char *ty = json_is_string(type) ? json_string_value(type) : "message";
    if (!strcmp(ty, "function_call") || !strcmp(ty, "function_call_output")) {
      if (tool_item(it, ty, pname, msgs, e)) return -1;
      json_t *x = json_deep_copy(it);
      json_object_del(x, "id");
      json_array_append_new(items, x);
      continue;
    }
    if (!strcmp(ty, "item_reference"))
      UNSUPPORTED(pname,
                  "'%s' is an item_reference: send the item itself, or continue the "
                  "conversation with previous_response_id",
                  pname);
    if (strcmp(ty, "message"))
      UNSUPPORTED(pname, "'%s' is a '%s' item: only message items are supported", pname, ty);
    json_t *role = json_object_get(it, "role");
    const char *ro = json_is_string(role) ? json_string_value(role) : "";
    if (strcmp(ro, "user") && strcmp(ro, "system") && strcmp(ro, "developer") &&
        strcmp(ro, "assistant")) {
      char rp[80];
      snprintf(rp, sizeof rp, "%s.role", pname);
      BAD(rp, "'%s' must be user, system, developer or assistant", rp);
    }
    char cp[80];
    snprintf(cp, sizeof cp, "%s.content", pname);
    buf text;
    buf_init(&text);
    if (content_text(json_object_get(it, "content"), cp, &text, e)) {
      buf_free(&text);
      return -1;
    }
    if (memchr(text.p ? text.p : "", 0, text.len)) {
      buf_free(&text);
      BAD(cp, "'%s' must not contain NUL", cp);
    }
    json_t *t = jtext(text.p, text.len);
    buf_free(&text);
    json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", ro, "content", t));
    const char *part = !strcmp(ro, "assistant") ? "output_text" : "input_text";
    json_array_append_new(items, json_pack("{s:s,s:s,s:[{s:s,s:o}]}", "type", "message", "role", ro,
                                           "content", "type", part, "text", t));
  }
  return 0;
}

/* fields copied as they are into the chat body (the chat parser checks them) */
static const char *const PASSED[] = {"tools",
                                     "tool_choice",
                                     "parallel_tool_calls",
                                     "model",
                                     "temperature",
                                     "top_p",
                                     "seed",
                                     "top_k",
                                     "min_p",
                                     "stop",
                                     "presence_penalty",
                                     "frequency_penalty",
                                     "logit_bias",
                                     "repetition_penalty",
                                     "stream"};

static int translate(req *r, void *p, const char *body, size_t len, buf *out, api_error *e) {
  (void)r;
  resp_ctx *c = p;
  json_error_t je;
  if (!len) {
    api_error_set(e, API_ERR_INVALID_JSON, NULL, "the request body must be a JSON object");
    return -1;
  }
  c->req = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
  if (!c->req) {
    api_error_set(e, API_ERR_INVALID_JSON, NULL, "invalid JSON at line %d column %d: %s", je.line,
                  je.column, je.text);
    return -1;
  }
  json_t *q = c->req, *v;
  if (!json_is_object(q)) {
    api_error_set(e, API_ERR_INVALID_JSON, NULL, "the request body must be a JSON object");
    return -1;
  }
  v = json_object_get(q, "background");
  if (!is_null(v) && !json_is_false(v))
    UNSUPPORTED("background",
                "'background' responses are not supported: send the request "
                "without it (or with stream: true to see the text as it is made)");
  static const char *const REFUSED[] = {"conversation", "prompt"};
  for (size_t i = 0; i < sizeof REFUSED / sizeof *REFUSED; i++)
    if (!is_null(json_object_get(q, REFUSED[i])))
      UNSUPPORTED(REFUSED[i], "'%s' is not supported: send the input (and previous_response_id)",
                  REFUSED[i]);
  v = json_object_get(q, "store");
  if (!is_null(v)) {
    if (!json_is_boolean(v)) BAD("store", "'store' must be a boolean");
    c->store = json_is_true(v);
  }
  v = json_object_get(q, "previous_response_id");
  if (!is_null(v)) {
    if (!json_is_string(v) || !json_string_length(v) || json_string_length(v) >= sizeof c->id)
      BAD("previous_response_id", "'previous_response_id' must be a response id (a string)");
    c->prev = json_string_value(v);
  }
  v = json_object_get(q, "metadata");
  if (!is_null(v)) {
    if (!json_is_object(v)) BAD("metadata", "'metadata' must be an object of strings");
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x) if (!json_is_string(x))
        BAD("metadata", "'metadata' values must be strings ('%s' is not)", k);
  }
  json_t *chat = json_object(), *msgs = json_array();
  json_object_set_new(chat, "messages", msgs);
  c->input = json_array();
  int rc = -1;
  v = json_object_get(q, "instructions");
  if (!is_null(v)) {
    if (!json_is_string(v)) {
      api_error_set(e, API_ERR_INVALID_VALUE, "instructions", "'instructions' must be a string");
      goto out;
    }
    json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", "system", "content", v));
  }
  v = json_object_get(q, "input");
  if (is_null(v)) {
    api_error_set(e, API_ERR_INVALID_VALUE, "input", "'input' is required");
    goto out;
  }
  if (translate_input(v, msgs, c->input, e)) goto out;
  for (size_t i = 0; i < sizeof PASSED / sizeof *PASSED; i++)
    if ((v = json_object_get(q, PASSED[i]))) json_object_set(chat, PASSED[i], v);
  if ((v = json_object_get(q, "max_output_tokens")) && !json_is_null(v))
    json_object_set(chat, "max_tokens", v);
  /* logprobs: asked by include (OpenAI's way) or by top_logprobs */
  int lp = 0;
  v = json_object_get(q, "include");
  if (!is_null(v)) {
    if (!json_is_array(v)) {
      api_error_set(e, API_ERR_INVALID_VALUE, "include", "'include' must be an array of strings");
      goto out;
    }
    for (size_t i = 0; i < json_array_size(v); i++) {
      json_t *s = json_array_get(v, i);
      if (!json_is_string(s)) {
        api_error_set(e, API_ERR_INVALID_VALUE, "include", "'include' must be an array of strings");
        goto out;
      }
      if (!strcmp(json_string_value(s), LOGPROBS_INCLUDE)) lp = 1;
    }
  }
  if ((v = json_object_get(q, "top_logprobs")) && !json_is_null(v)) {
    json_object_set(chat, "top_logprobs", v);
    lp = 1;
  }
  if (lp) json_object_set_new(chat, "logprobs", json_true());
  v = json_object_get(q, "text");
  if (!is_null(v)) {
    json_t *f = json_is_object(v) ? json_object_get(v, "format") : NULL;
    if (!json_is_object(v) || (!is_null(f) && !json_is_object(f))) {
      api_error_set(e, API_ERR_INVALID_VALUE, "text.format", "'text.format' must be an object");
      goto out;
    }
    json_t *ty = f ? json_object_get(f, "type") : NULL;
    const char *t = json_is_string(ty) ? json_string_value(ty) : "text";
    if (!strcmp(t, "json_object")) {
      json_object_set_new(chat, "response_format", json_pack("{s:s}", "type", "json_object"));
    } else if (!strcmp(t, "json_schema")) {
      json_t *js = json_object();
      static const char *const KEYS[] = {"name", "schema", "strict", "description"};
      for (size_t i = 0; i < 4; i++)
        if (json_object_get(f, KEYS[i])) json_object_set(js, KEYS[i], json_object_get(f, KEYS[i]));
      json_object_set_new(chat, "response_format",
                          json_pack("{s:s,s:o}", "type", "json_schema", "json_schema", js));
    } else if (strcmp(t, "text")) {
      api_error_set(e, API_ERR_INVALID_VALUE, "text.format.type",
                    "'text.format.type' must be text, json_object or json_schema");
      goto out;
    }
  }
  json_object_set_new(chat, "history", json_string("append")); /* only the new input is fed */
  char *s = json_dumps(chat, JSON_COMPACT);
  buf_adds(out, s);
  free(s);
  rc = 0;
out:
  json_decref(chat);
  return rc;
}

/* In s (cap bytes), every "'" + from becomes "'" + to (the quoted field names of a message). */
static void rename_quoted(char *s, size_t cap, const char *from, const char *to) {
  char out[512], pat[64];
  snprintf(pat, sizeof pat, "'%s", from);
  size_t o = 0, pl = strlen(pat), tl = strlen(to);
  for (const char *p = s; *p && o + 1 < sizeof out;) {
    if (!strncmp(p, pat, pl) && o + tl + 2 < sizeof out) {
      out[o++] = '\'';
      memcpy(out + o, to, tl);
      o += tl;
      p += pl;
    } else {
      out[o++] = *p++;
    }
  }
  out[o] = 0;
  snprintf(s, cap, "%s", out);
}

/* The chat body's field names an error may carry, as this API names them. */
static void fix_error(api_error *e) {
  static const char *const MAP[][2] = {{"response_format.json_schema.", "text.format."},
                                       {"response_format", "text.format"},
                                       {"max_tokens", "max_output_tokens"},
                                       {"logprobs", "include"},
                                       {"messages", "input"}};
  int renamed = 0;
  for (size_t i = 0; i < sizeof MAP / sizeof *MAP; i++) {
    size_t n = strlen(MAP[i][0]);
    if (!renamed && !strncmp(e->param, MAP[i][0], n)) {
      char p[sizeof e->param];
      snprintf(p, sizeof p, "%s%s", MAP[i][1], e->param + n);
      memcpy(e->param, p, sizeof p);
      renamed = 1;
    }
    rename_quoted(e->message, sizeof e->message, MAP[i][0], MAP[i][1]);
  }
}

static int pick_session(req *r, void *p, const char **sid, gen_sess_mode *mode) {
  resp_ctx *c = p;
  if (!c->prev) {
    *mode = c->store ? GEN_SESS_MINT : GEN_SESS_NONE;
    return 0;
  }
  resp_lookup *l = &c->prev_rec;
  if (resp_lookup_run(r, l, c->prev)) return 1; /* the store looks; this runs again */
  if (l->got < 0) {
    r->retry_after = "1";
    req_error(r, API_ERR_STORE_UNAVAILABLE, NULL, "cannot read response '%s': %s", c->prev, l->why);
    return 1;
  }
  if (l->got) {
    req_error(r, API_ERR_RESPONSE_NOT_FOUND, "previous_response_id",
              "response '%s' not found (never stored, deleted, expired, or made with store: "
              "false)",
              c->prev);
    return 1;
  }
  *sid = l->session_id;
  *mode = c->store ? GEN_SESS_NAMED : GEN_SESS_CLONE;
  return 0;
}

static int check_session(req *r, void *p, const session *s) {
  resp_ctx *c = p;
  if (s->turns == c->prev_rec.turns) return 0;
  req_error(r, API_ERR_RESPONSE_SUPERSEDED, "previous_response_id",
            "response '%s' is no longer the latest turn of its session %s: the session has "
            "moved on (turn %llu; the response was turn %llu) and keeps no earlier versions. "
            "Continue from the conversation's latest response, or send the whole conversation "
            "as input without previous_response_id",
            c->prev, c->prev_rec.session_id, (unsigned long long)s->turns,
            (unsigned long long)c->prev_rec.turns);
  return 1;
}

/* The id, as the response starts running: it is live (GET: in progress; cancel) until freed. */
static void make_id(req *r, void *p, char *id, size_t cap) {
  resp_ctx *c = p;
  /* a kept response's id names its session (resp_store.h) */
  const char *sid = ACTX(r)->session_id;
  if (c->store && sid[0] && strlen(sid) <= 40)
    snprintf(c->id, sizeof c->id, "resp_%.40s_%.16s", sid, c->rnd);
  else snprintf(c->id, sizeof c->id, "resp_%.24s", c->rnd);
  snprintf(id, cap, "%s", c->id);
  if (!g_live_init) strmap_init(&g_live), g_live_init = 1;
  live_key(c->live_key, sizeof c->live_key, r->owner, c->id);
  strmap_put(&g_live, c->live_key, r);
}

/* ---- the response object ---- */

static json_t *format_of(const resp_ctx *c) {
  json_t *t = json_object_get(c->req, "text"),
         *f = json_is_object(t) ? json_object_get(t, "format") : NULL;
  if (json_is_object(f)) return json_pack("{s:O}", "format", f);
  return json_pack("{s:{s:s}}", "format", "type", "text");
}

static json_t *or_null(json_t *v) { return v ? json_incref(v) : json_null(); }

static json_t *num_or(json_t *v, double d) {
  return json_is_number(v) ? json_incref(v) : json_real(d);
}

/* The output_text part's logprobs (the chat shape's content array). */
static json_t *logprobs_of(const job *j) {
  if (j->params->n_top < 0) return json_array();
  buf t;
  buf_init(&t);
  job_fmt_logprobs(&t, j, 0, j->text.n_recs, 0);
  json_t *o = json_loadb(t.p, t.len, 0, NULL);
  buf_free(&t);
  json_t *a = o ? json_incref(json_object_get(o, "content")) : NULL;
  if (o) json_decref(o);
  return a ? a : json_array();
}

static json_t *text_part(const job *j) {
  return json_pack("{s:s,s:o,s:[],s:o}", "type", "output_text", "text",
                   j ? jtext(j->text.reply.p, j->text.reply.len) : json_string(""), "annotations",
                   "logprobs", j ? logprobs_of(j) : json_array());
}

static json_t *message_item(const resp_ctx *c, const job *j, const char *status) {
  json_t *content = json_array();
  if (j) json_array_append_new(content, text_part(j));
  if (!strcmp(status, "cancelled")) status = "incomplete"; /* an item has no cancelled status */
  return json_pack("{s:s,s:s,s:s,s:s,s:o}", "id", c->msg_id, "type", "message", "status", status,
                   "role", "assistant", "content", content);
}

/* A call's reply as the Responses API's function_call items (api_tools.h). */
static json_t *calls_of(const resp_ctx *c, const job *j) {
  (void)c;
  buf b;
  buf_init(&b);
  json_writer w;
  jw_init(&w, &b);
  api_tool_calls_json(&w, j, TOOL_CALLS_RESPONSES);
  json_t *a = json_loadb(b.p ? b.p : "[]", b.len ? b.len : 2, 0, NULL);
  buf_free(&b);
  return a ? a : json_array();
}

static const char *status_of(const gen_outcome *o) {
  if (!o) return "in_progress";
  if (o->err) return "failed";
  if (o->main->run.finish == FINISH_CANCELLED) return "cancelled";
  return o->main->run.finish == FINISH_LENGTH ? "incomplete" : "completed";
}

/* The response object: in progress (o NULL) or as the turn ended. */
static json_t *response_object(const resp_ctx *c, const char *model, const gen_outcome *o) {
  json_t *q = c->req;
  const char *st = status_of(o);
  json_t *r = json_object();
  json_object_set_new(r, "id", json_string(c->id));
  json_object_set_new(r, "object", json_string("response"));
  json_object_set_new(r, "created_at", json_integer(c->created_at));
  json_object_set_new(r, "status", json_string(st));
  json_object_set_new(r, "background", json_false());
  if (o && o->err)
    json_object_set_new(r, "error",
                        json_pack("{s:s,s:s}", "code", api_err_code(o->err), "message",
                                  o->err_msg ? o->err_msg : api_err_get(o->err)->message));
  else json_object_set_new(r, "error", json_null());
  if (o && !o->err && o->main->run.finish == FINISH_LENGTH)
    json_object_set_new(r, "incomplete_details", json_pack("{s:s}", "reason", "max_output_tokens"));
  else json_object_set_new(r, "incomplete_details", json_null());
  json_object_set_new(r, "instructions", or_null(json_object_get(q, "instructions")));
  json_object_set_new(r, "max_output_tokens", or_null(json_object_get(q, "max_output_tokens")));
  json_object_set_new(r, "model", json_string(model));
  json_t *out = json_array();
  if (o && !o->err && o->main->tools.is_call) {
    json_t *calls = calls_of(c, o->main);
    json_array_extend(out, calls);
    json_decref(calls);
  } else if (o && !o->err) json_array_append_new(out, message_item(c, o->main, st));
  json_object_set_new(r, "output", out);
  json_t *par = json_object_get(q, "parallel_tool_calls");
  json_object_set_new(r, "parallel_tool_calls", json_boolean(!json_is_false(par)));
  json_object_set_new(r, "previous_response_id", c->prev ? json_string(c->prev) : json_null());
  json_object_set_new(r, "reasoning", json_pack("{s:n,s:n}", "effort", "summary"));
  json_object_set_new(r, "store", json_boolean(c->store));
  json_object_set_new(r, "temperature", num_or(json_object_get(q, "temperature"), 1.0));
  json_object_set_new(r, "text", format_of(c));
  json_t *tc = json_object_get(q, "tool_choice"), *tools = json_object_get(q, "tools");
  json_object_set_new(r, "tool_choice",
                      tc && !json_is_null(tc) ? json_incref(tc) : json_string("auto"));
  json_object_set_new(r, "tools", json_is_array(tools) ? json_incref(tools) : json_array());
  json_object_set_new(r, "top_logprobs", or_null(json_object_get(q, "top_logprobs")));
  json_object_set_new(r, "top_p", num_or(json_object_get(q, "top_p"), 1.0));
  json_object_set_new(r, "truncation", json_string("disabled"));
  if (o) {
    int in = o->main->feed.n_prompt, gen = o->main->run.n_gen;
    json_object_set_new(
        r, "usage",
        json_pack("{s:i,s:{s:i},s:i,s:{s:i},s:i}", "input_tokens", in, "input_tokens_details",
                  "cached_tokens", 0, "output_tokens", gen, "output_tokens_details",
                  "reasoning_tokens", 0, "total_tokens", in + gen));
  } else {
    json_object_set_new(r, "usage", json_null());
  }
  json_object_set_new(r, "user", or_null(json_object_get(q, "user")));
  json_t *md = json_object_get(q, "metadata");
  json_object_set_new(r, "metadata", json_is_object(md) ? json_incref(md) : json_object());
  if (o)
    json_object_set_new(
        r, "xlserve",
        json_pack("{s:o,s:I,s:I}", "session_id",
                  o->session_id ? json_string(o->session_id) : json_null(), "session_tokens",
                  (json_int_t)o->session_tokens, "session_turns", (json_int_t)o->session_turns));
  return r;
}

/* The finished response, kept with the turn's commit (store: true). */
static st_record *turn_record(req *r, void *p, const gen_outcome *o, st_record *out) {
  resp_ctx *c = p;
  c->final = response_object(c, r->a->model_name, o);
  if (!c->store || !o->session_id) return NULL;
  /* cancelled in its prefill: the session holds part of the input, nothing to continue */
  if (o->main->run.finish == FINISH_CANCELLED && !o->main->run.decoding) return NULL;
  json_t *items = json_array();
  size_t i;
  json_t *it;
  json_array_foreach(c->input, i, it) {
    json_t *x = json_deep_copy(it);
    char id[80];
    snprintf(id, sizeof id, "msg_%.24s_%zu", c->rnd, i);
    json_object_set_new(x, "id", json_string(id));
    json_object_set_new(x, "status", json_string("completed"));
    json_array_append_new(items, x);
  }
  char *in = json_dumps(items, JSON_COMPACT), *obj = json_dumps(c->final, JSON_COMPACT);
  json_decref(items);
  st_record *rec =
      resp_record(out, c->rec_key, sizeof c->rec_key, c->id, o->session_turns, obj, in);
  free(in);
  free(obj);
  return rec;
}

/* The object answered: the one kept with the turn, else (an error, no session) made now. */
static json_t *final_object(req *r, resp_ctx *c, const gen_outcome *o) {
  if (c->final && !o->err) return json_incref(c->final);
  return response_object(c, r->a->model_name, o);
}

static void reply(req *r, void *p, const gen_outcome *o) {
  resp_ctx *c = p;
  json_t *obj = final_object(r, c, o);
  char *s = json_dumps(obj, JSON_COMPACT);
  json_decref(obj);
  buf b;
  buf_init(&b);
  buf_adds(&b, s);
  free(s);
  req_reply_json(r, 200, &b);
  buf_free(&b);
}

/* ---- the stream ---- */

/* One event: its type names the SSE event; its sequence_number is the next. */
static void emit(resp_ctx *c, json_t *ev) {
  if (!ev) return; /* not reached: every string packed is valid UTF-8 */
  json_object_set_new(ev, "sequence_number", json_integer(c->seq++));
  char *s = json_dumps(ev, JSON_COMPACT);
  buf_printf(&c->pend, "event: %s\ndata: %s\n\n", json_string_value(json_object_get(ev, "type")),
             s);
  free(s);
  json_decref(ev);
}

static json_t *item_ev(const resp_ctx *c, const char *type) {
  return json_pack("{s:s,s:s,s:i,s:i}", "type", type, "item_id", c->msg_id, "output_index", 0,
                   "content_index", 0);
}

static void stream_head(req *r, void *p) {
  resp_ctx *c = p;
  json_t *obj = response_object(c, r->a->model_name, NULL);
  emit(c, json_pack("{s:s,s:O}", "type", "response.created", "response", obj));
  emit(c, json_pack("{s:s,s:o}", "type", "response.in_progress", "response", obj));
}

/* The message item and its text part are added before its first text. */
static void open_message(resp_ctx *c) {
  if (c->msg_open) return;
  c->msg_open = 1;
  emit(c, json_pack("{s:s,s:i,s:o}", "type", "response.output_item.added", "output_index", 0,
                    "item", message_item(c, NULL, "in_progress")));
  json_t *ev = item_ev(c, "response.content_part.added");
  json_object_set_new(ev, "part", text_part(NULL));
  emit(c, ev);
}

/* The chat chunks read so far become output_text.delta events (pings pass as they are). */
static void rewrite(resp_ctx *c) {
  for (;;) {
    const char *p = c->in.p;
    const char *end = c->in.len ? memmem(p, c->in.len, "\n\n", 2) : NULL;
    if (!end) return;
    size_t n = (size_t)(end - p) + 2;
    if (n > 6 && !memcmp(p, "data: ", 6)) {
      json_t *ch = json_loadb(p + 6, n - 8, 0, NULL);
      json_t *c0 = json_array_get(json_object_get(ch, "choices"), 0);
      json_t *d = json_object_get(json_object_get(c0, "delta"), "content");
      if (json_is_string(d) && json_string_length(d)) {
        open_message(c);
        json_t *ev = item_ev(c, "response.output_text.delta");
        json_object_set(ev, "delta", d);
        json_t *lp = json_object_get(json_object_get(c0, "logprobs"), "content");
        json_object_set_new(ev, "logprobs", json_is_array(lp) ? json_incref(lp) : json_array());
        emit(c, ev);
      }
      if (ch) json_decref(ch);
    } else if (p[0] == ':') {
      buf_add(&c->pend, p, n);
    }
    buf_consume(&c->in, n);
  }
}

static void pull(req *r, resp_ctx *c) {
  char tmp[16384];
  size_t n;
  while ((n = gen_stream_raw(r, tmp, sizeof tmp))) buf_add(&c->in, tmp, n);
  rewrite(c);
}

static size_t stream_take(req *r, void *p, char *out, size_t max) {
  resp_ctx *c = p;
  pull(r, c);
  size_t n = c->pend.len < max ? c->pend.len : max;
  if (n) {
    memcpy(out, c->pend.p, n);
    buf_consume(&c->pend, n);
  }
  return n;
}

static void stream_tail(req *r, void *p, const gen_outcome *o, buf *b) {
  (void)b; /* the events go to pend, after the deltas still in the job's output */
  resp_ctx *c = p;
  pull(r, c);
  json_t *obj = final_object(r, c, o);
  if (o->err) {
    emit(c, json_pack("{s:s,s:s,s:s,s:n}", "type", "error", "code", api_err_code(o->err), "message",
                      o->err_msg ? o->err_msg : api_err_get(o->err)->message, "param"));
    emit(c, json_pack("{s:s,s:o}", "type", "response.failed", "response", obj));
    return;
  }
  const job *j = o->main;
  const char *st = status_of(o);
  if (j->tools.is_call) { /* each function_call item, whole: added, its arguments, done */
    size_t k;
    json_t *item;
    json_array_foreach(json_object_get(obj, "output"), k, item) {
      json_t *added = json_deep_copy(item);
      json_object_set_new(added, "arguments", json_string(""));
      json_object_set_new(added, "status", json_string("in_progress"));
      emit(c, json_pack("{s:s,s:i,s:o}", "type", "response.output_item.added", "output_index",
                        (int)k, "item", added));
      json_t *id = json_object_get(item, "id"), *args = json_object_get(item, "arguments");
      emit(c, json_pack("{s:s,s:O,s:i,s:O}", "type", "response.function_call_arguments.delta",
                        "item_id", id, "output_index", (int)k, "delta", args));
      emit(c, json_pack("{s:s,s:O,s:i,s:O,s:O}", "type", "response.function_call_arguments.done",
                        "item_id", id, "output_index", (int)k, "name",
                        json_object_get(item, "name"), "arguments", args));
      emit(c, json_pack("{s:s,s:i,s:O}", "type", "response.output_item.done", "output_index",
                        (int)k, "item", item));
    }
    emit(c, json_pack("{s:s,s:o}", "type",
                      strcmp(st, "completed") ? "response.incomplete" : "response.completed",
                      "response", obj));
    return;
  }
  open_message(c); /* an empty reply has its item too */
  json_t *ev = item_ev(c, "response.output_text.done");
  json_object_set_new(ev, "text", jtext(j->text.reply.p, j->text.reply.len));
  json_object_set_new(ev, "logprobs", logprobs_of(j));
  emit(c, ev);
  ev = item_ev(c, "response.content_part.done");
  json_object_set_new(ev, "part", text_part(j));
  emit(c, ev);
  emit(c, json_pack("{s:s,s:i,s:o}", "type", "response.output_item.done", "output_index", 0, "item",
                    message_item(c, j, st)));
  emit(c, json_pack("{s:s,s:o}", "type",
                    strcmp(st, "completed") ? "response.incomplete" : "response.completed",
                    "response", obj));
}

static const gen_flavor RESPONSES = {ctx_new,      ctx_free,      translate, fix_error,
                                     pick_session, check_session, make_id,   turn_record,
                                     stream_head,  stream_tail,   reply,     stream_take};

void api_responses_create(req *r) { api_generate_as(r, &RESPONSES); }

/* ---- stored objects ---- */

/* The path's response id into id; 0, or 1 after a 404. */
static int path_id(req *r, char *id, size_t cap) {
  if (!r->param || r->param_len == 0 || r->param_len >= cap) {
    req_error(r, API_ERR_RESPONSE_NOT_FOUND, "response_id", "no such response");
    return 1;
  }
  memcpy(id, r->param, r->param_len);
  id[r->param_len] = 0;
  return 0;
}

static void free_lookup(void *l) {
  resp_lookup_free(l);
  free(l);
}

/* The stored response the path names: 0 with *out, or 1 when r waits for the store (its
 * handler runs again) or was answered (404, 503). */
static int found(req *r, const char *id, resp_lookup **out) {
  api_ctx *ac = ACTX(r);
  if (!ac->resp) {
    ac->resp = xcalloc(1, sizeof(resp_lookup));
    ac->resp_free = free_lookup;
  }
  resp_lookup *l = ac->resp;
  if (resp_lookup_run(r, l, id)) return 1;
  if (l->got < 0) {
    r->retry_after = "1";
    req_error(r, API_ERR_STORE_UNAVAILABLE, NULL, "cannot read response '%s': %s", id, l->why);
    return 1;
  }
  if (l->got) {
    req_error(r, API_ERR_RESPONSE_NOT_FOUND, "response_id",
              "response '%s' not found (never stored, deleted, expired, or made with store: "
              "false)",
              id);
    return 1;
  }
  *out = l;
  return 0;
}

static void reply_text(req *r, const char *s) {
  buf b;
  buf_init(&b);
  buf_adds(&b, s);
  req_reply_json(r, 200, &b);
  buf_free(&b);
}

/* The response being made with this id (on this server), NULL when none. */
static const resp_ctx *live_ctx(req *r, const char *id, req **live) {
  *live = live_get(r->owner, id);
  return *live && gen_main_job(*live) ? gen_flavor_ctx(*live) : NULL; /* not finished yet */
}

static void reply_object(req *r, json_t *o) {
  char *s = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  reply_text(r, s);
  free(s);
}

void api_response_get(req *r) {
  char id[64];
  req *lr;
  resp_lookup *l;
  if (path_id(r, id, sizeof id)) return;
  const resp_ctx *lc = live_ctx(r, id, &lr);
  if (lc) { /* being made: in progress */
    reply_object(r, response_object(lc, r->a->model_name, NULL));
    return;
  }
  if (!found(r, id, &l)) reply_text(r, l->object);
}

static void on_deleted(req *r, int ok, const char *why) {
  if (ok < 0) {
    r->retry_after = "1";
    req_error(r, API_ERR_STORE_UNAVAILABLE, NULL, "cannot delete the response: %s", why);
    return;
  }
  if (!ok) { /* another request deleted it meanwhile */
    req_error(r, API_ERR_RESPONSE_NOT_FOUND, "response_id", "response not found");
    return;
  }
  char id[64];
  memcpy(id, r->param, r->param_len); /* checked by path_id */
  id[r->param_len] = 0;
  reply_object(r, json_pack("{s:s,s:s,s:b}", "id", id, "object", "response", "deleted", 1));
}

void api_response_delete(req *r) {
  char id[64];
  resp_lookup *l;
  if (path_id(r, id, sizeof id) || found(r, id, &l)) return;
  resp_delete(r, id, on_deleted);
}

void api_response_cancel(req *r) {
  char id[64];
  req *lr;
  resp_lookup *l;
  if (path_id(r, id, sizeof id)) return;
  const resp_ctx *lc = live_ctx(r, id, &lr);
  if (lc) { /* being made: stop it; its own request answers it cancelled */
    gen_cancel(lr, 0);
    json_t *o = response_object(lc, r->a->model_name, NULL);
    json_object_set_new(o, "status", json_string("cancelled"));
    reply_object(r, o);
    return;
  }
  if (found(r, id, &l)) return;
  req_error(r, API_ERR_INVALID_VALUE, "response_id",
            "only background responses can be cancelled, and this server runs none in the "
            "background: response '%s' is already finished (to stop a response being made, "
            "close its connection)",
            id);
}

/* ?limit=1..100 (20), ?order=asc|desc (desc), ?after=ITEM_ID */
void api_response_input_items(req *r) {
  char id[64];
  resp_lookup *l;
  if (path_id(r, id, sizeof id) || found(r, id, &l)) return;
  const char *ls = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "limit");
  const char *os = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "order");
  const char *after = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "after");
  long limit = 20;
  if (ls) {
    char *end;
    limit = strtol(ls, &end, 10);
    if (!*ls || *end || limit < 1 || limit > 100) {
      req_error(r, API_ERR_INVALID_VALUE, "limit", "'limit' must be an integer in [1, 100]");
      return;
    }
  }
  if (os && strcmp(os, "asc") && strcmp(os, "desc")) {
    req_error(r, API_ERR_INVALID_VALUE, "order", "'order' must be asc or desc");
    return;
  }
  int desc = !os || !strcmp(os, "desc");
  json_t *all = json_loads(l->items, 0, NULL), *data = json_array();
  size_t n = json_array_size(all), k = 0;
  int started = after == NULL, more = 0;
  for (size_t i = 0; i < n; i++) {
    json_t *it = json_array_get(all, desc ? n - 1 - i : i);
    if (!started) {
      started = !strcmp(json_string_value(json_object_get(it, "id")), after);
      continue;
    }
    if (k == (size_t)limit) {
      more = 1;
      break;
    }
    json_array_append(data, it);
    k++;
  }
  json_t *first = json_object_get(json_array_get(data, 0), "id");
  json_t *last = json_object_get(json_array_get(data, k ? k - 1 : 0), "id");
  json_t *o = json_pack("{s:s,s:o,s:O,s:O,s:b}", "object", "list", "data", data, "first_id",
                        first ? first : json_null(), "last_id", last ? last : json_null(),
                        "has_more", more);
  char *s = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  json_decref(all);
  reply_text(r, s);
  free(s);
}
