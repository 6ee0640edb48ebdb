/*
 * prefix_cache.h: the prefix cache. A new session (or a stateless request, or a reset one)
 * whose prompt starts with a token prefix fed before starts from the memory that prefix left
 * instead of feeding it again.
 *
 * Why it is exact: the scheduler cuts a prompt at multiples of its job's prefill chunk from the
 * prompt's start (scheduler.c), so the memory after the first k * chunk tokens of an empty
 * session depends on those tokens alone (and the model, its weights mode, the memory dtype and
 * the chunk). An entry holds that memory, packed (xl_state_pack: only the positions held), keyed
 * by all of those; a hit places it into the session's state slot for slot (xl_state_unpack)
 * and the job goes on from token k * chunk with the same cuts a fresh prefill makes: the same
 * bits, token for token.
 *
 * Which prefix: a job may give a hint, the prompt tokens shared by other requests (a chat's
 * leading system messages with their template); without one, the whole prompt but its last
 * token (a prompt repeated or extended). The boundary is the largest multiple of the chunk
 * within it; a lookup tries every boundary up to it, longest first; a job that found less
 * than it stores its state at that boundary once it has fed it (the worker packs it and
 * inserts it).
 *
 * Entries are copied into sessions, never shared with them: a session fed later, or the
 * cache's entry evicted, changes nothing in the other. Bytes: the packed states, at most the
 * `prefix_cache_mb` option and at most what the session table's RAM budget leaves after the
 * sessions (the cache yields first: prefix_cache_fit); least recently used entries go first.
 * An entry a job is about to copy is held by a reference and freed after its last one.
 *
 * Threads: every function may be called from any thread (one mutex); prefix_cache_attach by
 * the loop thread before the job is submitted, prefix_cache_apply and prefix_cache_capture by
 * the worker holding the job, prefix_cache_release by whoever frees the job.
 */
#ifndef XLS_PREFIX_CACHE_H
#define XLS_PREFIX_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "xl.h"

typedef struct prefix_cache prefix_cache;
typedef struct pc_entry pc_entry;
struct job;

/* max_bytes 0: disabled (prefix_cache_new returns NULL). */
prefix_cache *prefix_cache_new(const xl_model *model, size_t max_bytes);
void prefix_cache_free(prefix_cache *pc);

/* The session table's budget left after its sessions: the cache shrinks to fit (LRU) and
 * grows no further than that. Loop thread (session table). */
void prefix_cache_fit(prefix_cache *pc, size_t allowance);
size_t prefix_cache_bytes(prefix_cache *pc);
size_t prefix_cache_entries(prefix_cache *pc);

/* Loop thread, before submit: for a job whose session is empty and has nothing pending and
 * which does not score its prompt, looks up the longest cached prefix of its input within
 * hint tokens (hint < 0: the whole input); on a hit sets j->run.pos past it (the worker copies
 * the memory in before its first forward) and holds the entry; decides the boundary at which
 * the job's state is stored (j->prefix.store_at). */
void prefix_cache_attach(prefix_cache *pc, struct job *j, int hint);
/* Worker, before the job's first forward: copies the held entry into the session's state and
 * folds the prefix into its digest. 0, or -1 with j->run.error set. */
int prefix_cache_apply(struct job *j);
/* Worker, after a forward that brought j->run.pos to j->prefix.store_at: packs the session's
 * state and inserts it (an entry already there for the same prefix wins; the new one is
 * dropped). */
void prefix_cache_capture(struct job *j);
/* Drops the job's reference to the entry it copied (if any). Any thread. */
void prefix_cache_release(struct job *j);

#endif
