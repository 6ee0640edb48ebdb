/*
 * api_generate.c: POST /v1/completions and /v1/chat/completions, the HTTP side of a
 * generation. api_generate runs the request through its stages, each a function that answers
 * and stops the way when the request cannot go on: parse (api_parse.c), the session (409 when
 * busy), the choices, what the turn feeds (chat plan, tokens, pending token first), admission
 * (429 when the queue is full), the session held; then the generation module (engine's
 * generation.c) builds and submits the job group. On completion it updates the session's
 * transcript record and answers: a JSON body, or the SSE tail (usage, [DONE]).
 * Thread: loop thread only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api_generate.h"
#include "api_idem.h"
#include "app.h"
#include "generation.h"
#include "http_guard.h"
#include "json_writer.h"
#include "session_wait.h"
#include "tool_calls.h"
#include "util.h"
#include "xlog.h"

/* The handler's context of a generation request (api_ctx.gen): what the request asked, the chat
 * plan, the session it holds and the job group, until the request record is freed. */
typedef struct gen_req {
  gen_request g;
  int have_g; /* g parsed (the handler runs again after a session restore) */
  chat_plan plan;
  int have_plan;
  session *sess;      /* held (busy) while the jobs run */
  int sess_stateless; /* sess is a temporary, freed at completion */
  gen_group gen;      /* the request's jobs (generation.h) */
  int others_left;    /* several choices: how many of gen.others are not done yet */
  int main_done;      /* gen.main's DONE was handled */
  int cancelled_by_drain;
  int commit_wait;         /* the response waits for the turn's commit (durability turn) */
  uint64_t held_tokens;    /* the session's transcript length after this turn */
  char *store_err;         /* the commit failed: why */
  int store_conflict;      /* ... because another replica committed a turn of the session first */
  int store_unknown;       /* ... with an unknown outcome (the turn may or may not be kept) */
  uint64_t held_turns;     /* the session's turn count after this turn */
  const gen_flavor *fl;    /* NULL: completions / chat completions (api_generate.h) */
  void *fctx;              /* the flavor's context */
  gen_sess_mode sess_mode; /* a flavor's choice of session */
  int quota_held;          /* counted in the app's run_quota until its generation is done */
  idem_req idem;           /* its Idempotency-Key (api_idem.h) */
  double busy_since;       /* the session was busy with a cancelled turn: waiting since (0: no) */
} gen_req;

#define GEN(r) ((gen_req *)ACTX(r)->gen)

static const char *prompt_param(const req *r) {
  return GEN(r)->g.kind == JOB_CHAT ? "messages" : "prompt";
}

/* usage: prompts counted once each (the choices of a prompt share its prefill), every
 * generated token counted (best_of's discarded choices too) */
static void usage_json(json_writer *w, const req *r) {
  int pt = GEN(r)->gen.main->feed.n_prompt, ct = GEN(r)->gen.main->run.n_gen;
  for (int i = 0; i < GEN(r)->gen.n_others; i++)
    pt += GEN(r)->gen.others[i]->feed.n_prompt, ct += GEN(r)->gen.others[i]->run.n_gen;
  jw_object(w);
  jw_kint(w, "prompt_tokens", pt);
  jw_kint(w, "completion_tokens", ct);
  jw_kint(w, "total_tokens", pt + ct);
  jw_end(w);
}

static int by_index(const void *a, const void *b) {
  const job *x = *(job *const *)a, *y = *(job *const *)b;
  return (x->index > y->index) - (x->index < y->index);
}

static int by_score(const void *a, const void *b) { /* best_of: the highest sum first */
  const job *x = *(job *const *)a, *y = *(job *const *)b;
  if (x->run.sum_lp != y->run.sum_lp) return x->run.sum_lp < y->run.sum_lp ? 1 : -1;
  return (x->index > y->index) - (x->index < y->index);
}

/* The choices to answer with, in order; out[k] is answered with index k. best_of > n: per
 * prompt, the n choices whose tokens have the highest summed log-probability. */
static int answer_jobs(const req *r, job **out) {
  int total = 1 + GEN(r)->gen.n_others;
  job **all = xmalloc(sizeof *all * (size_t)total);
  for (int i = 0; i < total; i++) all[i] = gen_group_at(&GEN(r)->gen, i);
  qsort(all, (size_t)total, sizeof *all, by_index);
  int per = GEN(r)->g.best_of > 0 ? GEN(r)->g.best_of : 1, n = GEN(r)->g.n > 0 ? GEN(r)->g.n : 1,
      k = 0;
  if (per == n) {
    memcpy(out, all, sizeof *all * (size_t)total);
    k = total;
  } else {
    for (int p = 0; p * per < total; p++) {
      qsort(all + p * per, (size_t)per, sizeof *all, by_score);
      for (int c = 0; c < n; c++) out[k++] = all[p * per + c];
    }
  }
  free(all);
  return k;
}

/* xlserve's extension block: what the session holds after this turn */
static void xlserve_json(json_writer *w, const req *r, uint64_t session_tokens) {
  jw_object(w);
  jw_kstring(w, "session_id", ACTX(r)->session_id[0] ? ACTX(r)->session_id : NULL);
  jw_kuint(w, "session_tokens", session_tokens);
  jw_kbool(w, "session_reset", ACTX(r)->sess_reset);
  if (GEN(r)->have_plan) jw_kstring(w, "history", plan_name(GEN(r)->plan.kind));
  jw_end(w);
}

/* The job that fed choice c's prompt: its group's first job (group = index / best_of; group 0:
 * GEN(r)->gen.main, which in a session may carry another index). Only that job scored the prompt; the
 * group's other choices fork its state after the prompt. */
static const job *prompt_job(const req *r, const job *c) {
  int per = GEN(r)->g.best_of > 0 ? GEN(r)->g.best_of : 1, group = c->index / per;
  if (group == 0) return GEN(r)->gen.main;
  for (int i = 0; i < GEN(r)->gen.n_others; i++)
    if (GEN(r)->gen.others[i]->index == group * per) return GEN(r)->gen.others[i];
  return c; /* not reached: make_others makes every group's first job */
}

