/* The CPU backend's prepare_weights: what the kernels need of a loaded
 * model's weights beyond the file's layout. */
#include "backend/cpu/backend_cpu.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backend/cpu/matmul.h"
#include "model/hf.h"
#include "model/mxfp4.h"
#include "model/tensors.h"

/* The matmul weights of Q4_0/Q4_1/Q8_0/MXFP4/Q4_K/Q6_K go into the CPU backend's packed layout,
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
    uintptr_t hi = ((uintptr_t)data + t->row_bytes * (size_t)di_tensor_rows(t) + page - 1) / page * page;
    if (mprotect((void *)lo, hi - lo, PROT_READ | PROT_WRITE) != 0)
      return di_errorf(st, DI_ERR_IO, "%s: tensor %s: cannot make mapping writable: %s", m->path, t->name,
                       strerror(errno));
  }
  if (!di_cpu_pack(t->type, data, di_tensor_rows(t), t->ne[0]))
    return di_errorf(st, DI_ERR_NOMEM, "%s: tensor %s: out of memory packing weights", m->path, t->name);
  t->packed = true;
  /* a tied classifier's tensor-parallel slice leaves the other rows unpacked */
  if (t->data == m->tok_embd.data && !t->sliced) m->tok_embd.packed = true;
  return DI_OK;
}

/* MLA's absorbed projections as per-head matrices that the ordinary matmul
 * runs (graph/attn_mla.c): mla_k[h] = W_kᵀ (kv_lora rows of qk_nope) and
 * mla_v[h] = W_v (v_head_dim rows of kv_lora). llama.cpp's converter already
 * splits kv_b_proj that way (attn_k_b is W_k transposed per head, attn_v_b
 * W_v), so GGUF files give views of the file's own rows in the file's type —
 * decode reads those bytes, not an f32 copy four to eight times larger. A
 * single kv_b_proj (HF, older GGUFs) holds W_v rows as they are (views) and
 * W_k untransposed: its transpose is copied exactly, in the same type for
 * F32/F16/BF16, as f32 for quantized types (a quantized block cannot be
 * transposed without requantizing). Views of GGUF quantized rows are packed
 * per head like the experts' views. Memory: the model's own buffers. */
static di_tensor *head_views(di_model *m, int H) {
  return (di_tensor *)(void *)di_model_alloc_f32(m, ((size_t)H * sizeof(di_tensor) + 3) / 4);
}

