/*
 * test_server_api.c: the API layer without a socket: the error table (every row well formed, the
 * bodies it writes), the routes table's matcher (paths, parameters, methods, Allow), and the
 * validation of /v1/completions and /v1/chat/completions bodies (valid bodies to their parsed
 * fields, invalid ones to the exact error code, status and field). Single-threaded.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "api_errors.h"
#include "api_fields.h"
#include "api_parse.h"
#include "buf.h"
#include "routes.h"
#include "testlib.h"

static int buf_is(const buf *b, const char *want) {
  return b->len == strlen(want) && !memcmp(b->p, want, b->len);
}

/* ---- the error table ---- */

static void test_error_table_rows(void) {
  CHECK(api_err_get(API_ERR_NONE) == NULL);
  CHECK(api_err_get(API_ERR_COUNT) == NULL);
  CHECK(api_err_get((api_err)-1) == NULL);
  CHECK(api_err_status(API_ERR_NONE) == 0 && api_err_code(API_ERR_NONE) == NULL);
  static const char *const types[] = {"invalid_request_error", "authentication_error",
                                      "rate_limit_error", "server_error"};
  for (int e = API_ERR_NONE + 1; e < API_ERR_COUNT; e++) {
    const api_err_info *i = api_err_get((api_err)e);
    CHECK(i != NULL);
    if (!i) continue;
    CHECK(i->status >= 400 && i->status <= 599);
    int known = 0;
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) known |= !strcmp(i->type, types[t]);
    CHECK(known);
    /* 5xx are the server's errors, 4xx the client's (429: the rate limit's own type) */
    CHECK((i->status >= 500) == !strcmp(i->type, "server_error"));
    CHECK(i->code && *i->code && strspn(i->code, "abcdefghijklmnopqrstuvwxyz_") == strlen(i->code));
    CHECK(i->message && *i->message);
    for (int f = e + 1; f < API_ERR_COUNT; f++) CHECK(strcmp(i->code, api_err_code((api_err)f)));
  }
  CHECK(api_err_status(API_ERR_QUEUE_FULL) == 429);
  CHECK(!strcmp(api_err_get(API_ERR_QUEUE_FULL)->type, "rate_limit_error"));
  CHECK(api_err_status(API_ERR_INVALID_API_KEY) == 401);
  CHECK(!strcmp(api_err_get(API_ERR_INVALID_API_KEY)->type, "authentication_error"));
  CHECK(api_err_status(API_ERR_SESSION_BUSY) == 409 &&
        api_err_status(API_ERR_BODY_TOO_LARGE) == 413);
  CHECK(api_err_status(API_ERR_PROMPT_TOO_LONG) == 422 && api_err_status(API_ERR_LOADING) == 503);
  CHECK(!strcmp(api_err_code(API_ERR_INVALID_VALUE), "invalid_value"));
}

static void test_error_table_bodies(void) {
  buf b;
  buf_init(&b);
  api_err_body(&b, API_ERR_INVALID_VALUE, "max_tokens", "'max_tokens' must be \"small\"");
  CHECK(buf_is(&b,
               "{\"error\":{\"message\":\"'max_tokens' must be \\\"small\\\"\",\"type\":"
               "\"invalid_request_error\",\"param\":\"max_tokens\",\"code\":\"invalid_value\"}}"));
  b.len = 0; /* no detail: the row's default message; "" param: null */
  api_err_body(&b, API_ERR_LOADING, "", NULL);
  CHECK(buf_is(&b,
               "{\"error\":{\"message\":\"the model is still loading\",\"type\":"
               "\"server_error\",\"param\":null,\"code\":\"loading\"}}"));
  b.len = 0; /* inside a stream: type server_error whatever the row's, no param */
  api_err_stream_body(&b, API_ERR_SESSION_CONFLICT, "lost");
  CHECK(buf_is(&b,
               "{\"error\":{\"message\":\"lost\",\"type\":\"server_error\",\"param\":null,"
               "\"code\":\"session_conflict\"}}"));
  b.len = 0; /* a value outside the table still writes a whole body */
  api_err_body(&b, API_ERR_COUNT, NULL, "x");
  json_t *j = json_loadb(b.p, b.len, 0, NULL);
  CHECK(j && json_is_object(json_object_get(j, "error")));
  json_decref(j);
  buf_free(&b);
}

