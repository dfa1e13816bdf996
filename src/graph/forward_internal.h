/* What the op program's files share: the forward context (scratch), the
 * parallel matmul, and per-token stages. forward.c runs the layer sequence;
 * attn_mla.c and ffn_moe.c are the MLA attention and MoE feed-forward kinds. */
#ifndef DI_GRAPH_FORWARD_INTERNAL_H
#define DI_GRAPH_FORWARD_INTERNAL_H

#include "backend/backend.h"
#include "graph/forward.h"

/* Largest thread count, and tokens per thread, for which a batch is split. */
#define SPLIT_MAX_PARTS 8
#define SPLIT_MAX_TOKENS 64

struct di_forward_ctx {
  const di_model *m;
  const di_backend *be; /* m->backend: every op goes through it */
  int max_tokens;
  di_threadpool *tp;
  float *x, *xn, *q, *k, *v, *att, *gate, *up, *tmp;
  /* MLA: q_a rows, kv_a rows, absorbed queries and latent outputs */
  float *qa, *kva, *qm, *attm;
  /* MLA's per-head absorbed matmuls: per thread, a head's inputs gathered
   * ([T][qk_nope or kv_lora]) and prepared (attn_mla.c) */
  float *mla_x;
  uint8_t *mla_xq;
  size_t mla_x_n, mla_xq_bytes; /* per thread */
  size_t mla_xq_total;
  /* MoE: router logits, choices, gathered rows, per-token accumulators */
  float *rlogit, *selw, *xg, *eo, *acc;
  float *ey; /* [T * n_expert_used][n_embd]: the experts' output rows in expert order */
  /* MoE batches of up to DI_MOE_GROUP_TOKENS tokens (ffn_moe.c): every chosen
   * expert's rows prepared at once (moe_xq) and their GLU rows (moe_g, moe_u) */
  uint8_t *moe_xq;
  size_t moe_xq_bytes;
  float *moe_g, *moe_u;
  int32_t *sel, *bucket;
  float *bucket_w;
  float *rope_g, *rope_l; /* [T][rope_dim] (cos, sin) pairs per token */
  void *xq;               /* prepared activations */
  size_t xq_bytes;
  /* xq already holds xq_src's rows in activation format xq_fmt (a row stage
   * prepared them, see prep_rows), so the next matmul of x = xq_src skips its
   * own preparation pass and the sync after it */
  const float *xq_src;
  int xq_fmt;
  di_attn_sched *attn;
  const float *freq_factors;
  /* Batch split (see split_plan): one single-threaded context per thread. */
  di_forward_ctx *part[SPLIT_MAX_PARTS];
  int n_parts;
  bool *split_want; /* [max_tokens] want_logits when the batch leaves it NULL */
  int split_mode;   /* DI_FORWARD_SPLIT: -1 never, 1 whenever possible, 0 by model size */
  float *cat;        /* MTP: [T][2 * n_embd] normed embedding beside normed hidden state */
  float *hidden_out; /* di_forward_capture_hidden: where the last layer's output rows go (NULL: nowhere) */
  struct di_v4_scratch *v4; /* DeepSeek-V4's own scratch (forward_dsv4.c) */
  struct di_tp *tpar;       /* tensor parallel across ranks (forward_tp.c); NULL: this rank alone */
  bool tp_local;            /* matmuls of this rank's own (experts, attention heads), not split */
  bool tp_keep;             /* split matmuls leave each rank its own columns, ungathered (di_fwd_tp_gather) */
  bool tp_leader_only;      /* split matmuls gather on rank 0 only (the classifier: no follower reads logits) */
};

#define MM_MAX_JOBS 8
/* Largest batch whose routed experts run as one parallel task each for
 * gate/up and down (decode, small batches: one sync instead of one per expert). */
#define DI_MOE_GROUP_TOKENS 64

