/* Architecture descriptors: what differs between model families is data in
 * this table, read by one loader and one op program. */
#ifndef DI_MODEL_ARCH_H
#define DI_MODEL_ARCH_H

#include "model/model.h"

typedef struct di_arch_desc {
  const char *name;           /* GGUF general.architecture */
  const char *hf_types[4];    /* config.json model_type values */
  di_rope_type gguf_rope;     /* Q/K row layout in GGUF files (HF files are always NEOX) */
  bool qkv_bias;
  bool qk_norm;
  bool post_norms;
  bool embd_scale;
  di_act act;
  int swa_pattern;            /* every Nth layer global, others sliding (0 = uniform) */
  float rope_base_local;      /* base for sliding layers; 0 = same as global */
  float norm_offset_hf;       /* added to RMSNorm weights read from HF files (gemma: 1) */
  float rope_theta_hf;        /* transformers' default rope_theta; 0 = 10000 */
  bool tied_default_hf;       /* transformers' default for tie_word_embeddings, which it omits when equal */
  di_attn_kind attn;          /* every layer's attention kind */
  bool hf_rope_interleaved;   /* HF weights rotate adjacent pairs (DeepSeek's rope sub-head) */
} di_arch_desc;

const di_arch_desc *di_arch_find(const char *gguf_name);
const di_arch_desc *di_arch_find_hf(const char *model_type);
/* Applies the descriptor's fixed facts to hp. */
void di_arch_apply(const di_arch_desc *a, di_hparams *hp);

#endif
