/* Splits a reasoning model's output into reasoning_content (inside
 * <think>...</think>) and content, incrementally, so streamed deltas and the
 * non-streamed message agree. A tag cut across two deltas is held back until
 * it is complete. */
#ifndef DI_SERVER_THINK_H
#define DI_SERVER_THINK_H

#include <stddef.h>

typedef struct di_srv_think {
  int state;      /* 0 = start of output, 1 = inside think, 2 = content */
  int skip_ws;    /* drop whitespace right after </think> */
  int opened;     /* a think block was opened (by the prompt or the output) */
  char held[16];  /* possible partial tag */
  size_t n_held;
} di_srv_think;

/* open = 1 when the prompt already opened <think>. */
void di_srv_think_init(di_srv_think *t, int open);
/* Feeds text; calls emit(user, is_reasoning, s, n) for each piece. final
 * flushes anything held back. */
void di_srv_think_feed(di_srv_think *t, const char *s, size_t n, int final,
                       void (*emit)(void *user, int reasoning, const char *s, size_t n), void *user);

#endif
