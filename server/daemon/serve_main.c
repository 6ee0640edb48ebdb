/*
 * serve_main.c: `xlserve serve`: the daemon's lifecycle on the loop thread.
 *   start: options -> log -> keys -> listen (GET /health says 503 "loading") -> the model loads
 *          on a libuv pool thread -> scheduler + workers + session table -> ready (and
 *          READY=1 to systemd: sd_notify.c; WATCHDOG=1 pings from listen on, when asked).
 *   run:   the loop drives MHD (http_server.c), worker events (wake), signals, TTL timer.
 *   SIGTERM/SIGINT: drain: stop accepting (listen socket closed), /health 503, new requests on
 *          open connections 503, running generations may finish for drain_timeout seconds, then
 *          are cancelled; then workers stop, MHD stops, exit 0. A second signal cancels at once.
 *          STOPPING=1 to systemd as the drain begins.
 *   SIGHUP: reopen the log file, re-read api_key_file.
 * Thread: main thread = loop thread.
 */
#include <arpa/inet.h>
#include <signal.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "app_store.h"
#include "config.h"
#include "serve_main.h"
#include "sd_notify.h"
#include "util.h"
#include "xlog.h"

static uv_timer_t stop_timer;

/* The first log line: the bound port (--port 0 picks one), shaped like every other line. */
static void log_listening(const char *host, unsigned port) {
  buf line, msg;
  buf_init(&line);
  buf_init(&msg);
  buf_printf(&msg, "listening on %s port %u (xlserve %s)", host, port, XL_VERSION);
  json_writer w;
  xlog_line(&w, &line, "info", "listening");
  jw_key(&w, "msg");
  jw_string_n(&w, msg.p, msg.len);
  jw_kstring(&w, "host", host);
  jw_kuint(&w, "port", port);
  jw_kstring(&w, "version", XL_VERSION);
  jw_end(&w);
  xlog_write(line.p, line.len);
  buf_free(&msg);
  buf_free(&line);
}

static void wake_loop(void *arg) { uv_async_send(arg); } /* any thread: coalescing wake-up */
static int stop_timer_armed;

static void on_wake(uv_async_t *h) {
  app *a = h->data;
  if (!a->sched) return;
  int n = sched_take_events(a->sched, &a->ev, &a->ev_cap);
  for (int i = 0; i < n; i++) {
    req *r = a->ev[i].j->owner;
    if (a->ev[i].flags & JOB_EV_DONE) gen_on_job_done(r, a->ev[i].j);
    else if (a->ev[i].flags & JOB_EV_OUTPUT) gen_on_output(r);
  }
  http_pump(&a->http);
}

static void close_handle(uv_handle_t *h) {
  if (!uv_is_closing(h)) uv_close(h, NULL);
}

static void do_shutdown(uv_timer_t *t) {
  app *a = t->data;
  if (a->phase == APP_STOPPING) return;
  a->phase = APP_STOPPING;
  a->http.closing = 1;
  xlog_msg("info", "stopping", "stopping (%ld requests, %ld generations left)", a->http.n_reqs, a->n_jobs);
  for (req *r = a->http.reqs; r; r = r->next)
    if (api_ctx_running(r)) gen_cancel(r, 1);
  if (a->sched) {
    sched_stop(a->sched); /* workers finish the cancelled jobs, then exit */
    on_wake(&a->wake);    /* complete them (no MHD call in between matters: http_stop resumes) */
  }
  app_store_shutdown(a); /* persist what the store lacks, bounded by the drain deadline */
  http_stop(&a->http);
  sdn_watchdog_stop();
  close_handle((uv_handle_t *)&a->wake);
  close_handle((uv_handle_t *)&a->sig_term);
  close_handle((uv_handle_t *)&a->sig_int);
  close_handle((uv_handle_t *)&a->sig_hup);
  close_handle((uv_handle_t *)&a->drain_timer);
  close_handle((uv_handle_t *)&a->ttl_timer);
  close_handle((uv_handle_t *)&stop_timer);
}

