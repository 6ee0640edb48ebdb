/*
 * chat.h: the chat template for base models and the rule that tells a full-history request
 * from an only-new-messages request and from an edited history.
 *
 * Rendering (all pieces configurable: chat_options, the daemon's chat_* options):
 *   system    -> chat_system_prefix + content + chat_system_suffix
 *   user      -> chat_user_prefix + content + chat_user_suffix
 *   assistant -> chat_assistant_prefix + content + chat_assistant_suffix
 * and a reply is prompted with chat_assistant_prefix. Replies stop at
 * chat_assistant_suffix + chat_user_prefix (trailing spaces trimmed), plus chat_stop.
 *
 * A session in chat mode records, per consumed message, its role and a hash of its content (the
 * reply as returned to the client for assistant messages), and the generated text after the
 * visible reply (the stop string it ended with): the "tail". A later turn's text starts with
 * the closing chat_assistant_suffix; when that text begins with the tail (the model already
 * wrote the user's turn header), the tail is not fed twice. So the memory holds exactly the
 * rendering of the whole conversation, whatever way it was sent.
 *
 * The history rule (history "auto"; transcript T = the session's recorded messages, request
 * M = the request's messages), first match wins:
 *   - the session is empty: everything is fed (new);
 *   - M extends T (T is a strict prefix of M): only M's messages after T are fed (full_history);
 *   - M is T with old messages dropped from its front (optionally keeping T's first message
 *     when it is the same system message): the rest of M, from T's last reply on, continues T
 *     and only the messages after that reply are fed (trimmed_history);
 *   - the previous turn was cut (cancel, error): reset and replay M;
 *   - M holds a system or assistant message (a history, not this one: an edited first
 *     message, an edited reply, another system prompt, the same history again): reset;
 *   - M holds only user messages: they are appended (even when equal in text to earlier ones).
 * history "full": extends T, else reset. history "append": always appended.
 *
 * Thread: loop thread (pure functions over a session it holds).
 */
#ifndef XLS_CHAT_H
#define XLS_CHAT_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "session.h"

/* The template's pieces (borrowed: they must outlive the template). */
typedef struct chat_options {
  const char *system_prefix, *system_suffix;
  const char *user_prefix, *user_suffix;
  const char *assistant_prefix, *assistant_suffix;
  const char *stop; /* an extra stop string for replies ("": none) */
} chat_options;

typedef struct chat_template {
  const char *pre[3], *suf[3]; /* by chat_role */
  const char *extra_stop;
  char *auto_stop; /* malloc'd; "" when none */
} chat_template;

typedef struct chat_message {
  chat_role role;
  const char *content;
  size_t len;
} chat_message;

typedef enum { HISTORY_AUTO, HISTORY_FULL, HISTORY_APPEND } history_mode;

typedef enum {
  PLAN_NEW,    /* the session was empty: everything is fed */
  PLAN_FULL,   /* full history recognised: only messages [first..n) are fed */
  PLAN_APPEND, /* only new messages: all of them are appended */
  PLAN_TRIMMED, /* the history with old messages dropped from its front: messages [first..n) fed */
  PLAN_RESET   /* edited history (or a cut turn): reset the session and replay everything */
} plan_kind;

typedef struct chat_plan {
  plan_kind kind;
  int first; /* first message fed */
  buf text;  /* text to feed (template included, tail elided) */
} chat_plan;

void chat_template_init(chat_template *t, const chat_options *c);
void chat_template_free(chat_template *t);
uint64_t chat_hash(chat_role role, const char *content, size_t len);
void chat_render(const chat_template *t, const chat_message *m, buf *out);
/* Decides how to feed messages m[0..n) into session s (not modified) and renders the text. */
void chat_plan_turn(const chat_template *t, const session *s, const chat_message *m, int n,
                    history_mode mode, chat_plan *p);
void chat_plan_free(chat_plan *p);
const char *plan_name(plan_kind k);

#endif
