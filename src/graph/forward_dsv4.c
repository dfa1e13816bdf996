/* DeepSeek-V4's layer sequence. The residual is hc_mult streams per token
 * (manifold-constrained hyper-connections): at each block a learned map of the
 * normalized streams gives pre (collapse the streams into the block's input),
 * post (spread its output back) and comb (mix the streams, Sinkhorn-Knopp
 * normalized to a doubly-stochastic matrix), in place of the residual add;
 * after the last layer the hyper head collapses them once more before the
 * final norm. Attention (attn_dsv4.c) and MoE (ffn_dsv4.c) are the blocks. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph/dsv4.h"

v4_layout di_v4_layout(const di_hparams *hp, di_v4_attn kind) {
  const int hd = hp->head_dim, id = hp->v4.idx_dim;
  v4_layout l = {.kv = 0, .width = hd, .ckv = -1, .cg = -1, .cmp = -1, .ikv = -1, .ig = -1, .icmp = -1};
  if (kind == DI_V4_SWA) return l;
  l.c = kind == DI_V4_CSA ? 2 : 1;
  l.ckv = hd, l.cg = hd + l.c * hd, l.cmp = hd + 2 * l.c * hd, l.width = l.cmp + hd;
  if (kind == DI_V4_CSA) l.ikv = l.width, l.ig = l.ikv + 2 * id, l.icmp = l.ig + 2 * id, l.width = l.icmp + id;
  return l;
}

int di_forward_v4_row_values(const di_hparams *hp, di_v4_attn kind) { return di_v4_layout(hp, kind).width; }

/* Layers whose values the cache holds: the main ones, and the MTP block's
 * window (layer n_layer, sliding) when the module runs. */
static int kv_layers(const di_hparams *hp) { return hp->n_layer + (hp->v4.mtp_kv ? 1 : 0); }

/* Layer il's values start at this offset of a position's pool row. */
static int row_offset(const di_hparams *hp, int il) {
  int o = 0;
  for (int i = 0; i < il; i++) o += di_v4_layout(hp, (di_v4_attn)hp->v4.attn[i]).width;
  return o;
}

static int rate_of(const di_hparams *hp, int il) {
  return hp->v4.attn[il] == DI_V4_CSA ? hp->v4.csa_rate : hp->v4.hca_rate;
}

/* Lays every layer's window parts end to end in a position's window row
 * (chunk k of `unit` values of it in window table k; a part may run across
 * two chunks: readers gather it); returns the values the row spans. */
/* The values of each window part (V4P_*) of a layer of this kind (0: none),
 * and where each lies in a token's slot of the batch's window scratch (the
 * parts end to end, as in a window row); returns the slot's values. */
static int window_parts(const di_hparams *hp, int kind, int size[V4P_N], int scr[V4P_N]) {
  const int hd = hp->head_dim, id = hp->v4.idx_dim, c = kind == DI_V4_CSA ? 2 : 1;
  for (int p = 0; p < V4P_N; p++) size[p] = 0;
  size[V4P_KV] = hd;
  if (kind != DI_V4_SWA)
    for (int sr = 0; sr < c; sr++) size[V4P_CKV + sr] = size[V4P_CG + sr] = hd;
  if (kind == DI_V4_CSA)
    for (int sr = 0; sr < 2; sr++) size[V4P_IKV + sr] = size[V4P_IG + sr] = id;
  int o = 0;
  for (int p = 0; p < V4P_N; p++) {
    scr[p] = size[p] ? o : -1;
    o += size[p];
  }
  return o;
}

/* Lays every layer's window parts end to end in a position's window row:
 * those read `window` positions back first (the raw rows; the HCA
 * compressor's series), then, split, the CSA compressors' and indexers'
 * series, read at most 2 x the CSA rate back, from offset 0 of their own
 * part of the row (placed after the long tables once the unit is known).
 * Returns the long part's values; *n_short the short part's. */
static int pack_window(const di_hparams *hp, v4_groups *out, bool split, int *n_short) {
  int o[2] = {0, 0};
  for (int il = 0; il < kv_layers(hp); il++) {
    v4_map *m = &out->layer[il];
    int size[V4P_N];
    window_parts(hp, hp->v4.attn[il], size, m->scr);
    for (int p = 0; p < V4P_N; p++) {
      const int cls = split && p != V4P_KV && hp->v4.attn[il] == DI_V4_CSA;
      m->part[p] = size[p] ? o[cls] : -1;
      o[cls] += size[p];
    }
  }
  *n_short = o[1];
  return o[0];
}

