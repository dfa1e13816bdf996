/* Tensor parallel forward (see forward_tp.h): the column split of every
 * matmul with its all-gather, and the step the leader hands the followers. */
#include "graph/forward_tp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/comm.h"
#include "graph/forward_internal.h"
#include "util/threadpool.h"

static di_tp_mem *g_mem; /* [g_mem_n] every rank's, kept by each rank (the leader reports them) */
static int g_mem_n;

typedef struct di_tp {
  bool leader;
  int rank, size;
  di_code rc; /* the step's first exchange error */
  bool leader_only; /* the current exchange gathers on the leader only */
  di_status st;
  float *sbuf, *rbuf; /* gather buffers */
  size_t cap;         /* floats in each */
  uint8_t *qbuf;      /* this rank's prepared activation rows (di_fwd_tp_gather_prepared) */
  size_t qcap;
  int64_t *c0, *c1;   /* [size] each rank's columns of the activation being gathered */
  size_t *bytes;      /* [size] each rank's part of the current exchange */
  /* follower: the pool copy, the logits nobody reads, the step's batch */
  di_kv_pool *pool;
  uint64_t pool_id;
  float *logits;
  size_t logits_cap;
  di_batch_seq *seqs;
  int seqs_cap;
  di_logits_split split; /* the step's, when it samples on split logits */
  uint64_t lead_pool; /* leader: the pool whose per-rank size g_mem holds */
} di_tp;

static di_code tp_attach(di_forward_ctx *f, bool leader, di_status *st) {
  di_tp *t = calloc(1, sizeof *t);
  int n = di_dist_size();
  if (t) t->bytes = calloc((size_t)n, sizeof *t->bytes);
  if (t) t->c0 = calloc(2 * (size_t)n, sizeof *t->c0);
  if (!t || !t->bytes || !t->c0) {
    if (t) free(t->bytes);
    free(t);
    return di_errorf(st, DI_ERR_NOMEM, "tensor parallel: out of memory");
  }
  t->leader = leader, t->rank = di_dist_rank(), t->size = n, t->c1 = t->c0 + n;
  f->tpar = t;
  return DI_OK;
}

void di_fwd_tp_free(di_forward_ctx *f) {
  di_tp *t = f->tpar;
  if (!t) return;
  free(t->sbuf), free(t->rbuf), free(t->bytes), free(t->logits), free(t->seqs), free(t->qbuf), free(t->c0);
  di_kv_pool_destroy(t->pool);
  free(t);
  f->tpar = NULL;
}

/* ---- the column split ---- */

static bool grow(void **p, size_t *cap, size_t need, size_t elt) {
  if (need <= *cap) return true;
  void *q = realloc(*p, need * elt);
  if (!q) return false;
  *p = q, *cap = need;
  return true;
}

/* Both exchange buffers hold at least n floats. */
static bool grow_bufs(di_tp *p, size_t n) {
  size_t cap = p->cap;
  if (grow((void **)&p->sbuf, &cap, n, sizeof(float)) && grow((void **)&p->rbuf, &p->cap, n, sizeof(float)))
    return true;
  if (!p->rc) p->rc = di_errorf(&p->st, DI_ERR_NOMEM, "tensor parallel: out of memory for a %zu-value exchange", n);
  return false;
}

/* Copies rank r's columns of each output (di_tp_cols of its width) between
 * t->y (row-major [M][N_j] each) and a packed buffer ([j][m][cols]);
 * returns the floats moved. */
static size_t pack(const mm_task *t, int r, int size, float *buf, bool to_buf) {
  size_t n = 0;
  for (int j = 0; j < t->n; j++) {
    const int64_t N = t->w[j]->ne[1];
    int64_t a, b;
    di_tp_cols(N, r, size, &a, &b);
    for (int64_t m = 0; a < b && m < t->M; m++, n += (size_t)(b - a)) {
      float *y = t->y[j] + m * N + a;
      if (!buf) continue;
      if (to_buf) memcpy(buf + n, y, (size_t)(b - a) * sizeof *buf);
      else memcpy(y, buf + n, (size_t)(b - a) * sizeof *buf);
    }
  }
  return n;
}

static void exchange(di_tp *p, const mm_task *t, size_t need);
static bool gather_prepared(di_forward_ctx *f, const di_tensor *w, const float *src, const float *x, int T,
                            int64_t K);

