/* Progress of long operations (model loading). The library reports; the
 * front end decides whether and how to show it (the CLI draws a line on a
 * terminal's stderr, the server logs nothing). */
#ifndef DI_UTIL_PROGRESS_H
#define DI_UTIL_PROGRESS_H

typedef void (*di_progress_fn)(const char *what, double fraction, void *user);

void di_progress_set(di_progress_fn fn, void *user);
/* fraction in [0, 1]; 1 marks the end of `what`. */
void di_progress(const char *what, double fraction);
/* A ready-made reporter: a self-overwriting line on stderr when it is a terminal. */
void di_progress_stderr(const char *what, double fraction, void *user);

#endif
