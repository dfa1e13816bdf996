#include "model/arch.h"

#include <string.h>

static const di_arch_desc archs[] = {
    {.name = "llama", .hf_types = {"llama"}, .gguf_rope = DI_ROPE_NORM, .act = DI_ACT_SILU},
    {.name = "mistral", .hf_types = {"mistral"}, .gguf_rope = DI_ROPE_NORM, .act = DI_ACT_SILU},
    {.name = "qwen2", .hf_types = {"qwen2"}, .gguf_rope = DI_ROPE_NEOX, .qkv_bias = true, .act = DI_ACT_SILU},
    {.name = "qwen3", .hf_types = {"qwen3"}, .gguf_rope = DI_ROPE_NEOX, .qk_norm = true, .act = DI_ACT_SILU},
    {.name = "gemma3",
     .hf_types = {"gemma3_text", "gemma3"},
     .gguf_rope = DI_ROPE_NEOX,
     .qk_norm = true,
     .post_norms = true,
     .embd_scale = true,
     .act = DI_ACT_GELU_TANH,
     .swa_pattern = 6,
     .rope_base_local = 10000.0f,
     .norm_offset_hf = 1.0f,
     .rope_theta_hf = 1e6f,
     .tied_default_hf = true},
    /* DeepSeek-V2/V3: MLA, MoE after first_k_dense_replace dense layers
     * (model.c / hf_deepseek.c read the MLA and MoE sizes) */
    {.name = "deepseek2",
     .hf_types = {"deepseek_v3", "deepseek_v2"},
     .gguf_rope = DI_ROPE_NORM,
     .act = DI_ACT_SILU,
     .attn = DI_ATTN_MLA,
     .hf_rope_interleaved = true},
    /* DeepSeek-V4: hybrid sliding-window / compressed attention, hyper-connections,
     * hash + routed MoE (hf_config.c read_v4 reads its keys; graph/forward_dsv4.c) */
    {.name = "deepseek4",
     .hf_types = {"deepseek_v4"},
     .gguf_rope = DI_ROPE_NORM,
     .act = DI_ACT_SILU,
     .attn = DI_ATTN_DSV4,
     .hf_rope_interleaved = true},
};

const di_arch_desc *di_arch_find(const char *gguf_name) {
  for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
    if (!strcmp(archs[i].name, gguf_name)) return &archs[i];
  return NULL;
}

const di_arch_desc *di_arch_find_hf(const char *model_type) {
  for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
    for (int j = 0; j < 4 && archs[i].hf_types[j]; j++)
      if (!strcmp(archs[i].hf_types[j], model_type)) return &archs[i];
  return NULL;
}

void di_arch_apply(const di_arch_desc *a, di_hparams *hp) {
  strncpy(hp->arch, a->name, sizeof hp->arch - 1);
  hp->qkv_bias = a->qkv_bias;
  hp->qk_norm = a->qk_norm;
  hp->post_norms = a->post_norms;
  hp->embd_scale = a->embd_scale;
  hp->act = a->act;
  hp->attn_kind = a->attn;
  if (!hp->swa_pattern) hp->swa_pattern = a->swa_pattern;
  if (a->rope_base_local > 0 && hp->rope_base_local == 0) hp->rope_base_local = a->rope_base_local;
}

bool di_hparams_layer_is_swa(const di_hparams *hp, int il) {
  if (hp->sliding_window <= 0) return false;
  if (hp->swa_pattern <= 0) return true;
  return (il + 1) % hp->swa_pattern != 0;
}

di_ffn_kind di_hparams_layer_ffn(const di_hparams *hp, int il) {
  if (hp->n_expert <= 0 || il < hp->first_k_dense) return DI_FFN_DENSE;
  int freq = hp->moe_layer_freq > 0 ? hp->moe_layer_freq : 1;
  return il % freq == 0 ? DI_FFN_MOE : DI_FFN_DENSE; /* as transformers' DeepseekV3DecoderLayer */
}
