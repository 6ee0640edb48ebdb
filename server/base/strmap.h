/*
 * strmap.h: a string-keyed hash map (separate chaining, power-of-two buckets, grows at load
 * factor 1). Keys are copied; values are opaque pointers owned by the caller.
 * Thread: whoever owns the map (the session table: loop thread); no internal locking.
 */
#ifndef XLS_STRMAP_H
#define XLS_STRMAP_H

#include <stddef.h>

typedef struct strmap_entry {
  struct strmap_entry *next;
  size_t hash;
  void *value;
  char key[];
} strmap_entry;

typedef struct strmap {
  strmap_entry **b;
  size_t nb, n;
} strmap;

void strmap_init(strmap *m);
void strmap_free(strmap *m); /* frees entries, not values */
void *strmap_get(const strmap *m, const char *key);
void strmap_put(strmap *m, const char *key, void *value); /* replaces */
void *strmap_del(strmap *m, const char *key);             /* returns the old value */
/* Iteration: for (strmap_entry *e = NULL; (e = strmap_next(m, &i, e));) */
strmap_entry *strmap_next(const strmap *m, size_t *bucket, strmap_entry *e);

#endif
