/* Small NEON helpers shared by the *_neon.c kernel files (aarch64 only). */
#ifndef DI_CPU_NEON_H
#define DI_CPU_NEON_H

#include <arm_neon.h>

/* Eight f32 lanes as two registers, so a NEON chain has the lanes of an AVX2 one. */
typedef struct { float32x4_t lo, hi; } f32x8;

/* AVX2's horizontal sums (matmul_avx2.c hsum8/hsum4): halves added, then
 * (0+2) + (1+3); the same pairing keeps NEON and AVX2 results identical. */
static inline float di_neon_hsum4(float32x4_t s) {
  float32x2_t t = vadd_f32(vget_low_f32(s), vget_high_f32(s));
  return vget_lane_f32(t, 0) + vget_lane_f32(t, 1);
}
static inline float di_neon_hsum8(f32x8 v) { return di_neon_hsum4(vaddq_f32(v.lo, v.hi)); }

#endif
