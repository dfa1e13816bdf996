/* DeepSeek-V4 attention: one latent KV head (K = V) per position, queries
 * per head RMS-normed, partial interleaved RoPE on the trailing rope dims
 * (plain rope_theta on sliding layers; compress_rope_theta with the file's
 * YaRN on CSA/HCA layers and both compressors), a learned sink per head in
 * the softmax's denominator, and the grouped low-rank output projection.
 *
 * Every layer sees the last `sliding_window` raw rows. CSA and HCA layers add
 * compressed rows: one per closed window of `rate` positions, the softmax-gated
 * (per channel) pool of the window's projected rows plus, for CSA, the previous
 * window's second series (overlapping windows of 2*rate), then kv_norm and RoPE
 * at the window's first position. HCA attends every closed row; CSA attends
 * the index_topk rows the Lightning Indexer scores best (its own compressed
 * keys, ReLU'd per-head dot products weighted per token), ties to the lower row.
 *
 * A row is written by the token at its window's last position, after every
 * token of the batch stored its projections (dsv4.h: the pool row layout), so
 * all of it is a function of the prefix: the same bits for any chunking or
 * batch, and for prefix-cache hits. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph/dsv4.h"
#include "util/threadpool.h"
#include "util/tscratch.h"

/* Cached values are in the pool's element type (kv->type); offsets count
 * elements. kv_get gives n of them at p as floats: p itself in an f32 pool,
 * else widened into buf (f16 / bf16 round each value once, where stored). */
static const float *kv_get(const stage_ctx *c, const void *p, int n, float *buf) {
  if (c->kv->type == DI_KV_DTYPE_F32) return p;
  c->f->be->kv_load(buf, p, n, c->kv->type);
  return buf;
}

static void kv_put(const stage_ctx *c, void *dst, const float *src, int n) {
  c->f->be->kv_store(dst, src, n, c->kv->type);
}

static uint8_t *elt_at(const di_kv_pool *kv, int32_t block, size_t i) {
  return (uint8_t *)di_kv_k(kv, block, 0) + i * kv->elt_bytes;
}

/* Part `part` (V4P_*, n values) of the current layer's values at position
 * pos of token t's sequence: a position of the batch from the window scratch
 * (st_store put it there), any other from the cache, in the position's pool
 * row or (grouped) its window row, whose chunks lie in the window tables (a
 * part across two chunks is gathered into buf). The grouped cache maps only
 * the positions some step reads after the one that wrote them (kv/table.h
 * di_kv_table.sparse); a read the cache cannot serve sets v4->missing. */
static const float *win_get(const stage_ctx *c, int t, int pos, int part, int n, float *buf) {
  const di_kv_pool *kv = c->kv;
  const di_v4_scratch *v = c->f->v4;
  const int u0 = di_v4_batch_token(v, c->b->seq, t, pos);
  if (u0 >= 0) return kv_get(c, v->win + ((size_t)u0 * v->win_w + (size_t)v->cur.scr[part]) * kv->elt_bytes, n, buf);
  const di_batch_seq *s = &c->b->seqs[c->b->seq[t]];
  const int off = v->cur.part[part], bs = kv->block_size, u = kv->kv_dim;
  const size_t row = (size_t)(pos % bs) * (size_t)u;
  if (c->b->n_swa_tables == 0) return kv_get(c, elt_at(kv, s->blocks[pos / bs], row + (size_t)off), n, buf);
  for (int o = off; o < off + n; o = (o / u + 1) * u)
    if (pos / bs >= s->n_swa_blocks || s->swa[o / u][pos / bs] < 0) {
      __atomic_store_n(&c->f->v4->missing, 1, __ATOMIC_RELAXED);
      memset(buf, 0, (size_t)n * sizeof(float));
      return buf;
    }
  if (off % u + n <= u) return kv_get(c, elt_at(kv, s->swa[off / u][pos / bs], row + (size_t)(off % u)), n, buf);
  for (int o = off, done = 0; done < n;) {
    const int len = n - done < u - o % u ? n - done : u - o % u;
    c->f->be->kv_load(buf + done, elt_at(kv, s->swa[o / u][pos / bs], row + (size_t)(o % u)), len, kv->type);
    done += len, o += len;
  }
  return buf;
}