/* Each rank's part of t's outputs into p->bytes; returns the floats of all. */
static size_t exchange_sizes(di_tp *p, const mm_task *t) {
  size_t need = 0;
  for (int r = 0; r < p->size; r++) {
    p->bytes[r] = pack(t, r, p->size, NULL, false) * sizeof(float);
    need += p->bytes[r] / sizeof(float);
  }
  return need;
}

void di_fwd_tp_matmul(di_forward_ctx *f, mm_task *t) {
  di_tp *p = f->tpar;
  const size_t need = exchange_sizes(p, t);
  for (int j = 0; j < t->n; j++) di_tp_cols(t->w[j]->ne[1], p->rank, p->size, &t->lo[j], &t->hi[j]);
  if (p->bytes[p->rank]) di_fwd_mm(f->tp, t);
  p->leader_only = f->tp_leader_only;
  if (!f->tp_keep) exchange(p, t, need);
  p->leader_only = false;
}

void di_fwd_tp_gather(di_forward_ctx *f, const di_tensor *w, float *y, int64_t M, const di_tensor *next) {
  di_tp *p = f->tpar;
  mm_task t = {.w = {w}, .y = {y}, .n = 1, .M = M};
  if (next) { /* this rank's columns of y, compact, for gather_prepared */
    const int64_t N = w->ne[1];
    for (int r = 0; r < p->size; r++) di_tp_cols(N, r, p->size, &p->c0[r], &p->c1[r]);
    const int64_t c0 = p->c0[p->rank], n = p->c1[p->rank] - c0;
    if (!p->rc && grow_bufs(p, (size_t)M * (size_t)n + 1)) {
      for (int64_t m = 0; m < M; m++) memcpy(p->sbuf + m * n, y + m * N + c0, (size_t)n * sizeof(float));
      if (gather_prepared(f, next, p->sbuf, y, (int)M, N)) return;
    }
  }
  exchange(p, &t, exchange_sizes(p, &t));
}

/* Every rank's columns of t's outputs (p->bytes[r] each, need in all) into place on every rank. */
static void exchange(di_tp *p, const mm_task *t, size_t need) {
  if (p->rc || !grow_bufs(p, need)) return; /* the step has failed: finish it without exchanges */
  pack(t, p->rank, p->size, p->sbuf, true);
  if (p->leader_only) {
    if ((p->rc = di_dist_gatherv(p->sbuf, p->rbuf, p->bytes, &p->st)) || !p->leader) return;
  } else if ((p->rc = di_dist_allgatherv(p->sbuf, p->rbuf, p->bytes, &p->st))) {
    return;
  }
  size_t off = 0;
  for (int r = 0; r < p->size; off += p->bytes[r] / sizeof(float), r++)
    if (r != p->rank) pack(t, r, p->size, p->rbuf + off, false);
}

float *di_fwd_tp_heads_buf(di_forward_ctx *f, size_t n) {
  di_tp *p = f->tpar;
  if (p->rc || !grow_bufs(p, n)) return NULL;
  return p->sbuf;
}

/* The gather of the activation x ([T][K], rank r's columns [p->c0[r],
 * p->c1[r]) in rank order, this rank's in src as [T][its columns]) in the
 * format the next matmul (of w) reads (int8 blocks for quantized weights),
 * straight into f->xq, so that matmul skips its own preparation: a quarter
 * of the f32 bytes. Each rank prepares its own columns; a prepared row is a
 * sequence of independent blocks (the per-row quantization is per block), so
 * where every rank's columns are whole blocks the gathered rows have the
 * bytes of the whole row's preparation. False where they are not (the f32
 * gather then runs) or after an error. */
