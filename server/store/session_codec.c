/*
 * session_codec.c: the session envelope (see session_codec.h for the format). Pure functions;
 * any thread (sess_encode on the holder of the session it reads).
 */
#include "session_codec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "xl_le.h"
#include "util.h"

static const char MAGIC[8] = {'X', 'L', 'S', 'E', 'S', 'S', 0, 0};

static void putf64(uint8_t *p, double d) {
  uint64_t v;
  memcpy(&v, &d, 8);
  xl_put_le64(p, v);
}
static double getf64(const uint8_t *p) {
  uint64_t v = xl_get_le64(p);
  double d;
  memcpy(&d, &v, 8);
  return d;
}

uint8_t *sess_meta_encode(const session *s, uint64_t fingerprint, const uint8_t *core,
                          size_t core_len, size_t *meta_len) {
  size_t n = SESS_META_HEADER + 9 * (size_t)s->n_msgs + s->tail_len + 8;
  uint8_t *b = xcalloc(1, n);
  memcpy(b, MAGIC, 8);
  xl_put_le32(b + 8, SESS_ENVELOPE_VERSION);
  xl_put_le32(b + 12, SESS_META_HEADER);
  xl_put_le64(b + 16, fingerprint);
  putf64(b + 24, s->created);
  putf64(b + 32, s->last_used);
  xl_put_le64(b + 40, s->turns);
  xl_put_le64(b + 48, s->digest);
  xl_put_le64(b + 56, session_tokens(s));
  xl_put_le32(b + 64, (uint32_t)s->pending);
  xl_put_le32(b + 68, (uint32_t)s->chat);
  for (int i = 0; i < 4; i++) xl_put_le64(b + 72 + 8 * i, s->rng.s[i]);
  xl_put_le32(b + 104, (uint32_t)s->n_msgs);
  xl_put_le32(b + 108, (uint32_t)s->tail_len);
  xl_put_le64(b + 112, core_len);
  xl_put_le64(b + 120, core_len >= 8 ? xl_get_le64(core + core_len - 8) : 0);
  uint8_t *p = b + SESS_META_HEADER;
  for (int i = 0; i < s->n_msgs; i++, p += 9) {
    p[0] = s->msgs[i].role;
    xl_put_le64(p + 1, s->msgs[i].hash);
  }
  if (s->tail_len) memcpy(p, s->tail, s->tail_len);
  p += s->tail_len;
  xl_put_le64(p, fnv1a64(FNV64_INIT, b, (size_t)(p - b)));
  *meta_len = n;
  return b;
}

int sess_encode(const session *s, const xl_model *m, uint8_t **meta, size_t *meta_len,
                uint8_t **core, size_t *core_len, char *err, size_t cap) {
  xl_error xe;
  memset(&xe, 0, sizeof xe);
  if (xl_state_serialize(s->state, core, core_len, &xe) != XL_OK) {
    snprintf(err, cap, "%s", xe.message);
    return -1;
  }
  *meta = sess_meta_encode(s, xl_model_fingerprint(m), *core, *core_len, meta_len);
  return 0;
}

/* A unix time the daemon can hold and print (as a 64-bit integer): finite, from 1970 to
 * 2^40 s (some 34,000 years) later. */
static int time_valid(double t) { return t >= 0 && t <= 1099511627776.0; }

#define FAIL(st, ...)                   \
  do {                                  \
    snprintf(err, cap, __VA_ARGS__);    \
    return (st);                        \
  } while (0)

/* Header checks shared by sess_split and sess_decode; *total = the meta's length. */
static codec_status check_header(const uint8_t *b, size_t n, size_t *total, char *err,
                                 size_t cap) {
  if (n < SESS_META_HEADER + 8 || memcmp(b, MAGIC, 8))
    FAIL(CODEC_INVALID, "not an xlserve session envelope (bad magic or too short: %zu bytes)", n);
  uint32_t v = xl_get_le32(b + 8);
  if (v != SESS_ENVELOPE_VERSION)
    FAIL(CODEC_MISMATCH, "session envelope version %u; this build reads version %u", v,
         SESS_ENVELOPE_VERSION);
  if (xl_get_le32(b + 12) != SESS_META_HEADER)
    FAIL(CODEC_INVALID, "session envelope: bad header size %u", xl_get_le32(b + 12));
  uint64_t need = (uint64_t)SESS_META_HEADER + 9 * (uint64_t)xl_get_le32(b + 104) + xl_get_le32(b + 108) + 8;
  if (need > n)
    FAIL(CODEC_INVALID, "session envelope: truncated (%zu bytes, the record announces %llu)", n,
         (unsigned long long)need);
  *total = (size_t)need;
  return CODEC_OK;
}

codec_status sess_split(const uint8_t *b, size_t n, size_t *meta_len, char *err, size_t cap) {
  codec_status st = check_header(b, n, meta_len, err, cap);
  if (st) return st;
  uint64_t core = xl_get_le64(b + 112);
  if (core != n - *meta_len)
    FAIL(CODEC_INVALID,
         "session envelope: %zu bytes after the record, the record announces a state of %llu "
         "(truncated?)",
         n - *meta_len, (unsigned long long)core);
  return CODEC_OK;
}

/* Validates meta against the model and its core blob (a state blob or a state delta: the meta
 * names its length and checksum) and fills s's transcript record from it (not its state);
 * *tokens = the tokens it records. */