/* echo: the choice's prompt tokens detokenised (pj feeds them), the text the logprobs'
 * text_offset index; except that a string prompt to a bytes or words model echoes as sent (a
 * bytes model gives it back exactly; a words model but for whitespace runs and unknown words) */
static void echo_text(buf *b, const req *r, const job *pj) {
  const gen_request *g = &GEN(r)->g;
  int per = g->best_of > 0 ? g->best_of : 1, group = pj == GEN(r)->gen.main ? 0 : pj->index / per;
  const gen_prompt *gp = &g->prompts[group];
  xl_tokenizer_kind kind = xl_model_config(pj->params->model)->tokenizer;
  if (!gp->ids && (kind == XL_TOKENIZER_BYTES || kind == XL_TOKENIZER_WORDS)) {
    buf_add(b, gp->text, gp->len);
    return;
  }
  job_echo_prompt(b, pj);
}

/* A value formatted by the job's formatters (logprobs), written as it is. */
static void raw_logprobs(json_writer *w, buf *t) {
  if (t->len) jw_raw(w, t->p, t->len);
  else jw_null(w);
  t->len = 0;
}

/* One choice of the full body; pj: the job that fed its prompt (echo and prompt scoring). */
static void choice_json(json_writer *w, const req *r, const job *c, const job *pj, int k) {
  const gen_request *g = &GEN(r)->g;
  buf t;
  buf_init(&t);
  jw_object(w);
  jw_kint(w, "index", k);
  if (c->params->kind == JOB_CHAT && c->tools.is_call) {
    jw_key(w, "message");
    jw_object(w);
    jw_kstring(w, "role", "assistant");
    jw_knull(w, "content");
    jw_knull(w, "refusal");
    jw_key(w, "tool_calls");
    api_tool_calls_json(w, c, TOOL_CALLS_CHAT);
    jw_end(w);
  } else if (c->params->kind == JOB_CHAT) {
    jw_key(w, "message");
    jw_object(w);
    jw_kstring(w, "role", "assistant");
    jw_key(w, "content");
    jw_string_n(w, c->text.reply.p ? c->text.reply.p : "", c->text.reply.len);
    jw_knull(w, "refusal");
    jw_end(w);
  } else {
    if (g->echo) echo_text(&t, r, pj);
    buf_add(&t, c->text.reply.p ? c->text.reply.p : "", c->text.reply.len);
    jw_key(w, "text");
    jw_string_n(w, t.p ? t.p : "", t.len);
    t.len = 0;
  }
  jw_key(w, "logprobs");
  if (g->echo && c->params->n_top >= 0) job_fmt_echo_logprobs(&t, pj, c);
  else job_fmt_logprobs(&t, c, 0, c->text.n_recs, 0);
  raw_logprobs(w, &t);
  if (c->params->kind == JOB_COMPLETION && g->prompt_logprobs >= 0) {
    jw_key(w, "prompt_logprobs");
    job_fmt_prompt_logprobs(&t, pj, g->prompt_logprobs);
    raw_logprobs(w, &t);
  }
  jw_kstring(w, "finish_reason", job_finish_name(c));
  jw_end(w);
  buf_free(&t);
}

static void full_body(buf *b, const req *r, const job *j, uint64_t session_tokens) {
  json_writer w;
  jw_init(&w, b);
  jw_object(&w);
  jw_kstring(&w, "id", j->params->id);
  jw_kstring(&w, "object", j->params->kind == JOB_CHAT ? "chat.completion" : "text_completion");
  jw_kint(&w, "created", j->params->created);
  jw_kstring(&w, "model", j->params->model_name);
  if (j->params->kind == JOB_CHAT) jw_kstring(&w, "system_fingerprint", j->params->fingerprint);
  jw_key(&w, "choices");
  jw_array(&w);
  job **ans = xmalloc(sizeof *ans * (size_t)(1 + GEN(r)->gen.n_others));
  int na = answer_jobs(r, ans);
  for (int k = 0; k < na; k++) choice_json(&w, r, ans[k], prompt_job(r, ans[k]), k);
  free(ans);
  jw_end(&w);
  if (j->params->kind == JOB_CHAT && GEN(r)->g.prompt_logprobs >= 0) {
    buf t;
    buf_init(&t);
    jw_key(&w, "prompt_logprobs");
    job_fmt_prompt_logprobs(&t, GEN(r)->gen.main, GEN(r)->g.prompt_logprobs);
    raw_logprobs(&w, &t);
    buf_free(&t);
  }
  jw_key(&w, "usage");
  usage_json(&w, r);
  jw_key(&w, "xlserve");
  xlserve_json(&w, r, session_tokens);
  jw_end(&w);
}

/* The end of an SSE stream: usage chunk (if asked) and [DONE], or an in-band error. */
static void stream_tail(buf *b, const req *r, job *j, uint64_t session_tokens, api_err err,
                        const char *err_msg) {
  if (err) {
    buf_adds(b, "data: ");
    api_err_stream_body(b, err, err_msg);
    buf_adds(b, "\n\n");
  } else if (j->params->include_usage) {
    job_chunk_prefix(b, j); /* the chunk's head, as every chunk of the stream has it */
    buf_adds(b, ",\"choices\":[],\"usage\":");
    json_writer w;
    jw_init(&w, b);
    usage_json(&w, r);
    buf_adds(b, ",\"xlserve\":");
    jw_init(&w, b);
    xlserve_json(&w, r, session_tokens);
    buf_adds(b, "}\n\n");
  }
  buf_adds(b, "data: [DONE]\n\n");
}

static void make_id(gen_params *p) {
  uint8_t rnd[12];
  char hx[25];
  random_bytes(rnd, sizeof rnd);
  hex_encode(rnd, sizeof rnd, hx);
  snprintf(p->id, sizeof p->id, "%s-%s", p->kind == JOB_CHAT ? "chatcmpl" : "cmpl", hx);
}