/* ---- routes ---- */

static void test_routes_paths_and_params(void) {
  route_match m;
  CHECK(routes_match("/v1/completions", "POST", &m) && m.row && m.id == ROUTE_COMPLETIONS);
  CHECK(m.row->handler == api_completions && m.row->needs_key && m.row->needs_model);
  CHECK(!strcmp(m.allow, "POST") && m.param == NULL);
  CHECK(routes_match("/v1/chat/completions", "POST", &m) && m.row->handler == api_chat_completions);
  CHECK(routes_match("/health", "HEAD", &m) && m.row->handler == api_health);
  CHECK(!m.row->needs_key && m.row->while_draining);
  CHECK(routes_match("/", "GET", &m) && m.id == ROUTE_UI);
  const char *path = "/v1/sessions/abc-1/fork";
  CHECK(routes_match(path, "POST", &m) && m.row->handler == api_session_fork);
  CHECK(m.param == path + 13 && m.param_len == 5);
  path = "/v1/sessions/abc";
  CHECK(routes_match(path, "DELETE", &m) && m.row->handler == api_session_delete);
  CHECK(m.param_len == 3 && !strncmp(m.param, "abc", 3));
  CHECK(!strcmp(m.allow, "GET, HEAD, DELETE"));
  CHECK(routes_match("/v1/sessions/abc/state", "PUT", &m) && m.row->handler == api_session_import);
  CHECK(m.row->body == BODY_SESSION_STATE && !strcmp(m.allow, "GET, PUT"));
  /* {id*}: the rest of the path, slashes included */
  path = "/v1/models/org/tiny";
  CHECK(routes_match(path, "GET", &m) && m.row->handler == api_model_get);
  CHECK(m.param_len == 8 && !strncmp(m.param, "org/tiny", 8));
  CHECK(routes_match("/v1/tokenize", "POST", &m) && m.id == ROUTE_TOKENIZER);
  CHECK(routes_match("/tokenizer_info", "GET", &m) && m.row->handler == api_tokenizer_info);
}

static void test_routes_misses(void) {
  route_match m;
  CHECK(!routes_match("/nope", "GET", &m));
  CHECK(!routes_match("/v1/completions/", "POST", &m));
  CHECK(!routes_match("/v1/sessions/", "GET", &m));    /* a trailing segment is never empty */
  CHECK(!routes_match("/v1/models/", "GET", &m));      /* {id*} is never empty */
  CHECK(!routes_match("/v1/sessions/a/b", "GET", &m)); /* {id} is one segment */
  CHECK(!routes_match("/v1/sessions/a/forks", "POST", &m));
  /* the path exists, the method does not: 405 with Allow */
  CHECK(routes_match("/v1/completions", "GET", &m) && m.row == NULL);
  CHECK(m.id == ROUTE_COMPLETIONS && !strcmp(m.allow, "POST"));
  CHECK(routes_match("/v1/sessions/x", "PUT", &m) && m.row == NULL);
  CHECK(routes_match("/health", "POS", &m) && m.row == NULL); /* whole words only */
  CHECK(routes_match("/health", "HEADX", &m) && m.row == NULL);
  CHECK(routes_match("/v1/sessions", "POST", &m) && m.row->handler == api_sessions_create);
  CHECK(!strcmp(m.allow, "GET, HEAD, POST"));
}

/* ---- request bodies ---- */

static const parse_limits LIM = {16, 1000, 256, 0};

/* Parses body for kind; returns the error (API_ERR_NONE: valid) and its field in param. */
static api_err parse(job_kind kind, const char *body, gen_request *g, char *param, size_t cap) {
  api_error e;
  memset(&e, 0, sizeof e);
  int rc = parse_gen_request(body, strlen(body), kind, &LIM, g, &e);
  if (rc == 0) return API_ERR_NONE;
  CHECK(e.err != API_ERR_NONE && e.status == api_err_status(e.err) && e.message[0]);
  snprintf(param, cap, "%s", e.param);
  return e.err;
}

