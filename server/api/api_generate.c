/*
 * api_generate.c: POST /v1/completions and /v1/chat/completions. Validates the request, finds
 * or creates the session (409 when busy), renders/tokenizes what this turn feeds (pending token
 * first), admits a job (429 when the queue is full), and on completion updates the session's
 * transcript record and answers: a JSON body, or the SSE tail (usage, [DONE]).
 * Thread: loop thread only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "app.h"
#include "util.h"
#include "xlog.h"

static const char *prompt_param(const req *r) {
  return r->g.kind == JOB_CHAT ? "messages" : "prompt";
}

/* usage: prompts counted once each (the choices of a prompt share its prefill), every
 * generated token counted (best_of's discarded choices too) */
static void usage_json(buf *b, const req *r) {
  int pt = r->job->n_prompt, ct = r->job->n_gen;
  for (int i = 0; i < r->n_others; i++) pt += r->others[i]->n_prompt, ct += r->others[i]->n_gen;
  buf_printf(b, "{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d}", pt, ct,
             pt + ct);
}

static job *job_at(const req *r, int i) { return i == 0 ? r->job : r->others[i - 1]; }

static int by_index(const void *a, const void *b) {
  const job *x = *(job *const *)a, *y = *(job *const *)b;
  return (x->index > y->index) - (x->index < y->index);
}

static int by_score(const void *a, const void *b) { /* best_of: the highest sum first */
  const job *x = *(job *const *)a, *y = *(job *const *)b;
  if (x->sum_lp != y->sum_lp) return x->sum_lp < y->sum_lp ? 1 : -1;
  return (x->index > y->index) - (x->index < y->index);
}

/* The choices to answer with, in order; out[k] is answered with index k. best_of > n: per
 * prompt, the n choices whose tokens have the highest summed log-probability. */