/* Stores part `part` of token t's own position: into the window scratch, and
 * into the cache where it maps the position (the ungrouped row always). */
static void win_put(const stage_ctx *c, int t, int pos, int part, int n, const float *src) {
  const di_kv_pool *kv = c->kv;
  const di_v4_scratch *v = c->f->v4;
  const di_batch_seq *s = &c->b->seqs[c->b->seq[t]];
  const size_t eb = kv->elt_bytes;
  const uint8_t *val = v->win + ((size_t)t * v->win_w + (size_t)v->cur.scr[part]) * eb;
  kv_put(c, (void *)val, src, n);
  const int off = v->cur.part[part], bs = kv->block_size, u = kv->kv_dim;
  const size_t row = (size_t)(pos % bs) * (size_t)u;
  if (c->b->n_swa_tables == 0) {
    memcpy(elt_at(kv, s->blocks[pos / bs], row + (size_t)off), val, (size_t)n * eb);
    return;
  }
  if (pos / bs >= s->n_swa_blocks) return;
  for (int o = off, done = 0; done < n;) {
    const int len = n - done < u - o % u ? n - done : u - o % u;
    const int32_t blk = s->swa[o / u][pos / bs];
    if (blk >= 0) memcpy(elt_at(kv, blk, row + (size_t)(o % u)), val + (size_t)done * eb, (size_t)len * eb);
    done += len, o += len;
  }
}

/* The current layer's compressed row of window e (rate positions each), or
 * (key) its indexer key (CSA: cur.icmp values after the row). Grouped: slot
 * e - (first window closing in the block) of the block holding the window's
 * last position, or (sliced HCA) slice j in block j of the window, gathered
 * into buf. cmp_put stores one. */
static const float *cmp_get(const stage_ctx *c, int t, int e, int rate, bool key, float *buf) {
  const di_kv_pool *kv = c->kv;
  const di_batch_seq *s = &c->b->seqs[c->b->seq[t]];
  const v4_map *m = &c->f->v4->cur;
  const int q = e * rate + rate - 1, bs = kv->block_size, n = key ? c->f->m->hp.v4.idx_dim : c->f->m->hp.head_dim;
  const size_t k = key ? (size_t)m->icmp : 0;
  if (c->b->n_swa_tables == 0)
    return kv_get(c, elt_at(kv, s->blocks[q / bs], (size_t)(q % bs) * (size_t)kv->kv_dim + (size_t)m->main_off + k), n,
                  buf);
  if (m->slices > 0) {
    const int len = n / m->slices, b0 = e * rate / bs;
    for (int j = 0; j < m->slices; j++)
      c->f->be->kv_load(buf + (size_t)j * len, elt_at(kv, s->blocks[b0 + j], (size_t)m->main_off), len, kv->type);
    return buf;
  }
  const int slot = e - q / bs * bs / rate;
  return kv_get(c, elt_at(kv, s->blocks[q / bs], (size_t)m->main_off + (size_t)slot * m->entry + k), n, buf);
}

static void cmp_put(const stage_ctx *c, int t, int e, int rate, bool key, const float *src) {
  const di_kv_pool *kv = c->kv;
  const di_batch_seq *s = &c->b->seqs[c->b->seq[t]];
  const v4_map *m = &c->f->v4->cur;
  const int q = e * rate + rate - 1, bs = kv->block_size, n = key ? c->f->m->hp.v4.idx_dim : c->f->m->hp.head_dim;
  const size_t k = key ? (size_t)m->icmp : 0;
  if (c->b->n_swa_tables == 0) {
    kv_put(c, elt_at(kv, s->blocks[q / bs], (size_t)(q % bs) * (size_t)kv->kv_dim + (size_t)m->main_off + k), src, n);
  } else if (m->slices > 0) {
    const int len = n / m->slices, b0 = e * rate / bs;
    for (int j = 0; j < m->slices; j++)
      kv_put(c, elt_at(kv, s->blocks[b0 + j], (size_t)m->main_off), src + (size_t)j * len, len);
  } else {
    const int slot = e - q / bs * bs / rate;
    kv_put(c, elt_at(kv, s->blocks[q / bs], (size_t)m->main_off + (size_t)slot * m->entry + k), src, n);
  }
}

static int layer_rate(const di_hparams *hp, const di_layer_weights *L) {
  return L->v4_attn == DI_V4_CSA ? hp->v4.csa_rate : hp->v4.hca_rate;
}

