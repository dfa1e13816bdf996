/* Our dequantization (and quantization, where gguf-py has a quantizer) against
 * gguf-py 0.19.0, bit for bit, on synthetic rows of every type and on real rows
 * of the Gemma 3 270M Q4_K_M and SmolLM2-135M Q4_1 models. The golden file and
 * the script that regenerates it: tests/golden/make_quant_golden.py. Also runs
 * each real row through the matmul against a double-precision reference. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/matmul.h"
#include "check.h"

static uint32_t rd32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int main(void) {
  const char *root = getenv("DI_SOURCE_DIR");
  char path[4096];
  snprintf(path, sizeof path, "%s/tests/golden/quant/quant_golden.bin", root ? root : ".");
  FILE *f = fopen(path, "rb");
  CHECKF(f != NULL, "cannot open %s", path);
  if (!f) return di_test_finish("test_quant_golden");
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *buf = malloc((size_t)size);
  CHECK(fread(buf, 1, (size_t)size, f) == (size_t)size);
  fclose(f);
  CHECK(size > 12 && memcmp(buf, "DIQG", 4) == 0 && rd32(buf + 4) == 1);
  uint32_t count = rd32(buf + 8);
  size_t off = 12;
  int types_seen[DI_DTYPE_COUNT] = {0};
  for (uint32_t r = 0; r < count; r++) {
    CHECK(off + 16 <= (size_t)size);
    if (off + 16 > (size_t)size) break;
    di_dtype t = (di_dtype)rd32(buf + off);
    int64_t n = rd32(buf + off + 4);
    uint32_t has_src = rd32(buf + off + 8), name_len = rd32(buf + off + 12);
    char name[256];
    snprintf(name, sizeof name, "%.*s", (int)(name_len < 255 ? name_len : 255), (const char *)buf + off + 16);
    off += 16 + name_len;
    CHECKF(di_cpu_dtype_supported(t), "%s: type %d unsupported", name, (int)t);
    size_t rb = di_dtype_row_bytes(t, n);
    size_t need = (has_src ? (size_t)n * 4 : 0) + rb + (size_t)n * 4;
    CHECK(off + need <= (size_t)size);
    if (off + need > (size_t)size || !di_cpu_dtype_supported(t)) break;
    /* records are packed; copy to aligned memory as rows in a GGUF file would be */
    float *src = has_src ? malloc((size_t)n * 4) : NULL, *ref = malloc((size_t)n * 4);
    uint8_t *raw = malloc(rb);
    if (src) memcpy(src, buf + off, (size_t)n * 4); /* little-endian host */
    memcpy(raw, buf + off + (src ? (size_t)n * 4 : 0), rb);
    memcpy(ref, buf + off + (src ? (size_t)n * 4 : 0) + rb, (size_t)n * 4);
    off += need;
    types_seen[t]++;

    float *y = malloc((size_t)n * 4);
    di_cpu_dequant_row(t, raw, y, n);
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < n; i++)
      if (memcmp(&y[i], &ref[i], 4) != 0 && !(isnan(y[i]) && isnan(ref[i]))) {
        if (first < 0) first = i;
        bad++;
      }
    CHECKF(bad == 0, "%s: %ld of %ld dequantized values differ from gguf-py (first at %ld: %a vs %a)",
           name, (long)bad, (long)n, (long)first, first >= 0 ? y[first] : 0.0, first >= 0 ? ref[first] : 0.0);

    if (src) {
      uint8_t *q = malloc(rb);
      CHECK(di_cpu_quantize_row(t, src, q, n));
      size_t qbad = 0, qfirst = 0;
      for (size_t i = 0; i < rb; i++)
        if (q[i] != raw[i] && qbad++ == 0) qfirst = i;
      CHECKF(qbad == 0, "%s: %zu of %zu quantized bytes differ from gguf-py (first at byte %zu)", name,
             qbad, rb, qfirst);
      free(q);
    } else {
      /* a real (or K-quant) row: one output of the matmul against double precision */
      float *x = malloc((size_t)n * 4), out;
      double dot = 0, mag = 0;
      for (int64_t i = 0; i < n; i++) {
        x[i] = (float)sin(0.37 * (double)i);
        dot += (double)ref[i] * x[i];
        mag += fabs((double)ref[i] * x[i]);
      }
      void *xq = malloc(di_cpu_act_bytes(t, 1, n));
      di_cpu_act_prepare(t, x, 1, n, xq);
      di_cpu_matmul(t, raw, rb, xq, 1, n, &out, 1, 0, 1);
      /* int8 activations: each product off by at most |w| * amax/254 <= mag-scale 1/127 */
      CHECKF(fabs(out - dot) <= mag / 127.0 + 1e-6, "%s: matmul %g vs %g", name, out, dot);
      free(x), free(xq);
    }
    printf("%-60s %-5s n=%-5ld ok\n", name, di_dtype_name(t), (long)n);
    free(y), free(src), free(ref), free(raw);
  }
  CHECK(off == (size_t)size);
  static const di_dtype want[] = {DI_F16, DI_BF16, DI_Q4_0, DI_Q4_1, DI_Q5_0, DI_Q5_1,
                                  DI_Q8_0, DI_Q4_K, DI_Q5_K, DI_Q6_K};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
    CHECKF(types_seen[want[i]] > 0, "golden has no %s record", di_dtype_name(want[i]));
  free(buf);
  return di_test_finish("test_quant_golden");
}