/* Several matrices that read the same input (Q/K/V, gate/up) run as one
 * parallel task over their concatenated output columns: one sync instead of
 * three, and no thread idles on a small matrix. [lo[j], hi[j]): the columns
 * of matrix j this rank computes (all of them without tensor parallel; with
 * it, di_tp_cols's, the rows the rank holds). Matrices with inputs of their
 * own set xqs[j] (prepared rows; NULL: xq), and a whole matrix may write
 * into a wider output (ldy[j] floats a row; 0: the matrix's rows). */
typedef struct mm_task {
  const di_backend *be;
  const di_tensor *w[MM_MAX_JOBS];
  float *y[MM_MAX_JOBS];
  int n;
  const float *x;
  const void *xq;
  int64_t M;
  int64_t lo[MM_MAX_JOBS], hi[MM_MAX_JOBS];
  const void *xqs[MM_MAX_JOBS];
  int64_t ldy[MM_MAX_JOBS];
  bool compact; /* this rank's own matmul (f->tp_local): a sliced matrix's rows into y as [M][rows held] */
} mm_task;

/* The threadpool task of a matmul (parts split [lo, hi) by 16 columns). */
void di_fwd_mm_run(void *p, int ith, int nth);
/* t over the pool, in as many parts as its size warrants. */
void di_fwd_mm(di_threadpool *tp, mm_task *t);
/* Tensor parallel: this rank's columns of t, then every rank's gathered into t->y. */
void di_fwd_tp_matmul(di_forward_ctx *f, mm_task *t);
/* Leader: hands the step to the followers (hidden: an MTP step's input states, NULL for the model's). */
di_code di_fwd_tp_step(di_forward_ctx *f, di_kv_pool *kv, const di_batch *b, const float *hidden, di_status *st);
/* The width of the MTP module's input states (DeepSeek-V4: its hc_mult streams). */
int64_t di_fwd_mtp_width(const di_hparams *hp);
/* The first exchange error of the step just run (then cleared). */
di_code di_fwd_tp_result(di_forward_ctx *f, di_status *st);
void di_fwd_tp_free(di_forward_ctx *f);
/* The classifier under b->split: each rank's columns of the n_out logits
 * rows (computed under f->tp_keep) soft-capped (softcap > 0) and reduced
 * as sp asks; rank 0 merges every rank's into sp->out. */
/* The classifier over the n_out normed rows in f->xn: logits rows, or
 * under tensor parallel rank 0's rows (whole), or b->split's reductions. */
void di_fwd_classifier(di_forward_ctx *f, const di_batch *b, float *logits, int n_out);
void di_fwd_tp_split_logits(di_forward_ctx *f, const di_logits_split *sp, float *logits, int n_out, float softcap);
/* All-gathers the columns of y ([M][w's rows]) that each rank computed of w
 * under f->tp_keep. next: the matmul that reads y next, whose prepared
 * activation (f->xq) the gather then fills instead of y where it can (int8
 * blocks: fewer bytes); NULL: y in f32. */
void di_fwd_tp_gather(di_forward_ctx *f, const di_tensor *w, float *y, int64_t M, const di_tensor *next);
/* Attention split by heads: where this rank's heads' outputs go ([T][its
 * heads' width]); n: the floats of every rank's (the gather's size); NULL
 * after an error. */
float *di_fwd_tp_heads_buf(di_forward_ctx *f, size_t n);
/* Every rank's query heads' outputs (from the buffer above, w values per
 * head) into att ([T][n_head * w]), the ranks' heads as di_tp_gqa_heads
 * (GQA) or di_tp_heads (MLA) splits them; next as for di_fwd_tp_gather. */
void di_fwd_tp_gather_heads(di_forward_ctx *f, float *att, int T, int64_t w, const di_tensor *next);
/* Expert parallel: the experts [*e0, *e1) of E this rank computes (all without tensor parallel). */
void di_fwd_ep_range(const di_forward_ctx *f, int E, int *e0, int *e1);
/* y holds rows in expert order, expert e's rows at [cnt[e], cnt[e+1]) of D
 * floats; each rank filled its experts' rows: all-gathers the rest in place. */
void di_fwd_ep_gather(di_forward_ctx *f, float *y, const int *cnt, int E, int D);

