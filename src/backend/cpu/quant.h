/* Weight block formats in GGUF's exact bit layout, the activation formats the
 * int8 kernels pair them with, and scalar fp16/bf16 conversions.
 *
 * The structs mirror ggml's so a GGUF tensor's bytes can be read in place; the
 * static asserts pin their sizes to the on-disk type sizes. */
#ifndef DI_CPU_QUANT_H
#define DI_CPU_QUANT_H

#include <assert.h>
#include <stdint.h>
#include <string.h>

#include "model/gguf.h"
#include "util/fp16.h"

#define DI_QK32 32  /* elements per block of the legacy formats (Q4_0 … Q8_0) */
#define DI_QKK 256  /* elements per super-block of the K-quants */
#define DI_K_SCALE_BYTES 12

typedef uint16_t di_fp16;
typedef uint16_t di_bf16;

/* d * (q - 8), q a nibble; element j in the low nibble of qs[j], j+16 in the high one. */
typedef struct { di_fp16 d; uint8_t qs[DI_QK32 / 2]; } di_block_q4_0;
/* d * q + m */
typedef struct { di_fp16 d, m; uint8_t qs[DI_QK32 / 2]; } di_block_q4_1;
/* d * (q - 16), q = nibble | bit j of qh << 4 */
typedef struct { di_fp16 d; uint8_t qh[4]; uint8_t qs[DI_QK32 / 2]; } di_block_q5_0;
/* d * q + m, q 5 bits as in Q5_0 */
typedef struct { di_fp16 d, m; uint8_t qh[4]; uint8_t qs[DI_QK32 / 2]; } di_block_q5_1;
/* d * q */
typedef struct { di_fp16 d; int8_t qs[DI_QK32]; } di_block_q8_0;

/* OCP MX FP4 (ggml's block_mxfp4): one E8M0 exponent e and 32 E2M1 codes,
 * element j in the low nibble of qs[j], j + 16 in the high one; value =
 * di_mxfp4_kv[code] * 2^(e - 128). The table holds twice the E2M1 values (0,
 * 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives), small integers, so a block
 * is an int8 block with a power-of-two scale: its int8 dot is exact. */
typedef struct { uint8_t e; uint8_t qs[DI_QK32 / 2]; } di_block_mxfp4;
static const int8_t di_mxfp4_kv[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
/* 2^(e - 128) as float bits, exact for every e (e < 2: subnormal). */
static inline uint32_t di_e8m0_half_bits(uint32_t e) { return e < 2 ? 0x00200000u << e : (e - 1) << 23; }
static inline float di_e8m0_half(uint8_t e) {
  uint32_t b = di_e8m0_half_bits(e);
  float f;
  memcpy(&f, &b, 4);
  return f;
}

/* 8 sub-blocks of 32; sub-block j is (d*sc_j) * q - (dmin*m_j) with 6-bit sc/m
 * packed in scales[12]; sub-blocks 2p and 2p+1 share qs[32p..32p+31] (low, high nibble). */
typedef struct {
  di_fp16 d, dmin;
  uint8_t scales[DI_K_SCALE_BYTES];
  uint8_t qs[DI_QKK / 2];
} di_block_q4_K;
/* As Q4_K plus a fifth bit: bit j of qh[l] is the high bit of element l of sub-block j. */
typedef struct {
  di_fp16 d, dmin;
  uint8_t scales[DI_K_SCALE_BYTES];
  uint8_t qh[DI_QKK / 8];
  uint8_t qs[DI_QKK / 2];
} di_block_q5_K;
/* 16 sub-blocks of 16 with int8 scales; q = 6 bits - 32 (ql: low 4, qh: high 2). */
typedef struct {
  uint8_t ql[DI_QKK / 2];
  uint8_t qh[DI_QKK / 4];
  int8_t scales[DI_QKK / 16];
  di_fp16 d;
} di_block_q6_K;

static_assert(sizeof(di_block_q4_0) == 18, "Q4_0 block is 18 bytes");
static_assert(sizeof(di_block_q4_1) == 20, "Q4_1 block is 20 bytes");
static_assert(sizeof(di_block_q5_0) == 22, "Q5_0 block is 22 bytes");
static_assert(sizeof(di_block_q5_1) == 24, "Q5_1 block is 24 bytes");
static_assert(sizeof(di_block_q8_0) == 34, "Q8_0 block is 34 bytes");
static_assert(sizeof(di_block_mxfp4) == 17, "MXFP4 block is 17 bytes");
static_assert(sizeof(di_block_q4_K) == 144, "Q4_K block is 144 bytes");
static_assert(sizeof(di_block_q5_K) == 176, "Q5_K block is 176 bytes");
static_assert(sizeof(di_block_q6_K) == 210, "Q6_K block is 210 bytes");

/* Activation formats (internal, never on disk). They reproduce ggml's CPU
 * activation quantizers (AVX2 build) value for value, so logits match llama.cpp's
 * and greedy decoding does not drift at near-ties (docs/ARCHITECTURE.md, Numerics).
 * di_act_q8: one row of 32-element blocks, for Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 weights:
 * ggml's Q8_0 (d = amax/127 rounded to fp16, q = round-half-even(x * 127/amax))
 * plus Q8_1's s = fp16(d * sum q) with the unrounded d, which Q4_1/Q5_1 use to
 * apply the weight's min. d and s are stored as the floats of those fp16 values;
 * sum = sum q exactly, for the packed Q4_0 kernel's offset (8 * sum, see matmul_pack.c). */
typedef struct { float d, s; int32_t sum; int8_t qs[DI_QK32]; } di_act_q8;
/* di_act_q8k: ggml's Q8_K, 256-element blocks for the K-quants: iscale = -127/max
 * with max the signed element of largest magnitude (first on ties), q =
 * min(127, round-half-even(iscale * x)), d = 1/iscale (f32, negative when max > 0);
 * bsums[i] = sum of qs[16i..16i+15] so the mins (Q4_K/Q5_K) cost one madd per block. */
typedef struct { float d; int16_t bsums[DI_QKK / 16]; int8_t qs[DI_QKK]; } di_act_q8k;
static_assert(sizeof(di_act_q8) == 44, "act q8 block");
static_assert(sizeof(di_act_q8k) == 292, "act q8k block");

static inline float di_cpu_fp16_to_f32(di_fp16 h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man != 0) { /* subnormal: man * 2^-24 is exact in f32 */
    float f = (float)man * 0x1p-24f;
    return sign ? -f : f;
  } else {
    bits = sign;
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

/* Round to nearest even, as F16C and numpy do, so quantized scales match ggml. */
di_fp16 di_cpu_f32_to_fp16(float f);

/* f through fp16 and back: the value ggml keeps where it stores an fp16. */
static inline float di_cpu_fp16_round(float f) { return di_cpu_fp16_to_f32(di_cpu_f32_to_fp16(f)); }

/* bf16 is plain truncation/rounding of the f32 bits: shared with the rest of the code. */
static inline float di_cpu_bf16_to_f32(di_bf16 h) { return di_bf16_to_f32(h); }
static inline di_bf16 di_cpu_f32_to_bf16(float f) { return di_f32_to_bf16(f); }

/* Unpack the 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block. */
static inline void di_cpu_k_scale_min(const uint8_t *s, int j, uint8_t *sc, uint8_t *m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (uint8_t)((s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4));
    *m = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

/* Activation quantizers, one row of k elements (k a multiple of the block). */
void di_cpu_quantize_act_q8(const float *x, di_act_q8 *y, int64_t k);
void di_cpu_quantize_act_q8k(const float *x, di_act_q8k *y, int64_t k);

#endif
