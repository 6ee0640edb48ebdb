/*
 * api_sessions.c: /v1/sessions (POST create, GET list), /v1/sessions/{id} (GET, DELETE),
 * /v1/sessions/{id}/fork (POST), /v1/sessions/{id}/state (GET export, PUT import), and the
 * request side of the session store: a session not in RAM is looked for in the store while the
 * request waits (REQ_RESTORING), then the handler runs again. Session ids are per API key:
 * every lookup is of (this key, id), so no answer depends on whether another key has a session
 * of that id. A busy session cannot be deleted, forked, exported or replaced (409).
 * Thread: loop thread.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "json_writer.h"
#include "util.h"

static const char *mode_name(int m) {
  switch (m) {
    case CHAT_EMPTY: return "empty";
    case CHAT_MESSAGES: return "chat";
    case CHAT_RAW: return "raw";
    default: return "desync";
  }
}

/* The fields every session object starts with, in RAM or only in the store. */
static void session_head(json_writer *w, const char *id, long long created, long long last_used,
                         unsigned long long tokens, int positions, unsigned long long turns,
                         int mode, int messages) {
  jw_kstring(w, "id", id);
  jw_kstring(w, "object", "session");
  jw_kint(w, "created", created);
  jw_kint(w, "last_used", last_used);
  jw_kuint(w, "tokens", tokens);
  jw_kint(w, "memory_positions", positions);
  jw_kuint(w, "turns", turns);
  jw_kstring(w, "mode", mode_name(mode));
  jw_kint(w, "messages", messages);
}

/* A session in RAM: its fields, the object left open (a fork adds its parent). */
static void session_fields(json_writer *w, const session *s) {
  uint64_t tokens = s->busy ? s->snap_tokens : session_tokens(s);
  int mem = s->busy ? s->snap_mem : xl_state_mem_length(s->state);
  session_head(w, s->id, (long long)s->created, (long long)s->last_used, tokens, mem, s->turns,
               s->chat, s->n_msgs);
  jw_kbool(w, "busy", s->busy);
  jw_kbool(w, "in_ram", 1);
  jw_kuint(w, "ram_bytes", s->ram);
  if (!s->busy) {
    char digest[17];
    snprintf(digest, sizeof digest, "%016llx", (unsigned long long)s->digest);
    jw_kstring(w, "transcript_digest", digest);
  }
}

/* A stored session that is not in RAM (its row's metadata). */
static void row_obj(json_writer *jw, const store_row *w) {
  jw_object(jw);
  session_head(jw, w->id, (long long)w->created, (long long)w->last_used, w->tokens,
               w->positions, w->turns, w->mode, w->messages);
  jw_kbool(jw, "busy", 0);
  jw_kbool(jw, "in_ram", 0);
  jw_kuint(jw, "ram_bytes", 0);
  jw_end(jw);
}

/* ------------------------------------------------------------------------------------------ */
/* finding a session (RAM, then the store) */

static void on_lookup(void *ctx, const st_answer *ans) {
  req *r = ctx;
  ACTX(r)->lk_have = 1;
  ACTX(r)->lk_status = ans->status;
  free(ACTX(r)->lk_msg);
  ACTX(r)->lk_msg = ans->message && *ans->message ? xstrdup(ans->message) : NULL;
  r->redispatch = 1;
  req_kick(r); /* the access handler dispatches it again (http_pump follows store_poll) */
  req_unref(r);
}

st_status req_find_session(req *r, const char *id, session **s) {
  app *a = r->a;
  if (ACTX(r)->lk_have) {
    ACTX(r)->lk_have = 0;
    st_status st = st_lookup(a->sessions, id, r->owner, s); /* restored, or created since */
    /* a shared store could not say which version is current: the RAM copy is not served */
    if (st == ST_FOUND && ACTX(r)->lk_status == ST_STORE_ERROR) return ST_STORE_ERROR;
    if (st != ST_MISSING) return st;
    if (ACTX(r)->lk_status != ST_FOUND) return ACTX(r)->lk_status;
    if (++ACTX(r)->lk_loops > 3) { /* restored, then pushed out again before we looked: give up */
      free(ACTX(r)->lk_msg);
      ACTX(r)->lk_msg = xstrdup("the session keeps leaving RAM (session_ram_mb too small?)");
      return ST_STORE_ERROR;
    }
  }
  st_status st = st_find(a->sessions, id, r->owner, s, on_lookup, r);
  if (st == ST_PENDING) req_wait_restore(r);
  return st;
}

static void store_failed(req *r, const char *msg) {
  r->retry_after = "1";
  ctr_add(&g_metrics.store_unavailable, 1);
  req_error(r, API_ERR_STORE_UNAVAILABLE, NULL, "the session store failed: %s",
            msg ? msg : "unknown error");
}

