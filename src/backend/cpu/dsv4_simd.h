/* The SIMD bodies of dsv4.c's ops, written once against a 16-lane vector
 * (V, and VD of 8 doubles) that dsv4_avx512.c maps to one register and
 * dsv4_avx2.c to two: lane l of a row sum holds the elements i with
 * i % 16 == l, as in the scalar loops, so every ISA gives the same bits.
 * The includer defines V / VD, the V_* operations and DSV4_FN(name). */
#include <math.h>
#include <stdlib.h>

#include "backend/cpu/dsv4.h"

static inline float fold16(V v) {
  _Alignas(64) float a[16];
  V_STORE_ALL(a, v);
  return di_cpu_lane_sum16(a);
}

static void scale_row(const float *x, float *y, int n, float r) {
  const V rv = V_SET1(r);
  for (int i = 0; i < n; i += 16) V_STORE(y + i, V_MUL(V_LOAD(x + i, n - i), rv), n - i);
}

void DSV4_FN(di_cpu_rms_norm_unit)(const float *x, float *y, int n, float eps) {
  V acc = V_ZERO();
  for (int i = 0; i < n; i += 16) {
    const V v = V_LOAD(x + i, n - i);
    acc = V_FMA(v, v, acc);
  }
  scale_row(x, y, n, 1.0f / sqrtf(fold16(acc) / (float)n + eps));
}

void DSV4_FN(di_cpu_hc_norm)(const float *x, float *y, int n, float eps) {
  VD acc = VD_ZERO();
  for (int i = 0; i < n; i += 8) {
    const VD v = VD_LOAD_F32(x + i, n - i);
    acc = VD_FMA(v, v, acc);
  }
  _Alignas(64) double a[8];
  VD_STORE_ALL(a, acc);
  scale_row(x, y, n, 1.0f / sqrtf((float)(di_cpu_lane_sum8d(a) / n) + eps));
}

void DSV4_FN(di_cpu_hc_collapse)(const float *X, const float *pre, int N, int D, float *x) {
  for (int d = 0; d < D; d += 16) {
    V a = V_ZERO();
    for (int j = 0; j < N; j++) a = V_ADD(a, V_MUL(V_SET1(pre[j]), V_LOAD(X + (size_t)j * D + d, D - d)));
    V_STORE(x + d, a, D - d);
  }
}

void DSV4_FN(di_cpu_hc_expand)(float *X, const float *o, const float *post, const float *comb, int N, int D) {
  for (int d = 0; d < D; d += 16) {
    V old[16];
    for (int j = 0; j < N; j++) old[j] = V_LOAD(X + (size_t)j * D + d, D - d);
    const V ov = V_LOAD(o + d, D - d);
    for (int c = 0; c < N; c++) {
      V a = V_MUL(V_SET1(post[c]), ov);
      for (int j = 0; j < N; j++) a = V_ADD(a, V_MUL(V_SET1(comb[j * N + c]), old[j]));
      V_STORE(X + (size_t)c * D + d, a, D - d);
    }
  }
}

void DSV4_FN(di_cpu_compress_pool)(const float *const *kv, const float *const *gate, int n, int dim, float *work,
                                   float *out) {
  (void)work; /* the running values stay in registers */
  for (int ch = 0; ch < dim; ch += 16) {
    const int left = dim - ch;
    V mx = V_SET1(-INFINITY), den = V_ZERO(), acc = V_ZERO();
    for (int r = 0; r < n; r++) mx = V_MAX(V_LOAD(gate[r] + ch, left), mx);
    for (int r = 0; r < n; r++) {
      const V e = V_EXP(V_SUB(V_LOAD(gate[r] + ch, left), mx));
      den = V_ADD(den, e);
      acc = V_FMA(e, V_LOAD(kv[r] + ch, left), acc);
    }
    V_STORE(out + ch, V_DIV(acc, den), left);
  }
}

