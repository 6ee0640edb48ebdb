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

job *job_new(gen_params *p, session *s, int index, int32_t pending, const int32_t *toks,
             size_t ntok, void *owner) {
  job *j = xcalloc(1, sizeof *j);
  j->params = gen_params_ref(p);
  j->sess = s;
  j->index = index;
  j->owner = owner;
  job_feed *f = &j->feed;
  f->input_has_pending = pending >= 0;
  f->n_input = (int)ntok + f->input_has_pending;
  f->input = xmalloc(sizeof(int32_t) * (size_t)(f->n_input ? f->n_input : 1));
  if (pending >= 0) f->input[0] = pending;
  if (ntok) memcpy(f->input + f->input_has_pending, toks, sizeof(int32_t) * ntok);
  f->n_prompt = (int)ntok;
  j->run.next = -1;
  j->run.hist = xmalloc(sizeof(int32_t) * (size_t)(p->max_tokens ? p->max_tokens : 1));
  if (p->seeded) xl_rng_seed(&j->run.rng, p->seed + (uint64_t)index); /* choice k: seed + k */
  xl_detok_init(&j->text.detok);
  buf_init(&j->text.hold);
  buf_init(&j->text.reply);
  buf_init(&j->text.tail);
  j->tools.is_call = p->tools == TOOLS_FORCED;
  buf_init(&j->stream.head);
  buf_init(&j->stream.out);
  pthread_mutex_init(&j->stream.mu, NULL);
  atomic_init(&j->cancel, 0);
  return j;
}

gen_params *gen_params_new(void) {
  gen_params *p = xcalloc(1, sizeof *p);
  p->refs = 1;
  p->n_top = -1;
  p->score_top = -1;
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
  free(j->feed.input);
  free(j->choices.sibs);
  free(j->run.hist);
  free(j->run.adj);
  free(j->run.jc);
  free(j->run.snap);
  buf_free(&j->text.hold);
  buf_free(&j->text.reply);
  buf_free(&j->text.tail);
  free(j->text.recs);
  free(j->score.targets);
  free(j->score.lp);
  free(j->score.recs);
  free(j->score.ranks);
  free(j->score.rows);
  buf_free(&j->stream.head);
  buf_free(&j->stream.out);
  pthread_mutex_destroy(&j->stream.mu);
  gen_params_unref(j->params);
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
  if (j->tools.is_call && j->run.finish == FINISH_STOP) return "tool_calls";
  return finish_name(j->run.finish);
}

static void release(job *j, size_t n) {
  if (!n) return;
  buf_add(&j->text.reply, j->text.hold.p, n);
  buf_consume(&j->text.hold, n);
}

/* Releases what cannot begin a stop string; on a match, releases the text before it and moves
 * the rest to tail. Returns 1 on a match. */
static int check_stop(job *j) {
  const gen_params *p = j->params;
  buf *hold = &j->text.hold;
  size_t best = (size_t)-1;
  for (int i = 0; i < p->n_stops; i++) {
    const char *at = memmem(hold->p ? hold->p : "", hold->len, p->stops[i], strlen(p->stops[i]));
    if (at && (size_t)(at - hold->p) < best) best = (size_t)(at - hold->p);
  }
  if (best != (size_t)-1) {
    release(j, best);
    buf_add(&j->text.tail, hold->p, hold->len);
    buf_clear(hold);
    return 1;
  }
  size_t keep = 0;
  for (int i = 0; i < p->n_stops; i++) {
    size_t sl = strlen(p->stops[i]);
    size_t k = sl - 1 < hold->len ? sl - 1 : hold->len;
    for (; k > keep; k--)
      if (!memcmp(hold->p + hold->len - k, p->stops[i], k)) {
        keep = k;
        break;
      }
  }
  release(j, hold->len - keep);
  return 0;
}