void req_session_error(req *r, const char *id, st_status st) {
  switch (st) {
    case ST_EXPIRED:
      req_error(r, API_ERR_SESSION_EXPIRED, "session_id",
                "session %s expired or was evicted; its memory is gone (DELETE it to reuse the "
                "id, or use a new one)",
                id);
      return;
    case ST_INCOMPATIBLE:
      req_error(r, API_ERR_SESSION_INCOMPATIBLE, "session_id",
                "session %s is stored but this server cannot use it: %s. It is kept as it is: "
                "DELETE it, or PUT a compatible state to /v1/sessions/%s/state",
                id, ACTX(r)->lk_msg ? ACTX(r)->lk_msg : "refused", id);
      return;
    case ST_STORE_ERROR:
      store_failed(r, ACTX(r)->lk_msg);
      return;
    default:
      req_error(r, API_ERR_SESSION_NOT_FOUND, "session_id",
                "session %s not found", id);
      return;
  }
}

static void busy(req *r, const char *id, const char *what) {
  req_error(r, API_ERR_SESSION_BUSY, "session_id",
            "session %s is serving a request; %s", id, what);
}

/* ------------------------------------------------------------------------------------------ */
/* replies that wait for the store */

static void reply_obj(req *r, int status, session *s, const char *forked_from) {
  buf b;
  buf_init(&b);
  json_writer w;
  jw_init(&w, &b);
  jw_object(&w);
  session_fields(&w, s);
  if (forked_from) jw_kstring(&w, "forked_from", forked_from);
  jw_end(&w);
  req_reply_json(r, status, &b);
  buf_free(&b);
}

/* POST /v1/sessions and fork: 201 once the new session is in the store. */
static void on_created_saved(void *ctx, int status, const char *msg) {
  req *r = ctx;
  session *s = NULL;
  if (status) {
    store_failed(r, msg);
  } else if (st_lookup(r->a->sessions, ACTX(r)->session_id, r->owner, &s) == ST_FOUND) {
    reply_obj(r, 201, s, NULL);
  } else {
    store_failed(r, "the session left RAM before it was saved");
  }
  req_unref(r);
}

typedef struct fork_ctx {
  req *r;
  char parent[129];
} fork_ctx;

static void on_fork_saved(void *ctx, int status, const char *msg) {
  fork_ctx *f = ctx;
  req *r = f->r;
  session *s = NULL;
  if (status) store_failed(r, msg);
  else if (st_lookup(r->a->sessions, ACTX(r)->session_id, r->owner, &s) == ST_FOUND)
    reply_obj(r, 201, s, f->parent);
  else store_failed(r, "the session left RAM before it was saved");
  free(f);
  req_unref(r);
}

static void deleted_body(req *r, const char *id) {
  buf b;
  buf_init(&b);
  json_writer w;
  jw_init(&w, &b);
  jw_object(&w);
  jw_kstring(&w, "id", id);
  jw_kstring(&w, "object", "session.deleted");
  jw_kbool(&w, "deleted", 1);
  jw_end(&w);
  req_reply_json(r, 200, &b);
  buf_free(&b);
}

static void on_deleted(void *ctx, int status, const char *msg) {
  req *r = ctx;
  if (status < 0) store_failed(r, msg);
  else deleted_body(r, ACTX(r)->session_id);
  req_unref(r);
}

/* DELETE of a session that is not in RAM: the store's row, if this key owns it. */
static void on_row_removed(void *ctx, int status, const char *msg) {
  req *r = ctx;
  session *s = NULL;
  /* a concurrent request of the same key may have restored it meanwhile: drop that copy too */
  if (status == 0 && st_lookup(r->a->sessions, ACTX(r)->session_id, r->owner, &s) == ST_FOUND && !s->busy)
    st_delete(r->a->sessions, s, NULL, NULL);
  if (status < 0) store_failed(r, msg);
  else if (status == 1) req_session_error(r, ACTX(r)->session_id, ST_MISSING);
  else deleted_body(r, ACTX(r)->session_id);
  req_unref(r);
}

static void on_exported(void *ctx, uint8_t *bytes, size_t n, const char *err) {
  req *r = ctx;
  if (!bytes) {
    store_failed(r, err);
  } else {
    buf b = {(char *)bytes, n, n};
    r->reply_ctype = "application/octet-stream";
    req_defer_reply(r, 200, &b);
    buf_free(&b);
  }
  req_unref(r);
}

