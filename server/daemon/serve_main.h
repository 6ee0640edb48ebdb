/*
 * serve_main.h: `xlserve serve`, the daemon (serve_main.c). Main thread; returns the process
 * exit status.
 */
#ifndef XLS_SERVE_MAIN_H
#define XLS_SERVE_MAIN_H

int serve_main(int argc, char **argv);

#endif
