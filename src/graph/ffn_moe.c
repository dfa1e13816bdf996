/* Mixture-of-experts feed-forward (DeepSeek-V2/V3): a router scores every
 * expert per token, a selection rule picks n_expert_used of them, and the
 * layer's output is the weighted sum of the chosen experts' GLUs plus the
 * shared experts' GLU. The batch is grouped by expert so each chosen
 * expert's weights are read once per step, for all the tokens that chose it,
 * and experts nobody chose are not read at all. A token's sum runs over its
 * experts in ascending id order, whatever the batch (row invariance). */
#include <stdatomic.h>
#include <string.h>

#include "graph/forward_internal.h"

static void st_route(stage_ctx *c, int t) {
  di_forward_ctx *f = c->f;
  const di_hparams *hp = &f->m->hp;
  const int K = hp->n_expert_used;
  f->be->moe_route(hp, f->rlogit + (size_t)t * hp->n_expert, c->L->router_bias.data, f->sel + (size_t)t * K,
                   f->selw + (size_t)t * K);
}

/* GLU of n rows of F: the model's activation, or (clip > 0, DeepSeek-V4)
 * SiLU with gate clipped to <= clip and up to [-clip, clip] */
static void glu_rows(di_forward_ctx *f, float *g, const float *u, int n, int F, float clip) {
  if (clip > 0) {
    f->be->glu_clip(g, u, (size_t)n * F, clip);
    return;
  }
  for (int r = 0; r < n; r++) f->be->glu(g + (size_t)r * F, u + (size_t)r * F, F, f->m->hp.act);
}

/* Small batches (decode above all): the chosen experts' matmuls, and the
 * shared experts' (as matrices of T rows), as one task per projection, so a
 * step syncs twice per layer, not twice per expert. Each expert's rows are its
 * tokens' activations prepared row by row, so every output has the bits of the
 * per-expert path (an output column's bits do not depend on the column range
 * it was computed in).
 *
 * The work is cut in chunks of MOE_CHUNK columns of the jobs laid end to end,
 * shared experts first, and threads take chunks from both ends: even threads
 * from the front, odd ones from the back, until the ends meet. At 16 streams
 * the shared experts' 16-row matmuls are bound by the int8 dot products and
 * the routed experts' 1-4-row ones by memory reads, so one thread computes
 * the shared GLU while the other streams routed experts (instead of both
 * doing one, then both the other), and the meeting point balances the two
 * whatever the experts' row counts. */
#define MOE_CHUNK 256

typedef struct moe_job {
  const di_tensor *w;
  const void *xq;
  int64_t M;
  float *y;
} moe_job;

typedef struct moe_task {
  const di_backend *be;
  moe_job job[2 * DI_MOE_MAX_EXPERTS + 2];
  int64_t off[2 * DI_MOE_MAX_EXPERTS + 3]; /* job j's columns: [off[j], off[j + 1]) */
  int n;
  _Atomic uint64_t ends; /* chunks not taken: [low 32 bits, high 32 bits) */
} moe_task;

static void moe_add(moe_task *t, const di_tensor *w, const void *xq, int64_t M, float *y) {
  t->job[t->n] = (moe_job){w, xq, M, y};
  t->off[t->n + 1] = t->off[t->n] + w->ne[1];
  t->n++;
}

static void moe_start(moe_task *t) {
  const uint64_t chunks = (uint64_t)((t->off[t->n] + MOE_CHUNK - 1) / MOE_CHUNK);
  atomic_store(&t->ends, chunks << 32);
}

/* Takes the front or back chunk; false when none is left. */
static bool moe_claim(moe_task *t, bool front, int64_t *c) {
  uint64_t v = atomic_load(&t->ends);
  for (;;) {
    const uint64_t lo = v & 0xffffffffu, hi = v >> 32;
    if (lo >= hi) return false;
    const uint64_t nv = front ? hi << 32 | (lo + 1) : (hi - 1) << 32 | lo;
    if (atomic_compare_exchange_weak(&t->ends, &v, nv)) {
      *c = (int64_t)(front ? lo : hi - 1);
      return true;
    }
  }
}