static void on_imported(void *ctx, st_import_result res, const char *msg) {
  req *r = ctx;
  session *s = NULL;
  switch (res) {
    case IMPORT_CREATED:
    case IMPORT_REPLACED:
      if (st_lookup(r->a->sessions, ACTX(r)->session_id, r->owner, &s) == ST_FOUND)
        reply_obj(r, res == IMPORT_CREATED && !ACTX(r)->replacing ? 201 : 200, s, NULL);
      else store_failed(r, "the session left RAM before it was saved");
      break;
    case IMPORT_INVALID:
      req_error(r, API_ERR_INVALID_STATE, "body",
                "not a valid session state: %s", msg);
      break;
    case IMPORT_MISMATCH:
      req_error(r, API_ERR_SESSION_INCOMPATIBLE, "body",
                "this server cannot use the state: %s", msg);
      break;
    case IMPORT_BUSY: busy(r, ACTX(r)->session_id, "import when it is idle"); break;
    default: store_failed(r, msg); break;
  }
  req_unref(r);
}

/* GET /v1/sessions: the key's sessions in RAM and in the store, most recent first. */
typedef struct list_item {
  double last_used;
  session *s;
  const store_row *w;
} list_item;

static int by_recent(const void *x, const void *y) {
  const list_item *a = x, *b = y;
  return a->last_used < b->last_used ? 1 : a->last_used > b->last_used ? -1 : 0;
}

static void list_reply(req *r, const store_row *rows, int n_rows) {
  app *a = r->a;
  size_t limit = (size_t)ACTX(r)->list_limit;
  session **ram = xmalloc(sizeof *ram * limit);
  size_t n = st_list(a->sessions, r->owner, ram, limit);
  list_item *items = xmalloc(sizeof *items * (n + (size_t)n_rows + 1));
  size_t k = 0;
  for (size_t i = 0; i < n; i++) items[k++] = (list_item){ram[i]->last_used, ram[i], NULL};
  for (int i = 0; i < n_rows; i++) {
    session *s;
    if (st_lookup(a->sessions, rows[i].id, r->owner, &s) == ST_FOUND) continue; /* RAM is newer */
    items[k++] = (list_item){rows[i].last_used, NULL, &rows[i]};
  }
  qsort(items, k, sizeof *items, by_recent);
  if (k > limit) k = limit;
  buf b;
  buf_init(&b);
  json_writer w;
  jw_init(&w, &b);
  jw_object(&w);
  jw_kstring(&w, "object", "list");
  jw_key(&w, "data");
  jw_array(&w);
  for (size_t i = 0; i < k; i++) {
    if (items[i].s) {
      jw_object(&w);
      session_fields(&w, items[i].s);
      jw_end(&w);
    } else {
      row_obj(&w, items[i].w);
    }
  }
  jw_end(&w);
  jw_end(&w);
  free(items);
  free(ram);
  req_reply_json(r, 200, &b);
  buf_free(&b);
}

static void on_listed(void *ctx, const store_row *rows, int n, const char *err) {
  req *r = ctx;
  if (err) store_failed(r, err);
  else list_reply(r, rows, n);
  req_unref(r);
}

/* ------------------------------------------------------------------------------------------ */

/* 429 when r's key already holds max_sessions_per_key sessions (1: answered). */
static int key_full(req *r) {
  if (!st_key_full(r->a->sessions, r->owner)) return 0;
  req_error(r, API_ERR_QUOTA_EXCEEDED, NULL,
            "this API key holds %lld sessions, its limit (max_sessions_per_key): delete one "
            "(DELETE /v1/sessions/ID) before starting another",
            r->a->opt.max_sessions_per_key);
  return 1;
}

static void create(req *r) {
  app *a = r->a;
  if (key_full(r)) return;
  xl_error xe;
  memset(&xe, 0, sizeof xe);
  session *s = st_create(a->sessions, NULL, r->owner, &xe);
  if (!s) {
    req_error(r, API_ERR_SESSION_CREATE_FAILED, NULL, "%s", xe.message);
    return;
  }
  snprintf(ACTX(r)->session_id, sizeof ACTX(r)->session_id, "%s", s->id);
  if (st_persist(a->sessions, s, on_created_saved, r)) {
    req_wait_reply(r);
    return;
  }
  reply_obj(r, 201, s, NULL);
}

static void list(req *r) {
  int limit;
  api_error e;
  if (parse_list_limit(MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "limit"),
                       &limit, &e)) {
    req_error_from(r, &e);
    return;
  }
  ACTX(r)->list_limit = limit;
  if (!st_persistent(r->a->sessions)) {
    list_reply(r, NULL, 0);
    return;
  }
  req_wait_reply(r);
  st_list_stored(r->a->sessions, r->owner, limit, on_listed, r);
}

/* The {id} of the request's path into sid (and the request's log field); 0 after a 400 reply
 * when it is not a valid session id. */
