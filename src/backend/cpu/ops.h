/* CPU kernels for the non-matmul ops of the op program. Every op reduces in
 * a fixed order per row (row invariance, DESIGN section 1). */
#ifndef DI_BACKEND_CPU_OPS_H
#define DI_BACKEND_CPU_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "backend/cpu/softmax_exp.h"
#include "kv/pool.h"
#include "model/model.h"

/* y = x / rms(x) * w over n elements (y may alias x). */
void di_cpu_rms_norm(const float *x, const float *w, float *y, int n, float eps);
/* The same on rows rows (x and y ldx / ldy floats apart), each row the bits of
 * di_cpu_rms_norm; AVX-512 does up to 16 rows at a time. */
void di_cpu_rms_norm_rows(const float *x, size_t ldx, const float *w, float *y, size_t ldy, int rows, int n, float eps);
void di_cpu_rms_norm16_avx512(const float *x, size_t ldx, const float *w, float *y, size_t ldy, int rows, int n,
                              float eps);
/* Rotates pairs of one head in place; cs holds (cos, sin) per pair. */
void di_cpu_rope(float *head, const float *cs, int rope_dim, di_rope_type type);
void di_cpu_rope_avx512(float *head, const float *cs, int rope_dim, di_rope_type type); /* rope_dim % 32 == 0 */
/* Fills cs[rope_dim] with (cos, sin) for position pos. */
void di_cpu_rope_cache(float *cs, int pos, int rope_dim, float base, const di_hparams *hp, bool scaled,
                       const float *freq_factors);
/* g[i] = act(g[i]) * u[i] */
void di_cpu_glu(float *g, const float *u, int n, di_act act);
/* SiLU(g) * u = g / (1 + exp(-g)) * u with softmax_exp.h's exp (within 1 ulp):
 * the same bits on every ISA and C library, and vectorizable, unlike a libm
 * expf per element (which took ~6% of a 16-sequence SmolLM2 decode step). The
 * SIMD versions repeat these operations lane by lane. */
static inline float di_cpu_silu_mul1(float g, float u) { return g / (1.0f + di_softmax_exp(-g)) * u; }
/* GELU (tanh form) * u: 0.5 g (1 + tanh(v)) = g / (1 + exp(-2v)), v = sqrt(2/pi) (g + 0.044715 g^3),
 * the same sigmoid as SiLU's on 2v: the same exp, the same bits on every ISA, no
 * libm tanhf per element (~8% of a Gemma 3 270M prefill). */
#define DI_GELU_K 1.5957691216057308f /* 2 sqrt(2/pi) */
#define DI_GELU_A 0.044715f
static inline float di_cpu_gelu_mul1(float g, float u) {
  /* g + A g^3 as an explicit fma, so no compiler's contraction choice can change the bits */
  float t = fmaf(DI_GELU_A * (g * g), g, g);
  return g / (1.0f + di_softmax_exp(-(DI_GELU_K * t))) * u;
}
/* g[i] = SiLU(g[i]) * u[i], or GELU when gelu: the scalar operations lane by lane. */
void di_cpu_glu_avx2(float *g, const float *u, int n, bool gelu);
void di_cpu_glu_avx512(float *g, const float *u, int n, bool gelu);
void di_cpu_glu_neon(float *g, const float *u, int n, bool gelu);
void di_cpu_add(float *x, const float *y, int n);
void di_cpu_add_avx512(float *x, const float *y, int n);
void di_cpu_softcap(float *x, int n, float cap);

/* Stores n floats into the KV cache element type. */
void di_cpu_kv_store(void *dst, const float *src, int n, di_kv_dtype type);
/* Its F16 case with F16C (same bits as the scalar di_f32_to_f16). */
void di_cpu_kv_store_f16_avx2(uint16_t *dst, const float *src, int n);
void di_cpu_kv_load(float *dst, const void *src, int n, di_kv_dtype type);
void di_cpu_kv_load_f16_avx2(float *dst, const uint16_t *src, int n);

#endif