static void schedule_stop(app *a, uint64_t ms) {
  if (a->phase == APP_STOPPING) return;
  if (stop_timer_armed && ms > 0) return; /* an earlier stop is already planned */
  stop_timer_armed = 1;
  uv_timer_start(&stop_timer, do_shutdown, ms, 0); /* never from inside MHD_run */
}

/* A start that cannot go on (the reason logged): stop at once, exit status 1. */
static void fail_start(app *a) {
  a->exit_code = 1;
  a->phase = APP_DRAINING;
  a->http.closing = 1; /* every reply says Connection: close */
  schedule_stop(a, 0);
}

static void app_check_drained(app *a) {
  if (a->phase != APP_DRAINING) return;
  /* requests still arriving do not count: MHD_stop_daemon closes them */
  if (a->http.n_reqs - a->http.n_new == 0 && a->n_jobs == 0 && a->load_rc != 1) schedule_stop(a, 0);
}

static void on_drain_deadline(uv_timer_t *t) {
  app *a = t->data;
  xlog_msg("info", "drain_deadline", "drain_timeout reached: cancelling %ld generations", a->n_jobs);
  for (req *r = a->http.reqs; r; r = r->next)
    if (api_ctx_running(r)) gen_cancel(r, 1);
  http_pump(&a->http);
  schedule_stop(a, 2000); /* let the cancelled streams say so, then stop regardless */
}

static void begin_drain(app *a) {
  if (a->phase >= APP_DRAINING) {
    xlog_msg("info", "signal", "second stop signal: stopping now");
    on_drain_deadline(&a->drain_timer);
    schedule_stop(a, 0);
    return;
  }
  a->phase = APP_DRAINING;
  a->http.closing = 1; /* every reply says Connection: close */
  a->drain_started = now_mono();
  sdn_notify("STOPPING=1\nSTATUS=draining");
  http_quiesce(&a->http); /* the listening socket is closed before the log says so */
  xlog_msg("info", "draining", "draining: %ld requests in progress, up to %llds", a->http.n_reqs,
           a->cfg->drain_timeout);
  uv_timer_start(&a->drain_timer, on_drain_deadline, (uint64_t)a->cfg->drain_timeout * 1000, 0);
  app_check_drained(a);
}

static void on_signal(uv_signal_t *h, int signum) {
  app *a = h->data;
  if (signum == SIGHUP) {
    if (xlog_reopen()) xlog_msg("error", "sighup", "cannot reopen log file %s", a->cfg->log_file);
    if (*a->cfg->api_key_file) {
      auth_keys k;
      char err[512];
      if (auth_load(&k, a->cfg->api_keys, a->cfg->api_key_file, err, sizeof err)) {
        xlog_msg("error", "sighup", "keeping the old API keys: %s", err);
      } else {
        auth_free(&a->keys);
        a->keys = k;
      }
    }
    xlog_msg("info", "sighup", "log reopened, %d API keys", a->keys.n);
    return;
  }
  begin_drain(a);
}

static void on_ttl(uv_timer_t *t) {
  app *a = t->data;
  app_store_expire(a); /* RAM and store, in bounded batches */
}

static void load_model(uv_work_t *w) {
  app *a = w->data;
  memset(&a->load_err, 0, sizeof a->load_err);
  xl_load_options lo = XL_LOAD_OPTIONS_DEFAULT;
  (void)xl_kv_dtype_parse(a->cfg->kv_dtype, &lo.kv_dtype); /* checked by config_load */
  lo.weights = (xl_weights)xl_weights_parse(a->cfg->weights); /* checked by the config */
  a->load_rc = xl_model_load(a->cfg->model, &lo, &a->model, &a->load_err) == XL_OK ? 0 : -1;
}

