/* The CPU backend's prepare_weights: what the kernels need of a loaded
 * model's weights beyond the file's layout. */
#include "backend/cpu/backend_cpu.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backend/cpu/matmul.h"
#include "model/hf.h"
#include "model/tensors.h"

/* MLA's kv_b_proj as f32 rows (head-major, each head's qk_nope key rows then
 * its v rows, kv_lora_rank wide): the forward multiplies queries and latent
 * outputs by per-head slices of it (absorption). */
static di_code absorb_prepare(di_model *m, di_layer_weights *L, di_status *st) {
  const di_hparams *hp = &m->hp;
  const int H = hp->n_head, nope = hp->qk_nope_dim, vd = hp->v_head_dim, kvl = hp->kv_lora_rank;
  const di_tensor *ts[] = {&L->wkv_b, &L->wk_b, &L->wv_b};
  for (int i = 0; i < 3; i++)
    if (ts[i]->data && !di_cpu_dtype_supported(ts[i]->type))
      return di_errorf(st, DI_ERR_UNSUPPORTED, "%s: tensor %s: dtype %s not supported", m->path, ts[i]->name,
                       di_dtype_name(ts[i]->type));
  float *dst = di_model_alloc_f32(m, (size_t)H * (nope + vd) * kvl);
  if (!dst) return di_errorf(st, DI_ERR_NOMEM, "%s: out of memory converting %s", m->path, L->wkv_b.name);
  if (L->wkv_b.data) {
    const di_tensor *t = &L->wkv_b;
    for (int64_t r = 0; r < t->ne[1]; r++)
      di_cpu_dequant_row(t->type, (const uint8_t *)t->data + (size_t)r * t->row_bytes, dst + r * t->ne[0], t->ne[0]);
  } else {
    /* attn_k_b: per head kvl rows of nope (W_k transposed); attn_v_b: per head vd rows of kvl */
    float row[4096];
    if (nope > 4096) return di_errorf(st, DI_ERR_UNSUPPORTED, "%s: qk_nope_head_dim %d too large", m->path, nope);
    for (int h = 0; h < H; h++) {
      float *wh = dst + (size_t)h * (nope + vd) * kvl;
      for (int c = 0; c < kvl; c++) {
        const di_tensor *t = &L->wk_b;
        di_cpu_dequant_row(t->type, (const uint8_t *)t->data + ((size_t)h * kvl + c) * t->row_bytes, row, nope);
        for (int d = 0; d < nope; d++) wh[(size_t)d * kvl + c] = row[d];
      }
      for (int e = 0; e < vd; e++) {
        const di_tensor *t = &L->wv_b;
        di_cpu_dequant_row(t->type, (const uint8_t *)t->data + ((size_t)h * vd + e) * t->row_bytes,
                           wh + (size_t)(nope + e) * kvl, kvl);
      }
    }
  }
  L->kv_b = dst;
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
  for (int il = 0; il < m->hp.n_layer; il++)
    if (m->layers[il].attn == DI_ATTN_MLA && (rc = absorb_prepare(m, &m->layers[il], st))) return rc;
  if (m->mtp && m->mtp->layer.attn == DI_ATTN_MLA && (rc = absorb_prepare(m, &m->mtp->layer, st))) return rc;
  return m->gguf ? pack_weights(m, mmapped, st) : DI_OK;
}