void di_v4_groups_plan(const di_hparams *hp, int bs, v4_groups *out) {
  const int hd = hp->head_dim, id = hp->v4.idx_dim;
  memset(out, 0, sizeof *out);
  out->block_size = bs;
  di_v4_geometry *g = &out->g;
  int main = 0, window = hp->v4.window, short_window = 0;
  g->align = bs;
  for (int il = 0; il < kv_layers(hp); il++) {
    v4_map *m = &out->layer[il];
    const int kind = hp->v4.attn[il], rate = rate_of(hp, il);
    m->main_off = -1;
    if (kind == DI_V4_SWA) continue;
    m->entry = hd + (kind == DI_V4_CSA ? id : 0);
    m->icmp = hd;
    m->main_off = main;
    if (kind == DI_V4_HCA && rate > bs && rate % bs == 0 && hd % (rate / bs) == 0) {
      /* one row per rate / bs blocks: each block of the window keeps a slice */
      m->slices = rate / bs;
      main += hd / m->slices;
      if (rate > g->align) g->align = rate;
    } else {
      main += (bs + rate - 1) / rate * m->entry; /* the most windows that close in one block */
    }
    /* the positions a window's row reads */
    if (kind == DI_V4_CSA && 2 * rate > short_window) short_window = 2 * rate;
    if (kind == DI_V4_HCA && rate > window) window = rate;
  }
  const bool split = short_window > 0 && short_window < window;
  if (!split && short_window > window) window = short_window;
  g->main_floats = main;
  g->window = window;
  int n_short = 0;
  const int n_long = pack_window(hp, out, split, &n_short);
  g->window_floats = n_long + n_short;
  /* A block is `unit` values per position: what the main table's rows need
   * (any count: every reader and writer of the pool takes unaligned rows),
   * wider when the window rows would need more tables than a sequence may
   * have. */
  int unit = (main + bs - 1) / bs;
  if (unit < 8) unit = 8;
  for (;; unit++) {
    g->n_short = (n_short + unit - 1) / unit;
    g->n_tables = (n_long + unit - 1) / unit + g->n_short;
    if (g->n_tables <= DI_KV_MAX_SWA_TABLES) break;
  }
  g->unit = unit;
  g->short_window = g->n_short ? short_window : 0;
  const int base = (g->n_tables - g->n_short) * unit; /* the short part starts a table */
  for (int il = 0; il < kv_layers(hp) && g->n_short; il++)
    if (hp->v4.attn[il] == DI_V4_CSA)
      for (int p = V4P_CKV; p < V4P_N; p++)
        if (out->layer[il].part[p] >= 0) out->layer[il].part[p] += base;
}

void di_forward_v4_geometry(const di_hparams *hp, int block_size, di_v4_geometry *g) {
  v4_groups *p = malloc(sizeof *p);
  memset(g, 0, sizeof *g);
  if (!p) return;
  di_v4_groups_plan(hp, block_size, p);
  *g = p->g;
  free(p);
}

/* Where layer il's values are: the grouped plan's map, or (one pool row per
 * position) offsets in the row. */
static void layer_map(di_forward_ctx *f, const di_batch *b, int il) {
  const di_hparams *hp = &f->m->hp;
  di_v4_scratch *v = f->v4;
  if (b->n_swa_tables > 0) {
    v->cur = v->groups->layer[il];
    return;
  }
  const int hd = hp->head_dim, id = hp->v4.idx_dim, o = row_offset(hp, il);
  const v4_layout lay = di_v4_layout(hp, (di_v4_attn)hp->v4.attn[il]);
  v4_map *m = &v->cur;
  int size[V4P_N];
  window_parts(hp, hp->v4.attn[il], size, m->scr);
  for (int p = 0; p < V4P_N; p++) m->part[p] = -1;
  m->part[V4P_KV] = o + lay.kv;
  m->main_off = -1;
  if (lay.ckv < 0) return;
  for (int sr = 0; sr < lay.c; sr++) m->part[V4P_CKV + sr] = o + lay.ckv + sr * hd, m->part[V4P_CG + sr] = o + lay.cg + sr * hd;
  m->main_off = o + lay.cmp;
  if (lay.ikv < 0) return;
  for (int sr = 0; sr < 2; sr++) m->part[V4P_IKV + sr] = o + lay.ikv + sr * id, m->part[V4P_IG + sr] = o + lay.ig + sr * id;
  m->icmp = lay.icmp - lay.cmp;
}

