/* config.json → di_hparams, read exactly: every key is either understood,
 * known not to change the computation, or a load error naming it. Written
 * against both spellings transformers uses: 4.x (`rope_theta`, `rope_scaling`
 * with "type" or "rope_type", `rope_local_base_freq`, `sliding_window_pattern`)
 * and 5.x (`rope_parameters`, flat or keyed by layer type, and `layer_types`). */
#include "model/hf_config.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/arch.h"

/* One JSON object being read; `left` holds the keys not read yet, so that
 * whatever nobody asked for can be reported at the end. */
typedef struct cfgr {
  json_t *obj, *left;
  const char *path;  /* model directory, for messages */
  const char *where; /* "" or "rope_scaling." etc., for messages */
  di_status *st;
} cfgr;

static void cfgr_init(cfgr *c, json_t *obj, const char *path, const char *where, di_status *st) {
  c->obj = obj;
  c->left = json_copy(obj);
  c->path = path;
  c->where = where;
  c->st = st;
}

static void cfgr_done(cfgr *c) { json_decref(c->left); }

/* The value of key (NULL when absent or null), marked as read. */
static json_t *take(cfgr *c, const char *key) {
  json_t *v = json_object_get(c->obj, key);
  if (c->left) json_object_del(c->left, key);
  return v && !json_is_null(v) ? v : NULL;
}

static di_code bad(cfgr *c, const char *key, const char *what) {
  return di_errorf(c->st, DI_ERR_FORMAT, "%s/config.json: key %s%s %s", c->path, c->where, key, what);
}

static di_code unsupported(cfgr *c, const char *key, const char *what) {
  return di_errorf(c->st, DI_ERR_UNSUPPORTED, "%s/config.json: key %s%s: %s", c->path, c->where, key, what);
}

static di_code get_int(cfgr *c, const char *key, int *out, bool required) {
  json_t *v = take(c, key);
  if (!v) return required ? bad(c, key, "is missing") : DI_OK;
  if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) && json_real_value(v) >= 0 &&
      json_real_value(v) <= INT32_MAX) {
    *out = (int)json_real_value(v);
    return DI_OK;
  }
  if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
    return bad(c, key, "must be a non-negative integer");
  *out = (int)json_integer_value(v);
  return DI_OK;
}

static di_code get_num(cfgr *c, const char *key, double *out, bool *present) {
  json_t *v = take(c, key);
  if (present) *present = v != NULL;
  if (!v) return DI_OK;
  if (!json_is_number(v) || !isfinite(json_number_value(v))) return bad(c, key, "must be a finite number");
  *out = json_number_value(v);
  return DI_OK;
}

static di_code get_float(cfgr *c, const char *key, float *out) {
  double d = *out;
  di_code rc = get_num(c, key, &d, NULL);
  if (!rc) *out = (float)d;
  return rc;
}

static di_code get_bool(cfgr *c, const char *key, bool *out) {
  json_t *v = take(c, key);
  if (!v) return DI_OK;
  if (!json_is_boolean(v)) return bad(c, key, "must be true or false");
  *out = json_is_true(v);
  return DI_OK;
}

/* Keys that change nothing in a forward pass: bookkeeping, training-only
 * settings, generation defaults (a request sets those) and dropout. */
static const char *const ignored_keys[] = {
    "_name_or_path", "architectures", "transformers_version", "torch_dtype", "dtype", "use_cache",
    "initializer_range", "attention_dropout", "hidden_dropout", "dropout", "embedding_dropout", "pad_token_id",
    "sep_token_id", "decoder_start_token_id", "output_attentions", "output_hidden_states", "return_dict",
    "torchscript", "pruned_heads", "chunk_size_feed_forward", "is_encoder_decoder", "is_decoder",
    "add_cross_attention", "tie_encoder_decoder", "cross_attention_hidden_size", "finetuning_task", "id2label",
    "label2id", "task_specific_params", "problem_type", "tokenizer_class", "prefix", "max_length", "min_length",
    "do_sample", "early_stopping", "num_beams", "num_beam_groups", "diversity_penalty", "temperature", "top_k",
    "top_p", "typical_p", "repetition_penalty", "length_penalty", "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size", "bad_words_ids", "num_return_sequences", "output_scores",
    "return_dict_in_generate", "forced_bos_token_id", "forced_eos_token_id", "remove_invalid_values",
    "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens", "tf_legacy_loss",
    "use_bfloat16", "_attn_implementation_autoset", "attn_implementation", "cache_implementation",
    /* tensor-parallel slicing during pretraining: the same products, summed in another order */
    "pretraining_tp",
    /* multimodal wrappers: the vision tower is not run, text_config is read instead */
    "vision_config", "mm_tokens_per_image", "boi_token_index", "eoi_token_index", "image_token_index",
    "text_config", NULL};

static bool is_ignored(const char *key) {
  for (int i = 0; ignored_keys[i]; i++)
    if (!strcmp(ignored_keys[i], key)) return true;
  return false;
}

/* The first key nobody read and that is not known to be inert is an error:
 * an unknown key may change the computation. */
static di_code cfgr_finish(cfgr *c) {
  const char *key;
  json_t *v;
  json_object_foreach(c->left, key, v) {
    if (c->where[0] == 0 && is_ignored(key)) continue;
    return unsupported(c, key, "not supported (unknown keys may change the computation)");
  }
  return DI_OK;
}

/* One RoPE parameter set: `rope_scaling` (4.x) or `rope_parameters` or one of
 * its per-layer-type entries (5.x). */
typedef struct rope_spec {
  bool has_theta;
  double theta;
  di_rope_scaling scaling;
  double factor, low, high, beta_fast, beta_slow, attn_factor, mscale, mscale_all_dim;
  int orig_ctx;
  bool has_attn_factor, has_mscale, has_mscale_all_dim, truncate;
} rope_spec;

