#include "model/tensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/hf.h"

#define W(f) offsetof(di_layer_weights, f)

/* Gemma names its four HF norms differently: its post_attention_layernorm is
 * the attention block's post-norm and pre_feedforward_layernorm the FFN's
 * input norm; GGUF names are the same for every architecture. */
const di_tensor_desc di_layer_tensors[] = {
    {W(attn_norm), "attn_norm.weight", "input_layernorm.weight", DIM_EMBD, DIM_ONE, DI_T_STD, DI_W_NORM, false, DIM_ONE},
    /* grouped-query attention */
    {W(wq), "attn_q.weight", "self_attn.q_proj.weight", DIM_EMBD, DIM_Q, DI_T_GQA, DI_W_MAT, false, DIM_ONE},
    {W(wk), "attn_k.weight", "self_attn.k_proj.weight", DIM_EMBD, DIM_KV, DI_T_GQA, DI_W_MAT, false, DIM_ONE},
    {W(wv), "attn_v.weight", "self_attn.v_proj.weight", DIM_EMBD, DIM_KV, DI_T_GQA, DI_W_MAT, false, DIM_ONE},
    {W(wo), "attn_output.weight", "self_attn.o_proj.weight", DIM_Q, DIM_EMBD, DI_T_GQA, DI_W_MAT, false, DIM_ONE},
    {W(bq), "attn_q.bias", "self_attn.q_proj.bias", DIM_Q, DIM_ONE, DI_T_GQA | DI_T_BIAS, DI_W_BIAS, false, DIM_ONE},
    {W(bk), "attn_k.bias", "self_attn.k_proj.bias", DIM_KV, DIM_ONE, DI_T_GQA | DI_T_BIAS, DI_W_BIAS, false, DIM_ONE},
    {W(bv), "attn_v.bias", "self_attn.v_proj.bias", DIM_KV, DIM_ONE, DI_T_GQA | DI_T_BIAS, DI_W_BIAS, false, DIM_ONE},
    {W(q_norm), "attn_q_norm.weight", "self_attn.q_norm.weight", DIM_HEAD, DIM_ONE, DI_T_QKNORM, DI_W_NORM, false, DIM_ONE},
    {W(k_norm), "attn_k_norm.weight", "self_attn.k_norm.weight", DIM_HEAD, DIM_ONE, DI_T_QKNORM, DI_W_NORM, false, DIM_ONE},
    /* multi-head latent attention */
    {W(wq), "attn_q.weight", "self_attn.q_proj.weight", DIM_EMBD, DIM_QMLA, DI_T_MLA | DI_T_NOQLORA, DI_W_MAT, false, DIM_ONE},
    {W(wq_a), "attn_q_a.weight", "self_attn.q_a_proj.weight", DIM_EMBD, DIM_QLORA, DI_T_MLA | DI_T_QLORA, DI_W_MAT, false, DIM_ONE},
    {W(q_a_norm), "attn_q_a_norm.weight", "self_attn.q_a_layernorm.weight", DIM_QLORA, DIM_ONE, DI_T_MLA | DI_T_QLORA,
     DI_W_NORM, false, DIM_ONE},
    {W(wq_b), "attn_q_b.weight", "self_attn.q_b_proj.weight", DIM_QLORA, DIM_QMLA, DI_T_MLA | DI_T_QLORA, DI_W_MAT, false, DIM_ONE},
    {W(wkv_a), "attn_kv_a_mqa.weight", "self_attn.kv_a_proj_with_mqa.weight", DIM_EMBD, DIM_KVA, DI_T_MLA, DI_W_MAT,
     false, DIM_ONE},
    {W(kv_a_norm), "attn_kv_a_norm.weight", "self_attn.kv_a_layernorm.weight", DIM_KVLORA, DIM_ONE, DI_T_MLA,
     DI_W_NORM, false, DIM_ONE},
    {W(wkv_b), "attn_kv_b.weight", "self_attn.kv_b_proj.weight", DIM_KVLORA, DIM_KVB, DI_T_MLA | DI_T_KVB,
     DI_W_ABSORB, false, DIM_ONE},
    {W(wk_b), "attn_k_b.weight", NULL, DIM_NOPE, DIM_KVLORA, DI_T_MLA | DI_T_KVB_SPLIT, DI_W_ABSORB, false, DIM_HEADS},
    {W(wv_b), "attn_v_b.weight", NULL, DIM_KVLORA, DIM_VHEAD, DI_T_MLA | DI_T_KVB_SPLIT, DI_W_ABSORB, false, DIM_HEADS},
    {W(wo), "attn_output.weight", "self_attn.o_proj.weight", DIM_VOUT, DIM_EMBD, DI_T_MLA, DI_W_MAT, false, DIM_ONE},
    /* norms around the blocks */
    {W(attn_post_norm), "post_attention_norm.weight", "post_attention_layernorm.weight", DIM_EMBD, DIM_ONE, DI_T_POST,
     DI_W_NORM, false, DIM_ONE},
    {W(ffn_norm), "ffn_norm.weight", NULL, DIM_EMBD, DIM_ONE, DI_T_STD, DI_W_NORM, false, DIM_ONE},
    {W(ffn_norm), NULL, "post_attention_layernorm.weight", DIM_EMBD, DIM_ONE, DI_T_NOPOST, DI_W_NORM, false, DIM_ONE},
    {W(ffn_norm), NULL, "pre_feedforward_layernorm.weight", DIM_EMBD, DIM_ONE, DI_T_POST, DI_W_NORM, false, DIM_ONE},
    /* dense GLU */
    {W(w_gate), "ffn_gate.weight", "mlp.gate_proj.weight", DIM_EMBD, DIM_FF, DI_T_DENSE, DI_W_MAT, false, DIM_ONE},
    {W(w_up), "ffn_up.weight", "mlp.up_proj.weight", DIM_EMBD, DIM_FF, DI_T_DENSE, DI_W_MAT, false, DIM_ONE},
    {W(w_down), "ffn_down.weight", "mlp.down_proj.weight", DIM_FF, DIM_EMBD, DI_T_DENSE, DI_W_MAT, false, DIM_ONE},
    /* mixture of experts */
    {W(router), "ffn_gate_inp.weight", "mlp.gate.weight", DIM_EMBD, DIM_NEXP, DI_T_MOE, DI_W_MAT, false, DIM_ONE},
    {W(router_bias), "exp_probs_b.bias", "mlp.gate.e_score_correction_bias", DIM_NEXP, DIM_ONE, DI_T_MOE | DI_T_SELBIAS,
     DI_W_BIAS, false, DIM_ONE},
    {W(exp_gate), "ffn_gate_exps.weight", "mlp.experts.%d.gate_proj.weight", DIM_EMBD, DIM_FF_EXP, DI_T_MOE, DI_W_MAT,
     true, DIM_ONE},
    {W(exp_up), "ffn_up_exps.weight", "mlp.experts.%d.up_proj.weight", DIM_EMBD, DIM_FF_EXP, DI_T_MOE, DI_W_MAT, true, DIM_ONE},
    {W(exp_down), "ffn_down_exps.weight", "mlp.experts.%d.down_proj.weight", DIM_FF_EXP, DIM_EMBD, DI_T_MOE, DI_W_MAT,
     true, DIM_ONE},
    {W(sh_gate), "ffn_gate_shexp.weight", "mlp.shared_experts.gate_proj.weight", DIM_EMBD, DIM_FF_SHEXP,
     DI_T_MOE | DI_T_SHARED, DI_W_MAT, false, DIM_ONE},
    {W(sh_up), "ffn_up_shexp.weight", "mlp.shared_experts.up_proj.weight", DIM_EMBD, DIM_FF_SHEXP,
     DI_T_MOE | DI_T_SHARED, DI_W_MAT, false, DIM_ONE},
    {W(sh_down), "ffn_down_shexp.weight", "mlp.shared_experts.down_proj.weight", DIM_FF_SHEXP, DIM_EMBD,
     DI_T_MOE | DI_T_SHARED, DI_W_MAT, false, DIM_ONE},
    /* Gemma's sandwich norm after the FFN */
    {W(ffn_post_norm), "post_ffw_norm.weight", "post_feedforward_layernorm.weight", DIM_EMBD, DIM_ONE, DI_T_POST,
     DI_W_NORM, false, DIM_ONE},
    /* DeepSeek-V4: GGUF names as llama.cpp's converter writes them; HF names are DeepSeek's own (the released
     * checkpoints; transformers renames them at load). Shapes agree: the converter only renames. */
#define V4(f, gg, hf, a, b, need, kind) {W(f), gg, hf, a, b, DI_T_V4 | (need), kind, false, DIM_ONE}
    V4(hc_attn_fn, "hc_attn_fn.weight", "hc_attn_fn", DIM_V4_HCD, DIM_V4_MIX, 0, DI_W_MAT),
    V4(hc_attn_base, "hc_attn_base.weight", "hc_attn_base", DIM_V4_MIX, DIM_ONE, 0, DI_W_BIAS),
    V4(hc_attn_scale, "hc_attn_scale.weight", "hc_attn_scale", DIM_THREE, DIM_ONE, 0, DI_W_BIAS),
    V4(attn_norm, "attn_norm.weight", "attn_norm.weight", DIM_EMBD, DIM_ONE, 0, DI_W_NORM),
    V4(wq_a, "attn_q_a.weight", "attn.wq_a.weight", DIM_EMBD, DIM_QLORA, 0, DI_W_MAT),
    V4(q_a_norm, "attn_q_a_norm.weight", "attn.q_norm.weight", DIM_QLORA, DIM_ONE, 0, DI_W_NORM),
    V4(wq_b, "attn_q_b.weight", "attn.wq_b.weight", DIM_QLORA, DIM_Q, 0, DI_W_MAT),
    V4(wkv, "attn_kv.weight", "attn.wkv.weight", DIM_EMBD, DIM_HEAD, 0, DI_W_MAT),
    V4(kv_norm, "attn_kv_a_norm.weight", "attn.kv_norm.weight", DIM_HEAD, DIM_ONE, 0, DI_W_NORM),
    V4(wo_a, "attn_output_a.weight", "attn.wo_a.weight", DIM_V4_OA_IN, DIM_V4_OA, 0, DI_W_MAT),
    V4(wo_b, "attn_output_b.weight", "attn.wo_b.weight", DIM_V4_OA, DIM_EMBD, 0, DI_W_MAT),
    V4(sinks, "attn_sinks.weight", "attn.attn_sink", DIM_HEADS, DIM_ONE, 0, DI_W_BIAS),
    V4(cmp_wkv, "attn_compressor_kv.weight", "attn.compressor.wkv.weight", DIM_EMBD, DIM_V4_2HEAD, DI_T_V4CSA, DI_W_MAT),
    V4(cmp_wgate, "attn_compressor_gate.weight", "attn.compressor.wgate.weight", DIM_EMBD, DIM_V4_2HEAD, DI_T_V4CSA, DI_W_MAT),
    V4(cmp_ape, "attn_compressor_ape.weight", "attn.compressor.ape", DIM_V4_2HEAD, DIM_V4_CSA_RATE, DI_T_V4CSA, DI_W_BIAS),
    V4(cmp_wkv, "attn_compressor_kv.weight", "attn.compressor.wkv.weight", DIM_EMBD, DIM_HEAD, DI_T_V4HCA, DI_W_MAT),
    V4(cmp_wgate, "attn_compressor_gate.weight", "attn.compressor.wgate.weight", DIM_EMBD, DIM_HEAD, DI_T_V4HCA, DI_W_MAT),
    V4(cmp_ape, "attn_compressor_ape.weight", "attn.compressor.ape", DIM_HEAD, DIM_V4_HCA_RATE, DI_T_V4HCA, DI_W_BIAS),
    V4(cmp_norm, "attn_compressor_norm.weight", "attn.compressor.norm.weight", DIM_HEAD, DIM_ONE, DI_T_V4CSA, DI_W_NORM),
    V4(cmp_norm, "attn_compressor_norm.weight", "attn.compressor.norm.weight", DIM_HEAD, DIM_ONE, DI_T_V4HCA, DI_W_NORM),
    V4(idx_wkv, "indexer_compressor_kv.weight", "attn.indexer.compressor.wkv.weight", DIM_EMBD, DIM_V4_2IDX, DI_T_V4CSA, DI_W_MAT),
    V4(idx_wgate, "indexer_compressor_gate.weight", "attn.indexer.compressor.wgate.weight", DIM_EMBD, DIM_V4_2IDX, DI_T_V4CSA, DI_W_MAT),
    V4(idx_ape, "indexer_compressor_ape.weight", "attn.indexer.compressor.ape", DIM_V4_2IDX, DIM_V4_CSA_RATE, DI_T_V4CSA, DI_W_BIAS),
    V4(idx_norm, "indexer_compressor_norm.weight", "attn.indexer.compressor.norm.weight", DIM_V4_IDX, DIM_ONE, DI_T_V4CSA, DI_W_NORM),
    V4(idx_wq_b, "indexer.attn_q_b.weight", "attn.indexer.wq_b.weight", DIM_QLORA, DIM_V4_IDXQ, DI_T_V4CSA, DI_W_MAT),
    V4(idx_wproj, "indexer.proj.weight", "attn.indexer.weights_proj.weight", DIM_EMBD, DIM_V4_IDXH, DI_T_V4CSA, DI_W_MAT),
    V4(hc_ffn_fn, "hc_ffn_fn.weight", "hc_ffn_fn", DIM_V4_HCD, DIM_V4_MIX, 0, DI_W_MAT),
    V4(hc_ffn_base, "hc_ffn_base.weight", "hc_ffn_base", DIM_V4_MIX, DIM_ONE, 0, DI_W_BIAS),
    V4(hc_ffn_scale, "hc_ffn_scale.weight", "hc_ffn_scale", DIM_THREE, DIM_ONE, 0, DI_W_BIAS),
    V4(ffn_norm, "ffn_norm.weight", "ffn_norm.weight", DIM_EMBD, DIM_ONE, 0, DI_W_NORM),
    V4(router, "ffn_gate_inp.weight", "ffn.gate.weight", DIM_EMBD, DIM_NEXP, 0, DI_W_MAT),
    V4(router_bias, "exp_probs_b.bias", "ffn.gate.bias", DIM_NEXP, DIM_ONE, DI_T_V4ROUTED, DI_W_BIAS),
    V4(tid2eid, "ffn_gate_tid2eid.weight", "ffn.gate.tid2eid", DIM_EXP_USED, DIM_VOCAB, DI_T_V4HASH, DI_W_INDEX),
    {W(exp_gate), "ffn_gate_exps.weight", "ffn.experts.%d.w1.weight", DIM_EMBD, DIM_FF_EXP, DI_T_V4, DI_W_MAT, true, DIM_ONE},
    {W(exp_up), "ffn_up_exps.weight", "ffn.experts.%d.w3.weight", DIM_EMBD, DIM_FF_EXP, DI_T_V4, DI_W_MAT, true, DIM_ONE},
    {W(exp_down), "ffn_down_exps.weight", "ffn.experts.%d.w2.weight", DIM_FF_EXP, DIM_EMBD, DI_T_V4, DI_W_MAT, true, DIM_ONE},
    V4(sh_gate, "ffn_gate_shexp.weight", "ffn.shared_experts.w1.weight", DIM_EMBD, DIM_FF_EXP, 0, DI_W_MAT),
    V4(sh_up, "ffn_up_shexp.weight", "ffn.shared_experts.w3.weight", DIM_EMBD, DIM_FF_EXP, 0, DI_W_MAT),
    V4(sh_down, "ffn_down_shexp.weight", "ffn.shared_experts.w2.weight", DIM_FF_EXP, DIM_EMBD, 0, DI_W_MAT),
#undef V4
};
const size_t di_n_layer_tensors = sizeof di_layer_tensors / sizeof di_layer_tensors[0];

