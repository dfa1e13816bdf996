#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model/arch.h"
#include "model/gguf_v4.h"
#include "model/hf.h"
#include "model/mxfp4.h"
#include "model/tensors.h"
#include "util/fp16.h"
#include "util/mem.h"

/* ---- owned f32 copies (norm weights, biases, converted tensors) ---- */

/* Owned buffers come from arenas of at least OWNED_ARENA bytes, advised to
 * use huge pages: the largest of them (a GGUF's MXFP4 experts rewritten as
 * Q8_0, one buffer per expert) are streamed at every decode step like the
 * file's own tensors, and on 4 KiB pages their reads would miss the TLB page
 * after page. Untouched arena space costs no memory. */
#define OWNED_ARENA ((size_t)64 << 20)

typedef struct owned_buf {
  struct owned_buf *next;
  size_t size, used;
  char pad[40]; /* data 64-byte aligned */
  unsigned char data[];
} owned_buf;

float *di_model_alloc_f32(di_model *m, size_t n) {
  const size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
  owned_buf *b = m->owned;
  if (!b || b->size - b->used < bytes) {
    const size_t size = sizeof *b + (bytes > OWNED_ARENA ? bytes : OWNED_ARENA);
    owned_buf *nb = di_alloc_aligned(size, true);
    if (!nb) return NULL;
    *nb = (owned_buf){.next = b, .size = size - sizeof *b};
    m->owned = b = nb;
  }
  float *p = (float *)(void *)(b->data + b->used);
  b->used += bytes;
  return p;
}

static void owned_free(void *p) {
  for (owned_buf *b = p, *n; b; b = n) {
    n = b->next;
    di_free_aligned(b, sizeof *b + b->size);
  }
}

/* Converts a small 1-D tensor (norm weight, bias) to owned f32 so the ops
 * that use them need only one type; `offset` is added (Gemma's HF norms). */
di_code di_model_to_f32(di_model *m, di_tensor *t, float offset, di_status *st) {
  int64_t n = t->ne[0] * t->ne[1];
  float *dst = di_model_alloc_f32(m, (size_t)n);
  if (!dst) return di_errorf(st, DI_ERR_NOMEM, "%s: out of memory converting %s", m->path, t->name);
  const uint8_t *src = t->data;
  for (int64_t i = 0; i < n; i++) {
    float v;
    switch (t->type) {
      case DI_F32: memcpy(&v, src + 4 * i, 4); break;
      case DI_F16: { uint16_t h; memcpy(&h, src + 2 * i, 2); v = di_f16_to_f32(h); break; }
      case DI_BF16: { uint16_t h; memcpy(&h, src + 2 * i, 2); v = di_bf16_to_f32(h); break; }
      default:
        return di_errorf(st, DI_ERR_UNSUPPORTED, "%s: tensor %s: dtype %s not supported for a norm/bias",
                         m->path, t->name, di_dtype_name(t->type));
    }
    dst[i] = v + offset;
  }
  t->type = DI_F32;
  t->data = dst;
  t->row_bytes = (size_t)t->ne[0] * 4;
  return DI_OK;
}

/* ---- GGUF ---- */

static bool gk_i(const di_gguf *g, const char *arch, const char *suffix, int *out) {
  char key[128];
  snprintf(key, sizeof key, "%s.%s", arch, suffix);
  int64_t v;
  if (!di_gguf_get_i64(g, key, &v) || v < 0 || v > INT32_MAX) return false;
  *out = (int)v;
  return true;
}

static bool gk_f(const di_gguf *g, const char *arch, const char *suffix, float *out) {
  char key[128];
  snprintf(key, sizeof key, "%s.%s", arch, suffix);
  double v;
  if (!di_gguf_get_f64(g, key, &v)) return false;
  *out = (float)v;
  return true;
}