static di_code read_rope(json_t *obj, const char *path, const char *where, int max_pos, rope_spec *r, di_status *st) {
  cfgr c;
  cfgr_init(&c, obj, path, where, st);
  di_code rc = DI_OK;
  memset(r, 0, sizeof *r);
  r->truncate = true;
  r->beta_fast = 32;
  r->beta_slow = 1;
  json_t *t = take(&c, "rope_type"), *t4 = take(&c, "type");
  if (!t) t = t4;
  const char *ts = json_is_string(t) ? json_string_value(t) : t ? NULL : "default";
  double partial = 1;
  bool has_factor = false, has_low = false, has_high = false;
  if (!ts) rc = bad(&c, "rope_type", "must be a string");
  else if (!strcmp(ts, "default")) r->scaling = DI_ROPE_SCALE_NONE;
  else if (!strcmp(ts, "linear")) r->scaling = DI_ROPE_SCALE_LINEAR;
  else if (!strcmp(ts, "llama3")) r->scaling = DI_ROPE_SCALE_LLAMA3;
  else if (!strcmp(ts, "yarn")) r->scaling = DI_ROPE_SCALE_YARN;
  else {
    char what[96];
    snprintf(what, sizeof what, "'%s' is not supported (default, linear, llama3, yarn are)", ts);
    rc = unsupported(&c, "rope_type", what);
  }
  r->orig_ctx = 0;
  bool has_truncate_key = json_object_get(obj, "truncate") != NULL;
  if (!rc) rc = get_num(&c, "rope_theta", &r->theta, &r->has_theta);
  if (!rc) rc = get_num(&c, "partial_rotary_factor", &partial, NULL);
  if (!rc && partial != 1) rc = unsupported(&c, "partial_rotary_factor", "only 1 is supported");
  if (!rc && r->scaling != DI_ROPE_SCALE_NONE) {
    if (!rc) rc = get_num(&c, "factor", &r->factor, &has_factor);
    if (!rc) rc = get_int(&c, "original_max_position_embeddings", &r->orig_ctx, false);
    /* transformers: the pretraining length defaults to max_position_embeddings,
     * and a yarn factor left out is the ratio of the two lengths */
    if (!rc && r->orig_ctx <= 0) r->orig_ctx = max_pos;
    if (!rc && r->orig_ctx <= 0) rc = bad(&c, "original_max_position_embeddings", "is missing (and so is max_position_embeddings)");
    if (!rc && !has_factor && r->scaling == DI_ROPE_SCALE_YARN) r->factor = (double)max_pos / r->orig_ctx;
    else if (!rc && !has_factor) rc = bad(&c, "factor", "is missing");
    if (!rc && !(r->factor > 0)) rc = bad(&c, "factor", "must be positive");
  }
  if (!rc && r->scaling == DI_ROPE_SCALE_LLAMA3) {
    if (!rc) rc = get_num(&c, "low_freq_factor", &r->low, &has_low);
    if (!rc) rc = get_num(&c, "high_freq_factor", &r->high, &has_high);
    if (!rc && !has_low) rc = bad(&c, "low_freq_factor", "is missing");
    if (!rc && !has_high) rc = bad(&c, "high_freq_factor", "is missing");
    if (!rc && !(r->high > r->low && r->low > 0)) rc = bad(&c, "high_freq_factor", "must exceed low_freq_factor > 0");
  }
  if (!rc && r->scaling == DI_ROPE_SCALE_YARN) {
    if (!rc) rc = get_num(&c, "beta_fast", &r->beta_fast, NULL);
    if (!rc) rc = get_num(&c, "beta_slow", &r->beta_slow, NULL);
    if (!rc) rc = get_num(&c, "attention_factor", &r->attn_factor, &r->has_attn_factor);
    if (!rc) rc = get_num(&c, "mscale", &r->mscale, &r->has_mscale);
    if (!rc) rc = get_num(&c, "mscale_all_dim", &r->mscale_all_dim, &r->has_mscale_all_dim);
    if (!rc && has_truncate_key) rc = get_bool(&c, "truncate", &r->truncate);
    if (!rc && r->beta_fast == 0) r->beta_fast = 32; /* transformers: `or 32` */
    if (!rc && r->beta_slow == 0) r->beta_slow = 1;
    if (!rc && !r->has_attn_factor) {
      double f = r->factor;
#define MSCALE(s, m) ((s) <= 1 ? 1.0 : 0.1 * (m) * log(s) + 1.0)
      if (r->has_mscale && r->has_mscale_all_dim && r->mscale != 0 && r->mscale_all_dim != 0)
        r->attn_factor = MSCALE(f, r->mscale) / MSCALE(f, r->mscale_all_dim);
      else
        r->attn_factor = MSCALE(f, 1.0);
#undef MSCALE
    }
  }
  if (!rc) rc = cfgr_finish(&c);
  cfgr_done(&c);
  return rc;
}

static bool same_scaling(const rope_spec *a, const rope_spec *b) {
  return a->scaling == b->scaling && a->factor == b->factor && a->low == b->low && a->high == b->high &&
         a->orig_ctx == b->orig_ctx && a->beta_fast == b->beta_fast && a->beta_slow == b->beta_slow &&
         a->attn_factor == b->attn_factor && a->truncate == b->truncate;
}

static void apply_rope(di_hparams *hp, const rope_spec *r) {
  hp->rope_scaling = r->scaling;
  if (r->scaling == DI_ROPE_SCALE_NONE) return;
  hp->rope_factor = (float)r->factor;
  hp->rope_low_freq_factor = (float)r->low;
  hp->rope_high_freq_factor = (float)r->high;
  hp->rope_orig_ctx = r->orig_ctx;
  if (r->scaling == DI_ROPE_SCALE_YARN) {
    hp->rope_yarn_beta_fast = (float)r->beta_fast;
    hp->rope_yarn_beta_slow = (float)r->beta_slow;
    hp->rope_attn_factor = (float)r->attn_factor;
    hp->rope_yarn_no_truncate = !r->truncate;
  }
}

/* Which layers use the sliding window, as transformers decides it, mapped
 * onto the two shapes the op program runs: every layer, or every layer but
 * each Nth (swa_pattern). */
