/* Tensor parallel: which weight rows each rank of a job holds. The forward
 * (graph/forward_tp.c) has rank r compute the output columns di_tp_cols gives
 * it of every matmul it splits and the routed experts di_tp_experts gives it,
 * so those are the only rows of those matrices r ever reads: the rest are cut
 * off here, before the backend prepares (packs) the weights. Where attention
 * is split by heads (di_tp_heads_split), Q/K/V keep the rank's heads' rows;
 * MLA's query projection likewise (di_tp_mla_heads_split), and a single KV
 * head's query projection (di_tp_qheads_split; its K/V stay whole); with
 * fewer KV heads than ranks (di_tp_kvrep_split) the rank's query heads and
 * its one KV head, which the other ranks of its run hold too. */
#include <stdint.h>

#include "model/model.h"

typedef struct plan {
  int rank, size;
  bool apply;
  size_t cut, split; /* bytes not held by this rank; bytes of the split matrices */
} plan;

static size_t tensor_bytes(const di_tensor *t) { return t->data ? t->row_bytes * (size_t)t->ne[1] : 0; }

/* Keeps rows [lo, hi) of t. */
static void cut_range(plan *p, di_tensor *t, int64_t lo, int64_t hi) {
  if (!t->data || t->sliced) return;
  p->split += tensor_bytes(t);
  p->cut += t->row_bytes * (size_t)(t->ne[1] - (hi - lo));
  if (!p->apply) return;
  t->data = (const uint8_t *)t->data + (size_t)lo * t->row_bytes;
  t->sliced = true, t->row0 = lo, t->nrows = hi - lo;
  /* a rank with none of this matrix's columns never reads it */
  if (hi == lo) t->data = NULL;
}

static void cut_rows(plan *p, di_tensor *t) {
  int64_t lo, hi;
  di_tp_cols(t->ne[1], p->rank, p->size, &lo, &hi);
  cut_range(p, t, lo, hi);
}

/* Q/K/V of a head-split attention (di_tp_gqa_heads): the rank's query heads
 * and KV heads; a single KV head (di_tp_qheads_split) stays whole */
static void cut_heads(plan *p, const di_hparams *hp, di_layer_weights *L) {
  int k0, k1, q0, q1;
  di_tp_gqa_heads(hp, p->rank, p->size, &k0, &k1, &q0, &q1);
  const int64_t hd = hp->head_dim;
  cut_range(p, &L->wq, q0 * hd, q1 * hd);
  if (di_tp_qheads_split(hp, p->size)) return;
  cut_range(p, &L->wk, k0 * hd, k1 * hd);
  cut_range(p, &L->wv, k0 * hd, k1 * hd);
}

/* MLA's query projection split by query heads (di_tp_mla_heads_split): the
 * rank's heads' rows of wq_b (wq without a query LoRA) */
static const di_tensor *cut_mla_heads(plan *p, const di_hparams *hp, di_layer_weights *L) {
  int h0, h1;
  di_tp_heads(hp->n_head, p->rank, p->size, &h0, &h1);
  di_tensor *q = hp->q_lora_rank > 0 ? &L->wq_b : &L->wq;
  cut_range(p, q, h0 * (int64_t)hp->head_dim, h1 * (int64_t)hp->head_dim);
  return q;
}

static void cut_experts(plan *p, const di_hparams *hp, di_tensor *ts) {
  if (!ts) return;
  int e0, e1;
  di_tp_experts(hp->n_expert, p->rank, p->size, &e0, &e1);
  for (int e = 0; e < hp->n_expert; e++) {
    p->split += tensor_bytes(&ts[e]);
    if (e >= e0 && e < e1) continue;
    p->cut += tensor_bytes(&ts[e]);
    if (p->apply) ts[e].data = NULL;
  }
}

/* A layer's split matrices and routed experts (DeepSeek-V4 layers stay
 * whole: their attention multiplies views it builds from the weights
 * (grouped output), and their experts are column-split, not placed). */
static void walk_layer(di_model *m, plan *p, di_layer_weights *L) {
  if (L->attn == DI_ATTN_DSV4) return;
  int k0, k1, q0, q1;
  const bool heads = L->attn == DI_ATTN_GQA && di_tp_gqa_heads(&m->hp, p->rank, p->size, &k0, &k1, &q0, &q1);
  if (heads) cut_heads(p, &m->hp, L);
  const di_tensor *mla_q = NULL; /* cut by heads, not by columns */
  if (L->attn == DI_ATTN_MLA && di_tp_mla_heads_split(&m->hp, p->size)) mla_q = cut_mla_heads(p, &m->hp, L);
  di_tensor *ts[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->wq_a, &L->wq_b, &L->wkv_a, &L->w_gate, &L->w_up,
                     &L->w_down, &L->router, &L->sh_gate, &L->sh_up, &L->sh_down};
  for (size_t i = heads ? 3 : 0; i < sizeof ts / sizeof *ts; i++)
    if (ts[i] != mla_q) cut_rows(p, ts[i]);
  if (L->ffn == DI_FFN_MOE) {
    cut_experts(p, &m->hp, L->exp_gate);
    cut_experts(p, &m->hp, L->exp_up);
    cut_experts(p, &m->hp, L->exp_down);
  }
}

/* The matrices the forward column-splits (the classifier, tied or not), the
 * routed experts, and an MTP module's (its block like a layer, its
 * projection and head column-split). */
static size_t walk(di_model *m, plan *p) {
  const bool head_shared = m->mtp && m->mtp->head.data == m->output.data; /* before the cut moves output.data */
  /* A tied classifier too: the embedding lookup (graph/forward.c) reads the
   * rank's own rows through the classifier's slice and the others' from the
   * file's mapping, which brings in only the pages of the tokens looked up.
   * Not in DeepSeek-V4's forward, whose lookup reads the embedding alone. */
  if (m->output.data != m->tok_embd.data || m->hp.attn_kind != DI_ATTN_DSV4) cut_rows(p, &m->output);
  for (int il = 0; il < m->hp.n_layer; il++) walk_layer(m, p, &m->layers[il]);
  if (m->mtp) {
    walk_layer(m, p, &m->mtp->layer);
    cut_rows(p, &m->mtp->eh_proj);
    if (!head_shared) cut_rows(p, &m->mtp->head);
  }
  return p->cut;
}

di_tp_weights di_model_tp_plan(di_model *m, int rank, int size) {
  plan p = {.rank = rank, .size = size};
  if (size > 1) walk(m, &p);
  /* converted tensors (HF BF16 -> f32) can count more than the file's bytes */
  const size_t w = m->weight_bytes;
  return (di_tp_weights){.resident = p.cut < w ? w - p.cut : 0, .replicated = p.split < w ? w - p.split : 0,
                         .total = w};
}

void di_model_tp_slice(di_model *m, int rank, int size) {
  if (size <= 1) return;
  di_tp_weights tw = di_model_tp_plan(m, rank, size);
  plan p = {.rank = rank, .size = size, .apply = true};
  walk(m, &p);
  m->held_bytes = tw.resident, m->replicated_bytes = tw.replicated;
  m->tp_rank = rank, m->tp_size = size;
}