static di_code bind_gguf(di_model *m, di_tensor *t, const char *name, int64_t ne0, int64_t ne1, int64_t n_sub,
                         bool required, di_status *st) {
  const di_gguf_tensor *gt = di_gguf_find_tensor(m->gguf, name);
  memset(t, 0, sizeof *t);
  if (!gt) {
    if (required) return di_errorf(st, DI_ERR_FORMAT, "%s: missing tensor %s", m->path, name);
    return DI_OK;
  }
  int64_t rows = gt->ne[1] * gt->ne[2] * gt->ne[3];
  if (n_sub > 0 && (gt->ne[1] != ne1 || gt->ne[2] != n_sub || gt->ne[3] != 1))
    return di_errorf(st, DI_ERR_FORMAT, "%s: tensor %s has shape [%lld, %lld, %lld], expected [%lld, %lld, %lld]",
                     m->path, name, (long long)gt->ne[0], (long long)gt->ne[1], (long long)gt->ne[2], (long long)ne0,
                     (long long)ne1, (long long)n_sub);
  if (n_sub > 0) ne1 = rows;
  if (gt->ne[0] != ne0 || (ne1 > 0 && rows != ne1))
    return di_errorf(st, DI_ERR_FORMAT, "%s: tensor %s has shape [%lld, %lld], expected [%lld, %lld]", m->path,
                     name, (long long)gt->ne[0], (long long)rows, (long long)ne0, (long long)ne1);
  t->type = gt->type;
  t->ne[0] = gt->ne[0];
  t->ne[1] = rows;
  t->row_bytes = di_dtype_row_bytes(gt->type, gt->ne[0]);
  t->data = gt->data;
  t->name = gt->name;
  m->weight_bytes += gt->nbytes;
  m->n_params += (uint64_t)(gt->ne[0] * rows);
  return di_model_note_bound(m, gt->data, st);
}

static const char *gguf_name_at(const void *g, size_t i) { return di_gguf_tensor_at(g, i)->name; }
static const void *gguf_data_at(const void *g, size_t i) { return di_gguf_tensor_at(g, i)->data; }

/* deepseek2 keys as llama.cpp's converter writes them: MLA sizes (newer files
 * store the absorbed MQA view in key_length/value_length and the per-head
 * sizes in *_mla), MoE routing, YaRN's log multiplier (0.1 mscale_all_dim). */