static di_code read_layer_kinds(cfgr *c, const di_arch_desc *ad, di_hparams *hp, bool *any_sliding, bool *any_full) {
  di_code rc;
  const int n = hp->n_layer;
  bool *sl = calloc((size_t)n, sizeof *sl);
  if (!sl) return di_errorf(c->st, DI_ERR_NOMEM, "out of memory");
  bool use_sw = true, has_use_sw = json_object_get(c->obj, "use_sliding_window") != NULL;
  int max_window_layers = 28, pattern = ad->swa_pattern; /* transformers' qwen2/qwen3 and gemma3 defaults */
  if ((rc = get_bool(c, "use_sliding_window", &use_sw)) || (rc = get_int(c, "max_window_layers", &max_window_layers, false)) ||
      (rc = get_int(c, "sliding_window_pattern", &pattern, false)) ||
      (rc = get_int(c, "_sliding_window_pattern", &pattern, false))) /* 5.x keeps the 4.x key, underscored */
    goto out;
  json_t *lt = take(c, "layer_types");
  if (lt) {
    if (!json_is_array(lt) || (int)json_array_size(lt) != n) {
      rc = bad(c, "layer_types", "must be an array with one entry per layer (num_hidden_layers)");
      goto out;
    }
    for (int i = 0; i < n; i++) {
      const char *s = json_string_value(json_array_get(lt, (size_t)i));
      if (s && !strcmp(s, "sliding_attention")) sl[i] = true;
      else if (!s || strcmp(s, "full_attention") != 0) {
        rc = unsupported(c, "layer_types", "entries other than full_attention and sliding_attention are not supported");
        goto out;
      }
    }
  } else if (ad->swa_pattern > 0) { /* gemma3 before layer_types */
    if (pattern <= 0) {
      rc = bad(c, "sliding_window_pattern", "must be positive");
      goto out;
    }
    for (int i = 0; i < n; i++) sl[i] = (i + 1) % pattern != 0;
  } else if (has_use_sw) { /* qwen2 / qwen3 before layer_types */
    for (int i = 0; i < n; i++) sl[i] = use_sw && i >= max_window_layers;
  } else {
    for (int i = 0; i < n; i++) sl[i] = hp->sliding_window > 0;
  }
  if (hp->sliding_window <= 0) /* no window: the sliding layers see everything */
    for (int i = 0; i < n; i++) sl[i] = false;
  *any_sliding = *any_full = false;
  for (int i = 0; i < n; i++) *(sl[i] ? any_sliding : any_full) = true;
  if (!*any_sliding) {
    hp->sliding_window = 0;
    hp->swa_pattern = 0;
  } else if (!*any_full) {
    hp->swa_pattern = 0;
  } else {
    int p = 0;
    while (p < n && sl[p]) p++;
    p++; /* first full layer is layer p-1: period p */
    for (int i = 0; i < n; i++)
      if (sl[i] != ((i + 1) % p != 0)) {
        rc = unsupported(c, lt ? "layer_types" : "max_window_layers",
                         "this mix of sliding and full layers is not supported (all one kind, or every Nth full)");
        goto out;
      }
    hp->swa_pattern = p;
  }
out:
  free(sl);
  return rc;
}

static di_code read_act(cfgr *c, const di_arch_desc *ad) {
  const char *want[2] = {ad->act == DI_ACT_SILU ? "silu" : "gelu_pytorch_tanh",
                         ad->act == DI_ACT_SILU ? "swish" : "gelu_pytorch_tanh"};
  static const char *keys[] = {"hidden_act", "hidden_activation"};
  for (int k = 0; k < 2; k++) {
    json_t *v = take(c, keys[k]);
    if (!v) continue;
    const char *s = json_string_value(v);
    if (!s || (strcmp(s, want[0]) && strcmp(s, want[1]))) {
      char what[96];
      snprintf(what, sizeof what, "'%s' is not supported for %s (%s is)", s ? s : "?", ad->name, want[0]);
      return unsupported(c, keys[k], what);
    }
  }
  return DI_OK;
}

