/*
 * bigmem.c: huge-page-friendly anonymous mappings for big engine buffers, and the arena a
 * model's converted tensors are carved from (bigmem.h). Any thread for xl_big_*; an arena is
 * used by one thread at a time.
 */
#include "bigmem.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

#define HUGE_PAGE ((size_t)2 << 20)
#define CHUNK_BYTES ((size_t)64 << 20)
#define OWN_MAPPING_BYTES ((size_t)16 << 20)

struct xl_arena_chunk {
  xl_arena_chunk *next;
  unsigned char *base;
  size_t size, used, mapped;
};

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

/* n bytes (rounded to whole pages) at a 2 MiB boundary, marked for huge pages; not faulted in.
 * *mapped = the mapping's length. */
static void *map_aligned(size_t n, size_t *mapped) {
  *mapped = 0;
#if defined(__linux__) && defined(MAP_ANONYMOUS)
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  const size_t len = round_up(n ? n : 1, page);
  if (len > SIZE_MAX - HUGE_PAGE) return NULL;
  /* over-map by 2 MiB and cut the ends so that the start is 2 MiB-aligned */
  unsigned char *raw = mmap(NULL, len + HUGE_PAGE, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return NULL;
  unsigned char *p = (unsigned char *)round_up((uintptr_t)raw, HUGE_PAGE);
  if (p > raw) munmap(raw, (size_t)(p - raw));
  size_t tail = (size_t)(raw + len + HUGE_PAGE - (p + len));
  if (tail) munmap(p + len, tail);
#if defined(MADV_HUGEPAGE)
  if (len >= HUGE_PAGE) madvise(p, len, MADV_HUGEPAGE); /* a hint: failure changes nothing */
#endif
  *mapped = len;
  return p;
#else
  (void)n;
  return NULL;
#endif
}

static void unmap(void *p, size_t mapped) {
#if defined(__linux__) && defined(MAP_ANONYMOUS)
  munmap(p, mapped);
#else
  (void)p, (void)mapped;
#endif
}

void *xl_big_alloc(size_t n, size_t *mapped) {
  void *p = map_aligned(n, mapped);
  if (p) {
    /* every page faulted in now, without a trap per page where the kernel can (5.14+) */
#if defined(MADV_POPULATE_WRITE)
    if (madvise(p, *mapped, MADV_POPULATE_WRITE) == 0) return p;
#endif
    for (size_t off = 0; off < *mapped; off += 4096) ((volatile unsigned char *)p)[off] = 0;
    return p;
  }
  if (n > SIZE_MAX - 64) return NULL;
  p = aligned_alloc(64, round_up(n ? n : 1, 64));
  if (p) memset(p, 0, n);
  return p;
}

void xl_big_free(void *p, size_t mapped) {
  if (!p) return;
  if (mapped) unmap(p, mapped);
  else free(p);
}

static xl_arena_chunk *new_chunk(size_t size) {
  xl_arena_chunk *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->base = map_aligned(size, &c->mapped);
  if (!c->base) c->base = aligned_alloc(64, round_up(size ? size : 1, 64));
  if (!c->base) {
    free(c);
    return NULL;
  }
  c->size = size;
  return c;
}

void *xl_arena_alloc(xl_arena *a, size_t n) {
  n = round_up(n ? n : 1, 64);
  xl_arena_chunk *c = a->chunks;
  if (n >= OWN_MAPPING_BYTES) { /* its own chunk, kept behind the current one */
    xl_arena_chunk *own = new_chunk(n);
    if (!own) return NULL;
    own->used = n;
    if (c) {
      own->next = c->next;
      c->next = own;
    } else {
      a->chunks = own;
    }
    a->bytes += n;
    return own->base;
  }
  if (!c || c->size - c->used < n) {
    c = new_chunk(CHUNK_BYTES);
    if (!c) return NULL;
    c->next = a->chunks;
    a->chunks = c;
  }
  void *p = c->base + c->used;
  c->used += n;
  a->bytes += n;
  return p;
}

void xl_arena_free(xl_arena *a) {
  for (xl_arena_chunk *c = a->chunks, *next; c; c = next) {
    next = c->next;
    if (c->mapped) unmap(c->base, c->mapped);
    else free(c->base);
    free(c);
  }
  a->chunks = NULL;
  a->bytes = 0;
}
