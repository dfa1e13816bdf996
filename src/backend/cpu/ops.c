#include "backend/cpu/ops.h"

#include <math.h>
#include <string.h>

#include "backend/cpu/isa.h"
#include "util/fp16.h"

void di_cpu_rms_norm(const float *x, const float *w, float *y, int n, float eps) {
  float sum = 0;
  for (int i = 0; i < n; i++) sum += x[i] * x[i];
  float s = 1.0f / sqrtf(sum / (float)n + eps);
  for (int i = 0; i < n; i++) y[i] = x[i] * s * w[i];
}

void di_cpu_rms_norm_rows(const float *x, size_t ldx, const float *w, float *y, size_t ldy, int rows, int n, float eps) {
  int r = 0;
#if defined(DI_CPU_X86)
  if (di_cpu_isa() >= DI_ISA_AVX512 && n % 16 == 0) /* one row alone: the serial loop is as fast */
    for (int m; rows - r >= 2; r += m) {
      m = rows - r < 16 ? rows - r : 16;
      di_cpu_rms_norm16_avx512(x + r * ldx, ldx, w, y + r * ldy, ldy, m, n, eps);
    }
#endif
  for (; r < rows; r++) di_cpu_rms_norm(x + r * ldx, w, y + r * ldy, n, eps);
}

/* Per-dimension inverse frequency, with the context-extension schemes. */
static double inv_freq(int i, int rope_dim, float base, const di_hparams *hp, bool scaled, const float *ff,
                       double *mscale) {
  double f = pow((double)base, -2.0 * i / rope_dim);
  if (ff) f /= ff[i];
  if (!scaled) return f;
  switch (hp->rope_scaling) {
    case DI_ROPE_SCALE_LINEAR: return f / hp->rope_factor;
    case DI_ROPE_SCALE_LLAMA3: {
      if (ff) return f; /* GGUF stores the llama3 factors as rope_freqs */
      double wavelen = 2 * M_PI / f, orig = hp->rope_orig_ctx;
      double lo = orig / hp->rope_low_freq_factor, hi = orig / hp->rope_high_freq_factor;
      if (wavelen < hi) return f;
      if (wavelen > lo) return f / hp->rope_factor;
      double smooth = (orig / wavelen - hp->rope_low_freq_factor) /
                      (hp->rope_high_freq_factor - hp->rope_low_freq_factor);
      return (1 - smooth) * f / hp->rope_factor + smooth * f;
    }
    case DI_ROPE_SCALE_YARN: {
      /* YaRN: interpolate low frequencies, keep high ones, ramp between the
       * dims whose wavelength fits beta_fast=32 / beta_slow=1 rotations. */
      double orig = hp->rope_orig_ctx > 0 ? hp->rope_orig_ctx : hp->n_ctx_train;
      double beta_fast = hp->rope_yarn_beta_fast > 0 ? hp->rope_yarn_beta_fast : 32;
      double beta_slow = hp->rope_yarn_beta_slow > 0 ? hp->rope_yarn_beta_slow : 1;
      double lo_d = rope_dim * log(orig / (beta_fast * 2 * M_PI)) / (2 * log(base));
      double hi_d = rope_dim * log(orig / (beta_slow * 2 * M_PI)) / (2 * log(base));
      if (!hp->rope_yarn_no_truncate) {
        lo_d = floor(lo_d);
        hi_d = ceil(hi_d);
      }
      if (lo_d < 0) lo_d = 0;
      if (hi_d > rope_dim - 1) hi_d = rope_dim - 1;
      if (hi_d == lo_d) hi_d += 0.001;
      double ramp = (i - lo_d) / (hi_d - lo_d);
      ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
      double extrap = 1 - ramp;
      *mscale = hp->rope_attn_factor > 0 ? hp->rope_attn_factor : 0.1 * log(hp->rope_factor) + 1.0;
      return f / hp->rope_factor * (1 - extrap) + f * extrap;
    }
    default: return f;
  }
}

void di_cpu_rope_cache(float *cs, int pos, int rope_dim, float base, const di_hparams *hp, bool scaled,
                       const float *freq_factors) {
  for (int i = 0; i < rope_dim / 2; i++) {
    double mscale = 1.0;
    double theta = pos * inv_freq(i, rope_dim, base, hp, scaled, freq_factors, &mscale);
    cs[2 * i] = (float)(cos(theta) * mscale);
    cs[2 * i + 1] = (float)(sin(theta) * mscale);
  }
}

void di_cpu_rope(float *h, const float *cs, int rope_dim, di_rope_type type) {
#if defined(DI_CPU_X86)
  if (rope_dim % 32 == 0 && di_cpu_isa() >= DI_ISA_AVX512) {
    di_cpu_rope_avx512(h, cs, rope_dim, type);
    return;
  }
#endif
  int half = rope_dim / 2;
  for (int i = 0; i < half; i++) {
    int a = type == DI_ROPE_NEOX ? i : 2 * i, b = type == DI_ROPE_NEOX ? i + half : 2 * i + 1;
    float c = cs[2 * i], s = cs[2 * i + 1], x0 = h[a], x1 = h[b];
    h[a] = x0 * c - x1 * s;
    h[b] = x0 * s + x1 * c;
  }
}

