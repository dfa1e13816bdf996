/* Random weights for the matmul benchmarks: one xorshift stream, and a
 * weight matrix as quantized floats or, for types without a quantizer, random
 * bytes with sane scales. */
#ifndef DI_BENCH_WEIGHTS_H
#define DI_BENCH_WEIGHTS_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/matmul.h"
#include "model/gguf.h"

static float rndf(uint64_t *s) {
  *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
  return (float)(*s >> 40) / 16777216.0f * 2.0f - 1.0f;
}

/* One random weight matrix: quantized floats, or for K-quants random bytes
 * with sane fp16 scales (we have no K-quant quantizer). */
static void fill_weights(di_dtype t, uint8_t *w, int64_t N, int64_t K, uint64_t *seed) {
  size_t rb = di_dtype_row_bytes(t, K), bb = di_dtype_block_bytes(t);
  float *x = malloc((size_t)K * 4);
  for (int64_t n = 0; n < N; n++) {
    uint8_t *row = w + (size_t)n * rb;
    for (int64_t k = 0; k < K; k++) x[k] = rndf(seed);
    if (di_cpu_quantize_row(t, x, row, K)) continue;
    for (size_t i = 0; i < rb; i++) row[i] = (uint8_t)(rndf(seed) * 127 + 128);
    const uint16_t half = 0x2000; /* 2^-7 */
    for (size_t b = 0; b < rb / bb; b++) {
      uint8_t *blk = row + b * bb;
      if (t == DI_Q6_K) {
        memcpy(blk + 208, &half, 2);
      } else if (t == DI_MXFP4) {
        blk[0] = 121; /* 2^-7 */
      } else {
        memcpy(blk, &half, 2);
        memcpy(blk + 2, &half, 2);
      }
    }
  }
  free(x);
}

#endif
