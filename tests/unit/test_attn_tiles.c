/* The x86 attention tiles agree bit for bit: the AVX-512 group tile and the
 * AVX2 group tile against each query's own AVX2 tile, for every KV type,
 * tile length, head size (multiples of 16 and not), query count (1 to 33:
 * partial and several 16-query passes) and per-query lengths (all the tile,
 * or ragged as on a prefill's diagonal tile), with and without soft-capping. (The scalar tile sums in another order; the model
 * tests bound its difference.) */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/attn.h"
#include "backend/cpu/isa.h"
#include "check.h"
#include "util/fp16.h"

#if defined(DI_CPU_X86)
static uint32_t g_rng = 12345;
static float rndf(void) {
  g_rng ^= g_rng << 13, g_rng ^= g_rng >> 17, g_rng ^= g_rng << 5;
  return (float)((double)g_rng / 4294967296.0 * 2.0 - 1.0);
}

static void put(uint8_t *p, di_kv_dtype t, float x) {
  if (t == DI_KV_DTYPE_F32) memcpy(p, &x, 4);
  else {
    uint16_t h = t == DI_KV_DTYPE_F16 ? di_f32_to_f16(x) : di_f32_to_bf16(x);
    memcpy(p, &h, 2);
  }
}

#define NQ 33
static void check_case(di_kv_dtype t, int n, int hd, int nq, bool ragged, float softcap, bool avx512) {
  const size_t es = t == DI_KV_DTYPE_F32 ? 4 : 2;
  uint8_t *k = malloc((size_t)n * hd * es), *v = malloc((size_t)n * hd * es);
  const uint8_t *kr[DI_ATTN_TILE], *vr[DI_ATTN_TILE];
  for (int j = 0; j < n; j++) {
    for (int d = 0; d < hd; d++) put(k + ((size_t)j * hd + d) * es, t, 2 * rndf()), put(v + ((size_t)j * hd + d) * es, t, rndf());
    kr[j] = k + (size_t)j * hd * es, vr[j] = v + (size_t)j * hd * es;
  }
  static float qs[NQ][DI_ATTN_GROUP_MAX_HD];
  const float *q[NQ] = {0};
  int qn[NQ];
  for (int i = 0; i < nq; i++) qn[i] = ragged ? 1 + (int)((unsigned)(i * 7 + n) % (unsigned)n) : n;
  if (ragged) qn[nq / 2] = n; /* the group's rows reach the longest query */
  di_attn_partial *one[NQ] = {0}, *grp[NQ] = {0}, *wide[NQ] = {0};
  for (int i = 0; i < nq; i++) {
    for (int d = 0; d < hd; d++) qs[i][d] = rndf();
    q[i] = qs[i];
    one[i] = calloc(1, di_attn_partial_bytes(hd)), grp[i] = calloc(1, di_attn_partial_bytes(hd));
    wide[i] = calloc(1, di_attn_partial_bytes(hd));
    di_cpu_attn_tile_avx2(q[i], kr, vr, qn[i], hd, t, 0.125f, softcap, one[i]);
  }
  di_cpu_attn_tile_group_avx2(q, nq, kr, vr, n, ragged ? qn : NULL, hd, t, 0.125f, softcap, grp);
  if (avx512) di_cpu_attn_tile_group_avx512(q, nq, kr, vr, n, ragged ? qn : NULL, hd, t, 0.125f, softcap, wide);
  const size_t bytes = di_attn_partial_bytes(hd);
  for (int i = 0; i < nq; i++) {
    CHECKF(!memcmp(one[i], grp[i], bytes), "AVX2 group: kv %d n %d hd %d nq %d ragged %d q %d", (int)t, n, hd, nq, ragged, i);
    if (avx512) CHECKF(!memcmp(one[i], wide[i], bytes), "AVX-512: kv %d n %d hd %d nq %d ragged %d q %d cap %g", (int)t, n, hd, nq, ragged, i,
                              softcap);
    free(one[i]), free(grp[i]), free(wide[i]);
  }
  free(k), free(v);
}

/* The AVX2 merge against the scalar one (forced through di_cpu_isa_set). */
static void check_merge(int n, int hd) {
  di_attn_partial *p[16] = {0};
  for (int i = 0; i < n; i++) {
    p[i] = calloc(1, di_attn_partial_bytes(hd));
    p[i]->m = 4 * rndf(), p[i]->l = 1 + 8 * fabsf(rndf());
    for (int d = 0; d < hd; d++) p[i]->acc[d] = 3 * rndf();
  }
  float simd[DI_ATTN_GROUP_MAX_HD] = {0}, ref[DI_ATTN_GROUP_MAX_HD] = {0};
  di_cpu_attn_merge((const di_attn_partial *const *)p, n, hd, simd);
  di_cpu_isa_level lv = di_cpu_isa();
  di_cpu_isa_set(DI_ISA_SCALAR);
  di_cpu_attn_merge((const di_attn_partial *const *)p, n, hd, ref);
  di_cpu_isa_set(lv);
  CHECKF(!memcmp(simd, ref, (size_t)hd * sizeof(float)), "merge: n %d hd %d", n, hd);
  for (int i = 0; i < n; i++) free(p[i]);
}

int main(void) {
  const bool avx512 = di_cpu_isa() >= DI_ISA_AVX512;
  if (di_cpu_isa() < DI_ISA_AVX2) {
    puts("test_attn_tiles: no AVX2 here, skipped");
    return 77;
  }
  const di_kv_dtype types[] = {DI_KV_DTYPE_F16, DI_KV_DTYPE_F32, DI_KV_DTYPE_BF16};
  const int ns[] = {1, 7, 8, 33, 64}, hds[] = {64, 80, 128, 256, 576};
  for (int ti = 0; ti < 3; ti++)
    for (int ni = 0; ni < 5; ni++)
      for (int hi = 0; hi < 5; hi++)
        for (int nq = 1; nq <= NQ; nq += nq < 9 ? 1 : 8)
          for (int rg = 0; rg < 2; rg++) check_case(types[ti], ns[ni], hds[hi], nq, rg, nq % 3 == 0 ? 30.0f : 0.0f, avx512);
  for (int n = 1; n <= 16; n += 5)
    for (int hi = 0; hi < 5; hi++) check_merge(n, hds[hi]);
  printf("test_attn_tiles: merge bit-identical to the scalar merge; AVX2 group%s tiles bit-identical to the AVX2 tile\n", avx512 ? " and AVX-512" : "");
  return di_test_finish("test_attn_tiles");
}
#else
int main(void) {
  puts("test_attn_tiles: x86 only, skipped");
  return 77;
}
#endif