/* DeepSeek-V2/V3 (and R1, V3.1, V2-Lite, Moonlight, Kimi-K2): MLA sizes and MoE routing. */
static di_code read_mla_moe(cfgr *c, di_hparams *hp) {
  di_code rc;
  int n_shared = 0, nextn = 0;
  hp->moe_layer_freq = 1;
  hp->n_group = hp->topk_group = 1;
  if ((rc = get_int(c, "kv_lora_rank", &hp->kv_lora_rank, true)) ||
      (rc = get_int(c, "qk_nope_head_dim", &hp->qk_nope_dim, true)) ||
      (rc = get_int(c, "qk_rope_head_dim", &hp->rope_dim, true)) ||
      (rc = get_int(c, "v_head_dim", &hp->v_head_dim, true)) || (rc = get_int(c, "q_lora_rank", &hp->q_lora_rank, false)) ||
      (rc = get_int(c, "n_routed_experts", &hp->n_expert, false)) ||
      (rc = get_int(c, "num_experts_per_tok", &hp->n_expert_used, false)) ||
      (rc = get_int(c, "n_shared_experts", &n_shared, false)) ||
      (rc = get_int(c, "moe_intermediate_size", &hp->n_ff_exp, hp->n_expert > 0)) ||
      (rc = get_int(c, "first_k_dense_replace", &hp->first_k_dense, false)) ||
      (rc = get_int(c, "moe_layer_freq", &hp->moe_layer_freq, false)) || (rc = get_int(c, "n_group", &hp->n_group, false)) ||
      (rc = get_int(c, "topk_group", &hp->topk_group, false)) ||
      /* the MTP layers (stored as layers num_hidden_layers, ...) are not part of the main model's forward */
      (rc = get_int(c, "num_nextn_predict_layers", &nextn, false)))
    return rc;
  if (nextn < 0) return bad(c, "num_nextn_predict_layers", "must be >= 0");
  hp->n_nextn = nextn;
  if (hp->kv_lora_rank <= 0 || hp->qk_nope_dim <= 0 || hp->rope_dim <= 0 || hp->rope_dim % 2 || hp->v_head_dim <= 0)
    return bad(c, "kv_lora_rank", "and qk_nope_head_dim, qk_rope_head_dim (even), v_head_dim must be positive");
  hp->head_dim = hp->qk_nope_dim + hp->rope_dim;
  hp->n_head_kv = hp->n_head; /* num_key_value_heads: MLA has none of its own */
  hp->n_expert_shared = n_shared;
  hp->n_ff_shexp = n_shared * hp->n_ff_exp;
  /* training-only (auxiliary loss) and expert-parallel settings */
  take(c, "aux_loss_alpha");
  take(c, "seq_aux");
  take(c, "ep_size");
  bool interleave = true;
  if ((rc = get_bool(c, "rope_interleave", &interleave))) return rc;
  if (!interleave) hp->rope_type = DI_ROPE_NEOX;
  if (take(c, "quantization_config"))
    return unsupported(c, "quantization_config", "quantized checkpoints (FP8) are not supported; use BF16 or GGUF");
  const char *sf = "softmax", *tm = "greedy";
  json_t *v;
  if ((v = take(c, "scoring_func")) && !(sf = json_string_value(v))) return bad(c, "scoring_func", "must be a string");
  if ((v = take(c, "topk_method")) && !(tm = json_string_value(v))) return bad(c, "topk_method", "must be a string");
  bool norm = false;
  double scale = 1;
  if ((rc = get_bool(c, "norm_topk_prob", &norm)) || (rc = get_num(c, "routed_scaling_factor", &scale, NULL))) return rc;
  if (hp->n_expert <= 0) return DI_OK;
  if (hp->n_expert > DI_MOE_MAX_EXPERTS) return unsupported(c, "n_routed_experts", "over the limit of 1024");
  if (hp->n_expert_used <= 0 || hp->n_expert_used > hp->n_expert)
    return bad(c, "num_experts_per_tok", "must be in 1..n_routed_experts");
  if (hp->moe_layer_freq <= 0) return bad(c, "moe_layer_freq", "must be positive");
  if (hp->n_group <= 0 || hp->n_expert % hp->n_group) return bad(c, "n_group", "must divide n_routed_experts");
  if (hp->topk_group <= 0 || hp->topk_group > hp->n_group) return bad(c, "topk_group", "must be in 1..n_group");
  if (!strcmp(sf, "softmax")) hp->moe_score = DI_MOE_SOFTMAX;
  else if (!strcmp(sf, "sigmoid")) hp->moe_score = DI_MOE_SIGMOID;
  else return unsupported(c, "scoring_func", "is not supported (softmax, sigmoid are)");
  if (!strcmp(tm, "greedy")) hp->moe_topk = DI_MOE_GREEDY;
  else if (!strcmp(tm, "group_limited_greedy")) hp->moe_topk = DI_MOE_GROUP_LIMITED;
  else if (!strcmp(tm, "noaux_tc")) hp->moe_topk = DI_MOE_NOAUX_TC;
  else return unsupported(c, "topk_method", "is not supported (greedy, group_limited_greedy, noaux_tc are)");
  if (hp->moe_topk == DI_MOE_NOAUX_TC && hp->n_group > 1 && hp->n_expert / hp->n_group < 2)
    return bad(c, "n_group", "leaves fewer than 2 experts per group (noaux_tc sums each group's best two)");
  hp->moe_norm_topk = norm;
  hp->moe_scale = (float)scale;
  return DI_OK;
}

/* bos/eos ids (eos may be a list: its first entry); -1 when absent. */
static void read_special_ids(cfgr *c, di_hparams *hp) {
  json_t *b = take(c, "bos_token_id"), *e = take(c, "eos_token_id");
  hp->bos_id = json_is_integer(b) ? (int)json_integer_value(b) : -1;
  hp->eos_id = json_is_integer(e) ? (int)json_integer_value(e) : -1;
  if (json_is_array(e) && json_array_size(e) && json_is_integer(json_array_get(e, 0)))
    hp->eos_id = (int)json_integer_value(json_array_get(e, 0));
}