int64_t di_dim_value(const di_hparams *hp, di_dim d) {
  switch (d) {
    case DIM_ONE: return 1;
    case DIM_EMBD: return hp->n_embd;
    case DIM_Q: return (int64_t)hp->n_head * hp->head_dim;
    case DIM_KV: return (int64_t)hp->n_head_kv * hp->head_dim;
    case DIM_HEAD: return hp->head_dim;
    case DIM_FF: return hp->n_ff;
    case DIM_QLORA: return hp->q_lora_rank;
    case DIM_QMLA: return (int64_t)hp->n_head * (hp->qk_nope_dim + hp->rope_dim);
    case DIM_KVA: return hp->kv_lora_rank + hp->rope_dim;
    case DIM_KVLORA: return hp->kv_lora_rank;
    case DIM_KVB: return (int64_t)hp->n_head * (hp->qk_nope_dim + hp->v_head_dim);
    case DIM_VOUT: return (int64_t)hp->n_head * hp->v_head_dim;
    case DIM_NEXP: return hp->n_expert;
    case DIM_FF_EXP: return hp->n_ff_exp;
    case DIM_FF_SHEXP: return hp->n_ff_shexp;
    case DIM_NOPE: return hp->qk_nope_dim;
    case DIM_VHEAD: return hp->v_head_dim;
    case DIM_HEADS: return hp->n_head;
    case DIM_VOCAB: return hp->n_vocab;
    case DIM_THREE: return 3;
    case DIM_EXP_USED: return hp->n_expert_used;
    case DIM_V4_MIX: return (int64_t)(2 + hp->v4.hc_mult) * hp->v4.hc_mult;
    case DIM_V4_HCD: return (int64_t)hp->v4.hc_mult * hp->n_embd;
    case DIM_V4_OA_IN: return hp->v4.o_groups > 0 ? (int64_t)hp->n_head * hp->head_dim / hp->v4.o_groups : 0;
    case DIM_V4_OA: return (int64_t)hp->v4.o_groups * hp->v4.o_lora_rank;
    case DIM_V4_2HEAD: return 2 * (int64_t)hp->head_dim;
    case DIM_V4_CSA_RATE: return hp->v4.csa_rate;
    case DIM_V4_HCA_RATE: return hp->v4.hca_rate;
    case DIM_V4_IDX: return hp->v4.idx_dim;
    case DIM_V4_2IDX: return 2 * (int64_t)hp->v4.idx_dim;
    case DIM_V4_IDXQ: return (int64_t)hp->v4.idx_heads * hp->v4.idx_dim;
    case DIM_V4_IDXH: return hp->v4.idx_heads;
  }
  return 0;
}