static di_code gguf_mla_moe(di_model *m, const char *arch, di_status *st) {
  di_hparams *hp = &m->hp;
  const di_gguf *g = m->gguf;
  int key_len = 0, val_len = 0;
  if (!gk_i(g, arch, "attention.kv_lora_rank", &hp->kv_lora_rank) || hp->kv_lora_rank <= 0)
    return di_errorf(st, DI_ERR_FORMAT, "%s: missing or invalid key %s.attention.kv_lora_rank", m->path, arch);
  gk_i(g, arch, "attention.q_lora_rank", &hp->q_lora_rank);
  if (gk_i(g, arch, "attention.key_length_mla", &key_len)) {
    gk_i(g, arch, "attention.value_length_mla", &val_len);
  } else {
    gk_i(g, arch, "attention.key_length", &key_len);
    gk_i(g, arch, "attention.value_length", &val_len);
  }
  if (key_len <= hp->rope_dim || val_len <= 0)
    return di_errorf(st, DI_ERR_FORMAT, "%s: invalid MLA head sizes (%s.attention.key_length_mla %d, value_length_mla "
                     "%d, rope.dimension_count %d)", m->path, arch, key_len, val_len, hp->rope_dim);
  hp->head_dim = key_len;
  hp->qk_nope_dim = key_len - hp->rope_dim;
  hp->v_head_dim = val_len;
  hp->n_head_kv = hp->n_head;
  gk_i(g, arch, "leading_dense_block_count", &hp->first_k_dense);
  gk_i(g, arch, "expert_count", &hp->n_expert);
  gk_i(g, arch, "expert_used_count", &hp->n_expert_used);
  gk_i(g, arch, "expert_shared_count", &hp->n_expert_shared);
  gk_i(g, arch, "expert_feed_forward_length", &hp->n_ff_exp);
  hp->n_ff_shexp = hp->n_expert_shared * hp->n_ff_exp;
  hp->moe_layer_freq = 1;
  hp->n_group = hp->topk_group = 1;
  gk_i(g, arch, "expert_group_count", &hp->n_group);
  gk_i(g, arch, "expert_group_used_count", &hp->topk_group);
  hp->moe_scale = 1;
  gk_f(g, arch, "expert_weights_scale", &hp->moe_scale);
  char key[128];
  snprintf(key, sizeof key, "%s.expert_weights_norm", arch);
  bool norm = false;
  hp->moe_norm_topk = di_gguf_get_bool(g, key, &norm) && norm;
  int gating = 1; /* files before the key: softmax (V2) */
  gk_i(g, arch, "expert_gating_func", &gating);
  if (gating != 1 && gating != 2)
    return di_errorf(st, DI_ERR_UNSUPPORTED, "%s: %s.expert_gating_func %d not supported", m->path, arch, gating);
  hp->moe_score = gating == 2 ? DI_MOE_SIGMOID : DI_MOE_SOFTMAX;
  if (hp->n_expert > DI_MOE_MAX_EXPERTS || (hp->n_expert > 0 && (hp->n_expert_used <= 0 ||
      hp->n_expert_used > hp->n_expert || hp->n_ff_exp <= 0 || hp->n_group <= 0 || hp->n_expert % hp->n_group ||
      hp->topk_group <= 0 || hp->topk_group > hp->n_group)))
    return di_errorf(st, DI_ERR_FORMAT, "%s: inconsistent expert keys (%s.expert_count %d, expert_used_count %d, "
                     "expert_group_count %d, expert_group_used_count %d)", m->path, arch, hp->n_expert,
                     hp->n_expert_used, hp->n_group, hp->topk_group);
  /* selection: bias-corrected (noaux_tc) where the file has the bias */
  snprintf(key, sizeof key, "blk.%d.exp_probs_b.bias", hp->first_k_dense);
  if (di_gguf_find_tensor(g, key)) hp->moe_topk = DI_MOE_NOAUX_TC;
  else hp->moe_topk = hp->n_group > 1 ? DI_MOE_GROUP_LIMITED : DI_MOE_GREEDY;
  hp->mla_kv_b_split = !di_gguf_find_tensor(g, "blk.0.attn_kv_b.weight");
  double scale = 1.0 / sqrt((double)hp->head_dim);
  float log_mul = 0;
  gk_f(g, arch, "rope.scaling.yarn_log_multiplier", &log_mul);
  if (hp->rope_scaling == DI_ROPE_SCALE_YARN) {
    hp->rope_attn_factor = 1; /* cos/sin unscaled: mscale / mscale_all_dim = 1 as in DeepSeek's configs */
    if (log_mul > 0) {
      double ms = 1.0 + log_mul * log(hp->rope_factor);
      scale *= ms * ms;
    }
  }
  hp->attn_scale = (float)scale;
  gk_f(g, arch, "rope.scaling.yarn_beta_fast", &hp->rope_yarn_beta_fast);
  gk_f(g, arch, "rope.scaling.yarn_beta_slow", &hp->rope_yarn_beta_slow);
  return DI_OK;
}

/* A key that is present must hold a usable value: a context length of 0 or
 * 2^32-1, a NaN RoPE base or a token id past the vocabulary would otherwise
 * fall back to defaults or run into garbage. Every check names its key. */
static di_code check_int_key(di_model *m, const char *arch, const char *suffix, long long lo, long long hi,
                             di_status *st) {
  char key[128];
  snprintf(key, sizeof key, "%s%s%s", arch ? arch : "", arch ? "." : "", suffix);
  const di_gguf_kv *kv = di_gguf_find(m->gguf, key);
  if (!kv) return DI_OK;
  int64_t v;
  if (!di_gguf_get_i64(m->gguf, key, &v))
    return di_errorf(st, DI_ERR_FORMAT, "%s: key %s is not an integer", m->path, key);
  if (v < lo || v > hi)
    return di_errorf(st, DI_ERR_FORMAT, "%s: key %s = %lld is out of range [%lld, %lld]", m->path, key,
                     (long long)v, lo, hi);
  return DI_OK;
}

static di_code check_float_key(di_model *m, const char *arch, const char *suffix, double lo, double hi,
                               bool open_lo, di_status *st) {
  char key[128];
  snprintf(key, sizeof key, "%s.%s", arch, suffix);
  if (!di_gguf_find(m->gguf, key)) return DI_OK;
  double v;
  if (!di_gguf_get_f64(m->gguf, key, &v))
    return di_errorf(st, DI_ERR_FORMAT, "%s: key %s is not a number", m->path, key);
  if (!isfinite(v) || v < lo || v > hi || (open_lo && v == lo))
    return di_errorf(st, DI_ERR_FORMAT, "%s: key %s = %g is out of range %s%g, %g]", m->path, key, v,
                     open_lo ? "(" : "[", lo, hi);
  return DI_OK;
}

