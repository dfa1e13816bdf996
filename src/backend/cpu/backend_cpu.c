/* The CPU backend as a di_backend (backend/backend.h): the kernels of
 * matmul.h, ops.h, attention.h and route.h behind one table. The few ops
 * that were loops in graph/ (MoE gather and scatter, V4's clipped SwiGLU)
 * live here with the same loops, so the bits do not move. */
#include "backend/cpu/backend_cpu.h"

#include <string.h>

#include "backend/cpu/attention.h"
#include "backend/cpu/dsv4.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/route.h"

static void cpu_matmul(const di_tensor *w, const void *xq, int64_t M, float *Y, int64_t ldy, int64_t n0,
                       int64_t n1) {
  if (w->packed) di_cpu_matmul_packed(w->type, w->data, w->ne[1], xq, M, w->ne[0], Y, ldy, n0, n1);
  else di_cpu_matmul(w->type, w->data, w->row_bytes, xq, M, w->ne[0], Y, ldy, n0, n1);
}

static void cpu_free_weights(di_model *m) { (void)m; /* packing is in place, MLA's head views in the model's own buffers */ }

static void cpu_get_row(const di_tensor *w, int64_t row, float *dst) {
  if (w->packed) di_cpu_packed_dequant_row(w->type, w->data, w->ne[1], w->ne[0], row, dst);
  else di_cpu_dequant_row(w->type, (const uint8_t *)w->data + (size_t)row * w->row_bytes, dst, w->ne[0]);
}

static void cpu_gather_rows(float *dst, const float *src, const int32_t *rows, int n, int D) {
  for (int r = 0; r < n; r++) memcpy(dst + (size_t)r * D, src + (size_t)rows[r] * D, (size_t)D * sizeof(float));
}

static void cpu_scatter_add(float *acc, const float *y, const int32_t *rows, const float *w, int n, int D) {
  for (int r = 0; r < n; r++) {
    const float wr = w[r], *yr = y + (size_t)r * D;
    float *a = acc + (size_t)rows[r] * D;
    for (int i = 0; i < D; i++) a[i] += wr * yr[i];
  }
}

/* the clamps, then di_cpu_glu's SiLU(g) * u (SIMD, the bits of di_cpu_silu_mul1) on chunks */
static void cpu_glu_clip(float *g, const float *u, size_t n, float lim) {
  float b[256];
  for (size_t i0 = 0; i0 < n; i0 += 256) {
    const int m = n - i0 < 256 ? (int)(n - i0) : 256;
    for (int i = 0; i < m; i++) {
      const float x = g[i0 + i], y = u[i0 + i];
      g[i0 + i] = x > lim ? lim : x, b[i] = y > lim ? lim : y < -lim ? -lim : y;
    }
    di_cpu_glu(g + i0, b, m, DI_ACT_SILU);
  }
}

static const di_backend cpu_backend = {
    .name = "cpu",
    .dtype_supported = di_cpu_dtype_supported,
    .prepare_weights = di_cpu_prepare_weights,
    .free_weights = cpu_free_weights,
    .act_bytes = di_cpu_act_bytes,
    .act_format = di_cpu_act_format,
    .act_prepare = di_cpu_act_prepare,
    .matmul = cpu_matmul,
    .wide_gemm = di_cpu_amx_active,
    .get_row = cpu_get_row,
    .dequant_row = di_cpu_dequant_row,
    .gather_rows = cpu_gather_rows,
    .scatter_add = cpu_scatter_add,
    .rms_norm = di_cpu_rms_norm,
    .rms_norm_rows = di_cpu_rms_norm_rows,
    .rope = di_cpu_rope,
    .rope_cache = di_cpu_rope_cache,
    .glu = di_cpu_glu,
    .glu_clip = cpu_glu_clip,
    .add = di_cpu_add,
    .softcap = di_cpu_softcap,
    .kv_store = di_cpu_kv_store,
    .kv_load = di_cpu_kv_load,
    .attn_create = di_attn_sched_create,
    .attn_free = di_attn_sched_free,
    .attn = di_attn_run,
    .moe_route = di_cpu_moe_route,
    .rms_norm_unit = di_cpu_rms_norm_unit,
    .rope_inv = di_cpu_rope_inv,
    .scale = di_cpu_scale,
    .hc_norm = di_cpu_hc_norm,
    .hc_maps = di_cpu_hc_maps,
    .hc_collapse = di_cpu_hc_collapse,
    .hc_expand = di_cpu_hc_expand,
    .compress_pool = di_cpu_compress_pool,
    .indexer_scores = di_cpu_indexer_scores,
    .topk = di_cpu_topk,
    .attn_sink = di_cpu_attn_sink,
    .moe_route_v4 = di_cpu_moe_route_v4,
    .moe_bucket = di_cpu_moe_bucket,
};

const di_backend *di_backend_cpu(void) { return &cpu_backend; }