static void model_loaded(uv_work_t *w, int status) {
  app *a = w->data;
  if (status || a->load_rc) {
    a->load_rc = -1;
    /* the core's message already names the file (the model directory or a file in it) */
    if (status)
      xlog_msg("fatal", "model_load_failed", "option model: %s: %s", a->cfg->model,
               uv_strerror(status));
    else
      xlog_msg("fatal", "model_load_failed", "option model: %s", a->load_err.message);
    sdn_notifyf("STATUS=model load failed: %s", status ? uv_strerror(status) : a->load_err.message);
    fail_start(a);
    return;
  }
  const xl_config *mc = xl_model_config(a->model);
  if (*a->cfg->model_name) {
    a->model_name = xstrdup(a->cfg->model_name);
  } else {
    const char *dir = a->cfg->model;
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    const char *b = dir + n;
    while (b > dir && b[-1] != '/') b--;
    a->model_name = xstrndup(b, (size_t)(dir + n - b));
  }
  snprintf(a->fingerprint, sizeof a->fingerprint, "fp_%016llx",
           (unsigned long long)xl_model_fingerprint(a->model));
  a->prefill_chunk = (int)a->cfg->prefill_chunk;
  if (!mc->same_length && mc->tgt_len > 0) a->prefill_chunk = mc->tgt_len;
  a->limits.default_max_tokens = a->cfg->default_max_tokens;
  a->limits.max_tokens_limit = a->cfg->max_tokens_limit;
  a->limits.vocab_size = mc->vocab_size;
  a->limits.words_tokenizer = !xl_model_tokenizer(a->model)->spells_any_text;
  sched_opts so = {(int)a->cfg->workers, (int)a->cfg->max_batch, (int)a->cfg->batch_tokens,
                   (int)a->cfg->max_running, (int)a->cfg->max_queue,
                   (size_t)64 << 10 /* stream_buffer: see stream_stall_timeout */,
                   (int)a->cfg->threads_per_worker};
  a->sched = sched_new(a->model, &so, wake_loop, &a->wake);
  a->quota = rq_new(a->cfg->max_running_per_key, a->cfg->max_running_per_client);
  xl_error err;
  memset(&err, 0, sizeof err);
  if (sched_start(a->sched, &err)) {
    xlog_msg("fatal", "workers_failed", "cannot start the workers: %s", err.message);
    fail_start(a);
    return;
  }
  char serr[512];
  if (app_store_start(a, serr, sizeof serr)) {
    xlog_msg("fatal", "store_failed", "option state_dir: %s", serr);
    fail_start(a);
    return;
  }
  if (a->cfg->session_ttl > 0) {
    uint64_t every = a->cfg->session_ttl < 60 ? (uint64_t)a->cfg->session_ttl * 1000 : 60000;
    uv_timer_start(&a->ttl_timer, on_ttl, every, every);
  }
  a->load_rc = 0;
  xlog_msg("info", "ready",
           "model %s (%s): %d layers, d_model %d, mem_len %d, vocab %d, same_length %d; %lld "
           "workers x %lld threads, max_batch %lld, prefill_chunk %d; weight kernel %s; weights "
           "%s; cpu %s; "
           "blas core %s%s%s%s",
           a->model_name, a->cfg->model, mc->n_layer, mc->d_model, mc->mem_len, mc->vocab_size,
           mc->same_length, a->cfg->workers, a->cfg->threads_per_worker, a->cfg->max_batch,
           a->prefill_chunk,
           xl_model_weights_kernel(a->model), xl_weights_name(xl_model_weights(a->model)),
           xl_cpu_path(), xl_blas_core(), *xl_blas_note() ? " (" : "", xl_blas_note(),
           *xl_blas_note() ? ")" : "");
  if (a->phase == APP_LOADING) {
    a->phase = APP_READY; /* /health says 200 from here on: only then READY=1 */
    sdn_notifyf("READY=1\nSTATUS=serving %s on %s port %u", a->model_name, a->cfg->host, a->http.port);
  }
  app_check_drained(a);
}