static di_code validate_gguf_keys(di_model *m, const char *arch, di_status *st) {
  static const struct {
    const char *k;
    long long lo, hi;
  } ints[] = {
      {"embedding_length", 1, 1 << 20},        {"block_count", 1, 4096},
      {"feed_forward_length", 1, 1 << 22},     {"attention.head_count", 1, 4096},
      {"attention.head_count_kv", 1, 4096},    {"attention.key_length", 1, 4096},
      {"attention.value_length", 1, 4096},     {"context_length", 1, 1 << 24},
      {"rope.dimension_count", 2, 4096},       {"attention.sliding_window", 0, 1 << 24},
      {"rope.scaling.original_context_length", 0, 1 << 24},
  };
  static const struct {
    const char *k;
    double lo, hi;
    bool open_lo;
  } flts[] = {
      {"attention.layer_norm_rms_epsilon", 0, 1, true}, {"rope.freq_base", 0, 1e12, true},
      {"rope.freq_base_swa", 0, 1e12, true},           {"attn_logit_softcapping", 0, 1e6, false},
      {"final_logit_softcapping", 0, 1e6, false},      {"rope.scaling.factor", 0, 1e6, false},
  };
  di_code rc;
  for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
    if ((rc = check_int_key(m, arch, ints[i].k, ints[i].lo, ints[i].hi, st))) return rc;
  for (size_t i = 0; i < sizeof flts / sizeof flts[0]; i++)
    if ((rc = check_float_key(m, arch, flts[i].k, flts[i].lo, flts[i].hi, flts[i].open_lo, st))) return rc;
  return DI_OK;
}

/* Special token ids must name a token: of the embedding and, when the file
 * carries its vocabulary, of that list. */
static di_code validate_token_ids(di_model *m, di_status *st) {
  long long n = m->hp.n_vocab;
  const di_gguf_kv *toks = di_gguf_find(m->gguf, "tokenizer.ggml.tokens");
  if (toks && (long long)toks->arr_n < n) n = (long long)toks->arr_n;
  static const char *keys[] = {"bos_token_id", "eos_token_id", "eot_token_id", "eom_token_id",
                               "unknown_token_id", "padding_token_id", "separator_token_id"};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    char key[64];
    snprintf(key, sizeof key, "tokenizer.ggml.%s", keys[i]);
    di_code rc = check_int_key(m, NULL, key, 0, n - 1, st);
    if (rc) return rc;
  }
  return DI_OK;
}