static int answer_jobs(const req *r, job **out) {
  int total = 1 + r->n_others;
  job **all = xmalloc(sizeof *all * (size_t)total);
  for (int i = 0; i < total; i++) all[i] = job_at(r, i);
  qsort(all, (size_t)total, sizeof *all, by_index);
  int per = r->g.best_of > 0 ? r->g.best_of : 1, n = r->g.n > 0 ? r->g.n : 1, k = 0;
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
static void xlserve_json(buf *b, const req *r, uint64_t session_tokens) {
  buf_adds(b, "{\"session_id\":");
  if (r->session_id[0]) json_escape(b, r->session_id, strlen(r->session_id));
  else buf_adds(b, "null");
  buf_printf(b, ",\"session_tokens\":%llu,\"session_reset\":%s", (unsigned long long)session_tokens,
             r->sess_reset ? "true" : "false");
  if (r->have_plan) buf_printf(b, ",\"history\":\"%s\"", plan_name(r->plan.kind));
  buf_addc(b, '}');
}

/* The job that fed choice c's prompt: its group's first job (group = index / best_of; group 0:
 * r->job, which in a session may carry another index). Only that job scored the prompt; the
 * group's other choices fork its state after the prompt. */
static const job *prompt_job(const req *r, const job *c) {
  int per = r->g.best_of > 0 ? r->g.best_of : 1, group = c->index / per;
  if (group == 0) return r->job;
  for (int i = 0; i < r->n_others; i++)
    if (r->others[i]->index == group * per) return r->others[i];
  return c; /* not reached: make_others makes every group's first job */
}

/* echo: choice's prompt as sent (a string), or its token ids detokenised; pj feeds it */
static void echo_text(buf *b, const req *r, const job *pj) {
  const gen_request *g = &r->g;
  int per = g->best_of > 0 ? g->best_of : 1, group = pj == r->job ? 0 : pj->index / per;
  const gen_prompt *gp = &g->prompts[group];
  if (!gp->ids) {
    buf_add(b, gp->text, gp->len);
    return;
  }
  detok_ids(pj->model, gp->ids, gp->n_ids, b);
}

static void full_body(buf *b, const req *r, const job *j, uint64_t session_tokens) {
  buf_adds(b, "{\"id\":");
  json_escape(b, j->id, strlen(j->id));
  buf_printf(b, ",\"object\":\"%s\",\"created\":%lld,\"model\":",
             j->kind == JOB_CHAT ? "chat.completion" : "text_completion", j->created);
  json_escape(b, j->model_name, strlen(j->model_name));
  if (j->kind == JOB_CHAT) buf_printf(b, ",\"system_fingerprint\":\"%s\"", j->fingerprint);
  buf_adds(b, ",\"choices\":[");
  job **ans = xmalloc(sizeof *ans * (size_t)(1 + r->n_others));
  int na = answer_jobs(r, ans);
  for (int k = 0; k < na; k++) {
    const job *c = ans[k];
    const job *pj = prompt_job(r, c); /* echo and prompt scoring: the job that fed its prompt */
    if (k) buf_addc(b, ',');
    buf_printf(b, "{\"index\":%d,", k);
    if (c->kind == JOB_CHAT) {
      buf_adds(b, "\"message\":{\"role\":\"assistant\",\"content\":");
      json_escape(b, c->reply.p ? c->reply.p : "", c->reply.len);
      buf_adds(b, ",\"refusal\":null},\"logprobs\":");
    } else if (r->g.echo) {
      buf t;
      buf_init(&t);
      echo_text(&t, r, pj);
      buf_add(&t, c->reply.p ? c->reply.p : "", c->reply.len);
      buf_adds(b, "\"text\":");
      json_escape(b, t.p ? t.p : "", t.len);
      buf_free(&t);
      buf_adds(b, ",\"logprobs\":");
    } else {
      buf_adds(b, "\"text\":");
      json_escape(b, c->reply.p ? c->reply.p : "", c->reply.len);
      buf_adds(b, ",\"logprobs\":");
    }
    if (r->g.echo && c->n_top >= 0) job_fmt_echo_logprobs(b, pj, c);
    else job_fmt_logprobs(b, c, 0, c->n_recs, 0);
    if (c->kind == JOB_COMPLETION && r->g.prompt_logprobs >= 0) {
      buf_adds(b, ",\"prompt_logprobs\":");
      job_fmt_prompt_logprobs(b, pj, r->g.prompt_logprobs);
    }
    buf_printf(b, ",\"finish_reason\":\"%s\"}", finish_name(c->finish));
  }
  free(ans);
  buf_addc(b, ']');
  if (j->kind == JOB_CHAT && r->g.prompt_logprobs >= 0) {
    buf_adds(b, ",\"prompt_logprobs\":");
    job_fmt_prompt_logprobs(b, r->job, r->g.prompt_logprobs);
  }
  buf_adds(b, ",\"usage\":");
  usage_json(b, r);
  buf_adds(b, ",\"xlserve\":");
  xlserve_json(b, r, session_tokens);
  buf_addc(b, '}');
}

/* The end of an SSE stream: usage chunk (if asked) and [DONE], or an in-band error. */
static void stream_tail(buf *b, const req *r, job *j, uint64_t session_tokens, api_err err,
                        const char *err_msg) {
  if (err) {
    buf_adds(b, "data: ");
    api_err_stream_body(b, err, err_msg);
    buf_adds(b, "\n\n");
  } else if (j->include_usage) {
    job_chunk_prefix(b, j);
    buf_adds(b, ",\"choices\":[],\"usage\":");
    usage_json(b, r);
    buf_adds(b, ",\"xlserve\":");
    xlserve_json(b, r, session_tokens);
    buf_adds(b, "}\n\n");
  }
  buf_adds(b, "data: [DONE]\n\n");
}

static void make_id(job *j) {
  uint8_t rnd[12];
  char hx[25];
  random_bytes(rnd, sizeof rnd);
  hex_encode(rnd, sizeof rnd, hx);
  snprintf(j->id, sizeof j->id, "%s-%s", j->kind == JOB_CHAT ? "chatcmpl" : "cmpl", hx);
}

/* echo with logprobs, prompt_logprobs: the job feeding a prompt scores it (before submit) */
static void score_setup(job *j, const gen_request *g) {
  if ((g->echo && g->n_top >= 0) || g->prompt_logprobs >= 0) {
    int top = g->echo && g->n_top > g->prompt_logprobs ? g->n_top : g->prompt_logprobs;
    job_score_setup(j, top, g->prompt_logprobs >= 0);
  }
}

/* A job with m's request fields, for another choice (loop thread, before submit). */
static job *job_like(const job *m, req *r) {
  job *c = job_new();
  c->owner = r;
  c->kind = m->kind;
  c->model = m->model;
  c->max_tokens = m->max_tokens;
  c->sampling = m->sampling;
  c->seeded = m->seeded;
  c->stream = m->stream;
  c->include_usage = m->include_usage;
  c->n_top = m->n_top;
  if (m->n_bias) {
    c->n_bias = m->n_bias;
    c->bias_ids = xmalloc(sizeof *c->bias_ids * (size_t)m->n_bias);
    c->bias_vals = xmalloc(sizeof *c->bias_vals * (size_t)m->n_bias);
    memcpy(c->bias_ids, m->bias_ids, sizeof *c->bias_ids * (size_t)m->n_bias);
    memcpy(c->bias_vals, m->bias_vals, sizeof *c->bias_vals * (size_t)m->n_bias);
  }
  c->constraint = jc_schema_ref(m->constraint);
  for (int i = 0; i < m->n_stops; i++) job_add_stop(c, m->stops[i], strlen(m->stops[i]));
  c->chunk = m->chunk;
  memcpy(c->id, m->id, sizeof c->id);
  c->created = m->created;
  c->model_name = xstrdup(m->model_name);
  c->fingerprint = m->fingerprint;
  c->t_arrival = m->t_arrival;
  c->hist = xmalloc(sizeof(int32_t) * (size_t)(c->max_tokens ? c->max_tokens : 1));
  xl_detok_init(&c->detok);
  c->own_session = 1;
  c->sink = m->stream ? (job *)m : NULL;
  return c;
}

/* The jobs of the other choices: per prompt group p, `per` choices with indexes p*per + k; the
 * group's first job feeds the prompt (group 0: r->job), the rest are its parked siblings. */
static void make_others(req *r, int groups, int per, int32_t **ptoks, size_t *pn) {
  job *m = r->job;
  const gen_request *g = &r->g;
  r->others = xcalloc((size_t)(groups * per), sizeof *r->others);
  for (int p = 0; p < groups; p++) {
    job *lead = m;
    if (p > 0) {
      lead = job_like(m, r);
      lead->index = p * per;
      lead->n_input = (int)pn[p];
      lead->n_prompt = (int)pn[p];
      lead->input = xmalloc(sizeof(int32_t) * (pn[p] ? pn[p] : 1));
      memcpy(lead->input, ptoks[p], sizeof(int32_t) * pn[p]);
      score_setup(lead, g);
      r->others[r->n_others++] = lead;
    }
    lead->sibs = xcalloc((size_t)per, sizeof *lead->sibs);
    for (int k = 0; k < per; k++) {
      int idx = p * per + k;
      if (idx == lead->index) continue;
      job *c = job_like(m, r);
      c->index = idx;
      c->input = xmalloc(sizeof(int32_t));
      c->parked = 1;
      lead->sibs[lead->n_sibs++] = c;
      r->others[r->n_others++] = c;
    }
  }
  for (int i = 0; i < r->n_others; i++) {
    job *c = r->others[i];
    xl_error e;
    memset(&e, 0, sizeof e);
    c->sess = session_new(c->model, &e); /* the lead's: its prompt; a sibling's: replaced by the fork */
    if (!c->sess) abort();               /* out of memory: xmalloc's policy */
    if (g->seeded) {
      xl_rng_seed(&c->rng, g->seed + (uint64_t)c->index);
    } else {
      uint64_t sd;
      random_bytes((uint8_t *)&sd, sizeof sd);
      xl_rng_seed(&c->rng, sd);
    }
  }
  r->others_left = r->n_others;
}

/* ---- the request's hooks: what the HTTP code calls without knowing the generation ---- */

static void hook_close(req *r) {
  if (r->job_running) gen_cancel(r, 0);
}

static void hook_free(req *r) {
  for (int i = 0; i < r->n_others; i++) job_free(r->others[i]);
  free(r->others);
  job_free(r->job);
  if (r->have_g) gen_request_free(&r->g);
  if (r->have_plan) chat_plan_free(&r->plan);
}

static void hook_log(req *r, buf *l, double dur) {
  job *j = r->job; /* its DONE was handled (the job holds a reference) */
  int tin = j ? j->n_prompt : 0, tout = j ? j->n_gen : 0;
  for (int i = 0; i < r->n_others; i++) tin += r->others[i]->n_prompt, tout += r->others[i]->n_gen;
  buf_printf(l, ",\"tokens_in\":%d,\"tokens_out\":%d", tin, tout); /* all choices */
  if (j && j->t_sched) buf_printf(l, ",\"queue_ms\":%.3f", (j->t_sched - j->t_arrival) * 1e3);
  else buf_adds(l, ",\"queue_ms\":null");
  if (j && j->t_first_token)
    buf_printf(l, ",\"ttft_ms\":%.3f", (j->t_first_token - j->t_arrival) * 1e3);
  else buf_adds(l, ",\"ttft_ms\":null");
  buf_printf(l, ",\"duration_ms\":%.3f", dur * 1e3);
  if (j) buf_printf(l, ",\"finish\":\"%s\"", finish_name(j->finish));
}

/* The SSE bytes the request's jobs produced (job.out of the first job: every choice's sink). */
static size_t hook_stream_take(req *r, char *out, size_t max) {
  job *j = r->job;
  pthread_mutex_lock(&j->mu);
  size_t n = j->out.len < max ? j->out.len : max;
  if (n) {
    memcpy(out, j->out.p, n);
    buf_consume(&j->out, n);
  }
  pthread_mutex_unlock(&j->mu);
  return n;
}

static int hook_stream_put(req *r, const char *bytes, size_t n) {
  job *j = r->job;
  if (!j) return 0;
  pthread_mutex_lock(&j->mu);
  buf_add(&j->out, bytes, n);
  pthread_mutex_unlock(&j->mu);
  return 1;
}

static void api_generate(req *r, job_kind kind) {
  app *a = r->a;
  api_error e;
  r->on_close = hook_close;
  r->on_free = hook_free;
  r->log_fields = hook_log;
  r->stream_take = hook_stream_take;
  r->stream_put = hook_stream_put;
  if (!r->have_g) { /* parsed once: the handler runs again after a session restore */
    r->have_g = 1;
    if (parse_gen_request(r->body.p, r->body.len, kind, &a->limits, &r->g, &e)) {
      req_error_from(r, &e);
      return;
    }
    buf_free(&r->body);
  }
  gen_request *g = &r->g;
  if (g->model && strcmp(g->model, a->model_name)) {
    req_error(r, API_ERR_MODEL_NOT_FOUND, "model",
              "model '%s' does not exist (this server serves '%s')", g->model, a->model_name);
    return;
  }

  /* session */
  const char *hid = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "X-Session-Id");
  if (hid && !session_id_valid(hid, strlen(hid))) {
    req_error(r, API_ERR_INVALID_VALUE, "X-Session-Id",
              "X-Session-Id must be 1-128 characters of [A-Za-z0-9._-]");
    return;
  }
  if (hid && g->session_id && strcmp(hid, g->session_id)) {
    req_error(r, API_ERR_INVALID_VALUE, "session_id",
              "'session_id' differs from the X-Session-Id header");
    return;
  }
  const char *sid = hid ? hid : g->session_id;
  session *s = NULL;
  if (sid) {
    snprintf(r->session_id, sizeof r->session_id, "%s", sid);
    st_status st = req_find_session(r, sid, &s);
    if (st == ST_PENDING) return; /* the store looks for it; this handler runs again */
    if (st == ST_FOUND && s->busy) {
      req_error(r, API_ERR_SESSION_BUSY, "session_id",
                "session %s is serving another request", sid);
      return;
    }
    if (st != ST_FOUND && st != ST_MISSING) { /* MISSING: created below, once the request is good */
      req_session_error(r, sid, st);
      return;
    }
  }

  /* several choices: in a session, the memory keeps one of them, named by the request */
  int groups = kind == JOB_CHAT ? 1 : g->n_prompts, per = g->best_of;
  if (sid && groups > 1) {
    req_error(r, API_ERR_INVALID_VALUE, "prompt",
              "a session continues one text: send one prompt per request in a session");
    return;
  }
  if (sid && per > g->n) {
    req_error(r, API_ERR_INVALID_VALUE, "best_of",
              "'best_of' greater than 'n' is not supported in a session");
    return;
  }
  if (sid && per > 1 && g->session_choice < 0) {
    req_error(r, API_ERR_INVALID_VALUE, "n",
              "in a session, n > 1 needs 'session_choice': the index of the choice whose text "
              "the session's memory keeps (the others are forks, discarded after the request)");
    return;
  }
  if (!sid && g->session_choice >= 0) {
    req_error(r, API_ERR_INVALID_VALUE, "session_choice",
              "'session_choice' applies to requests in a session");
    return;
  }

  /* what this turn feeds */
  const char *text = g->prompt;
  size_t text_len = g->prompt_len;
  if (kind == JOB_CHAT) {
    session empty;
    memset(&empty, 0, sizeof empty);
    chat_plan_turn(&a->tpl, s ? s : &empty, g->msgs, g->n_msgs, g->history, &r->plan);
    r->have_plan = 1;
    text = r->plan.text.p ? r->plan.text.p : "";
    text_len = r->plan.text.len;
  }
  int32_t *toks = NULL;
  size_t ntok = 0;
  if (g->prompt_ids) {
    ntok = g->n_prompt_ids;
    toks = xmalloc(sizeof *toks * (ntok ? ntok : 1));
    memcpy(toks, g->prompt_ids, sizeof *toks * ntok);
  } else if (text_len) {
    xl_error xe;
    memset(&xe, 0, sizeof xe);
    if (xl_tokenize(a->model, text, text_len, &toks, &ntok, &xe) != XL_OK) {
      req_error(r, API_ERR_TOKENIZER_ERROR, prompt_param(r),
                "cannot tokenize the %s: %s", prompt_param(r), xe.message);
      return;
    }
  }
  if (ntok > (size_t)a->cfg->max_prompt_tokens) {
    free(toks);
    req_error(r, API_ERR_PROMPT_TOO_LONG, prompt_param(r),
              "this request feeds %zu tokens; the limit is %lld (max_prompt_tokens)", ntok,
              a->cfg->max_prompt_tokens);
    return;
  }
  int reset = r->have_plan && r->plan.kind == PLAN_RESET;
  int has_pending = s && s->pending >= 0 && !reset;
  if (ntok == 0 && !has_pending && g->max_tokens > 0) {
    free(toks);
    req_error(r, API_ERR_EMPTY_PROMPT, prompt_param(r),
              "the prompt is empty and the session holds nothing to continue from");
    return;
  }
  /* the other prompts of a list (completions without a session) */
  int32_t **ptoks = NULL;
  size_t *pn = NULL;
  if (groups > 1) {
    ptoks = xcalloc((size_t)groups, sizeof *ptoks);
    pn = xcalloc((size_t)groups, sizeof *pn);
  }
  for (int p = 1; p < groups; p++) {
    const gen_prompt *gp = &g->prompts[p];
    char param[32];
    snprintf(param, sizeof param, "prompt[%d]", p);
    api_err bad = API_ERR_NONE;
    xl_error pe;
    memset(&pe, 0, sizeof pe);
    if (gp->ids) {
      pn[p] = gp->n_ids;
      ptoks[p] = xmalloc(sizeof(int32_t) * (pn[p] ? pn[p] : 1));
      memcpy(ptoks[p], gp->ids, sizeof(int32_t) * pn[p]);
    } else if (gp->len && xl_tokenize(a->model, gp->text, gp->len, &ptoks[p], &pn[p], &pe) != XL_OK) {
      bad = API_ERR_TOKENIZER_ERROR;
    }
    if (!bad && pn[p] > (size_t)a->cfg->max_prompt_tokens) bad = API_ERR_PROMPT_TOO_LONG;
    if (!bad && pn[p] == 0) bad = API_ERR_EMPTY_PROMPT; /* a list's prompts each feed something */
    if (bad) {
      size_t count = pn[p];
      for (int q = 1; q < groups; q++) free(ptoks[q]);
      free(ptoks);
      free(pn);
      free(toks);
      if (bad == API_ERR_TOKENIZER_ERROR)
        req_error(r, bad, param, "cannot tokenize %s: %s", param, pe.message);
      else if (bad == API_ERR_PROMPT_TOO_LONG)
        req_error(r, bad, param,
                  "%s has %zu tokens; the limit is %lld (max_prompt_tokens)", param, count,
                  a->cfg->max_prompt_tokens);
      else
        req_error(r, bad, param, "%s is empty", param);
      return;
    }
  }
  if (!sched_has_room_for(a->sched, groups * per)) {
    for (int q = 1; q < groups; q++) free(ptoks[q]);
    free(ptoks);
    free(pn);
    free(toks);
    ctr_add(&g_metrics.rejected_queue_full, 1);
    r->retry_after = "1";
    req_error(r, API_ERR_QUEUE_FULL,
              NULL, "the server is at capacity (max_running + max_queue); retry shortly");
    return;
  }

  /* commit: from here on the request will run */
  xl_error xe;
  memset(&xe, 0, sizeof xe);
  if (sid && !s) {
    s = st_create(a->sessions, sid, r->owner, &xe);
  } else if (!sid) {
    s = session_new(a->model, &xe);
    r->sess_stateless = 1;
  }
  if (!s) {
    for (int q = 1; q < groups; q++) free(ptoks[q]);
    free(ptoks);
    free(pn);
    free(toks);
    req_error(r, API_ERR_SESSION_CREATE_FAILED, NULL, "cannot create a session: %s",
              xe.message);
    return;
  }
  if (reset) {
    session_reset(s);
    s->unsaved = 1; /* the store still has the old conversation */
    r->sess_reset = 1;
    ctr_add(&g_metrics.session_resets, 1);
  }
  if (!r->sess_stateless) st_acquire(a->sessions, s);
  r->sess = s;

  job *j = job_new();
  r->job = j;
  j->owner = r;
  j->kind = kind;
  j->model = a->model;
  j->sess = s;
  j->n_input = (int)ntok + (has_pending ? 1 : 0);
  j->input = xmalloc(sizeof(int32_t) * (size_t)(j->n_input ? j->n_input : 1));
  if (has_pending) j->input[0] = s->pending;
  if (ntok) memcpy(j->input + (has_pending ? 1 : 0), toks, sizeof(int32_t) * ntok);
  free(toks);
  j->input_has_pending = has_pending;
  j->n_prompt = (int)ntok;
  j->max_tokens = (int)g->max_tokens;
  j->sampling = g->sampling;
  j->seeded = g->seeded;
  j->index = sid && g->session_choice > 0 ? g->session_choice : 0;
  if (g->seeded) xl_rng_seed(&j->rng, g->seed + (uint64_t)j->index); /* choice k: seed + k */
  else j->rng = s->rng;
  j->stream = g->stream;
  j->include_usage = g->include_usage;
  j->n_top = g->n_top;
  j->constraint = g->constraint; /* the job owns the compiled schema from here */
  g->constraint = NULL;
  if (g->n_bias) {
    j->n_bias = g->n_bias;
    j->bias_ids = xmalloc(sizeof *j->bias_ids * (size_t)g->n_bias);
    j->bias_vals = xmalloc(sizeof *j->bias_vals * (size_t)g->n_bias);
    memcpy(j->bias_ids, g->bias_ids, sizeof *j->bias_ids * (size_t)g->n_bias);
    memcpy(j->bias_vals, g->bias_vals, sizeof *j->bias_vals * (size_t)g->n_bias);
  }
  score_setup(j, g);
  for (int i = 0; i < g->n_stops; i++) job_add_stop(j, g->stops[i], g->stop_lens[i]);
  if (kind == JOB_CHAT) {
    job_add_stop(j, a->tpl.auto_stop, strlen(a->tpl.auto_stop));
    job_add_stop(j, a->tpl.extra_stop, strlen(a->tpl.extra_stop));
  }
  j->chunk = a->prefill_chunk;
  make_id(j);
  j->created = (long long)time(NULL);
  j->model_name = xstrdup(a->model_name);
  j->fingerprint = a->fingerprint;
  j->t_arrival = r->t_start;
  j->want_snapshot = !r->sess_stateless && st_persistent(a->sessions);
  j->hist = xmalloc(sizeof(int32_t) * (size_t)(j->max_tokens ? j->max_tokens : 1));
  xl_detok_init(&j->detok);
  if (groups * per > 1) make_others(r, groups, per, ptoks, pn);
  for (int q = 1; q < groups; q++) free(ptoks[q]);
  free(ptoks);
  free(pn);
  if (j->stream && kind == JOB_CHAT) { /* the role chunks (no worker has the jobs yet) */
    job **all = xmalloc(sizeof *all * (size_t)(1 + r->n_others));
    for (int i = 0; i <= r->n_others; i++) all[i] = job_at(r, i);
    qsort(all, (size_t)(1 + r->n_others), sizeof *all, by_index);
    for (int i = 0; i <= r->n_others; i++) {
      job_chunk_head(&j->out, all[i]);
      buf_adds(&j->out, "\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,"
                        "\"finish_reason\":null");
      job_chunk_tail(&j->out, all[i]);
    }
    free(all);
  }
  r->job_running = 1;
  req_ref(r); /* the job's reference, dropped in gen_on_done */
  a->n_jobs++;
  if (j->n_input == 0) { /* max_tokens 0 and nothing to feed: done already */
    if (j->stream) req_start_stream(r);
    for (int i = r->n_others; i >= 0; i--) {
      job *c = job_at(r, i);
      c->finish = FINISH_LENGTH;
      if (c->stream) job_emit_stream(c, 1);
      gen_on_job_done(r, c);
    }
    return;
  }
  job **all = xmalloc(sizeof *all * (size_t)(1 + r->n_others));
  for (int i = 0; i <= r->n_others; i++) all[i] = job_at(r, i);
  int failed = sched_submit_all(a->sched, all, 1 + r->n_others);
  free(all);
  if (failed) { /* cannot happen after sched_has_room_for */
    for (int k = r->n_others; k >= 0; k--) {
      job *c = job_at(r, k);
      c->finish = FINISH_ERROR;
      snprintf(c->error.message, sizeof c->error.message, "queue full");
      gen_on_job_done(r, c);
    }
    return;
  }
  /* events of the job reach the loop only after this handler returns */
  if (j->stream) req_start_stream(r);
  else req_suspend_for_job(r);
}