/* The generation's parameters: the validated request's, taking its logit_bias and schema. */
static gen_params *params_of(req *r) {
  app *a = r->a;
  gen_request *g = &GEN(r)->g;
  gen_params *p = gen_params_new();
  p->kind = g->kind;
  p->model = a->model;
  p->max_tokens = (int)g->max_tokens;
  p->sampling = g->sampling;
  p->seeded = g->seeded;
  p->seed = g->seed;
  p->stream = g->stream;
  p->include_usage = g->include_usage;
  p->n_top = g->n_top;
  p->score_top = -1; /* echo with logprobs, prompt_logprobs: the job feeding a prompt scores it */
  if ((g->echo && g->n_top >= 0) || g->prompt_logprobs >= 0) {
    p->score_top = g->echo && g->n_top > g->prompt_logprobs ? g->n_top : g->prompt_logprobs;
    p->score_rank = g->prompt_logprobs >= 0;
  }
  p->chunk = a->prefill_chunk;
  p->prefix_cache = a->prefix_cache;
  if (GEN(r)->fl) GEN(r)->fl->make_id(r, GEN(r)->fctx, p->id, sizeof p->id);
  else make_id(p);
  p->created = (long long)time(NULL);
  p->fingerprint = a->fingerprint;
  p->t_arrival = r->t_start;
  p->model_name = xstrdup(a->model_name);
  p->bias_ids = g->bias_ids, p->bias_vals = g->bias_vals, p->n_bias = g->n_bias;
  g->bias_ids = NULL, g->bias_vals = NULL, g->n_bias = 0;
  p->constraint = g->constraint;
  g->constraint = NULL;
  p->tools = p->constraint ? g->tools.mode : TOOLS_OFF;
  for (int i = 0; i < g->n_stops; i++) gen_params_add_stop(p, g->stops[i], g->stop_lens[i]);
  if (g->kind == JOB_CHAT) {
    gen_params_add_stop(p, a->tpl.auto_stop, strlen(a->tpl.auto_stop));
    gen_params_add_stop(p, a->tpl.extra_stop, strlen(a->tpl.extra_stop));
  }
  return p;
}

/* ---- the request's hooks: what the HTTP code calls without knowing the generation ---- */

static void hook_close(req *r) {
  if (ACTX(r)->job_running) gen_cancel(r, 0);
}

static void hook_free(req *r) {
  gen_req *c = GEN(r);
  gen_group_free(&c->gen);
  if (c->have_g) gen_request_free(&c->g);
  if (c->have_plan) chat_plan_free(&c->plan);
  if (c->fl) c->fl->ctx_free(c->fctx);
  idem_end(r, &c->idem);
  free(c->store_err);
  free(c);
  ACTX(r)->gen = NULL;
}

static void hook_log(req *r, json_writer *w, double dur) {
  job *j = GEN(r)->gen.main; /* its DONE was handled (the job holds a reference) */
  int tin = j ? j->feed.n_prompt : 0, tout = j ? j->run.n_gen : 0;
  for (int i = 0; i < GEN(r)->gen.n_others; i++)
    tin += GEN(r)->gen.others[i]->feed.n_prompt, tout += GEN(r)->gen.others[i]->run.n_gen;
  jw_kint(w, "tokens_in", tin); /* all choices */
  jw_kint(w, "tokens_out", tout);
  if (j && j->run.t_sched)
    jw_kfixed(w, "queue_ms", (j->run.t_sched - j->params->t_arrival) * 1e3, 3);
  else jw_knull(w, "queue_ms");
  if (j && j->run.t_first_token)
    jw_kfixed(w, "ttft_ms", (j->run.t_first_token - j->params->t_arrival) * 1e3, 3);
  else jw_knull(w, "ttft_ms");
  jw_kfixed(w, "duration_ms", dur * 1e3, 3);
  if (j) jw_kstring(w, "finish", finish_name(j->run.finish));
}

/* The SSE bytes the request's jobs produced (job.stream.out of the first job: every choice's
 * sink). */
size_t gen_stream_raw(req *r, char *out, size_t max) {
  job *j = GEN(r)->gen.main;
  pthread_mutex_lock(&j->stream.mu);
  size_t n = j->stream.out.len < max ? j->stream.out.len : max;
  if (n) {
    memcpy(out, j->stream.out.p, n);
    buf_consume(&j->stream.out, n);
  }
  pthread_mutex_unlock(&j->stream.mu);
  if (n) sched_stream_drained(r->a->sched, j); /* resumes its jobs paused on a full buffer */
  return n;
}

static size_t hook_stream_take(req *r, char *out, size_t max) {
  if (GEN(r)->fl) return GEN(r)->fl->stream_take(r, GEN(r)->fctx, out, max);
  return gen_stream_raw(r, out, max);
}

void *gen_flavor_ctx(req *r) { return r->ctx && ACTX(r)->gen && GEN(r)->fl ? GEN(r)->fctx : NULL; }

job *gen_main_job(req *r) {
  return r->ctx && ACTX(r)->gen && ACTX(r)->job_running && !GEN(r)->main_done ? GEN(r)->gen.main
                                                                              : NULL;
}

static int hook_stream_put(req *r, const char *bytes, size_t n) {
  job *j = GEN(r)->gen.main;
  if (!j) return 0;
  pthread_mutex_lock(&j->stream.mu);
  buf_add(&j->stream.out, bytes, n);
  pthread_mutex_unlock(&j->stream.mu);
  return 1;
}

/* One request's way through the handler: what each stage found, freed in one place. */
typedef struct turn {
  const char *sid; /* the session's id (NULL: a stateless request) */
  session *s;      /* the session found (NULL: none yet) */
  int groups, per; /* prompts; choices generated per prompt */
  int reset;       /* chat: the conversation no longer matches the session's: start afresh */
  gen_inputs in;
} turn;

/* Each stage returns 0 to go on, or 1 when it has answered (or suspended) the request. */