static di_code load_gguf(di_model *m, bool use_mmap, di_status *st) {
  di_code rc = di_gguf_open(m->path, use_mmap, &m->gguf, st);
  if (rc) return rc;
  di_gguf *g = m->gguf;
  di_hparams *hp = &m->hp;
  char *arch = di_gguf_get_str(g, "general.architecture");
  if (!arch) return di_errorf(st, DI_ERR_FORMAT, "%s: missing key general.architecture", m->path);
  const di_arch_desc *ad = di_arch_find(arch);
  if (!ad) {
    di_errorf(st, DI_ERR_UNSUPPORTED, "%s: unknown architecture '%s' (key general.architecture)", m->path, arch);
    free(arch);
    return st->code;
  }
  di_arch_apply(ad, hp);
  hp->rope_type = ad->gguf_rope;
  if ((rc = validate_gguf_keys(m, arch, st))) {
    free(arch);
    return rc;
  }
  static const char *req[] = {"embedding_length", "block_count", "attention.head_count", "feed_forward_length"};
  int *dst[] = {&hp->n_embd, &hp->n_layer, &hp->n_head, &hp->n_ff};
  for (int i = 0; i < (ad->attn == DI_ATTN_DSV4 ? 3 : 4); i++) /* V4 has experts only: no dense FFN length */
    if (!gk_i(g, arch, req[i], dst[i]) || *dst[i] <= 0) {
      di_errorf(st, DI_ERR_FORMAT, "%s: missing or invalid key %s.%s", m->path, arch, req[i]);
      free(arch);
      return st->code;
    }
  hp->n_head_kv = hp->n_head;
  gk_i(g, arch, "attention.head_count_kv", &hp->n_head_kv);
  if (hp->n_head_kv > hp->n_head) {
    di_errorf(st, DI_ERR_FORMAT, "%s: key %s.attention.head_count_kv = %d exceeds head_count %d", m->path, arch,
              hp->n_head_kv, hp->n_head);
    free(arch);
    return st->code;
  }
  hp->head_dim = hp->n_embd / hp->n_head;
  gk_i(g, arch, "attention.key_length", &hp->head_dim);
  hp->n_ctx_train = 2048;
  gk_i(g, arch, "context_length", &hp->n_ctx_train);
  hp->rms_eps = 1e-5f;
  gk_f(g, arch, "attention.layer_norm_rms_epsilon", &hp->rms_eps);
  hp->rope_base = 10000.0f;
  gk_f(g, arch, "rope.freq_base", &hp->rope_base);
  hp->rope_dim = hp->head_dim;
  gk_i(g, arch, "rope.dimension_count", &hp->rope_dim);
  gk_i(g, arch, "attention.sliding_window", &hp->sliding_window);
  gk_f(g, arch, "rope.freq_base_swa", &hp->rope_base_local);
  gk_f(g, arch, "attn_logit_softcapping", &hp->attn_softcap);
  gk_f(g, arch, "final_logit_softcapping", &hp->final_softcap);
  {
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    char *type = di_gguf_get_str(g, key);
    if (type && !strcmp(type, "linear")) hp->rope_scaling = DI_ROPE_SCALE_LINEAR;
    else if (type && !strcmp(type, "yarn")) hp->rope_scaling = DI_ROPE_SCALE_YARN;
    free(type);
    gk_f(g, arch, "rope.scaling.factor", &hp->rope_factor);
    gk_i(g, arch, "rope.scaling.original_context_length", &hp->rope_orig_ctx);
    if (hp->rope_scaling && hp->rope_factor <= 0) hp->rope_scaling = DI_ROPE_SCALE_NONE;
  }
  if (hp->rope_base_local == 0) hp->rope_base_local = hp->rope_base;
  hp->rope_local_unscaled = hp->swa_pattern > 0;
  if ((hp->attn_kind == DI_ATTN_MLA && (rc = gguf_mla_moe(m, arch, st))) ||
      (hp->attn_kind == DI_ATTN_DSV4 && (rc = di_gguf_v4_hparams(m, arch, st)))) {
    free(arch);
    return rc;
  }
  free(arch);
  int64_t v;
  hp->bos_id = di_gguf_get_i64(g, "tokenizer.ggml.bos_token_id", &v) ? (int32_t)v : -1;
  hp->eos_id = di_gguf_get_i64(g, "tokenizer.ggml.eos_token_id", &v) ? (int32_t)v : -1;

  const di_gguf_tensor *emb = di_gguf_find_tensor(g, "token_embd.weight");
  if (!emb) return di_errorf(st, DI_ERR_FORMAT, "%s: missing tensor token_embd.weight", m->path);
  hp->n_vocab = (int)emb->ne[1];
  if ((rc = validate_token_ids(m, st))) return rc;
  if ((rc = bind_gguf(m, &m->tok_embd, "token_embd.weight", hp->n_embd, hp->n_vocab, 0, true, st))) return rc;
  if ((rc = bind_gguf(m, &m->output_norm, "output_norm.weight", hp->n_embd, 1, 0, true, st))) return rc;
  if ((rc = bind_gguf(m, &m->output, "output.weight", hp->n_embd, hp->n_vocab, 0, false, st))) return rc;
  hp->tied_output = m->output.data == NULL;
  if ((rc = bind_gguf(m, &m->rope_freqs, "rope_freqs.weight", hp->rope_dim / 2, 1, 0, false, st))) return rc;
  if (m->rope_freqs.data && m->rope_freqs.type != DI_F32 && (rc = di_model_to_f32(m, &m->rope_freqs, 0, st)))
    return rc;
  /* llama.cpp's converter counts MTP layers in block_count and names them in nextn_predict_layers */
  int nextn = 0;
  if (gk_i(g, hp->arch, "nextn_predict_layers", &nextn) && nextn > 0) {
    if (nextn >= hp->n_layer)
      return di_errorf(st, DI_ERR_FORMAT, "%s: %s.nextn_predict_layers %d leaves no main layers of %d", m->path,
                       hp->arch, nextn, hp->n_layer);
    hp->n_layer -= nextn;
    hp->n_nextn = nextn;
  }
  if (hp->attn_kind == DI_ATTN_DSV4) { /* the hyper head, then the layers and the MTP block (if any) */
    const int64_t D = hp->n_embd, N = hp->v4.hc_mult;
    if ((rc = bind_gguf(m, &m->hc_head_fn, "output_hc_fn.weight", N * D, N, 0, true, st)) ||
        (rc = bind_gguf(m, &m->hc_head_base, "output_hc_base.weight", N, 1, 0, true, st)) ||
        (rc = bind_gguf(m, &m->hc_head_scale, "output_hc_scale.weight", 1, 1, 0, true, st)) ||
        (rc = di_model_bind_layers(m, NULL, bind_gguf, 0, st)) || (rc = di_model_bind_mtp(m, NULL, bind_gguf, 0, st)))
      return rc;
  } else if ((rc = di_model_bind_layers(m, NULL, bind_gguf, 0, st)) ||
             (rc = di_model_bind_mtp(m, NULL, bind_gguf, 0, st))) {
    return rc;
  }
  if ((rc = di_model_check_unused(m, di_gguf_n_tensors(g), gguf_name_at, gguf_data_at, g, st))) return rc;
  return di_model_convert_mxfp4(m, true, st); /* a backend without MXFP4 kernels rewrites the rest */
}