/* RoPE on the trailing rd dims of x; inverse: the conjugate rotation */
static void rope_tail(const di_backend *be, float *x, int dim, const float *cs, int rd, bool inverse) {
  if (inverse) be->rope_inv(x + dim - rd, cs, rd, DI_ROPE_NORM);
  else be->rope(x + dim - rd, cs, rd, DI_ROPE_NORM);
}

/* The per-token stages' arrays (their sizes grow with the position) come from
 * per-thread buffers, one slot per stage that can be live at once; a stage
 * that gets none marks the step failed (v4->failed) and does nothing. */
static di_tscratch g_scratch = DI_TSCRATCH_INIT;
enum { SCR_POOL, SCR_INDEX, SCR_ATTEND, SCR_STORE };
/* the heads' scores: no compressor window is being pooled while they run */
#define SCR_HEADS SCR_POOL

static void *stage_scratch(const stage_ctx *c, int slot, size_t bytes) {
  void *p = di_tscratch_get(&g_scratch, slot, bytes);
  if (!p) __atomic_store_n(&c->f->v4->failed, 1, __ATOMIC_RELAXED);
  return p;
}

static void st_qa_norm(stage_ctx *c, int t) {
  const di_hparams *hp = &c->f->m->hp;
  float *qa = c->f->v4->qa + (size_t)t * hp->q_lora_rank;
  c->f->be->rms_norm(qa, c->L->q_a_norm.data, qa, hp->q_lora_rank, hp->rms_eps);
}

/* queries normed and roped; this position's row into the pool */
/* Token t's raw K/V row (normed, roped) into its window row; false: no scratch. */
static bool store_kv(stage_ctx *c, int t) {
  di_forward_ctx *f = c->f;
  const di_hparams *hp = &f->m->hp;
  const di_layer_weights *L = c->L;
  const int hd = hp->head_dim, rd = hp->rope_dim;
  const float *cs = (L->v4_attn == DI_V4_SWA ? f->v4->rope_m : f->v4->rope_c) + (size_t)t * rd;
  float *kvr = stage_scratch(c, SCR_STORE, (size_t)hd * sizeof(float));
  if (!kvr) return false;
  f->be->rms_norm(f->v4->kvp + (size_t)t * hd, L->kv_norm.data, kvr, hd, hp->rms_eps);
  rope_tail(c->f->be, kvr, hd, cs, rd, false);
  win_put(c, t, c->b->pos[t], V4P_KV, hd, kvr);
  return true;
}

static void st_store_kv(stage_ctx *c, int t) { store_kv(c, t); }

void di_fwd_v4_attn_kv(stage_ctx *sc) {
  di_fwd_matmul(sc->f, &sc->L->wkv, sc->f->xn, sc->b->n_tokens, sc->f->v4->kvp);
  di_fwd_par_tokens(sc, st_store_kv);
}

static void st_store(stage_ctx *c, int t) {
  di_forward_ctx *f = c->f;
  const di_hparams *hp = &f->m->hp;
  const di_layer_weights *L = c->L;
  const int H = hp->n_head, hd = hp->head_dim, rd = hp->rope_dim, p = c->b->pos[t];
  const v4_layout lay = di_v4_layout(hp, L->v4_attn);
  const float *cs = (L->v4_attn == DI_V4_SWA ? f->v4->rope_m : f->v4->rope_c) + (size_t)t * rd;
  for (int h = 0; h < H; h++) {
    float *q = f->q + ((size_t)t * H + h) * hd;
    f->be->rms_norm_unit(q, q, hd, hp->rms_eps);
    rope_tail(c->f->be, q, hd, cs, rd, false);
  }
  if (!store_kv(c, t) || L->v4_attn == DI_V4_SWA) return;
  const int cw = lay.c * hd, slot = p % layer_rate(hp, L);
  const float *ape = (const float *)L->cmp_ape.data + (size_t)slot * cw;
  for (int sr = 0; sr < lay.c; sr++) { /* each series its own part; the gate with its slot's bias */
    float *cg = f->v4->cg + (size_t)t * cw + sr * hd;
    f->be->add(cg, ape + sr * hd, hd);
    win_put(c, t, p, V4P_CKV + sr, hd, f->v4->ckv + (size_t)t * cw + sr * hd);
    win_put(c, t, p, V4P_CG + sr, hd, cg);
  }
  if (L->v4_attn != DI_V4_CSA) return;
  const int id = hp->v4.idx_dim, iw = 2 * id;
  const float *iape = (const float *)L->idx_ape.data + (size_t)slot * iw;
  for (int sr = 0; sr < 2; sr++) {
    float *ig = f->v4->ig + (size_t)t * iw + sr * id;
    f->be->add(ig, iape + sr * id, id);
    win_put(c, t, p, V4P_IKV + sr, id, f->v4->ikv + (size_t)t * iw + sr * id);
    win_put(c, t, p, V4P_IG + sr, id, ig);
  }
  for (int h = 0; h < hp->v4.idx_heads; h++)
    rope_tail(c->f->be, f->v4->iq + ((size_t)t * hp->v4.idx_heads + h) * id, id, cs, rd, false);
}

