/*
 * test_server_store_redis.c: the Redis backend (store_redis.c) against a real redis-server that
 * the test starts on a unix socket in its temp dir (with a password, in database 3): its
 * options refused with clear messages, the row operations (the same contract as SQLite's),
 * the compare-and-set of put and append, compaction's identity check, the version read, the
 * keys' Cluster hash tags, and a Redis that goes away (errors at once, store_down set) and comes
 * back (reconnected after the backoff). Exits 77 (skipped) when redis-server is not installed.
 */
#include <hiredis/hiredis.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "metrics.h"
#include "store_redis.h"
#include "store_records_check.h"
#include "testlib.h"

static char SOCK[1024], DIR_[1024], PWFILE[1100];
static pid_t REDIS_PID = -1;

static int redis_up(void) {
  redisContext *c = redisConnectUnix(SOCK);
  int ok = c && !c->err;
  if (c) redisFree(c);
  return ok;
}

static int start_redis(void) {
  REDIS_PID = fork();
  if (REDIS_PID == 0) {
    execlp("redis-server", "redis-server", "--port", "0", "--unixsocket", SOCK, "--dir", DIR_,
           "--save", "", "--appendonly", "no", "--requirepass", "s3cret", "--logfile",
           "redis.log", (char *)NULL);
    _exit(127);
  }
  double until = tl_now() + 20;
  while (!redis_up()) {
    int st;
    if (waitpid(REDIS_PID, &st, WNOHANG) == REDIS_PID || tl_now() > until) return -1;
    usleep(20000);
  }
  return 0;
}

static void stop_redis(void) {
  if (REDIS_PID <= 0) return;
  kill(REDIS_PID, SIGKILL);
  waitpid(REDIS_PID, NULL, 0);
  REDIS_PID = -1;
  unlink(SOCK);
}

static store_backend *open_url(const char *url, const char *pwfile, const char *prefix, char *err,
                               size_t cap) {
  store_redis_opts o = {url, pwfile, prefix, 0, 1000};
  return store_redis_open(&o, err, cap);
}

