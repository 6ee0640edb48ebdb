/*
 * job_score.c: prompt scoring for `echo` with `logprobs` and vLLM's `prompt_logprobs`. The
 * prompt goes through the normal prefill (chunks, memory carried); each chunk's forward also
 * returns, for every input row k, log p(input[k + 1] | memory, input[..k]) and, when
 * alternatives or ranks are wanted, the row's whole distribution (job->score.rows, [chunk,
 * vocab]), reduced here to the top alternatives and the scored token's rank.
 * The last input row has no target (its distribution samples the first generated token).
 * Threads: job_score_setup on the loop thread before submit; feed/rows on the worker holding
 * the job; the formatters on the loop thread after the job is done.
 */
#include <stdlib.h>
#include <string.h>

#include "job.h"
#include "util.h"

void job_score_setup(job *j) {
  size_t n = (size_t)(j->feed.n_input ? j->feed.n_input : 1);
  int top = j->params->score_top, rank = j->params->score_rank;
  j->score.prompt = 1;
  j->score.targets = xmalloc(sizeof(int32_t) * n);
  for (int k = 0; k < j->feed.n_input; k++)
    j->score.targets[k] = k + 1 < j->feed.n_input ? j->feed.input[k + 1] : -1;
  j->score.lp = xcalloc(n, sizeof(float));
  if (top > 0) j->score.recs = xcalloc(n, sizeof(tok_rec));
  if (rank) j->score.ranks = xcalloc(n, sizeof(int32_t));
}

void job_score_feed(job *j, xl_feed *f, int n) {
  f->targets = j->score.targets + j->run.pos;
  f->target_logprobs = j->score.lp + j->run.pos;
  if (j->params->score_top > 0 || j->params->score_rank) {
    size_t V = (size_t)xl_model_config(j->params->model)->vocab_size;
    if (!j->score.rows) j->score.rows = xmalloc(sizeof(float) * (size_t)j->params->chunk * V);
    (void)n; /* n <= chunk: the scheduler never feeds more than a chunk */
    f->row_logprobs = j->score.rows;
  }
}

void job_score_rows(job *j, int pos, int n) {
  if (!j->score.rows) return;
  const int V = xl_model_config(j->params->model)->vocab_size;
  for (int t = 0; t < n; t++) {
    int k = pos + t;
    int32_t target = j->score.targets[k];
    if (target < 0) continue;
    const float *row = j->score.rows + (size_t)t * (size_t)V; /* [vocab] */
    if (j->score.recs) {
      tok_rec *r = &j->score.recs[k];
      r->id = target;
      r->lp = j->score.lp[k];
      r->n_top = xl_top_logprobs(row, V, j->params->score_top, r->top_ids, r->top_lps);
    }
    if (j->score.ranks) {
      float lp = row[target];
      int above = 0;
      for (int v = 0; v < V; v++) above += row[v] > lp;
      j->score.ranks[k] = above + 1;
    }
  }
  /* the prompt is in: its rows are reduced (a request may hold 64 prompts, each one's rows
   * chunk x vocabulary floats) */
  if (pos + n >= j->feed.n_input) {
    free(j->score.rows);
    j->score.rows = NULL;
  }
}

/* the input row that scored prompt token p, or -1 (the first token without a pending one) */
static int scoring_row(const job *j, int p) { return p + (j->feed.input_has_pending ? 1 : 0) - 1; }

static int32_t prompt_token(const job *j, int p) {
  return j->feed.input[p + (j->feed.input_has_pending ? 1 : 0)];
}

/* pj's prompt tokens detokenised: appended to text (NULL: not kept), token p's start in
 * offs[p] (NULL: not kept); returns the text's length */
static size_t prompt_placed(const job *pj, buf *text, size_t *offs) {
  const int32_t *ids = pj->feed.input + (pj->feed.input_has_pending ? 1 : 0);
  return job_detok_placed(pj->params->model, ids, pj->feed.n_prompt, text, offs);
}

void job_echo_prompt(buf *b, const job *pj) { (void)prompt_placed(pj, b, NULL); }