/* Heads in lanes (the queries transposed once), eight rows per pass: each
 * head's dot product runs serially over the dimension as in the scalar loop. */
void DSV4_FN(di_cpu_indexer_scores)(const float *q, const float *w, int heads, int dim, const float *const *keys,
                                    int n, float qs, float ws, float *scores) {
  float *qt = malloc((size_t)dim * heads * sizeof(float));
  _Alignas(64) float wh[DI_CPU_INDEXER_MAX_HEADS];
  if (!qt) abort();
  for (int h = 0; h < heads; h++) {
    wh[h] = w[h] * ws;
    for (int i = 0; i < dim; i++) qt[(size_t)i * heads + h] = q[(size_t)h * dim + i];
  }
  const V qsv = V_SET1(qs), zero = V_ZERO();
  for (int e0 = 0; e0 < n; e0 += 8) {
    const float *kp[8];
    for (int r = 0; r < 8; r++) kp[r] = keys[e0 + r < n ? e0 + r : e0]; /* past the end: discarded repeats */
    V s[8];
    for (int r = 0; r < 8; r++) s[r] = zero;
    for (int hb = 0; hb < heads; hb += 16) {
      V acc[8];
      for (int r = 0; r < 8; r++) acc[r] = zero;
      for (int i = 0; i < dim; i++) {
        const V qv = V_LOAD(qt + (size_t)i * heads + hb, 16);
        for (int r = 0; r < 8; r++) acc[r] = V_FMA(qv, V_SET1(kp[r][i]), acc[r]);
      }
      const V whv = V_LOAD(wh + hb, 16);
      for (int r = 0; r < 8; r++) s[r] = V_ADD(s[r], V_MUL(V_MUL(V_MAX(acc[r], zero), qsv), whv));
    }
    for (int r = 0; r < 8 && e0 + r < n; r++) scores[e0 + r] = fold16(s[r]);
  }
  free(qt);
}

void DSV4_FN(di_cpu_attn_sink)(const float *q, const float *const *keys, int nk, int hd, float scale, float sink,
                               float *s, float *o) {
  for (int j0 = 0; j0 < nk; j0 += 4) {
    const float *kp[4];
    for (int r = 0; r < 4; r++) kp[r] = keys[j0 + r < nk ? j0 + r : j0];
    V acc[4] = {V_ZERO(), V_ZERO(), V_ZERO(), V_ZERO()};
    for (int i = 0; i < hd; i += 16) {
      const V qv = V_LOAD(q + i, hd - i);
      for (int r = 0; r < 4; r++) acc[r] = V_FMA(qv, V_LOAD(kp[r] + i, hd - i), acc[r]);
    }
    for (int r = 0; r < 4 && j0 + r < nk; r++) s[j0 + r] = fold16(acc[r]) * scale;
  }
  float m = sink;
  for (int j = 0; j < nk; j++) m = s[j] > m ? s[j] : m;
  const V mv = V_SET1(m);
  for (int j = 0; j < nk; j += 16) V_STORE(s + j, V_EXP(V_SUB(V_LOAD(s + j, nk - j), mv)), nk - j);
  float den = di_softmax_exp(sink - m);
  for (int j = 0; j < nk; j++) den += s[j];
  const V dv = V_SET1(den);
  for (int d0 = 0; d0 < hd; d0 += 32) { /* two vectors of the output at a time, kept in registers */
    V a0 = V_ZERO(), a1 = V_ZERO();
    for (int j = 0; j < nk; j++) {
      const V ev = V_SET1(s[j]);
      a0 = V_FMA(ev, V_LOAD(keys[j] + d0, hd - d0), a0);
      if (hd - d0 > 16) a1 = V_FMA(ev, V_LOAD(keys[j] + d0 + 16, hd - d0 - 16), a1);
    }
    V_STORE(o + d0, V_DIV(a0, dv), hd - d0);
    if (hd - d0 > 16) V_STORE(o + d0 + 16, V_DIV(a1, dv), hd - d0 - 16);
  }
}