static di_code read_text_config(cfgr *c, const di_arch_desc *ad, di_hparams *hp, di_status *st) {
  di_code rc;
  const char *path = c->path;
  if ((rc = get_int(c, "hidden_size", &hp->n_embd, true)) || (rc = get_int(c, "num_hidden_layers", &hp->n_layer, true)) ||
      (rc = get_int(c, "intermediate_size", &hp->n_ff, true)) ||
      (rc = get_int(c, "num_attention_heads", &hp->n_head, true)) || (rc = get_int(c, "vocab_size", &hp->n_vocab, true)))
    return rc;
  if (hp->n_head <= 0 || hp->n_embd <= 0 || hp->n_layer <= 0)
    return di_errorf(st, DI_ERR_FORMAT, "%s/config.json: sizes must be positive", path);
  hp->n_head_kv = hp->n_head;
  hp->head_dim = hp->n_embd / hp->n_head;
  hp->n_ctx_train = 2048;
  hp->rms_eps = 1e-6f;
  if ((rc = get_int(c, "num_key_value_heads", &hp->n_head_kv, false)) || (rc = get_int(c, "head_dim", &hp->head_dim, false)) ||
      (rc = get_int(c, "max_position_embeddings", &hp->n_ctx_train, false)) ||
      (rc = get_int(c, "sliding_window", &hp->sliding_window, false)) || (rc = get_float(c, "rms_norm_eps", &hp->rms_eps)) ||
      (rc = get_float(c, "attn_logit_softcapping", &hp->attn_softcap)) ||
      (rc = get_float(c, "final_logit_softcapping", &hp->final_softcap)) || (rc = read_act(c, ad)))
    return rc;
  if (hp->n_head_kv <= 0 || hp->n_head % hp->n_head_kv != 0)
    return bad(c, "num_key_value_heads", "must divide num_attention_heads");
  if (hp->attn_kind == DI_ATTN_MLA && (rc = read_mla_moe(c, hp))) return rc;
  float qpas = 0;
  if ((rc = get_float(c, "query_pre_attn_scalar", &qpas))) return rc;
  if (qpas > 0) hp->attn_scale = 1.0f / sqrtf(qpas);
  bool flag = false;
  if ((rc = get_bool(c, "attention_bias", &flag))) return rc;
  if (flag) return unsupported(c, "attention_bias", "true is not supported (biases on every projection)");
  if ((rc = get_bool(c, "mlp_bias", &flag))) return rc;
  if (flag) return unsupported(c, "mlp_bias", "true is not supported");
  if ((rc = get_bool(c, "use_bidirectional_attention", &flag))) return rc;
  if (flag) return unsupported(c, "use_bidirectional_attention", "true is not supported");
  hp->tied_output = ad->tied_default_hf;
  if ((rc = get_bool(c, "tie_word_embeddings", &hp->tied_output))) return rc;
  bool any_sliding = false, any_full = true;
  if ((rc = read_layer_kinds(c, ad, hp, &any_sliding, &any_full))) return rc;

  /* RoPE: global (full-attention) and local (sliding-window) parameter sets */
  if (hp->attn_kind != DI_ATTN_MLA) hp->rope_dim = hp->head_dim; /* MLA: qk_rope_head_dim */
  rope_spec full = {0}, slide = {0}, flat = {0};
  bool has_full = false, has_slide = false;
  json_t *rs = take(c, "rope_scaling"), *rp = take(c, "rope_parameters");
  if (rs && rp) return unsupported(c, "rope_scaling", "given together with rope_parameters");
  if (rs && !json_is_object(rs)) return bad(c, "rope_scaling", "must be an object");
  if (rp && !json_is_object(rp)) return bad(c, "rope_parameters", "must be an object");
  json_t *per_type_full = rp ? json_object_get(rp, "full_attention") : NULL;
  json_t *per_type_slide = rp ? json_object_get(rp, "sliding_attention") : NULL;
  if (per_type_full || per_type_slide) {
    cfgr pc;
    cfgr_init(&pc, rp, path, "rope_parameters.", st);
    take(&pc, "full_attention");
    take(&pc, "sliding_attention");
    rc = cfgr_finish(&pc);
    cfgr_done(&pc);
    if (rc) return rc;
    if (per_type_full && (rc = read_rope(per_type_full, path, "rope_parameters.full_attention.", hp->n_ctx_train, &full, st)))
      return rc;
    if (per_type_slide &&
        (rc = read_rope(per_type_slide, path, "rope_parameters.sliding_attention.", hp->n_ctx_train, &slide, st)))
      return rc;
    has_full = per_type_full != NULL;
    has_slide = per_type_slide != NULL;
    if (any_full && !has_full) return bad(c, "rope_parameters", "has no full_attention entry");
    if (any_sliding && !has_slide) return bad(c, "rope_parameters", "has no sliding_attention entry");
  } else {
    if ((rs || rp) && (rc = read_rope(rs ? rs : rp, path, rs ? "rope_scaling." : "rope_parameters.", hp->n_ctx_train, &flat, st)))
      return rc;
    full = flat;
    has_full = true;
  }
  double theta = ad->rope_theta_hf > 0 ? ad->rope_theta_hf : 10000;
  bool has_theta = false;
  if ((rc = get_num(c, "rope_theta", &theta, &has_theta))) return rc;
  if (has_full && full.has_theta && has_theta && full.theta != theta)
    return bad(c, "rope_theta", "disagrees with rope_parameters.rope_theta");
  if (!full.has_theta) full.theta = theta;
  hp->rope_base = (float)full.theta;
  apply_rope(hp, &full);
  if (hp->attn_kind == DI_ATTN_MLA) {
    /* DeepSeek's softmax scale: under YaRN times mscale(factor, mscale_all_dim)^2 */
    double scale = 1.0 / sqrt((double)hp->head_dim);
    if (full.scaling == DI_ROPE_SCALE_YARN && full.has_mscale_all_dim && full.mscale_all_dim != 0 && full.factor > 1) {
      double ms = 0.1 * full.mscale_all_dim * log(full.factor) + 1.0;
      scale *= ms * ms;
    }
    hp->attn_scale = (float)scale;
  }
  /* Sliding layers: gemma3 4.x gives their base apart and leaves them
   * unscaled; 5.x spells both sets out; other models use one set for all. */
  double local = ad->rope_base_local > 0 ? ad->rope_base_local : full.theta;
  bool has_local = false;
  if ((rc = get_num(c, "rope_local_base_freq", &local, &has_local))) return rc;
  if (has_slide) {
    if (has_local && slide.has_theta && slide.theta != local)
      return bad(c, "rope_local_base_freq", "disagrees with rope_parameters.sliding_attention.rope_theta");
    hp->rope_base_local = (float)(slide.has_theta ? slide.theta : local);
    if (slide.scaling == DI_ROPE_SCALE_NONE) hp->rope_local_unscaled = full.scaling != DI_ROPE_SCALE_NONE;
    else if (!same_scaling(&slide, &full))
      return unsupported(c, "rope_parameters.sliding_attention", "a scaling other than none or the full layers' one");
  } else if (ad->swa_pattern > 0) {
    hp->rope_base_local = (float)local;
    hp->rope_local_unscaled = true;
  } else {
    if (has_local) return unsupported(c, "rope_local_base_freq", "not used by this architecture");
    hp->rope_base_local = hp->rope_base;
  }

  read_special_ids(c, hp);
  return cfgr_finish(c);
}

/* ---- DeepSeek-V4 ----
 * transformers' DeepseekV4Config with its defaults and legacy spellings
 * (compress_ratios, compress_rate_csa/hca, num_hash_layers, qk_rope_head_dim,
 * flat rope_scaling / rope_parameters or the nested {main, compress} one). */

static const char *const v4_attn_names[] = {"sliding_attention", "compressed_sparse_attention",
                                            "heavily_compressed_attention"};

static di_code v4_int(cfgr *c, const char *key, int *out, int dflt, int lo) {
  *out = dflt;
  di_code rc = get_int(c, key, out, false);
  if (!rc && *out < lo) {
    char what[64];
    snprintf(what, sizeof what, "must be at least %d", lo);
    return bad(c, key, what);
  }
  return rc;
}