static bool gather_prepared(di_forward_ctx *f, const di_tensor *w, const float *src, const float *x, int T,
                            int64_t K) {
  di_tp *p = f->tpar;
  const di_backend *be = f->be;
  const size_t rb = be->act_bytes(w->type, 1, K);
  static int f32 = -1; /* DI_TP_F32=1: f32 exchanges (to measure the difference) */
  if (f32 < 0) f32 = getenv("DI_TP_F32") && atoi(getenv("DI_TP_F32")) > 0;
  if (p->rc) return true;
  if (!rb || f32) return false;
  size_t need = 0;
  for (int r = 0; r < p->size; r++) {
    const int64_t n = p->c1[r] - p->c0[r];
    const size_t b = be->act_bytes(w->type, 1, n);
    if (b * (size_t)K != rb * (size_t)n) return false; /* not whole blocks */
    p->bytes[r] = (size_t)T * b;
    need += p->bytes[r];
  }
  const int64_t n = p->c1[p->rank] - p->c0[p->rank];
  const size_t own = be->act_bytes(w->type, 1, n);
  if (!grow((void **)&p->qbuf, &p->qcap, p->bytes[p->rank] + 1, 1)) {
    p->rc = di_errorf(&p->st, DI_ERR_NOMEM, "tensor parallel: out of memory for a %zu-byte exchange", need);
    return true;
  }
  for (int t = 0; t < T && own; t++) be->act_prepare(w->type, src + (size_t)t * n, 1, n, p->qbuf + (size_t)t * own);
  /* src (p->sbuf) is read: the buffers may move now */
  if (!grow_bufs(p, need / sizeof(float) + 1) || (p->rc = di_dist_allgatherv(p->qbuf, p->rbuf, p->bytes, &p->st)))
    return true;
  const uint8_t *in = (const uint8_t *)p->rbuf;
  size_t at = 0; /* the rank's first byte in a row */
  for (int r = 0; r < p->size; r++) {
    const size_t b = p->bytes[r] / (size_t)T;
    for (int t = 0; t < T && b; t++, in += b) memcpy((uint8_t *)f->xq + (size_t)t * rb + at, in, b);
    at += b;
  }
  f->xq_src = x, f->xq_fmt = be->act_format(w->type);
  return true;
}

void di_fwd_tp_gather_heads(di_forward_ctx *f, float *att, int T, int64_t w, const di_tensor *next) {
  di_tp *p = f->tpar;
  const di_hparams *hp = &f->m->hp;
  const int64_t N = (int64_t)hp->n_head * w;
  if (p->rc) return;
  for (int r = 0; r < p->size; r++) { /* every rank's query heads, in rank order */
    int k0, k1, q0, q1;
    if (hp->attn_kind == DI_ATTN_GQA) di_tp_gqa_heads(hp, r, p->size, &k0, &k1, &q0, &q1);
    else di_tp_heads(hp->n_head, r, p->size, &q0, &q1); /* MLA (di_tp_mla_heads_split) */
    p->c0[r] = q0 * w, p->c1[r] = q1 * w;
  }
  if (next && gather_prepared(f, next, p->sbuf, att, T, N)) return;
  for (int r = 0; r < p->size; r++) p->bytes[r] = (size_t)T * (size_t)(p->c1[r] - p->c0[r]) * sizeof(float);
  if ((p->rc = di_dist_allgatherv(p->sbuf, p->rbuf, p->bytes, &p->st))) return;
  const float *in = p->rbuf;
  for (int r = 0; r < p->size; r++) {
    const int64_t c0 = p->c0[r], c1 = p->c1[r];
    for (int t = 0; t < T; t++, in += c1 - c0) memcpy(att + t * N + c0, in, (size_t)(c1 - c0) * sizeof *in);
  }
}

void di_fwd_ep_range(const di_forward_ctx *f, int E, int *e0, int *e1) {
  const di_tp *p = f->tpar;
  di_tp_experts(E, p ? p->rank : 0, p ? p->size : 1, e0, e1);
}

void di_fwd_ep_gather(di_forward_ctx *f, float *y, const int *cnt, int E, int D) {
  di_tp *p = f->tpar;
  if (!p || p->rc) return;
  for (int r = 0; r < p->size; r++) {
    int e0, e1;
    di_tp_experts(E, r, p->size, &e0, &e1);
    p->bytes[r] = (size_t)(cnt[e1] - cnt[e0]) * (size_t)D * sizeof(float);
  }
  p->rc = di_dist_allgatherv(NULL, y, p->bytes, &p->st);
}

di_code di_fwd_tp_result(di_forward_ctx *f, di_status *st) {
  di_tp *p = f->tpar;
  di_code rc = p->rc;
  if (rc) *st = p->st;
  p->rc = DI_OK;
  di_status_clear(&p->st);
  return rc;
}

/* ---- sampling on split logits ---- */

/* The pairs a rank sends for a row that asks k of its slice of w columns. */
static int split_count(int k, int64_t w) { return k == 1 ? 1 : (int)(k < w ? k : w); }