/* di_v4_scratch's map of the batch's tokens by (sequence, position). */
static di_code batch_index(di_forward_ctx *f, const di_batch *b, di_status *st) {
  di_v4_scratch *v = f->v4;
  const int cap = b->n_seqs > b->n_tokens ? b->n_seqs : b->n_tokens;
  if (cap > v->idx_cap) {
    free(v->seq_lo), free(v->seq_n), free(v->seq_base), free(v->at);
    v->seq_lo = malloc((size_t)cap * sizeof(int)), v->seq_n = malloc((size_t)cap * sizeof(int));
    v->seq_base = malloc((size_t)cap * sizeof(int)), v->at = malloc((size_t)cap * sizeof(int));
    v->idx_cap = v->seq_lo && v->seq_n && v->seq_base && v->at ? cap : 0;
    if (!v->idx_cap) return di_errorf(st, DI_ERR_NOMEM, "forward: out of memory");
  }
  int *hi = v->seq_base; /* the highest position first, the base after */
  for (int s = 0; s < b->n_seqs; s++) v->seq_lo[s] = INT_MAX, hi[s] = -1, v->seq_n[s] = 0;
  for (int t = 0; t < b->n_tokens; t++) {
    const int s = b->seq[t], p = b->pos[t];
    if (p < v->seq_lo[s]) v->seq_lo[s] = p;
    if (p > hi[s]) hi[s] = p;
    v->seq_n[s]++;
  }
  for (int s = 0, base = 0; s < b->n_seqs; s++) {
    if (v->seq_n[s] != hi[s] - v->seq_lo[s] + 1) v->seq_n[s] = 0; /* gaps or repeats: the cache */
    v->seq_base[s] = base;
    base += v->seq_n[s];
  }
  for (int t = 0; t < b->n_tokens; t++) {
    const int s = b->seq[t];
    if (v->seq_n[s]) v->at[v->seq_base[s] + b->pos[t] - v->seq_lo[s]] = t;
  }
  return DI_OK;
}

/* The grouped cache's plan for the pool's block size; its geometry must be the pool's and the batch's. */
static di_code groups_check(di_forward_ctx *f, const di_kv_pool *kv, const di_batch *b, di_status *st) {
  di_v4_scratch *v = f->v4;
  if (!v->groups && !(v->groups = calloc(1, sizeof *v->groups))) return di_errorf(st, DI_ERR_NOMEM, "forward: out of memory");
  if (v->groups->block_size != kv->block_size) di_v4_groups_plan(&f->m->hp, kv->block_size, v->groups);
  const di_v4_geometry *g = &v->groups->g;
  if (kv->n_layers != 1 || kv->kv_dim != g->unit || !kv->v_in_k || b->n_swa_tables != g->n_tables)
    return di_errorf(st, DI_ERR_INVALID,
                     "forward: DeepSeek-V4's grouped KV needs a pool of 1 layer x %d values and %d window tables "
                     "(got %d x %d, %d tables)",
                     g->unit, g->n_tables, kv->n_layers, kv->kv_dim, b->n_swa_tables);
  return DI_OK;
}

/* One pool "layer" whose row is every layer's values side by side: each
 * kind takes only its own width (a sliding layer's row is 1/6 of a CSA one's). */
void di_fwd_v4_kv_spec(const di_model *m, di_kv_spec *s) {
  const di_hparams *hp = &m->hp;
  *s = (di_kv_spec){.n_layers = 1, .kv_dim = row_offset(hp, kv_layers(hp)), .v_in_k = true, .type = DI_KV_DTYPE_F32};
}

