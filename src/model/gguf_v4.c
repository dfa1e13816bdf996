/* DeepSeek-V4 from GGUF: the keys llama.cpp's converter writes for
 * general.architecture "deepseek4" (conversion/deepseek.py DeepseekV4Model),
 * read into the same di_hparams the Hugging Face path fills (hf_config.c
 * read_v4), so both bind through the one tensor table (tensors.c). */
#include "model/gguf_v4.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const di_gguf_kv *key(const di_gguf *g, const char *arch, const char *suffix, char *name, size_t n) {
  snprintf(name, n, "%s.%s", arch, suffix);
  return di_gguf_find(g, name);
}

static di_code bad(di_model *m, const char *arch, const char *suffix, const char *what, di_status *st) {
  return di_errorf(st, DI_ERR_FORMAT, "%s: key %s.%s %s", m->path, arch, suffix, what);
}

/* A required integer key within [lo, hi]. */
static di_code req_int(di_model *m, const char *arch, const char *suffix, long long lo, long long hi, int *out,
                       di_status *st) {
  char k[128];
  int64_t v;
  if (!key(m->gguf, arch, suffix, k, sizeof k)) return bad(m, arch, suffix, "is missing", st);
  if (!di_gguf_get_i64(m->gguf, k, &v) || v < lo || v > hi) {
    char what[96];
    snprintf(what, sizeof what, "must be an integer in [%lld, %lld]", lo, hi);
    return bad(m, arch, suffix, what, st);
  }
  *out = (int)v;
  return DI_OK;
}

static di_code opt_float(di_model *m, const char *arch, const char *suffix, double lo, double hi, float *out,
                         di_status *st) {
  char k[128];
  double v;
  if (!key(m->gguf, arch, suffix, k, sizeof k)) return DI_OK;
  if (!di_gguf_get_f64(m->gguf, k, &v) || !isfinite(v) || v < lo || v > hi) {
    char what[96];
    snprintf(what, sizeof what, "must be a number in [%g, %g]", lo, hi);
    return bad(m, arch, suffix, what, st);
  }
  *out = (float)v;
  return DI_OK;
}

/* Element i of a numeric array key as a double. */
static bool arr_num(const di_gguf_kv *kv, uint64_t i, double *out) {
  if (kv->type != DI_GGUF_ARRAY || i >= kv->arr_n) return false;
  const uint8_t *p = kv->arr_data;
  switch (kv->arr_type) {
    case DI_GGUF_INT32: { int32_t x; memcpy(&x, p + 4 * i, 4); *out = x; return true; }
    case DI_GGUF_UINT32: { uint32_t x; memcpy(&x, p + 4 * i, 4); *out = x; return true; }
    case DI_GGUF_FLOAT32: { float x; memcpy(&x, p + 4 * i, 4); *out = x; return true; }
    case DI_GGUF_INT64: { int64_t x; memcpy(&x, p + 8 * i, 8); *out = (double)x; return true; }
    case DI_GGUF_UINT64: { uint64_t x; memcpy(&x, p + 8 * i, 8); *out = (double)x; return true; }
    default: return false;
  }
}

/* A per-layer array (or one scalar for all layers) whose entries must all be
 * equal: the engine holds one value (swiglu_clamp_exp / _shexp). */
static di_code uniform_float(di_model *m, const char *arch, const char *suffix, int n, float *out, di_status *st) {
  char k[128];
  const di_gguf_kv *kv = key(m->gguf, arch, suffix, k, sizeof k);
  if (!kv) return bad(m, arch, suffix, "is missing", st);
  if (kv->type != DI_GGUF_ARRAY) return opt_float(m, arch, suffix, 0, 1e9, out, st);
  double first = 0, v;
  if ((int64_t)kv->arr_n < n) return bad(m, arch, suffix, "has fewer entries than block_count", st);
  for (int i = 0; i < n; i++) {
    if (!arr_num(kv, (uint64_t)i, &v) || !isfinite(v)) return bad(m, arch, suffix, "must hold numbers", st);
    if (i == 0) first = v;
    else if (v != first) return bad(m, arch, suffix, "differs between layers (one value per model is supported)", st);
  }
  *out = (float)first;
  return DI_OK;
}

