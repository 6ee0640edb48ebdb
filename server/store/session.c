/*
 * session.c: one session's state and transcript record (see session.h for the threads).
 */
#include "session.h"

#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "util.h"

session *session_new(const xl_model *model, xl_error *err) {
  xl_state *state = NULL;
  if (xl_state_new(model, &state, err) != XL_OK) return NULL;
  return session_new_on(state);
}

session *session_new_on(xl_state *state) {
  xl_state_reset(state);
  session *s = xcalloc(1, sizeof *s);
  s->state = state;
  s->pending = -1;
  s->digest = FNV64_INIT;
  uint64_t seed;
  random_bytes(&seed, sizeof seed);
  xl_rng_seed(&s->rng, seed);
  s->created = s->last_used = now_wall();
  s->last_used_mono = now_mono();
  return s;
}

session *session_clone(const session *src, xl_error *err) {
  session *s = xcalloc(1, sizeof *s);
  if (xl_state_clone(src->state, &s->state, err) != XL_OK) {
    free(s);
    return NULL;
  }
  s->pending = src->pending;
  s->digest = src->digest;
  s->rng = src->rng;
  s->chat = src->chat;
  if (src->n_msgs) {
    s->msgs = xmalloc(sizeof *s->msgs * (size_t)src->n_msgs);
    memcpy(s->msgs, src->msgs, sizeof *s->msgs * (size_t)src->n_msgs);
    s->n_msgs = s->cap_msgs = src->n_msgs;
  }
  session_set_tail(s, src->tail, src->tail_len);
  s->turns = src->turns;
  s->created = s->last_used = now_wall();
  s->last_used_mono = now_mono();
  return s;
}

void session_free(session *s) {
  xl_state_free(session_free_but_state(s));
}

xl_state *session_free_but_state(session *s) {
  if (!s) return NULL;
  xl_state *state = s->state;
  free(s->msgs);
  free(s->tail);
  free(s);
  return state;
}

void session_reset(session *s) {
  xl_state_reset(s->state);
  s->pending = -1;
  s->digest = FNV64_INIT;
  s->chat = CHAT_EMPTY;
  s->n_msgs = 0;
  session_set_tail(s, "", 0);
  s->delta_ok = 0;
}

void session_set_tail(session *s, const char *t, size_t n) {
  free(s->tail);
  s->tail = n ? xstrndup(t, n) : NULL;
  s->tail_len = n;
}

void session_push_msg(session *s, chat_role role, uint64_t hash) {
  if (s->n_msgs == s->cap_msgs) {
    s->cap_msgs = s->cap_msgs ? 2 * s->cap_msgs : 8;
    s->msgs = xrealloc(s->msgs, sizeof *s->msgs * (size_t)s->cap_msgs);
  }
  s->msgs[s->n_msgs].role = (uint8_t)role;
  s->msgs[s->n_msgs].hash = hash;
  s->n_msgs++;
}

uint64_t session_tokens(const session *s) {
  return xl_state_tokens_fed(s->state) + (s->pending >= 0 ? 1 : 0);
}

size_t session_ram(const session *s) {
  return sizeof *s + xl_state_bytes(s->state) + sizeof(chat_msg_rec) * (size_t)s->cap_msgs +
         s->tail_len;
}

void session_digest_tokens(session *s, const int32_t *t, int n) {
  s->digest = fnv1a64(s->digest, t, sizeof(int32_t) * (size_t)n);
}

xl_code session_encode_for_store(const session *s, uint8_t **blob, size_t *n, xl_error *err) {
  if (s->delta_ok && s->delta_base < xl_state_tokens_fed(s->state))
    return xl_state_delta_encode(s->state, s->delta_base, blob, n, err);
  return xl_state_serialize(s->state, blob, n, err);
}
