/* NEON versions of elementwise ops: the scalar operations of ops.c, lane by
 * lane (same bits). */
#include <arm_neon.h>

#include "backend/cpu/ops.h"
#include "backend/cpu/softmax_exp.h"

void di_cpu_glu_neon(float *g, const float *u, int n, bool gelu) {
  const float32x4_t one = vdupq_n_f32(1.0f), k = vdupq_n_f32(DI_GELU_K), a = vdupq_n_f32(DI_GELU_A);
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    float32x4_t x = vld1q_f32(g + i), z = x;
    if (gelu) z = vmulq_f32(k, vfmaq_f32(x, vmulq_f32(a, vmulq_f32(x, x)), x));
    float32x4_t e = di_softmax_exp_neon(vnegq_f32(z));
    vst1q_f32(g + i, vmulq_f32(vdivq_f32(x, vaddq_f32(one, e)), vld1q_f32(u + i)));
  }
  for (; i < n; i++) g[i] = gelu ? di_cpu_gelu_mul1(g[i], u[i]) : di_cpu_silu_mul1(g[i], u[i]);
}