di_code di_gguf_v4_hparams(di_model *m, const char *arch, di_status *st) {
  di_hparams *hp = &m->hp;
  const di_gguf *g = m->gguf;
  di_code rc;
  int n_shared = 0, gating = 0, n_hash = 0, n_kv = hp->n_head_kv;
  if ((rc = req_int(m, arch, "attention.q_lora_rank", 1, 1 << 20, &hp->q_lora_rank, st)) ||
      (rc = req_int(m, arch, "expert_count", 1, DI_MOE_MAX_EXPERTS, &hp->n_expert, st)) ||
      (rc = req_int(m, arch, "expert_used_count", 1, hp->n_expert, &hp->n_expert_used, st)) ||
      (rc = req_int(m, arch, "expert_feed_forward_length", 1, 1 << 22, &hp->n_ff_exp, st)) ||
      (rc = req_int(m, arch, "expert_shared_count", 1, 1, &n_shared, st)) ||
      (rc = req_int(m, arch, "expert_gating_func", 0, 16, &gating, st)) ||
      (rc = req_int(m, arch, "attention.sliding_window", 1, 1 << 24, &hp->v4.window, st)) ||
      (rc = req_int(m, arch, "attention.output_group_count", 1, 4096, &hp->v4.o_groups, st)) ||
      (rc = req_int(m, arch, "attention.output_lora_rank", 1, 1 << 20, &hp->v4.o_lora_rank, st)) ||
      (rc = req_int(m, arch, "hyper_connection.count", 1, 16, &hp->v4.hc_mult, st)) ||
      (rc = req_int(m, arch, "hyper_connection.sinkhorn_iterations", 1, 1000, &hp->v4.hc_iters, st)) ||
      (rc = req_int(m, arch, "hash_layer_count", 0, hp->n_layer, &n_hash, st)))
    return rc;
  if (n_kv != 1) return bad(m, arch, "attention.head_count_kv", "must be 1 (one latent KV head)", st);
  if (hp->n_layer > DI_V4_MAX_LAYERS) return bad(m, arch, "block_count", "exceeds 256 layers", st);
  if (gating == 4) hp->moe_score = DI_MOE_SQRTSOFTPLUS;
  else if (gating == 2) hp->moe_score = DI_MOE_SIGMOID;
  else return di_errorf(st, DI_ERR_UNSUPPORTED, "%s: key %s.expert_gating_func %d not supported for DeepSeek-V4 "
                        "(4 sqrtsoftplus, 2 sigmoid are)", m->path, arch, gating);
  hp->moe_scale = 1;
  hp->v4.hc_eps = 1e-6f;
  if ((rc = opt_float(m, arch, "expert_weights_scale", 0, 1e6, &hp->moe_scale, st)) ||
      (rc = opt_float(m, arch, "hyper_connection.epsilon", 0, 1, &hp->v4.hc_eps, st)) ||
      (rc = uniform_float(m, arch, "swiglu_clamp_exp", hp->n_layer, &hp->v4.swiglu_limit, st)))
    return rc;
  float shexp = hp->v4.swiglu_limit;
  char k[128];
  if (key(g, arch, "swiglu_clamp_shexp", k, sizeof k) &&
      (rc = uniform_float(m, arch, "swiglu_clamp_shexp", hp->n_layer, &shexp, st)))
    return rc;
  if (shexp != hp->v4.swiglu_limit)
    return bad(m, arch, "swiglu_clamp_shexp", "differs from swiglu_clamp_exp (one limit is supported)", st);
  if (!(hp->v4.swiglu_limit > 0)) return bad(m, arch, "swiglu_clamp_exp", "must be positive", st);

  /* per layer: compress ratio 0 = sliding window only, 4 = CSA (it has the
   * Lightning Indexer: llama.cpp's rule), any other = HCA; one rate per kind */
  const di_gguf_kv *cr = key(g, arch, "attention.compress_ratios", k, sizeof k);
  if (!cr || cr->type != DI_GGUF_ARRAY || (int64_t)cr->arr_n < hp->n_layer)
    return bad(m, arch, "attention.compress_ratios", "must be an array with an entry per layer", st);
  bool any_csa = false;
  hp->v4.csa_rate = 4, hp->v4.hca_rate = 0;
  for (int i = 0; i < hp->n_layer; i++) {
    double r;
    if (!arr_num(cr, (uint64_t)i, &r) || r < 0 || r > 4096 || r != floor(r) || r == 1)
      return bad(m, arch, "attention.compress_ratios", "entries must be 0 or integers in 2..4096", st);
    if (r == 0) hp->v4.attn[i] = DI_V4_SWA;
    else if (r == 4) hp->v4.attn[i] = DI_V4_CSA, any_csa = true;
    else if (hp->v4.hca_rate && hp->v4.hca_rate != (int)r)
      return bad(m, arch, "attention.compress_ratios", "has two heavy compression rates (one is supported)", st);
    else hp->v4.attn[i] = DI_V4_HCA, hp->v4.hca_rate = (int)r;
    hp->v4.hash[i] = i < n_hash;
  }
  if (!hp->v4.hca_rate) hp->v4.hca_rate = 128;
  hp->v4.idx_heads = hp->v4.idx_dim = hp->v4.idx_topk = 1;
  if (any_csa && ((rc = req_int(m, arch, "attention.indexer.head_count", 1, 4096, &hp->v4.idx_heads, st)) ||
                  (rc = req_int(m, arch, "attention.indexer.key_length", 2, 1 << 16, &hp->v4.idx_dim, st)) ||
                  (rc = req_int(m, arch, "attention.indexer.top_k", 1, 1 << 24, &hp->v4.idx_topk, st))))
    return rc;
  if (hp->rope_dim <= 0 || hp->rope_dim % 2 || hp->rope_dim > hp->head_dim || (any_csa && hp->rope_dim > hp->v4.idx_dim))
    return bad(m, arch, "rope.dimension_count", "must be even and within key_length and indexer.key_length", st);
  if ((hp->n_head * hp->head_dim) % hp->v4.o_groups)
    return bad(m, arch, "attention.output_group_count", "must divide head_count * key_length", st);

  /* RoPE: sliding layers plain at rope.freq_base; CSA/HCA layers and the
   * compressors at compress_rope_freq_base with the file's scaling (YaRN with
   * cos/sin unscaled unless the file says otherwise), as read_v4 does */
  float ctheta = 160000.0f, beta_fast = 32, beta_slow = 1, attn_factor = 1;
  if ((rc = opt_float(m, arch, "attention.compress_rope_freq_base", 1e-3, 1e12, &ctheta, st)) ||
      (rc = opt_float(m, arch, "rope.scaling.yarn_beta_fast", 0, 1e6, &beta_fast, st)) ||
      (rc = opt_float(m, arch, "rope.scaling.yarn_beta_slow", 0, 1e6, &beta_slow, st)) ||
      (rc = opt_float(m, arch, "rope.scaling.yarn_attn_factor", 0, 1e6, &attn_factor, st)))
    return rc;
  if (hp->rope_scaling == DI_ROPE_SCALE_YARN) {
    hp->rope_yarn_beta_fast = beta_fast > 0 ? beta_fast : 32;
    hp->rope_yarn_beta_slow = beta_slow > 0 ? beta_slow : 1;
    hp->rope_attn_factor = attn_factor;
    if (hp->rope_orig_ctx <= 0) hp->rope_orig_ctx = hp->n_ctx_train;
  }
  hp->v4.rope_theta_main = hp->rope_base;
  hp->rope_base_local = hp->rope_base;
  hp->rope_base = ctheta;
  hp->rope_local_unscaled = true;
  hp->sliding_window = 0; /* the window is v4.window (model.h) */
  hp->n_ff = hp->n_ff_shexp = hp->n_ff_exp;
  hp->n_expert_shared = 1;
  hp->moe_norm_topk = true;
  hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);

  return DI_OK;
}
