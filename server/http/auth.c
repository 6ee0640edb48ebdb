/*
 * auth.c: API key set and Bearer check (see auth.h). Thread: loop thread.
 */
#include "auth.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "sha256.h"

static int add_key(auth_keys *a, const char *s, size_t n, char *err, size_t cap) {
  while (n && isspace((unsigned char)*s)) s++, n--;
  while (n && isspace((unsigned char)s[n - 1])) n--;
  if (!n) return 0;
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)s[i] <= 0x20 || (unsigned char)s[i] >= 0x7f) {
      snprintf(err, cap, "an API key contains a space or a non-printable character");
      return -1;
    }
  a->digest = xrealloc(a->digest, sizeof *a->digest * (size_t)(a->n + 1));
  sha256(s, n, a->digest[a->n++]);
  return 0;
}

int auth_load(auth_keys *a, const char *list, const char *file, char *err, size_t cap) {
  a->n = 0;
  a->digest = NULL;
  if (list) {
    const char *p = list;
    while (*p) {
      const char *e = strchr(p, ',');
      size_t n = e ? (size_t)(e - p) : strlen(p);
      if (add_key(a, p, n, err, cap)) goto fail;
      p += n + (e ? 1 : 0);
    }
  }
  if (file && *file) {
    FILE *f = fopen(file, "r");
    if (!f) {
      snprintf(err, cap, "api_key_file %s: %s", file, strerror(errno));
      goto fail;
    }
    char *line = NULL;
    size_t lcap = 0;
    ssize_t n;
    int rc = 0;
    while ((n = getline(&line, &lcap, f)) >= 0) {
      const char *s = line;
      while (*s && isspace((unsigned char)*s)) s++;
      if (*s == '#') continue;
      if (add_key(a, line, (size_t)n, err, cap)) {
        rc = -1;
        break;
      }
    }
    free(line);
    fclose(f);
    if (rc) goto fail;
  }
  return 0;
fail:
  auth_free(a);
  return -1;
}

void auth_free(auth_keys *a) {
  free(a->digest);
  a->digest = NULL;
  a->n = 0;
}

int auth_check(const auth_keys *a, const char *header, uint8_t owner[32]) {
  memset(owner, 0, 32);
  if (!a->n) return 1;
  if (!header) return 0;
  while (*header == ' ') header++;
  if (strncasecmp(header, "Bearer ", 7)) return 0;
  const char *k = header + 7;
  while (*k == ' ') k++;
  size_t n = strlen(k);
  while (n && k[n - 1] == ' ') n--;
  if (!n) return 0;
  uint8_t d[32];
  sha256(k, n, d);
  int found = -1;
  for (int i = 0; i < a->n; i++) {
    uint8_t diff = 0;
    for (int j = 0; j < 32; j++) diff |= (uint8_t)(d[j] ^ a->digest[i][j]);
    if (!diff && found < 0) found = i; /* keep scanning: time independent of the match */
  }
  if (found < 0) return 0;
  memcpy(owner, a->digest[found], 32);
  return 1;
}