unsigned di_layer_bits(const di_hparams *hp, const di_layer_weights *L) {
  unsigned b = 0;
  if (L->attn == DI_ATTN_DSV4)
    return DI_T_V4 | (L->v4_attn == DI_V4_CSA ? DI_T_V4CSA : 0) | (L->v4_attn == DI_V4_HCA ? DI_T_V4HCA : 0) |
           (L->v4_hash ? DI_T_V4HASH : DI_T_V4ROUTED);
  b |= DI_T_STD;
  if (L->attn == DI_ATTN_MLA)
    b |= DI_T_MLA | (hp->q_lora_rank > 0 ? DI_T_QLORA : DI_T_NOQLORA) | (hp->mla_kv_b_split ? DI_T_KVB_SPLIT : DI_T_KVB);
  else b |= DI_T_GQA;
  if (L->ffn == DI_FFN_MOE) {
    b |= DI_T_MOE;
    if (hp->moe_topk == DI_MOE_NOAUX_TC) b |= DI_T_SELBIAS;
    if (hp->n_expert_shared > 0) b |= DI_T_SHARED;
  } else {
    b |= DI_T_DENSE;
  }
  if (hp->qkv_bias) b |= DI_T_BIAS;
  if (hp->qk_norm) b |= DI_T_QKNORM;
  b |= hp->post_norms ? DI_T_POST : DI_T_NOPOST;
  return b;
}