di_code di_fwd_v4_alloc(di_forward_ctx *f) {
  const di_hparams *hp = &f->m->hp;
  const size_t T = (size_t)f->max_tokens, N = (size_t)hp->v4.hc_mult, D = (size_t)hp->n_embd;
  const size_t hd = (size_t)hp->head_dim, id = (size_t)hp->v4.idx_dim, ih = (size_t)hp->v4.idx_heads;
  di_v4_scratch *v = calloc(1, sizeof *v);
  if (!v) return DI_ERR_NOMEM;
  f->v4 = v;
  v->X = malloc(T * N * D * sizeof(float));
  v->hcn = malloc(T * N * D * sizeof(float));
  v->mix = malloc(T * (2 + N) * N * sizeof(float));
  v->post = malloc(T * N * sizeof(float));
  v->comb = malloc(T * N * N * sizeof(float));
  v->qa = malloc(T * (size_t)hp->q_lora_rank * sizeof(float));
  v->kvp = malloc(T * hd * sizeof(float));
  v->ckv = malloc(T * 2 * hd * sizeof(float));
  v->cg = malloc(T * 2 * hd * sizeof(float));
  v->ikv = malloc(T * 2 * id * sizeof(float));
  v->ig = malloc(T * 2 * id * sizeof(float));
  v->iw = malloc(T * ih * sizeof(float));
  v->iq = malloc(T * ih * id * sizeof(float));
  v->og = malloc(T * (size_t)hp->n_head * hd * sizeof(float));
  v->oa = malloc(T * (size_t)hp->v4.o_groups * (size_t)hp->v4.o_lora_rank * sizeof(float));
  v->ot = malloc(T * (size_t)hp->v4.o_lora_rank * sizeof(float));
  v->rope_m = malloc(T * (size_t)hp->rope_dim * sizeof(float));
  v->rope_c = malloc(T * (size_t)hp->rope_dim * sizeof(float));
  v->win_w = (int)(5 * hd + 4 * id); /* a CSA layer's parts, the widest kind */
  v->win = malloc(T * (size_t)v->win_w * sizeof(float));
  bool ok = v->X && v->hcn && v->mix && v->post && v->comb && v->qa && v->kvp && v->ckv && v->cg && v->ikv && v->ig &&
            v->iw && v->iq && v->og && v->oa && v->ot && v->rope_m && v->rope_c && v->win;
  return ok ? DI_OK : DI_ERR_NOMEM;
}

void di_fwd_v4_free(di_forward_ctx *f) {
  di_v4_scratch *v = f->v4;
  if (!v) return;
  free(v->X), free(v->hcn), free(v->mix), free(v->post), free(v->comb), free(v->qa), free(v->kvp), free(v->ckv);
  free(v->cg), free(v->ikv), free(v->ig), free(v->iw), free(v->iq), free(v->og), free(v->oa), free(v->rope_m);
  free(v->rope_c), free(v->ot), free(v->groups), free(v->win);
  free(v->seq_lo), free(v->seq_n), free(v->seq_base), free(v->at);
  free(v);
  f->v4 = NULL;
}

/* ---- hyper-connections ---- */

typedef struct hc_site {
  const di_tensor *fn, *base, *scale, *norm;
} hc_site;

/* streams of token t, flattened, times 1/rms (transformers' unweighted RMSNorm) */
static void st_hc_norm(stage_ctx *c, int t) {
  const di_hparams *hp = &c->f->m->hp;
  const int n = hp->v4.hc_mult * hp->n_embd;
  c->f->be->hc_norm(c->f->v4->X + (size_t)t * n, c->f->v4->hcn + (size_t)t * n, n, hp->rms_eps);
}

/* pre, post and the Sinkhorn-normalized comb from the mix; the collapsed
 * input in f->x, its block norm in f->xn */
static void st_hc_pre(stage_ctx *c, int t) {
  di_forward_ctx *f = c->f;
  const di_hparams *hp = &f->m->hp;
  const int N = hp->v4.hc_mult, D = hp->n_embd, M = (2 + N) * N;
  const hc_site *s = (const hc_site *)c->prep_x; /* the site rides in prep_x (no matmul prep here) */
  float pre[16], *post = f->v4->post + (size_t)t * N, *comb = f->v4->comb + (size_t)t * N * N;
  f->be->hc_maps(f->v4->mix + (size_t)t * M, s->base->data, s->scale->data, N, hp->v4.hc_iters, hp->v4.hc_eps, pre,
                 post, comb);
  float *x = f->x + (size_t)t * D;
  f->be->hc_collapse(f->v4->X + (size_t)t * N * D, pre, N, D, x);
  f->be->rms_norm(x, s->norm->data, f->xn + (size_t)t * D, D, hp->rms_eps);
}

