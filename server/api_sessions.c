/*
 * api_sessions.c: /v1/sessions (POST create, GET list), /v1/sessions/{id} (GET, DELETE),
 * /v1/sessions/{id}/fork (POST). Sessions are scoped to the API key: another key's session
 * answers 404 exactly like a missing one. A busy session cannot be deleted or forked (409).
 * Thread: loop thread.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "util.h"

static const char *mode_name(chat_mode m) {
  switch (m) {
    case CHAT_EMPTY: return "empty";
    case CHAT_MESSAGES: return "chat";
    case CHAT_RAW: return "raw";
    default: return "desync";
  }
}

static void session_obj(buf *b, const session *s) {
  uint64_t tokens = s->busy ? s->snap_tokens : session_tokens(s);
  int mem = s->busy ? s->snap_mem : xl_state_mem_length(s->state);
  buf_adds(b, "{\"id\":");
  json_escape(b, s->id, strlen(s->id));
  buf_printf(b,
             ",\"object\":\"session\",\"created\":%lld,\"last_used\":%lld,\"tokens\":%llu,"
             "\"memory_positions\":%d,\"turns\":%llu,\"mode\":\"%s\",\"messages\":%d,"
             "\"busy\":%s,\"ram_bytes\":%zu}",
             (long long)s->created, (long long)s->last_used, (unsigned long long)tokens, mem,
             (unsigned long long)s->turns, mode_name(s->chat), s->n_msgs,
             s->busy ? "true" : "false", s->ram);
}

static void not_found(req *r, const char *id, st_status st) {
  if (st == ST_EXPIRED)
    req_error(r, 404, "invalid_request_error", "session_expired", "session_id",
              "session %s expired or was evicted; its memory is gone", id);
  else
    req_error(r, 404, "invalid_request_error", "session_not_found", "session_id",
              "session %s not found", id);
}

void api_sessions(req *r, const char *rest) {
  app *a = r->a;
  xl_error xe;
  memset(&xe, 0, sizeof xe);
  buf b;
  buf_init(&b);
  if (!*rest) {
    if (!strcmp(r->method, "POST")) {
      session *s = st_create(a->sessions, NULL, r->owner, &xe);
      if (!s) {
        req_error(r, 500, "server_error", "session_create_failed", NULL, "%s", xe.message);
        return;
      }
      snprintf(r->session_id, sizeof r->session_id, "%s", s->id);
      session_obj(&b, s);
      req_reply_json(r, 201, &b);
      return;
    }
    long limit = 100;
    const char *l = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "limit");
    if (l) {
      char *end;
      limit = strtol(l, &end, 10);
      if (*end || limit < 1 || limit > 10000) {
        req_error(r, 400, "invalid_request_error", "invalid_value", "limit",
                  "'limit' must be an integer in [1, 10000]");
        return;
      }
    }
    session **list = xmalloc(sizeof *list * (size_t)limit);
    size_t n = st_list(a->sessions, r->owner, list, (size_t)limit);
    buf_adds(&b, "{\"object\":\"list\",\"data\":[");
    for (size_t i = 0; i < n; i++) {
      if (i) buf_addc(&b, ',');
      session_obj(&b, list[i]);
    }
    buf_adds(&b, "]}");
    free(list);
    req_reply_json(r, 200, &b);
    return;
  }
  /* rest = "/{id}" or "/{id}/fork" */
  const char *id = rest + 1;
  const char *slash = strchr(id, '/');
  size_t idlen = slash ? (size_t)(slash - id) : strlen(id);
  if (!session_id_valid(id, idlen)) {
    req_error(r, 400, "invalid_request_error", "invalid_value", "session_id",
              "session ids are 1-128 characters of [A-Za-z0-9._-]");
    return;
  }
  char sid[129];
  memcpy(sid, id, idlen);
  sid[idlen] = 0;
  snprintf(r->session_id, sizeof r->session_id, "%s", sid);
  session *s = NULL;
  st_status st = st_lookup(a->sessions, sid, r->owner, &s);
  if (slash) { /* fork */
    if (st != ST_FOUND) { not_found(r, sid, st); return; }
    if (s->busy) {
      req_error(r, 409, "invalid_request_error", "session_busy", "session_id",
                "session %s is serving a request; fork it when it is idle", sid);
      return;
    }
    session *f = st_fork(a->sessions, s, &xe);
    if (!f) {
      req_error(r, 500, "server_error", "session_fork_failed", NULL, "%s", xe.message);
      return;
    }
    snprintf(r->session_id, sizeof r->session_id, "%s", f->id);
    session_obj(&b, f);
    b.len--; /* reopen the object to add its parent */
    buf_adds(&b, ",\"forked_from\":");
    json_escape(&b, sid, strlen(sid));
    buf_addc(&b, '}');
    req_reply_json(r, 201, &b);
    return;
  }
  if (!strcmp(r->method, "DELETE")) {
    if (st == ST_EXPIRED) {
      st_forget_tombstone(a->sessions, sid);
    } else if (st != ST_FOUND) {
      { not_found(r, sid, st); return; }
    } else if (s->busy) {
      req_error(r, 409, "invalid_request_error", "session_busy", "session_id",
                "session %s is serving a request", sid);
      return;
    } else {
      st_delete(a->sessions, s);
    }
    buf_adds(&b, "{\"id\":");
    json_escape(&b, sid, strlen(sid));
    buf_adds(&b, ",\"object\":\"session.deleted\",\"deleted\":true}");
    req_reply_json(r, 200, &b);
    return;
  }
  if (st != ST_FOUND) { not_found(r, sid, st); return; }
  session_obj(&b, s);
  req_reply_json(r, 200, &b);
}