static void test_options_refused_clearly(void) {
  char err[512];
  struct {
    const char *url, *pw, *prefix, *says;
  } bad[] = {
      {"http://127.0.0.1:6379", "", "p", "neither redis://"},
      {"redis://127.0.0.1:99999/0", "", "p", "bad port"},
      {"redis://127.0.0.1:6379/x", "", "p", "database number"},
      {"redis://admin:pw@127.0.0.1:6379/0", "", "p", "ACL users"},
      {"redis://:6379/0", "", "p", "no host"},
      {"unix:relative.sock", "", "p", "absolute path"},
      {"unix:/run/redis.sock?timeout=3", "", "p", "?db=N"},
      {"redis://127.0.0.1:6379/0", "/nonexistent/pw", "p", "redis_password_file"},
      {"redis://127.0.0.1:6379/0", "", "a{b}", "redis_prefix"},
      {"redis://127.0.0.1:6379/0", "", "", "redis_prefix"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    err[0] = 0;
    store_backend *b = open_url(bad[i].url, bad[i].pw, bad[i].prefix, err, sizeof err);
    CHECK(b == NULL && strstr(err, bad[i].says));
    if (b) store_backend_free(b);
    if (!strstr(err, bad[i].says)) fprintf(stderr, "  %s: %s\n", bad[i].url, err);
  }
  store_backend *b = open_url("redis://:pw@localhost/2", "", "p", err, sizeof err);
  CHECK(b != NULL); /* default port, a password in the URL */
  store_backend_free(b);
}

static void row_of(store_row *w, const char *id, uint8_t owner_byte, double last_used,
                   uint64_t seq, const char *meta, const uint8_t *st, size_t sl) {
  memset(w, 0, sizeof *w);
  snprintf(w->id, sizeof w->id, "%s", id);
  memset(w->owner, owner_byte, 32);
  w->fingerprint = 42;
  w->created = 1.5;
  w->last_used = last_used;
  w->tokens = 10;
  w->turns = 2;
  w->mode = 1;
  w->messages = 3;
  w->positions = 9;
  w->meta = (const uint8_t *)meta;
  w->meta_len = strlen(meta);
  w->state = st;
  w->state_len = sl;
  w->seq = seq;
  w->snap_id = 1000 + seq;
}

static store_backend *open_test_backend(char *err, size_t cap) {
  char url[1100];
  snprintf(url, sizeof url, "unix:%s?db=3", SOCK);
  return open_url(url, PWFILE, "ut", err, cap);
}

static void test_rows_versions_and_hash_tags(void) {
  char err[512] = "";
  store_backend *b = open_test_backend(err, sizeof err);
  CHECK(b != NULL);
  if (!b) return;
  const store_backend_ops *B = b->ops;
  CHECK(B->shared == 1 && B->version != NULL);
  store_conn *c = B->connect(b->cfg, err, sizeof err);
  uint8_t big[70000];
  for (size_t i = 0; i < sizeof big; i++) big[i] = (uint8_t)(i * 13);
  uint8_t o1[32], o2[32];
  memset(o1, 1, 32);
  memset(o2, 2, 32);
  store_row w, g;
  int created = -1;
  CHECK(B->begin(c, err, sizeof err) == 0);
  row_of(&w, "s1", 1, 100, 1, "meta1", big, sizeof big);
  w.cas = 1; /* a creation: only where there is no row */
  CHECK(B->put(c, &w, &created, err, sizeof err) == 0 && created == 1);
  CHECK(B->put(c, &w, &created, err, sizeof err) == 1); /* the row exists now: refused */
  row_of(&w, "s2", 1, 300, 1, "meta2", big, 10);
  CHECK(B->put(c, &w, &created, err, sizeof err) == 0 && created == 1);
  row_of(&w, "s3", 2, 200, 1, "meta3", big, 10);
  CHECK(B->put(c, &w, &created, err, sizeof err) == 0 && created == 1);
  row_of(&w, "s1", 1, 150, 2, "meta1b", big, sizeof big);
  w.cas = 1; /* continues version 1 */
  CHECK(B->put(c, &w, &created, err, sizeof err) == 0 && created == 0);
  CHECK(B->commit(c, err, sizeof err) == 0);
  CHECK(B->count(c) == 3);
  memset(&g, 0, sizeof g);
  CHECK(B->get(c, "s1", o1, &g, err, sizeof err) == 0);
  CHECK(g.meta_len == 6 && !memcmp(g.meta, "meta1b", 6) && g.state_len == sizeof big &&
        !memcmp(g.state, big, sizeof big) && g.owner[0] == 1 && g.last_used == 150 &&
        g.created == 1.5 && g.fingerprint == 42 && g.tokens == 10 && g.turns == 2 &&
        g.mode == 1 && g.messages == 3 && g.positions == 9 && g.seq == 2 && g.snap_seq == 2 &&
        g.snap_id == 1002 && g.n_deltas == 0);
  B->release(c);
  CHECK(B->get(c, "nope", o1, &g, err, sizeof err) == 1);
  CHECK(B->get(c, "s1", o2, &g, err, sizeof err) == 1); /* ids are per owner */
  uint64_t v = 0;
  CHECK(B->version(c, "s1", o1, &v, err, sizeof err) == 0 && v == 2);
  CHECK(B->version(c, "s1", o2, &v, err, sizeof err) == 1);

  /* deltas: each only over the version it continues */
  store_delta d = {3, (const uint8_t *)"dm3", 3, big, 500};
  store_row after;
  memset(&after, 0, sizeof after);
  row_of(&w, "s1", 1, 160, 3, "unused", NULL, 0);
  CHECK(B->append(c, &w, &d, &after, err, sizeof err) == 0);
  CHECK(after.n_deltas == 1 && after.delta_bytes == 503 &&
        after.snap_bytes == 6 + sizeof big);
  CHECK(B->append(c, &w, &d, &after, err, sizeof err) == 1); /* version 3 is taken */
  store_delta d5 = {5, (const uint8_t *)"dm5", 3, big, 20};
  CHECK(B->append(c, &w, &d5, &after, err, sizeof err) == 1); /* a gap */
  store_delta d4 = {4, (const uint8_t *)"dm4", 3, big + 7, 20};
  row_of(&w, "s1", 1, 170, 4, "unused", NULL, 0);
  CHECK(B->append(c, &w, &d4, &after, err, sizeof err) == 0 && after.n_deltas == 2);
  row_of(&w, "nope", 1, 170, 1, "unused", NULL, 0);
  store_delta d1 = {1, (const uint8_t *)"x", 1, big, 1};
  CHECK(B->append(c, &w, &d1, &after, err, sizeof err) == 1); /* no such row */
  /* a whole state over a stale version is refused too */
  row_of(&w, "s1", 1, 170, 3, "stale", big, 5);
  w.cas = 1;
  CHECK(B->put(c, &w, &created, err, sizeof err) == 1);
  CHECK(B->get(c, "s1", o1, &g, err, sizeof err) == 0 && g.seq == 4 && g.snap_seq == 2 &&
        g.n_deltas == 2 && g.last_used == 170);
  store_delta x;
  CHECK(B->next_delta(c, &x, err, sizeof err) == 0 && x.seq == 3 && x.meta_len == 3 &&
        !memcmp(x.meta, "dm3", 3) && x.delta_len == 500 && !memcmp(x.delta, big, 500));
  CHECK(B->next_delta(c, &x, err, sizeof err) == 0 && x.seq == 4 && x.delta_len == 20 &&
        !memcmp(x.delta, big + 7, 20));
  CHECK(B->next_delta(c, &x, err, sizeof err) == 1);
  B->release(c);

  /* compaction: only over the snapshot it read */
  row_of(&w, "s1", 1, 170, 3, "snap3", big, 100);
  w.snap_id = 77;
  CHECK(B->compact(c, &w, 999, err, sizeof err) == 1);
  CHECK(B->compact(c, &w, 1002, err, sizeof err) == 0);
  CHECK(B->get(c, "s1", o1, &g, err, sizeof err) == 0 && g.seq == 4 && g.snap_seq == 3 &&
        g.snap_id == 77 && g.n_deltas == 1 && g.delta_bytes == 23 && g.meta_len == 5 &&
        !memcmp(g.meta, "snap3", 5) && g.state_len == 100);
  CHECK(B->next_delta(c, &x, err, sizeof err) == 0 && x.seq == 4);
  CHECK(B->next_delta(c, &x, err, sizeof err) == 1);
  B->release(c);
  row_of(&w, "s1", 1, 170, 5, "ahead", big, 1);
  w.snap_id = 78;
  CHECK(B->compact(c, &w, 77, err, sizeof err) == 1); /* the row has not reached version 5 */

  /* a session's keys share one hash tag (one Redis Cluster slot) */
  redisContext *rc = redisConnectUnix(SOCK);
  redisReply *r = redisCommand(rc, "AUTH s3cret");
  freeReplyObject(r);
  r = redisCommand(rc, "SELECT 3");
  freeReplyObject(r);
  char hex[65];
  for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", 1);
  r = redisCommand(rc, "EXISTS ut:s:{%s:s1} ut:d:{%s:s1}", hex, hex);
  CHECK(r && r->type == REDIS_REPLY_INTEGER && r->integer == 2);
  freeReplyObject(r);
  redisFree(rc);

  store_row rows[4];
  CHECK(B->list(c, o1, 4, rows, err, sizeof err) == 2);
  CHECK(!strcmp(rows[0].id, "s2") && !strcmp(rows[1].id, "s1") && !rows[0].meta &&
        rows[1].seq == 4 && rows[1].last_used == 170);
  CHECK(B->del(c, "s3", o1, err, sizeof err) == 1); /* another owner's */
  CHECK(B->del(c, "s3", o2, err, sizeof err) == 0);
  store_key keys[4];
  CHECK(B->expire(c, 200, 4, keys, err, sizeof err) == 1 && !strcmp(keys[0].id, "s1") &&
        keys[0].owner[0] == 1);
  CHECK(B->count(c) == 1);
  CHECK(B->get(c, "s1", o1, &g, err, sizeof err) == 1);
  /* a put without cas (an import) replaces the row at a version past the stored one */
  row_of(&w, "s2", 1, 400, 1, "imported", big, 3);
  CHECK(B->put(c, &w, &created, err, sizeof err) == 0 && created == 0);
  CHECK(B->version(c, "s2", o1, &v, err, sizeof err) == 0 && v == 2);
  CHECK(B->get(c, "s2", o1, &g, err, sizeof err) == 0 && g.snap_seq == 2 && g.meta_len == 8);
  B->release(c);
  B->disconnect(c);
  store_backend_free(b);
}

static void test_records(void) {
  char err[512] = "";
  store_backend *b = open_test_backend(err, sizeof err);
  CHECK(b != NULL);
  if (!b) return;
  store_conn *c = b->ops->connect(b->cfg, err, sizeof err);
  check_backend_records(b->ops, c, "rs1");
  /* a record keyed "SESSION/..." shares the session's hash tag (one Cluster slot) */
  redisContext *rc = redisConnectUnix(SOCK);
  redisReply *r = redisCommand(rc, "AUTH s3cret");
  freeReplyObject(r);
  r = redisCommand(rc, "SELECT 3");
  freeReplyObject(r);
  char hex[65];
  for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", 7);
  r = redisCommand(rc, "EXISTS ut:s:{%s:rs1} ut:r:idem:{%s:rs1}/k1 ut:r:resp:{%s:resp_1}", hex,
                   hex, hex);
  CHECK(r && r->type == REDIS_REPLY_INTEGER && r->integer == 2); /* resp_1 was deleted */
  freeReplyObject(r);
  r = redisCommand(rc, "PTTL ut:r:idem:{%s:rs1}/k1", hex);
  CHECK(r && r->type == REDIS_REPLY_INTEGER && r->integer > 50000 && r->integer <= 60000);
  freeReplyObject(r);
  redisFree(rc);
  b->ops->disconnect(c);
  store_backend_free(b);
}

static void test_wrong_password_and_redis_away(void) {
  char err[512] = "", url[1100];
  snprintf(url, sizeof url, "unix://%s?db=3", SOCK);
  store_backend *b = open_url(url, "", "ut", err, sizeof err); /* no password */
  CHECK(b != NULL);
  store_conn *c = b->ops->connect(b->cfg, err, sizeof err);
  CHECK(c != NULL && strstr(err, "NOAUTH") != NULL);
  b->ops->disconnect(c);
  store_backend_free(b);

  b = open_test_backend(err, sizeof err);
  c = b->ops->connect(b->cfg, err, sizeof err);
  uint64_t v;
  uint8_t o[32];
  memset(o, 9, 32);
  CHECK(b->ops->version(c, "x", o, &v, err, sizeof err) == 1);
  CHECK(atomic_load(&g_metrics.store_down) == 0);
  stop_redis();
  double t0 = tl_now();
  CHECK(b->ops->version(c, "x", o, &v, err, sizeof err) == -1 && strstr(err, "Redis"));
  CHECK(b->ops->version(c, "x", o, &v, err, sizeof err) == -1 && strstr(err, "unreachable"));
  CHECK(tl_now() - t0 < 5); /* no hang while it is away */
  CHECK(atomic_load(&g_metrics.store_down) == 1);
  CHECK(start_redis() == 0);
  int rc = -1;
  PUMP_UNTIL((rc = b->ops->version(c, "x", o, &v, err, sizeof err)) == 1, 30, usleep(50000));
  CHECK(rc == 1 && atomic_load(&g_metrics.store_down) == 0);
  b->ops->disconnect(c);
  store_backend_free(b);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN); /* as the daemon: a write to a Redis that went away is EPIPE */
  metrics_init();
  const char *dir = tl_tmpdir("store_redis");
  snprintf(DIR_, sizeof DIR_, "%s", dir);
  snprintf(SOCK, sizeof SOCK, "%s/redis.sock", dir);
  snprintf(PWFILE, sizeof PWFILE, "%s/password", dir);
  FILE *f = fopen(PWFILE, "w");
  if (!f) return 1;
  fputs("s3cret\n", f);
  fclose(f);
  RUN(test_options_refused_clearly);
  if (start_redis()) {
    stop_redis();
    printf("skipped: redis-server is not installed or did not start (tools/install-deps.sh "
           "test installs it)\n");
    return 77;
  }
  RUN(test_rows_versions_and_hash_tags);
  RUN(test_records);
  RUN(test_wrong_password_and_redis_away);
  stop_redis();
  return tl_summary();
}
