/*
 * job.c: the per-generation logic that runs on the worker holding the job (sampling, stop
 * strings, streaming detokenisation, logprob records) and the OpenAI chunk formatting.
 * Thread: the holder of the job (see job.h); formatting helpers are pure.
 */
#define _GNU_SOURCE /* memmem */
#include "job.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "prefix_cache.h"
#include "tool_calls.h"
#include "util.h"

job *job_new(void) {
  job *j = xcalloc(1, sizeof *j);
  pthread_mutex_init(&j->mu, NULL);
  buf_init(&j->hold);
  buf_init(&j->reply);
  buf_init(&j->tail);
  buf_init(&j->out);
  buf_init(&j->head);
  j->n_top = -1;
  j->next = -1;
  atomic_init(&j->cancel, 0);
  return j;
}

gen_params *gen_params_new(void) {
  gen_params *p = xcalloc(1, sizeof *p);
  p->refs = 1;
  p->prefix_hint = -1;
  return p;
}

gen_params *gen_params_ref(gen_params *p) {
  p->refs++;
  return p;
}

static void free_stops(char **stops, int n) {
  for (int i = 0; i < n; i++) free(stops[i]);
  free(stops);
}

void gen_params_unref(gen_params *p) {
  if (!p || --p->refs > 0) return;
  free(p->bias_ids);
  free(p->bias_vals);
  jc_schema_free(p->constraint);
  free_stops(p->stops, p->n_stops);
  free(p->model_name);
  free(p);
}

void gen_params_add_stop(gen_params *p, const char *s, size_t n) {
  if (!n) return;
  for (int i = 0; i < p->n_stops; i++)
    if (strlen(p->stops[i]) == n && !memcmp(p->stops[i], s, n)) return;
  p->stops = xrealloc(p->stops, sizeof *p->stops * (size_t)(p->n_stops + 1));
  p->stops[p->n_stops++] = xstrndup(s, n);
}

void job_free(job *j) {
  if (!j) return;
  prefix_cache_release(j);
  free(j->input);
  free(j->hist);
  free(j->adj);
  free(j->jc);
  free(j->sibs);
  if (j->params) {
    gen_params_unref(j->params);
  } else {
    free(j->bias_ids);
    free(j->bias_vals);
    jc_schema_free(j->constraint);
    free_stops(j->stops, j->n_stops);
    free(j->model_name);
  }
  free(j->recs);
  free(j->snap);
  free(j->score_targets);
  free(j->score_lp);
  free(j->score_recs);
  free(j->score_ranks);
  free(j->score_rows);
  buf_free(&j->hold);
  buf_free(&j->reply);
  buf_free(&j->tail);
  buf_free(&j->out);
  buf_free(&j->head);
  pthread_mutex_destroy(&j->mu);
  free(j);
}

const char *finish_name(finish_reason r) {
  switch (r) {
    case FINISH_STOP: return "stop";
    case FINISH_LENGTH: return "length";
    case FINISH_CANCELLED: return "cancelled";
    case FINISH_ERROR: return "error";
    default: return "none";
  }
}

const char *job_finish_name(const job *j) {
  if (j->is_call && j->finish == FINISH_STOP) return "tool_calls";
  return finish_name(j->finish);
}

static void release(job *j, size_t n) {
  if (!n) return;
  buf_add(&j->reply, j->hold.p, n);
  buf_consume(&j->hold, n);
}

/* Releases what cannot begin a stop string; on a match, releases the text before it and moves
 * the rest to tail. Returns 1 on a match. */
static int check_stop(job *j) {
  size_t best = (size_t)-1;
  for (int i = 0; i < j->n_stops; i++) {
    const char *p = memmem(j->hold.p ? j->hold.p : "", j->hold.len, j->stops[i], strlen(j->stops[i]));
    if (p && (size_t)(p - j->hold.p) < best) best = (size_t)(p - j->hold.p);
  }
  if (best != (size_t)-1) {
    release(j, best);
    buf_add(&j->tail, j->hold.p, j->hold.len);
    buf_clear(&j->hold);
    return 1;
  }
  size_t keep = 0;
  for (int i = 0; i < j->n_stops; i++) {
    size_t sl = strlen(j->stops[i]);
    size_t k = sl - 1 < j->hold.len ? sl - 1 : j->hold.len;
    for (; k > keep; k--)
      if (!memcmp(j->hold.p + j->hold.len - k, j->stops[i], k)) {
        keep = k;
        break;
      }
  }
  release(j, j->hold.len - keep);
  return 0;
}