/* streams <- post * out + comb^T streams */
static void st_hc_post(stage_ctx *c, int t) {
  di_forward_ctx *f = c->f;
  const int N = f->m->hp.v4.hc_mult, D = f->m->hp.n_embd;
  f->be->hc_expand(f->v4->X + (size_t)t * N * D, f->tmp + (size_t)t * D, f->v4->post + (size_t)t * N,
                   f->v4->comb + (size_t)t * N * N, N, D);
}

static void hc_pre(stage_ctx *sc, const hc_site *s) {
  di_forward_ctx *f = sc->f;
  di_fwd_par_tokens(sc, st_hc_norm);
  di_fwd_matmul(f, s->fn, f->v4->hcn, sc->b->n_tokens, f->v4->mix);
  stage_ctx c = *sc;
  c.prep_x = (const float *)s;
  di_fwd_par_tokens(&c, st_hc_pre);
}

/* the hyper head: streams collapsed by sigmoid(mix * scale + base) + eps into f->x */
static void st_head(stage_ctx *c, int t) {
  di_forward_ctx *f = c->f;
  const di_hparams *hp = &f->m->hp;
  const int N = hp->v4.hc_mult, D = hp->n_embd;
  const hc_site *s = (const hc_site *)c->prep_x;
  float pre[16];
  f->be->hc_maps(f->v4->mix + (size_t)t * N, s->base->data, s->scale->data, N, 0, hp->v4.hc_eps, pre, NULL, NULL);
  f->be->hc_collapse(f->v4->X + (size_t)t * N * D, pre, N, D, f->x + (size_t)t * D);
}

static void hc_head(stage_ctx *sc, const hc_site *s) {
  di_forward_ctx *f = sc->f;
  di_fwd_par_tokens(sc, st_hc_norm);
  di_fwd_matmul(f, s->fn, f->v4->hcn, sc->b->n_tokens, f->v4->mix);
  stage_ctx c = *sc;
  c.prep_x = (const float *)s;
  di_fwd_par_tokens(&c, st_head);
}

/* The wanted rows of f->x, normed, into f->xn; their count. */
static int head_rows(di_forward_ctx *f, const di_batch *b, const di_tensor *norm) {
  const di_hparams *hp = &f->m->hp;
  const int D = hp->n_embd;
  int n_out = 0;
  for (int t = 0; t < b->n_tokens; t++)
    if (b->want_logits ? b->want_logits[t] : t == b->n_tokens - 1)
      f->be->rms_norm(f->x + (size_t)t * D, norm->data, f->xn + (size_t)n_out++ * D, D, hp->rms_eps);
  return n_out;
}

/* One block: attention, then MoE, each between its hyper-connection maps. */
static di_code v4_layer(stage_ctx *sc, const di_layer_weights *L, int il, di_status *st) {
  di_code rc;
  sc->L = L;
  sc->loc = (kv_loc){-1, 0};
  layer_map(sc->f, sc->b, il);
  hc_site as = {&L->hc_attn_fn, &L->hc_attn_base, &L->hc_attn_scale, &L->attn_norm};
  hc_pre(sc, &as);
  if ((rc = di_fwd_v4_attn(sc, il, st))) return rc;
  di_fwd_par_tokens(sc, st_hc_post);
  hc_site fs = {&L->hc_ffn_fn, &L->hc_ffn_base, &L->hc_ffn_scale, &L->ffn_norm};
  hc_pre(sc, &fs);
  di_fwd_v4_ffn(sc);
  di_fwd_par_tokens(sc, st_hc_post);
  return DI_OK;
}

static void st_ropes(stage_ctx *c, int t) {
  di_forward_ctx *f = c->f;
  const di_hparams *hp = &f->m->hp;
  const int rd = hp->rope_dim;
  f->be->rope_cache(f->v4->rope_m + (size_t)t * rd, c->b->pos[t], rd, hp->v4.rope_theta_main, hp, false, NULL);
  f->be->rope_cache(f->v4->rope_c + (size_t)t * rd, c->b->pos[t], rd, hp->rope_base, hp, true, NULL);
}

