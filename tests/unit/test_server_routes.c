/*
 * test_server_routes.c: the routes table against the API as documented (docs/api.md): every
 * path the daemon answers, with each method it allows (its handler, metrics label, key, model
 * and drain rules, body limit), every other method answered 405 with the exact Allow list, and
 * the paths it does not answer (404). The expectations are written out here, not read from the
 * table. Single-threaded.
 */
#include <stdio.h>
#include <string.h>

#include "metrics.h"
#include "routes.h"
#include "testlib.h"

typedef struct want_row {
  const char *methods; /* each answered alike by this row (space-separated) */
  const char *path;
  void (*handler)(req *r);
  route_id id;
  int needs_key, needs_model, while_draining;
  route_body body;
  const char *allow; /* the path's Allow list */
  const char *param; /* the path parameter (NULL: none) */
} want_row;

#define K 1 /* needs the API key */
#define M 1 /* needs the model loaded */
#define D 1 /* answered while draining */

static const want_row WANT[] = {
    {"GET HEAD", "/", api_ui, ROUTE_UI, 0, 0, 0, BODY_DEFAULT, "GET, HEAD", NULL},
    {"GET HEAD", "/health", api_health, ROUTE_HEALTH, 0, 0, D, BODY_DEFAULT, "GET, HEAD", NULL},
    {"GET HEAD", "/metrics", api_metrics, ROUTE_METRICS, 0, 0, D, BODY_DEFAULT, "GET, HEAD", NULL},
    {"GET HEAD", "/v1/models", api_models_list, ROUTE_MODELS, K, 0, 0, BODY_DEFAULT, "GET, HEAD",
     NULL},
    {"GET", "/v1/models/tiny", api_model_get, ROUTE_MODELS, K, 0, 0, BODY_DEFAULT, "GET, HEAD",
     "tiny"},
    {"GET", "/v1/models/org/a.b", api_model_get, ROUTE_MODELS, K, 0, 0, BODY_DEFAULT, "GET, HEAD",
     "org/a.b"},
    {"POST", "/tokenize", api_tokenize, ROUTE_TOKENIZER, K, M, 0, BODY_DEFAULT, "POST", NULL},
    {"POST", "/v1/tokenize", api_tokenize, ROUTE_TOKENIZER, K, M, 0, BODY_DEFAULT, "POST", NULL},
    {"POST", "/detokenize", api_detokenize, ROUTE_TOKENIZER, K, M, 0, BODY_DEFAULT, "POST", NULL},
    {"POST", "/v1/detokenize", api_detokenize, ROUTE_TOKENIZER, K, M, 0, BODY_DEFAULT, "POST",
     NULL},
    {"GET", "/tokenizer_info", api_tokenizer_info, ROUTE_TOKENIZER, K, M, 0, BODY_DEFAULT,
     "GET, HEAD", NULL},
    {"HEAD", "/v1/tokenizer_info", api_tokenizer_info, ROUTE_TOKENIZER, K, M, 0, BODY_DEFAULT,
     "GET, HEAD", NULL},
    {"GET", "/version", api_version, ROUTE_VERSION, 0, 0, 0, BODY_DEFAULT, "GET, HEAD", NULL},
    {"GET", "/v1/version", api_version, ROUTE_VERSION, 0, 0, 0, BODY_DEFAULT, "GET, HEAD", NULL},
    {"POST", "/v1/completions", api_completions, ROUTE_COMPLETIONS, K, M, 0, BODY_DEFAULT, "POST",
     NULL},
    {"POST", "/v1/chat/completions", api_chat_completions, ROUTE_CHAT, K, M, 0, BODY_DEFAULT,
     "POST", NULL},
    {"GET HEAD", "/v1/sessions", api_sessions_list, ROUTE_SESSIONS, K, M, 0, BODY_DEFAULT,
     "GET, HEAD, POST", NULL},
    {"POST", "/v1/sessions", api_sessions_create, ROUTE_SESSIONS, K, M, 0, BODY_DEFAULT,
     "GET, HEAD, POST", NULL},
    {"GET HEAD", "/v1/sessions/s-1", api_session_get, ROUTE_SESSIONS, K, M, 0, BODY_DEFAULT,
     "GET, HEAD, DELETE", "s-1"},
    {"DELETE", "/v1/sessions/s-1", api_session_delete, ROUTE_SESSIONS, K, M, 0, BODY_DEFAULT,
     "GET, HEAD, DELETE", "s-1"},
    {"POST", "/v1/sessions/s.2/fork", api_session_fork, ROUTE_SESSIONS, K, M, 0, BODY_DEFAULT,
     "POST", "s.2"},
    {"GET", "/v1/sessions/s_3/state", api_session_export, ROUTE_SESSIONS, K, M, 0, BODY_DEFAULT,
     "GET, PUT", "s_3"},
    {"PUT", "/v1/sessions/s_3/state", api_session_import, ROUTE_SESSIONS, K, M, 0,
     BODY_SESSION_STATE, "GET, PUT", "s_3"},
    {"POST", "/v1/responses", api_responses_create, ROUTE_RESPONSES, K, M, 0, BODY_DEFAULT, "POST",
     NULL},
    {"GET HEAD", "/v1/responses/resp_1", api_response_get, ROUTE_RESPONSES, K, M, 0, BODY_DEFAULT,
     "GET, HEAD, DELETE", "resp_1"},
    {"DELETE", "/v1/responses/resp_1", api_response_delete, ROUTE_RESPONSES, K, M, 0, BODY_DEFAULT,
     "GET, HEAD, DELETE", "resp_1"},
    {"GET", "/v1/responses/resp_1/input_items", api_response_input_items, ROUTE_RESPONSES, K, M, 0,
     BODY_DEFAULT, "GET, HEAD", "resp_1"},
    {"POST", "/v1/responses/resp_1/cancel", api_response_cancel, ROUTE_RESPONSES, K, M, 0,
     BODY_DEFAULT, "POST", "resp_1"},
    /* a parameter is what the path holds there, whatever it is: the handler judges it */
    {"GET", "/v1/sessions/%20x", api_session_get, ROUTE_SESSIONS, K, M, 0, BODY_DEFAULT,
     "GET, HEAD, DELETE", "%20x"},
    /* an empty {id} before more text is a match (the handler refuses the empty id) */
    {"POST", "/v1/sessions//fork", api_session_fork, ROUTE_SESSIONS, K, M, 0, BODY_DEFAULT, "POST",
     ""},
};