static void detok_into(job *j, int32_t t, buf *dst, int flush) {
  char tmp[8192];
  size_t n = flush ? xl_detok_flush(j->model, &j->detok, tmp, sizeof tmp)
                   : xl_detok_push(j->model, &j->detok, t, tmp, sizeof tmp);
  if (n > sizeof tmp) n = 0; /* cannot happen with vocab entries < 8 KiB (checked at load) */
  buf_add(dst, tmp, n);
  j->detok_out += n;
}

/* Where the next token's text starts in the decoded stream: the out bytes the detokeniser has
 * written, plus what it holds back (transfo_xl: the text a flush would write now; the other
 * kinds: an incomplete UTF-8 sequence's bytes). A held " @,@" or " @.@" (4 bytes) becomes ","
 * or "." when the next token brings its space, so it counts 1. */
static size_t detok_place(const xl_model *m, const xl_detok *d, size_t out) {
  if (xl_model_config(m)->tokenizer != XL_TOKENIZER_TRANSFO_XL) return out + (size_t)d->n_pending;
  xl_detok peek = *d;
  char tmp[8192];
  size_t n = xl_detok_flush(m, &peek, tmp, sizeof tmp);
  if (n > sizeof tmp) n = 0;
  for (int stage = 0; stage < 2; stage++)
    if (d->mx_num_n[stage] == 4 && n >= 3) n -= 3;
  return out + n;
}

size_t job_detok_placed(const xl_model *m, const int32_t *ids, int n, buf *text, size_t *offs) {
  xl_detok d;
  xl_detok_init(&d);
  char tmp[8192];
  size_t out = 0;
  for (int i = 0; i < n; i++) {
    if (offs) offs[i] = detok_place(m, &d, out);
    size_t w = xl_detok_push(m, &d, ids[i], tmp, sizeof tmp);
    if (w > sizeof tmp) w = 0; /* cannot happen with vocab entries < 8 KiB (checked at load) */
    if (text) buf_add(text, tmp, w);
    out += w;
  }
  size_t w = xl_detok_flush(m, &d, tmp, sizeof tmp);
  if (w > sizeof tmp) w = 0;
  if (text) buf_add(text, tmp, w);
  return out + w;
}

/* The constraint applies to the next token (tools auto: unless the reply became text). */
static int constrained(const job *j) { return j->constraint && !j->free_text; }

/* Structured output: every token whose bytes cannot continue the document gets -inf. Tools
 * auto, first token: a token whose first byte cannot start a call is text and stays; one that
 * starts like a call must continue it. */
static void mask_constraint(job *j, int vocab) {
  if (!j->jc) {
    j->jc = xmalloc(sizeof *j->jc);
    jc_init(j->jc, j->constraint);
  }
  int choosing = j->tools == TOOLS_AUTO && !j->is_call;
  uint8_t allowed[256];
  jc_allowed_bytes(j->jc, allowed);
  unsigned char raw[256];
  for (int t = 0; t < vocab; t++) {
    size_t n = xl_token_bytes(j->model, t, 0, (char *)raw, sizeof raw);
    if (choosing && (n == 0 || n > sizeof raw || !allowed[raw[0]])) continue; /* text */
    int ok = n == 1 ? allowed[raw[0]] : n > 1 && n <= sizeof raw && jc_accepts(j->jc, raw, n);
    if (!ok) j->adj[t] = -INFINITY;
  }
}

