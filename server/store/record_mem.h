/*
 * record_mem.h: the keyed records of a daemon without a store (see store_record in
 * session_store.h): a bounded in-memory LRU, lost at exit. Bounded by a count and by the bytes
 * of its keys and values; a put past either evicts the least recently used records first.
 * Thread: the store thread only (the front calls it for SOP_REC_* without a backend).
 */
#ifndef XLS_RECORD_MEM_H
#define XLS_RECORD_MEM_H

#include <stddef.h>
#include <stdint.h>

typedef struct record_mem record_mem;
struct store_record;

record_mem *record_mem_new(long max_records, size_t max_bytes);
void record_mem_free(record_mem *m);
/* Inserts or replaces r (its value copied). A record bigger than max_bytes is not kept (-1). */
int record_mem_put(record_mem *m, const struct store_record *r, double now);
/* r->ns/owner/key -> r->value (borrowed until the next call), len, expires: 0 found, 1 absent
 * or expired (an expired record is deleted). */
int record_mem_get(record_mem *m, struct store_record *r, double now);
/* 0 deleted, 1 absent. */
int record_mem_del(record_mem *m, const struct store_record *r);
long record_mem_count(const record_mem *m);

#endif
