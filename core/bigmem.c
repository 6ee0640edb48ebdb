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

/* n bytes (rounded to whole pages), zero. From 2 MiB on: at a 2 MiB boundary and marked for
 * huge pages. populate: every page faulted in now, without a trap per page (MAP_POPULATE, or
 * MADV_POPULATE_WRITE on Linux 5.14+ where the huge-page mark must come first). *mapped = the
 * mapping's length; NULL (and 0) when there is no mapping. */
static void *map_big(size_t n, int populate, size_t *mapped) {
  *mapped = 0;
#if defined(__linux__) && defined(MAP_ANONYMOUS)
  const int prot = PROT_READ | PROT_WRITE, flags = MAP_PRIVATE | MAP_ANONYMOUS;
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  const size_t len = round_up(n ? n : 1, page);
  if (len > SIZE_MAX - HUGE_PAGE) return NULL;
  if (len < HUGE_PAGE) {
    void *p = mmap(NULL, len, prot, flags | (populate ? MAP_POPULATE : 0), -1, 0);
    if (p == MAP_FAILED) return NULL;
    *mapped = len;
    return p;
  }
  /* over-map by 2 MiB and cut the ends so that the start is 2 MiB-aligned */
  unsigned char *raw = mmap(NULL, len + HUGE_PAGE, prot, flags, -1, 0);
  if (raw == MAP_FAILED) return NULL;
  unsigned char *p = (unsigned char *)round_up((uintptr_t)raw, HUGE_PAGE);
  if (p > raw) munmap(raw, (size_t)(p - raw));
  size_t tail = (size_t)(raw + len + HUGE_PAGE - (p + len));
  if (tail) munmap(p + len, tail);
  *mapped = len;
#if defined(MADV_HUGEPAGE)
  madvise(p, len, MADV_HUGEPAGE); /* a hint: failure changes nothing */
#endif
  if (!populate) return p;
#if defined(MADV_POPULATE_WRITE)
  if (madvise(p, len, MADV_POPULATE_WRITE) == 0) return p;
#endif
  /* an older kernel: a populated mapping in its place (4 KiB pages, as without the mark) */
  if (mmap(p, len, prot, flags | MAP_FIXED | MAP_POPULATE, -1, 0) == MAP_FAILED) {
    munmap(p, len);
    *mapped = 0;
    return NULL;
  }
  return p;
#else
  (void)n, (void)populate;
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
  void *p = map_big(n, 1, mapped);
  if (p || n > SIZE_MAX - 64) return p;
  p = aligned_alloc(64, round_up(n ? n : 1, 64)); /* no mappings here (or none to be had) */
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
  c->base = map_big(size, 0, &c->mapped);
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