/* lname: the layer's name prefix ("blk.3", "model.layers.3", "mtp.0"); gguf: GGUF names and stacked experts */
static di_code bind_experts(di_model *m, const di_tensor_desc *d, di_tensor **slot, const char *lname, bool gguf,
                            int64_t ne0, int64_t ne1, di_bind_fn bind, di_status *st) {
  const int E = m->hp.n_expert;
  di_tensor *t = calloc((size_t)E, sizeof *t);
  if (!t) return di_errorf(st, DI_ERR_NOMEM, "out of memory");
  *slot = t;
  char n[192], n2[160];
  di_code rc;
  if (!gguf) {
    for (int e = 0; e < E; e++) {
      snprintf(n2, sizeof n2, d->hf, e);
      snprintf(n, sizeof n, "%s.%s", lname, n2);
      if ((rc = bind(m, &t[e], n, ne0, ne1, 0, true, st))) return rc;
    }
    return DI_OK;
  }
  snprintf(n, sizeof n, "%s.%s", lname, d->gguf);
  di_tensor all;
  if ((rc = bind(m, &all, n, ne0, ne1, E, true, st))) return rc;
  for (int e = 0; e < E; e++) {
    t[e] = all;
    t[e].ne[1] = ne1;
    t[e].data = (const uint8_t *)all.data + (size_t)e * (size_t)ne1 * all.row_bytes;
  }
  return DI_OK;
}

