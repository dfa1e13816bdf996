/* softmax_exp.h: the scalar exp used for attention softmax weights is within
 * 1 ulp of exp (double, rounded) over its whole range, returns 0 below it and
 * for NaN, and the SIMD versions (AVX2 or NEON, where the CPU has them) give
 * the same bits as the scalar one for every input; likewise the SiLU built on
 * it (ops.h di_cpu_silu_mul1 and the GLU's SIMD path). */
#include <math.h>
#include <stdint.h>

#include "backend/cpu/attn.h"
#include "backend/cpu/isa.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/softmax_exp.h"
#include "check.h"

static int32_t ordered(float f) { /* float -> integer with the same order, for ulp distances */
  int32_t i;
  memcpy(&i, &f, sizeof i);
  return i < 0 ? INT32_MIN - i : i;
}

int main(void) {
  enum { N = 1 << 22 };
  float *x = malloc(N * sizeof *x), *ys = malloc(N * sizeof *ys), *yv = malloc(N * sizeof *yv);
  /* A dense sweep of [-87.3, 88] plus the edges and special values. */
  for (int i = 0; i < N - 8; i++) x[i] = DI_SEXP_LO + (DI_SEXP_HI - DI_SEXP_LO) * (float)i / (float)(N - 9);
  const float special[8] = {0.0f, -0.0f, -1e-30f, -88.0f, -INFINITY, NAN, 100.0f, -0.34657359f};
  for (int i = 0; i < 8; i++) x[N - 8 + i] = special[i];
  long worst = 0;
  float worst_x = 0;
  for (int i = 0; i < N; i++) {
    ys[i] = di_softmax_exp(x[i]);
    if (i >= N - 8) continue;
    float want = (float)exp((double)x[i]);
    if (want < 0x1p-126f || x[i] > DI_SEXP_HI) continue; /* subnormal results (absolute error matters there); clamped */
    long d = labs((long)ordered(ys[i]) - (long)ordered(want));
    if (d > worst) worst = d, worst_x = x[i];
  }
  printf("scalar: max error %ld ulp (at x = %.9g)\n", worst, (double)worst_x);
  CHECKF(worst <= 1, "max error %ld ulp at x = %.9g", worst, (double)worst_x);
  CHECK(ys[N - 8] == 1.0f && ys[N - 7] == 1.0f && ys[N - 6] == 1.0f);
  CHECK(ys[N - 5] == 0.0f && ys[N - 4] == 0.0f && ys[N - 3] == 0.0f);  /* -88, -inf, NaN */
  CHECK(ys[N - 2] == di_softmax_exp(DI_SEXP_HI) && isfinite(ys[N - 2])); /* clamped */

  int simd = 0;
#if defined(DI_CPU_X86)
  if (di_cpu_isa() >= DI_ISA_AVX2) di_cpu_softmax_exp_avx2(x, yv, N), simd = 1;
#elif defined(DI_CPU_ARM64)
  if (di_cpu_isa() == DI_ISA_NEON) di_cpu_softmax_exp_neon(x, yv, N), simd = 1;
#endif
  if (simd) {
    int bad = 0;
    for (int i = 0; i < N; i++) bad += memcmp(&ys[i], &yv[i], sizeof(float)) != 0;
    printf("SIMD vs scalar: %d of %d differ\n", bad, N);
    CHECKF(bad == 0, "%d of %d SIMD results differ from the scalar ones", bad, N);
  } else {
    printf("no SIMD level on this CPU: scalar only\n");
  }

  /* SiLU(g) * u (ops.h) on the same inputs and their negatives: SIMD = scalar */
  float *g = malloc(N * sizeof *g), *u = malloc(N * sizeof *u);
  for (int i = 0; i < N; i++) g[i] = i % 2 ? -x[i] : x[i], u[i] = 0.5f + (float)(i % 7);
  for (int i = 0; i < N; i++) ys[i] = di_cpu_silu_mul1(g[i], u[i]);
  CHECK(fabsf(di_cpu_silu_mul1(2.0f, 1.0f) - (float)(2.0 / (1.0 + exp(-2.0)))) < 1e-6f);
  CHECK(di_cpu_silu_mul1(-100.0f, 1.0f) <= 0.0f && di_cpu_silu_mul1(-100.0f, 1.0f) > -1e-30f);
  CHECK(di_cpu_silu_mul1(100.0f, 1.0f) == 100.0f);
  memcpy(yv, g, N * sizeof *g);
  di_cpu_glu(yv, u, N, DI_ACT_SILU);
  int bad = 0;
  for (int i = 0; i < N; i++) bad += memcmp(&ys[i], &yv[i], sizeof(float)) != 0;
  printf("SiLU: %s vs scalar: %d of %d differ\n", di_cpu_isa_name(di_cpu_isa()), bad, N);
  CHECKF(bad == 0, "%d of %d SiLU results differ from the scalar ones", bad, N);

  /* GELU (tanh form) * u: SIMD = scalar, and within float rounding of libm's tanh form */
  for (int i = 0; i < N; i++) ys[i] = di_cpu_gelu_mul1(g[i], u[i]);
  memcpy(yv, g, N * sizeof *g);
  di_cpu_glu(yv, u, N, DI_ACT_GELU_TANH);
  bad = 0;
  double gworst = 0;
  for (int i = 0; i < N; i++) {
    bad += memcmp(&ys[i], &yv[i], sizeof(float)) != 0;
    /* 0.5 x (1 + tanh v) = x / (1 + exp(-2v)) exactly; the second form has no cancellation at large -v */
    double xg = g[i], v = 0.7978845608028654 * (xg + 0.044715 * xg * xg * xg);
    double ref = xg / (1.0 + exp(-2.0 * v)) * u[i], err = fabs(ys[i] - ref);
    if (err > 1e-30 && err / fabs(ref) > gworst) gworst = err / fabs(ref);
  }
  printf("GELU: %s vs scalar: %d of %d differ; max relative error vs the tanh form %.2g (above 1e-30 absolute)\n", di_cpu_isa_name(di_cpu_isa()),
         bad, N, gworst);
  CHECKF(bad == 0, "%d of %d GELU results differ from the scalar ones", bad, N);
  CHECKF(gworst < 1e-5, "GELU: relative error %.3g vs the tanh form", gworst);
  CHECK(di_cpu_gelu_mul1(-100.0f, 1.0f) <= 0.0f && di_cpu_gelu_mul1(-100.0f, 1.0f) > -1e-30f);
  CHECK(di_cpu_gelu_mul1(100.0f, 1.0f) == 100.0f);
  free(g), free(u);
  free(x), free(ys), free(yv);
  return di_test_finish("test_softmax_exp");
}