void di_fwd_tp_split_logits(di_forward_ctx *f, const di_logits_split *sp, float *logits, int n_out, float softcap) {
  di_tp *p = f->tpar;
  const int64_t V = f->m->hp.n_vocab;
  if (p->rc) return;
  size_t need = 0, own = 0;
  int64_t a = 0, b = 0;
  for (int r = 0; r < p->size; r++) {
    di_tp_cols(V, r, p->size, &a, &b);
    size_t n = 0;
    for (int i = 0; i < n_out; i++) n += (size_t)split_count(sp->k[i], b - a);
    p->bytes[r] = n * sizeof(di_topk_pair);
    need += n;
  }
  di_tp_cols(V, p->rank, p->size, &a, &b);
  const int64_t w = b - a;
  own = p->bytes[p->rank] / sizeof(di_topk_pair);
  /* the pairs sent, then scratch for a slice's selection or a row's merge */
  const size_t scratch = (size_t)w > (size_t)p->size * DI_SPLIT_TOPK_MAX ? (size_t)w : (size_t)p->size * DI_SPLIT_TOPK_MAX;
  if (!grow((void **)&p->qbuf, &p->qcap, (own + scratch) * sizeof(di_topk_pair), 1) ||
      !grow_bufs(p, need * sizeof(di_topk_pair) / sizeof(float) + 1)) {
    if (!p->rc) p->rc = di_errorf(&p->st, DI_ERR_NOMEM, "tensor parallel: out of memory for split logits");
    return;
  }
  di_topk_pair *send = (di_topk_pair *)p->qbuf, *scr = send + own, *o = send;
  for (int i = 0; i < n_out; i++) {
    float *row = logits + (size_t)i * V + a;
    if (softcap > 0 && w) f->be->softcap(row, (int)w, softcap);
    o += di_topk_slice(row, (int)w, (int32_t)a, sp->k[i], sp->temperature[i], scr, o);
  }
  di_topk_pair *all = (di_topk_pair *)p->rbuf;
  if ((p->rc = di_dist_gatherv(send, all, p->bytes, &p->st)) || !p->leader) return;
  /* rank r's block of pairs starts at its offset, its rows in order within */
  int64_t *at = p->c0; /* rank r's next pair: all[at[r]] */
  for (int r = 0, off = 0; r < p->size; off += (int)(p->bytes[r] / sizeof(di_topk_pair)), r++) at[r] = off;
  for (int i = 0; i < n_out; i++) {
    int n = 0;
    for (int r = 0; r < p->size; r++) {
      int64_t ra, rb;
      di_tp_cols(V, r, p->size, &ra, &rb);
      const int c = split_count(sp->k[i], rb - ra);
      memcpy(scr + n, all + at[r], (size_t)c * sizeof *scr), n += c, at[r] += c;
    }
    di_topk_merge(scr, n, sp->k[i], logits[(size_t)i * V], sp->out + (size_t)i * DI_SPLIT_TOPK_MAX);
  }
}

/* ---- messages ---- */

di_code di_tp_send(di_tp_msg *h, const void *payload, di_status *st) {
  di_code rc = di_dist_bcast(h, sizeof *h, false, st);
  if (!rc && h->payload) rc = di_dist_bcast((void *)payload, h->payload, false, st);
  return rc;
}

di_code di_tp_recv(di_tp_msg *h, void **buf, size_t *cap, di_status *st) {
  di_code rc = di_dist_bcast(h, sizeof *h, true, st);
  if (rc || !h->payload) return rc;
  if (!grow(buf, cap, h->payload, 1)) return di_errorf(st, DI_ERR_NOMEM, "tensor parallel: out of memory");
  return di_dist_bcast(*buf, h->payload, false, st);
}

/* FORWARD's header: a[] holds the batch's counts and the pool's geometry. */
enum { A_T, A_SEQS, A_SWA, A_WANT, A_COPIES, A_BS, A_BLOCKS, A_LAYERS, A_KVDIM, A_VINK, A_TYPE, A_SPLIT, A_KVONLY };

/* The rows that get logits in b. */
static int batch_rows(const di_batch *b) {
  int n = 0;
  for (int t = 0; t < b->n_tokens; t++) n += b->want_logits ? b->want_logits[t] : t == b->n_tokens - 1;
  return n;
}

int64_t di_fwd_mtp_width(const di_hparams *hp) {
  return hp->attn_kind == DI_ATTN_DSV4 ? (int64_t)hp->v4.hc_mult * hp->n_embd : hp->n_embd;
}

