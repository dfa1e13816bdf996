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

/* HB (<= 8) heads at a time over the same rows, each key vector loaded once
 * for all of them (the rows are read HB times less: one head at a time, the
 * rows' traffic from L2 bounds the kernel); every head's own sums run as in
 * the one-head loop, so its bits do not depend on HB. */
static inline void attn_sink_block(const float *q, const int HB, const float *const *keys, int nk, int hd,
                                   float scale, const float *sinks, float *s, float *o) {
  for (int j0 = 0; j0 < nk; j0 += 2) {
    const float *kp[2] = {keys[j0], keys[j0 + 1 < nk ? j0 + 1 : j0]};
    V acc[8][2];
    for (int h = 0; h < HB; h++) acc[h][0] = acc[h][1] = V_ZERO();
    for (int i = 0; i < hd; i += 16) {
      const V k0 = V_LOAD(kp[0] + i, hd - i), k1 = V_LOAD(kp[1] + i, hd - i);
      for (int h = 0; h < HB; h++) {
        const V qv = V_LOAD(q + (size_t)h * hd + i, hd - i);
        acc[h][0] = V_FMA(qv, k0, acc[h][0]);
        acc[h][1] = V_FMA(qv, k1, acc[h][1]);
      }
    }
    for (int h = 0; h < HB; h++)
      for (int r = 0; r < 2 && j0 + r < nk; r++) s[(size_t)h * nk + j0 + r] = fold16(acc[h][r]) * scale;
  }
  V dv[8];
  for (int h = 0; h < HB; h++) {
    float *sh = s + (size_t)h * nk, m = sinks[h];
    for (int j = 0; j < nk; j++) m = sh[j] > m ? sh[j] : m;
    const V mv = V_SET1(m);
    for (int j = 0; j < nk; j += 16) V_STORE(sh + j, V_EXP(V_SUB(V_LOAD(sh + j, nk - j), mv)), nk - j);
    float den = di_softmax_exp(sinks[h] - m);
    for (int j = 0; j < nk; j++) den += sh[j];
    dv[h] = V_SET1(den);
  }
  for (int d0 = 0; d0 < hd; d0 += 32) { /* two vectors of each head's output at a time, kept in registers */
    V a0[8], a1[8];
    for (int h = 0; h < HB; h++) a0[h] = a1[h] = V_ZERO();
    for (int j = 0; j < nk; j++) {
      const V k0 = V_LOAD(keys[j] + d0, hd - d0);
      const V k1 = hd - d0 > 16 ? V_LOAD(keys[j] + d0 + 16, hd - d0 - 16) : V_ZERO();
      for (int h = 0; h < HB; h++) {
        const V ev = V_SET1(s[(size_t)h * nk + j]);
        a0[h] = V_FMA(ev, k0, a0[h]);
        if (hd - d0 > 16) a1[h] = V_FMA(ev, k1, a1[h]);
      }
    }
    for (int h = 0; h < HB; h++) {
      float *oh = o + (size_t)h * hd;
      V_STORE(oh + d0, V_DIV(a0[h], dv[h]), hd - d0);
      if (hd - d0 > 16) V_STORE(oh + d0 + 16, V_DIV(a1[h], dv[h]), hd - d0 - 16);
    }
  }
}

void DSV4_FN(di_cpu_attn_sink)(const float *q, int nh, const float *const *keys, int nk, int hd, float scale,
                               const float *sinks, float *s, float *o) {
  for (int h = 0, hb; h < nh; h += hb) {
    hb = nh - h >= 8 ? 8 : nh - h >= 4 ? 4 : 1;
    const size_t at = (size_t)h * hd;
    if (hb == 8) attn_sink_block(q + at, 8, keys, nk, hd, scale, sinks + h, s + (size_t)h * nk, o + at);
    else if (hb == 4) attn_sink_block(q + at, 4, keys, nk, hd, scale, sinks + h, s + (size_t)h * nk, o + at);
    else attn_sink_block(q + at, 1, keys, nk, hd, scale, sinks + h, s + (size_t)h * nk, o + at);
  }
}
