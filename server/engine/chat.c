/*
 * chat.c: chat template rendering and history matching (see chat.h). Thread: loop thread.
 */
#include "chat.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

void chat_template_init(chat_template *t, const chat_options *c) {
  t->pre[ROLE_SYSTEM] = c->system_prefix;
  t->suf[ROLE_SYSTEM] = c->system_suffix;
  t->pre[ROLE_USER] = c->user_prefix;
  t->suf[ROLE_USER] = c->user_suffix;
  t->pre[ROLE_ASSISTANT] = c->assistant_prefix;
  t->suf[ROLE_ASSISTANT] = c->assistant_suffix;
  t->extra_stop = c->stop;
  buf b;
  buf_init(&b);
  buf_adds(&b, c->assistant_suffix);
  size_t n = strlen(c->user_prefix);
  while (n && (c->user_prefix[n - 1] == ' ' || c->user_prefix[n - 1] == '\t')) n--;
  buf_add(&b, c->user_prefix, n);
  t->auto_stop = buf_steal(&b);
}

void chat_template_free(chat_template *t) {
  free(t->auto_stop);
  t->auto_stop = NULL;
}

uint64_t chat_hash(chat_role role, const char *content, size_t len) {
  uint8_t r = (uint8_t)role;
  return fnv1a64(fnv1a64(FNV64_INIT, &r, 1), content, len);
}

void chat_render(const chat_template *t, const chat_message *m, buf *out) {
  buf_adds(out, t->pre[m->role]);
  buf_add(out, m->content, m->len);
  buf_adds(out, t->suf[m->role]);
}

static int same(const chat_msg_rec *r, const chat_message *m) {
  return r->role == (uint8_t)m->role && r->hash == chat_hash(m->role, m->content, m->len);
}

static void render_from(const chat_template *t, const chat_message *m, int from, int n, buf *b) {
  for (int i = from; i < n; i++) chat_render(t, &m[i], b);
  buf_adds(b, t->pre[ROLE_ASSISTANT]);
}

/* Text that continues an open assistant reply: its suffix, then the messages; the part that
 * the model already generated (the tail) is not fed again. */
static void continue_text(const chat_template *t, const session *s, const chat_message *m,
                          int from, int n, buf *out) {
  buf b;
  buf_init(&b);
  buf_adds(&b, t->suf[ROLE_ASSISTANT]);
  render_from(t, m, from, n, &b);
  size_t skip = 0;
  if (s->tail_len && s->tail_len <= b.len && !memcmp(b.p, s->tail, s->tail_len)) skip = s->tail_len;
  buf_add(out, b.p + skip, b.len - skip);
  buf_free(&b);
}

/* Length L of the longest run of the request's messages, from m[h], that equals the end of the
 * session's transcript (the last L messages, ending with the last reply), with at least one
 * transcript message dropped before it (after the h kept head messages) and at least one new
 * message after it. 0 when none. Linear: polynomial hashes over the message hashes, the winner
 * checked message by message. */
static int trimmed_overlap(const session *s, const chat_message *m, int n, int h) {
  int k = s->n_msgs;
  int max = n - h - 1;
  if (k - h - 1 < max) max = k - h - 1;
  if (max < 1) return 0;
  const uint64_t B = 0x100000001b3ULL;
  uint64_t pre = 0, suf = 0, pw = 1;
  int best = 0;
  for (int L = 1; L <= max; L++) {
    const chat_message *x = &m[h + L - 1];
    pre = pre * B + (chat_hash(x->role, x->content, x->len) ^ x->role);
    const chat_msg_rec *y = &s->msgs[k - L];
    suf = suf + (y->hash ^ y->role) * pw;
    pw *= B;
    if (pre == suf) best = L;
  }
  while (best > 0) { /* verify (a hash collision would only cost the shorter match) */
    int ok = 1;
    for (int i = 0; i < best && ok; i++) ok = same(&s->msgs[k - best + i], &m[h + i]);
    if (ok) return best;
    best--;
    while (best > 0) { /* next candidate: the request's message h+best-1 is the last reply */
      if (same(&s->msgs[k - 1], &m[h + best - 1])) break;
      best--;
    }
  }
  return 0;
}

void chat_plan_turn(const chat_template *t, const session *s, const chat_message *m, int n,
                    history_mode mode, chat_plan *p) {
  buf_init(&p->text);
  p->first = 0;
  int k = s->n_msgs;
  int msgs = s->chat == CHAT_MESSAGES;
  int full = msgs && n > k;
  for (int i = 0; full && i < k; i++)
    if (!same(&s->msgs[i], &m[i])) full = 0;
  /* trimmed from the front: the kept head is the system message when both start with it */
  int trimmed = 0;
  if (msgs && !full && mode == HISTORY_AUTO) {
    int h = k > 0 && m[0].role == ROLE_SYSTEM && same(&s->msgs[0], &m[0]) ? 1 : 0;
    int L = trimmed_overlap(s, m, n, h);
    if (L) trimmed = h + L;
  }
  int only_users = 1;
  for (int i = 0; i < n; i++)
    if (m[i].role != ROLE_USER) only_users = 0;

  if (s->chat == CHAT_EMPTY) {
    p->kind = PLAN_NEW;
  } else if (mode == HISTORY_APPEND) {
    p->kind = PLAN_APPEND;
  } else if (full) {
    p->kind = PLAN_FULL;
  } else if (trimmed) {
    p->kind = PLAN_TRIMMED;
  } else if (mode == HISTORY_FULL || s->chat == CHAT_DESYNC) {
    p->kind = PLAN_RESET;
  } else if (msgs && !only_users) {
    /* a history (it holds a reply or a system prompt) that does not continue this one */
    p->kind = PLAN_RESET;
  } else {
    p->kind = PLAN_APPEND; /* only new user messages (or raw completions before) */
  }

  switch (p->kind) {
    case PLAN_NEW:
    case PLAN_RESET:
      render_from(t, m, 0, n, &p->text);
      break;
    case PLAN_FULL:
      p->first = k;
      continue_text(t, s, m, k, n, &p->text);
      break;
    case PLAN_TRIMMED:
      p->first = trimmed;
      continue_text(t, s, m, trimmed, n, &p->text);
      break;
    case PLAN_APPEND:
      if (msgs) continue_text(t, s, m, 0, n, &p->text);
      else render_from(t, m, 0, n, &p->text);
      break;
  }
}

void chat_plan_free(chat_plan *p) { buf_free(&p->text); }

const char *plan_name(plan_kind k) {
  switch (k) {
    case PLAN_NEW: return "new";
    case PLAN_FULL: return "full_history";
    case PLAN_APPEND: return "append";
    case PLAN_TRIMMED: return "trimmed_history";
    default: return "reset";
  }
}