static di_code v4_layer_types(cfgr *c, di_hparams *hp, int csa, int hca) {
  const int n = hp->n_layer;
  json_t *lt = take(c, "layer_types"), *legacy = take(c, "compress_ratios");
  if (lt && (!json_is_array(lt) || (int)json_array_size(lt) < n))
    return bad(c, "layer_types", "must be an array with an entry per layer (num_hidden_layers)");
  if (!lt && legacy && (!json_is_array(legacy) || (int)json_array_size(legacy) < n))
    return bad(c, "compress_ratios", "must be an array with an entry per layer (num_hidden_layers)");
  for (int i = 0; i < n; i++) {
    int k = -1;
    if (lt) {
      const char *s = json_string_value(json_array_get(lt, (size_t)i));
      for (int j = 0; s && j < 3; j++)
        if (!strcmp(s, v4_attn_names[j])) k = j;
      if (k < 0)
        return unsupported(c, "layer_types", "entries must be sliding_attention, compressed_sparse_attention or "
                                             "heavily_compressed_attention");
    } else if (legacy) {
      json_t *v = json_array_get(legacy, (size_t)i);
      int r = json_is_integer(v) ? (int)json_integer_value(v) : -1;
      k = r == 0 ? DI_V4_SWA : r == 4 ? DI_V4_CSA : r == 128 ? DI_V4_HCA : -1;
      if (k < 0) return unsupported(c, "compress_ratios", "entries must be 0, 4 or 128");
    } else { /* V4-Pro's default: 2 HCA, then CSA / HCA interleaved */
      k = i < 2 ? DI_V4_HCA : ((i - 2) % 2 ? DI_V4_CSA : DI_V4_HCA);
    }
    hp->v4.attn[i] = (uint8_t)k;
  }
  (void)csa, (void)hca;
  return DI_OK;
}

static di_code v4_mlp_types(cfgr *c, di_hparams *hp) {
  const int n = hp->n_layer;
  int n_hash = 3;
  json_t *mt = take(c, "mlp_layer_types");
  di_code rc = get_int(c, "num_hash_layers", &n_hash, false);
  if (rc) return rc;
  if (mt && (!json_is_array(mt) || (int)json_array_size(mt) < n))
    return bad(c, "mlp_layer_types", "must be an array with an entry per layer (num_hidden_layers)");
  for (int i = 0; i < n; i++) {
    if (!mt) {
      hp->v4.hash[i] = i < n_hash;
      continue;
    }
    const char *s = json_string_value(json_array_get(mt, (size_t)i));
    if (s && !strcmp(s, "hash_moe")) hp->v4.hash[i] = true;
    else if (s && !strcmp(s, "moe")) hp->v4.hash[i] = false;
    else return unsupported(c, "mlp_layer_types", "entries must be hash_moe or moe");
  }
  return DI_OK;
}

/* A rope object without its partial_rotary_factor (V4 rotates the trailing
 * qk_rope dims; the factor is checked against the top-level one). */
static di_code v4_rope(cfgr *c, json_t *obj, const char *where, double partial, int max_pos, rope_spec *r) {
  json_t *cp = json_copy(obj);
  if (!cp) return di_errorf(c->st, DI_ERR_NOMEM, "out of memory");
  json_t *pf = json_object_get(cp, "partial_rotary_factor");
  di_code rc = DI_OK;
  if (pf && (!json_is_number(pf) || fabs(json_number_value(pf) - partial) > 1e-12)) {
    char k[96];
    snprintf(k, sizeof k, "%spartial_rotary_factor", where);
    rc = bad(c, k, "disagrees with partial_rotary_factor");
  }
  json_object_del(cp, "partial_rotary_factor");
  if (!rc) rc = read_rope(cp, c->path, where, max_pos, r, c->st);
  json_decref(cp);
  return rc;
}