di_code di_fwd_v4(di_forward_ctx *f, di_kv_pool *kv, const di_batch *b, float *logits, di_status *st) {
  const di_model *m = f->m;
  const di_hparams *hp = &m->hp;
  const int T = b->n_tokens, D = hp->n_embd, N = hp->v4.hc_mult;
  if (N > 16) return di_errorf(st, DI_ERR_UNSUPPORTED, "forward: hc_mult %d over 16", N);
  di_code rc;
  if ((b->n_swa_tables > 0 && (rc = groups_check(f, kv, b, st))) || (rc = batch_index(f, b, st))) return rc;
  for (int t = 0; t < T; t++) {
    float *x = f->v4->X + (size_t)t * N * D;
    f->be->get_row(&m->tok_embd, b->tokens[t], x);
    for (int j = 1; j < N; j++) memcpy(x + (size_t)j * D, x, (size_t)D * sizeof(float));
  }
  stage_ctx sc = {.f = f, .kv = kv, .b = b};
  di_fwd_par_tokens(&sc, st_ropes);
  for (int il = 0; il < hp->n_layer; il++)
    if ((rc = v4_layer(&sc, &m->layers[il], il, st))) return rc;
  /* --spec mtp reads the streams themselves (the MTP block takes all hc_mult) */
  if (f->hidden_out) memcpy(f->hidden_out, f->v4->X, (size_t)T * N * D * sizeof(float));
  hc_site head = {&m->hc_head_fn, &m->hc_head_base, &m->hc_head_scale, NULL};
  hc_head(&sc, &head);
  di_fwd_classifier(f, b, logits, head_rows(f, b, &m->output_norm));
  return DI_OK;
}

/* The MTP block (forward.h di_forward_mtp): every stream of the main model's
 * hidden state at pos, normed, beside the normed embedding of the token at
 * pos + 1, through eh_proj (the shared first step, forward_mtp.c) is the
 * block's input streams; the block (its K/V the cache's MTP window), its own
 * hyper head and norm, and the main classifier give the token at pos + 2. */
di_code di_fwd_v4_mtp(di_forward_ctx *f, di_kv_pool *kv, const di_batch *b, const float *hidden, float *logits,
                      float *hidden_out, di_status *st) {
  const di_model *m = f->m;
  const di_hparams *hp = &m->hp;
  const di_mtp_weights *w = m->mtp;
  const int T = b->n_tokens, D = hp->n_embd, N = hp->v4.hc_mult;
  if (!hp->v4.mtp_kv) return di_errorf(st, DI_ERR_INVALID, "forward: the KV plan has no MTP window (hparams v4.mtp_kv)");
  di_code rc;
  if ((b->n_swa_tables > 0 && (rc = groups_check(f, kv, b, st))) || (rc = batch_index(f, b, st))) return rc;
  di_fwd_embed(f, b, f->x);
  for (int j = 0; j < N; j++) { /* stream j of every token, then scattered into the streams */
    di_fwd_mtp_project(f, f->x, hidden + (size_t)j * D, (size_t)N * D, T, f->tmp);
    for (int t = 0; t < T; t++)
      memcpy(f->v4->X + ((size_t)t * N + j) * D, f->tmp + (size_t)t * D, (size_t)D * sizeof(float));
  }
  stage_ctx sc = {.f = f, .kv = kv, .b = b};
  di_fwd_par_tokens(&sc, st_ropes);
  if (b->kv_only && w->layer.v4_attn == DI_V4_SWA) { /* a sliding block's K/V depend on its input alone */
    sc.L = &w->layer;
    sc.loc = (kv_loc){-1, 0};
    layer_map(f, b, hp->n_layer);
    hc_site as = {&w->layer.hc_attn_fn, &w->layer.hc_attn_base, &w->layer.hc_attn_scale, &w->layer.attn_norm};
    hc_pre(&sc, &as);
    di_fwd_v4_attn_kv(&sc);
    if (__atomic_exchange_n(&f->v4->failed, 0, __ATOMIC_RELAXED))
      return di_errorf(st, DI_ERR_NOMEM, "DeepSeek-V4 MTP block: out of memory for a token's K/V");
    return DI_OK;
  }
  if ((rc = v4_layer(&sc, &w->layer, hp->n_layer, st))) return rc;
  if (hidden_out) memcpy(hidden_out, f->v4->X, (size_t)T * N * D * sizeof(float));
  hc_site head = {&w->hc_head_fn, &w->hc_head_base, &w->hc_head_scale, NULL};
  hc_head(&sc, &head);
  const int n_out = head_rows(f, b, &w->head_norm);
  if (n_out) di_fwd_matmul(f, w->head.data ? &w->head : &m->output, f->xn, n_out, logits);
  return DI_OK;
}
