/* GGUF tokenizer metadata (tokenizer.ggml.*), turned into the same pipeline a
 * tokenizer.json would describe:
 *  - "llama": SentencePiece pieces + scores. Normalizer = prepend "▁" (if
 *    add_space_prefix) and replace " " by "▁"; model = score merging
 *    (llama.cpp SPM) with byte fallback; decoder = "▁"->" ", byte fallback,
 *    strip the prefix space.
 *  - "gpt2": byte-level BPE with merges; the split regexes are chosen by
 *    tokenizer.ggml.pre, spelled as in the models' tokenizer.json files.
 * CONTROL/UNKNOWN tokens become special added tokens, USER_DEFINED ones
 * non-special added tokens, exactly as HF lists them in added_tokens. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

static di_code oom(di_status *st) { return di_errorf(st, DI_ERR_NOMEM, "tokenizer: out of memory"); }

enum { TT_UNDEF = 0, TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER = 4, TT_UNUSED = 5, TT_BYTE = 6 };

static const char RE_GPT2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char RE_LLAMA3[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RE_QWEN2[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RE_DS3_CJK[] = "[\\x{4e00}-\\x{9fa5}\\x{3040}-\\x{309f}\\x{30a0}-\\x{30ff}]+";
static const char RE_DS3_MAIN[] =
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
    " ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RE_O200K[] =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

typedef struct {
  const char *names;          /* '|'-separated tokenizer.ggml.pre values */
  const char *re[3];
  bool ignore_merges;
} pre_entry;

static const pre_entry PRES[] = {
    {"llama3|llama-bpe|llama-v3|falcon3|pixtral|megrez", {RE_LLAMA3}, true},
    {"qwen2|qwen3|deepseek-r1-qwen|qwen35", {RE_QWEN2}, false},
    {"deepseek-v3", {"\\p{N}{1,3}", RE_DS3_CJK, RE_DS3_MAIN}, false},
    {"gpt-4o|o200k", {RE_O200K}, true},
    {"smollm|starcoder|refact|command-r", {"\\p{N}", RE_GPT2}, false},
    {"gpt-2|gpt2|default|phi-2|jina-es|jina-de|roberta-bpe|olmo", {RE_GPT2}, false},
    {NULL, {NULL}, false},
};

static bool name_in(const char *names, const char *name) {
  size_t n = strlen(name);
  for (const char *p = names; *p;) {
    const char *e = strchr(p, '|');
    size_t l = e ? (size_t)(e - p) : strlen(p);
    if (l == n && !memcmp(p, name, n)) return true;
    if (!e) break;
    p = e + 1;
  }
  return false;
}

static di_code add_pre_split(di_tokenizer *t, const char *re, di_status *st) {
  di_pre p = {.kind = DI_PRE_SPLIT, .behavior = DI_SPLIT_ISOLATED};
  if (!(p.re = di_tok_compile_regex(re, strlen(re), st, "tokenizer.ggml.pre"))) return DI_ERR_INTERNAL;
  di_pre *a = realloc(t->pres, (t->n_pres + 1) * sizeof *a);
  if (!a) {
    pcre2_code_free(p.re);
    return oom(st);
  }
  t->pres = a;
  t->pres[t->n_pres++] = p;
  return DI_OK;
}

static di_code add_norm(di_tokenizer *t, di_norm_kind k, const char *a, const char *b, di_status *st) {
  di_norm n = {.kind = k};
  if (a && !(n.a = strdup(a))) return oom(st);
  if (b && !(n.b = strdup(b))) {
    free(n.a);
    return oom(st);
  }
  n.alen = a ? strlen(a) : 0;
  n.blen = b ? strlen(b) : 0;
  di_norm *p = realloc(t->norms, (t->n_norms + 1) * sizeof *p);
  if (!p) {
    free(n.a);
    free(n.b);
    return oom(st);
  }
  t->norms = p;
  t->norms[t->n_norms++] = n;
  return DI_OK;
}

static int32_t get_id(const di_gguf *g, const char *key, int32_t n) {
  uint64_t v;
  if (!di_gguf_get_u64(g, key, &v) || v >= (uint64_t)n) return -1;
  return (int32_t)v;
}

static bool get_bool(const di_gguf *g, const char *key, bool def) {
  bool b;
  return di_gguf_get_bool(g, key, &b) ? b : def;
}