void di_cpu_glu(float *g, const float *u, int n, di_act act) {
  const bool gelu = act == DI_ACT_GELU_TANH;
#if defined(DI_CPU_X86)
  if (di_cpu_isa() >= DI_ISA_AVX512) {
    di_cpu_glu_avx512(g, u, n, gelu);
    return;
  }
  if (di_cpu_isa() >= DI_ISA_AVX2) {
    di_cpu_glu_avx2(g, u, n, gelu);
    return;
  }
#elif defined(DI_CPU_ARM64)
  if (di_cpu_isa() == DI_ISA_NEON) {
    di_cpu_glu_neon(g, u, n, gelu);
    return;
  }
#endif
  for (int i = 0; i < n; i++) g[i] = gelu ? di_cpu_gelu_mul1(g[i], u[i]) : di_cpu_silu_mul1(g[i], u[i]);
}

void di_cpu_add(float *x, const float *y, int n) {
#if defined(DI_CPU_X86)
  if (di_cpu_isa() >= DI_ISA_AVX512) {
    di_cpu_add_avx512(x, y, n);
    return;
  }
#endif
  for (int i = 0; i < n; i++) x[i] += y[i];
}

void di_cpu_softcap(float *x, int n, float cap) {
  for (int i = 0; i < n; i++) x[i] = cap * tanhf(x[i] / cap);
}

void di_cpu_kv_store(void *dst, const float *src, int n, di_kv_dtype type) {
  if (type == DI_KV_DTYPE_F32) {
    memcpy(dst, src, (size_t)n * 4);
  } else if (type == DI_KV_DTYPE_F16) {
    uint16_t *d = dst;
#if defined(DI_CPU_X86)
    if (di_cpu_isa() >= DI_ISA_AVX2) {
      di_cpu_kv_store_f16_avx2(d, src, n);
      return;
    }
#endif
    for (int i = 0; i < n; i++) d[i] = di_f32_to_f16(src[i]);
  } else {
    uint16_t *d = dst;
    for (int i = 0; i < n; i++) d[i] = di_f32_to_bf16(src[i]);
  }
}

void di_cpu_kv_load(float *dst, const void *src, int n, di_kv_dtype type) {
  if (type == DI_KV_DTYPE_F32) {
    memcpy(dst, src, (size_t)n * 4);
    return;
  }
  const uint16_t *s = src;
  if (type == DI_KV_DTYPE_BF16) {
    for (int i = 0; i < n; i++) dst[i] = di_bf16_to_f32(s[i]);
    return;
  }
#if defined(DI_CPU_X86)
  if (di_cpu_isa() >= DI_ISA_AVX2) {
    di_cpu_kv_load_f16_avx2(dst, s, n);
    return;
  }
#endif
  for (int i = 0; i < n; i++) dst[i] = di_f16_to_f32(s[i]);
}

static inline float load_elt(const void *base, size_t i, di_kv_dtype t) {
  if (t == DI_KV_DTYPE_F32) return ((const float *)base)[i];
  uint16_t h = ((const uint16_t *)base)[i];
  return t == DI_KV_DTYPE_F16 ? di_f16_to_f32(h) : di_bf16_to_f32(h);
}

void di_cpu_attention(const di_kv_pool *kv, int layer, const int32_t *blocks, int kvh, int head_dim,
                      const float *q, int lo, int hi, float scale, float softcap, float *scores, float *out) {
  const int bs = kv->block_size;
  const size_t off = (size_t)kvh * head_dim;
  float mx = -INFINITY;
  for (int j = lo; j <= hi; j++) {
    const void *kb = di_kv_k(kv, blocks[j / bs], layer);
    size_t base = (size_t)(j % bs) * kv->kv_dim + off;
    float s = 0;
    for (int d = 0; d < head_dim; d++) s += q[d] * load_elt(kb, base + d, kv->type);
    s *= scale;
    if (softcap > 0) s = softcap * tanhf(s / softcap);
    scores[j - lo] = s;
    if (s > mx) mx = s;
  }
  float sum = 0;
  for (int j = lo; j <= hi; j++) {
    float e = expf(scores[j - lo] - mx);
    scores[j - lo] = e;
    sum += e;
  }
  float inv = 1.0f / sum;
  for (int d = 0; d < head_dim; d++) out[d] = 0;
  for (int j = lo; j <= hi; j++) {
    const void *vb = di_kv_v(kv, blocks[j / bs], layer);
    size_t base = (size_t)(j % bs) * kv->kv_dim + off;
    float p = scores[j - lo] * inv;
    for (int d = 0; d < head_dim; d++) out[d] += p * load_elt(vb, base + d, kv->type);
  }
}