/* An integer table (V4's tid2eid: token -> expert ids) as owned int32, every
 * entry checked to be an expert id. */
static di_code index_to_i32(di_model *m, di_tensor *t, int n_expert, di_status *st) {
  if (t->type != DI_I64 && t->type != DI_I32)
    return di_errorf(st, DI_ERR_FORMAT, "%s: tensor %s: dtype %s, expected I64 or I32", m->path, t->name,
                     di_dtype_name(t->type));
  int64_t n = t->ne[0] * t->ne[1];
  int32_t *dst = (int32_t *)di_model_alloc_f32(m, (size_t)n);
  if (!dst) return di_errorf(st, DI_ERR_NOMEM, "%s: out of memory converting %s", m->path, t->name);
  for (int64_t i = 0; i < n; i++) {
    int64_t v;
    if (t->type == DI_I64) memcpy(&v, (const uint8_t *)t->data + 8 * i, 8);
    else {
      int32_t w;
      memcpy(&w, (const uint8_t *)t->data + 4 * i, 4);
      v = w;
    }
    if (v < 0 || v >= n_expert)
      return di_errorf(st, DI_ERR_FORMAT, "%s: tensor %s: entry %lld is %lld, not an expert id in [0, %d)", m->path,
                       t->name, (long long)i, (long long)v, n_expert);
    dst[i] = (int32_t)v;
    for (int64_t j = i - i % t->ne[0]; j < i; j++)
      if (dst[j] == dst[i])
        return di_errorf(st, DI_ERR_FORMAT, "%s: tensor %s: row %lld names expert %lld twice", m->path, t->name,
                         (long long)(i / t->ne[0]), (long long)v);
  }
  t->type = DI_I32;
  t->data = dst;
  t->row_bytes = (size_t)t->ne[0] * 4;
  return DI_OK;
}

/* A layer's norms and biases as f32, V4's tid2eid as int32. */
static di_code layer_finish(di_model *m, di_layer_weights *L, di_status *st) {
  di_code rc;
  for (size_t i = 0; i < di_n_layer_tensors; i++) {
    const di_tensor_desc *d = &di_layer_tensors[i];
    if (d->kind != DI_W_NORM && d->kind != DI_W_BIAS) continue;
    di_tensor *t = (di_tensor *)((char *)L + d->off);
    if (t->data && t->type != DI_F32 && (rc = di_model_to_f32(m, t, 0, st))) return rc;
  }
  if (L->tid2eid.data && (rc = index_to_i32(m, &L->tid2eid, m->hp.n_expert, st))) return rc;
  return DI_OK;
}