static int32_t arr_i32(const di_gguf_kv *kv, size_t i) {
  const unsigned char *p = kv->arr_data;
  switch (kv->arr_type) {
  case DI_GGUF_INT32:
  case DI_GGUF_UINT32: {
    int32_t v;
    memcpy(&v, p + 4 * i, 4);
    return v;
  }
  case DI_GGUF_INT8:
  case DI_GGUF_UINT8: return p[i];
  default: return TT_NORMAL;
  }
}

di_code di_tokenizer_from_gguf(const di_gguf *g, di_tokenizer **out, di_status *st) {
  *out = NULL;
  char *model = di_gguf_get_str(g, "tokenizer.ggml.model");
  if (!model) return di_errorf(st, DI_ERR_FORMAT, "tokenizer.ggml.model: missing");
  bool spm = !strcmp(model, "llama"), bpe = !strcmp(model, "gpt2");
  if (!spm && !bpe) {
    di_errorf(st, DI_ERR_UNSUPPORTED, "tokenizer.ggml.model: \"%s\" is not supported (llama, gpt2)", model);
    free(model);
    return DI_ERR_UNSUPPORTED;
  }
  free(model);
  const di_gguf_kv *toks = di_gguf_find(g, "tokenizer.ggml.tokens");
  if (!toks || toks->type != DI_GGUF_ARRAY || toks->arr_type != DI_GGUF_STRING || !toks->strs || toks->arr_n == 0)
    return di_errorf(st, DI_ERR_FORMAT, "tokenizer.ggml.tokens: missing or not a string array");
  if (toks->arr_n > (1u << 24)) return di_errorf(st, DI_ERR_FORMAT, "tokenizer.ggml.tokens: %llu entries is too many", (unsigned long long)toks->arr_n);
  int32_t n = (int32_t)toks->arr_n;
  const di_gguf_kv *types = di_gguf_find(g, "tokenizer.ggml.token_type");
  if (types && (types->type != DI_GGUF_ARRAY || types->arr_n != toks->arr_n ||
                (types->arr_type != DI_GGUF_INT32 && types->arr_type != DI_GGUF_UINT32)))
    return di_errorf(st, DI_ERR_FORMAT, "tokenizer.ggml.token_type: expected %d int32 entries", n);
  const di_gguf_kv *scores = di_gguf_find(g, "tokenizer.ggml.scores");
  if (spm && (!scores || scores->type != DI_GGUF_ARRAY || scores->arr_type != DI_GGUF_FLOAT32 || scores->arr_n != toks->arr_n))
    return di_errorf(st, DI_ERR_FORMAT, "tokenizer.ggml.scores: expected %d float32 entries", n);
  const di_gguf_kv *merges = di_gguf_find(g, "tokenizer.ggml.merges");
  if (bpe && (!merges || merges->type != DI_GGUF_ARRAY || merges->arr_type != DI_GGUF_STRING || !merges->strs))
    return di_errorf(st, DI_ERR_FORMAT, "tokenizer.ggml.merges: missing or not a string array");

  di_tokenizer *t = di_tok_alloc();
  if (!t) return oom(st);
  di_code rc = di_tok_set_vocab_size(t, n, st);
  t->model = spm ? DI_MODEL_SPM : DI_MODEL_BPE;
  t->byte_level = bpe;
  t->byte_fallback = spm;
  int32_t bos = get_id(g, "tokenizer.ggml.bos_token_id", n), eos = get_id(g, "tokenizer.ggml.eos_token_id", n);
  t->unk_id = get_id(g, "tokenizer.ggml.unknown_token_id", n);
  if (rc == DI_OK && spm && !(t->scores = malloc((size_t)n * sizeof *t->scores))) rc = oom(st);
  if (rc == DI_OK) t->added = calloc((size_t)n, sizeof *t->added);
  if (rc == DI_OK && !t->added) rc = oom(st);
  di_buf key = {0};
  for (int32_t id = 0; id < n && rc == DI_OK; id++) {
    const char *s = toks->strs[id].ptr;
    size_t sl = (size_t)toks->strs[id].len;
    size_t bad;
    if (!di_utf8_valid(s, sl, &bad)) {
      rc = di_errorf(st, DI_ERR_FORMAT, "tokenizer.ggml.tokens[%d]: invalid UTF-8 at byte %zu", id, bad);
      break;
    }
    if (spm) memcpy(&t->scores[id], (const char *)scores->arr_data + 4 * (size_t)id, 4);
    int tt = types ? arr_i32(types, (size_t)id) : (id == bos || id == eos || id == t->unk_id ? TT_CONTROL : TT_NORMAL);
    /* SentencePiece gives user-defined pieces score 0 (merged first); llama.cpp
     * stores -1000, which would merge them last */
    if (spm && tt == TT_USER) t->scores[id] = 0.0f;
    if (spm && tt == TT_USER && memchr(s, ' ', sl)) {
      /* llama.cpp's converter writes "▁" of user-defined pieces as " "; HF
       * matches them as "▁", so undo it for HF-identical ids */
      key.n = 0;
      for (size_t i = 0; i < sl && rc == DI_OK; i++)
        if (!(s[i] == ' ' ? di_buf_put(&key, "\xe2\x96\x81", 3) : di_buf_putc(&key, s[i]))) rc = oom(st);
      if (rc != DI_OK) break;
      s = key.p;
      sl = key.n;
    }
    uint32_t off;
    if (!di_tok_pool_add(t, s, sl, &off)) {
      rc = oom(st);
      break;
    }
    t->text_off[id] = off;
    t->text_len[id] = (uint32_t)sl;
    t->flags[id] |= DI_TF_PRESENT;
    if (!di_smap_put(&t->text_map, off, (uint32_t)sl, id, NULL)) rc = oom(st);
    if (tt == TT_CONTROL || tt == TT_UNKNOWN || tt == TT_USER) {
      if (!sl) continue;
      di_added *a = &t->added[t->n_added];
      *a = (di_added){.id = id, .off = off, .len = (uint32_t)sl, .special = tt != TT_USER};
      t->flags[id] |= DI_TF_ADDED | (a->special ? DI_TF_SPECIAL | DI_TF_CONTROL : 0);
      if (!di_trie_add(&t->trie_raw, t->pool + off, (uint32_t)sl, (int32_t)t->n_added)) rc = oom(st);
      t->n_added++;
      /* HF's SentencePiece BPE keeps user-defined pieces in the model vocab
       * (merges reach "▁▁" when the added token is not matched) */
      if (!(spm && tt == TT_USER)) continue;
    }
    if (tt == TT_BYTE && spm) continue; /* byte pieces are reached through byte fallback only */
    /* model key: raw bytes for byte-level vocabularies */
    key.n = 0;
    bool ok = true;
    if (bpe) {
      for (size_t i = 0; i < sl && ok;) {
        int l;
        int b = di_bytelevel_byte(di_utf8_decode(s + i, sl - i, &l));
        if (b < 0) ok = false;
        else ok = di_buf_putc(&key, (char)b) || (rc = oom(st), false);
        i += (size_t)l;
      }
      if (!ok) continue;
    } else if (!di_buf_put(&key, s, sl)) {
      rc = oom(st);
      break;
    }
    if (!di_tok_pool_add(t, key.p ? key.p : "", key.n, &off) ||
        !di_smap_put(&t->model_map, off, (uint32_t)key.n, id, NULL)) {
      rc = oom(st);
      break;
    }
    if (bpe && key.n == 1) t->byte_sym[(unsigned char)key.p[0]] = id;
  }
  free(key.p);
  /* merges */
  if (rc == DI_OK && bpe) {
    if (!di_pmap_init(&t->merges, merges->arr_n)) rc = oom(st);
    di_buf cat = {0};
    for (uint64_t i = 0; i < merges->arr_n && rc == DI_OK; i++) {
      const char *s = merges->strs[i].ptr;
      size_t sl = (size_t)merges->strs[i].len;
      const char *sp = sl > 1 ? memchr(s + 1, ' ', sl - 1) : NULL;
      if (!sp) {
        rc = di_errorf(st, DI_ERR_FORMAT, "tokenizer.ggml.merges[%llu]: not \"a b\"", (unsigned long long)i);
        break;
      }
      size_t al = (size_t)(sp - s), bl = sl - al - 1;
      cat.n = 0;
      if (!di_buf_put(&cat, s, al) || !di_buf_put(&cat, sp + 1, bl)) {
        rc = oom(st);
        break;
      }
      int32_t ia = di_smap_get(&t->text_map, s, al), ib = di_smap_get(&t->text_map, sp + 1, bl);
      int32_t iab = di_smap_get(&t->text_map, cat.p, cat.n);
      if (ia < 0 || ib < 0 || iab < 0)
        rc = di_errorf(st, DI_ERR_FORMAT, "tokenizer.ggml.merges[%llu]: refers to a token not in the vocab", (unsigned long long)i);
      else if (!di_pmap_put(&t->merges, ia, ib, (int32_t)i, iab))
        rc = oom(st);
    }
    free(cat.p);
  }
  bool add_space = get_bool(g, "tokenizer.ggml.add_space_prefix", spm);
  if (rc == DI_OK && spm) {
    if (add_space) rc = add_norm(t, DI_NORM_PREPEND, "\xe2\x96\x81", NULL, st);
    if (rc == DI_OK) rc = add_norm(t, DI_NORM_REPLACE, " ", "\xe2\x96\x81", st);
    t->dec_byte_fallback = true;
    di_dec_replace *r = calloc(1, sizeof *r);
    if (r && (r->from = strdup("\xe2\x96\x81")) && (r->to = strdup(" "))) {
      r->flen = 3;
      r->tlen = 1;
      t->dec_repl = r;
      t->n_dec_repl = 1;
    } else if (r) {
      free(r->from);
      free(r);
      rc = oom(st);
    } else {
      rc = oom(st);
    }
    if (add_space) {
      t->dec_strip_start = 1;
      t->dec_strip_char = ' ';
    }
  }
  if (rc == DI_OK && bpe) {
    char *pre = di_gguf_get_str(g, "tokenizer.ggml.pre");
    const char *pn = pre ? pre : "default";
    const pre_entry *e = PRES;
    while (e->names && !name_in(e->names, pn)) e++;
    if (!e->names) {
      rc = di_errorf(st, DI_ERR_UNSUPPORTED, "tokenizer.ggml.pre: \"%s\" is not supported", pn);
    } else {
      for (int k = 0; k < 3 && e->re[k] && rc == DI_OK; k++) rc = add_pre_split(t, e->re[k], st);
      t->ignore_merges = e->ignore_merges;
    }
    free(pre);
    t->dec_bytelevel = true;
  }
  /* post-processor, bos/eos, templates */
  t->bos_id = bos;
  if (rc == DI_OK && bos >= 0 && get_bool(g, "tokenizer.ggml.add_bos_token", spm)) {
    t->post = malloc(3 * sizeof *t->post);
    if (!t->post) rc = oom(st);
    else {
      t->post[t->n_post++] = bos;
      t->post_has_bos = true;
    }
  }
  if (rc == DI_OK && (t->n_post || (eos >= 0 && get_bool(g, "tokenizer.ggml.add_eos_token", false)))) {
    if (!t->post && !(t->post = malloc(3 * sizeof *t->post))) rc = oom(st);
    else {
      t->post[t->n_post++] = -1;
      if (eos >= 0 && get_bool(g, "tokenizer.ggml.add_eos_token", false)) t->post[t->n_post++] = eos;
    }
  }
  static const char *const ids[] = {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                                    "tokenizer.ggml.eom_token_id", NULL};
  for (int k = 0; rc == DI_OK && ids[k]; k++) di_tok_add_eos(t, get_id(g, ids[k], n));
  static const char *const eot_names[] = {"<|eot_id|>", "<|eom_id|>", "<end_of_turn>", "<|im_end|>",
                                          "<|return|>", "<|call|>", "<|endoftext|>", "<|end_of_text|>", NULL};
  for (int k = 0; rc == DI_OK && eot_names[k]; k++) {
    int32_t id = di_smap_get(&t->text_map, eot_names[k], strlen(eot_names[k]));
    if (id >= 0 && (t->flags[id] & DI_TF_ADDED)) di_tok_add_eos(t, id);
  }
  int32_t pad = get_id(g, "tokenizer.ggml.padding_token_id", n);
  int32_t sp_ids[4] = {bos, eos, pad, t->unk_id};
  for (int k = 0; rc == DI_OK && k < 4; k++)
    if (sp_ids[k] >= 0 && !(t->special_text[k] = strndup(t->pool + t->text_off[sp_ids[k]], t->text_len[sp_ids[k]])))
      rc = oom(st);
  for (size_t i = 0; rc == DI_OK && i < di_gguf_n_kv(g); i++) {
    const di_gguf_kv *kv = di_gguf_kv_at(g, i);
    if (strncmp(kv->key, "tokenizer.chat_template", 23) != 0 || kv->type != DI_GGUF_STRING) continue;
    const char *name = kv->key[23] == '.' ? kv->key + 24 : "default";
    if (kv->key[23] && kv->key[23] != '.') continue;
    if (di_tok_add_template(t, name, kv->v.str.ptr, (size_t)kv->v.str.len, true) != DI_OK) rc = oom(st);
  }
  if (rc == DI_OK) rc = di_tok_finish(t, st);
  if (rc != DI_OK) {
    di_tokenizer_free(t);
    return rc;
  }
  *out = t;
  return DI_OK;
}