/* Each connection is a file descriptor: raise the soft limit to the hard one (1,024 by default
 * under many service managers) and say so when max_connections still cannot fit. */
static void raise_fd_limit(const config *c) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl)) return;
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    getrlimit(RLIMIT_NOFILE, &rl);
  }
  if (rl.rlim_cur != RLIM_INFINITY && (rlim_t)c->max_connections + 64 > rl.rlim_cur)
    xlog_msg("warn", "fd_limit",
             "max_connections %lld exceeds the open-file limit %llu: raise LimitNOFILE / ulimit -n",
             c->max_connections, (unsigned long long)rl.rlim_cur);
}

static int parse_proxies(app *a, const char *list) {
  const char *p = list;
  while (*p) {
    const char *e = strchr(p, ',');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    char ip[64];
    while (n && *p == ' ') p++, n--;
    while (n && p[n - 1] == ' ') n--;
    if (n) {
      if (n >= sizeof ip) return -1;
      memcpy(ip, p, n);
      ip[n] = 0;
      unsigned char tmp[16];
      if (inet_pton(AF_INET, ip, tmp) != 1 && inet_pton(AF_INET6, ip, tmp) != 1) {
        fprintf(stderr, "xlserve: option trusted_proxies: '%s' is not an IP address\n", ip);
        return -1;
      }
      a->proxies = xrealloc(a->proxies, sizeof *a->proxies * (size_t)(a->n_proxies + 1));
      a->proxies[a->n_proxies++] = xstrdup(ip);
    }
    p += n;
    while (*p == ' ') p++;
    if (*p == ',') p++;
  }
  return 0;
}

/* The HTTP server with the options that concern it and the API's hooks. */
static int start_http(app *a, char *err, size_t errcap) {
  const config *c = a->cfg;
  http_settings set = {.loop = a->loop,
                       .owner = a,
                       .host = c->host,
                       .port = c->port,
                       .header_timeout = c->header_timeout,
                       .idle_timeout = c->idle_timeout,
                       .request_timeout = c->request_timeout,
                       .max_connections = c->max_connections,
                       .max_connections_per_client = c->max_connections_per_client,
                       .ping_interval = c->ping_interval,
                       .stream_stall_timeout = c->stream_stall_timeout,
                       .access_log = c->access_log != 0,
                       .proxies = a->proxies,
                       .n_proxies = a->n_proxies,
                       .cors = &a->cors,
                       .hooks = api_http_hooks(a)};
  return http_start(&a->http, &set, err, errcap);
}