static void fmt_top(buf *b, const job *j, const tok_rec *r, int n) {
  buf_addc(b, '{');
  for (int k = 0; k < n && k < r->n_top; k++) {
    if (k) buf_addc(b, ',');
    job_fmt_token(b, j->params->model, r->top_ids[k]);
    buf_addc(b, ':');
    job_fmt_lp(b, r->top_lps[k]);
  }
  buf_addc(b, '}');
}

void job_fmt_echo_logprobs(buf *b, const job *pj, const job *j) {
  const int np = pj->feed.n_prompt;
  buf_adds(b, "{\"tokens\":[");
  for (int p = 0; p < np; p++) {
    if (p) buf_addc(b, ',');
    job_fmt_token(b, j->params->model, prompt_token(pj, p));
  }
  for (int i = 0; i < j->text.n_recs; i++) {
    if (np || i) buf_addc(b, ',');
    job_fmt_token(b, j->params->model, j->text.recs[i].id);
  }
  buf_adds(b, "],\"token_logprobs\":[");
  for (int p = 0; p < np; p++) {
    if (p) buf_addc(b, ',');
    int k = scoring_row(pj, p);
    if (k < 0) buf_adds(b, "null");
    else job_fmt_lp(b, pj->score.lp[k]);
  }
  for (int i = 0; i < j->text.n_recs; i++) {
    if (np || i) buf_addc(b, ',');
    job_fmt_lp(b, j->text.recs[i].lp);
  }
  buf_adds(b, "],\"top_logprobs\":[");
  for (int p = 0; p < np; p++) {
    if (p) buf_addc(b, ',');
    int k = scoring_row(pj, p);
    if (k < 0) buf_adds(b, "null");
    else if (pj->score.recs) fmt_top(b, pj, &pj->score.recs[k], pj->params->n_top);
    else buf_adds(b, "{}");
  }
  for (int i = 0; i < j->text.n_recs; i++) {
    if (np || i) buf_addc(b, ',');
    fmt_top(b, j, &j->text.recs[i], j->text.recs[i].n_top);
  }
  buf_adds(b, "],\"text_offset\":[");
  /* the echoed text is the detokenised prompt then the reply (its own detokeniser stream):
   * offsets from the same placement as the reply's records */
  size_t *offs = xmalloc(sizeof *offs * (size_t)(np ? np : 1));
  size_t prompt_len = prompt_placed(pj, NULL, offs);
  for (int p = 0; p < np; p++) {
    if (p) buf_addc(b, ',');
    buf_printf(b, "%zu", offs[p]);
  }
  free(offs);
  for (int i = 0; i < j->text.n_recs; i++) {
    if (np || i) buf_addc(b, ',');
    buf_printf(b, "%zu", prompt_len + j->text.recs[i].off);
  }
  buf_adds(b, "]}");
}

static void fmt_vllm_entry(buf *b, const job *j, int32_t id, float lp, int rank) {
  buf_printf(b, "\"%d\":{\"logprob\":", (int)id);
  job_fmt_lp(b, lp);
  buf_printf(b, ",\"rank\":%d,\"decoded_token\":", rank);
  job_fmt_token(b, j->params->model, id);
  buf_addc(b, '}');
}

void job_fmt_prompt_logprobs(buf *b, const job *j, int top) {
  buf_addc(b, '[');
  for (int p = 0; p < j->feed.n_prompt; p++) {
    if (p) buf_addc(b, ',');
    int k = scoring_row(j, p);
    if (k < 0) {
      buf_adds(b, "null");
      continue;
    }
    int32_t id = prompt_token(j, p);
    buf_addc(b, '{');
    fmt_vllm_entry(b, j, id, j->score.lp[k], j->score.ranks ? j->score.ranks[k] : 0);
    if (j->score.recs)
      for (int a = 0; a < top && a < j->score.recs[k].n_top; a++) {
        const tok_rec *r = &j->score.recs[k];
        if (r->top_ids[a] == id) continue; /* already the first entry */
        buf_addc(b, ',');
        fmt_vllm_entry(b, j, r->top_ids[a], r->top_lps[a], a + 1);
      }
    buf_addc(b, '}');
  }
  buf_addc(b, ']');
}