static di_code bind_layer(di_model *m, di_layer_weights *L, int il, const char *lname, bool gguf, di_bind_fn bind,
                          float norm_offset, di_status *st) {
  const di_hparams *hp = &m->hp;
  di_code rc;
  L->attn = hp->attn_kind;
  L->ffn = di_hparams_layer_ffn(hp, il);
  if (L->attn == DI_ATTN_DSV4) L->v4_attn = (di_v4_attn)hp->v4.attn[il], L->v4_hash = hp->v4.hash[il];
  unsigned bits = di_layer_bits(hp, L);
  for (size_t i = 0; i < di_n_layer_tensors; i++) {
    const di_tensor_desc *d = &di_layer_tensors[i];
    const char *nm = gguf ? d->gguf : d->hf;
    if (!nm || (d->need & bits) != d->need) continue;
    int64_t ne0 = di_dim_value(hp, d->ne0), ne1 = di_dim_value(hp, d->ne1);
    if (d->experts) {
      if ((rc = bind_experts(m, d, (di_tensor **)((char *)L + d->off), lname, gguf, ne0, ne1, bind, st))) return rc;
      continue;
    }
    di_tensor *t = (di_tensor *)((char *)L + d->off);
    char n[192];
    snprintf(n, sizeof n, "%s.%s", lname, nm);
    if ((rc = bind(m, t, n, ne0, ne1, d->sub == DIM_ONE ? 0 : di_dim_value(hp, d->sub), true, st))) return rc;
    if (!gguf && d->kind == DI_W_NORM && t->data && norm_offset != 0 && (rc = di_model_to_f32(m, t, norm_offset, st)))
      return rc;
  }
  return DI_OK;
}

