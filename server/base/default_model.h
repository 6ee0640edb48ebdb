/*
 * default_model.h: the model directory used when none is named (CLI --model, option `model`).
 * An installed binary (PREFIX/bin/xlserve next to PREFIX/share/xlserve) uses the installed
 * bundled model, found relative to the executable (XL_INSTALLED_MODEL_REL, e.g.
 * "../share/xlserve/models/austen-byte"), so a DESTDIR or relocated install works too; any other
 * binary (the build tree's) uses XL_DEFAULT_MODEL_DIR, the source tree's models/austen-byte.
 * Both are compile definitions set by CMake. Thread: any (computed once, at first call on the
 * main thread at start).
 */
#ifndef XL_DEFAULT_MODEL_H
#define XL_DEFAULT_MODEL_H

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef XL_INSTALLED_MODEL_REL
#define XL_INSTALLED_MODEL_REL "../share/xlserve/models/austen-byte"
#endif

static inline const char *xl_default_model_dir(void) {
  static char dir[PATH_MAX + 64];
  if (*dir) return dir;
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) {
      slash[1] = 0;
      /* an installed layout: PREFIX/bin/ with PREFIX/share/xlserve beside it */
      const char *rel = XL_INSTALLED_MODEL_REL, *cut = strstr(rel, "/models/");
      char share[PATH_MAX + 64];
      snprintf(share, sizeof share, "%s%.*s", exe, cut ? (int)(cut - rel) : 0, rel);
      struct stat sb;
      char real[PATH_MAX];
      if (cut && stat(share, &sb) == 0 && S_ISDIR(sb.st_mode) && realpath(share, real)) {
        snprintf(dir, sizeof dir, "%s%s", real, cut); /* PREFIX/share/xlserve/models/NAME */
        return dir;
      }
    }
  }
  snprintf(dir, sizeof dir, "%s", XL_DEFAULT_MODEL_DIR);
  return dir;
}

#endif
