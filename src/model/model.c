#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/cpu/matmul.h"
#include "model/arch.h"
#include "model/hf.h"
#include "util/fp16.h"

/* ---- owned f32 copies (norm weights, biases, converted tensors) ---- */

typedef struct owned_buf {
  struct owned_buf *next;
  float data[];
} owned_buf;

float *di_model_alloc_f32(di_model *m, size_t n) {
  owned_buf *b = malloc(sizeof *b + n * sizeof(float));
  if (!b) return NULL;
  b->next = m->owned;
  m->owned = b;
  return b->data;
}

static void owned_free(void *p) {
  for (owned_buf *b = p, *n; b; b = n) {
    n = b->next;
    free(b);
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

static di_code bind_gguf(di_model *m, di_tensor *t, const char *name, int64_t ne0, int64_t ne1, bool required,
                         di_status *st) {
  const di_gguf_tensor *gt = di_gguf_find_tensor(m->gguf, name);
  memset(t, 0, sizeof *t);
  if (!gt) {
    if (required) return di_errorf(st, DI_ERR_FORMAT, "%s: missing tensor %s", m->path, name);
    return DI_OK;
  }
  int64_t rows = gt->ne[1] * gt->ne[2] * gt->ne[3];
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
  static const char *req[] = {"embedding_length", "block_count", "feed_forward_length", "attention.head_count"};
  int *dst[] = {&hp->n_embd, &hp->n_layer, &hp->n_ff, &hp->n_head};
  for (int i = 0; i < 4; i++)
    if (!gk_i(g, arch, req[i], dst[i]) || *dst[i] <= 0) {
      di_errorf(st, DI_ERR_FORMAT, "%s: missing or invalid key %s.%s", m->path, arch, req[i]);
      free(arch);
      return st->code;
    }
  hp->n_head_kv = hp->n_head;
  gk_i(g, arch, "attention.head_count_kv", &hp->n_head_kv);
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
  free(arch);
  int64_t v;
  hp->bos_id = di_gguf_get_i64(g, "tokenizer.ggml.bos_token_id", &v) ? (int32_t)v : -1;
  hp->eos_id = di_gguf_get_i64(g, "tokenizer.ggml.eos_token_id", &v) ? (int32_t)v : -1;

  const di_gguf_tensor *emb = di_gguf_find_tensor(g, "token_embd.weight");
  if (!emb) return di_errorf(st, DI_ERR_FORMAT, "%s: missing tensor token_embd.weight", m->path);
  hp->n_vocab = (int)emb->ne[1];
  int q_dim = hp->n_head * hp->head_dim, kv_dim = hp->n_head_kv * hp->head_dim;
  if ((rc = bind_gguf(m, &m->tok_embd, "token_embd.weight", hp->n_embd, hp->n_vocab, true, st))) return rc;
  if ((rc = bind_gguf(m, &m->output_norm, "output_norm.weight", hp->n_embd, 1, true, st))) return rc;
  if ((rc = bind_gguf(m, &m->output, "output.weight", hp->n_embd, hp->n_vocab, false, st))) return rc;
  hp->tied_output = m->output.data == NULL;
  if ((rc = bind_gguf(m, &m->rope_freqs, "rope_freqs.weight", hp->rope_dim / 2, 1, false, st))) return rc;
  if (m->rope_freqs.data && m->rope_freqs.type != DI_F32 && (rc = di_model_to_f32(m, &m->rope_freqs, 0, st)))
    return rc;
  m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
  if (!m->layers) return di_errorf(st, DI_ERR_NOMEM, "out of memory");
  for (int il = 0; il < hp->n_layer; il++) {
    di_layer_weights *L = &m->layers[il];
    struct {
      di_tensor *t;
      const char *n;
      int64_t ne0, ne1;
      bool req;
    } binds[] = {
        {&L->attn_norm, "attn_norm", hp->n_embd, 1, true},
        {&L->wq, "attn_q", hp->n_embd, q_dim, true},
        {&L->wk, "attn_k", hp->n_embd, kv_dim, true},
        {&L->wv, "attn_v", hp->n_embd, kv_dim, true},
        {&L->wo, "attn_output", q_dim, hp->n_embd, true},
        {&L->bq, "attn_q.bias", q_dim, 1, hp->qkv_bias},
        {&L->bk, "attn_k.bias", kv_dim, 1, hp->qkv_bias},
        {&L->bv, "attn_v.bias", kv_dim, 1, hp->qkv_bias},
        {&L->q_norm, "attn_q_norm", hp->head_dim, 1, hp->qk_norm},
        {&L->k_norm, "attn_k_norm", hp->head_dim, 1, hp->qk_norm},
        {&L->attn_post_norm, "post_attention_norm", hp->n_embd, 1, hp->post_norms},
        {&L->ffn_norm, "ffn_norm", hp->n_embd, 1, true},
        {&L->w_gate, "ffn_gate", hp->n_embd, hp->n_ff, true},
        {&L->w_up, "ffn_up", hp->n_embd, hp->n_ff, true},
        {&L->w_down, "ffn_down", hp->n_ff, hp->n_embd, true},
        {&L->ffn_post_norm, "post_ffw_norm", hp->n_embd, 1, hp->post_norms},
    };
    for (size_t i = 0; i < sizeof binds / sizeof binds[0]; i++) {
      char name[96];
      const char *n = binds[i].n;
      /* ".bias" names replace the ".weight" suffix */
      if (strstr(n, ".bias")) snprintf(name, sizeof name, "blk.%d.%s", il, n);
      else snprintf(name, sizeof name, "blk.%d.%s.weight", il, n);
      if ((rc = bind_gguf(m, binds[i].t, name, binds[i].ne0, binds[i].ne1, binds[i].req, st))) return rc;
    }
  }
  return DI_OK;
}

static di_code finish_load(di_model *m, di_status *st) {
  di_hparams *hp = &m->hp;
  if (hp->n_head_kv <= 0 || hp->n_head % hp->n_head_kv)
    return di_errorf(st, DI_ERR_FORMAT, "%s: head_count %d is not a multiple of head_count_kv %d", m->path,
                     hp->n_head, hp->n_head_kv);
  if (hp->rope_dim <= 0 || hp->rope_dim > hp->head_dim || hp->rope_dim % 2)
    return di_errorf(st, DI_ERR_FORMAT, "%s: rope dimension %d invalid for head_dim %d", m->path, hp->rope_dim,
                     hp->head_dim);
  if (hp->n_ctx_train <= 0) hp->n_ctx_train = 2048;
  /* Norms and biases become f32 so that every op reads one type. */
  di_tensor *small[] = {&m->output_norm};
  di_code rc;
  for (size_t i = 0; i < 1; i++)
    if (small[i]->data && small[i]->type != DI_F32 && (rc = di_model_to_f32(m, small[i], 0, st))) return rc;
  for (int il = 0; il < hp->n_layer; il++) {
    di_layer_weights *L = &m->layers[il];
    di_tensor *ts[] = {&L->attn_norm, &L->bq,      &L->bk,       &L->bv,           &L->q_norm,
                       &L->k_norm,    &L->ffn_norm, &L->attn_post_norm, &L->ffn_post_norm};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
      if (ts[i]->data && ts[i]->type != DI_F32 && (rc = di_model_to_f32(m, ts[i], 0, st))) return rc;
  }
  if (!m->output.data) m->output = m->tok_embd;
  return DI_OK;
}

/* The matmul weights of Q4_0/Q4_1/Q8_0/Q4_K/Q6_K go into the CPU backend's packed layout,
 * in place (same bytes, matmul.h): every kernel and ISA level reads that layout,
 * so a model's numerics do not depend on how it was loaded. token_embd is packed
 * only when it is also the output matrix (tied); the embedding lookup then
 * rebuilds rows from the packed layout. mmap'ed files are private mappings: the
 * packed pages become private copies (memory as with read loading). */
static di_code pack_one(di_model *m, di_tensor *t, bool mmapped, di_status *st) {
  if (!t->data || t->packed || !di_cpu_packable(t->type) || t->row_bytes != di_dtype_row_bytes(t->type, t->ne[0]))
    return DI_OK;
  void *data = (void *)(uintptr_t)t->data; /* the loader's own buffer or private mapping */
  if (mmapped) {
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), lo = (uintptr_t)data / page * page;
    uintptr_t hi = ((uintptr_t)data + t->row_bytes * (size_t)t->ne[1] + page - 1) / page * page;
    if (mprotect((void *)lo, hi - lo, PROT_READ | PROT_WRITE) != 0)
      return di_errorf(st, DI_ERR_IO, "%s: tensor %s: cannot make mapping writable: %s", m->path, t->name,
                       strerror(errno));
  }
  if (!di_cpu_pack(t->type, data, t->ne[1], t->ne[0]))
    return di_errorf(st, DI_ERR_NOMEM, "%s: tensor %s: out of memory packing weights", m->path, t->name);
  t->packed = true;
  if (t->data == m->tok_embd.data) m->tok_embd.packed = true;
  return DI_OK;
}

static di_code pack_weights(di_model *m, bool mmapped, di_status *st) {
  di_code rc = pack_one(m, &m->output, mmapped, st);
  for (int il = 0; il < m->hp.n_layer && !rc; il++) {
    di_layer_weights *L = &m->layers[il];
    di_tensor *lw[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
    for (int i = 0; i < 7 && !rc; i++) rc = pack_one(m, lw[i], mmapped, st);
  }
  return rc;
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
  } else {
    rc = load_gguf(m, o->use_mmap, st);
  }
  if (!rc) rc = finish_load(m, st);
  if (!rc && m->gguf) rc = pack_weights(m, o->use_mmap, st);
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
  free(m->layers);
  free(m->path);
  free(m);
}
