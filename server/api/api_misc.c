/*
 * api_misc.c: GET /health, GET /metrics, GET /v1/models[/{id}] (with the model's context facts:
 * mem_len, tgt_len, clamp_len, vocabulary, tokenizer kind). Thread: loop thread.
 */
#include <stdio.h>
#include <string.h>

#include "app.h"
#include "json_writer.h"
#include "util.h"
#include "web_ui.h"

void api_health(req *r) {
  app *a = r->a;
  /* degraded: serving, but the session store is unreachable (requests that need it get 503
   * store_unavailable; stateless ones are served): 200, so a balancer keeps the replica */
  int store_down = atomic_load_explicit(&g_metrics.store_down, memory_order_relaxed);
  const char *st = a->phase == APP_READY ? (store_down ? "degraded" : "ok")
                   : a->phase == APP_LOADING ? "loading" : "draining";
  char body[64];
  int n = snprintf(body, sizeof body, "{\"status\":\"%s\"}", st);
  req_reply(r, a->phase == APP_READY ? 200 : 503, "application/json", body, (size_t)n);
}

void api_metrics(req *r) {
  app *a = r->a;
  metrics_gauges g;
  memset(&g, 0, sizeof g);
  if (a->sched) {
    sched_counts(a->sched, &g.queue_depth, &g.running);
    g.streams_paused = sched_paused(a->sched);
  }
  g.streams_open = a->http.n_reqs;
  g.connections = a->http.n_conns;
  g.workers = a->opt.workers;
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

static void model_obj(json_writer *w, app *a) {
  const xl_config *c = xl_model_config(a->model);
  char fp[17];
  snprintf(fp, sizeof fp, "%016llx", (unsigned long long)xl_model_fingerprint(a->model));
  jw_object(w);
  jw_kstring(w, "id", a->model_name);
  jw_kstring(w, "object", "model");
  jw_kint(w, "created", 0);
  jw_kstring(w, "owned_by", "xlserve");
  jw_key(w, "xlserve");
  jw_object(w);
  jw_kint(w, "vocab_size", c->vocab_size);
  jw_kint(w, "n_layer", c->n_layer);
  jw_kint(w, "d_model", c->d_model);
  jw_kint(w, "n_head", c->n_head);
  jw_kint(w, "mem_len", c->mem_len);
  jw_kbool(w, "same_length", c->same_length);
  jw_kstring(w, "tokenizer", xl_tokenizer_kind_name(c->tokenizer));
  jw_kuint(w, "parameters", xl_model_param_count(a->model));
  jw_kuint(w, "state_bytes", xl_model_state_bytes(a->model));
  jw_kstring(w, "kv_dtype", xl_kv_dtype_name(xl_model_kv_dtype(a->model)));
  jw_kuint(w, "state_bytes_per_token", xl_model_state_bytes_per_token(a->model));
  jw_kstring(w, "fingerprint", fp);
  jw_kint(w, "tgt_len", c->tgt_len);
  jw_kint(w, "clamp_len", c->clamp_len);
  jw_kint(w, "prefill_chunk", a->prefill_chunk);
  jw_kint(w, "max_prompt_tokens", a->opt.max_prompt_tokens);
  jw_end(w);
  jw_kint(w, "max_model_len", a->opt.max_prompt_tokens);
  jw_end(w);
}

/* GET /v1/models and /v1/models/{id} (id NULL: the list) */
static void models(req *r, const char *id) {
  app *a = r->a;
  if (!a->model) {
    req_error(r, API_ERR_LOADING, NULL, "the model is still loading");
    return;
  }
  if (id && strcmp(id, a->model_name)) {
    req_error(r, API_ERR_MODEL_NOT_FOUND, "model",
              "model '%s' does not exist (this server serves '%s')", id, a->model_name);
    return;
  }
  buf b;
  buf_init(&b);
  json_writer w;
  jw_init(&w, &b);
  if (id) {
    model_obj(&w, a);
  } else {
    jw_object(&w);
    jw_kstring(&w, "object", "list");
    jw_key(&w, "data");
    jw_array(&w);
    model_obj(&w, a);
    jw_end(&w);
    jw_end(&w);
  }
  req_reply_json(r, 200, &b);
}

void api_models_list(req *r) { models(r, NULL); }

void api_model_get(req *r) { models(r, r->param); }

void api_ui(req *r) { req_queue_response(r, 200, web_ui_response()); }
