/* DeepSeek-V4's CPU ops (backend/cpu/dsv4.c):
 * - each within float error of a double-precision evaluation of its formula
 *   (the row sums, the compressor's per-channel softmax pooling, the indexer's
 *   ReLU'd weighted head dots, sink attention, mHC collapse / expand);
 * - the AVX-512 versions bit-identical to the forced scalar level, for widths
 *   with and without a 16-lane tail;
 * - top-k: the set a full sort by (score descending, index ascending) picks,
 *   ascending, with many ties, k >= n and k = 1. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/dsv4.h"
#include "backend/cpu/isa.h"
#include "check.h"

static uint32_t g_rng = 4242;
static float rndf(void) {
  g_rng ^= g_rng << 13, g_rng ^= g_rng >> 17, g_rng ^= g_rng << 5;
  return (float)((double)g_rng / 4294967296.0 * 2.0 - 1.0);
}
static float *rnd(size_t n, float sc) {
  float *x = malloc(n * sizeof *x);
  for (size_t i = 0; i < n; i++) x[i] = sc * rndf();
  return x;
}
static bool close_to(float got, double want, double tol) { return fabs(got - want) <= tol * (1 + fabs(want)); }

typedef struct outs {
  float a[16384];
} outs;

/* every op once at the current ISA level, results into o */
static void run_ops(int n, int dim, int heads, int nk, outs *o, float *X, int *nout) {
  enum { N = 4 };
  float *x = rnd((size_t)N * n, 2.0f), *pre = rnd(N, 1.0f), *post = rnd(N, 1.0f), *comb = rnd(N * N, 1.0f);
  float *oo = rnd((size_t)n, 1.0f), *q = rnd((size_t)heads * dim, 1.0f), *w = rnd((size_t)heads, 1.0f);
  float *rows = rnd((size_t)nk * dim, 1.0f), *gates = rnd((size_t)nk * dim, 3.0f), work[2 * 600];
  /* attention: heads - 1 query heads (blocks of eight, four and one), sink 0.5 for head 0 */
  const int nh = heads - 1;
  float *sinks = rnd((size_t)nh, 1.0f), *s = malloc((size_t)nh * nk * sizeof(float)), one[512];
  sinks[0] = 0.5f;
  const float *kp[600], *gp[600];
  for (int r = 0; r < nk; r++) kp[r] = rows + (size_t)r * dim, gp[r] = gates + (size_t)r * dim;
  int k = 0;
  di_cpu_rms_norm_unit(x, o->a + k, n, 1e-6f), k += n;
  di_cpu_hc_norm(x, o->a + k, N * n, 1e-6f), k += N * n;
  di_cpu_hc_collapse(x, pre, N, n, o->a + k), k += n;
  memcpy(X, x, (size_t)N * n * sizeof *x);
  di_cpu_hc_expand(X, oo, post, comb, N, n);
  di_cpu_compress_pool(kp, gp, nk, dim, work, o->a + k), k += dim;
  di_cpu_indexer_scores(q, w, heads, dim, kp, nk, 0.25f, 0.125f, o->a + k), k += nk;
  di_cpu_attn_sink(q, nh, kp, nk, dim, 0.1f, sinks, s, o->a + k);
  for (int h = 0; h < nh; h += nh / 3) { /* a head alone: the same bits as among the others */
    di_cpu_attn_sink(q + (size_t)h * dim, 1, kp, nk, dim, 0.1f, sinks + h, s, one);
    CHECKF(!memcmp(one, o->a + k + (size_t)h * dim, (size_t)dim * sizeof(float)), "attn_sink: head %d of %d alone differs", h, nh);
  }
  k += nh * dim;
  *nout = k;
  /* the formulas, in double */
  double ss = 0;
  for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
  CHECK(close_to(o->a[3], x[3] / sqrt(ss / n + 1e-6), 1e-5));
  double c0 = 0, e0 = post[1] * (double)oo[5];
  for (int j = 0; j < N; j++) c0 += (double)pre[j] * x[(size_t)j * n + 7], e0 += (double)comb[j * N + 1] * x[(size_t)j * n + 5];
  CHECK(close_to(o->a[n + N * n + 7], c0, 1e-5));
  CHECK(close_to(X[(size_t)1 * n + 5], e0, 1e-5));
  for (int ch = 0; ch < dim; ch += dim / 3 + 1) {
    double mx = -1e30, den = 0, acc = 0;
    for (int r = 0; r < nk; r++) mx = fmax(mx, gp[r][ch]);
    for (int r = 0; r < nk; r++) den += exp(gp[r][ch] - mx), acc += exp(gp[r][ch] - mx) * kp[r][ch];
    CHECKF(close_to(o->a[n + N * n + n + ch], acc / den, 1e-5), "compress_pool ch %d", ch);
  }
  for (int e = 0; e < nk; e += nk / 4 + 1) {
    double sc = 0;
    for (int h = 0; h < heads; h++) {
      double d = 0;
      for (int i = 0; i < dim; i++) d += (double)q[(size_t)h * dim + i] * kp[e][i];
      sc += (d > 0 ? d : 0) * 0.25 * (w[h] * 0.125);
    }
    CHECKF(close_to(o->a[n + N * n + n + dim + e], sc, 1e-5), "indexer_scores row %d", e);
  }
  {
    double m = 0.5, sc[600], den, acc = 0;
    for (int j = 0; j < nk; j++) {
      double d = 0;
      for (int i = 0; i < dim; i++) d += (double)q[i] * kp[j][i];
      sc[j] = 0.1 * d, m = fmax(m, sc[j]);
    }
    den = exp(0.5 - m);
    for (int j = 0; j < nk; j++) den += exp(sc[j] - m), acc += exp(sc[j] - m) * kp[j][dim - 1];
    CHECK(close_to(o->a[n + N * n + n + dim + nk + dim - 1], acc / den, 1e-5));
  }
  free(x), free(pre), free(post), free(comb), free(oo), free(q), free(w), free(rows), free(gates), free(sinks), free(s);
}