/* Window w's compressed row of width dim: per channel, softmax over the
 * window's gates (and, overlapping, the previous window's first series) of
 * the projected values; then the weighted RMSNorm and RoPE at w * rate. */
static const float *compress_window(const stage_ctx *c, int t, int w, int rate, int dim, bool overlap, int pkv,
                                    int pg, const float *norm_w) {
  const di_hparams *hp = &c->f->m->hp;
  const int rd = hp->rope_dim, second = overlap ? 1 : 0, s0 = overlap && w > 0 ? -rate : 0;
  const size_t nw = (size_t)(rate - s0);
  const float **kv = stage_scratch(c, SCR_POOL, 2 * nw * sizeof *kv + (3 + 2 * nw) * (size_t)dim * sizeof(float));
  if (!kv) return NULL;
  const float **gate = kv + nw;
  float *acc = (float *)(kv + 2 * nw), *work = acc + dim, *row = work + dim, *buf = row + dim;
  for (int s = s0; s < rate; s++) {
    const int sr = s < 0 ? 0 : second, i = s - s0; /* previous window: its first series; this one: its last */
    kv[i] = win_get(c, t, w * rate + s, pkv + sr, dim, buf + (size_t)(2 * i) * dim);
    gate[i] = win_get(c, t, w * rate + s, pg + sr, dim, buf + (size_t)(2 * i + 1) * dim);
  }
  c->f->be->compress_pool(kv, gate, rate - s0, dim, work, acc);
  c->f->be->rms_norm(acc, norm_w, row, dim, hp->rms_eps);
  float cs[2 * 1024];
  c->f->be->rope_cache(cs, w * rate, rd, hp->rope_base, hp, true, NULL);
  rope_tail(c->f->be, row, dim, cs, rd, false);
  return row;
}

static void st_compress(stage_ctx *c, int t) {
  const di_hparams *hp = &c->f->m->hp;
  const di_layer_weights *L = c->L;
  const int p = c->b->pos[t], rate = layer_rate(hp, L);
  if ((p + 1) % rate) return;
  if (p < c->b->seqs[c->b->seq[t]].full_cached) return; /* a replay: the cached row is this one */
  const bool csa = L->v4_attn == DI_V4_CSA;
  const float *row = compress_window(c, t, p / rate, rate, hp->head_dim, csa, V4P_CKV, V4P_CG, L->cmp_norm.data);
  if (row) cmp_put(c, t, p / rate, rate, false, row);
  if (csa && (row = compress_window(c, t, p / rate, rate, hp->v4.idx_dim, true, V4P_IKV, V4P_IG, L->idx_norm.data)))
    cmp_put(c, t, p / rate, rate, true, row);
}

/* The Lightning Indexer's scores of token t's closed rows [e0, e1) into
 * sc[e0, e1): the ReLU'd per-head dot products of its queries with the rows'
 * indexer keys, weighted per head. A row's score does not depend on the
 * range it is scored in. The keys' array and widened rows take the calling
 * thread's `slot`. */
