#include "util/progress.h"

#include <stdio.h>
#include <unistd.h>

static di_progress_fn g_fn;
static void *g_user;

void di_progress_set(di_progress_fn fn, void *user) {
  g_fn = fn;
  g_user = user;
}

void di_progress(const char *what, double fraction) {
  if (g_fn) g_fn(what, fraction, g_user);
}

void di_progress_stderr(const char *what, double fraction, void *user) {
  (void)user;
  if (!isatty(2)) return;
  fprintf(stderr, "\r%s: %3.0f%%%s", what, fraction * 100, fraction >= 1 ? "\n" : "");
  fflush(stderr);
}