static codec_status read_record(const xl_model *m, const uint8_t *meta, size_t meta_len,
                                const uint8_t *core, size_t core_len, session *s,
                                uint64_t *tokens, char *err, size_t cap) {
  size_t total;
  codec_status st = check_header(meta, meta_len, &total, err, cap);
  if (st) return st;
  if (total != meta_len)
    FAIL(CODEC_INVALID, "session envelope: record of %zu bytes, its header announces %zu",
         meta_len, total);
  if (xl_get_le64(meta + total - 8) != fnv1a64(FNV64_INIT, meta, total - 8))
    FAIL(CODEC_INVALID, "session envelope: checksum mismatch (corrupted)");
  uint64_t fp = xl_get_le64(meta + 16), mine = xl_model_fingerprint(m);
  if (fp != mine)
    FAIL(CODEC_MISMATCH,
         "session made by another model (fingerprint %016llx; this server's model is %016llx)",
         (unsigned long long)fp, (unsigned long long)mine);
  if (xl_get_le64(meta + 112) != core_len)
    FAIL(CODEC_INVALID, "session state: %zu bytes, the record announces %llu (truncated?)",
         core_len, (unsigned long long)xl_get_le64(meta + 112));
  if (core_len < 8 || xl_get_le64(meta + 120) != xl_get_le64(core + core_len - 8))
    FAIL(CODEC_INVALID, "session state: does not belong to this record (checksum differs)");
  int32_t pending = (int32_t)xl_get_le32(meta + 64);
  uint32_t mode = xl_get_le32(meta + 68), n_msgs = xl_get_le32(meta + 104), tail_len = xl_get_le32(meta + 108);
  int vocab = xl_model_config(m)->vocab_size;
  if (pending < -1 || pending >= vocab)
    FAIL(CODEC_INVALID, "session envelope: pending token %d out of range", pending);
  if (mode > CHAT_DESYNC) FAIL(CODEC_INVALID, "session envelope: unknown chat mode %u", mode);
  double created = getf64(meta + 24), last_used = getf64(meta + 32);
  if (!time_valid(created) || !time_valid(last_used))
    FAIL(CODEC_INVALID, "session envelope: its created / last used time is not a time");
  if (n_msgs > INT32_MAX / 2) FAIL(CODEC_INVALID, "session envelope: too many messages");
  const uint8_t *p = meta + SESS_META_HEADER;
  for (uint32_t i = 0; i < n_msgs; i++)
    if (p[9 * (size_t)i] > ROLE_TOOL)
      FAIL(CODEC_INVALID, "session envelope: message %u has an unknown role", i);
  *tokens = xl_get_le64(meta + 56);
  s->created = created;
  s->last_used = last_used;
  s->turns = xl_get_le64(meta + 40);
  s->digest = xl_get_le64(meta + 48);
  s->pending = pending;
  s->chat = (chat_mode)mode;
  for (int i = 0; i < 4; i++) s->rng.s[i] = xl_get_le64(meta + 72 + 8 * i);
  s->n_msgs = 0;
  if (n_msgs > (uint32_t)s->cap_msgs) {
    s->msgs = xrealloc(s->msgs, sizeof *s->msgs * n_msgs);
    s->cap_msgs = (int)n_msgs;
  }
  for (uint32_t i = 0; i < n_msgs; i++, p += 9) {
    s->msgs[i].role = p[0];
    s->msgs[i].hash = xl_get_le64(p + 1);
  }
  s->n_msgs = (int)n_msgs;
  session_set_tail(s, (const char *)p, tail_len);
  return CODEC_OK;
}

/* The record's token count against the state's counter. */
static codec_status check_tokens(const session *s, uint64_t tokens, char *err, size_t cap) {
  uint64_t fed = xl_state_tokens_fed(s->state);
  if (tokens != fed + (s->pending >= 0 ? 1 : 0))
    FAIL(CODEC_INVALID, "session envelope: %llu tokens recorded, the state holds %llu",
         (unsigned long long)tokens, (unsigned long long)fed);
  return CODEC_OK;
}

codec_status sess_decode(const xl_model *m, const uint8_t *meta, size_t meta_len,
                         const uint8_t *core, size_t core_len, session **out, char *err,
                         size_t cap) {
  *out = NULL;
  session *s = xcalloc(1, sizeof *s);
  uint64_t tokens = 0;
  codec_status st = read_record(m, meta, meta_len, core, core_len, s, &tokens, err, cap);
  if (st == CODEC_OK && xl_state_blob_is_delta(core, core_len)) {
    snprintf(err, cap, "session state: a delta where a whole state was expected");
    st = CODEC_INVALID;
  }
  if (st == CODEC_OK) {
    xl_error xe;
    memset(&xe, 0, sizeof xe);
    xl_code rc = xl_state_deserialize(m, core, core_len, &s->state, &xe);
    if (rc != XL_OK) {
      snprintf(err, cap, "session state: %s", xe.message);
      st = rc == XL_MISMATCH ? CODEC_MISMATCH : CODEC_INVALID;
    }
  }
  if (st == CODEC_OK) st = check_tokens(s, tokens, err, cap);
  if (st) {
    session_free(s);
    return st;
  }
  *out = s;
  return CODEC_OK;
}

codec_status sess_apply_delta(const xl_model *m, session *s, const uint8_t *meta,
                              size_t meta_len, const uint8_t *delta, size_t delta_len, char *err,
                              size_t cap) {
  uint64_t tokens = 0;
  codec_status st = read_record(m, meta, meta_len, delta, delta_len, s, &tokens, err, cap);
  if (st) return st;
  xl_error xe;
  memset(&xe, 0, sizeof xe);
  xl_code rc = xl_state_delta_apply(s->state, delta, delta_len, &xe);
  if (rc != XL_OK) {
    snprintf(err, cap, "session state: %s", xe.message);
    return rc == XL_MISMATCH ? CODEC_MISMATCH : CODEC_INVALID;
  }
  return check_tokens(s, tokens, err, cap);
}