static void index_scores(const stage_ctx *c, int t, int e0, int e1, int slot, float *sc) {
  const di_hparams *hp = &c->f->m->hp;
  const int IH = hp->v4.idx_heads, id = hp->v4.idx_dim, rate = hp->v4.csa_rate, n = e1 - e0;
  if (n <= 0) return;
  const float *q = c->f->v4->iq + (size_t)t * IH * id, *wt = c->f->v4->iw + (size_t)t * IH;
  const size_t cvt = c->kv->type != DI_KV_DTYPE_F32 ? (size_t)id : 0;
  const float **keys = stage_scratch(c, slot, (size_t)n * (sizeof *keys + cvt * sizeof(float)));
  if (!keys) return;
  float *buf = (float *)(keys + n);
  for (int e = 0; e < n; e++) keys[e] = cmp_get(c, t, e0 + e, rate, true, buf + (size_t)e * cvt);
  c->f->be->indexer_scores(q, wt, IH, id, keys, n, 1.0f / sqrtf((float)id), 1.0f / sqrtf((float)IH), sc + e0);
}

/* The Lightning Indexer: of the n closed rows, the index_topk best scored
 * ones, into sel (ascending); returns how many. sc: the n rows' scores when
 * already computed (decode: by all threads), else NULL. */
static int indexer_select(const stage_ctx *c, int t, int n, const float *sc, int32_t *sel) {
  const int k = c->f->m->hp.v4.idx_topk;
  const di_backend *be = c->f->be;
  if (n <= k) return be->topk(NULL, n, k, sel, NULL);
  float *own = sc ? NULL : stage_scratch(c, SCR_INDEX, (size_t)n * (sizeof(float) + sizeof(int32_t)));
  int32_t *work = stage_scratch(c, SCR_STORE, (size_t)n * sizeof(int32_t));
  if ((!sc && !own) || !work) return 0;
  if (!sc) index_scores(c, t, 0, n, SCR_POOL, own);
  return be->topk(sc ? sc : own, n, k, sel, work);
}

/* Token t's keys, the window's raw rows then the compressed rows it reads
 * (CSA: the indexer's choice, from the scores sc when computed), as rows of
 * floats: pointers into the cache (f32 pool) or rows widened into buf (cvt
 * floats each); returns how many.
 * Its array and buf come from the calling thread's SCR_ATTEND slot. */
static int attend_keys(stage_ctx *c, int t, const float *sc, const float ***keys_out) {
  const di_hparams *hp = &c->f->m->hp;
  const di_layer_weights *L = c->L;
  const int hd = hp->head_dim, p = c->b->pos[t], W = hp->v4.window;
  const int lo = p - W + 1 > 0 ? p - W + 1 : 0, nw = p - lo + 1;
  int rate = 1, n = 0;
  if (L->v4_attn != DI_V4_SWA) rate = layer_rate(hp, L), n = (p + 1) / rate;
  const size_t nk_max = (size_t)nw + n, cvt = hd; /* a row gathered or widened goes to buf */
  const float **keys = stage_scratch(c, SCR_ATTEND, nk_max * (sizeof *keys + cvt * sizeof(float)) +
                                                        ((size_t)n + 1) * sizeof(int32_t));
  *keys_out = keys;
  if (!keys) return 0;
  float *buf = (float *)(keys + nk_max);
  int32_t *sel = (int32_t *)(buf + nk_max * cvt);
  int ns = 0;
  if (L->v4_attn == DI_V4_CSA) ns = indexer_select(c, t, n, sc, sel);
  else
    for (int i = 0; i < n; i++) sel[ns++] = i;
  int nk = 0;
  for (int j = lo; j <= p; j++, nk++) keys[nk] = win_get(c, t, j, V4P_KV, hd, buf + nk * cvt);
  for (int i = 0; i < ns; i++, nk++) keys[nk] = cmp_get(c, t, sel[i], rate, false, buf + nk * cvt);
  return nk;
}

/* Heads [h0, h1) of token t over its nk keys (all at once: the backend
 * reads each key for several heads). */
static void attend_heads(stage_ctx *c, int t, const float *const *keys, int nk, int h0, int h1) {
  di_forward_ctx *f = c->f;
  const di_hparams *hp = &f->m->hp;
  const int H = hp->n_head, hd = hp->head_dim, rd = hp->rope_dim;
  float *s = h0 < h1 ? stage_scratch(c, SCR_HEADS, ((size_t)(h1 - h0) * nk + 1) * sizeof(float)) : NULL;
  if (!s) return;
  const float *cs = (c->L->v4_attn == DI_V4_SWA ? f->v4->rope_m : f->v4->rope_c) + (size_t)t * rd;
  float *o = f->att + ((size_t)t * H + h0) * hd;
  f->be->attn_sink(f->q + ((size_t)t * H + h0) * hd, h1 - h0, keys, nk, hd, hp->attn_scale,
                   (const float *)c->L->sinks.data + h0, s, o);
  for (int h = h0; h < h1; h++) /* V carries the keys' rope: rotate it back at the query's position */
    rope_tail(f->be, f->att + ((size_t)t * H + h) * hd, hd, cs, rd, true);
}