di_code di_fwd_tp_step(di_forward_ctx *f, di_kv_pool *kv, const di_batch *b, const float *hidden, di_status *st) {
  di_tp *p = f->tpar;
  if (!p->leader) return DI_OK;
  if (p->rc) return di_fwd_tp_result(f, st);
  if (!kv->log_copies) { /* copies before the first step need no repeat: no block was written yet */
    kv->log_copies = true;
    kv->n_copy_log = 0;
  }
  if (kv->copy_log_lost) /* the followers' pools would drift */
    return di_errorf(st, DI_ERR_NOMEM, "tensor parallel: out of memory recording a KV block copy");
  if (p->lead_pool != (uint64_t)(uintptr_t)kv && g_mem_n == p->size) { /* every rank's pool size, for reports */
    p->lead_pool = (uint64_t)(uintptr_t)kv;
    for (int r = 0; r < p->size; r++) {
      di_kv_spec s = {.n_layers = kv->n_layers, .kv_dim = kv->kv_dim, .v_in_k = kv->v_in_k, .type = kv->type};
      di_kv_spec own;
      di_forward_kv_spec_rank(f->m, r, p->size, &own);
      if (di_tp_kv_split(&f->m->hp, p->size)) s.kv_dim = own.kv_dim;
      g_mem[r].kv = (uint64_t)kv->n_blocks * di_kv_spec_block_bytes(&s, kv->block_size);
    }
  }
  const int nc = kv->n_copy_log;
  const int T = b->n_tokens, S = b->n_seqs, W = b->n_swa_tables;
  di_tp_msg h = {.cmd = hidden ? DI_TP_MTP : DI_TP_FORWARD, .pool_id = (uint64_t)(uintptr_t)kv};
  h.a[A_T] = T, h.a[A_SEQS] = S, h.a[A_SWA] = W, h.a[A_WANT] = b->want_logits != NULL, h.a[A_COPIES] = nc;
  h.a[A_BS] = kv->block_size, h.a[A_BLOCKS] = kv->n_blocks, h.a[A_LAYERS] = kv->n_layers, h.a[A_KVDIM] = kv->kv_dim;
  h.a[A_VINK] = kv->v_in_k, h.a[A_TYPE] = (int32_t)kv->type, h.a[A_SPLIT] = b->split != NULL;
  h.a[A_KVONLY] = b->kv_only;
  const int rows = b->split ? batch_rows(b) : 0;
  const size_t nh = hidden ? (size_t)T * (size_t)di_fwd_mtp_width(&f->m->hp) : 0; /* floats */
  size_t n = 2 * (size_t)nc + 4 * (size_t)T + 3 * (size_t)S + 2 * (size_t)rows + nh;
  for (int s = 0; s < S; s++) n += (size_t)b->seqs[s].n_blocks + (size_t)W * b->seqs[s].n_swa_blocks;
  int32_t *buf = malloc(n * sizeof *buf), *o = buf;
  if (!buf) return di_errorf(st, DI_ERR_NOMEM, "tensor parallel: out of memory for a step of %d tokens", T);
  if (nc) memcpy(o, kv->copy_log, 2 * (size_t)nc * sizeof *o), o += 2 * nc;
  memcpy(o, b->tokens, (size_t)T * sizeof *o), o += T;
  memcpy(o, b->pos, (size_t)T * sizeof *o), o += T;
  memcpy(o, b->seq, (size_t)T * sizeof *o), o += T;
  for (int t = 0; t < T; t++) *o++ = b->want_logits ? b->want_logits[t] : 0;
  for (int s = 0; s < S; s++) {
    const di_batch_seq *q = &b->seqs[s];
    *o++ = q->n_blocks, *o++ = q->n_swa_blocks, *o++ = q->full_cached;
    if (q->n_blocks) memcpy(o, q->blocks, (size_t)q->n_blocks * sizeof *o), o += q->n_blocks;
    for (int k = 0; k < W && q->n_swa_blocks; k++)
      memcpy(o, q->swa[k], (size_t)q->n_swa_blocks * sizeof *o), o += q->n_swa_blocks;
  }
  if (rows) { /* each row's k, then its temperature's bits */
    memcpy(o, b->split->k, (size_t)rows * sizeof *o), o += rows;
    memcpy(o, b->split->temperature, (size_t)rows * sizeof *o), o += rows;
  }
  if (nh) memcpy(o, hidden, nh * sizeof *hidden); /* the states, last */
  h.payload = n * sizeof *buf;
  kv->n_copy_log = 0;
  di_code rc = di_tp_send(&h, buf, st);
  free(buf);
  return rc;
}

