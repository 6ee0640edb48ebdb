/*
 * app_store.h: the session store in the daemon (app_store.c): opens the backend, starts its
 * thread once the model is loaded, expires sessions on the TTL timer, persists what the store
 * lacks at shutdown. Main/loop thread only.
 */
#ifndef XLS_APP_STORE_H
#define XLS_APP_STORE_H

#include <stddef.h>

#include "app.h"

int app_store_open(app *a, char *err, size_t cap);   /* main thread, before listening */
int app_store_start(app *a, char *err, size_t cap);  /* once the model is loaded */
void app_store_expire(app *a);                       /* TTL timer */
void app_store_shutdown(app *a);                     /* do_shutdown, after the workers */
void app_store_free(app *a);                         /* after the loop ended */

#endif