static int stage_parse(req *r, job_kind kind) {
  app *a = r->a;
  if (!GEN(r)->have_g) { /* parsed once: the handler runs again after a session restore */
    GEN(r)->have_g = 1;
    api_error e;
    const gen_flavor *fl = GEN(r)->fl;
    if (fl) {
      buf chat;
      buf_init(&chat);
      int bad = fl->translate(r, GEN(r)->fctx, r->body.p, r->body.len, &chat, &e) ||
                parse_gen_request(chat.p, chat.len, kind, &a->limits, &GEN(r)->g, &e);
      buf_free(&chat);
      if (bad) {
        fl->fix_error(&e);
        req_error_from(r, &e);
        return 1;
      }
    } else if (parse_gen_request(r->body.p, r->body.len, kind, &a->limits, &GEN(r)->g, &e)) {
      req_error_from(r, &e);
      return 1;
    }
    if (!fl && idem_begin(r, &GEN(r)->idem)) return 1; /* not a flavor's (api_generate.h) */
    buf_free(&r->body);
  }
  if (GEN(r)->g.model && strcmp(GEN(r)->g.model, a->model_name)) {
    req_error(r, API_ERR_MODEL_NOT_FOUND, "model",
              "model '%s' does not exist (this server serves '%s')", GEN(r)->g.model,
              a->model_name);
    return 1;
  }
  return 0;
}

/* A flavor's session (api_generate.h): none, a new one, or one that must exist (a cancelled
 * turn still winding down in it is waited for, as below). */
static int stage_session_flavor(req *r, turn *t) {
  gen_req *c = GEN(r);
  if (c->fl->session(r, c->fctx, &t->sid, &c->sess_mode)) return 1;
  if (c->sess_mode != GEN_SESS_NAMED && c->sess_mode != GEN_SESS_CLONE) {
    t->sid = NULL;
    return 0;
  }
  snprintf(ACTX(r)->session_id, sizeof ACTX(r)->session_id, "%s", t->sid);
  st_status st = req_find_session(r, t->sid, &t->s);
  if (st == ST_PENDING) return 1; /* the store looks for it; this handler runs again */
  if (st != ST_FOUND) {
    req_session_error(r, t->sid, st == ST_MISSING ? ST_EXPIRED : st);
    return 1;
  }
  if (t->s->busy) {
    if (session_wait_cancelled(r, t->s, &GEN(r)->busy_since)) return 1; /* runs again */
    req_error(r, API_ERR_SESSION_BUSY, "previous_response_id",
              "session %s is serving another request", t->sid);
    return 1;
  }
  if (c->fl->check_session(r, c->fctx, t->s)) return 1;
  if (c->sess_mode == GEN_SESS_CLONE) { /* the copy is temporary: no id in the answer */
    ACTX(r)->session_id[0] = 0;
    t->sid = NULL;
  }
  return 0;
}

/* An Idempotency-Key already used on this session: answered from its record (api_idem.h). */
static int stage_idem(req *r) {
  if (GEN(r)->fl) return 0; /* a flavor's requests take no Idempotency-Key */
  const char *hid = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "X-Session-Id");
  return idem_stage(r, &GEN(r)->idem, hid ? hid : GEN(r)->g.session_id);
}

/* The session named by X-Session-Id or session_id: found, missing (created once the request
 * is good), or the reason it cannot serve. */
static int stage_session(req *r, turn *t) {
  if (GEN(r)->fl) return stage_session_flavor(r, t);
  const gen_request *g = &GEN(r)->g;
  const char *hid = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "X-Session-Id");
  if (hid && !session_id_valid(hid, strlen(hid))) {
    req_error(r, API_ERR_INVALID_VALUE, "X-Session-Id",
              "X-Session-Id must be 1-128 characters of [A-Za-z0-9._-]");
    return 1;
  }
  if (hid && g->session_id && strcmp(hid, g->session_id)) {
    req_error(r, API_ERR_INVALID_VALUE, "session_id",
              "'session_id' differs from the X-Session-Id header");
    return 1;
  }
  t->sid = hid ? hid : g->session_id;
  if (!t->sid) return 0;
  snprintf(ACTX(r)->session_id, sizeof ACTX(r)->session_id, "%s", t->sid);
  st_status st = req_find_session(r, t->sid, &t->s);
  if (st == ST_PENDING) return 1; /* the store looks for it; this handler runs again */
  if (st == ST_FOUND && t->s->busy) {
    if (session_wait_cancelled(r, t->s, &GEN(r)->busy_since)) return 1; /* runs again */
    req_error(r, API_ERR_SESSION_BUSY, "session_id", "session %s is serving another request",
              t->sid);
    return 1;
  }
  if (st != ST_FOUND && st != ST_MISSING) {
    req_session_error(r, t->sid, st);
    return 1;
  }
  return 0;
}

/* Several choices: in a session, the memory keeps one of them, named by the request. */
static int stage_choices(req *r, turn *t) {
  const gen_request *g = &GEN(r)->g;
  t->groups = g->kind == JOB_CHAT ? 1 : g->n_prompts;
  t->per = g->best_of;
  if (t->sid && t->groups > 1) {
    req_error(r, API_ERR_INVALID_VALUE, "prompt",
              "a session continues one text: send one prompt per request in a session");
    return 1;
  }
  if (t->sid && t->per > g->n) {
    req_error(r, API_ERR_INVALID_VALUE, "best_of",
              "'best_of' greater than 'n' is not supported in a session");
    return 1;
  }
  if (t->sid && t->per > 1 && g->session_choice < 0) {
    req_error(r, API_ERR_INVALID_VALUE, "n",
              "in a session, n > 1 needs 'session_choice': the index of the choice whose text "
              "the session's memory keeps (the others are forks, discarded after the request)");
    return 1;
  }
  if (!t->sid && g->session_choice >= 0) {
    req_error(r, API_ERR_INVALID_VALUE, "session_choice",
              "'session_choice' applies to requests in a session");
    return 1;
  }
  return 0;
}

/* A chat fed from its first message: how many of its tokens its leading system messages (with
 * their template) make, the part other conversations share (the prefix cache's hint); 0 when
 * there are none. The count is of the tokens the whole text and the system part alone agree on
 * (a tokenizer may join across the boundary). */