/* ---- leader and follower set-up ---- */


int di_tp_memory(const di_tp_mem **out) {
  *out = g_mem;
  return g_mem_n;
}

uint64_t di_tp_rss_bytes(void) {
  FILE *fp = fopen("/proc/self/status", "r");
  char line[256];
  unsigned long long kb = 0;
  while (fp && fgets(line, sizeof line, fp))
    if (sscanf(line, "VmRSS: %llu kB", &kb) == 1) break;
  if (fp) fclose(fp);
  return (uint64_t)kb * 1024;
}

static di_code share_memory(const di_model *m, di_status *st) {
  const int n = di_dist_size(), r = di_dist_rank();
  di_tp_mem *all = calloc((size_t)n, sizeof *all);
  size_t *bytes = calloc((size_t)n, sizeof *bytes);
  if (!all || !bytes) {
    free(all), free(bytes);
    return di_errorf(st, DI_ERR_NOMEM, "tensor parallel: out of memory");
  }
  for (int i = 0; i < n; i++) bytes[i] = sizeof *all;
  all[r] = (di_tp_mem){.weights = m->held_bytes, .rss = di_tp_rss_bytes()};
  di_code rc = di_dist_allgatherv(NULL, all, bytes, st);
  free(bytes);
  if (rc) {
    free(all);
    return rc;
  }
  free(g_mem);
  g_mem = all, g_mem_n = n;
  return DI_OK;
}

di_code di_forward_tp_follow_memory(di_forward_ctx *f, di_status *st) { return share_memory(f->m, st); }

di_code di_forward_tp_lead(di_forward_ctx *f, const char *path, int threads, int max_batch, bool use_mmap,
                           di_status *st) {
  const di_hparams *hp = &f->m->hp;
  di_tp_msg h = {.cmd = DI_TP_LOAD, .payload = strlen(path) + 1};
  h.a[DI_TP_A_THREADS] = threads, h.a[DI_TP_A_MAX_BATCH] = max_batch, h.a[DI_TP_A_MMAP] = use_mmap;
  h.a[DI_TP_A_WINDOW] = hp->sliding_window, h.a[DI_TP_A_SWA_PATTERN] = hp->swa_pattern; /* after --swa-window */
  h.a[DI_TP_A_V4_MTP] = hp->v4.mtp_kv;
  di_code rc = di_tp_send(&h, path, st);
  bool ok = false;
  if (!rc) rc = di_dist_agree(true, &ok, st);
  if (!rc && !ok) return di_errorf(st, DI_ERR_IO, "--tp: another rank could not load %s (see its message)", path);
  if (!rc) rc = share_memory(f->m, st);
  return rc ? rc : tp_attach(f, true, st);
}

di_code di_forward_tp_follow_init(di_forward_ctx *f, di_status *st) { return tp_attach(f, false, st); }