typedef struct kv_loc {
  int table, layer;
} kv_loc;

typedef struct stage_ctx {
  di_forward_ctx *f;
  di_kv_pool *kv;
  const di_batch *b;
  const di_layer_weights *L;
  kv_loc loc;
  const float *rope;
  void (*fn)(struct stage_ctx *c, int t);
  void (*rows)(struct stage_ctx *c, int t0, int t1); /* par_rows: a thread's tokens at once */
  const di_layer_weights *next; /* st_ffn_out: the next layer, whose input norm it runs */
  /* par_rows_prep: the matmul after the stage (prep_w, on prep_x), whose
   * activation rows the stage prepares as it finishes them */
  const di_tensor *prep_w;
  const float *prep_x;
  /* tensor parallel attention split by heads: the rank's heads (n_head,
   * n_head_kv) and its first KV head; NULL: the model's */
  const di_hparams *ahp;
  int head0;
  int qhead0; /* split by heads (di_tp_gqa_heads): the rank's first query head (head0: its first KV head) */
  int64_t c0, c1; /* st_glu: the rank's columns of the FFN (c1 <= c0: all) */
} stage_ctx;

void di_fwd_matmul_n(di_forward_ctx *f, const di_tensor **ws, float **ys, int n, const float *x, int64_t M);
void di_fwd_matmul(di_forward_ctx *f, const di_tensor *w, const float *x, int64_t M, float *y);
void di_fwd_par_tokens(stage_ctx *c, void (*fn)(stage_ctx *, int));

di_code di_fwd_check_batch(const di_forward_ctx *f, const di_kv_pool *kv, const di_batch *b, di_status *st);
/* The batch's token embeddings into x ([T][n_embd]). */
void di_fwd_embed(di_forward_ctx *f, const di_batch *b, float *x);
/* RoPE cos/sin rows of the batch's positions (f->rope_g, f->rope_l). */
void di_fwd_rope_tables(di_forward_ctx *f, const di_batch *b);
/* One decoder layer over f->x in place; its K/V at loc. first: also run its
 * input norm (otherwise the previous layer's last stage did); next: the layer
 * whose input norm this one's last stage runs (NULL: none). */
di_code di_fwd_layer(di_forward_ctx *f, di_kv_pool *kv, const di_batch *b, const di_layer_weights *L, kv_loc loc,
                     bool swa, bool first, const di_layer_weights *next, di_status *st);
/* MLA attention of layer sc->L: f->xn -> f->att ([T][n_head * v_head_dim]). */
di_code di_fwd_attn_mla(stage_ctx *sc, di_status *st);
/* MoE feed-forward of layer sc->L: f->xn -> f->tmp. */
void di_fwd_ffn_moe(stage_ctx *sc);
/* Its experts, once f->sel / f->selw hold each token's choices: the chosen
 * experts' and the shared experts' GLUs (clip > 0: DeepSeek-V4's clipped
 * SiLU, else hp.act), summed into f->tmp. */
void di_fwd_moe_experts(stage_ctx *sc, float clip);

/* DeepSeek-V4 (forward_dsv4.c: the layer sequence with hyper-connections;
 * attn_dsv4.c: sliding / CSA / HCA attention; ffn_dsv4.c: hash and routed MoE). */
di_code di_fwd_v4_alloc(di_forward_ctx *f);
void di_fwd_v4_free(di_forward_ctx *f);
void di_fwd_v4_kv_spec(const di_model *m, di_kv_spec *s);
di_code di_fwd_v4(di_forward_ctx *f, di_kv_pool *kv, const di_batch *b, float *logits, di_status *st);
di_code di_fwd_v4_mtp(di_forward_ctx *f, di_kv_pool *kv, const di_batch *b, const float *hidden, float *logits,
                      float *hidden_out, di_status *st);
/* forward_mtp.c: out[t] = eh_proj [enorm(e[t]); hnorm(h[t])] (h's rows h_stride floats apart) */
void di_fwd_mtp_project(di_forward_ctx *f, const float *e, const float *h, size_t h_stride, int T, float *out);

#endif
