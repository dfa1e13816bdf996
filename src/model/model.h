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
} di_hparams;

/* Is layer il a sliding-window layer? */
bool di_hparams_layer_is_swa(const di_hparams *hp, int il);

typedef struct di_tensor {
  di_dtype type;
  int64_t ne[2];       /* ne[0] = row length (input dim), ne[1] = rows */
  size_t row_bytes;
  const void *data;
  const char *name;
  bool packed;         /* data in the CPU backend's packed layout (di_cpu_pack), not GGUF rows */
} di_tensor;

typedef struct di_layer_weights {
  di_tensor attn_norm, wq, wk, wv, wo, bq, bk, bv, q_norm, k_norm, attn_post_norm;
  di_tensor ffn_norm, w_gate, w_up, w_down, ffn_post_norm;
} di_layer_weights;

typedef struct di_model {
  di_hparams hp;
  di_tensor tok_embd, output_norm, output;
  di_tensor rope_freqs;     /* optional per-pair frequency divisors (llama3 GGUF) */
  di_layer_weights *layers;
  char *path;
  di_gguf *gguf;            /* when loaded from GGUF */
  struct di_st_model *st;   /* when loaded from safetensors */
  void *owned;              /* converted tensors (safetensors BF16 etc.) */
  size_t weight_bytes;
  uint64_t n_params;
} di_model;

typedef struct di_model_opts {
  bool use_mmap; /* default false: read into (huge-page) memory, steadier here */
} di_model_opts;

/* path: a .gguf file (or first split part) or a Hugging Face directory. */
di_code di_model_load(const char *path, const di_model_opts *o, di_model **out, di_status *st);
void di_model_free(di_model *m);

#endif