void job_take_token(job *j, const float *lp, void *scratch, double now) {
  const xl_config *c = xl_model_config(j->model);
  const float *dist = lp;
  if (j->n_bias || constrained(j)) {
    if (!j->adj) j->adj = xmalloc(sizeof *j->adj * (size_t)c->vocab_size);
    memcpy(j->adj, lp, sizeof *j->adj * (size_t)c->vocab_size);
    dist = j->adj;
  }
  /* logit_bias: a shift of log-probabilities is a shift of logits */
  for (int i = 0; i < j->n_bias; i++) j->adj[j->bias_ids[i]] += j->bias_vals[i];
  if (constrained(j)) mask_constraint(j, c->vocab_size);
  int32_t t = xl_sample(dist, c->vocab_size, &j->sampling, j->hist, (size_t)j->n_gen, &j->rng,
                        scratch, NULL);
  float chosen = lp[t]; /* logprobs report the model's distribution, before any bias */
  j->sum_lp += chosen;
  if (constrained(j)) {
    unsigned char raw[256];
    size_t n = xl_token_bytes(j->model, t, 0, (char *)raw, sizeof raw);
    if (j->tools == TOOLS_AUTO && !j->is_call) { /* the first token decides */
      uint8_t allowed[256];
      jc_allowed_bytes(j->jc, allowed);
      if (n >= 1 && n <= sizeof raw && allowed[raw[0]]) j->is_call = 1;
      else j->free_text = 1;
    }
    for (size_t i = 0; !j->free_text && i < n && n <= sizeof raw; i++)
      jc_step(j->jc, raw[i]); /* allowed: masked */
  }
  j->hist[j->n_gen++] = t;
  j->sess->pending = t; /* sampled, not fed: the memory + pending is the transcript */
  j->next = t;
  j->decoding = 1;
  ctr_add(&g_metrics.tokens_out, 1);
  if (j->t_first_token == 0) {
    j->t_first_token = now;
    hist_observe(&g_metrics.ttft, now - j->t_arrival);
  } else {
    hist_observe(&g_metrics.inter_token, now - j->t_last_token);
  }
  j->t_last_token = now;
  if (j->n_top >= 0) {
    if (j->n_recs == j->cap_recs) {
      j->cap_recs = j->cap_recs ? 2 * j->cap_recs : 16;
      j->recs = xrealloc(j->recs, sizeof *j->recs * (size_t)j->cap_recs);
    }
    tok_rec *r = &j->recs[j->n_recs++];
    r->id = t;
    r->lp = chosen;
    r->off = detok_place(j->model, &j->detok, j->detok_out);
    r->n_top = j->n_top ? xl_top_logprobs(lp, c->vocab_size, j->n_top, r->top_ids, r->top_lps) : 0;
  }
  detok_into(j, t, &j->hold, 0);
  if (j->is_call) { /* a call ends with its grammar: stop strings do not cut it */
    release(j, j->hold.len);
  } else if (check_stop(j)) {
    job_finish(j, FINISH_STOP);
    return;
  }
  if (constrained(j) && jc_done(j->jc)) { /* the document is complete: all of it is the reply */
    release(j, j->hold.len);
    job_finish(j, FINISH_STOP);
    return;
  }
  if (j->n_gen >= j->max_tokens) {
    job_finish(j, FINISH_LENGTH);
    return;
  }
  if (j->stream) job_emit_stream(j, 0);
}

void job_release_siblings(job *j, const float *lp, void *scratch, double now) {
  j->sibs_released = 1;
  for (int i = 0; i < j->n_sibs; i++) {
    job *c = j->sibs[i];
    if (c->finish != FINISH_NONE) continue;
    xl_state *fork = NULL;
    xl_error e;
    memset(&e, 0, sizeof e);
    if (xl_state_clone(j->sess->state, &fork, &e) != XL_OK) {
      c->error = e;
      job_finish(c, FINISH_ERROR);
      continue;
    }
    xl_state_free(c->sess->state);
    c->sess->state = fork;
    c->sess->digest = j->sess->digest;
    c->pos = c->n_input; /* nothing of its own to feed */
    if (lp && c->max_tokens > 0) job_take_token(c, lp, scratch, now);
    else job_finish(c, FINISH_LENGTH);
  }
}

void job_finish(job *j, finish_reason reason) {
  switch (reason) {
    case FINISH_STOP:
      detok_into(j, 0, &j->tail, 1);
      break;
    case FINISH_LENGTH:
      detok_into(j, 0, &j->hold, 1);
      release(j, j->hold.len);
      break;
    default: /* cancelled, error: what was generated but not shown stays in the tail */
      detok_into(j, 0, &j->hold, 1);
      buf_add(&j->tail, j->hold.p, j->hold.len);
      buf_clear(&j->hold);
      break;
  }
  j->finish = reason;
  if (j->want_snapshot && (j->pos > 0 || j->decoding) && !j->snap) {
    /* what the store lacks: the turn's delta when the store holds the state it continues,
     * else the whole state */
    xl_error e;
    memset(&e, 0, sizeof e);
    if (session_encode_for_store(j->sess, &j->snap, &j->snap_len, &e) != XL_OK) j->snap = NULL;
  }
  if (j->stream && (reason == FINISH_STOP || reason == FINISH_LENGTH)) job_emit_stream(j, 1);
}

/* ---- formatting ---- */

static void fmt_float(buf *b, float v) {
  if (!isfinite(v)) v = -9999.0f;
  buf_printf(b, "%.9g", (double)v);
}

/* The token's text for logprobs: its bytes when they are valid UTF-8 on their own, else
 * "bytes:\xNN..." (OpenAI's convention); exact bytes go to the "bytes" arrays. */
static size_t token_text(const xl_model *m, int32_t id, char *raw, size_t cap) {
  size_t n = xl_token_bytes(m, id, 0, raw, cap);
  return n > cap ? 0 : n;
}

