/* The SIMD per-token ops give the scalar ops' bits:
 * - di_cpu_rms_norm_rows (up to 16 rows at a time on AVX-512) against di_cpu_rms_norm,
 *   for row counts that leave remainders, lengths that are and are not multiples
 *   of 16, rows that are all zero or very small / large, and in-place use;
 * - RoPE (both layouts, rotary dims that are and are not multiples of 32) and
 *   the residual add at the best ISA level against the forced scalar level. */
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

static void check_rope_add(void) {
  const di_cpu_isa_level best = di_cpu_isa();
  static const int dims[] = {32, 64, 128, 256, 24, 80};
  for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
    for (int type = 0; type < 2; type++) {
      const int rd = dims[di], hd = rd + 16;
      float cs[256], a[272], b[272];
      for (int i = 0; i < rd / 2; i++) {
        const double th = 0.37 * (i + 1) * (1 + di);
        cs[2 * i] = (float)cos(th), cs[2 * i + 1] = (float)sin(th);
      }
      for (int i = 0; i < hd; i++) a[i] = b[i] = 3 * rndf();
      di_cpu_rope(a, cs, rd, (di_rope_type)type);
      CHECK(di_cpu_isa_set(DI_ISA_SCALAR));
      di_cpu_rope(b, cs, rd, (di_rope_type)type);
      CHECK(di_cpu_isa_set(best));
      CHECKF(!memcmp(a, b, sizeof(float) * (size_t)hd), "rope: rotary dim %d type %d differs from scalar", rd, type);
    }
  float x[1000], y[1000], ref[1000];
  for (int i = 0; i < 1000; i++) x[i] = ref[i] = rndf() * 100, y[i] = rndf();
  di_cpu_add(x, y, 999);
  for (int i = 0; i < 999; i++) ref[i] += y[i];
  CHECK(!memcmp(x, ref, sizeof x));
}

int main(void) {
  check_rope_add();
  static const int rows[] = {1, 2, 3, 8, 15, 16, 17, 40, 64};
  static const int ns[] = {16, 64, 576, 768, 2048, 40, 100};
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
    for (size_t j = 0; j < sizeof ns / sizeof ns[0]; j++) {
      check_rows(rows[i], ns[j], (size_t)ns[j], false);
      check_rows(rows[i], ns[j], (size_t)ns[j] + 32, true);
    }
  printf("test_ops_simd: rms_norm rows, rope and add (%s) bit-identical to the scalar ops\n", di_cpu_isa_name(di_cpu_isa()));
  return di_test_finish("test_ops_simd");
}