/* A layer's name prefix: GGUF blk.N, HF <prefix>.layers.N (or layers.N without one) */
static void layer_name(char *out, size_t n, const char *hf_prefix, int il) {
  if (!hf_prefix) snprintf(out, n, "blk.%d", il);
  else snprintf(out, n, "%s%slayers.%d", hf_prefix, *hf_prefix ? "." : "", il);
}

di_code di_model_bind_layers(di_model *m, const char *hf_prefix, di_bind_fn bind, float norm_offset, di_status *st) {
  const di_hparams *hp = &m->hp;
  m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
  if (!m->layers) return di_errorf(st, DI_ERR_NOMEM, "out of memory");
  di_code rc;
  char ln[160];
  for (int il = 0; il < hp->n_layer; il++) {
    layer_name(ln, sizeof ln, hf_prefix, il);
    if ((rc = bind_layer(m, &m->layers[il], il, ln, !hf_prefix, bind, norm_offset, st))) return rc;
  }
  return DI_OK;
}

/* eh_proj from DeepSeek's e_proj and h_proj: row r is [e_proj row r, h_proj
 * row r], the layout llama.cpp's converter writes, so one matmul per stream
 * takes [enorm(embedding); hnorm(stream)]. */
static di_code join_eh(di_model *m, di_tensor *e, di_tensor *h, di_tensor *out, di_status *st) {
  di_code rc;
  if ((e->type != DI_F32 && (rc = di_model_to_f32(m, e, 0, st))) || (h->type != DI_F32 && (rc = di_model_to_f32(m, h, 0, st))))
    return rc;
  const int64_t D = e->ne[0], R = e->ne[1];
  float *w = di_model_alloc_f32(m, (size_t)(2 * D * R));
  if (!w) return di_errorf(st, DI_ERR_NOMEM, "%s: out of memory joining mtp.0.e_proj and h_proj", m->path);
  for (int64_t r = 0; r < R; r++) {
    memcpy(w + r * 2 * D, (const float *)e->data + r * D, (size_t)D * sizeof(float));
    memcpy(w + r * 2 * D + D, (const float *)h->data + r * D, (size_t)D * sizeof(float));
  }
  *out = (di_tensor){.type = DI_F32, .ne = {2 * D, R}, .row_bytes = (size_t)(2 * D) * 4, .data = w, .name = "mtp.0.eh_proj"};
  return DI_OK;
}

/* DeepSeek-V4's MTP block: a sliding-window layer (compress_ratios[n_layers]
 * is 0 in DeepSeek's configs) with routed (not hash) MoE, its own hyper head
 * and norm; the embedding and the classifier are the main model's. HF: mtp.0.*
 * (DeepSeek's names); GGUF: llama.cpp's blk.N.nextn.{eh_proj,enorm,hnorm,
 * shared_head_norm} and blk.N.* for the block; a GGUF has no name of its own
 * for the block's hyper head, so as in llama.cpp's MTP graph it is output_hc_*
 * (the MTP head's in the converter's --mtp file). */
