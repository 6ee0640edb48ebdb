/*
 * api_misc.c: GET /health, GET /metrics, GET /v1/models[/{id}] (with the model's context facts:
 * mem_len, tgt_len, clamp_len, vocabulary, tokenizer kind). Thread: loop thread.
 */
#include <stdio.h>
#include <string.h>

#include "app.h"
#include "util.h"
#include "web_ui.h"

void api_health(req *r) {
  app *a = r->a;
  const char *st = a->phase == APP_READY ? "ok" : a->phase == APP_LOADING ? "loading" : "draining";
  char body[64];
  int n = snprintf(body, sizeof body, "{\"status\":\"%s\"}", st);
  req_reply(r, a->phase == APP_READY ? 200 : 503, "application/json", body, (size_t)n);
}

void api_metrics(req *r) {
  app *a = r->a;
  metrics_gauges g;
  memset(&g, 0, sizeof g);
  if (a->sched) sched_counts(a->sched, &g.queue_depth, &g.running);
  g.streams_open = a->n_reqs;
  g.connections = a->n_conns;
  g.workers = a->cfg->workers;
  if (a->sessions) {
    g.sessions_in_ram = (long)st_count(a->sessions);
    g.session_ram_bytes = (long)st_ram(a->sessions);
    if (st_persistent(a->sessions)) g.sessions_in_store = store_count(a->store);
  }
  g.ready = a->phase == APP_READY;
  g.draining = a->phase >= APP_DRAINING;
  buf b;
  buf_init(&b);
  metrics_render(&b, &g, ROUTE_NAMES, ROUTE_N);
  req_reply(r, 200, "text/plain; version=0.0.4; charset=utf-8", b.p, b.len);
  buf_free(&b);
}

static void model_obj(buf *b, app *a) {
  const xl_config *c = xl_model_config(a->model);
  buf_adds(b, "{\"id\":");
  json_escape(b, a->model_name, strlen(a->model_name));
  buf_printf(b,
             ",\"object\":\"model\",\"created\":0,\"owned_by\":\"xlserve\",\"xlserve\":{"
             "\"vocab_size\":%d,\"n_layer\":%d,\"d_model\":%d,\"n_head\":%d,\"mem_len\":%d,"
             "\"same_length\":%s,\"tokenizer\":\"%s\",\"parameters\":%zu,\"state_bytes\":%zu,"
             "\"fingerprint\":\"%016llx\",\"tgt_len\":%d,\"clamp_len\":%d,\"prefill_chunk\":%d,"
             "\"max_prompt_tokens\":%lld},\"max_model_len\":%lld}",
             c->vocab_size, c->n_layer, c->d_model, c->n_head, c->mem_len,
             c->same_length ? "true" : "false", c->tokenizer == XL_TOKENIZER_WORDS ? "words" : "bytes",
             xl_model_param_count(a->model), xl_model_state_bytes(a->model),
             (unsigned long long)xl_model_fingerprint(a->model), c->tgt_len, c->clamp_len,
             a->prefill_chunk, a->cfg->max_prompt_tokens, a->cfg->max_prompt_tokens);
}

/* GET /v1/models and /v1/models/{id} (id NULL: the list) */
static void models(req *r, const char *id) {
  app *a = r->a;
  if (!a->model) {
    req_error(r, 503, "server_error", "loading", NULL, "the model is still loading");
    return;
  }
  buf b;
  buf_init(&b);
  if (id) {
    if (strcmp(id, a->model_name)) {
      buf_free(&b);
      req_error(r, 404, "invalid_request_error", "model_not_found", "model",
                "model '%s' does not exist (this server serves '%s')", id, a->model_name);
      return;
    }
    model_obj(&b, a);
  } else {
    buf_adds(&b, "{\"object\":\"list\",\"data\":[");
    model_obj(&b, a);
    buf_adds(&b, "]}");
  }
  req_reply_json(r, 200, &b);
}

void api_models_list(req *r) { models(r, NULL); }

void api_model_get(req *r) { models(r, r->param); }

void api_ui(req *r) { req_queue_response(r, 200, web_ui_response()); }