static di_code absorb_prepare(di_model *m, di_layer_weights *L, bool mmapped, di_status *st) {
  const di_hparams *hp = &m->hp;
  const int H = hp->n_head, nope = hp->qk_nope_dim, vd = hp->v_head_dim, kvl = hp->kv_lora_rank;
  const di_tensor *ts[] = {&L->wkv_b, &L->wk_b, &L->wv_b};
  for (int i = 0; i < 3; i++)
    if (ts[i]->data && !di_cpu_dtype_supported(ts[i]->type))
      return di_errorf(st, DI_ERR_UNSUPPORTED, "%s: tensor %s: dtype %s not supported", m->path, ts[i]->name,
                       di_dtype_name(ts[i]->type));
  di_tensor *k = head_views(m, H), *v = head_views(m, H);
  if (!k || !v) return di_errorf(st, DI_ERR_NOMEM, "%s: out of memory for the MLA head views", m->path);
  memset(k, 0, (size_t)H * sizeof *k);
  memset(v, 0, (size_t)H * sizeof *v);
  if (L->wkv_b.data) {
    const di_tensor *t = &L->wkv_b;
    const bool plain = t->type == DI_F32 || t->type == DI_F16 || t->type == DI_BF16;
    const di_dtype kt = plain ? t->type : DI_F32;
    const size_t es = kt == DI_F32 ? 4 : 2, krb = (size_t)nope * es;
    uint8_t *kd = (uint8_t *)di_model_alloc_f32(m, ((size_t)H * kvl * krb + 3) / 4);
    float *row = malloc((size_t)kvl * sizeof(float));
    if (!kd || !row) {
      free(row);
      return di_errorf(st, DI_ERR_NOMEM, "%s: out of memory converting %s", m->path, t->name);
    }
    for (int h = 0; h < H; h++) {
      uint8_t *kh = kd + (size_t)h * kvl * krb;
      for (int d = 0; d < nope; d++) {
        const uint8_t *src = (const uint8_t *)t->data + ((size_t)h * (nope + vd) + d) * t->row_bytes;
        if (plain) {
          for (int c = 0; c < kvl; c++) memcpy(kh + (size_t)c * krb + (size_t)d * es, src + (size_t)c * es, es);
        } else {
          di_cpu_dequant_row(t->type, src, row, kvl);
          for (int c = 0; c < kvl; c++) memcpy(kh + (size_t)c * krb + (size_t)d * es, &row[c], es);
        }
      }
      k[h] = (di_tensor){.type = kt, .ne = {nope, kvl}, .row_bytes = krb, .data = kh, .name = t->name};
      v[h] = *t;
      v[h].ne[1] = vd;
      v[h].data = (const uint8_t *)t->data + ((size_t)h * (nope + vd) + nope) * t->row_bytes;
    }
    free(row);
  } else {
    for (int h = 0; h < H; h++) {
      k[h] = L->wk_b, v[h] = L->wv_b;
      k[h].ne[1] = kvl, v[h].ne[1] = vd;
      k[h].data = (const uint8_t *)L->wk_b.data + (size_t)h * kvl * L->wk_b.row_bytes;
      v[h].data = (const uint8_t *)L->wv_b.data + (size_t)h * vd * L->wv_b.row_bytes;
    }
  }
  di_code rc = DI_OK;
  for (int h = 0; h < H && m->gguf && !rc; h++)
    if (!(rc = pack_one(m, &k[h], mmapped, st))) rc = pack_one(m, &v[h], mmapped, st);
  L->mla_k = k, L->mla_v = v;
  return rc;
}

typedef struct pack_ctx {
  di_model *m;
  bool mmapped;
  di_code rc;
  di_status *st;
} pack_ctx;

static void pack_each(di_tensor *t, void *u) {
  pack_ctx *c = u;
  if (!c->rc) c->rc = pack_one(c->m, t, c->mmapped, c->st);
}

static di_code pack_weights(di_model *m, bool mmapped, di_status *st) {
  pack_ctx c = {m, mmapped, pack_one(m, &m->output, mmapped, st), st};
  for (int il = 0; il < m->hp.n_layer && !c.rc; il++) di_layer_each_matrix(&m->hp, &m->layers[il], pack_each, &c);
  if (m->mtp && !c.rc) {
    di_layer_each_matrix(&m->hp, &m->mtp->layer, pack_each, &c);
    pack_each(&m->mtp->eh_proj, &c);
    pack_each(&m->mtp->head, &c);
  }
  return c.rc;
}

di_code di_cpu_prepare_weights(di_model *m, bool mmapped, di_status *st) {
  di_code rc;
  /* MXFP4 kernels exist in the packed layout (x86); elsewhere its blocks become Q8_0 */
  if (!di_cpu_packable(DI_MXFP4) && (rc = di_model_convert_mxfp4(m, false, st))) return rc;
  for (int il = 0; il < m->hp.n_layer; il++)
    if (m->layers[il].attn == DI_ATTN_MLA && (rc = absorb_prepare(m, &m->layers[il], mmapped, st))) return rc;
  if (m->mtp && m->mtp->layer.attn == DI_ATTN_MLA && (rc = absorb_prepare(m, &m->mtp->layer, mmapped, st)))
    return rc;
  return m->gguf ? pack_weights(m, mmapped, st) : DI_OK;
}
