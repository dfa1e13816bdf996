/* Row-batched ops give each row the bits of the one-row op: di_cpu_rms_norm_rows
 * (16 rows at a time on AVX-512) against di_cpu_rms_norm, for row counts that
 * leave remainders, lengths that are and are not multiples of 16, rows that
 * are all zero or very small / large, and in-place use. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/isa.h"
#include "backend/cpu/ops.h"
#include "check.h"

static uint32_t g_rng = 777;
static float rndf(void) {
  g_rng ^= g_rng << 13, g_rng ^= g_rng >> 17, g_rng ^= g_rng << 5;
  return (float)((double)g_rng / 4294967296.0 * 2.0 - 1.0);
}

static void check_rows(int rows, int n, size_t ld, bool in_place) {
  float *x = calloc((size_t)rows * ld, 4), *y = calloc((size_t)rows * ld, 4), *ref = malloc((size_t)n * 4);
  float *w = malloc((size_t)n * 4);
  for (int i = 0; i < n; i++) w[i] = 1.0f + 0.5f * rndf();
  for (int r = 0; r < rows; r++) {
    const float sc = r % 7 == 3 ? 0.0f : r % 7 == 5 ? 1e-19f : r % 7 == 6 ? 3e18f : 1.0f;
    for (size_t i = 0; i < ld; i++) x[r * ld + i] = sc * rndf() * (i % 9 == 0 ? 6.0f : 1.0f);
  }
  float *xin = malloc((size_t)rows * ld * 4);
  memcpy(xin, x, (size_t)rows * ld * 4);
  float *out = in_place ? x : y;
  di_cpu_rms_norm_rows(x, ld, w, out, ld, rows, n, 1e-5f);
  int bad = 0;
  for (int r = 0; r < rows; r++) {
    di_cpu_rms_norm(xin + r * ld, w, ref, n, 1e-5f);
    bad += memcmp(ref, out + r * ld, (size_t)n * 4) != 0;
  }
  CHECKF(bad == 0, "rms_norm_rows: %d of %d rows differ (n %d, ld %zu, in place %d)", bad, rows, n, ld, in_place);
  free(x), free(y), free(ref), free(w), free(xin);
}

int main(void) {
  static const int rows[] = {1, 15, 16, 17, 40, 64};
  static const int ns[] = {16, 64, 576, 768, 2048, 40, 100};
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
    for (size_t j = 0; j < sizeof ns / sizeof ns[0]; j++) {
      check_rows(rows[i], ns[j], (size_t)ns[j], false);
      check_rows(rows[i], ns[j], (size_t)ns[j] + 32, true);
    }
  printf("test_ops_rows: rms_norm rows (%s) bit-identical to the one-row norm\n", di_cpu_isa_name(di_cpu_isa()));
  return di_test_finish("test_ops_rows");
}
