/*
 * bigmem.h: memory for the engine's big, long-lived buffers, the ones a decode step streams
 * from DRAM (a model's converted weights and positional tables, a session's memory): anonymous
 * mappings aligned to 2 MiB and marked for transparent huge pages (MADV_HUGEPAGE; the kernel
 * decides, and a system with them off gets 4 KiB pages as before). With 4 KiB pages a stream of
 * a GiB walks the page tables every 4 KiB (two levels of tables in a virtual machine); with
 * 2 MiB pages once per 2 MiB. Elsewhere than Linux: aligned_alloc.
 *
 * xl_big_*: one buffer. xl_arena: many buffers of one owner (a model), carved from chunks of
 * 64 MiB (a buffer of 16 MiB or more gets a mapping of its own), freed all together.
 * Not thread-safe per arena: an arena belongs to whoever builds its owner (the loading thread).
 */
#ifndef XL_BIGMEM_H
#define XL_BIGMEM_H

#include <stddef.h>

/* n bytes, zero, 64-byte aligned (from 2 MiB on, 2 MiB aligned and marked for huge pages),
 * every page already faulted in (a session's first turn pays no page faults). *mapped: what
 * xl_big_free needs. NULL when out of memory. Any thread. */
void *xl_big_alloc(size_t n, size_t *mapped);
void xl_big_free(void *p, size_t mapped);

typedef struct xl_arena_chunk xl_arena_chunk;
typedef struct xl_arena {
  xl_arena_chunk *chunks; /* newest first */
  size_t bytes;           /* handed out, for accounting */
} xl_arena;

/* n bytes, 64-byte aligned, contents undefined, valid until xl_arena_free. NULL when out of
 * memory. */
void *xl_arena_alloc(xl_arena *a, size_t n);
void xl_arena_free(xl_arena *a);

#endif /* XL_BIGMEM_H */