static void st_attend(stage_ctx *c, int t) {
  const float **keys;
  const int nk = attend_keys(c, t, NULL, &keys);
  if (keys) attend_heads(c, t, keys, nk, 0, c->f->m->hp.n_head);
}

/* Decode: a batch of fewer tokens than would keep every thread busy. Per
 * token, the threads split the indexer's scoring of the closed rows (CSA,
 * when it keeps fewer than there are), the caller picks and gathers the keys
 * (one token at a time: its SCR_ATTEND slot holds one token's), then the
 * threads split the heads (all attend the same keys: one latent KV head), so
 * no thread idles through a layer's attention. The same calls on the same
 * rows as st_attend: the same bits. */
typedef struct heads_task {
  stage_ctx *c;
  int t, nk, n; /* n: closed rows, scored into sc (CSA, more than the indexer keeps) */
  const float *const *keys;
  float *sc;
} heads_task;

static void index_run(void *p, int ith, int nth) {
  const heads_task *k = p;
  index_scores(k->c, k->t, (int)((int64_t)k->n * ith / nth), (int)((int64_t)k->n * (ith + 1) / nth), SCR_POOL, k->sc);
}

static void heads_run(void *p, int ith, int nth) {
  const heads_task *k = p;
  const int H = k->c->f->m->hp.n_head, h0 = H * ith / nth, h1 = H * (ith + 1) / nth;
  if (h0 < h1) attend_heads(k->c, k->t, k->keys, k->nk, h0, h1);
}

static void attend(stage_ctx *sc) {
  di_forward_ctx *f = sc->f;
  const int T = sc->b->n_tokens;
  if (T >= 4 || !f->tp || di_threadpool_size(f->tp) == 1) {
    di_fwd_par_tokens(sc, st_attend);
    return;
  }
  const di_hparams *hp = &f->m->hp;
  for (int t = 0; t < T; t++) {
    const float **keys;
    heads_task k = {.c = sc, .t = t};
    if (sc->L->v4_attn == DI_V4_CSA && (k.n = (sc->b->pos[t] + 1) / hp->v4.csa_rate) > hp->v4.idx_topk) {
      /* the indexer's scores over every closed row (at long context the most
       * work of the token's attention) split over the threads too */
      if (!(k.sc = stage_scratch(sc, SCR_INDEX, (size_t)k.n * sizeof(float)))) return;
      di_threadpool_run(f->tp, index_run, &k);
    }
    k.nk = attend_keys(sc, t, k.sc, &keys);
    k.keys = keys;
    if (keys) di_threadpool_run(f->tp, heads_run, &k);
  }
}

/* group g's slice of every token's heads, contiguous */
static void st_group_in(stage_ctx *c, int t) {
  const di_hparams *hp = &c->f->m->hp;
  const size_t in = (size_t)hp->n_head * hp->head_dim / hp->v4.o_groups, g = (size_t)c->loc.table;
  memcpy(c->f->v4->og + t * in, c->f->att + (size_t)t * hp->n_head * hp->head_dim + g * in, in * sizeof(float));
}

static void st_group_out(stage_ctx *c, int t) {
  const di_hparams *hp = &c->f->m->hp;
  const size_t r = (size_t)hp->v4.o_lora_rank, g = (size_t)c->loc.table;
  memcpy(c->f->v4->oa + (size_t)t * hp->v4.o_groups * r + g * r, c->f->v4->ot + t * r, r * sizeof(float));
}

/* Group g of heads through its own o_lora_rank rows of wo_a into f->v4->oa
 * ([T][G * r]). Decode: every group's rows prepared from f->att in place
 * and all G matrices as one task (one thread sync, not G); larger batches
 * group by group. Rows are prepared one by one either way: the same bits. */