static int chat_prefix_hint(req *r, const gen_inputs *in) {
  const gen_request *g = &GEN(r)->g;
  const chat_plan *pl = &GEN(r)->plan;
  if (!r->a->prefix_cache || (pl->kind != PLAN_NEW && pl->kind != PLAN_RESET)) return -1;
  buf sys;
  buf_init(&sys);
  for (int i = 0; i < g->n_msgs && g->msgs[i].role == ROLE_SYSTEM; i++)
    chat_render(&r->a->tpl, &g->msgs[i], &sys);
  int hint = 0; /* no system message: nothing shared (a conversation's own text) */
  int32_t *ids = NULL;
  size_t n = 0;
  xl_error xe;
  memset(&xe, 0, sizeof xe);
  if (sys.len && sys.len <= pl->text.len && !memcmp(sys.p, pl->text.p, sys.len) &&
      xl_tokenize(r->a->model, sys.p, sys.len, &ids, &n, &xe) == XL_OK) {
    size_t k = 0;
    while (k < n && k < in->ntok && ids[k] == in->toks[k]) k++;
    hint = (int)k;
  }
  free(ids);
  buf_free(&sys);
  return hint;
}

/* What this turn feeds: the chat plan's text or the prompt, tokenized, after the session's
 * pending token; then the other prompts of a list. */
static int stage_inputs(req *r, turn *t) {
  app *a = r->a;
  gen_request *g = &GEN(r)->g;
  gen_inputs *in = &t->in;
  const char *text = g->prompt;
  size_t text_len = g->prompt_len;
  if (g->kind == JOB_CHAT) {
    session empty;
    memset(&empty, 0, sizeof empty);
    chat_plan_turn(&a->tpl, t->s ? t->s : &empty, g->msgs, g->n_msgs, g->history, &GEN(r)->plan);
    GEN(r)->have_plan = 1;
    text = GEN(r)->plan.text.p ? GEN(r)->plan.text.p : "";
    text_len = GEN(r)->plan.text.len;
  }
  if (g->prompt_ids) {
    in->ntok = g->n_prompt_ids;
    in->toks = xmalloc(sizeof *in->toks * (in->ntok ? in->ntok : 1));
    memcpy(in->toks, g->prompt_ids, sizeof *in->toks * in->ntok);
  } else if (text_len) {
    xl_error xe;
    memset(&xe, 0, sizeof xe);
    if (xl_tokenize(a->model, text, text_len, &in->toks, &in->ntok, &xe) != XL_OK) {
      req_error(r, API_ERR_TOKENIZER_ERROR, prompt_param(r), "cannot tokenize the %s: %s",
                prompt_param(r), xe.message);
      return 1;
    }
  }
  if (in->ntok > (size_t)a->opt.max_prompt_tokens) {
    req_error(r, API_ERR_PROMPT_TOO_LONG, prompt_param(r),
              "this request feeds %zu tokens; the limit is %lld (max_prompt_tokens)", in->ntok,
              a->opt.max_prompt_tokens);
    return 1;
  }
  if (g->kind == JOB_CHAT && !g->prompt_ids) in->prefix_hint = chat_prefix_hint(r, in);
  t->reset = GEN(r)->have_plan && GEN(r)->plan.kind == PLAN_RESET;
  if (t->s && t->s->pending >= 0 && !t->reset) in->pending = t->s->pending;
  if (in->ntok == 0 && in->pending < 0 && g->max_tokens > 0) {
    req_error(r, API_ERR_EMPTY_PROMPT, prompt_param(r),
              "the prompt is empty and the session holds nothing to continue from");
    return 1;
  }
  in->groups = t->groups;
  if (t->groups > 1) {
    in->ptoks = xcalloc((size_t)t->groups, sizeof *in->ptoks);
    in->pn = xcalloc((size_t)t->groups, sizeof *in->pn);
  }
  for (int p = 1; p < t->groups; p++) {
    const gen_prompt *gp = &g->prompts[p];
    char param[32];
    snprintf(param, sizeof param, "prompt[%d]", p);
    xl_error pe;
    memset(&pe, 0, sizeof pe);
    if (gp->ids) {
      in->pn[p] = gp->n_ids;
      in->ptoks[p] = xmalloc(sizeof(int32_t) * (in->pn[p] ? in->pn[p] : 1));
      memcpy(in->ptoks[p], gp->ids, sizeof(int32_t) * in->pn[p]);
    } else if (gp->len &&
               xl_tokenize(a->model, gp->text, gp->len, &in->ptoks[p], &in->pn[p], &pe) != XL_OK) {
      req_error(r, API_ERR_TOKENIZER_ERROR, param, "cannot tokenize %s: %s", param, pe.message);
      return 1;
    }
    if (in->pn[p] == 0) { /* a list's prompts each feed something */
      req_error(r, API_ERR_EMPTY_PROMPT, param, "%s is empty", param);
      return 1;
    }
  }
  /* the limit is on what the whole request feeds: each prompt once (a prompt's n/best_of
   * choices fork its fed state; echo and logprobs read what was fed) */
  size_t total = in->ntok;
  for (int p = 1; p < t->groups; p++) total += in->pn[p];
  if (t->groups > 1 && total > (size_t)a->opt.max_prompt_tokens) {
    req_error(r, API_ERR_PROMPT_TOO_LONG, "prompt",
              "the %d prompts of this request feed %zu tokens in all; the limit is %lld "
              "(max_prompt_tokens, counted over all prompts of a request)",
              t->groups, total, a->opt.max_prompt_tokens);
    return 1;
  }
  return 0;
}

/* The client a per-client limit counts (NULL: exempt: a trusted proxy itself, or loopback). */
static const char *quota_client(const req *r) {
  return guard_exempt(r->srv->guard, r->remote) ? NULL : r->remote;
}

static void quota_release(req *r) {
  if (!GEN(r)->quota_held) return;
  GEN(r)->quota_held = 0;
  rq_release(r->a->quota, r->owner, quota_client(r));
}

