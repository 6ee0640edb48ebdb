/*
 * session_codec.h: xlserve's session envelope, the portable form of a session: its transcript
 * record (pending token, RNG, digest, chat record, mode, times) around the core's state blob.
 * It is what the store keeps (meta + core, two fields of one row) and what
 * GET /v1/sessions/{id}/state exports (meta || core, one byte string).
 *
 * Envelope version 1 (little-endian):
 *    0 char[8] "XLSESS\0\0"          8 u32 version (1)          12 u32 header bytes (128)
 *   16 u64 model fingerprint        24 f64 created (unix s)     32 f64 last used (unix s)
 *   40 u64 turns                    48 u64 transcript digest (FNV-1a 64 over the int32 LE ids fed)
 *   56 u64 tokens (fed + pending)   64 i32 pending token (-1: none)   68 u32 chat mode
 *   72 u64[4] RNG state (xoshiro256**)
 *  104 u32 chat messages recorded  108 u32 tail bytes
 *  112 u64 core blob bytes         120 u64 core blob checksum (the core blob's last 8 bytes)
 *  128 messages, 9 bytes each (u8 role, u64 content hash), then the tail bytes,
 *      then u64 FNV-1a 64 of every meta byte before it.
 *  Then (exports) the core blob: xl_state_serialize's format, with its own version, model
 *  fingerprint and checksum.
 * In the store a row also holds deltas: a turn's record (the same meta) whose core is the
 * core's state delta of the turn (xl_state_delta_encode); its core fields name the delta.
 * The meta's checksum covers the core's length and checksum, so a meta and a core of two
 * different saves never pass as one session.
 *
 * Thread: any (pure functions); sess_encode reads a session: call it on the session's holder.
 */
#ifndef XLS_SESSION_CODEC_H
#define XLS_SESSION_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "session.h"

#define SESS_ENVELOPE_VERSION 1u
#define SESS_META_HEADER 128u

typedef enum {
  CODEC_OK = 0,
  CODEC_INVALID, /* not an envelope, truncated, checksum mismatch, inconsistent: corrupted */
  CODEC_MISMATCH /* a valid envelope of another model or another format version */
} codec_status;

/* The transcript record of s as a meta block (malloc'd) for the given core blob. Loop thread
 * (or s's holder). */
uint8_t *sess_meta_encode(const session *s, uint64_t fingerprint, const uint8_t *core,
                          size_t core_len, size_t *meta_len);

/* Serialises s: its state (core blob) and record (meta), both malloc'd. s's holder only.
 * Returns 0, or -1 with a message. */
int sess_encode(const session *s, const xl_model *m, uint8_t **meta, size_t *meta_len,
                uint8_t **core, size_t *core_len, char *err, size_t cap);

/* Validates meta + core against the model (everything: magic, versions, checksums, fingerprint,
 * shapes, token ranges, times, consistency) and rebuilds the session (id, owner, table fields unset;
 * last_used from the record). Never trusts the bytes. */
codec_status sess_decode(const xl_model *m, const uint8_t *meta, size_t meta_len,
                         const uint8_t *core, size_t core_len, session **out, char *err,
                         size_t cap);

/* Brings s (a decoded session) one turn forward: meta is its record after the turn, delta the
 * core's state delta of the turn (the meta's core fields name the delta). Validates like
 * sess_decode, and that the delta continues s's state. On failure s is not usable (its record
 * may be half replaced): discard it. */
codec_status sess_apply_delta(const xl_model *m, session *s, const uint8_t *meta,
                              size_t meta_len, const uint8_t *delta, size_t delta_len, char *err,
                              size_t cap);

/* An exported envelope (meta || core): the length of its meta part. */
codec_status sess_split(const uint8_t *b, size_t n, size_t *meta_len, char *err, size_t cap);

#endif
