/*
 * busy.c: CPU load for the test suite's `loaded` stage (tools/test.sh): THREADS threads that
 * spin without pause, so that the tests beside them run on a busy machine, where a timing
 * assumption fails. Bounded in time: the process exits by itself after SECONDS, and at once
 * when its parent exits (Linux: PR_SET_PDEATHSIG), so a killed test run leaves no spinning
 * process behind.
 *   busy SECONDS [THREADS]     THREADS: default one per online core
 * Threads: main (sleeps until the deadline) and the spinning threads (touch nothing shared).
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#define MAX_SECONDS (4 * 3600) /* a bound on the bound */
#define MAX_THREADS 1024

static void *spin(void *arg) {
  volatile unsigned long n = 0;
  (void)arg;
  for (;;) n++; /* ends with the process */
  return NULL;
}

static long parse(const char *s, long lo, long hi) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return -1;
  return v;
}

int main(int argc, char **argv) {
  if (argc < 2 || argc > 3) {
    fprintf(stderr, "usage: busy SECONDS [THREADS]   (spins THREADS threads, default one per "
                    "core, for at most SECONDS)\n");
    return 2;
  }
  long seconds = parse(argv[1], 1, MAX_SECONDS);
  if (seconds < 0) {
    fprintf(stderr, "busy: SECONDS must be an integer from 1 to %d, not '%s'\n", MAX_SECONDS,
            argv[1]);
    return 2;
  }
  long threads = sysconf(_SC_NPROCESSORS_ONLN);
  if (threads < 1) threads = 1;
  if (argc == 3 && (threads = parse(argv[2], 1, MAX_THREADS)) < 0) {
    fprintf(stderr, "busy: THREADS must be an integer from 1 to %d, not '%s'\n", MAX_THREADS,
            argv[2]);
    return 2;
  }
#ifdef __linux__
  pid_t parent = getppid();
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) return 0; /* the parent exited before the line above */
#endif
  for (long i = 0; i < threads; i++) {
    pthread_t th;
    int rc = pthread_create(&th, NULL, spin, NULL);
    if (rc) {
      fprintf(stderr, "busy: cannot start thread %ld: %s\n", i + 1, strerror(rc));
      return 1;
    }
    pthread_detach(th);
  }
  fprintf(stderr, "busy: %ld spinning threads for at most %ld s\n", threads, seconds);
  struct timespec left = {seconds, 0};
  while (nanosleep(&left, &left) != 0 && errno == EINTR) {
  }
  return 0;
}
