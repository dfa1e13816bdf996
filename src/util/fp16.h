/* Scalar IEEE half and bfloat16 conversions (round to nearest even). SIMD
 * kernels use F16C; these are the portable reference and the slow path. */
#ifndef DI_UTIL_FP16_H
#define DI_UTIL_FP16_H

#include <stdint.h>
#include <string.h>

static inline float di_f16_to_f32(uint16_t h) {
  /* Exact: scale the 5-bit-exponent value into float via a magic multiply. */
  uint32_t w = (uint32_t)h << 16;
  uint32_t sign = w & 0x80000000u, two_w = w + w;
  const uint32_t exp_offset = 0xE0u << 23;
  float exp_scale, normalized, denormalized;
  uint32_t es = 0x7800000u;
  memcpy(&exp_scale, &es, 4);
  uint32_t nb = (two_w >> 4) + exp_offset;
  memcpy(&normalized, &nb, 4);
  normalized *= exp_scale;
  uint32_t db = (two_w >> 17) | (126u << 23);
  memcpy(&denormalized, &db, 4);
  denormalized -= 0.5f;
  uint32_t r;
  if (two_w < (1u << 27)) memcpy(&r, &denormalized, 4);
  else memcpy(&r, &normalized, 4);
  r |= sign;
  float f;
  memcpy(&f, &r, 4);
  return f;
}

static inline uint16_t di_f32_to_f16(float f) {
  float scale_to_inf, scale_to_zero;
  uint32_t a = 0x77800000u, b = 0x08800000u;
  memcpy(&scale_to_inf, &a, 4);
  memcpy(&scale_to_zero, &b, 4);
  float base = (f < 0 ? -f : f) * scale_to_inf * scale_to_zero;
  uint32_t w;
  memcpy(&w, &f, 4);
  uint32_t shl1_w = w + w, sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xFF000000u;
  if (bias < 0x71000000u) bias = 0x71000000u;
  uint32_t bb = (bias >> 1) + 0x07800000u;
  float bf;
  memcpy(&bf, &bb, 4);
  base = bf + base;
  uint32_t bits;
  memcpy(&bits, &base, 4);
  uint32_t exp_bits = (bits >> 13) & 0x00007C00u, mantissa_bits = bits & 0x00000FFFu;
  uint32_t nonsign = exp_bits + mantissa_bits;
  return (uint16_t)((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

static inline float di_bf16_to_f32(uint16_t h) {
  uint32_t b = (uint32_t)h << 16;
  float f;
  memcpy(&f, &b, 4);
  return f;
}

static inline uint16_t di_f32_to_bf16(float f) {
  uint32_t b;
  memcpy(&b, &f, 4);
  if ((b & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((b >> 16) | 64); /* quiet NaN */
  return (uint16_t)((b + (0x7fffu + ((b >> 16) & 1))) >> 16);
}

#endif