static void out_groups(stage_ctx *sc) {
  di_forward_ctx *f = sc->f;
  const di_hparams *hp = &f->m->hp;
  const di_layer_weights *L = sc->L;
  const int T = sc->b->n_tokens, G = hp->v4.o_groups, r = hp->v4.o_lora_rank;
  const size_t in = (size_t)hp->n_head * hp->head_dim / (size_t)G, row = (size_t)hp->n_head * hp->head_dim;
  di_tensor wg[MM_MAX_JOBS];
  const size_t rb = f->be->act_bytes(L->wo_a.type, 1, (int64_t)in);
  if (T < 4 && !f->tpar && G <= MM_MAX_JOBS && (size_t)G * T * rb <= f->xq_bytes) {
    mm_task t = {.be = f->be, .M = T, .n = G};
    for (int g = 0; g < G; g++) {
      wg[g] = L->wo_a;
      wg[g].ne[1] = r;
      wg[g].data = (const uint8_t *)L->wo_a.data + (size_t)g * r * L->wo_a.row_bytes;
      uint8_t *xq = (uint8_t *)f->xq + (size_t)g * T * rb;
      for (int k = 0; k < T; k++)
        f->be->act_prepare(L->wo_a.type, f->att + (size_t)k * row + (size_t)g * in, 1, (int64_t)in, xq + k * rb);
      t.w[g] = &wg[g], t.y[g] = f->v4->oa + (size_t)g * r, t.xqs[g] = xq, t.ldy[g] = (int64_t)G * r, t.hi[g] = r;
    }
    f->xq_src = NULL;
    di_fwd_mm(f->tp, &t);
    return;
  }
  for (int g = 0; g < G; g++) {
    stage_ctx c = *sc;
    c.loc.table = g;
    di_fwd_par_tokens(&c, st_group_in);
    di_tensor w = L->wo_a;
    w.ne[1] = r;
    w.data = (const uint8_t *)L->wo_a.data + (size_t)g * r * L->wo_a.row_bytes;
    di_fwd_matmul(f, &w, f->v4->og, T, f->v4->ot);
    di_fwd_par_tokens(&c, st_group_out);
  }
}

di_code di_fwd_v4_attn(stage_ctx *sc, int il, di_status *st) {
  di_forward_ctx *f = sc->f;
  const di_layer_weights *L = sc->L;
  const int T = sc->b->n_tokens;
  di_v4_scratch *v = f->v4;
  /* the projections of the block's input, one task (one prepared input) */
  const di_tensor *w1[7] = {&L->wq_a, &L->wkv};
  float *y1[7] = {v->qa, v->kvp};
  int n1 = 2;
  if (L->v4_attn != DI_V4_SWA) w1[n1] = &L->cmp_wkv, y1[n1++] = v->ckv, w1[n1] = &L->cmp_wgate, y1[n1++] = v->cg;
  if (L->v4_attn == DI_V4_CSA) {
    w1[n1] = &L->idx_wkv, y1[n1++] = v->ikv, w1[n1] = &L->idx_wgate, y1[n1++] = v->ig;
    w1[n1] = &L->idx_wproj, y1[n1++] = v->iw;
  }
  di_fwd_matmul_n(f, w1, y1, n1, f->xn, T);
  di_fwd_par_tokens(sc, st_qa_norm);
  const di_tensor *w2[] = {&L->wq_b, &L->idx_wq_b};
  float *y2[] = {f->q, v->iq};
  di_fwd_matmul_n(f, w2, y2, L->v4_attn == DI_V4_CSA ? 2 : 1, v->qa, T);
  di_fwd_par_tokens(sc, st_store);
  if (L->v4_attn != DI_V4_SWA) di_fwd_par_tokens(sc, st_compress);
  attend(sc);
  if (__atomic_exchange_n(&v->failed, 0, __ATOMIC_RELAXED))
    return di_errorf(st, DI_ERR_NOMEM, "DeepSeek-V4 attention, layer %d: out of memory for a token's keys", il);
  if (__atomic_exchange_n(&v->missing, 0, __ATOMIC_RELAXED))
    return di_errorf(st, DI_ERR_INVALID,
                     "DeepSeek-V4 attention, layer %d: a window row a token reads is neither in the batch nor in the "
                     "cache's window tables",
                     il);
  out_groups(sc);
  di_fwd_matmul(f, &L->wo_b, v->oa, T, f->tmp);
  return DI_OK;
}