static void test_parse_valid_completions(void) {
  gen_request g;
  char param[256];
  CHECK(parse(JOB_COMPLETION, "{\"prompt\": \"hi\"}", &g, param, sizeof param) == API_ERR_NONE);
  CHECK(g.prompt_len == 2 && !memcmp(g.prompt, "hi", 2) && g.max_tokens == 16);
  CHECK(g.n == 1 && g.best_of == 1 && g.n_top == -1 && !g.stream && !g.seeded);
  CHECK(g.n_prompts == 1 && g.session_choice == -1 && g.prompt_logprobs == -1);
  gen_request_free(&g);
  CHECK(parse(JOB_COMPLETION,
              "{\"prompt\": [[1, 2], \"ab\"], \"max_tokens\": 7, \"temperature\": 0.5,"
              " \"top_p\": 0.9, \"top_k\": 5, \"seed\": 42, \"stop\": [\"x\", \"yz\"],"
              " \"logprobs\": 3, \"n\": 2, \"best_of\": 3, \"echo\": true,"
              " \"logit_bias\": {\"65\": -100, \"66\": 2.5}, \"session_id\": \"s.1\"}",
              &g, param, sizeof param) == API_ERR_NONE);
  CHECK(g.n_prompts == 2 && g.prompts[0].n_ids == 2 && g.prompts[0].ids[1] == 2);
  CHECK(g.prompts[1].len == 2 && g.n_prompt_ids == 2 && g.prompt_ids[0] == 1);
  CHECK(g.max_tokens == 7 && g.sampling.temperature == 0.5f && g.sampling.top_k == 5);
  CHECK(g.seeded && g.seed == 42 && g.n_stops == 2 && g.stop_lens[1] == 2);
  CHECK(g.n_top == 3 && g.n == 2 && g.best_of == 3 && g.echo);
  CHECK(g.n_bias == 2 && g.bias_ids[0] == 65 && g.bias_vals[0] == -100.0f);
  CHECK(g.session_id && !strcmp(g.session_id, "s.1"));
  gen_request_free(&g);
  CHECK(parse(JOB_COMPLETION,
              "{\"prompt\": \"a\", \"stream\": true,"
              " \"stream_options\": {\"include_usage\": true}}",
              &g, param, sizeof param) == API_ERR_NONE);
  CHECK(g.stream && g.include_usage);
  gen_request_free(&g);
  CHECK(parse(JOB_COMPLETION,
              "{\"prompt\": \"a\", \"response_format\": {\"type\":"
              " \"json_object\"}}",
              &g, param, sizeof param) == API_ERR_NONE);
  CHECK(g.constraint != NULL);
  gen_request_free(&g);
}

static void test_parse_valid_chat(void) {
  gen_request g;
  char param[256];
  CHECK(parse(JOB_CHAT,
              "{\"messages\": [{\"role\": \"system\", \"content\": \"be brief\"},"
              " {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"hi\"}]}],"
              " \"max_completion_tokens\": 9, \"logprobs\": true, \"top_logprobs\": 2,"
              " \"history\": \"append\"}",
              &g, param, sizeof param) == API_ERR_NONE);
  CHECK(g.n_msgs == 2 && g.msgs[0].role == ROLE_SYSTEM && g.msgs[1].role == ROLE_USER);
  CHECK(g.max_tokens == 9 && g.n_top == 2 && g.history == HISTORY_APPEND);
  gen_request_free(&g);
}

typedef struct bad_case {
  job_kind kind;
  const char *body;
  api_err err;
  const char *param; /* "" = null */
} bad_case;

