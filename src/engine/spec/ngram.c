#include "engine/spec/drafter.h"

#include <string.h>

/* Scans backwards so the most recent match wins: in edits and rewrites the
 * nearest earlier occurrence is the one the output is copying. A match must
 * leave at least one following token before the suffix itself begins; the
 * continuation may run into the suffix (a repeating pattern continues). The
 * scan is O(n * g) per call: a few microseconds for a few thousand tokens,
 * against milliseconds per forward. Longer suffixes first: a 1-token match is
 * weak evidence and is kept only when nothing longer matches. */
int di_ngram_propose(const int32_t *tokens, int n, int k, int32_t *out) {
  if (k <= 0 || n < 2) return 0;
  for (int g = n - 1 < DI_NGRAM_MAX ? n - 1 : DI_NGRAM_MAX; g >= DI_NGRAM_MIN; g--) {
    const int32_t *suf = tokens + n - g;
    for (int i = n - g - 1; i >= 0; i--) { /* candidate occurrence tokens[i..i+g) */
      if (tokens[i] != suf[0] || memcmp(tokens + i, suf, (size_t)g * sizeof *tokens)) continue;
      int from = i + g, m = n - from < k ? n - from : k;
      memcpy(out, tokens + from, (size_t)m * sizeof *out);
      return m;
    }
  }
  return 0;
}

static int ngram_propose(void *self, const int32_t *tokens, int n, int k, int32_t *out) {
  (void)self;
  return di_ngram_propose(tokens, n, k, out);
}

void di_drafter_ngram(di_drafter *d) { *d = (di_drafter){.name = "ngram", .propose = ngram_propose}; }
