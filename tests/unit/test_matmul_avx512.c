/* The AVX-512 F32/F16/BF16 kernels (matmul_avx512.c) give exactly the AVX2
 * kernels' bits: every output for M 1..13, 17, 20, 96, 101 (7-12 rows F32 in one
 * tall tile, from 96 rows F16/BF16 run on weight panels converted to f32), column ranges cut at odd points (odd
 * tiles, the single-column leftovers), K with and without a K % 8 tail.
 * Natively where the CPU has AVX-512F; test_matmul_avx512emu.c includes this
 * file with FL512_TEST_KERNEL set to the SIMDe build, so AVX2-only hosts check
 * the same code. */
#include <stdint.h>

#include "backend/cpu/isa.h"
#include "backend/cpu/matmul_kernels.h"
#include "backend/cpu/quant.h"
#include "check.h"

#ifndef FL512_TEST_NAME
#define FL512_TEST_NAME "test_matmul_avx512"
#endif

#if defined(__x86_64__)
#ifndef FL512_TEST_KERNEL
#define FL512_TEST_KERNEL di_cpu_mm_avx512
#define FL512_NEEDS_CPU 1
#endif

static uint32_t g_rng = 2463534242u;
static float rndf(void) {
  g_rng ^= g_rng << 13, g_rng ^= g_rng >> 17, g_rng ^= g_rng << 5;
  return (float)((double)g_rng / 4294967296.0 * 2.0 - 1.0);
}

#define MMAX 104

static void check_shape(di_dtype t, int64_t N, int64_t K) {
  size_t es = t == DI_F32 ? 4 : 2, rb = es * (size_t)K;
  uint8_t *W = malloc(rb * (size_t)N);
  float *X = malloc((size_t)(MMAX * K) * 4), *ref = malloc((size_t)(MMAX * N) * 4), *y = malloc((size_t)(MMAX * N) * 4);
  for (int64_t i = 0; i < N * K; i++) {
    float v = rndf() * (i % 7 == 0 ? 4.0f : 0.5f);
    if (t == DI_F32) memcpy(W + 4 * i, &v, 4);
    else {
      uint16_t h = t == DI_F16 ? di_cpu_f32_to_fp16(v) : di_cpu_f32_to_bf16(v);
      memcpy(W + 2 * i, &h, 2);
    }
  }
  for (int64_t i = 0; i < MMAX * K; i++) X[i] = rndf();
  di_cpu_mm_fn avx2 = di_cpu_mm_avx2(t), avx512 = FL512_TEST_KERNEL(t);
  CHECK(avx2 && avx512);
  if (!avx2 || !avx512) return;
  int bad = 0;
  static const int64_t Ms[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 17, 20, 96, 101};
  for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++) {
    const int64_t M = Ms[mi];
    int64_t first = (M * 5) % (MMAX - M + 1);
    const float *xm = X + first * K;
    avx2(W, rb, xm, (size_t)K * 4, M, K, ref, N, 0, N);
    memset(y, 0xff, (size_t)(MMAX * N) * 4);
    int64_t cuts[4] = {0, N / 3, N - N / 5, N};
    for (int c = 0; c < 3; c++) avx512(W, rb, xm, (size_t)K * 4, M, K, y, N, cuts[c], cuts[c + 1]);
    for (int64_t i = 0; i < M * N; i++)
      if (memcmp(&y[i], &ref[i], 4) != 0) {
        if (bad++ == 0)
          fprintf(stderr, "%s N=%ld K=%ld M=%ld: first difference at row %ld col %ld: %a vs %a\n", di_dtype_name(t),
                  (long)N, (long)K, (long)M, (long)(i / N), (long)(i % N), y[i], ref[i]);
        break;
      }
  }
  CHECKF(bad == 0, "%s N=%ld K=%ld: %d batch shapes differ from AVX2", di_dtype_name(t), (long)N, (long)K, bad);
  free(W), free(X), free(ref), free(y);
}

int main(void) {
#ifdef FL512_NEEDS_CPU
  const di_cpu_features *f = di_cpu_features_get();
  if (!(f->avx2 && f->fma && f->f16c && f->avx512f)) {
    printf("%s: skipped, this CPU has no AVX-512F (test_matmul_avx512emu checks the same code)\n", FL512_TEST_NAME);
    return 77;
  }
#endif
  const di_dtype types[] = {DI_F32, DI_F16, DI_BF16};
  const int64_t Ns[] = {1, 3, 8, 13, 37};
  const int64_t Ks[] = {8, 64, 100, 520, 1540};
  for (size_t ti = 0; ti < 3; ti++)
    for (size_t ni = 0; ni < sizeof Ns / sizeof Ns[0]; ni++)
      for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++) check_shape(types[ti], Ns[ni], Ks[ki]);
  CHECK(FL512_TEST_KERNEL(DI_Q8_0) == NULL);
  printf("%s: F32/F16/BF16 bit-identical to AVX2 for M 1..13, 17, 20, 96, 101, split columns\n", FL512_TEST_NAME);
  return di_test_finish(FL512_TEST_NAME);
}
#else
int main(void) {
  printf("%s: skipped, not x86-64\n", FL512_TEST_NAME);
  return 77;
}
#endif