di_code di_forward_tp_follow(di_forward_ctx *f, const di_tp_msg *h, const void *payload, di_status *st) {
  di_tp *p = f->tpar;
  const int32_t *a = h->a, *in = payload;
  const int T = a[A_T], S = a[A_SEQS], W = a[A_SWA];
  /* rank 0's own engine wrote the message; still, read nothing past its end */
  const int32_t *end = in + h->payload / sizeof *in;
  if (T <= 0 || S <= 0 || W < 0 || W > DI_KV_MAX_SWA_TABLES || a[A_COPIES] < 0 ||
      (end - in) < 2 * (int64_t)a[A_COPIES] + 4 * (int64_t)T + 3 * (int64_t)S)
    return di_errorf(st, DI_ERR_INVALID, "tensor parallel: malformed step message from rank 0");
  di_kv_spec own;
  di_forward_kv_spec(f->m, &own);
  /* the leader's geometry, with this rank's row width where attention is split by heads */
  di_kv_spec spec = {.n_layers = a[A_LAYERS], .kv_dim = di_tp_kv_split(&f->m->hp, p->size) ? own.kv_dim : a[A_KVDIM],
                     .v_in_k = a[A_VINK], .type = (di_kv_dtype)a[A_TYPE]};
  di_code rc;
  if (!p->pool || p->pool_id != h->pool_id) {
    di_kv_pool_destroy(p->pool);
    p->pool = NULL;
    size_t mem = (size_t)a[A_BLOCKS] * di_kv_spec_block_bytes(&spec, a[A_BS]);
    if ((rc = di_kv_pool_create_spec(&p->pool, mem, a[A_BS], &spec, st))) return rc;
    if (p->pool->n_blocks != a[A_BLOCKS])
      return di_errorf(st, DI_ERR_INVALID, "tensor parallel: pool of %d blocks for the leader's %d", p->pool->n_blocks,
                       a[A_BLOCKS]);
    p->pool_id = h->pool_id;
  }
  for (int i = 0; i < a[A_COPIES]; i++, in += 2) {
    if (in[0] < 0 || in[1] < 0 || in[0] >= p->pool->n_blocks || in[1] >= p->pool->n_blocks)
      return di_errorf(st, DI_ERR_INVALID, "tensor parallel: block copy %d <- %d outside the pool", in[0], in[1]);
    di_kv_copy_block(p->pool, in[0], in[1]);
  }
  size_t sc = (size_t)p->seqs_cap;
  if (!grow((void **)&p->seqs, &sc, (size_t)S, sizeof *p->seqs)) return di_errorf(st, DI_ERR_NOMEM, "out of memory");
  p->seqs_cap = (int)sc;
  di_batch b = {.n_tokens = T, .tokens = in, .pos = in + T, .seq = in + 2 * T, .n_seqs = S, .seqs = p->seqs,
                .n_swa_tables = W, .kv_only = a[A_KVONLY] != 0};
  const int32_t *want = in + 3 * T;
  in += 4 * T;
  bool *wl = NULL;
  if (a[A_WANT]) {
    wl = malloc((size_t)T);
    if (!wl) return di_errorf(st, DI_ERR_NOMEM, "out of memory");
    for (int t = 0; t < T; t++) wl[t] = want[t] != 0;
    b.want_logits = wl;
  }
  for (int s = 0; s < S; s++) {
    di_batch_seq *q = &p->seqs[s];
    if (end - in < 3 || in[0] < 0 || in[1] < 0 || end - in - 3 < in[0] + (int64_t)W * in[1]) {
      free(wl);
      return di_errorf(st, DI_ERR_INVALID, "tensor parallel: malformed step message from rank 0");
    }
    *q = (di_batch_seq){.n_blocks = in[0], .n_swa_blocks = in[1], .full_cached = in[2]};
    in += 3;
    q->blocks = in, in += q->n_blocks;
    for (int k = 0; k < W; k++) q->swa[k] = in, in += q->n_swa_blocks;
  }
  const int n_out = batch_rows(&b);
  if (a[A_SPLIT]) {
    if (end - in < 2 * (int64_t)n_out) {
      free(wl);
      return di_errorf(st, DI_ERR_INVALID, "tensor parallel: malformed step message from rank 0");
    }
    for (int i = 0; i < n_out; i++)
      if (in[i] < 1 || in[i] > DI_SPLIT_TOPK_MAX) {
        free(wl);
        return di_errorf(st, DI_ERR_INVALID, "tensor parallel: split logits k %d outside [1, %d]", in[i],
                         DI_SPLIT_TOPK_MAX);
      }
    p->split = (di_logits_split){.k = in, .temperature = (const float *)(in + n_out)};
    b.split = &p->split;
  }
  in += a[A_SPLIT] ? 2 * n_out : 0;
  const size_t nh = h->cmd == DI_TP_MTP ? (size_t)T * (size_t)di_fwd_mtp_width(&f->m->hp) : 0;
  if ((size_t)(end - in) < nh) {
    free(wl);
    return di_errorf(st, DI_ERR_INVALID, "tensor parallel: malformed step message from rank 0");
  }
  if (!grow((void **)&p->logits, &p->logits_cap, (size_t)n_out * f->m->hp.n_vocab + 1, sizeof(float)))
    rc = di_errorf(st, DI_ERR_NOMEM, "out of memory");
  else if (nh) /* the states as the leader's engine arranged them */
    rc = di_forward_mtp(f, p->pool, &b, (const float *)in, p->logits, NULL, st);
  else
    rc = di_forward(f, p->pool, &b, p->logits, st);
  free(wl);
  return rc;
}