static void detok_into(job *j, int32_t t, buf *dst, int flush) {
  char tmp[8192];
  size_t n = flush ? xl_detok_flush(j->params->model, &j->text.detok, tmp, sizeof tmp)
                   : xl_detok_push(j->params->model, &j->text.detok, t, tmp, sizeof tmp);
  if (n > sizeof tmp) n = 0; /* cannot happen with vocab entries < 8 KiB (checked at load) */
  buf_add(dst, tmp, n);
  j->text.detok_out += n;
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
static int constrained(const job *j) { return j->params->constraint && !j->tools.free_text; }

/* Structured output: every token whose bytes cannot continue the document gets -inf. Tools
 * auto, first token: a token whose first byte cannot start a call is text and stays; one that
 * starts like a call must continue it. */
static void mask_constraint(job *j, int vocab) {
  if (!j->run.jc) {
    j->run.jc = xmalloc(sizeof *j->run.jc);
    jc_init(j->run.jc, j->params->constraint);
  }
  int choosing = j->params->tools == TOOLS_AUTO && !j->tools.is_call;
  uint8_t allowed[256];
  jc_allowed_bytes(j->run.jc, allowed);
  unsigned char raw[256];
  for (int t = 0; t < vocab; t++) {
    size_t n = xl_token_bytes(j->params->model, t, 0, (char *)raw, sizeof raw);
    if (choosing && (n == 0 || n > sizeof raw || !allowed[raw[0]])) continue; /* text */
    int ok = n == 1 ? allowed[raw[0]] : n > 1 && n <= sizeof raw && jc_accepts(j->run.jc, raw, n);
    if (!ok) j->run.adj[t] = -INFINITY;
  }
}

void job_take_token(job *j, const float *lp, void *scratch, double now) {
  const gen_params *p = j->params;
  const xl_config *c = xl_model_config(p->model);
  const float *dist = lp;
  if (p->n_bias || constrained(j)) {
    if (!j->run.adj) j->run.adj = xmalloc(sizeof *j->run.adj * (size_t)c->vocab_size);
    memcpy(j->run.adj, lp, sizeof *j->run.adj * (size_t)c->vocab_size);
    dist = j->run.adj;
  }
  /* logit_bias: a shift of log-probabilities is a shift of logits */
  for (int i = 0; i < p->n_bias; i++) j->run.adj[p->bias_ids[i]] += p->bias_vals[i];
  if (constrained(j)) mask_constraint(j, c->vocab_size);
  int32_t t = xl_sample(dist, c->vocab_size, &p->sampling, j->run.hist, (size_t)j->run.n_gen,
                        &j->run.rng, scratch, NULL);
  float chosen = lp[t]; /* logprobs report the model's distribution, before any bias */
  j->run.sum_lp += chosen;
  if (constrained(j)) {
    unsigned char raw[256];
    size_t n = xl_token_bytes(p->model, t, 0, (char *)raw, sizeof raw);
    if (p->tools == TOOLS_AUTO && !j->tools.is_call) { /* the first token decides */
      uint8_t allowed[256];
      jc_allowed_bytes(j->run.jc, allowed);
      if (n >= 1 && n <= sizeof raw && allowed[raw[0]]) j->tools.is_call = 1;
      else j->tools.free_text = 1;
    }
    for (size_t i = 0; !j->tools.free_text && i < n && n <= sizeof raw; i++)
      jc_step(j->run.jc, raw[i]); /* allowed: masked */
  }
  j->run.hist[j->run.n_gen++] = t;
  j->sess->pending = t; /* sampled, not fed: the memory + pending is the transcript */
  j->run.next = t;
  j->run.decoding = 1;
  ctr_add(&g_metrics.tokens_out, 1);
  if (j->run.t_first_token == 0) {
    j->run.t_first_token = now;
    hist_observe(&g_metrics.ttft, now - p->t_arrival);
  } else {
    hist_observe(&g_metrics.inter_token, now - j->run.t_last_token);
  }
  j->run.t_last_token = now;
  if (p->n_top >= 0) {
    if (j->text.n_recs == j->text.cap_recs) {
      j->text.cap_recs = j->text.cap_recs ? 2 * j->text.cap_recs : 16;
      j->text.recs = xrealloc(j->text.recs, sizeof *j->text.recs * (size_t)j->text.cap_recs);
    }
    tok_rec *r = &j->text.recs[j->text.n_recs++];
    r->id = t;
    r->lp = chosen;
    r->off = detok_place(p->model, &j->text.detok, j->text.detok_out);
    r->n_top = p->n_top ? xl_top_logprobs(lp, c->vocab_size, p->n_top, r->top_ids, r->top_lps) : 0;
  }
  detok_into(j, t, &j->text.hold, 0);
  if (j->tools.is_call) { /* a call ends with its grammar: stop strings do not cut it */
    release(j, j->text.hold.len);
  } else if (check_stop(j)) {
    job_finish(j, FINISH_STOP);
    return;
  }
  if (constrained(j) && jc_done(j->run.jc)) { /* the document is complete: all of it is the reply */
    release(j, j->text.hold.len);
    job_finish(j, FINISH_STOP);
    return;
  }
  if (j->run.n_gen >= p->max_tokens) {
    job_finish(j, FINISH_LENGTH);
    return;
  }
  if (p->stream) job_emit_stream(j, 0);
}

void job_release_siblings(job *j, const float *lp, void *scratch, double now) {
  j->choices.released = 1;
  for (int i = 0; i < j->choices.n_sibs; i++) {
    job *c = j->choices.sibs[i];
    if (c->run.finish != FINISH_NONE) continue;
    xl_state *fork = NULL;
    xl_error e;
    memset(&e, 0, sizeof e);
    if (xl_state_clone(j->sess->state, &fork, &e) != XL_OK) {
      c->run.error = e;
      job_finish(c, FINISH_ERROR);
      continue;
    }
    xl_state_free(c->sess->state);
    c->sess->state = fork;
    c->sess->digest = j->sess->digest;
    c->run.pos = c->feed.n_input; /* nothing of its own to feed */
    if (lp && c->params->max_tokens > 0) job_take_token(c, lp, scratch, now);
    else job_finish(c, FINISH_LENGTH);
  }
}

void job_finish(job *j, finish_reason reason) {
  switch (reason) {
    case FINISH_STOP: detok_into(j, 0, &j->text.tail, 1); break;
    case FINISH_LENGTH:
      detok_into(j, 0, &j->text.hold, 1);
      release(j, j->text.hold.len);
      break;
    default: /* cancelled, error: what was generated but not shown stays in the tail */
      detok_into(j, 0, &j->text.hold, 1);
      buf_add(&j->text.tail, j->text.hold.p, j->text.hold.len);
      buf_clear(&j->text.hold);
      break;
  }
  j->run.finish = reason;
  if (j->feed.want_snapshot && (j->run.pos > 0 || j->run.decoding) && !j->run.snap) {
    /* what the store lacks: the turn's delta when the store holds the state it continues,
     * else the whole state */
    xl_error e;
    memset(&e, 0, sizeof e);
    if (session_encode_for_store(j->sess, &j->run.snap, &j->run.snap_len, &e) != XL_OK)
      j->run.snap = NULL;
  }
  if (j->params->stream && (reason == FINISH_STOP || reason == FINISH_LENGTH))
    job_emit_stream(j, 1);
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
  if (j->params->n_top < 0) {
    buf_adds(b, "null");
    return off;
  }
  if (j->params->kind == JOB_CHAT) {
    buf_adds(b, "{\"content\":[");
    for (int i = from; i < to; i++) {
      const tok_rec *r = &j->text.recs[i];
      size_t n = token_text(j->params->model, r->id, raw, sizeof raw);
      off += n;
      buf_adds(b, i > from ? ",{\"token\":" : "{\"token\":");
      fmt_token_str(b, raw, n);
      buf_adds(b, ",\"logprob\":");
      fmt_float(b, r->lp);
      buf_adds(b, ",\"bytes\":");
      fmt_bytes(b, raw, n);
      buf_adds(b, ",\"top_logprobs\":[");
      for (int k = 0; k < r->n_top; k++) {
        size_t tn = token_text(j->params->model, r->top_ids[k], raw, sizeof raw);
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
    size_t n = token_text(j->params->model, j->text.recs[i].id, raw, sizeof raw);
    if (i > from) buf_addc(b, ',');
    fmt_token_str(b, raw, n);
  }
  buf_adds(b, "],\"token_logprobs\":[");
  for (int i = from; i < to; i++) {
    if (i > from) buf_addc(b, ',');
    fmt_float(b, j->text.recs[i].lp);
  }
  buf_adds(b, "],\"top_logprobs\":[");
  for (int i = from; i < to; i++) {
    const tok_rec *r = &j->text.recs[i];
    buf_adds(b, i > from ? ",{" : "{");
    for (int k = 0; k < r->n_top; k++) {
      size_t tn = token_text(j->params->model, r->top_ids[k], raw, sizeof raw);
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
    off = j->text.recs[i].off; /* the detokeniser decides where each token lands */
    buf_printf(b, "%zu", off);
    off += token_text(j->params->model, j->text.recs[i].id, raw, sizeof raw);
  }
  buf_adds(b, "]}");
  return off;
}

/* The chunks' common start, formatted once per job at first use (the request fields are final
 * by then). */
static void chunk_head_build(job *j) {
  buf *h = &j->stream.head;
  buf_adds(h, "data: {\"id\":");
  json_escape(h, j->params->id, strlen(j->params->id));
  buf_printf(h, ",\"object\":\"%s\",\"created\":%lld,\"model\":",
             j->params->kind == JOB_CHAT ? "chat.completion.chunk" : "text_completion",
             j->params->created);
  json_escape(h, j->params->model_name, strlen(j->params->model_name));
  j->stream.head_prefix_len = h->len;
  if (j->params->kind == JOB_CHAT)
    buf_printf(h, ",\"system_fingerprint\":\"%s\"", j->params->fingerprint);
  buf_printf(h, ",\"choices\":[{\"index\":%d,", j->index);
}

void job_chunk_prefix(buf *b, job *j) {
  if (!j->stream.head.len) chunk_head_build(j);
  buf_add(b, j->stream.head.p, j->stream.head_prefix_len);
}

void job_chunk_head(buf *b, job *j) {
  if (!j->stream.head.len) chunk_head_build(j);
  buf_add(b, j->stream.head.p, j->stream.head.len);
}

void job_chunk_tail(buf *b, const job *j) {
  buf_adds(b, "}]");
  if (j->params->include_usage) buf_adds(b, ",\"usage\":null");
  buf_adds(b, "}\n\n");
}

/* Tool-call deltas for the reply's new bytes (OpenAI's shape): a call's first delta carries
 * its index, id, type and name (once the name is complete) with "arguments": "", the next ones
 * its arguments' new bytes. Logprobs are not streamed with calls (the full answer has them). */
static void emit_tool_deltas(job *j, buf *b) {
  tool_call_span sp[TOOL_MAX_CALLS];
  int nc = tool_calls_parse(j->text.reply.p ? j->text.reply.p : "", j->text.reply.len, sp,
                            TOOL_MAX_CALLS);
  for (int k = 0; k < nc; k++) {
    const tool_call_span *c = &sp[k];
    if (k >= j->tools.named) {
      if (!c->name_len) break; /* later calls wait for this one's name */
      char id[96];
      tool_call_id(id, sizeof id, j->params->id, j->index, k);
      job_chunk_head(b, j);
      buf_printf(b, "\"delta\":{\"tool_calls\":[{\"index\":%d,\"id\":\"%s\",\"type\":\"function\","
                 "\"function\":{\"name\":", k, id);
      json_escape(b, j->text.reply.p + c->name_off, c->name_len);
      buf_adds(b, ",\"arguments\":\"\"}}]},\"logprobs\":null,\"finish_reason\":null");
      job_chunk_tail(b, j);
      j->tools.named = k + 1;
    }
    if (c->have_args && c->args_len > j->tools.args_sent[k]) {
      job_chunk_head(b, j);
      buf_printf(b, "\"delta\":{\"tool_calls\":[{\"index\":%d,\"function\":{\"arguments\":", k);
      json_escape(b, j->text.reply.p + c->args_off + j->tools.args_sent[k],
                  c->args_len - j->tools.args_sent[k]);
      buf_adds(b, "}}]},\"logprobs\":null,\"finish_reason\":null");
      job_chunk_tail(b, j);
      j->tools.args_sent[k] = c->args_len;
    }
  }
  j->stream.text_sent = j->text.reply.len;
  j->stream.recs_sent = j->text.n_recs;
}

void job_emit_stream(job *j, int final) {
  size_t new_text = j->text.reply.len - j->stream.text_sent;
  int new_recs = j->text.n_recs - j->stream.recs_sent;
  if (!final && !new_text && !new_recs) return;
  buf b;
  buf_init(&b);
  if (j->tools.is_call && j->params->kind == JOB_CHAT) {
    if (new_text || new_recs) emit_tool_deltas(j, &b);
  } else if (new_text || new_recs) {
    job_chunk_head(&b, j);
    if (j->params->kind == JOB_CHAT) {
      buf_adds(&b, "\"delta\":{\"content\":");
      json_escape(&b, j->text.reply.p + j->stream.text_sent, new_text);
      buf_adds(&b, "},\"logprobs\":");
    } else {
      buf_adds(&b, "\"text\":");
      json_escape(&b, j->text.reply.p + j->stream.text_sent, new_text);
      buf_adds(&b, ",\"logprobs\":");
    }
    j->stream.lp_off =
        job_fmt_logprobs(&b, j, j->stream.recs_sent, j->text.n_recs, j->stream.lp_off);
    buf_adds(&b, ",\"finish_reason\":null");
    job_chunk_tail(&b, j);
    j->stream.text_sent = j->text.reply.len;
    j->stream.recs_sent = j->text.n_recs;
  }
  if (final) {
    job_chunk_head(&b, j);
    buf_adds(&b, j->params->kind == JOB_CHAT ? "\"delta\":{},\"logprobs\":null"
                                             : "\"text\":\"\",\"logprobs\":null");
    buf_printf(&b, ",\"finish_reason\":\"%s\"", job_finish_name(j));
    job_chunk_tail(&b, j);
  }
  job *o = job_sink(j);
  pthread_mutex_lock(&o->stream.mu);
  buf_add(&o->stream.out, b.p, b.len);
  pthread_mutex_unlock(&o->stream.mu);
  buf_free(&b);
}

void job_fmt_token(buf *b, const xl_model *m, int32_t id) {
  char raw[4096];
  size_t n = token_text(m, id, raw, sizeof raw);
  fmt_token_str(b, raw, n);
}

void job_fmt_lp(buf *b, float v) { fmt_float(b, v); }