static const char *const METHODS[] = {"GET",   "HEAD",    "POST",  "PUT",  "DELETE",
                                      "PATCH", "OPTIONS", "TRACE", "post", "GETS"};

/* Is m one of the words of the Allow list? */
static int allowed(const char *allow, const char *m) {
  char copy[64];
  snprintf(copy, sizeof copy, "%s", allow);
  for (char *save = NULL, *w = strtok_r(copy, ", ", &save); w; w = strtok_r(NULL, ", ", &save))
    if (!strcmp(w, m)) return 1;
  return 0;
}

/* The row w names answers `method` on its path as w expects. */
static void check_route(const want_row *w, const char *method) {
  route_match m;
  int found = routes_match(w->path, method, &m);
  int ok = found && m.row && m.row->handler == w->handler && m.id == w->id && m.row->id == w->id &&
           m.row->needs_key == w->needs_key && m.row->needs_model == w->needs_model &&
           m.row->while_draining == w->while_draining && m.row->body == w->body &&
           !strcmp(m.allow, w->allow) && allowed(m.row->methods, method);
  if (ok && w->param)
    ok = m.param && m.param_len == strlen(w->param) && !memcmp(m.param, w->param, m.param_len) &&
         m.param >= w->path && m.param < w->path + strlen(w->path) + 1;
  else if (ok) ok = m.param == NULL && m.param_len == 0;
  if (ok) {
    tl_passed++;
  } else {
    tl_failed++;
    fprintf(stderr, "%s %s: found %d, row %p, id %d, allow '%s'\n", method, w->path, found,
            found ? (const void *)m.row : NULL, found ? (int)m.id : -1, found ? m.allow : "");
  }
}

