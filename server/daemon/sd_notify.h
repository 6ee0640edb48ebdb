/*
 * sd_notify.h: the service manager's notify protocol (systemd Type=notify) without libsystemd:
 * READY=1 / STOPPING=1 / STATUS=... datagrams to $NOTIFY_SOCKET, and the watchdog (WATCHDOG=1
 * every WATCHDOG_USEC/2 from a libuv timer). Without NOTIFY_SOCKET every call is a no-op.
 * Thread: the loop thread (main) only.
 */
#ifndef XLS_SD_NOTIFY_H
#define XLS_SD_NOTIFY_H

#include <stdint.h>
#include <uv.h>

/* Sends one state message ("READY=1\nSTATUS=..."): 1 sent, 0 no NOTIFY_SOCKET, -1 failed
 * (logged once). */
int sdn_notify(const char *state);
int sdn_notifyf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The watchdog interval asked by the service manager in microseconds: WATCHDOG_USEC when set,
 * positive, and WATCHDOG_PID is unset or this process; else 0. */
uint64_t sdn_watchdog_usec(void);

/* Starts pinging WATCHDOG=1 at half the interval (no-op when sdn_watchdog_usec() is 0);
 * sdn_watchdog_stop closes the timer (call before the loop's last run). */
void sdn_watchdog_start(uv_loop_t *loop);
void sdn_watchdog_stop(void);

#endif
