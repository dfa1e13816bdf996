/* AVX-512 versions of per-token ops (compiled with -mavx512f): the scalar
 * operations of ops.c lane by lane, so the same bits. */
#include <immintrin.h>

#include "backend/cpu/ops.h"

/* v[e] lane r <- v[r] lane e (a 16 x 16 transpose in 64 shuffles). */
static inline __attribute__((always_inline)) void transpose16(__m512 v[16]) {
  __m512 t[16], u[16], h[16];
  for (int k = 0; k < 8; k++) {
    t[2 * k] = _mm512_unpacklo_ps(v[2 * k], v[2 * k + 1]);
    t[2 * k + 1] = _mm512_unpackhi_ps(v[2 * k], v[2 * k + 1]);
  }
  /* u[4k + m], 128-bit lane j: rows 4k..4k+3 of element 4j + m */
  for (int k = 0; k < 4; k++) {
    const __m512d a = _mm512_castps_pd(t[4 * k]), b = _mm512_castps_pd(t[4 * k + 2]);
    const __m512d c = _mm512_castps_pd(t[4 * k + 1]), d = _mm512_castps_pd(t[4 * k + 3]);
    u[4 * k] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
    u[4 * k + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
    u[4 * k + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(c, d));
    u[4 * k + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(c, d));
  }
  /* h[m] / h[4 + m]: lanes 0-1 / 2-3 of u[m], u[4 + m]; h[8 + m] / h[12 + m] the same of u[8 + m], u[12 + m] */
  for (int m = 0; m < 4; m++) {
    h[m] = _mm512_shuffle_f32x4(u[m], u[4 + m], 0x44);
    h[4 + m] = _mm512_shuffle_f32x4(u[m], u[4 + m], 0xee);
    h[8 + m] = _mm512_shuffle_f32x4(u[8 + m], u[12 + m], 0x44);
    h[12 + m] = _mm512_shuffle_f32x4(u[8 + m], u[12 + m], 0xee);
  }
  for (int m = 0; m < 4; m++) {
    v[m] = _mm512_shuffle_f32x4(h[m], h[8 + m], 0x88);          /* element m */
    v[4 + m] = _mm512_shuffle_f32x4(h[m], h[8 + m], 0xdd);      /* element 4 + m */
    v[8 + m] = _mm512_shuffle_f32x4(h[4 + m], h[12 + m], 0x88); /* element 8 + m */
    v[12 + m] = _mm512_shuffle_f32x4(h[4 + m], h[12 + m], 0xdd);
  }
}

/* di_cpu_rms_norm on rows 1..16 rows (n a multiple of 16): each row's sum of
 * squares in its own element order, one lane per row, from 16 x 16 transposed
 * blocks (the scalar loop is one serial add chain per row); lanes past the
 * rows repeat the last row and are not stored. */
void di_cpu_rms_norm16_avx512(const float *x, size_t ldx, const float *w, float *y, size_t ldy, int rows, int n,
                              float eps) {
  __m512 acc = _mm512_setzero_ps();
  const float *xr[16];
  for (int r = 0; r < 16; r++) xr[r] = x + (r < rows ? r : rows - 1) * ldx;
  for (int i = 0; i < n; i += 16) {
    __m512 v[16];
    for (int r = 0; r < 16; r++) v[r] = _mm512_loadu_ps(xr[r] + i);
    transpose16(v);
    for (int e = 0; e < 16; e++) acc = _mm512_add_ps(acc, _mm512_mul_ps(v[e], v[e]));
  }
  const __m512 s = _mm512_div_ps(_mm512_set1_ps(1.0f),
                                 _mm512_sqrt_ps(_mm512_add_ps(_mm512_div_ps(acc, _mm512_set1_ps((float)n)),
                                                              _mm512_set1_ps(eps))));
  _Alignas(64) float sr[16];
  _mm512_store_ps(sr, s);
  for (int r = 0; r < rows; r++) {
    const __m512 sv = _mm512_set1_ps(sr[r]);
    for (int i = 0; i < n; i += 16)
      _mm512_storeu_ps(y + r * ldy + i,
                       _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(x + r * ldx + i), sv), _mm512_loadu_ps(w + i)));
  }
}

void di_cpu_glu_avx512(float *g, const float *u, int n, bool gelu) {
  const __m512 one = _mm512_set1_ps(1.0f), neg = _mm512_set1_ps(-0.0f);
  const __m512 k = _mm512_set1_ps(DI_GELU_K), a = _mm512_set1_ps(DI_GELU_A);
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 x = _mm512_loadu_ps(g + i), z = x;
    if (gelu) z = _mm512_mul_ps(k, _mm512_fmadd_ps(_mm512_mul_ps(a, _mm512_mul_ps(x, x)), x, x));
    __m512 e = di_softmax_exp_avx512(_mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(z), _mm512_castps_si512(neg))));
    _mm512_storeu_ps(g + i, _mm512_mul_ps(_mm512_div_ps(x, _mm512_add_ps(one, e)), _mm512_loadu_ps(u + i)));
  }
  if (i < n) di_cpu_glu_avx2(g + i, u + i, n - i, gelu);
}

/* di_cpu_rope on a head whose rope_dim is a multiple of 32: per pair, x0 c -
 * x1 s and x0 s + x1 c as products and one add (x - y is x + (-y) exactly). */
void di_cpu_rope_avx512(float *h, const float *cs, int rope_dim, di_rope_type type) {
  const __m512i flip = _mm512_set1_epi64((long long)0x80000000); /* the even (first) element of each pair */
  if (type == DI_ROPE_NEOX) {
    /* pairs (i, i + half); cs interleaved (c_i, s_i) */
    const int half = rope_dim / 2;
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    for (int i = 0; i < half; i += 16) {
      const __m512 a = _mm512_loadu_ps(cs + 2 * i), b = _mm512_loadu_ps(cs + 2 * i + 16);
      const __m512 c = _mm512_permutex2var_ps(a, ev, b), s = _mm512_permutex2var_ps(a, od, b);
      const __m512 x0 = _mm512_loadu_ps(h + i), x1 = _mm512_loadu_ps(h + i + half);
      _mm512_storeu_ps(h + i, _mm512_sub_ps(_mm512_mul_ps(x0, c), _mm512_mul_ps(x1, s)));
      _mm512_storeu_ps(h + i + half, _mm512_add_ps(_mm512_mul_ps(x0, s), _mm512_mul_ps(x1, c)));
    }
    return;
  }
  /* pairs (2i, 2i + 1), 8 per zmm: even lanes x0 c - x1 s, odd lanes x1 c + x0 s */
  for (int i = 0; i < rope_dim; i += 16) {
    const __m512 x = _mm512_loadu_ps(h + i), t = _mm512_loadu_ps(cs + i);
    const __m512 c = _mm512_moveldup_ps(t), s = _mm512_movehdup_ps(t);
    const __m512 xs = _mm512_permute_ps(x, 0xb1); /* swap within pairs */
    const __m512 q = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(_mm512_mul_ps(xs, s)), flip));
    _mm512_storeu_ps(h + i, _mm512_add_ps(_mm512_mul_ps(x, c), q));
  }
}

void di_cpu_add_avx512(float *x, const float *y, int n) {
  int i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, _mm512_add_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
  for (; i < n; i++) x[i] += y[i];
}