static di_code finish_load(di_model *m, di_status *st) {
  di_hparams *hp = &m->hp;
  if (hp->attn_kind == DI_ATTN_MLA &&
      (hp->kv_lora_rank <= 0 || hp->qk_nope_dim <= 0 || hp->v_head_dim <= 0 || hp->rope_dim <= 0 ||
       hp->head_dim != hp->qk_nope_dim + hp->rope_dim))
    return di_errorf(st, DI_ERR_FORMAT, "%s: inconsistent MLA dimensions (kv_lora_rank %d, qk_nope_head_dim %d, "
                     "qk_rope_head_dim %d, v_head_dim %d)", m->path, hp->kv_lora_rank, hp->qk_nope_dim, hp->rope_dim,
                     hp->v_head_dim);
  if (hp->n_head_kv <= 0 || hp->n_head % hp->n_head_kv)
    return di_errorf(st, DI_ERR_FORMAT, "%s: head_count %d is not a multiple of head_count_kv %d", m->path,
                     hp->n_head, hp->n_head_kv);
  if (hp->rope_dim <= 0 || hp->rope_dim > hp->head_dim || hp->rope_dim % 2)
    return di_errorf(st, DI_ERR_FORMAT, "%s: rope dimension %d invalid for head_dim %d", m->path, hp->rope_dim,
                     hp->head_dim);
  if (hp->n_ctx_train <= 0) hp->n_ctx_train = 2048;
  /* Norms and biases become f32 so that every op reads one type. */
  di_tensor *small[] = {&m->output_norm, &m->hc_head_base, &m->hc_head_scale};
  di_code rc;
  for (size_t i = 0; i < sizeof small / sizeof small[0]; i++)
    if (small[i]->data && small[i]->type != DI_F32 && (rc = di_model_to_f32(m, small[i], 0, st))) return rc;
  for (int il = 0; il < hp->n_layer; il++)
    if ((rc = layer_finish(m, &m->layers[il], st))) return rc;
  if (m->mtp) {
    di_tensor *mt[] = {&m->mtp->enorm, &m->mtp->hnorm, &m->mtp->head_norm, &m->mtp->hc_head_base, &m->mtp->hc_head_scale};
    for (size_t i = 0; i < sizeof mt / sizeof *mt; i++)
      if (mt[i]->data && mt[i]->type != DI_F32 && (rc = di_model_to_f32(m, mt[i], 0, st))) return rc;
    if ((rc = layer_finish(m, &m->mtp->layer, st))) return rc;
  }
  if (!m->output.data) m->output = m->tok_embd;
  return DI_OK;
}

di_code di_model_load(const char *path, const di_model_opts *o, di_model **out, di_status *st) {
  *out = NULL;
  di_model *m = calloc(1, sizeof *m);
  if (!m) return di_errorf(st, DI_ERR_NOMEM, "out of memory");
  m->path = strdup(path);
  di_model_opts def = {0};
  if (!o) o = &def;
  struct stat sb;
  di_code rc;
  if (stat(path, &sb) != 0) {
    rc = di_errorf(st, DI_ERR_IO, "%s: no such file or directory", path);
  } else if (S_ISDIR(sb.st_mode)) {
    rc = di_hf_load(m, o->use_mmap, st);
  } else if (!S_ISREG(sb.st_mode)) {
    rc = di_errorf(st, DI_ERR_IO, "%s: not a regular file or a model directory", path);
  } else {
    rc = load_gguf(m, o->use_mmap, st);
  }
  if (!rc) rc = finish_load(m, st);
  m->held_bytes = m->replicated_bytes = m->weight_bytes;
  if (rc) {
    di_model_free(m);
    return rc;
  }
  *out = m;
  return DI_OK;
}

void di_model_free(di_model *m) {
  if (!m) return;
  di_gguf_close(m->gguf);
  di_hf_close(m);
  owned_free(m->owned);
  for (int il = 0; m->layers && il < m->hp.n_layer; il++) {
    free(m->layers[il].exp_gate);
    free(m->layers[il].exp_up);
    free(m->layers[il].exp_down);
  }
  if (m->mtp) {
    free(m->mtp->layer.exp_gate);
    free(m->mtp->layer.exp_up);
    free(m->mtp->layer.exp_down);
    free(m->mtp);
  }
  free(m->layers);
  free(m->bound);
  free(m->path);
  free(m);
}
