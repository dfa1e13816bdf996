/* A loaded model: hyperparameters from GGUF metadata or config.json, an
 * architecture descriptor, and bound weight tensors (zero-copy views into the
 * loaded file image). */
#ifndef DI_MODEL_MODEL_H
#define DI_MODEL_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "model/gguf.h"
#include "util/status.h"

typedef enum di_rope_type { DI_ROPE_NORM = 0, DI_ROPE_NEOX = 1 } di_rope_type;
typedef enum di_rope_scaling { DI_ROPE_SCALE_NONE = 0, DI_ROPE_SCALE_LINEAR, DI_ROPE_SCALE_YARN, DI_ROPE_SCALE_LLAMA3 } di_rope_scaling;
typedef enum di_act { DI_ACT_SILU = 0, DI_ACT_GELU_TANH = 1 } di_act;
/* A layer's attention: grouped-query (MHA/GQA/MQA over per-head K/V), or
 * multi-head latent attention (DeepSeek-V2/V3: one latent row per token). */
/* DeepSeek-V4's layers (attn_kind DI_ATTN_DSV4) carry their own kind in
 * di_hparams.v4.attn: sliding window only, window + CSA, window + HCA. */
typedef enum di_attn_kind { DI_ATTN_GQA = 0, DI_ATTN_MLA = 1, DI_ATTN_DSV4 = 2 } di_attn_kind;
typedef enum di_v4_attn { DI_V4_SWA = 0, DI_V4_CSA = 1, DI_V4_HCA = 2 } di_v4_attn;
/* Most layers a DeepSeek-V4 model may have (per-layer kinds live in di_hparams). */
#define DI_V4_MAX_LAYERS 256
/* A layer's feed-forward: one GLU, or routed experts (+ shared experts). */
typedef enum di_ffn_kind { DI_FFN_DENSE = 0, DI_FFN_MOE = 1 } di_ffn_kind;
typedef enum di_moe_score { DI_MOE_SOFTMAX = 0, DI_MOE_SIGMOID = 1, DI_MOE_SQRTSOFTPLUS = 2 } di_moe_score;
/* Expert selection: top-k of all (greedy), top-k within the topk_group best
 * groups by their best score (group_limited_greedy), or by the sum of their two
 * best bias-corrected scores (noaux_tc). */
/* Most routed experts a model may have (the router's per-token scratch). */
#define DI_MOE_MAX_EXPERTS 1024
typedef enum di_moe_topk { DI_MOE_GREEDY = 0, DI_MOE_GROUP_LIMITED = 1, DI_MOE_NOAUX_TC = 2 } di_moe_topk;