static void fmt_token_str(buf *b, const char *raw, size_t n) {
  if (utf8_valid(raw, n)) {
    json_escape(b, raw, n);
    return;
  }
  buf t;
  buf_init(&t);
  buf_adds(&t, "bytes:");
  for (size_t i = 0; i < n; i++) buf_printf(&t, "\\x%02x", (unsigned char)raw[i]);
  json_escape(b, t.p, t.len);
  buf_free(&t);
}

static void fmt_bytes(buf *b, const char *raw, size_t n) {
  buf_addc(b, '[');
  for (size_t i = 0; i < n; i++) buf_printf(b, "%s%u", i ? "," : "", (unsigned char)raw[i]);
  buf_addc(b, ']');
}

size_t job_fmt_logprobs(buf *b, const job *j, int from, int to, size_t off) {
  char raw[4096];
  if (j->n_top < 0) {
    buf_adds(b, "null");
    return off;
  }
  if (j->kind == JOB_CHAT) {
    buf_adds(b, "{\"content\":[");
    for (int i = from; i < to; i++) {
      const tok_rec *r = &j->recs[i];
      size_t n = token_text(j->model, r->id, raw, sizeof raw);
      off += n;
      buf_adds(b, i > from ? ",{\"token\":" : "{\"token\":");
      fmt_token_str(b, raw, n);
      buf_adds(b, ",\"logprob\":");
      fmt_float(b, r->lp);
      buf_adds(b, ",\"bytes\":");
      fmt_bytes(b, raw, n);
      buf_adds(b, ",\"top_logprobs\":[");
      for (int k = 0; k < r->n_top; k++) {
        size_t tn = token_text(j->model, r->top_ids[k], raw, sizeof raw);
        buf_adds(b, k ? ",{\"token\":" : "{\"token\":");
        fmt_token_str(b, raw, tn);
        buf_adds(b, ",\"logprob\":");
        fmt_float(b, r->top_lps[k]);
        buf_adds(b, ",\"bytes\":");
        fmt_bytes(b, raw, tn);
        buf_addc(b, '}');
      }
      buf_adds(b, "]}");
    }
    buf_adds(b, "],\"refusal\":null}");
    return off;
  }
  /* legacy completions shape */
  buf_adds(b, "{\"tokens\":[");
  for (int i = from; i < to; i++) {
    size_t n = token_text(j->model, j->recs[i].id, raw, sizeof raw);
    if (i > from) buf_addc(b, ',');
    fmt_token_str(b, raw, n);
  }
  buf_adds(b, "],\"token_logprobs\":[");
  for (int i = from; i < to; i++) {
    if (i > from) buf_addc(b, ',');
    fmt_float(b, j->recs[i].lp);
  }
  buf_adds(b, "],\"top_logprobs\":[");
  for (int i = from; i < to; i++) {
    const tok_rec *r = &j->recs[i];
    buf_adds(b, i > from ? ",{" : "{");
    for (int k = 0; k < r->n_top; k++) {
      size_t tn = token_text(j->model, r->top_ids[k], raw, sizeof raw);
      if (k) buf_addc(b, ',');
      fmt_token_str(b, raw, tn);
      buf_addc(b, ':');
      fmt_float(b, r->top_lps[k]);
    }
    buf_addc(b, '}');
  }
  buf_adds(b, "],\"text_offset\":[");
  for (int i = from; i < to; i++) {
    if (i > from) buf_addc(b, ',');
    off = j->recs[i].off; /* the detokeniser decides where each token lands */
    buf_printf(b, "%zu", off);
    off += token_text(j->model, j->recs[i].id, raw, sizeof raw);
  }
  buf_adds(b, "]}");
  return off;
}

/* The chunks' common start, formatted once per job at first use (the request fields are final
 * by then, and unit tests fill them after job_new). */
static void chunk_head_build(job *j) {
  buf *h = &j->head;
  buf_adds(h, "data: {\"id\":");
  json_escape(h, j->id, strlen(j->id));
  buf_printf(h, ",\"object\":\"%s\",\"created\":%lld,\"model\":",
             j->kind == JOB_CHAT ? "chat.completion.chunk" : "text_completion", j->created);
  json_escape(h, j->model_name, strlen(j->model_name));
  j->head_prefix_len = h->len;
  if (j->kind == JOB_CHAT) buf_printf(h, ",\"system_fingerprint\":\"%s\"", j->fingerprint);
  buf_printf(h, ",\"choices\":[{\"index\":%d,", j->index);
}