static void test_every_route(void) {
  for (size_t i = 0; i < sizeof WANT / sizeof WANT[0]; i++) {
    char methods[32];
    snprintf(methods, sizeof methods, "%s", WANT[i].methods);
    for (char *save = NULL, *w = strtok_r(methods, " ", &save); w; w = strtok_r(NULL, " ", &save))
      check_route(&WANT[i], w);
  }
}

/* Every other method on each path: the path exists (not 404), no row answers (the head check
 * answers 405 with this Allow list, or 204 to OPTIONS), and the Allow list is the path's. */
static void test_other_methods_405(void) {
  for (size_t i = 0; i < sizeof WANT / sizeof WANT[0]; i++) {
    const want_row *w = &WANT[i];
    for (size_t k = 0; k < sizeof METHODS / sizeof METHODS[0]; k++) {
      if (allowed(w->allow, METHODS[k])) continue;
      route_match m;
      int found = routes_match(w->path, METHODS[k], &m);
      if (found && m.row == NULL && m.id == w->id && !strcmp(m.allow, w->allow)) {
        tl_passed++;
      } else {
        tl_failed++;
        fprintf(stderr, "%s %s: expected 405 with Allow '%s'\n", METHODS[k], w->path, w->allow);
      }
    }
  }
}

/* Paths no row has: 404 whatever the method. */
static void test_unknown_paths_404(void) {
  static const char *const paths[] = {"",
                                      "/v1",
                                      "/v1/",
                                      "/healthz",
                                      "/health/",
                                      "/HEALTH",
                                      "/v1/completions/",
                                      "/v1/completion",
                                      "/v1/chat",
                                      "/v1/chat/completions/x",
                                      "/v1/models/",
                                      "/models",
                                      "/v1/sessions/",
                                      "/v1/sessions/a/b",
                                      "/v1/sessions/a/fork/",
                                      "/v1/sessions/a/forks",
                                      "/v1/sessions/a/state/x",
                                      "/v1/responses/",
                                      "/v1/responses/a/b",
                                      "/v2/completions",
                                      "/tokenize/",
                                      "/v1/v1/tokenize",
                                      "//health"};
  for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
    for (size_t k = 0; k < sizeof METHODS / sizeof METHODS[0]; k++) {
      route_match m;
      if (!routes_match(paths[i], METHODS[k], &m)) {
        tl_passed++;
      } else {
        tl_failed++;
        fprintf(stderr, "%s '%s': expected no route\n", METHODS[k], paths[i]);
      }
    }
}

/* The metrics labels: one name per id, distinct, within what metrics has room for; every id but
 * "other" is some row's. */
static void test_route_ids(void) {
  CHECK(ROUTE_N <= METRICS_ROUTES_MAX);
  CHECK(!strcmp(ROUTE_NAMES[ROUTE_OTHER], "other"));
  for (int i = 0; i < ROUTE_N; i++) {
    CHECK(ROUTE_NAMES[i] && *ROUTE_NAMES[i]);
    for (int k = i + 1; k < ROUTE_N; k++) CHECK(strcmp(ROUTE_NAMES[i], ROUTE_NAMES[k]));
  }
  for (int id = ROUTE_OTHER + 1; id < ROUTE_N; id++) {
    int seen = 0;
    for (size_t i = 0; i < sizeof WANT / sizeof WANT[0]; i++) seen |= WANT[i].id == (route_id)id;
    if (!seen) fprintf(stderr, "route id %s: no expectation covers it\n", ROUTE_NAMES[id]);
    CHECK(seen);
  }
}

int main(void) {
  RUN(test_every_route);
  RUN(test_other_methods_405);
  RUN(test_unknown_paths_404);
  RUN(test_route_ids);
  return tl_summary();
}
