#include "cli/args.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

bool di_arg_int(const char *s, long long lo, long long hi, long long *out) {
  if (!s || !*s) return false;
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || *end || v < lo || v > hi) return false;
  *out = v;
  return true;
}

bool di_arg_float(const char *s, double lo, double hi, double *out) {
  if (!s || !*s) return false;
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || *end || !(v >= lo && v <= hi)) return false;
  *out = v;
  return true;
}

bool di_arg_ids(const char *s, int32_t **ids, int *n) {
  size_t cap = 16;
  int32_t *v = malloc(cap * sizeof *v);
  int k = 0;
  if (!v) return false;
  const char *p = s;
  while (*p == ' ' || *p == '[') p++;
  while (*p && *p != ']') {
    char *end;
    errno = 0;
    long x = strtol(p, &end, 10);
    if (end == p || errno || x < 0 || x > INT32_MAX) {
      free(v);
      return false;
    }
    if ((size_t)k == cap) {
      int32_t *nv = realloc(v, (cap *= 2) * sizeof *v);
      if (!nv) {
        free(v);
        return false;
      }
      v = nv;
    }
    v[k++] = (int32_t)x;
    p = end;
    while (*p == ' ') p++;
    if (*p == ',') p++;
    while (*p == ' ') p++;
  }
  *ids = v;
  *n = k;
  return true;
}

bool di_arg_bytes(const char *s, uint64_t *out) {
  if (!s || !*s) return false;
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || v < 0) return false;
  double mul = 1;
  if (*end == 'K' || *end == 'k') mul = 1024.0, end++;
  else if (*end == 'M' || *end == 'm') mul = 1024.0 * 1024, end++;
  else if (*end == 'G' || *end == 'g') mul = 1024.0 * 1024 * 1024, end++;
  if (*end == 'i') end++;
  if (*end == 'B') end++;
  if (*end) return false;
  *out = (uint64_t)(v * mul);
  return true;
}
