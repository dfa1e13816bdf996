/* The one table of per-layer tensors: for each, its GGUF name, its Hugging
 * Face name, its shape as a rule over the hyperparameters, and which layers
 * have it. model.c (GGUF), hf.c (safetensors) and the forward's weight checks
 * all read this table, so a new architecture's tensors are rows here, not a
 * third copy of names in each loader. */
#ifndef DI_MODEL_TENSORS_H
#define DI_MODEL_TENSORS_H

#include <stddef.h>

#include "model/model.h"

/* Shape rules: dimensions computed from di_hparams. */
typedef enum di_dim {
  DIM_ONE, DIM_EMBD, DIM_Q, DIM_KV, DIM_HEAD, DIM_FF,
  DIM_QLORA,   /* q_lora_rank */
  DIM_QMLA,    /* n_head * (qk_nope + qk_rope) */
  DIM_KVA,     /* kv_lora_rank + qk_rope */
  DIM_KVLORA,  /* kv_lora_rank */
  DIM_KVB,     /* n_head * (qk_nope + v_head_dim) */
  DIM_VOUT,    /* n_head * v_head_dim */
  DIM_NEXP, DIM_FF_EXP, DIM_FF_SHEXP,
  DIM_NOPE, DIM_VHEAD, DIM_HEADS,
  /* DeepSeek-V4 */
  DIM_VOCAB, DIM_THREE, DIM_EXP_USED,
  DIM_V4_MIX,     /* (2 + hc_mult) * hc_mult: pre, post, comb */
  DIM_V4_HCD,     /* hc_mult * hidden */
  DIM_V4_OA_IN,   /* n_head * head_dim / o_groups */
  DIM_V4_OA,      /* o_groups * o_lora_rank */
  DIM_V4_2HEAD,   /* 2 * head_dim: CSA's two overlapping series */
  DIM_V4_CSA_RATE, DIM_V4_HCA_RATE,
  DIM_V4_IDX, DIM_V4_2IDX, DIM_V4_IDXQ, DIM_V4_IDXH,
} di_dim;

/* Which layers have a tensor: all of `need`'s bits must hold for the layer. */
enum {
  DI_T_GQA = 1 << 0, DI_T_MLA = 1 << 1, DI_T_QLORA = 1 << 2, DI_T_NOQLORA = 1 << 3,
  DI_T_DENSE = 1 << 4, DI_T_MOE = 1 << 5, DI_T_BIAS = 1 << 6, DI_T_QKNORM = 1 << 7,
  DI_T_POST = 1 << 8, DI_T_NOPOST = 1 << 9, DI_T_SELBIAS = 1 << 10, DI_T_SHARED = 1 << 11,
  DI_T_KVB = 1 << 12,      /* MLA kv_b_proj as one matrix (HF, older GGUFs) */
  DI_T_KVB_SPLIT = 1 << 13, /* as llama.cpp's converter splits it: attn_k_b (transposed) + attn_v_b */
  DI_T_STD = 1 << 14,       /* every architecture but DeepSeek-V4 (which names its norms apart) */
  DI_T_V4 = 1 << 15, DI_T_V4CSA = 1 << 16, DI_T_V4HCA = 1 << 17, DI_T_V4HASH = 1 << 18, DI_T_V4ROUTED = 1 << 19,
};

typedef enum di_wkind {
  DI_W_MAT,    /* a matmul weight (packable, checked for a kernel) */
  DI_W_NORM,   /* RMSNorm weight: f32, plus the architecture's HF offset */
  DI_W_BIAS,   /* bias / selection bias: f32 */
  DI_W_ABSORB, /* MLA kv_b: per-head matrices for absorption (the backend's prepare_weights) */
  DI_W_INDEX,  /* integer table (V4's tid2eid): int32 after load, range-checked */
} di_wkind;

typedef struct di_tensor_desc {
  size_t off;        /* offsetof(di_layer_weights, the tensor); experts: of the pointer */
  const char *gguf;  /* "blk.N." + this; NULL: not a GGUF tensor */
  const char *hf;    /* "<prefix>.layers.N." + this (experts: with %d for the expert); NULL: not in HF */
  di_dim ne0, ne1;   /* row length, rows */
  unsigned need;
  di_wkind kind;
  bool experts;      /* one per routed expert: HF names each, GGUF stacks them in a 3-D tensor */
  di_dim sub;        /* not DIM_ONE: a 3-D GGUF tensor of this many [ne0, ne1] matrices (per head) */
} di_tensor_desc;

extern const di_tensor_desc di_layer_tensors[];
extern const size_t di_n_layer_tensors;

int64_t di_dim_value(const di_hparams *hp, di_dim d);
/* The DI_T_* bits that hold for layer il. */
unsigned di_layer_bits(const di_hparams *hp, const di_layer_weights *L);

/* Binds one tensor: name, expected [ne0, ne1]; n_sub > 0: a 3-D tensor of
 * n_sub such matrices (GGUF experts), bound whole into t. */
typedef di_code (*di_bind_fn)(di_model *m, di_tensor *t, const char *name, int64_t ne0, int64_t ne1, int64_t n_sub,
                              bool required, di_status *st);
/* Binds every table tensor of every layer (m->layers allocated here):
 * hf_prefix NULL = GGUF names, else HF names under it; norm_offset is added to
 * HF norm weights (Gemma). */
di_code di_model_bind_layers(di_model *m, const char *hf_prefix, di_bind_fn bind, float norm_offset, di_status *st);
/* Binds the first MTP module (hp.n_nextn > 0) as layer n_layer's table
 * tensors plus its own: HF "<prefix>.layers.N.{enorm,hnorm,eh_proj,
 * shared_head.norm,shared_head.head}", GGUF "blk.N.nextn.{enorm,hnorm,eh_proj,
 * shared_head_norm,shared_head_head}" (llama.cpp's names); the head is optional. */
di_code di_model_bind_mtp(di_model *m, const char *hf_prefix, di_bind_fn bind, float norm_offset, di_status *st);
/* Every tensor in the file must be bound or belong to a part the forward
 * does not run (MTP layers past the main stack, rotary tables it computes,
 * a multimodal model's vision tower): a weight skipped without a word would
 * change the output silently. The binders note each bound tensor's data
 * (di_model_note_bound); di_model_check_unused then names the first file
 * tensor nobody took and frees the notes. */
di_code di_model_note_bound(di_model *m, const void *data, di_status *st);
di_code di_model_check_unused(di_model *m, size_t n, const char *(*name_at)(const void *file, size_t i),
                              const void *(*data_at)(const void *file, size_t i), const void *file, di_status *st);
/* Calls fn for every matmul weight of layer L (routed experts included). */
void di_layer_each_matrix(const di_hparams *hp, di_layer_weights *L, void (*fn)(di_tensor *t, void *u), void *u);

#endif