int serve_main(int argc, char **argv) {
  config cfg;
  config_result cr = config_load(&cfg, argc, argv, stdout, stderr);
  if (cr != CONFIG_RUN) {
    config_free(&cfg);
    return cr == CONFIG_EXIT_OK ? 0 : 2;
  }
  signal(SIGPIPE, SIG_IGN);
  if (xlog_open(cfg.log_file)) {
    fprintf(stderr, "xlserve: option log_file: cannot open %s\n", cfg.log_file);
    config_free(&cfg);
    return 2;
  }
  metrics_init();
  raise_fd_limit(&cfg);
  app a;
  memset(&a, 0, sizeof a);
  a.cfg = &cfg;
  a.opt = (api_options){.max_prompt_tokens = cfg.max_prompt_tokens,
                        .max_body_bytes = cfg.max_body_bytes,
                        .workers = cfg.workers,
                        .path_prefix = cfg.path_prefix,
                        .max_sessions_per_key = cfg.max_sessions_per_key,
                        .max_running_per_key = cfg.max_running_per_key,
                        .max_running_per_client = cfg.max_running_per_client};
  a.check_drained = app_check_drained;
  a.load_rc = 1; /* loading */
  char err[512];
  int rc = 2;
  if (auth_load(&a.keys, cfg.api_keys, cfg.api_key_file, err, sizeof err)) {
    fprintf(stderr, "xlserve: option %s: %s\n", *cfg.api_key_file ? "api_key_file" : "api_keys", err);
    goto out_early;
  }
  if (parse_proxies(&a, cfg.trusted_proxies)) goto out_early;
  if (cors_parse(&a.cors, cfg.cors_origins, err, sizeof err)) {
    fprintf(stderr, "xlserve: option cors_origins: %s\n", err);
    goto out_early;
  }
  xl_set_blas_threads((int)cfg.blas_threads);
  xl_error cpu_err;
  if (xl_cpu_select(cfg.cpu, &cpu_err)) { /* validated with the config: only a safety net */
    fprintf(stderr, "xlserve: option cpu: %s\n", cpu_err.message);
    goto out_early;
  }
  chat_options co = {.system_prefix = cfg.chat_system_prefix, .system_suffix = cfg.chat_system_suffix,
                     .user_prefix = cfg.chat_user_prefix, .user_suffix = cfg.chat_user_suffix,
                     .assistant_prefix = cfg.chat_assistant_prefix,
                     .assistant_suffix = cfg.chat_assistant_suffix,
                     .tool_prefix = cfg.chat_tool_prefix, .tool_suffix = cfg.chat_tool_suffix,
                     .stop = cfg.chat_stop};
  chat_template_init(&a.tpl, &co);
  uv_loop_t loop;
  uv_loop_init(&loop);
  a.loop = &loop;
  uv_async_init(&loop, &a.wake, on_wake);
  a.wake.data = &a;
  uv_signal_init(&loop, &a.sig_term);
  uv_signal_init(&loop, &a.sig_int);
  uv_signal_init(&loop, &a.sig_hup);
  a.sig_term.data = a.sig_int.data = a.sig_hup.data = &a;
  uv_signal_start(&a.sig_term, on_signal, SIGTERM);
  uv_signal_start(&a.sig_int, on_signal, SIGINT);
  uv_signal_start(&a.sig_hup, on_signal, SIGHUP);
  uv_timer_init(&loop, &a.drain_timer);
  uv_timer_init(&loop, &a.ttl_timer);
  uv_timer_init(&loop, &stop_timer);
  stop_timer_armed = 0;
  a.drain_timer.data = a.ttl_timer.data = stop_timer.data = &a;
  if (app_store_open(&a, err, sizeof err)) {
    /* a Redis backend's messages name their option (redis_url, ...) themselves */
    const char *opt = strncmp(err, "option ", 7) ? "option state_dir: " : "";
    xlog_msg("fatal", "store_failed", "%s%s", opt, err);
    fprintf(stderr, "xlserve: %s%s\n", opt, err);
    fail_start(&a);
  } else if (start_http(&a, err, sizeof err)) {
    xlog_msg("fatal", "listen_failed", "%s", err);
    fprintf(stderr, "xlserve: %s\n", err);
    fail_start(&a);
  } else {
    log_listening(cfg.host, a.http.port);
    sdn_watchdog_start(&loop); /* WATCHDOG=1 while loading too (a no-op unless asked) */
    a.load_work.data = &a;
    uv_queue_work(&loop, &a.load_work, load_model, model_loaded);
  }
  uv_run(&loop, UV_RUN_DEFAULT);
  rc = a.exit_code;
  if (uv_loop_close(&loop)) xlog_msg("warn", "loop_close", "handles left open at exit");
  sched_free(a.sched);
  rq_free(a.quota);
  app_store_free(&a); /* before the table: its last callbacks use it */
  st_free(a.sessions);
  prefix_cache_free(a.prefix_cache); /* after the workers and the requests: no job holds one */
  xl_model_free(a.model);
  free(a.model_name);
  free(a.ev);
  chat_template_free(&a.tpl);
  xlog_msg("info", "exit", "exit %d", rc);
out_early:
  auth_free(&a.keys);
  for (int i = 0; i < a.n_proxies; i++) free(a.proxies[i]);
  free(a.proxies);
  cors_free(&a.cors);
  config_free(&cfg);
  xlog_close();
  return rc;
}