typedef struct di_hparams {
  char arch[32];         /* "llama", "qwen2", "qwen3", "mistral", "gemma3" */
  int n_vocab;
  int n_embd;
  int n_layer;
  int n_head;
  int n_head_kv;
  int head_dim;
  int n_ff;
  int n_ctx_train;
  float rms_eps;
  /* rope */
  di_rope_type rope_type;
  int rope_dim;          /* rotated dims per head (<= head_dim) */
  float rope_base;       /* global layers */
  float rope_base_local; /* sliding-window layers (gemma3); = rope_base otherwise */
  di_rope_scaling rope_scaling;
  float rope_factor;     /* linear / yarn / llama3 factor */
  float rope_low_freq_factor, rope_high_freq_factor; /* llama3 */
  int rope_orig_ctx;     /* yarn / llama3 original context */
  float rope_yarn_beta_fast, rope_yarn_beta_slow; /* yarn ramp ends in rotations; 0 = 32, 1 */
  float rope_attn_factor; /* yarn cos/sin scale; 0 = 0.1 ln(factor) + 1 */
  bool rope_yarn_no_truncate; /* yarn ramp ends not rounded to whole dims */
  bool rope_local_unscaled; /* sliding-window layers rotate without the scaling (gemma3) */
  /* MLA (attn_kind DI_ATTN_MLA; head_dim = qk_nope + qk_rope, rope_dim = qk_rope) */
  di_attn_kind attn_kind;
  int q_lora_rank;       /* 0 = direct q_proj */
  int kv_lora_rank, qk_nope_dim, v_head_dim;
  bool mla_kv_b_split;   /* GGUF: kv_b as attn_k_b + attn_v_b (llama.cpp's converter) */
  /* MoE (layers whose ffn kind is DI_FFN_MOE) */
  int n_expert, n_expert_used, n_expert_shared;
  int n_ff_exp, n_ff_shexp; /* routed / shared expert widths */
  int first_k_dense;     /* leading dense layers */
  int moe_layer_freq;    /* after those, every Nth layer is MoE */
  int n_group, topk_group;
  di_moe_score moe_score;
  di_moe_topk moe_topk;
  bool moe_norm_topk;
  float moe_scale;       /* routed_scaling_factor */
  /* attention */
  int sliding_window;    /* 0 = none */
  int swa_pattern;       /* gemma3: every Nth layer is global (N=6); 0 = all layers use sliding_window if set */
  float attn_scale;      /* softmax scale; 0 = 1/sqrt(head_dim) */
  float attn_softcap;    /* 0 = off */
  float final_softcap;   /* 0 = off */
  /* variants */
  bool qkv_bias;         /* qwen2 */
  bool qk_norm;          /* qwen3, gemma3 */
  bool post_norms;       /* gemma3: post-attention and post-ffn norms */
  bool embd_scale;       /* gemma3: embeddings * sqrt(n_embd) */
  bool norm_plus_one;    /* gemma: RMSNorm weight stored as w-1 in HF (GGUF already adds 1) */
  bool tied_output;      /* classifier is the token embedding */
  di_act act;
  int32_t bos_id, eos_id;
  int n_nextn;           /* multi-token-prediction layers stored after the main ones (DeepSeek-V3 MTP) */
  /* DeepSeek-V4 (attn_kind DI_ATTN_DSV4): per layer its attention (di_v4_attn)
   * and whether its MoE is hash-routed (tid2eid); hyper-connections;
   * compression rates; the Lightning Indexer; grouped output projection. The
   * window is v4.window, not sliding_window (which stays 0): the compressors
   * read further back, so the engine takes its window tables from
   * di_forward_v4_geometry (graph/dsv4.h), not from the generic SWA path. */
  struct {
    uint8_t attn[DI_V4_MAX_LAYERS];
    bool hash[DI_V4_MAX_LAYERS];
    int window, csa_rate, hca_rate;
    int hc_mult, hc_iters;
    float hc_eps;
    int o_groups, o_lora_rank;
    int idx_heads, idx_dim, idx_topk;
    float swiglu_limit;
    float rope_theta_main; /* sliding layers: plain RoPE; CSA/HCA: rope_base (compress_rope_theta) with the scaling */
    /* the KV plan holds the MTP block's window (layer n_layer, sliding only):
     * set by whoever runs the module (--spec mtp) before sizing the pool */
    bool mtp_kv;
  } v4;
} di_hparams;

/* Is layer il a sliding-window layer? */
bool di_hparams_layer_is_swa(const di_hparams *hp, int il);
/* Layer il's feed-forward kind (first_k_dense, moe_layer_freq from the file). */
di_ffn_kind di_hparams_layer_ffn(const di_hparams *hp, int il);

typedef struct di_tensor {
  di_dtype type;
  int64_t ne[2];       /* ne[0] = row length (input dim), ne[1] = rows */
  size_t row_bytes;
  const void *data;
  const char *name;
  bool packed;         /* data in its backend's own layout (CPU: di_cpu_pack), not GGUF rows */
  /* Tensor parallel (di_model_tp_slice): sliced, only rows [row0, row0 +
   * nrows) are held, data points at row0's (NULL when none). ne[1] stays the
   * matrix's full height, the column count its matmul outputs. */
  bool sliced;
  int64_t row0, nrows;
} di_tensor;

static inline int64_t di_tensor_rows(const di_tensor *t) { return t->sliced ? t->nrows : t->ne[1]; }

/* Tensor parallel: the output columns [*lo, *hi) of an N-column matmul that
 * rank `rank` of `size` computes (and holds the weight rows of): whole
 * 16-column tiles, as threads split them, the last rank the rest. */
static inline void di_tp_cols(int64_t N, int rank, int size, int64_t *lo, int64_t *hi) {
  const int64_t per = ((N + size - 1) / size + 15) / 16 * 16;
  *lo = per * rank < N ? per * rank : N;
  *hi = per * (rank + 1) < N ? per * (rank + 1) : N;
}

