/*
 * xlog.h: the daemon's log: JSON lines to stderr or a file (O_APPEND), reopened on SIGHUP.
 * Owns: the log fd. Thread: xlog_open/xlog_close on the main thread; xlog_reopen on the loop
 * thread; xlog_write/xlog_msg from any thread (one write(2) per line, fd swap under a lock).
 */
#ifndef XLS_XLOG_H
#define XLS_XLOG_H

#include <stddef.h>

#include "buf.h"
#include "json_writer.h"

int xlog_open(const char *path); /* "-" = stderr; -1 with errno on failure */
int xlog_reopen(void);           /* 0, or -1 (the old fd stays in use) */
void xlog_close(void);
void xlog_write(const char *line, size_t n); /* adds the newline */
/* {"ts":"...","level":LEVEL,"event":EVENT,"msg":"..."} */
void xlog_msg(const char *level, const char *event, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Writes the key "ts" and its value, "2026-01-01T00:00:00.000Z" for wall-clock time t. */
void xlog_ts(json_writer *w, double t);
/* Opens a log line's object: {"ts":...,"level":LEVEL,"event":EVENT (the caller adds its keys,
 * closes it and writes it with xlog_write). */
void xlog_line(json_writer *w, buf *b, const char *level, const char *event);

#endif
