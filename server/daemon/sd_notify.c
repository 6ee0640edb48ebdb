/*
 * sd_notify.c: systemd's notify protocol in a few lines, no libsystemd: each state message is
 * one datagram on an AF_UNIX SOCK_DGRAM socket sent to $NOTIFY_SOCKET, a filesystem path or,
 * when it starts with '@', an abstract address ('@' stands for the leading NUL). The watchdog
 * pings (WATCHDOG=1) come from a uv timer on the loop thread, so they stop when the loop stalls.
 * Thread: the loop thread (main) only.
 */
#include "sd_notify.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "xlog.h"

static uv_timer_t wd_timer;
static int wd_on, warned;

int sdn_notify(const char *state) {
  const char *path = getenv("NOTIFY_SOCKET");
  if (!path || !*path) return 0;
  struct sockaddr_un sa;
  memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  size_t n = strlen(path);
  if ((path[0] != '/' && path[0] != '@') || n >= sizeof sa.sun_path) {
    if (!warned++) xlog_msg("warn", "sd_notify", "NOTIFY_SOCKET '%s' is not a usable address", path);
    return -1;
  }
  memcpy(sa.sun_path, path, n);
  if (path[0] == '@') sa.sun_path[0] = 0; /* abstract namespace: the length bounds the name */
  socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + (path[0] == '/'));
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    if (!warned++) xlog_msg("warn", "sd_notify", "socket: %s", strerror(errno));
    return -1;
  }
  ssize_t w;
  do {
    w = sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa, len);
  } while (w < 0 && errno == EINTR);
  int e = errno;
  close(fd);
  if (w < 0) {
    if (!warned++) xlog_msg("warn", "sd_notify", "send to %s: %s", path, strerror(e));
    return -1;
  }
  return 1;
}

int sdn_notifyf(const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return sdn_notify(msg);
}

uint64_t sdn_watchdog_usec(void) {
  const char *us = getenv("WATCHDOG_USEC"), *pid = getenv("WATCHDOG_PID");
  if (!us || !*us) return 0;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(us, &end, 10);
  if (errno || *end || v == 0) return 0;
  if (pid && *pid) {
    long p = strtol(pid, &end, 10);
    if (*end || p != (long)getpid()) return 0; /* meant for another process */
  }
  return (uint64_t)v;
}

static void on_watchdog(uv_timer_t *t) {
  (void)t;
  sdn_notify("WATCHDOG=1");
}

void sdn_watchdog_start(uv_loop_t *loop) {
  uint64_t us = sdn_watchdog_usec();
  if (!us || wd_on || !getenv("NOTIFY_SOCKET")) return;
  uint64_t ms = us / 2000;
  if (ms < 1) ms = 1;
  uv_timer_init(loop, &wd_timer);
  wd_on = 1;
  sdn_notify("WATCHDOG=1");
  uv_timer_start(&wd_timer, on_watchdog, ms, ms);
  xlog_msg("info", "watchdog", "systemd watchdog: pinging every %llu ms", (unsigned long long)ms);
}

void sdn_watchdog_stop(void) {
  if (!wd_on) return;
  wd_on = 0;
  uv_timer_stop(&wd_timer);
  uv_close((uv_handle_t *)&wd_timer, NULL);
}