static void check_isa(int n, int dim, int heads, int nk) {
  static outs a, b;
  float *Xa = malloc(4 * (size_t)n * sizeof(float)), *Xb = malloc(4 * (size_t)n * sizeof(float));
  int na, nb;
  const di_cpu_isa_level best = di_cpu_isa();
  const uint32_t seed = g_rng;
  run_ops(n, dim, heads, nk, &a, Xa, &na);
  g_rng = seed;
  di_cpu_isa_set(DI_ISA_SCALAR);
  run_ops(n, dim, heads, nk, &b, Xb, &nb);
  di_cpu_isa_set(best);
  CHECKF(na == nb && memcmp(a.a, b.a, (size_t)na * sizeof(float)) == 0 && memcmp(Xa, Xb, 4 * (size_t)n * sizeof(float)) == 0,
         "%s and scalar differ (n %d, dim %d, heads %d, rows %d)", di_cpu_isa_name(best), n, dim, heads, nk);
  free(Xa), free(Xb);
}

static void check_topk(void) {
  float s[300];
  int32_t sel[300], work[300];
  for (int it = 0; it < 3000; it++) {
    const int n = 1 + it % 250, k = it % 7 == 0 ? n + 3 : 1 + (it * 37) % 40;
    for (int i = 0; i < n; i++) s[i] = (float)(int)(8 * rndf()); /* many ties */
    const int m = di_cpu_topk(s, n, k, sel, work);
    bool taken[300] = {false};
    const int kk = k < n ? k : n;
    for (int j = 0; j < kk; j++) { /* the j-th best: higher score, ties to the lower index */
      int b = -1;
      for (int i = 0; i < n; i++)
        if (!taken[i] && (b < 0 || s[i] > s[b])) b = i;
      taken[b] = true;
    }
    int r = 0, bad = m != kk;
    for (int i = 0; i < n && !bad; i++)
      if (taken[i]) bad |= r >= m || sel[r++] != i;
    CHECKF(!bad, "topk n %d k %d", n, k);
  }
}

int main(void) {
  check_topk();
  static const int dims[][4] = {{64, 16, 16, 9}, {40, 13, 16, 37}, {512, 128, 64, 300}, {100, 37, 32, 17}};
  for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) check_isa(dims[i][0], dims[i][1], dims[i][2], dims[i][3]);
  printf("test_dsv4_ops: V4 ops match their formulas; %s bit-identical to scalar\n", di_cpu_isa_name(di_cpu_isa()));
  return di_test_finish("test_dsv4_ops");
}