/* 429 when the request's key or client has its limit of requests in flight, or unless every
 * job of the request fits in the queue now. */
static int stage_admit(req *r, const turn *t) {
  const char *limit = rq_check(r->a->quota, r->owner, quota_client(r));
  if (limit) {
    r->retry_after = "1";
    req_error(r, API_ERR_QUOTA_EXCEEDED, NULL,
              "this %s has %lld generation requests running or queued, its limit "
              "(%s); retry once one is done",
              strcmp(limit, "max_running_per_key") ? "client" : "API key",
              strcmp(limit, "max_running_per_key") ? r->a->opt.max_running_per_client
                                                   : r->a->opt.max_running_per_key,
              limit);
    return 1;
  }
  if (sched_has_room_for(r->a->sched, t->groups * t->per)) return 0;
  ctr_add(&g_metrics.rejected_queue_full, 1);
  r->retry_after = "1";
  req_error(r, API_ERR_QUEUE_FULL, NULL,
            "the server is at capacity (max_running + max_queue); retry shortly");
  return 1;
}

/* From here on the request runs: its session is created (or a temporary one made) and held. */
static int stage_hold_session(req *r, turn *t) {
  app *a = r->a;
  xl_error xe;
  memset(&xe, 0, sizeof xe);
  int mint = GEN(r)->sess_mode == GEN_SESS_MINT;
  if ((mint || (t->sid && !t->s)) && st_key_full(a->sessions, r->owner)) {
    req_error(r, API_ERR_QUOTA_EXCEEDED, mint ? NULL : "session_id",
              "this API key holds %lld sessions, its limit (max_sessions_per_key): delete "
              "one (DELETE /v1/sessions/ID) before starting another",
              a->opt.max_sessions_per_key);
    return 1;
  }
  if (GEN(r)->sess_mode == GEN_SESS_MINT) {
    t->s = st_create(a->sessions, NULL, r->owner, &xe);
    if (t->s) snprintf(ACTX(r)->session_id, sizeof ACTX(r)->session_id, "%s", t->s->id);
  } else if (GEN(r)->sess_mode == GEN_SESS_CLONE) {
    t->s = session_clone(t->s, &xe);
    GEN(r)->sess_stateless = 1;
  } else if (t->sid && !t->s) {
    t->s = st_create(a->sessions, t->sid, r->owner, &xe);
  } else if (!t->sid) {
    t->s = st_new_stateless(a->sessions, &xe);
    GEN(r)->sess_stateless = 1;
  }
  if (!t->s) {
    req_error(r, API_ERR_SESSION_CREATE_FAILED, NULL, "cannot create a session: %s", xe.message);
    return 1;
  }
  if (t->reset) {
    session_reset(t->s);
    t->s->unsaved = 1; /* the store still has the old conversation */
    ACTX(r)->sess_reset = 1;
    ctr_add(&g_metrics.session_resets, 1);
  }
  if (!GEN(r)->sess_stateless) {
    st_acquire(a->sessions, t->s);
    session_turn_held(r, t->s);
  }
  GEN(r)->sess = t->s;
  return 0;
}

/* Builds the request's jobs, submits them, and starts the answer (a stream, or a wait). */
static void stage_run(req *r, turn *t) {
  app *a = r->a;
  gen_params *p = params_of(r);
  p->prefix_hint = t->in.prefix_hint;
  int main_index = t->sid && GEN(r)->g.session_choice > 0 ? GEN(r)->g.session_choice : 0;
  int snapshot = !GEN(r)->sess_stateless && st_persistent(a->sessions);
  gen_group_build(&GEN(r)->gen, p, t->s, &t->in, t->per, main_index, &t->s->rng, snapshot, r);
  gen_params_unref(p); /* the jobs hold it */
  GEN(r)->others_left = GEN(r)->gen.n_others;
  job *j = GEN(r)->gen.main;
  if (j->params->stream && j->params->kind == JOB_CHAT) gen_group_stream_preamble(&GEN(r)->gen);
  if (j->params->stream && GEN(r)->fl) GEN(r)->fl->stream_head(r, GEN(r)->fctx);
  ACTX(r)->job_running = 1;
  GEN(r)->quota_held = 1;
  rq_take(a->quota, r->owner, quota_client(r));
  req_ref(r); /* the job's reference, dropped in gen_on_done */
  a->n_jobs++;
  if (j->feed.n_input == 0) { /* max_tokens 0 and nothing to feed: done already */
    if (j->params->stream) req_start_stream(r);
    for (int i = GEN(r)->gen.n_others; i >= 0; i--) {
      job *c = gen_group_at(&GEN(r)->gen, i);
      c->run.finish = FINISH_LENGTH;
      if (c->params->stream) job_emit_stream(c, 1);
      gen_on_job_done(r, c);
    }
    return;
  }
  if (gen_group_submit(&GEN(r)->gen, a->sched)) { /* cannot happen after sched_has_room_for */
    for (int k = GEN(r)->gen.n_others; k >= 0; k--) {
      job *c = gen_group_at(&GEN(r)->gen, k);
      c->run.finish = FINISH_ERROR;
      snprintf(c->run.error.message, sizeof c->run.error.message, "queue full");
      gen_on_job_done(r, c);
    }
    return;
  }
  /* events of the job reach the loop only after this handler returns */
  if (j->params->stream) req_start_stream(r);
  else req_suspend_waiting(r);
}

/* parse -> session -> choices -> inputs -> admission -> session held -> run; a stage that
 * answers ends the request's way, and what the stages built is freed here. */
static void api_generate(req *r, job_kind kind) {
  if (!ACTX(r)->gen)
    ACTX(r)->gen = xcalloc(1, sizeof(gen_req)); /* the handler may run again (restore) */
  if (GEN(r)->fl) kind = JOB_CHAT;
  ACTX(r)->gen_close = hook_close;
  ACTX(r)->gen_free = hook_free;
  ACTX(r)->gen_log = hook_log;
  r->stream_take = hook_stream_take;
  r->stream_put = hook_stream_put;
  turn t;
  memset(&t, 0, sizeof t);
  gen_inputs_init(&t.in);
  if (!stage_parse(r, kind) && !stage_idem(r) && !stage_session(r, &t) && !stage_choices(r, &t) &&
      !stage_inputs(r, &t) && !stage_admit(r, &t) && !stage_hold_session(r, &t))
    stage_run(r, &t);
  gen_inputs_free(&t.in);
}