static di_code bind_mtp_v4(di_model *m, const char *hf_prefix, di_bind_fn bind, di_status *st) {
  di_hparams *hp = &m->hp;
  const int il = hp->n_layer;
  const int64_t D = hp->n_embd, N = hp->v4.hc_mult;
  if (il >= DI_V4_MAX_LAYERS) return DI_OK;
  hp->v4.attn[il] = DI_V4_SWA, hp->v4.hash[il] = false;
  di_mtp_weights *w = m->mtp = calloc(1, sizeof *m->mtp);
  if (!w) return di_errorf(st, DI_ERR_NOMEM, "out of memory");
  const bool gguf = !hf_prefix;
  char n[192], ln[64];
  di_code rc;
  if (gguf) snprintf(ln, sizeof ln, "blk.%d", il);
  else snprintf(ln, sizeof ln, "mtp.0");
#define NM(hf, gg) (snprintf(n, sizeof n, "%s.%s", ln, gguf ? (gg) : (hf)), n)
  /* a checkpoint may drop the MTP weights its config still counts: then there is no MTP */
  if ((rc = bind(m, &w->enorm, NM("enorm.weight", "nextn.enorm.weight"), D, 1, 0, false, st))) return rc;
  if (!w->enorm.data) {
    free(m->mtp);
    m->mtp = NULL;
    return DI_OK;
  }
  if ((rc = bind(m, &w->hnorm, NM("hnorm.weight", "nextn.hnorm.weight"), D, 1, 0, true, st)) ||
      (rc = bind(m, &w->head_norm, NM("norm.weight", "nextn.shared_head_norm.weight"), D, 1, 0, true, st)))
    return rc;
  if (gguf) {
    if ((rc = bind(m, &w->eh_proj, NM("", "nextn.eh_proj.weight"), 2 * D, D, 0, true, st))) return rc;
    w->hc_head_fn = m->hc_head_fn, w->hc_head_base = m->hc_head_base, w->hc_head_scale = m->hc_head_scale;
  } else {
    di_tensor e, h;
    if ((rc = bind(m, &e, NM("e_proj.weight", ""), D, D, 0, true, st)) ||
        (rc = bind(m, &h, NM("h_proj.weight", ""), D, D, 0, true, st)) || (rc = join_eh(m, &e, &h, &w->eh_proj, st)) ||
        (rc = bind(m, &w->hc_head_fn, NM("hc_head_fn", ""), N * D, N, 0, true, st)) ||
        (rc = bind(m, &w->hc_head_base, NM("hc_head_base", ""), N, 1, 0, true, st)) ||
        (rc = bind(m, &w->hc_head_scale, NM("hc_head_scale", ""), 1, 1, 0, true, st)))
      return rc;
  }
#undef NM
  return bind_layer(m, &w->layer, il, ln, gguf, bind, 0, st);
}

di_code di_model_bind_mtp(di_model *m, const char *hf_prefix, di_bind_fn bind, float norm_offset, di_status *st) {
  const di_hparams *hp = &m->hp;
  if (hp->n_nextn <= 0) return DI_OK;
  if (hp->attn_kind == DI_ATTN_DSV4) return bind_mtp_v4(m, hf_prefix, bind, st);
  di_mtp_weights *w = m->mtp = calloc(1, sizeof *m->mtp);
  if (!w) return di_errorf(st, DI_ERR_NOMEM, "out of memory");
  const int il = hp->n_layer;
  di_code rc;
  static const struct {
    size_t off;
    const char *gguf, *hf;
    di_dim ne0, ne1;
    bool norm, required;
  } extra[] = {
      {offsetof(di_mtp_weights, enorm), "nextn.enorm.weight", "enorm.weight", DIM_EMBD, DIM_ONE, true, true},
      {offsetof(di_mtp_weights, hnorm), "nextn.hnorm.weight", "hnorm.weight", DIM_EMBD, DIM_ONE, true, true},
      {offsetof(di_mtp_weights, eh_proj), "nextn.eh_proj.weight", "eh_proj.weight", DIM_ONE, DIM_EMBD, false, true},
      {offsetof(di_mtp_weights, head_norm), "nextn.shared_head_norm.weight", "shared_head.norm.weight", DIM_EMBD,
       DIM_ONE, true, true},
      {offsetof(di_mtp_weights, head), "nextn.shared_head_head.weight", "shared_head.head.weight", DIM_EMBD, DIM_ONE,
       false, false},
  };
  for (size_t i = 0; i < sizeof extra / sizeof *extra; i++) {
    di_tensor *t = (di_tensor *)((char *)w + extra[i].off);
    char n[192];
    if (hf_prefix) snprintf(n, sizeof n, "%s.layers.%d.%s", hf_prefix, il, extra[i].hf);
    else snprintf(n, sizeof n, "blk.%d.%s", il, extra[i].gguf);
    /* eh_proj reads [embedding; hidden]; the head has the vocabulary's rows */
    int64_t ne0 = i == 2 ? 2 * (int64_t)hp->n_embd : di_dim_value(hp, extra[i].ne0);
    int64_t ne1 = i == 4 ? hp->n_vocab : di_dim_value(hp, extra[i].ne1);
    /* a checkpoint may drop the MTP weights its config still counts: then there is no MTP */
    if ((rc = bind(m, t, n, ne0, ne1, 0, extra[i].required && i > 0, st))) return rc;
    if (i == 0 && !t->data) {
      free(m->mtp);
      m->mtp = NULL;
      return DI_OK;
    }
    if (hf_prefix && extra[i].norm && t->data && norm_offset != 0 && (rc = di_model_to_f32(m, t, norm_offset, st)))
      return rc;
  }
  char ln[160];
  layer_name(ln, sizeof ln, hf_prefix, il);
  return bind_layer(m, &w->layer, il, ln, !hf_prefix, bind, norm_offset, st);
}

