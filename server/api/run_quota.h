/*
 * run_quota.h: generation requests in flight per API key (max_running_per_key) and per client
 * address (max_running_per_client). A request counts from its admission until its generation
 * is done (running, queued, or paused for a stream its client does not read).
 * Owns: the counts. Thread: loop thread only.
 */
#ifndef XLS_RUN_QUOTA_H
#define XLS_RUN_QUOTA_H

#include <stddef.h>
#include <stdint.h>

typedef struct run_quota run_quota;

/* Limits <= 0: none. */
run_quota *rq_new(long long per_key, long long per_client);
void rq_free(run_quota *q);
/* NULL when one more request of owner from client (NULL: exempt) may run, else the name of the
 * option that refuses it. */
const char *rq_check(const run_quota *q, const uint8_t owner[32], const char *client);
void rq_take(run_quota *q, const uint8_t owner[32], const char *client);
void rq_release(run_quota *q, const uint8_t owner[32], const char *client);
long rq_count_key(const run_quota *q, const uint8_t owner[32]);
long rq_count_client(const run_quota *q, const char *client);

#endif
