/*
 * cli_bandwidth.h: the benchmarks' read-bandwidth probes, the memory limit their decode rates
 * are set against: how fast one thread (or n threads at once) streams a buffer far larger than
 * the last-level cache. Main thread (the n-thread probe starts and joins its own threads).
 */
#ifndef XL_CLI_BANDWIDTH_H
#define XL_CLI_BANDWIDTH_H

#include <stddef.h>

/* The probe's buffer: 512 MiB, or 4x the last-level cache up to 1 GiB (a VM may report a whole
 * host's cache). */
size_t cli_probe_bytes(void);

/* Bytes/s of one thread summing a buffer of `bytes`, the best of `passes` passes after the one
 * that maps it in, timed by this thread's CPU time (thread_clock) or wall time; -1 when out of
 * memory. */
double cli_read_bandwidth(size_t bytes, int passes, int thread_clock);

/* The same with n_threads (1-8) threads at once, each summing its own part of one buffer: all
 * the bytes over the wall time from the first thread's start to the last one's end; -1 when out
 * of memory or a thread could not start. */
double cli_read_bandwidth_threads(size_t bytes, int passes, int n_threads);

#endif