void gen_cancel(req *r, int by_drain) {
  if (!ACTX(r)->job_running) return;
  if (by_drain) GEN(r)->cancelled_by_drain = 1;
  if (GEN(r)->sess && !GEN(r)->sess_stateless) GEN(r)->sess->turn_cancelled = 1;
  if (!GEN(r)->main_done) sched_cancel(r->a->sched, GEN(r)->gen.main);
  for (int i = 0; i < GEN(r)->gen.n_others; i++)
    sched_cancel(r->a->sched, GEN(r)->gen.others[i]); /* a no-op once done */
}

void gen_on_output(req *r) {
  if (r->ping_open) uv_timer_again(&r->ping);
  req_kick(r);
}

/* Records what this turn did to the session (loop thread; the worker is done with it). */
static void update_session(req *r) {
  job *j = GEN(r)->gen.main;
  session *s = GEN(r)->sess;
  if (!j->params->seeded) s->rng = j->run.rng;
  int fed = j->run.pos > 0 || j->run.decoding;
  int completed_turn = j->run.finish == FINISH_STOP || j->run.finish == FINISH_LENGTH ||
                       (j->run.finish == FINISH_CANCELLED && j->run.decoding);
  if (GEN(r)->g.kind == JOB_CHAT) {
    if (completed_turn) {
      for (int i = GEN(r)->plan.first; i < GEN(r)->g.n_msgs; i++) {
        const chat_message *m = &GEN(r)->g.msgs[i];
        session_push_msg(s, m->role, chat_hash(m->role, m->content, m->len));
      }
      if (j->tools.is_call) { /* recorded as the client sends it back: the calls, name first */
        buf calls;
        buf_init(&calls);
        tool_calls_canonical(j->text.reply.p ? j->text.reply.p : "", j->text.reply.len, &calls);
        session_push_msg(s, ROLE_ASSISTANT,
                         chat_hash(ROLE_ASSISTANT, calls.p ? calls.p : "", calls.len));
        buf_free(&calls);
      } else {
        session_push_msg(
            s, ROLE_ASSISTANT,
            chat_hash(ROLE_ASSISTANT, j->text.reply.p ? j->text.reply.p : "", j->text.reply.len));
      }
      s->chat = CHAT_MESSAGES;
      session_set_tail(s, j->text.tail.p, j->text.tail.len);
    } else if (fed) {
      s->chat = CHAT_DESYNC; /* part of the turn is in the memory: never mix silently */
      session_set_tail(s, "", 0);
    }
  } else if (fed) {
    s->chat = CHAT_RAW;
    s->n_msgs = 0;
    session_set_tail(s, "", 0);
  }
  if (fed) s->turns++;
}

static void gen_finish(req *r);

/* The response goes out once every job is done and the turn committed. */
static void maybe_finish(req *r) {
  if (!GEN(r)->main_done || GEN(r)->others_left || GEN(r)->commit_wait) return;
  quota_release(r);
  ACTX(r)->job_running = 0;
  r->a->n_jobs--;
  idem_answered(r, &GEN(r)->idem); /* the commit has its outcome: a retry may read it */
  gen_finish(r);
}

/* durability turn: the turn's state is committed (or the commit failed): answer now */
static void on_turn_committed(void *ctx, int status, const char *msg) {
  req *r = ctx;
  if (status) GEN(r)->store_err = xstrdup(msg && *msg ? msg : "store error");
  GEN(r)->store_conflict = status == -2;
  GEN(r)->store_unknown = status == -3;
  GEN(r)->commit_wait = 0;
  maybe_finish(r);
  req_unref(r); /* the commit's reference */
}

void gen_on_job_done(req *r, job *j) {
  if (j == GEN(r)->gen.main) {
    gen_on_done(r);
    return;
  }
  if (j->feed.own_session) { /* a choice's fork: gone with its job */
    session_free(j->sess);
    j->sess = NULL;
  }
  if (j->run.finish == FINISH_ERROR)
    xlog_msg("error", "generation_failed", "request %s (choice %d): %s", r->request_id, j->index,
             j->run.error.message);
  GEN(r)->others_left--;
  if (GEN(r)->main_done && !GEN(r)->others_left) {
    if (GEN(r)->gen.main->params->stream) req_kick(r);
    maybe_finish(r);
  }
}

/* What the turn came to, for a flavor (api_generate.h). */
static gen_outcome outcome_of(req *r, api_err err, const char *msg) {
  gen_outcome o;
  o.main = GEN(r)->gen.main;
  o.session_id = ACTX(r)->session_id[0] ? ACTX(r)->session_id : NULL;
  o.session_tokens = GEN(r)->held_tokens;
  o.session_turns = GEN(r)->held_turns;
  o.err = err;
  o.err_msg = msg;
  return o;
}