static di_code read_v4(cfgr *c, di_hparams *hp) {
  di_code rc;
  int n_kv = 1, n_shared = 1, nextn = 0, rate_csa = 4, rate_hca = 128, qk_rope = 0;
  double partial = 0, scale = 1.5, theta = 10000, ctheta = 160000, limit = 10, eps = 1e-6;
  bool has_partial = false, has_qk_rope = json_object_get(c->obj, "qk_rope_head_dim") != NULL, flag = false;
  hp->rms_eps = 1e-6f;
  if ((rc = get_int(c, "hidden_size", &hp->n_embd, true)) || (rc = get_int(c, "num_hidden_layers", &hp->n_layer, true)) ||
      (rc = get_int(c, "num_attention_heads", &hp->n_head, true)) || (rc = get_int(c, "vocab_size", &hp->n_vocab, true)) ||
      (rc = v4_int(c, "num_key_value_heads", &n_kv, 1, 1)) || (rc = v4_int(c, "head_dim", &hp->head_dim, 512, 2)) ||
      (rc = v4_int(c, "q_lora_rank", &hp->q_lora_rank, 1024, 1)) ||
      (rc = v4_int(c, "n_routed_experts", &hp->n_expert, 256, 1)) ||
      (rc = v4_int(c, "num_experts_per_tok", &hp->n_expert_used, 6, 1)) ||
      (rc = v4_int(c, "moe_intermediate_size", &hp->n_ff_exp, 2048, 1)) ||
      (rc = v4_int(c, "n_shared_experts", &n_shared, 1, 0)) ||
      (rc = v4_int(c, "max_position_embeddings", &hp->n_ctx_train, 1048576, 1)) ||
      (rc = v4_int(c, "hc_mult", &hp->v4.hc_mult, 4, 1)) ||
      (rc = v4_int(c, "hc_sinkhorn_iters", &hp->v4.hc_iters, 20, 1)) ||
      (rc = v4_int(c, "sliding_window", &hp->v4.window, 128, 1)) || (rc = v4_int(c, "o_groups", &hp->v4.o_groups, 8, 1)) ||
      (rc = v4_int(c, "o_lora_rank", &hp->v4.o_lora_rank, 1024, 1)) ||
      (rc = v4_int(c, "index_n_heads", &hp->v4.idx_heads, 64, 1)) ||
      (rc = v4_int(c, "index_head_dim", &hp->v4.idx_dim, 128, 2)) ||
      (rc = v4_int(c, "index_topk", &hp->v4.idx_topk, 512, 1)) ||
      (rc = get_int(c, "num_nextn_predict_layers", &nextn, false)) ||
      (rc = get_int(c, "qk_rope_head_dim", &qk_rope, false)) ||
      (rc = get_num(c, "partial_rotary_factor", &partial, &has_partial)) ||
      (rc = get_num(c, "routed_scaling_factor", &scale, NULL)) || (rc = get_num(c, "rope_theta", &theta, NULL)) ||
      (rc = get_num(c, "compress_rope_theta", &ctheta, NULL)) || (rc = get_num(c, "swiglu_limit", &limit, NULL)) ||
      (rc = get_num(c, "hc_eps", &eps, NULL)) || (rc = get_float(c, "rms_norm_eps", &hp->rms_eps)) ||
      (rc = get_int(c, "compress_rate_csa", &rate_csa, false)) || (rc = get_int(c, "compress_rate_hca", &rate_hca, false)) ||
      (rc = read_act(c, di_arch_find_hf("deepseek_v4"))))
    return rc;
  if (hp->n_head <= 0 || hp->n_embd <= 0 || hp->n_layer <= 0)
    return di_errorf(c->st, DI_ERR_FORMAT, "%s/config.json: sizes must be positive", c->path);
  if (nextn < 0) return bad(c, "num_nextn_predict_layers", "must be >= 0");
  hp->n_nextn = nextn; /* the MTP block, bound if the checkpoint has its weights (--spec mtp) */
  if (hp->n_layer > DI_V4_MAX_LAYERS) return unsupported(c, "num_hidden_layers", "over 256 layers");
  if (n_kv != 1) return unsupported(c, "num_key_value_heads", "DeepSeek-V4 has one latent KV head (1)");
  if (n_shared != 1) return unsupported(c, "n_shared_experts", "transformers' DeepSeek-V4 has exactly one shared expert");
  if (hp->n_expert > DI_MOE_MAX_EXPERTS) return unsupported(c, "n_routed_experts", "over the limit of 1024");
  if (hp->n_expert_used > hp->n_expert) return bad(c, "num_experts_per_tok", "must be in 1..n_routed_experts");
  json_t *cr = take(c, "compress_rates");
  if (cr) {
    if (!json_is_object(cr)) return bad(c, "compress_rates", "must be an object");
    cfgr rc_ = {0};
    cfgr_init(&rc_, cr, c->path, "compress_rates.", c->st);
    rc = get_int(&rc_, "compressed_sparse_attention", &rate_csa, false);
    if (!rc) rc = get_int(&rc_, "heavily_compressed_attention", &rate_hca, false);
    if (!rc) rc = cfgr_finish(&rc_);
    cfgr_done(&rc_);
    if (rc) return rc;
  }
  /* one compressed row per `rate` positions; the pool's 16-position blocks and
   * the compressor's windows must meet */
  if (rate_csa < 2 || rate_csa > 4096) return bad(c, "compress_rates.compressed_sparse_attention", "must be in 2..4096");
  if (rate_hca < 2 || rate_hca > 4096) return bad(c, "compress_rates.heavily_compressed_attention", "must be in 2..4096");
  hp->v4.csa_rate = rate_csa, hp->v4.hca_rate = rate_hca;
  if ((rc = v4_layer_types(c, hp, rate_csa, rate_hca)) || (rc = v4_mlp_types(c, hp))) return rc;
  if (!has_partial) partial = has_qk_rope ? (double)qk_rope / hp->head_dim : 64.0 / 512.0;
  if (!(partial > 0 && partial <= 1)) return bad(c, "partial_rotary_factor", "must be in (0, 1]");
  if (hp->v4.hc_mult > 16) return unsupported(c, "hc_mult", "over 16 streams");
  hp->rope_dim = (int)(hp->head_dim * partial);
  if (has_qk_rope && qk_rope != hp->rope_dim) return bad(c, "qk_rope_head_dim", "disagrees with partial_rotary_factor");
  if (hp->rope_dim <= 0 || hp->rope_dim % 2 || hp->rope_dim > hp->head_dim || hp->rope_dim > hp->v4.idx_dim ||
      hp->rope_dim > 1024)
    return bad(c, "partial_rotary_factor", "must give an even rope dimension within head_dim, index_head_dim and 1024");
  if ((hp->n_head * hp->head_dim) % hp->v4.o_groups) return bad(c, "o_groups", "must divide num_attention_heads * head_dim");
  if (!(limit > 0)) return bad(c, "swiglu_limit", "must be positive");
  if (!(eps >= 0)) return bad(c, "hc_eps", "must be non-negative");
  const char *sf = "sqrtsoftplus";
  json_t *v;
  if ((v = take(c, "scoring_func")) && !(sf = json_string_value(v))) return bad(c, "scoring_func", "must be a string");
  if (!strcmp(sf, "sqrtsoftplus")) hp->moe_score = DI_MOE_SQRTSOFTPLUS;
  else if (!strcmp(sf, "sigmoid")) hp->moe_score = DI_MOE_SIGMOID;
  else return unsupported(c, "scoring_func", "is not supported for DeepSeek-V4 (sqrtsoftplus, sigmoid are)");
  /* transformers' V4 routers always normalize the chosen weights, whatever this says */
  if ((rc = get_bool(c, "norm_topk_prob", &flag))) return rc;
  /* training-only: router loss and jitter, and a field transformers maps onto moe_intermediate_size */
  take(c, "output_router_logits");
  take(c, "router_aux_loss_coef");
  take(c, "router_jitter_noise");
  int inter = hp->n_ff_exp;
  if ((rc = get_int(c, "intermediate_size", &inter, false))) return rc;
  if (inter != hp->n_ff_exp) return bad(c, "intermediate_size", "must equal moe_intermediate_size (transformers reads one)");
  if (take(c, "quantization_config") || take(c, "expert_dtype"))
    return unsupported(c, "quantization_config", "FP8/FP4 checkpoints are not supported yet; use BF16 or F32");
  flag = false;
  if ((rc = get_bool(c, "attention_bias", &flag))) return rc;
  if (flag) return unsupported(c, "attention_bias", "true is not supported");
  if ((rc = get_bool(c, "mlp_bias", &flag))) return rc;
  if (flag) return unsupported(c, "mlp_bias", "true is not supported");
  hp->tied_output = false;
  if ((rc = get_bool(c, "tie_word_embeddings", &hp->tied_output))) return rc;

  /* RoPE: sliding layers plain (rope_theta); CSA/HCA layers and both
   * compressors compress_rope_theta with the file's scaling, cos/sin unscaled
   * (attention_factor 1 unless given) */
  rope_spec comp = {0};
  json_t *rs = take(c, "rope_scaling"), *rp = take(c, "rope_parameters");
  if (rs && rp) return unsupported(c, "rope_scaling", "given together with rope_parameters");
  json_t *r = rs ? rs : rp;
  if (r && !json_is_object(r)) return bad(c, rs ? "rope_scaling" : "rope_parameters", "must be an object");
  json_t *main_ = r ? json_object_get(r, "main") : NULL, *cmp = r ? json_object_get(r, "compress") : NULL;
  if (main_ || cmp) {
    if (!json_is_object(main_) || !json_is_object(cmp))
      return bad(c, "rope_parameters", "must have both main and compress objects");
    rope_spec ms;
    if ((rc = v4_rope(c, main_, "rope_parameters.main.", partial, hp->n_ctx_train, &ms)) ||
        (rc = v4_rope(c, cmp, "rope_parameters.compress.", partial, hp->n_ctx_train, &comp)))
      return rc;
    if (ms.scaling != DI_ROPE_SCALE_NONE) return unsupported(c, "rope_parameters.main", "a scaling other than default");
    if (ms.has_theta) theta = ms.theta;
    if (comp.has_theta) ctheta = comp.theta;
  } else if (r) {
    json_t *cp = json_copy(r);
    json_object_del(cp, "rope_theta"); /* the compress branch's base is compress_rope_theta */
    rc = v4_rope(c, cp, rs ? "rope_scaling." : "rope_parameters.", partial, hp->n_ctx_train, &comp);
    json_decref(cp);
    if (rc) return rc;
  }
  if (comp.scaling == DI_ROPE_SCALE_YARN && !comp.has_attn_factor) comp.attn_factor = 1.0;
  if (comp.scaling != DI_ROPE_SCALE_NONE && comp.orig_ctx <= 0) comp.orig_ctx = hp->n_ctx_train;
  if (comp.scaling == DI_ROPE_SCALE_YARN && comp.factor == 0 && comp.orig_ctx > 0)
    comp.factor = (double)hp->n_ctx_train / comp.orig_ctx;
  apply_rope(hp, &comp);
  hp->rope_base = (float)ctheta;
  hp->rope_base_local = (float)theta;
  hp->rope_local_unscaled = true;
  hp->v4.rope_theta_main = (float)theta;
  hp->n_head_kv = 1;
  hp->n_ff = hp->n_ff_exp;
  hp->n_ff_shexp = hp->n_ff_exp;
  hp->n_expert_shared = 1;
  hp->moe_norm_topk = true;
  hp->moe_scale = (float)scale;
  hp->v4.swiglu_limit = (float)limit;
  hp->v4.hc_eps = (float)eps;
  hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
  read_special_ids(c, hp);
  return cfgr_finish(c);
}