typedef struct di_layer_weights {
  di_attn_kind attn;
  di_ffn_kind ffn;
  di_v4_attn v4_attn; /* DI_ATTN_DSV4: the layer's kind (hp->v4.attn[il]) */
  bool v4_hash;       /* DI_ATTN_DSV4: MoE routed by tid2eid */
  di_tensor attn_norm, wq, wk, wv, wo, bq, bk, bv, q_norm, k_norm, attn_post_norm;
  /* MLA: wq (direct) or wq_a -> q_a_norm -> wq_b; wkv_a -> [latent | rope key] */
  di_tensor wq_a, q_a_norm, wq_b, wkv_a, kv_a_norm, wkv_b, wk_b, wv_b;
  di_tensor ffn_norm, w_gate, w_up, w_down, ffn_post_norm;
  /* MoE: router, selection bias, shared expert GLU, and the routed experts'
   * gate/up/down as [n_expert] views (each its own tensor in HF files, slices
   * of one 3-D tensor in GGUF) */
  di_tensor router, router_bias, sh_gate, sh_up, sh_down;
  di_tensor *exp_gate, *exp_up, *exp_down;
  /* MLA's kv_b_proj absorbed into the query and the output, per head
   * ([n_head] matrices the backend's prepare_weights makes): mla_k[h] = W_kᵀ
   * (kv_lora rows of qk_nope), mla_v[h] = W_v (v_head_dim rows of kv_lora) */
  di_tensor *mla_k, *mla_v;
  /* DeepSeek-V4: hyper-connection maps of the attention and FFN sites; the
   * single latent KV (wkv -> kv_norm, K = V); grouped output (wo_a per group,
   * wo_b); per-head sinks; the compressor (wkv/wgate/ape/norm) and the
   * indexer (its own compressor, wq_b, weights_proj); hash routing table. */
  di_tensor hc_attn_fn, hc_attn_base, hc_attn_scale, hc_ffn_fn, hc_ffn_base, hc_ffn_scale;
  di_tensor wkv, kv_norm, wo_a, wo_b, sinks;
  di_tensor cmp_wkv, cmp_wgate, cmp_ape, cmp_norm;
  di_tensor idx_wkv, idx_wgate, idx_ape, idx_norm, idx_wq_b, idx_wproj;
  di_tensor tid2eid;      /* [n_vocab][n_expert_used] expert ids (int32 after load) */
} di_layer_weights;

/* DeepSeek-V3's multi-token-prediction module (the first one): the embedding
 * of token t+1 and the main model's last hidden state at t, each normed
 * (enorm, hnorm), concatenated and projected (eh_proj), then a full decoder
 * block and a head (head_norm, head; head NULL = the main output) give the
 * token at t+2. It is not part of the main forward; --spec mtp drafts with it. */
typedef struct di_mtp_weights {
  di_layer_weights layer;
  di_tensor enorm, hnorm, eh_proj, head_norm, head;
  /* DeepSeek-V4: the block's own hyper head (hc_mult streams -> one before
   * head_norm); eh_proj is applied to every stream ([enorm(embedding);
   * hnorm(stream)], the checkpoint's e_proj and h_proj side by side). */
  di_tensor hc_head_fn, hc_head_base, hc_head_scale;
} di_mtp_weights;

typedef struct di_model {
  di_hparams hp;
  di_tensor tok_embd, output_norm, output;
  di_tensor rope_freqs;     /* optional per-pair frequency divisors (llama3 GGUF) */
  di_tensor hc_head_fn, hc_head_base, hc_head_scale; /* DeepSeek-V4: the hyper head before the final norm */
  di_layer_weights *layers;
  di_mtp_weights *mtp;      /* NULL: none loaded */
  char *path;
  di_gguf *gguf;            /* when loaded from GGUF */
  struct di_st_model *st;   /* when loaded from safetensors */
  void *owned;              /* converted tensors (safetensors BF16 etc.) */
  size_t weight_bytes;
  /* the part of weight_bytes this process holds (tensor parallel: its rank's
   * part and the replicated rest, di_model_tp_slice), and that rest */
  size_t held_bytes, replicated_bytes;
  int tp_rank, tp_size; /* the slice held (di_model_tp_slice); tp_size 0: whole */
  uint64_t n_params;
  const void **bound;       /* while loading: the file tensors bound (di_model_note_bound) */
  size_t n_bound, cap_bound;
  /* the backend whose prepare_weights readied the weights (backend/backend.h);
   * NULL: as loaded, not yet runnable */
  const struct di_backend *backend;
} di_model;

typedef struct di_model_opts {
  bool use_mmap; /* default false: read into (huge-page) memory, steadier here */
  /* tp_size > 1: rank tp_rank of a tensor-parallel job keeps only its part of
   * the split weights (di_model_tp_slice); the file is then mapped, not read,
   * so the other ranks' rows are never brought into this process */
  int tp_rank, tp_size;
} di_model_opts;

/* path: a .gguf file (or first split part) or a Hugging Face directory. The
 * weights stay in file layout: di_backend_load_model (backend/backend.h) also
 * readies them for a backend. */
di_code di_model_load(const char *path, const di_model_opts *o, di_model **out, di_status *st);
void di_model_free(di_model *m);

/* Expert parallel: the routed experts [*e0, *e1) of E that rank `rank` of `size` runs and holds. */
static inline void di_tp_experts(int E, int rank, int size, int *e0, int *e1) {
  *e0 = (int)((int64_t)E * rank / size);
  *e1 = (int)((int64_t)E * (rank + 1) / size);
}