static void moe_run(void *p, int ith, int nth) {
  moe_task *t = p;
  (void)nth;
  const bool front = ith % 2 == 0;
  int j = front ? 0 : t->n - 1; /* a front thread's chunks only move on, a back thread's back */
  int64_t c;
  while (moe_claim(t, front, &c)) {
    const int64_t c0 = c * MOE_CHUNK, c1 = c0 + MOE_CHUNK < t->off[t->n] ? c0 + MOE_CHUNK : t->off[t->n];
    while (t->off[j + 1] <= c0) j++;
    while (t->off[j] > c0) j--;
    for (int k = j; k < t->n && t->off[k] < c1; k++) {
      const moe_job *b = &t->job[k];
      const int64_t n0 = c0 > t->off[k] ? c0 - t->off[k] : 0, n1 = (c1 < t->off[k + 1] ? c1 : t->off[k + 1]) - t->off[k];
      t->be->matmul(b->w, b->xq, b->M, b->y, b->w->ne[1], n0, n1);
    }
  }
}

/* The shared experts join the task when gate and up read one activation
 * format (f->xq holds the prepared rows, as di_fwd_matmul_n would). */
static bool shared_in_task(const di_forward_ctx *f, const di_layer_weights *L) {
  return f->m->hp.n_expert_shared > 0 && f->be->act_format(L->sh_gate.type) == f->be->act_format(L->sh_up.type);
}

static void experts_grouped(di_forward_ctx *f, const di_layer_weights *L, const int *cnt, int T, bool sh, float clip) {
  const di_hparams *hp = &f->m->hp;
  const di_backend *be = f->be;
  const int E = hp->n_expert, D = hp->n_embd, F = hp->n_ff_exp, R = cnt[E], FS = (int)hp->n_ff_shexp;
  const di_dtype gt = L->exp_gate[0].type, dt = L->exp_down[0].type;
  const size_t rb = be->act_bytes(gt, 1, D), rbd = be->act_bytes(dt, 1, F);
  for (int r = 0; r < R; r++) be->act_prepare(gt, f->xn + (size_t)f->bucket[r] * D, 1, D, f->moe_xq + (size_t)r * rb);
  moe_task t = {.be = be};
  if (sh) {
    be->act_prepare(L->sh_gate.type, f->xn, T, D, f->xq);
    f->xq_src = NULL;
    moe_add(&t, &L->sh_gate, f->xq, T, f->gate);
    moe_add(&t, &L->sh_up, f->xq, T, f->up);
  }
  for (int e = 0; e < E; e++) {
    const int n = cnt[e + 1] - cnt[e];
    if (!n) continue;
    moe_add(&t, &L->exp_gate[e], f->moe_xq + (size_t)cnt[e] * rb, n, f->moe_g + (size_t)cnt[e] * F);
    moe_add(&t, &L->exp_up[e], f->moe_xq + (size_t)cnt[e] * rb, n, f->moe_u + (size_t)cnt[e] * F);
  }
  moe_start(&t);
  di_threadpool_run(f->tp, moe_run, &t);
  glu_rows(f, f->moe_g, f->moe_u, R, F, clip);
  be->act_prepare(dt, f->moe_g, R, F, f->moe_xq);
  t.n = 0;
  if (sh) {
    glu_rows(f, f->gate, f->up, T, FS, clip);
    be->act_prepare(L->sh_down.type, f->gate, T, FS, f->xq);
    moe_add(&t, &L->sh_down, f->xq, T, f->tmp);
  }
  for (int e = 0; e < E; e++) {
    const int n = cnt[e + 1] - cnt[e];
    if (n) moe_add(&t, &L->exp_down[e], f->moe_xq + (size_t)cnt[e] * rbd, n, f->ey + (size_t)cnt[e] * D);
  }
  moe_start(&t);
  di_threadpool_run(f->tp, moe_run, &t);
}

/* The grouped path needs one activation format for gate and up (the same
 * prepared rows feed both) and no expert parallelism. */
static bool can_group(const di_forward_ctx *f, const di_layer_weights *L, int T) {
  return !f->tpar && T <= DI_MOE_GROUP_TOKENS && f->moe_xq &&
         f->be->act_format(L->exp_gate[0].type) == f->be->act_format(L->exp_up[0].type);
}

/* The shared experts' GLU of the T tokens into f->tmp, where experts_grouped
 * did not run it. */