void di_layer_each_matrix(const di_hparams *hp, di_layer_weights *L, void (*fn)(di_tensor *t, void *u), void *u) {
  unsigned bits = di_layer_bits(hp, L);
  for (size_t i = 0; i < di_n_layer_tensors; i++) {
    const di_tensor_desc *d = &di_layer_tensors[i];
    if (d->kind != DI_W_MAT || (d->need & bits) != d->need) continue;
    if (d->experts) {
      di_tensor *t = *(di_tensor **)((char *)L + d->off);
      for (int e = 0; t && e < hp->n_expert; e++) fn(&t[e], u);
    } else {
      fn((di_tensor *)((char *)L + d->off), u);
    }
  }
}

di_code di_model_note_bound(di_model *m, const void *data, di_status *st) {
  if (m->n_bound == m->cap_bound) {
    size_t cap = m->cap_bound ? 2 * m->cap_bound : 256;
    const void **v = realloc(m->bound, cap * sizeof *v);
    if (!v) return di_errorf(st, DI_ERR_NOMEM, "out of memory");
    m->bound = v, m->cap_bound = cap;
  }
  m->bound[m->n_bound++] = data;
  return DI_OK;
}

static int cmp_ptr(const void *a, const void *b) {
  uintptr_t x = (uintptr_t) * (const void *const *)a, y = (uintptr_t) * (const void *const *)b;
  return x < y ? -1 : x > y;
}

/* The layer a name belongs to ("blk.N.", "layers.N." after any prefix), or -1. */
static int layer_of(const char *name) {
  const char *p = strncmp(name, "blk.", 4) ? strstr(name, "layers.") : name;
  if (!p || (p != name && p[-1] != '.')) return -1;
  p = strchr(p, '.') + 1;
  char *end;
  long il = strtol(p, &end, 10);
  return end != p && *end == '.' ? (int)il : -1;
}

static bool not_run(const di_model *m, const char *name) {
  static const char *const skip[] = {"rotary_emb.inv_freq", "vision_tower.", "multi_modal_projector."};
  for (size_t i = 0; i < sizeof skip / sizeof *skip; i++)
    if (strstr(name, skip[i])) return true;
  int il = layer_of(name);
  return !strncmp(name, "mtp.", 4) || il >= m->hp.n_layer;
}

di_code di_model_check_unused(di_model *m, size_t n, const char *(*name_at)(const void *file, size_t i),
                              const void *(*data_at)(const void *file, size_t i), const void *file, di_status *st) {
  di_code rc = DI_OK;
  qsort(m->bound, m->n_bound, sizeof *m->bound, cmp_ptr);
  for (size_t i = 0; i < n && !rc; i++) {
    const void *d = data_at(file, i);
    if (m->n_bound && bsearch(&d, m->bound, m->n_bound, sizeof *m->bound, cmp_ptr)) continue;
    const char *name = name_at(file, i);
    if (!not_run(m, name))
      rc = di_errorf(st, DI_ERR_UNSUPPORTED,
                     "%s: tensor %s is not used by the %s forward (an unknown weight would change the output; "
                     "is this checkpoint a variant the engine does not implement?)",
                     m->path, name, m->hp.arch);
  }
  free(m->bound);
  m->bound = NULL, m->n_bound = m->cap_bound = 0;
  return rc;
}
