/* Minimal assertion helpers for the C unit tests (one executable per file,
 * registered with CTest). A failed CHECK prints file:line and the expression
 * and makes the test exit non-zero at the end. */
#ifndef DI_TEST_CHECK_H
#define DI_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int di_test_failures = 0;
static int di_test_checks = 0;

#define CHECK(cond)                                                          \
  do {                                                                       \
    di_test_checks++;                                                        \
    if (!(cond)) {                                                           \
      di_test_failures++;                                                    \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                        \
  } while (0)

#define CHECKF(cond, ...)                                                    \
  do {                                                                       \
    di_test_checks++;                                                        \
    if (!(cond)) {                                                           \
      di_test_failures++;                                                    \
      fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                          \
      fputc('\n', stderr);                                                   \
    }                                                                        \
  } while (0)

/* A whole file of little-endian f32 (goldens); *n floats, NULL if unreadable. */
static inline float *di_test_read_f32(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long sz = ftell(f);
  fseek(f, 0, SEEK_SET);
  float *d = sz > 0 ? malloc((size_t)sz) : NULL;
  *n = d ? fread(d, 1, (size_t)sz, f) / 4 : 0;
  fclose(f);
  return d;
}

/* Path of a file under ../shared/data (set by CTest via DI_SHARED_DATA). */
static inline const char *di_test_data(const char *rel, char *buf, size_t n) {
  const char *root = getenv("DI_SHARED_DATA");
  snprintf(buf, n, "%s/%s", root ? root : "../shared/data", rel);
  return buf;
}

static inline int di_test_finish(const char *name) {
  printf("%s: %d checks, %d failed\n", name, di_test_checks, di_test_failures);
  return di_test_failures ? 1 : 0;
}

#endif