static const bad_case BAD_CASES[] = {
    {JOB_COMPLETION, "", API_ERR_INVALID_JSON, ""},
    {JOB_COMPLETION, "{not json", API_ERR_INVALID_JSON, ""},
    {JOB_COMPLETION, "[1]", API_ERR_INVALID_JSON, ""},
    {JOB_COMPLETION, "{\"prompt\": \"a\", \"prompt\": \"b\"}", API_ERR_INVALID_JSON, ""},
    {JOB_COMPLETION, "{\"prompt\": 5}", API_ERR_INVALID_VALUE, "prompt"},
    {JOB_COMPLETION, "{\"prompt\": [1, 256]}", API_ERR_INVALID_VALUE, "prompt"},
    {JOB_COMPLETION, "{\"prompt\": [\"a\", 5]}", API_ERR_INVALID_VALUE, "prompt[1]"},
    {JOB_COMPLETION, "{\"prompt\": \"a\", \"model\": 1}", API_ERR_INVALID_VALUE, "model"},
    {JOB_COMPLETION, "{\"prompt\": \"a\", \"max_tokens\": 1001}", API_ERR_INVALID_VALUE,
     "max_tokens"},
    {JOB_COMPLETION, "{\"prompt\": \"a\", \"max_tokens\": 1.5}", API_ERR_INVALID_VALUE,
     "max_tokens"},
    {JOB_COMPLETION, "{\"prompt\": \"a\", \"temperature\": 2.5}", API_ERR_INVALID_VALUE,
     "temperature"},
    {JOB_COMPLETION, "{\"prompt\": \"a\", \"top_p\": 0}", API_ERR_INVALID_VALUE, "top_p"},
    {JOB_COMPLETION, "{\"prompt\": \"a\", \"top_k\": 257}", API_ERR_INVALID_VALUE, "top_k"},
    {JOB_COMPLETION, "{\"prompt\": \"a\", \"min_p\": 2}", API_ERR_INVALID_VALUE, "min_p"},
    {JOB_COMPLETION, "{\"prompt\": \"a\", \"seed\": \"x\"}", API_ERR_INVALID_VALUE, "seed"},
    {JOB_COMPLETION, "{\"prompt\": \"a\", \"stop\": [\"\"]}", API_ERR_INVALID_VALUE, "stop"},
    {JOB_COMPLETION, "{\"prompt\": \"a\", \"stream\": 1}", API_ERR_INVALID_VALUE, "stream"},
    {JOB_COMPLETION, "{\"prompt\": \"a\", \"stream_options\": {}}", API_ERR_INVALID_VALUE,
     "stream_options"},
    {JOB_COMPLETION, "{\"prompt\": \"a\", \"logprobs\": 21}", API_ERR_INVALID_VALUE, "logprobs"},
    {JOB_COMPLETION, "{\"prompt\": \"a\", \"n\": 17}", API_ERR_INVALID_VALUE, "n"},
    {JOB_COMPLETION, "{\"prompt\": \"a\", \"n\": 3, \"best_of\": 2}", API_ERR_INVALID_VALUE,
     "best_of"},
    {JOB_COMPLETION, "{\"prompt\": \"a\", \"n\": 2, \"session_choice\": 2}", API_ERR_INVALID_VALUE,
     "session_choice"},
    {JOB_COMPLETION, "{\"prompt\": \"a\", \"echo\": true, \"stream\": true}", API_ERR_INVALID_VALUE,
     "echo"},
    {JOB_COMPLETION, "{\"prompt\": \"a\", \"suffix\": \"z\"}", API_ERR_INVALID_VALUE, "suffix"},
    {JOB_COMPLETION, "{\"prompt\": \"a\", \"logit_bias\": {\"5\": 101}}", API_ERR_INVALID_VALUE,
     "logit_bias"},
    {JOB_COMPLETION, "{\"prompt\": \"a\", \"logit_bias\": {\"300\": 1}}", API_ERR_INVALID_VALUE,
     "logit_bias"},
    {JOB_COMPLETION, "{\"prompt\": \"a\", \"session_id\": \"a b\"}", API_ERR_INVALID_VALUE,
     "session_id"},
    {JOB_COMPLETION, "{\"messages\": []}", API_ERR_INVALID_VALUE, "messages"},
    {JOB_COMPLETION, "{\"prompt\": \"a\", \"history\": \"full\"}", API_ERR_INVALID_VALUE,
     "history"},
    {JOB_COMPLETION, "{\"prompt\": \"a\", \"functions\": []}", API_ERR_INVALID_VALUE, "functions"},
    {JOB_COMPLETION, "{\"prompt\": \"a\", \"prompt_logprobs\": 1, \"stream\": true}",
     API_ERR_INVALID_VALUE, "prompt_logprobs"},
    {JOB_COMPLETION, "{\"prompt\": \"a\", \"frequency_penalty\": 3}", API_ERR_INVALID_VALUE,
     "frequency_penalty"},
    {JOB_COMPLETION, "{\"prompt\": \"a\", \"presence_penalty\": -2.5}", API_ERR_INVALID_VALUE,
     "presence_penalty"},
    {JOB_COMPLETION, "{\"prompt\": \"a\", \"repetition_penalty\": 0}", API_ERR_INVALID_VALUE,
     "repetition_penalty"},
    {JOB_COMPLETION,
     "{\"prompt\": \"a\", \"stop\": [\"1\", \"2\", \"3\", \"4\", \"5\", \"6\", \"7\", \"8\", \"9\","
     " \"10\", \"11\", \"12\", \"13\", \"14\", \"15\", \"16\", \"17\"]}",
     API_ERR_INVALID_VALUE, "stop"},
    {JOB_COMPLETION, "{\"prompt\": \"a\", \"stop\": 5}", API_ERR_INVALID_VALUE, "stop"},
    {JOB_COMPLETION,
     "{\"prompt\": \"a\", \"stream\": true, \"stream_options\": {\"include_usage\": 1}}",
     API_ERR_INVALID_VALUE, "include_usage"},
    {JOB_COMPLETION, "{\"prompt\": \"a\", \"n\": 0}", API_ERR_INVALID_VALUE, "n"},
    {JOB_COMPLETION, "{\"prompt\": \"a\", \"best_of\": 17}", API_ERR_INVALID_VALUE, "best_of"},
    {JOB_COMPLETION, "{\"prompt\": \"a\", \"prompt_logprobs\": 21}", API_ERR_INVALID_VALUE,
     "prompt_logprobs"},
    {JOB_COMPLETION, "{\"prompt\": \"a\", \"guided_json\": 5}", API_ERR_INVALID_VALUE,
     "guided_json"},
    {JOB_COMPLETION, "{\"prompt\": \"a\", \"response_format\": {\"type\": \"json_schema\"}}",
     API_ERR_INVALID_VALUE, "response_format.json_schema"},
    {JOB_COMPLETION, "{\"prompt\": \"a\", \"logit_bias\": [1]}", API_ERR_INVALID_VALUE,
     "logit_bias"},
    {JOB_COMPLETION, "{\"prompt\": \"a\", \"echo\": 1}", API_ERR_INVALID_VALUE, "echo"},
    {JOB_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]}",
     API_ERR_INVALID_VALUE, "messages[0].content"},
    {JOB_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"echo\": true}",
     API_ERR_UNSUPPORTED_FIELD, "echo"},
    {JOB_CHAT,
     "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"logprobs\": true,"
     " \"top_logprobs\": 21}",
     API_ERR_INVALID_VALUE, "top_logprobs"},
    {JOB_CHAT, "{}", API_ERR_INVALID_VALUE, "messages"},
    {JOB_CHAT, "{\"messages\": [5]}", API_ERR_INVALID_VALUE, "messages[0]"},
    {JOB_CHAT, "{\"messages\": [{\"role\": \"tool\", \"content\": \"x\"}]}", API_ERR_INVALID_VALUE,
     "messages[0].tool_call_id"},
    {JOB_CHAT, "{\"messages\": [{\"role\": \"function\", \"content\": \"x\"}]}",
     API_ERR_INVALID_VALUE, "messages[0].role"},
    {JOB_CHAT, "{\"messages\": [{\"role\": \"user\"}]}", API_ERR_INVALID_VALUE,
     "messages[0].content"},
    {JOB_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"logprobs\": 1}",
     API_ERR_INVALID_VALUE, "logprobs"},
    {JOB_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"top_logprobs\": 2}",
     API_ERR_INVALID_VALUE, "top_logprobs"},
    {JOB_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"history\": \"x\"}",
     API_ERR_INVALID_VALUE, "history"},
    {JOB_CHAT,
     "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}],"
     " \"tools\": [{\"type\": \"function\"}]}",
     API_ERR_INVALID_VALUE, "tools[0].function"},
    {JOB_CHAT,
     "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}],"
     " \"response_format\": {\"type\": \"xml\"}}",
     API_ERR_INVALID_VALUE, "response_format"},
};

