/*
 * session_wait.h: a turn that finds its session busy with a turn being cancelled waits for it
 * (bounded) instead of 409. Thread: loop thread only.
 */
#ifndef XL_SESSION_WAIT_H
#define XL_SESSION_WAIT_H

#include "app.h"

/* The longest a turn waits for a cancelled turn of its session to end, in seconds. */
#define SESSION_CANCEL_WAIT_S 2.0

/* s (now held by r's turn) remembers r's connection: a later turn can see its client leave. */
void session_turn_held(req *r, session *s);

/* s is busy. 1: the turn that holds it is being cancelled (or its client has gone, so it is
 * about to be) and r has waited less than SESSION_CANCEL_WAIT_S: r is suspended and its handler
 * runs again shortly. 0: s is busy with a live turn (or the wait is over): answer 409.
 * *since is r's wait's start (0 before the first wait). */
int session_wait_cancelled(req *r, session *s, double *since);

#endif