static int take_id(req *r, char sid[129]) {
  api_error e;
  if (parse_session_id(r->param, r->param_len, sid, &e)) {
    req_error_from(r, &e);
    return 0;
  }
  snprintf(ACTX(r)->session_id, sizeof ACTX(r)->session_id, "%s", sid);
  return 1;
}

void api_sessions_list(req *r) { list(r); }

void api_sessions_create(req *r) { create(r); }

/* DELETE /v1/sessions/{id} */
void api_session_delete(req *r) {
  app *a = r->a;
  char sid[129];
  if (!take_id(r, sid)) return;
  session *s = NULL;
  st_status st = st_lookup(a->sessions, sid, r->owner, &s); /* no restore needed */
  if (st == ST_FOUND) {
    if (s->busy) {
      busy(r, sid, "delete it when it is idle");
      return;
    }
    if (st_delete(a->sessions, s, on_deleted, r)) {
      req_wait_reply(r);
      return;
    }
    deleted_body(r, sid);
  } else if (st == ST_EXPIRED) {
    st_forget_tombstone(a->sessions, sid, r->owner);
    deleted_body(r, sid);
  } else if (st == ST_MISSING && st_persistent(a->sessions)) {
    req_wait_reply(r);
    st_remove_stored(a->sessions, sid, r->owner, on_row_removed, r);
  } else {
    req_session_error(r, sid, ST_MISSING);
  }
}

/* PUT /v1/sessions/{id}/state */
void api_session_import(req *r) {
  app *a = r->a;
  char sid[129];
  if (!take_id(r, sid)) return;
  session *s = NULL;
  st_status st = req_find_session(r, sid, &s);
  if (st == ST_PENDING) return;
  if (st == ST_FOUND && s->busy) {
    busy(r, sid, "import when it is idle");
    return;
  }
  if (st == ST_STORE_ERROR) {
    req_session_error(r, sid, st);
    return;
  }
  if (!r->body.len) {
    req_error(r, API_ERR_INVALID_STATE, "body",
              "the body must be a session state (GET /v1/sessions/{id}/state)");
    return;
  }
  if (st != ST_FOUND && key_full(r)) return; /* an import that adds a session */
  /* FOUND, MISSING, EXPIRED, or a refused row of this key: replaced by the import */
  if (st == ST_EXPIRED) st_forget_tombstone(a->sessions, sid, r->owner);
  ACTX(r)->replacing = st != ST_MISSING && st != ST_EXPIRED; /* 200, not 201 */
  size_t n = r->body.len;
  uint8_t *bytes = (uint8_t *)buf_steal(&r->body);
  req_wait_reply(r);
  st_import(a->sessions, sid, r->owner, bytes, n, on_imported, r);
}

/* The session of the path's {id}, in RAM or restored from the store; NULL when the request
 * waits for the store (it runs again) or was answered (not found, store error, bad id, or busy
 * when `busy_what` says what to do instead; NULL: a busy session will do). */
static session *found_session(req *r, char sid[129], const char *busy_what) {
  if (!take_id(r, sid)) return NULL;
  session *s = NULL;
  st_status st = req_find_session(r, sid, &s);
  if (st == ST_PENDING) return NULL;
  if (st != ST_FOUND) {
    req_session_error(r, sid, st);
    return NULL;
  }
  if (busy_what && s->busy) {
    busy(r, sid, busy_what);
    return NULL;
  }
  return s;
}

/* GET /v1/sessions/{id} */
void api_session_get(req *r) {
  char sid[129];
  session *s = found_session(r, sid, NULL);
  if (s) reply_obj(r, 200, s, NULL);
}

/* POST /v1/sessions/{id}/fork */
void api_session_fork(req *r) {
  app *a = r->a;
  char sid[129];
  session *s = found_session(r, sid, "fork it when it is idle");
  if (!s) return;
  if (key_full(r)) return;
  xl_error xe;
  memset(&xe, 0, sizeof xe);
  session *f = st_fork(a->sessions, s, &xe);
  if (!f) {
    req_error(r, API_ERR_SESSION_FORK_FAILED, NULL, "%s", xe.message);
    return;
  }
  snprintf(ACTX(r)->session_id, sizeof ACTX(r)->session_id, "%s", f->id);
  fork_ctx *fc = xcalloc(1, sizeof *fc);
  fc->r = r;
  snprintf(fc->parent, sizeof fc->parent, "%s", sid);
  if (st_persist(a->sessions, f, on_fork_saved, fc)) {
    req_wait_reply(r);
    return;
  }
  free(fc);
  reply_obj(r, 201, f, sid);
}

/* GET /v1/sessions/{id}/state */
void api_session_export(req *r) {
  app *a = r->a;
  char sid[129];
  session *s = found_session(r, sid, "export it when it is idle");
  if (!s) return;
  req_wait_reply(r);
  st_export(a->sessions, s, on_exported, r);
}
