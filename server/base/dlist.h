/*
 * dlist.h: the intrusive doubly linked list every queue and LRU of the daemon uses. A list is a
 * head and a tail pointer (the tail may be a dummy lvalue for lists without one); a node carries
 * its own two link fields, named by the caller, so a node can sit in several lists at once (a
 * job in the scheduler's queue by q_prev/q_next, a session in the LRU by lru_prev/lru_next).
 * Each macro evaluates its arguments more than once: pass plain lvalues. Thread: the caller's
 * (no locking).
 */
#ifndef XLS_DLIST_H
#define XLS_DLIST_H

/* Appends node n at the tail. */
#define DLIST_APPEND(head, tail, n, PREV, NEXT)                                                    \
  do {                                                                                             \
    (n)->NEXT = NULL;                                                                              \
    (n)->PREV = (tail);                                                                            \
    if (tail) (tail)->NEXT = (n);                                                                  \
    else (head) = (n);                                                                             \
    (tail) = (n);                                                                                  \
  } while (0)

/* Inserts node n at the head. */
#define DLIST_PUSH_FRONT(head, tail, n, PREV, NEXT)                                                \
  do {                                                                                             \
    (n)->PREV = NULL;                                                                              \
    (n)->NEXT = (head);                                                                            \
    if (head) (head)->PREV = (n);                                                                  \
    else (tail) = (n);                                                                             \
    (head) = (n);                                                                                  \
  } while (0)

/* Unlinks node n (which is in the list) and clears its links. */
#define DLIST_REMOVE(head, tail, n, PREV, NEXT)                                                    \
  do {                                                                                             \
    if ((n)->PREV) (n)->PREV->NEXT = (n)->NEXT;                                                    \
    else (head) = (n)->NEXT;                                                                       \
    if ((n)->NEXT) (n)->NEXT->PREV = (n)->PREV;                                                    \
    else (tail) = (n)->PREV;                                                                       \
    (n)->PREV = (n)->NEXT = NULL;                                                                  \
  } while (0)

#endif