void gen_on_done(req *r) {
  job *j = GEN(r)->gen.main;
  app *a = r->a;
  if (j->run.finish != FINISH_STOP && j->run.finish != FINISH_LENGTH)
    gen_cancel(r, 0); /* the others too */
  GEN(r)->main_done = 1;
  update_session(r);
  GEN(r)->held_tokens = GEN(r)->sess_stateless ? 0 : session_tokens(GEN(r)->sess);
  GEN(r)->held_turns = GEN(r)->sess->turns;
  if (GEN(r)->sess_stateless) {
    st_free_stateless(r->a->sessions, GEN(r)->sess);
  } else {
    /* the session stays busy until st_turn_end releases it (after the commit, durability turn) */
    int fed = j->run.pos > 0 || j->run.decoding;
    uint8_t *core = j->run.snap;
    j->run.snap = NULL;
    /* an Idempotency-Key's record, written in the turn's commit: the answer (a stream's as a
     * full body) when the turn ended well and every choice is done */
    st_record rec, *recp = NULL;
    if (GEN(r)->idem.on && !GEN(r)->fl) {
      buf b;
      buf_init(&b);
      if ((j->run.finish == FINISH_STOP || j->run.finish == FINISH_LENGTH) && !GEN(r)->others_left)
        full_body(&b, r, j, GEN(r)->held_tokens);
      recp = idem_record(&GEN(r)->idem, &rec, GEN(r)->held_tokens, &b);
      buf_free(&b);
    }
    req_ref(r); /* the commit's, if it waits */
    if (GEN(r)->fl && j->run.finish != FINISH_ERROR && !GEN(r)->cancelled_by_drain) {
      gen_outcome o = outcome_of(r, API_ERR_NONE, NULL);
      recp = GEN(r)->fl->turn_record(r, GEN(r)->fctx, &o, &rec);
    }
    int w = st_turn_end(a->sessions, GEN(r)->sess, core, j->run.snap_len, fed, recp,
                        on_turn_committed, r);
    if (w == 1) {
      GEN(r)->commit_wait = 1;
      if (j->params->stream) req_kick(r); /* the finish chunk goes out; [DONE] after the commit */
    } else {
      req_unref(r); /* not the last: the job's is still held */
      if (w < 0) GEN(r)->store_err = xstrdup("the turn's state could not be serialised");
    }
  }
  GEN(r)->sess = NULL;
  if (j->run.finish == FINISH_ERROR)
    xlog_msg("error", "generation_failed", "request %s: %s", r->request_id, j->run.error.message);
  maybe_finish(r);
}

/* The end of the response: the stream's tail, or the full body; drops the job's reference. */
static void gen_finish(req *r) {
  job *j = GEN(r)->gen.main;
  uint64_t held = GEN(r)->held_tokens;
  api_err err = API_ERR_NONE;
  const char *err_msg = NULL;
  if (j->run.finish == FINISH_ERROR)
    err = API_ERR_GENERATION_FAILED, err_msg = j->run.error.message;
  else if (GEN(r)->cancelled_by_drain) err = API_ERR_SHUTTING_DOWN;
  else if (GEN(r)->store_err && j->run.finish != FINISH_CANCELLED && GEN(r)->store_conflict)
    err = API_ERR_SESSION_CONFLICT, err_msg = GEN(r)->store_err;
  else if (GEN(r)->store_err && j->run.finish != FINISH_CANCELLED && GEN(r)->store_unknown)
    err = API_ERR_STORE_OUTCOME_UNKNOWN, err_msg = GEN(r)->store_err;
  else if (GEN(r)->store_err && j->run.finish != FINISH_CANCELLED)
    err = API_ERR_STORE_FAILED, err_msg = GEN(r)->store_err;
  char kept[600];
  if (err == API_ERR_SESSION_CONFLICT) {
    snprintf(kept, sizeof kept,
             "another replica committed a turn of this session first (%.300s); this turn was "
             "not kept: the session is at the other turn's version; send the request again "
             "with the conversation as it is now",
             err_msg);
    err_msg = kept;
  } else if (err == API_ERR_STORE_OUTCOME_UNKNOWN) {
    snprintf(kept, sizeof kept,
             "the session store did not confirm the turn's commit (%.300s); the turn may or "
             "may not have been kept: the session is re-read from the store before its next "
             "turn, so check its session_tokens before sending the turn again",
             err_msg);
    err_msg = kept;
  } else if (err == API_ERR_STORE_FAILED) {
    snprintf(kept, sizeof kept,
             "the turn could not be committed to the session store (%.400s); it was not kept: "
             "the session is back at its last committed turn, so retrying the request is safe",
             err_msg);
    err_msg = kept;
  }

  gen_outcome o = outcome_of(r, err, err_msg);
  if (j->params->stream) {
    /* a flavor's response may be cancelled by another request: its stream still ends */
    if (!r->client_gone &&
        (j->run.finish != FINISH_CANCELLED || GEN(r)->cancelled_by_drain || GEN(r)->fl)) {
      buf b;
      buf_init(&b);
      if (GEN(r)->fl) GEN(r)->fl->stream_tail(r, GEN(r)->fctx, &o, &b);
      else stream_tail(&b, r, j, held, err, err_msg);
      pthread_mutex_lock(&j->stream.mu);
      buf_add(&j->stream.out, b.p, b.len);
      pthread_mutex_unlock(&j->stream.mu);
      buf_free(&b);
    }
    r->stream_complete = 1;
    if (r->ping_open) uv_timer_stop(&r->ping);
    req_kick(r);
  } else if (!r->mhd_done) {
    if (err) {
      /* not kept: a retry is safe once the store is back; unknown: retry after re-reading */
      if (err == API_ERR_STORE_FAILED || err == API_ERR_STORE_OUTCOME_UNKNOWN) r->retry_after = "1";
      req_error(r, err, err == API_ERR_SESSION_CONFLICT ? "session_id" : NULL, "%s",
                err_msg ? err_msg : api_err_get(err)->message);
    } else if (j->run.finish == FINISH_CANCELLED && !GEN(r)->fl) {
      req_kick(r); /* client gone: the access handler closes */
    } else if (GEN(r)->fl) {
      GEN(r)->fl->reply(r, GEN(r)->fctx, &o);
    } else {
      buf b;
      buf_init(&b);
      full_body(&b, r, j, held);
      req_reply_json(r, 200, &b);
      buf_free(&b);
    }
  }
  req_unref(r);
}

void api_generate_as(req *r, const gen_flavor *f) {
  if (!ACTX(r)->gen) {
    ACTX(r)->gen = xcalloc(1, sizeof(gen_req));
    GEN(r)->fl = f;
    GEN(r)->fctx = f->ctx_new();
  }
  api_generate(r, JOB_CHAT);
}

void api_completions(req *r) { api_generate(r, JOB_COMPLETION); }

void api_chat_completions(req *r) { api_generate(r, JOB_CHAT); }
