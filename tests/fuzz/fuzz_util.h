/*
 * fuzz_util.h: helpers shared by the libFuzzer targets (single-threaded fuzz process).
 */
#ifndef XL_FUZZ_UTIL_H
#define XL_FUZZ_UTIL_H

#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/* Puts bytes into an anonymous in-memory file; returns its /proc path (static buffer). */
static inline const char *fuzz_memfile(const unsigned char *data, size_t len) {
  static int fd = -1;
  static char path[64];
  if (fd < 0) {
    fd = memfd_create("xlfuzz", 0);
    if (fd < 0) abort();
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  }
  if (ftruncate(fd, 0) != 0 || pwrite(fd, data, len, 0) != (ssize_t)len) abort();
  return path;
}

#endif