static void test_parse_invalid_bodies(void) {
  for (size_t i = 0; i < sizeof BAD_CASES / sizeof BAD_CASES[0]; i++) {
    const bad_case *c = &BAD_CASES[i];
    gen_request g;
    char param[256] = "?";
    api_err got = parse(c->kind, c->body, &g, param, sizeof param);
    if (got != c->err || strcmp(param, c->param)) {
      tl_failed++;
      fprintf(stderr, "%s: got %s param '%s', expected %s param '%s'\n", c->body,
              got ? api_err_code(got) : "success", param, api_err_code(c->err), c->param);
    } else {
      tl_passed++;
    }
    gen_request_free(&g);
  }
}

/* The session endpoints' inputs: the list's page size and the path's session id. */
static void test_parse_session_inputs(void) {
  api_error e;
  int limit = -1;
  CHECK(parse_list_limit(NULL, &limit, &e) == 0 && limit == 100);
  CHECK(parse_list_limit("1", &limit, &e) == 0 && limit == 1);
  CHECK(parse_list_limit("10000", &limit, &e) == 0 && limit == 10000);
  static const char *const bad_limits[] = {"0", "10001", "", "abc", "5x", "-1", "1.5"};
  for (size_t i = 0; i < sizeof bad_limits / sizeof bad_limits[0]; i++) {
    memset(&e, 0, sizeof e);
    limit = -7;
    CHECK(parse_list_limit(bad_limits[i], &limit, &e) == -1 && limit == -7);
    CHECK(e.err == API_ERR_INVALID_VALUE && e.status == 400 && !strcmp(e.param, "limit"));
    CHECK(!strcmp(e.message, "'limit' must be an integer in [1, 10000]"));
  }
  char sid[129], long_id[130];
  memset(long_id, 'a', 129);
  long_id[129] = 0;
  const char *path = "/v1/sessions/A.b_c-9/fork";
  CHECK(parse_session_id(path + 13, 7, sid, &e) == 0 && !strcmp(sid, "A.b_c-9"));
  CHECK(parse_session_id(long_id, 128, sid, &e) == 0 && strlen(sid) == 128);
  static const char *const bad_ids[] = {"", "a b", "a/b", "a%20", "\xc3\xa9", "a\"b"};
  for (size_t i = 0; i < sizeof bad_ids / sizeof bad_ids[0] + 2; i++) {
    const char *id = i < 6 ? bad_ids[i] : i == 6 ? long_id : NULL;
    memset(&e, 0, sizeof e);
    CHECK(parse_session_id(id, id ? strlen(id) : 0, sid, &e) == -1);
    CHECK(e.err == API_ERR_INVALID_VALUE && e.status == 400 && !strcmp(e.param, "session_id"));
  }
}

/* Fields another server implements and this one does not: refused by name, not ignored. */
static void test_refuse_unimplemented(void) {
  static const char *const fields[] = {"{\"tool_choice\": \"auto\"}",
                                       "{\"modalities\": [\"audio\"]}"};
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
    json_t *root = json_loads(fields[i], 0, NULL);
    api_error e;
    memset(&e, 0, sizeof e);
    CHECK(api_refuse_unimplemented(root, JOB_CHAT, &e) != 0);
    CHECK(e.status == 400 && e.param[0]);
    json_decref(root);
  }
  json_t *root = json_loads("{\"temperature\": 1}", 0, NULL);
  api_error e;
  CHECK(api_refuse_unimplemented(root, JOB_CHAT, &e) == 0);
  json_decref(root);
}

int main(void) {
  RUN(test_error_table_rows);
  RUN(test_error_table_bodies);
  RUN(test_routes_paths_and_params);
  RUN(test_routes_misses);
  RUN(test_parse_valid_completions);
  RUN(test_parse_valid_chat);
  RUN(test_parse_invalid_bodies);
  RUN(test_refuse_unimplemented);
  RUN(test_parse_session_inputs);
  return tl_summary();
}