/* Tensor parallel attention (GQA, every rank at least one KV head): rank
 * `rank` of `size` owns KV heads [*g0, *g1) of G (the first ranks one more
 * when G does not divide, so rank 0's share, which sizes the KV pool, is
 * the largest) and their query heads. Otherwise attention is replicated. */
static inline bool di_tp_heads_split(const di_hparams *hp, int size) {
  return size > 1 && hp->attn_kind == DI_ATTN_GQA && hp->n_head_kv >= size;
}
/* GQA with a single KV head (MQA; Gemma 3 270M) split by query heads, every
 * rank at least one: K/V are computed and cached whole on every rank (one
 * head, small), each rank's query heads attend over them. */
static inline bool di_tp_qheads_split(const di_hparams *hp, int size) {
  return size > 1 && hp->attn_kind == DI_ATTN_GQA && hp->n_head_kv == 1 && hp->n_head >= size;
}
/* MLA (DeepSeek-V2/V3) split by query heads, every rank at least one: each
 * head's absorbed query, attention over the shared latent rows and value
 * projection are its own; the latent cache, read by every head, stays whole. */
static inline bool di_tp_mla_heads_split(const di_hparams *hp, int size) {
  return size > 1 && hp->attn_kind == DI_ATTN_MLA && hp->n_head >= size;
}
static inline void di_tp_heads(int G, int rank, int size, int *g0, int *g1) {
  const int q = G / size, r = G % size;
  *g0 = rank * q + (rank < r ? rank : r);
  *g1 = *g0 + q + (rank < r);
}
/* GQA with more than one KV head but fewer than ranks: each KV head goes to
 * a run of ranks (di_tp_heads of the ranks over the KV heads), which split
 * its query heads, every rank at least one; each rank of the run computes
 * and caches that one KV head (replicated across the run, not across all). */
static inline bool di_tp_kvrep_split(const di_hparams *hp, int size) {
  return size > 1 && hp->attn_kind == DI_ATTN_GQA && hp->n_head_kv > 1 && hp->n_head_kv < size &&
         hp->n_head % hp->n_head_kv == 0 && hp->n_head / hp->n_head_kv >= (size + hp->n_head_kv - 1) / hp->n_head_kv;
}
/* GQA attention split by heads in any of the three ways above: rank's KV
 * heads [*k0, *k1) (those it computes and caches) and query heads [*q0, *q1),
 * in rank order; false (all heads) where attention is replicated. */
static inline bool di_tp_gqa_heads(const di_hparams *hp, int rank, int size, int *k0, int *k1, int *q0, int *q1) {
  const int rep = hp->n_head_kv > 0 ? hp->n_head / hp->n_head_kv : 1;
  if (di_tp_heads_split(hp, size)) {
    di_tp_heads(hp->n_head_kv, rank, size, k0, k1);
    *q0 = *k0 * rep, *q1 = *k1 * rep;
    return true;
  }
  if (di_tp_qheads_split(hp, size)) {
    *k0 = 0, *k1 = 1;
    di_tp_heads(hp->n_head, rank, size, q0, q1);
    return true;
  }
  for (int g = 0; di_tp_kvrep_split(hp, size) && g < hp->n_head_kv; g++) {
    int r0, r1;
    di_tp_heads(size, g, hp->n_head_kv, &r0, &r1);
    if (rank < r0 || rank >= r1) continue;
    di_tp_heads(rep, rank - r0, r1 - r0, q0, q1);
    *k0 = g, *k1 = g + 1, *q0 += g * rep, *q1 += g * rep;
    return true;
  }
  *k0 = 0, *k1 = hp->n_head_kv, *q0 = 0, *q1 = hp->n_head;
  return false;
}
static inline bool di_tp_gqa_split(const di_hparams *hp, int size) {
  return di_tp_heads_split(hp, size) || di_tp_qheads_split(hp, size) || di_tp_kvrep_split(hp, size);
}
/* Each rank caches only its own KV heads (its pool rows are narrower). */
static inline bool di_tp_kv_split(const di_hparams *hp, int size) {
  return di_tp_heads_split(hp, size) || di_tp_kvrep_split(hp, size);
}

/* Tensor parallel: the weight bytes rank `rank` of `size` holds after
 * di_model_tp_slice (resident), the part every rank holds (replicated: norms,
 * embeddings, a tied classifier, layers not split) and the whole (one rank). */
typedef struct di_tp_weights {
  size_t resident, replicated, total;
} di_tp_weights;
di_tp_weights di_model_tp_plan(di_model *m, int rank, int size);
/* Cuts m's split weights down to rank's rows (before the backend prepares
 * them): every matmul the forward column-splits keeps the rows di_tp_cols
 * gives the rank; routed experts outside the rank's expert range are dropped. */
void di_model_tp_slice(di_model *m, int rank, int size);

#endif