/* The same ranges as for GGUF keys (model.c): a value outside them would
 * run into garbage or a huge allocation, so the key is named instead. */
static di_code check_ranges(const di_hparams *hp, const char *path, di_status *st) {
  const struct {
    const char *key;
    long long v, lo, hi;
  } ints[] = {
      {"hidden_size", hp->n_embd, 1, 1 << 20},
      {"num_hidden_layers", hp->n_layer, 1, 4096},
      {"intermediate_size", hp->n_ff, 1, 1 << 22},
      {"num_attention_heads", hp->n_head, 1, 4096},
      {"num_key_value_heads", hp->n_head_kv, 1, hp->n_head},
      {"head_dim", hp->head_dim, 1, 4096},
      {"vocab_size", hp->n_vocab, 1, 1 << 24},
      {"max_position_embeddings", hp->n_ctx_train, 1, 1 << 24},
      {"sliding_window", hp->sliding_window, 0, 1 << 24},
      {"bos_token_id", hp->bos_id, -1, (long long)hp->n_vocab - 1},
      {"eos_token_id", hp->eos_id, -1, (long long)hp->n_vocab - 1},
  };
  for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
    if (ints[i].v < ints[i].lo || ints[i].v > ints[i].hi)
      return di_errorf(st, DI_ERR_FORMAT, "%s/config.json: key %s = %lld is out of range [%lld, %lld]", path,
                       ints[i].key, ints[i].v, ints[i].lo, ints[i].hi);
  const struct {
    const char *key;
    double v, lo, hi;
  } flts[] = {
      {"rms_norm_eps", hp->rms_eps, 1e-30, 1},
      {"rope_theta", hp->rope_base, 1e-30, 1e12},
      {"rope_local_base_freq", hp->rope_base_local, 1e-30, 1e12},
      {"attn_logit_softcapping", hp->attn_softcap, 0, 1e6},
      {"final_logit_softcapping", hp->final_softcap, 0, 1e6},
  };
  for (size_t i = 0; i < sizeof flts / sizeof flts[0]; i++)
    if (!isfinite(flts[i].v) || flts[i].v < flts[i].lo || flts[i].v > flts[i].hi)
      return di_errorf(st, DI_ERR_FORMAT, "%s/config.json: key %s = %g is out of range [%g, %g]", path,
                       flts[i].key, flts[i].v, flts[i].lo, flts[i].hi);
  return DI_OK;
}

di_code di_hf_read_config(di_hparams *hp, json_t *cfg, const char *path, float *norm_offset, di_status *st) {
  if (!json_is_object(cfg)) return di_errorf(st, DI_ERR_FORMAT, "%s/config.json: not a JSON object", path);
  json_t *mt = json_object_get(cfg, "model_type");
  if (!json_is_string(mt)) return di_errorf(st, DI_ERR_FORMAT, "%s/config.json: missing key model_type", path);
  /* Multimodal configs nest the language model under text_config. */
  json_t *tc = json_object_get(cfg, "text_config");
  if (json_is_object(tc)) cfg = tc;
  const di_arch_desc *ad = di_arch_find_hf(json_string_value(mt));
  if (!ad)
    return di_errorf(st, DI_ERR_UNSUPPORTED, "%s/config.json: unknown model_type '%s'", path, json_string_value(mt));
  di_arch_apply(ad, hp);
  *norm_offset = ad->norm_offset_hf;
  /* HF applies rotate-half RoPE to unpermuted weights; DeepSeek's rope sub-head rotates adjacent pairs */
  hp->rope_type = ad->hf_rope_interleaved ? DI_ROPE_NORM : DI_ROPE_NEOX;
  cfgr c;
  cfgr_init(&c, cfg, path, "", st);
  take(&c, "model_type");
  di_code rc = ad->attn == DI_ATTN_DSV4 ? read_v4(&c, hp) : read_text_config(&c, ad, hp, st);
  cfgr_done(&c);
  return rc ? rc : check_ranges(hp, path, st);
}
