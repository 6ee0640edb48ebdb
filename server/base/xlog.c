/*
 * xlog.c: JSON-lines log with reopen (see xlog.h for the threading rules).
 */
#include "xlog.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static int log_fd = 2;
static char *log_path;

static int open_path(const char *path) {
  if (!strcmp(path, "-")) return 2;
  return open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
}

int xlog_open(const char *path) {
  int fd = open_path(path);
  if (fd < 0) return -1;
  pthread_mutex_lock(&log_mu);
  if (log_fd > 2) close(log_fd);
  log_fd = fd;
  free(log_path);
  log_path = xstrdup(path);
  pthread_mutex_unlock(&log_mu);
  return 0;
}

int xlog_reopen(void) {
  pthread_mutex_lock(&log_mu);
  int rc = 0;
  if (log_path && strcmp(log_path, "-")) {
    int fd = open_path(log_path);
    if (fd < 0) {
      rc = -1;
    } else {
      if (log_fd > 2) close(log_fd);
      log_fd = fd;
    }
  }
  pthread_mutex_unlock(&log_mu);
  return rc;
}

void xlog_close(void) {
  pthread_mutex_lock(&log_mu);
  if (log_fd > 2) close(log_fd);
  log_fd = 2;
  free(log_path);
  log_path = NULL;
  pthread_mutex_unlock(&log_mu);
}

void xlog_write(const char *line, size_t n) {
  char stackbuf[2048];
  char *p = n + 1 <= sizeof stackbuf ? stackbuf : xmalloc(n + 1);
  memcpy(p, line, n);
  p[n] = '\n';
  pthread_mutex_lock(&log_mu);
  size_t off = 0;
  while (off < n + 1) {
    ssize_t w = write(log_fd, p + off, n + 1 - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    off += (size_t)w;
  }
  pthread_mutex_unlock(&log_mu);
  if (p != stackbuf) free(p);
}

void xlog_ts(json_writer *w, double t) {
  time_t s = (time_t)t;
  struct tm tm;
  gmtime_r(&s, &tm);
  int ms = (int)((t - (double)s) * 1000.0);
  if (ms > 999) ms = 999;
  char ts[96];
  snprintf(ts, sizeof ts, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
           tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
  jw_kstring(w, "ts", ts);
}

void xlog_line(json_writer *w, buf *b, const char *level, const char *event) {
  jw_init(w, b);
  jw_object(w);
  xlog_ts(w, now_wall());
  jw_kstring(w, "level", level);
  jw_kstring(w, "event", event);
}

void xlog_msg(const char *level, const char *event, const char *fmt, ...) {
  buf msg, line;
  buf_init(&msg);
  buf_init(&line);
  va_list ap;
  va_start(ap, fmt);
  buf_vprintf(&msg, fmt, ap);
  va_end(ap);
  json_writer w;
  xlog_line(&w, &line, level, event);
  jw_key(&w, "msg");
  jw_string_n(&w, msg.p ? msg.p : "", msg.len);
  jw_end(&w);
  xlog_write(line.p, line.len);
  buf_free(&msg);
  buf_free(&line);
}