static void shared_experts(di_forward_ctx *f, const di_layer_weights *L, int T, float clip) {
  const di_hparams *hp = &f->m->hp;
  const di_tensor *gu[] = {&L->sh_gate, &L->sh_up};
  float *gy[] = {f->gate, f->up};
  const int64_t FS = hp->n_ff_shexp;
  if (f->tpar) { /* as a dense FFN under tensor parallel: the GLU on the rank's columns, one gather */
    f->tp_keep = true;
    di_fwd_matmul_n(f, gu, gy, 2, f->xn, T);
    f->tp_keep = false;
    int64_t c0, c1;
    di_tp_cols(FS, f->m->tp_rank, f->m->tp_size, &c0, &c1);
    for (int t = 0; t < T && c1 > c0; t++)
      f->be->glu(f->gate + t * FS + c0, f->up + t * FS + c0, (int)(c1 - c0), hp->act);
    di_fwd_tp_gather(f, &L->sh_gate, f->gate, T, &L->sh_down);
  } else {
    di_fwd_matmul_n(f, gu, gy, 2, f->xn, T);
    glu_rows(f, f->gate, f->up, T, (int)FS, clip);
  }
  di_fwd_matmul(f, &L->sh_down, f->gate, T, f->tmp);
}

void di_fwd_ffn_moe(stage_ctx *sc) {
  di_forward_ctx *f = sc->f;
  di_fwd_matmul(f, &sc->L->router, f->xn, sc->b->n_tokens, f->rlogit);
  di_fwd_par_tokens(sc, st_route);
  di_fwd_moe_experts(sc, 0);
}

void di_fwd_moe_experts(stage_ctx *sc, float clip) {
  di_forward_ctx *f = sc->f;
  const di_hparams *hp = &f->m->hp;
  const di_layer_weights *L = sc->L;
  const int T = sc->b->n_tokens, E = hp->n_expert, K = hp->n_expert_used, D = hp->n_embd, F = hp->n_ff_exp;
  /* group (token, weight) by expert, tokens ascending within each */
  int cnt[DI_MOE_MAX_EXPERTS + 1] = {0};
  for (int i = 0; i < T * K; i++) cnt[f->sel[i] + 1]++;
  for (int e = 0; e < E; e++) cnt[e + 1] += cnt[e];
  int fill[DI_MOE_MAX_EXPERTS];
  memcpy(fill, cnt, (size_t)E * sizeof(int));
  for (int t = 0; t < T; t++)
    for (int k = 0; k < K; k++) {
      int e = f->sel[t * K + k], at = fill[e]++;
      f->bucket[at] = t;
      f->bucket_w[at] = f->selw[t * K + k];
    }
  memset(f->acc, 0, (size_t)T * D * sizeof(float));
  /* Expert parallel (--tp): this rank runs whole experts [e0, e1), each on
   * the rows routed to it, into its rows of f->ey (expert order); the
   * gather brings every expert's rows, and each rank adds them up below in
   * the one-rank order, so the sum has the same bits. */
  int e0, e1;
  di_fwd_ep_range(f, E, &e0, &e1);
  const bool grouped = can_group(f, L, T), sh_done = grouped && shared_in_task(f, L);
  if (grouped) e1 = e0, experts_grouped(f, L, cnt, T, sh_done, clip);
  f->tp_local = f->tpar != NULL;
  for (int e = e0; e < e1; e++) {
    const int n = cnt[e + 1] - cnt[e];
    if (!n) continue;
    const int32_t *rows = f->bucket + cnt[e];
    f->be->gather_rows(f->xg, f->xn, rows, n, D);
    const di_tensor *gu[] = {&L->exp_gate[e], &L->exp_up[e]};
    float *gy[] = {f->gate, f->up};
    di_fwd_matmul_n(f, gu, gy, 2, f->xg, n);
    glu_rows(f, f->gate, f->up, n, F, clip);
    di_fwd_matmul(f, &L->exp_down[e], f->gate, n, f->ey + (size_t)cnt[e] * D);
  }
  f->tp_local = false;
  di_fwd_ep_gather(f, f->ey, cnt, E, D);
  /* rows in expert order, experts ascending: each token's sum runs in its experts' id order */
  f->be->scatter_add(f->acc, f->ey, f->bucket, f->bucket_w, cnt[E], D);
  if (hp->n_expert_shared > 0) {
    if (!sh_done) shared_experts(f, L, T, clip);
    for (int t = 0; t < T; t++) f->be->add(f->tmp + (size_t)t * D, f->acc + (size_t)t * D, D);
  } else {
    memcpy(f->tmp, f->acc, (size_t)T * D * sizeof(float));
  }
}