void job_chunk_prefix(buf *b, job *j) {
  if (!j->head.len) chunk_head_build(j);
  buf_add(b, j->head.p, j->head_prefix_len);
}

void job_chunk_head(buf *b, job *j) {
  if (!j->head.len) chunk_head_build(j);
  buf_add(b, j->head.p, j->head.len);
}

void job_chunk_tail(buf *b, const job *j) {
  buf_adds(b, "}]");
  if (j->include_usage) buf_adds(b, ",\"usage\":null");
  buf_adds(b, "}\n\n");
}

/* Tool-call deltas for the reply's new bytes (OpenAI's shape): a call's first delta carries
 * its index, id, type and name (once the name is complete) with "arguments": "", the next ones
 * its arguments' new bytes. Logprobs are not streamed with calls (the full answer has them). */
static void emit_tool_deltas(job *j, buf *b) {
  tool_call_span sp[TOOL_MAX_CALLS];
  int nc = tool_calls_parse(j->reply.p ? j->reply.p : "", j->reply.len, sp, TOOL_MAX_CALLS);
  for (int k = 0; k < nc; k++) {
    const tool_call_span *c = &sp[k];
    if (k >= j->tc_named) {
      if (!c->name_len) break; /* later calls wait for this one's name */
      char id[96];
      tool_call_id(id, sizeof id, j->id, j->index, k);
      job_chunk_head(b, j);
      buf_printf(b, "\"delta\":{\"tool_calls\":[{\"index\":%d,\"id\":\"%s\",\"type\":\"function\","
                 "\"function\":{\"name\":", k, id);
      json_escape(b, j->reply.p + c->name_off, c->name_len);
      buf_adds(b, ",\"arguments\":\"\"}}]},\"logprobs\":null,\"finish_reason\":null");
      job_chunk_tail(b, j);
      j->tc_named = k + 1;
    }
    if (c->have_args && c->args_len > j->tc_args_sent[k]) {
      job_chunk_head(b, j);
      buf_printf(b, "\"delta\":{\"tool_calls\":[{\"index\":%d,\"function\":{\"arguments\":", k);
      json_escape(b, j->reply.p + c->args_off + j->tc_args_sent[k], c->args_len - j->tc_args_sent[k]);
      buf_adds(b, "}}]},\"logprobs\":null,\"finish_reason\":null");
      job_chunk_tail(b, j);
      j->tc_args_sent[k] = c->args_len;
    }
  }
  j->text_sent = j->reply.len;
  j->recs_sent = j->n_recs;
}

void job_emit_stream(job *j, int final) {
  size_t new_text = j->reply.len - j->text_sent;
  int new_recs = j->n_recs - j->recs_sent;
  if (!final && !new_text && !new_recs) return;
  buf b;
  buf_init(&b);
  if (j->is_call && j->kind == JOB_CHAT) {
    if (new_text || new_recs) emit_tool_deltas(j, &b);
  } else if (new_text || new_recs) {
    job_chunk_head(&b, j);
    if (j->kind == JOB_CHAT) {
      buf_adds(&b, "\"delta\":{\"content\":");
      json_escape(&b, j->reply.p + j->text_sent, new_text);
      buf_adds(&b, "},\"logprobs\":");
    } else {
      buf_adds(&b, "\"text\":");
      json_escape(&b, j->reply.p + j->text_sent, new_text);
      buf_adds(&b, ",\"logprobs\":");
    }
    j->lp_off = job_fmt_logprobs(&b, j, j->recs_sent, j->n_recs, j->lp_off);
    buf_adds(&b, ",\"finish_reason\":null");
    job_chunk_tail(&b, j);
    j->text_sent = j->reply.len;
    j->recs_sent = j->n_recs;
  }
  if (final) {
    job_chunk_head(&b, j);
    buf_adds(&b, j->kind == JOB_CHAT ? "\"delta\":{},\"logprobs\":null" : "\"text\":\"\",\"logprobs\":null");
    buf_printf(&b, ",\"finish_reason\":\"%s\"", job_finish_name(j));
    job_chunk_tail(&b, j);
  }
  job *o = job_sink(j);
  pthread_mutex_lock(&o->mu);
  buf_add(&o->out, b.p, b.len);
  pthread_mutex_unlock(&o->mu);
  buf_free(&b);
}

void job_fmt_token(buf *b, const xl_model *m, int32_t id) {
  char raw[4096];
  size_t n = token_text(m, id, raw, sizeof raw);
  fmt_token_str(b, raw, n);
}

void job_fmt_lp(buf *b, float v) { fmt_float(b, v); }
