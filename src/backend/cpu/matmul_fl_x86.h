/* The x86 parts of the F32/F16/BF16 kernels (f32 activations) shared by
 * matmul_avx2.c and matmul_avx512.c. Both keep one 8-lane f32 chain per output
 * (AVX-512 holds two outputs' chains in one zmm, one per 256-bit half) and end
 * it with fl_finish below, so Y is bit-identical across the two ISA levels:
 * a 512-bit FMA does per lane exactly what a 256-bit one does, and f16/bf16 to
 * f32 conversion is exact. Built with -ffp-contract=off (CMake). */
#ifndef DI_CPU_MATMUL_FL_X86_H
#define DI_CPU_MATMUL_FL_X86_H

#include <immintrin.h>
#include <string.h>

#include "backend/cpu/matmul_kernels.h"
#include "backend/cpu/matmul_tiles.h" /* AI, UNROLL, MT_MAX */
#include "backend/cpu/quant.h"

#define fl_QK 8

AI float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

AI __m256 fl_load(di_dtype t, const uint8_t *p) {
  if (t == DI_F32) return _mm256_loadu_ps((const float *)p);
  __m128i h = _mm_loadu_si128((const __m128i *)p);
  if (t == DI_F16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

AI float fl_scalar(di_dtype t, const uint8_t *row, int64_t k) {
  if (t == DI_F32) return ((const float *)row)[k];
  di_fp16 h;
  memcpy(&h, row + 2 * k, 2);
  return t == DI_F16 ? _cvtsh_ss(h) : di_cpu_bf16_to_f32(h);
}

/* The K % 8 tail elements of one output, in order. Out of line: a tile ends
 * with one finish per output (48 in the AVX-512 6 x 8 tile), and an inlined
 * loop in each of them multiplied the kernel files' code for a case no model
 * shape has. */
static __attribute__((noinline, unused)) float fl_tail(di_dtype t, const uint8_t *wrow, const float *x, int64_t nb,
                                                      int64_t K) {
  float tail = 0;
  for (int64_t k = nb * 8; k < K; k++) tail += fl_scalar(t, wrow, k) * x[k];
  return tail;
}

/* One output from its 8-lane chain over the first nb*8 elements: the lanes'
 * sum plus the tail. */
AI float fl_finish(di_dtype t, __m256 acc, const uint8_t *wrow, const float *x, int64_t nb, int64_t K) {
  const float tail = nb * 8 < K ? fl_tail(t, wrow, x, nb, K) : 0.0f;
  return hsum8(acc) + tail;
}

#endif