void gen_cancel(req *r, int by_drain) {
  if (!r->job_running) return;
  if (by_drain) r->cancelled_by_drain = 1;
  if (!r->main_done) sched_cancel(r->a->sched, r->job);
  for (int i = 0; i < r->n_others; i++) sched_cancel(r->a->sched, r->others[i]); /* a no-op once done */
}

void gen_on_output(req *r) {
  if (r->ping_open) uv_timer_again(&r->ping);
  req_kick(r);
}

/* Records what this turn did to the session (loop thread; the worker is done with it). */
static void update_session(req *r) {
  job *j = r->job;
  session *s = r->sess;
  if (!j->seeded) s->rng = j->rng;
  int fed = j->pos > 0 || j->decoding;
  int completed_turn = j->finish == FINISH_STOP || j->finish == FINISH_LENGTH ||
                       (j->finish == FINISH_CANCELLED && j->decoding);
  if (r->g.kind == JOB_CHAT) {
    if (completed_turn) {
      for (int i = r->plan.first; i < r->g.n_msgs; i++) {
        const chat_message *m = &r->g.msgs[i];
        session_push_msg(s, m->role, chat_hash(m->role, m->content, m->len));
      }
      session_push_msg(s, ROLE_ASSISTANT, chat_hash(ROLE_ASSISTANT, j->reply.p ? j->reply.p : "", j->reply.len));
      s->chat = CHAT_MESSAGES;
      session_set_tail(s, j->tail.p, j->tail.len);
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
  if (!r->main_done || r->others_left || r->commit_wait) return;
  r->job_running = 0;
  r->a->n_jobs--;
  gen_finish(r);
}

/* durability turn: the turn's state is committed (or the commit failed): answer now */
static void on_turn_committed(void *ctx, int status, const char *msg) {
  req *r = ctx;
  if (status) r->store_err = xstrdup(msg && *msg ? msg : "store error");
  r->store_conflict = status == -2;
  r->commit_wait = 0;
  maybe_finish(r);
  req_unref(r); /* the commit's reference */
}

void gen_on_job_done(req *r, job *j) {
  if (j == r->job) {
    gen_on_done(r);
    return;
  }
  if (j->own_session) { /* a choice's fork: gone with its job */
    session_free(j->sess);
    j->sess = NULL;
  }
  if (j->finish == FINISH_ERROR)
    xlog_msg("error", "generation_failed", "request %s (choice %d): %s", r->request_id, j->index,
             j->error.message);
  r->others_left--;
  if (r->main_done && !r->others_left) {
    if (r->job->stream) req_kick(r);
    maybe_finish(r);
  }
}

void gen_on_done(req *r) {
  job *j = r->job;
  app *a = r->a;
  if (j->finish != FINISH_STOP && j->finish != FINISH_LENGTH) gen_cancel(r, 0); /* the others too */
  r->main_done = 1;
  update_session(r);
  r->held_tokens = r->sess_stateless ? 0 : session_tokens(r->sess);
  if (r->sess_stateless) {
    session_free(r->sess);
  } else {
    /* the session stays busy until st_turn_end releases it (after the commit, durability turn) */
    int fed = j->pos > 0 || j->decoding;
    uint8_t *core = j->snap;
    j->snap = NULL;
    req_ref(r); /* the commit's, if it waits */
    int w = st_turn_end(a->sessions, r->sess, core, j->snap_len, fed, on_turn_committed, r);
    if (w == 1) {
      r->commit_wait = 1;
      if (j->stream) req_kick(r); /* the finish chunk goes out; [DONE] after the commit */
    } else {
      req_unref(r); /* not the last: the job's is still held */
      if (w < 0) r->store_err = xstrdup("the turn's state could not be serialised");
    }
  }
  r->sess = NULL;
  if (j->finish == FINISH_ERROR)
    xlog_msg("error", "generation_failed", "request %s: %s", r->request_id, j->error.message);
  maybe_finish(r);
}

/* The end of the response: the stream's tail, or the full body; drops the job's reference. */
static void gen_finish(req *r) {
  job *j = r->job;
  uint64_t held = r->held_tokens;
  api_err err = API_ERR_NONE;
  const char *err_msg = NULL;
  if (j->finish == FINISH_ERROR) err = API_ERR_GENERATION_FAILED, err_msg = j->error.message;
  else if (r->cancelled_by_drain) err = API_ERR_SHUTTING_DOWN;
  else if (r->store_err && j->finish != FINISH_CANCELLED && r->store_conflict)
    err = API_ERR_SESSION_CONFLICT, err_msg = r->store_err;
  else if (r->store_err && j->finish != FINISH_CANCELLED)
    err = API_ERR_STORE_FAILED, err_msg = r->store_err;
  char kept[600];
  if (err == API_ERR_SESSION_CONFLICT) {
    snprintf(kept, sizeof kept,
             "another replica committed a turn of this session first (%.300s); this turn was "
             "not kept: the session is at the other turn's version; send the request again "
             "with the conversation as it is now",
             err_msg);
    err_msg = kept;
  } else if (err == API_ERR_STORE_FAILED) {
    snprintf(kept, sizeof kept,
             "the turn could not be committed to the session store (%.400s); it was not kept: "
             "the session is back at its last committed turn, so retrying the request is safe",
             err_msg);
    err_msg = kept;
  }

  if (j->stream) {
    if (!r->client_gone && (j->finish != FINISH_CANCELLED || r->cancelled_by_drain)) {
      buf b;
      buf_init(&b);
      stream_tail(&b, r, j, held, err, err_msg);
      pthread_mutex_lock(&j->mu);
      buf_add(&j->out, b.p, b.len);
      pthread_mutex_unlock(&j->mu);
      buf_free(&b);
    }
    r->stream_complete = 1;
    if (r->ping_open) uv_timer_stop(&r->ping);
    req_kick(r);
  } else if (!r->mhd_done) {
    if (err) {
      if (err == API_ERR_STORE_FAILED)
        r->retry_after = "1"; /* the turn was not kept: a retry is safe once the store is back */
      req_error(r, err, err == API_ERR_SESSION_CONFLICT ? "session_id" : NULL, "%s",
                err_msg ? err_msg : api_err_get(err)->message);
    } else if (j->finish == FINISH_CANCELLED) {
      req_kick(r); /* client gone: the access handler closes */
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

void api_completions(req *r) { api_generate(r, JOB_COMPLETION); }

void api_chat_completions(req *r) { api_generate(r, JOB_CHAT); }
