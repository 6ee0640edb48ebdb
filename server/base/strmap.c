/*
 * strmap.c: string-keyed hash map (see strmap.h).
 */
#include "strmap.h"

#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "util.h"

static size_t hash_str(const char *s) { return (size_t)fnv1a64(FNV64_INIT, s, strlen(s)); }

void strmap_init(strmap *m) {
  m->nb = 16, m->n = 0;
  m->b = xcalloc(m->nb, sizeof *m->b);
}

void strmap_free(strmap *m) {
  for (size_t i = 0; i < m->nb; i++) {
    strmap_entry *e = m->b[i];
    while (e) {
      strmap_entry *n = e->next;
      free(e);
      e = n;
    }
  }
  free(m->b);
  m->b = NULL, m->nb = m->n = 0;
}

static strmap_entry **find(const strmap *m, const char *key, size_t h) {
  strmap_entry **pp = &m->b[h & (m->nb - 1)];
  while (*pp && ((*pp)->hash != h || strcmp((*pp)->key, key))) pp = &(*pp)->next;
  return pp;
}

void *strmap_get(const strmap *m, const char *key) {
  strmap_entry **pp = find(m, key, hash_str(key));
  return *pp ? (*pp)->value : NULL;
}

static void grow(strmap *m) {
  size_t nb = m->nb * 2;
  strmap_entry **b = xcalloc(nb, sizeof *b);
  for (size_t i = 0; i < m->nb; i++) {
    strmap_entry *e = m->b[i];
    while (e) {
      strmap_entry *n = e->next;
      e->next = b[e->hash & (nb - 1)];
      b[e->hash & (nb - 1)] = e;
      e = n;
    }
  }
  free(m->b);
  m->b = b, m->nb = nb;
}

void strmap_put(strmap *m, const char *key, void *value) {
  size_t h = hash_str(key);
  strmap_entry **pp = find(m, key, h);
  if (*pp) {
    (*pp)->value = value;
    return;
  }
  size_t kl = strlen(key);
  strmap_entry *e = xmalloc(sizeof *e + kl + 1);
  memcpy(e->key, key, kl + 1);
  e->hash = h, e->value = value, e->next = NULL;
  *pp = e;
  if (++m->n > m->nb) grow(m);
}

void *strmap_del(strmap *m, const char *key) {
  strmap_entry **pp = find(m, key, hash_str(key));
  if (!*pp) return NULL;
  strmap_entry *e = *pp;
  void *v = e->value;
  *pp = e->next;
  free(e);
  m->n--;
  return v;
}

strmap_entry *strmap_next(const strmap *m, size_t *bucket, strmap_entry *e) {
  if (e && e->next) return e->next;
  size_t i = e ? *bucket + 1 : 0;
  for (; i < m->nb; i++)
    if (m->b[i]) {
      *bucket = i;
      return m->b[i];
    }
  return NULL;
}
