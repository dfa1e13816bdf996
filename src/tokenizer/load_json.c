/* tokenizer.json / tokenizer_config.json / generation_config.json loading.
 * Every error names the JSON key (path) at fault. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

static di_code oom(di_status *st) { return di_errorf(st, DI_ERR_NOMEM, "tokenizer: out of memory"); }

static const char *jstr(json_t *o, const char *k) {
  json_t *v = json_object_get(o, k);
  return json_is_string(v) ? json_string_value(v) : NULL;
}

static bool jbool(json_t *o, const char *k, bool def) {
  json_t *v = json_object_get(o, k);
  return json_is_boolean(v) ? json_is_true(v) : def;
}

static char *dupn(const char *s, size_t n) {
  char *p = malloc(n + 1);
  if (p) {
    memcpy(p, s, n);
    p[n] = 0;
  }
  return p;
}

/* pattern: {"String": s} or {"Regex": r}; sets exactly one of *lit / *re */
static di_code parse_pattern(json_t *pat, const char *where, char **lit, size_t *litlen,
                             pcre2_code **re, di_status *st) {
  json_t *s = json_object_get(pat, "String"), *r = json_object_get(pat, "Regex");
  if (json_is_string(s)) {
    *lit = dupn(json_string_value(s), json_string_length(s));
    *litlen = json_string_length(s);
    return *lit ? DI_OK : oom(st);
  }
  if (json_is_string(r)) {
    *re = di_tok_compile_regex(json_string_value(r), json_string_length(r), st, where);
    return *re ? DI_OK : DI_ERR_FORMAT;
  }
  return di_errorf(st, DI_ERR_FORMAT, "%s.pattern: expected {\"String\"} or {\"Regex\"}", where);
}

/* ---- normalizers ---- */

static di_code add_norm(di_tokenizer *t, di_norm n, di_status *st) {
  di_norm *p = realloc(t->norms, (t->n_norms + 1) * sizeof *p);
  if (!p) return oom(st);
  t->norms = p;
  t->norms[t->n_norms++] = n;
  return DI_OK;
}

static di_code parse_normalizer(di_tokenizer *t, json_t *j, const char *where, di_status *st) {
  if (json_is_null(j) || !j) return DI_OK;
  const char *type = jstr(j, "type");
  if (!type) return di_errorf(st, DI_ERR_FORMAT, "%s: missing \"type\"", where);
  di_norm n = {0};
  if (!strcmp(type, "Sequence")) {
    json_t *arr = json_object_get(j, "normalizers");
    if (!json_is_array(arr)) return di_errorf(st, DI_ERR_FORMAT, "%s.normalizers: expected an array", where);
    for (size_t i = 0; i < json_array_size(arr); i++) {
      char w[256];
      snprintf(w, sizeof w, "%s.normalizers[%zu]", where, i);
      di_code rc = parse_normalizer(t, json_array_get(arr, i), w, st);
      if (rc != DI_OK) return rc;
    }
    return DI_OK;
  }
  if (!strcmp(type, "NFC")) n.kind = DI_NORM_NFC;
  else if (!strcmp(type, "NFD")) n.kind = DI_NORM_NFD;
  else if (!strcmp(type, "NFKC")) n.kind = DI_NORM_NFKC;
  else if (!strcmp(type, "NFKD")) n.kind = DI_NORM_NFKD;
  else if (!strcmp(type, "Lowercase")) n.kind = DI_NORM_LOWER;
  else if (!strcmp(type, "StripAccents")) n.kind = DI_NORM_STRIP_ACCENTS;
  else if (!strcmp(type, "Strip")) {
    n.kind = DI_NORM_STRIP;
    n.left = jbool(j, "strip_left", true);
    n.right = jbool(j, "strip_right", true);
  } else if (!strcmp(type, "Prepend")) {
    const char *p = jstr(j, "prepend");
    if (!p) return di_errorf(st, DI_ERR_FORMAT, "%s.prepend: expected a string", where);
    n.kind = DI_NORM_PREPEND;
    n.alen = strlen(p);
    if (!(n.a = dupn(p, n.alen))) return oom(st);
  } else if (!strcmp(type, "Replace")) {
    const char *c = jstr(j, "content");
    if (!c) return di_errorf(st, DI_ERR_FORMAT, "%s.content: expected a string", where);
    n.kind = DI_NORM_REPLACE;
    di_code rc = parse_pattern(json_object_get(j, "pattern"), where, &n.a, &n.alen, &n.re, st);
    if (rc != DI_OK) return rc;
    n.blen = strlen(c);
    if (!(n.b = dupn(c, n.blen))) return oom(st);
  } else if (!strcmp(type, "Precompiled") && json_is_null(json_object_get(j, "precompiled_charsmap"))) {
    return DI_OK;
  } else {
    return di_errorf(st, DI_ERR_UNSUPPORTED, "%s: normalizer type \"%s\" is not supported", where, type);
  }
  return add_norm(t, n, st);
}

/* ---- pre-tokenizers ---- */

static const char GPT2_RE[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static di_code parse_behavior(json_t *j, const char *where, di_split_behavior *b, di_status *st) {
  const char *s = jstr(j, "behavior");
  if (!s) s = "Isolated";
  if (!strcmp(s, "Removed")) *b = DI_SPLIT_REMOVED;
  else if (!strcmp(s, "Isolated")) *b = DI_SPLIT_ISOLATED;
  else if (!strcmp(s, "MergedWithPrevious")) *b = DI_SPLIT_MERGED_PREV;
  else if (!strcmp(s, "MergedWithNext")) *b = DI_SPLIT_MERGED_NEXT;
  else if (!strcmp(s, "Contiguous")) *b = DI_SPLIT_CONTIGUOUS;
  else return di_errorf(st, DI_ERR_FORMAT, "%s.behavior: unknown \"%s\"", where, s);
  return DI_OK;
}

static di_code add_pre(di_tokenizer *t, di_pre p, di_status *st) {
  di_pre *a = realloc(t->pres, (t->n_pres + 1) * sizeof *a);
  if (!a) {
    if (p.re) pcre2_code_free(p.re);
    free(p.lit);
    return oom(st);
  }
  t->pres = a;
  t->pres[t->n_pres++] = p;
  return DI_OK;
}

static di_code parse_pretok(di_tokenizer *t, json_t *j, const char *where, di_status *st) {
  if (json_is_null(j) || !j) return DI_OK;
  const char *type = jstr(j, "type");
  if (!type) return di_errorf(st, DI_ERR_FORMAT, "%s: missing \"type\"", where);
  if (t->byte_level)
    return di_errorf(st, DI_ERR_UNSUPPORTED, "%s: a pre-tokenizer after ByteLevel is not supported", where);
  di_pre p = {0};
  di_code rc = DI_OK;
  if (!strcmp(type, "Sequence")) {
    json_t *arr = json_object_get(j, "pretokenizers");
    if (!json_is_array(arr)) return di_errorf(st, DI_ERR_FORMAT, "%s.pretokenizers: expected an array", where);
    for (size_t i = 0; i < json_array_size(arr); i++) {
      char w[256];
      snprintf(w, sizeof w, "%s.pretokenizers[%zu]", where, i);
      if ((rc = parse_pretok(t, json_array_get(arr, i), w, st)) != DI_OK) return rc;
    }
    return DI_OK;
  }
  if (!strcmp(type, "Split")) {
    p.kind = DI_PRE_SPLIT;
    p.invert = jbool(j, "invert", false);
    if ((rc = parse_behavior(j, where, &p.behavior, st)) != DI_OK) return rc;
    rc = parse_pattern(json_object_get(j, "pattern"), where, &p.lit, &p.litlen, &p.re, st);
    if (rc != DI_OK) return rc;
  } else if (!strcmp(type, "ByteLevel")) {
    p.kind = DI_PRE_BYTELEVEL;
    p.add_prefix_space = jbool(j, "add_prefix_space", false);
    if (jbool(j, "use_regex", true) && !(p.re = di_tok_compile_regex(GPT2_RE, sizeof GPT2_RE - 1, st, where)))
      return DI_ERR_FORMAT;
    t->byte_level = true;
  } else if (!strcmp(type, "Digits")) {
    p.kind = DI_PRE_DIGITS;
    p.individual_digits = jbool(j, "individual_digits", false);
  } else if (!strcmp(type, "Metaspace")) {
    p.kind = DI_PRE_METASPACE;
    const char *r = jstr(j, "replacement");
    if (!r) r = "\xe2\x96\x81";
    p.litlen = strlen(r);
    if (!(p.lit = dupn(r, p.litlen))) return oom(st);
    p.ms_split = jbool(j, "split", true);
    const char *sch = jstr(j, "prepend_scheme");
    if (sch) p.prepend_scheme = !strcmp(sch, "first") ? 1 : !strcmp(sch, "never") ? 2 : 0;
    else p.prepend_scheme = jbool(j, "add_prefix_space", true) ? 0 : 2;
  } else if (!strcmp(type, "Punctuation")) {
    p.kind = DI_PRE_PUNCT;
    if ((rc = parse_behavior(j, where, &p.behavior, st)) != DI_OK) return rc;
  } else if (!strcmp(type, "Whitespace")) {
    p.kind = DI_PRE_WHITESPACE;
    static const char ws[] = "\\w+|[^\\w\\s]+";
    if (!(p.re = di_tok_compile_regex(ws, sizeof ws - 1, st, where))) return DI_ERR_FORMAT;
  } else if (!strcmp(type, "WhitespaceSplit")) {
    p.kind = DI_PRE_WSSPLIT;
  } else if (!strcmp(type, "BertPreTokenizer")) {
    p.kind = DI_PRE_BERT;
  } else {
    return di_errorf(st, DI_ERR_UNSUPPORTED, "%s: pre-tokenizer type \"%s\" is not supported", where, type);
  }
  return add_pre(t, p, st);
}

/* ---- decoders ---- */

static di_code add_repl(di_tokenizer *t, const char *from, size_t fl, const char *to, size_t tl,
                        di_status *st) {
  di_dec_replace *p = realloc(t->dec_repl, (t->n_dec_repl + 1) * sizeof *p);
  if (!p) return oom(st);
  t->dec_repl = p;
  di_dec_replace r = {dupn(from, fl), dupn(to, tl), fl, tl};
  if (!r.from || !r.to) {
    free(r.from);
    free(r.to);
    return oom(st);
  }
  t->dec_repl[t->n_dec_repl++] = r;
  return DI_OK;
}

static di_code parse_decoder(di_tokenizer *t, json_t *j, const char *where, bool *fused, di_status *st) {
  const char *type = jstr(j, "type");
  if (!type) return di_errorf(st, DI_ERR_FORMAT, "%s: missing \"type\"", where);
  if (!strcmp(type, "Sequence")) {
    json_t *arr = json_object_get(j, "decoders");
    if (!json_is_array(arr)) return di_errorf(st, DI_ERR_FORMAT, "%s.decoders: expected an array", where);
    for (size_t i = 0; i < json_array_size(arr); i++) {
      char w[256];
      snprintf(w, sizeof w, "%s.decoders[%zu]", where, i);
      di_code rc = parse_decoder(t, json_array_get(arr, i), w, fused, st);
      if (rc != DI_OK) return rc;
    }
    return DI_OK;
  }
  if (!strcmp(type, "ByteLevel")) {
    t->dec_bytelevel = true;
    *fused = true;
  } else if (!strcmp(type, "ByteFallback")) {
    t->dec_byte_fallback = true;
  } else if (!strcmp(type, "Fuse")) {
    *fused = true;
  } else if (!strcmp(type, "Replace")) {
    const char *c = jstr(j, "content");
    const char *s = jstr(json_object_get(j, "pattern"), "String");
    if (!c || !s) return di_errorf(st, DI_ERR_UNSUPPORTED, "%s: only Replace with a String pattern is supported", where);
    return add_repl(t, s, strlen(s), c, strlen(c), st);
  } else if (!strcmp(type, "Strip")) {
    const char *c = jstr(j, "content");
    json_t *a = json_object_get(j, "start"), *b = json_object_get(j, "stop");
    if (!c || !json_is_integer(a) || (b && !json_is_integer(b)))
      return di_errorf(st, DI_ERR_FORMAT, "%s: Strip needs content/start/stop", where);
    if ((b && json_integer_value(b) != 0) || !*fused || json_integer_value(a) < 0 || json_integer_value(a) > 64)
      return di_errorf(st, DI_ERR_UNSUPPORTED, "%s: only a leading Strip after Fuse is supported", where);
    int l;
    t->dec_strip_char = di_utf8_decode(c, strlen(c), &l);
    t->dec_strip_start = (int)json_integer_value(a);
  } else if (!strcmp(type, "Metaspace")) {
    const char *r = jstr(j, "replacement");
    if (!r) r = "\xe2\x96\x81";
    const char *sch = jstr(j, "prepend_scheme");
    bool strip = sch ? strcmp(sch, "never") != 0 : jbool(j, "add_prefix_space", true);
    t->dec_metaspace_first = strip;
    return add_repl(t, r, strlen(r), " ", 1, st);
  } else {
    return di_errorf(st, DI_ERR_UNSUPPORTED, "%s: decoder type \"%s\" is not supported", where, type);
  }
  return DI_OK;
}

/* ---- post-processor ---- */

static di_code post_push(di_tokenizer *t, int32_t v, di_status *st) {
  int32_t *p = realloc(t->post, (t->n_post + 1) * sizeof *p);
  if (!p) return oom(st);
  t->post = p;
  t->post[t->n_post++] = v;
  return DI_OK;
}

static di_code parse_post(di_tokenizer *t, json_t *j, const char *where, di_status *st) {
  if (!j || json_is_null(j)) return DI_OK;
  const char *type = jstr(j, "type");
  if (!type) return di_errorf(st, DI_ERR_FORMAT, "%s: missing \"type\"", where);
  di_code rc = DI_OK;
  if (!strcmp(type, "Sequence")) {
    json_t *arr = json_object_get(j, "processors");
    if (!json_is_array(arr)) return di_errorf(st, DI_ERR_FORMAT, "%s.processors: expected an array", where);
    for (size_t i = 0; i < json_array_size(arr) && rc == DI_OK; i++) {
      char w[256];
      snprintf(w, sizeof w, "%s.processors[%zu]", where, i);
      rc = parse_post(t, json_array_get(arr, i), w, st);
    }
    return rc;
  }
  if (!strcmp(type, "ByteLevel")) return DI_OK;
  if (t->n_post) return di_errorf(st, DI_ERR_UNSUPPORTED, "%s: more than one id-adding post-processor", where);
  if (!strcmp(type, "TemplateProcessing")) {
    json_t *single = json_object_get(j, "single"), *sp = json_object_get(j, "special_tokens");
    if (!json_is_array(single)) return di_errorf(st, DI_ERR_FORMAT, "%s.single: expected an array", where);
    bool seq = false;
    for (size_t i = 0; i < json_array_size(single) && rc == DI_OK; i++) {
      json_t *it = json_array_get(single, i);
      json_t *tok = json_object_get(it, "SpecialToken");
      if (json_object_get(it, "Sequence")) {
        seq = true;
        rc = post_push(t, -1, st);
        continue;
      }
      const char *name = jstr(tok, "id");
      json_t *ids = json_object_get(json_object_get(sp, name ? name : ""), "ids");
      if (!name || !json_is_array(ids))
        return di_errorf(st, DI_ERR_FORMAT, "%s.single[%zu]: unknown special token", where, i);
      for (size_t k = 0; k < json_array_size(ids) && rc == DI_OK; k++) {
        json_int_t v = json_integer_value(json_array_get(ids, k));
        if (v < 0 || v >= t->n_vocab)
          return di_errorf(st, DI_ERR_FORMAT, "%s.special_tokens[\"%s\"]: id %lld out of range", where, name, (long long)v);
        rc = post_push(t, (int32_t)v, st);
        if (i == 0 && k == 0 && v == t->bos_id) t->post_has_bos = true;
      }
    }
    if (rc == DI_OK && !seq) return di_errorf(st, DI_ERR_FORMAT, "%s.single: no Sequence entry", where);
    return rc;
  }
  if (!strcmp(type, "RobertaProcessing") || !strcmp(type, "BertProcessing")) {
    json_t *cls = json_object_get(j, "cls"), *sep = json_object_get(j, "sep");
    json_t *c1 = json_array_get(cls, 1), *s1 = json_array_get(sep, 1);
    if (!json_is_integer(c1) || !json_is_integer(s1))
      return di_errorf(st, DI_ERR_FORMAT, "%s: cls/sep must be [text, id]", where);
    if ((rc = post_push(t, (int32_t)json_integer_value(c1), st)) != DI_OK) return rc;
    if ((rc = post_push(t, -1, st)) != DI_OK) return rc;
    return post_push(t, (int32_t)json_integer_value(s1), st);
  }
  return di_errorf(st, DI_ERR_UNSUPPORTED, "%s: post-processor type \"%s\" is not supported", where, type);
}

/* ---- model ---- */

/* Model key of a vocab string: raw bytes for byte-level vocabularies.
 * Returns false when a byte-level string has an unmapped char (unreachable). */
static bool model_key(const di_tokenizer *t, const char *s, size_t n, di_buf *b) {
  b->n = 0;
  if (!t->byte_level) return di_buf_put(b, s, n);
  for (size_t i = 0; i < n;) {
    int l;
    int32_t cp = di_utf8_decode(s + i, n - i, &l);
    int by = di_bytelevel_byte(cp);
    if (by < 0) return false;
    di_buf_putc(b, (char)by);
    i += (size_t)l;
  }
  return true;
}

static di_code set_text(di_tokenizer *t, int32_t id, const char *s, size_t n, di_status *st) {
  uint32_t off;
  if (!di_tok_pool_add(t, s, n, &off)) return oom(st);
  t->text_off[id] = off;
  t->text_len[id] = (uint32_t)n;
  t->flags[id] |= DI_TF_PRESENT;
  if (!di_smap_put(&t->text_map, off, (uint32_t)n, id, NULL)) return oom(st);
  return DI_OK;
}

static di_code parse_model(di_tokenizer *t, json_t *m, json_t *added, di_status *st) {
  const char *type = jstr(m, "type");
  json_t *vocab = json_object_get(m, "vocab"), *merges = json_object_get(m, "merges");
  if (!type && merges) type = "BPE";
  if (!type) return di_errorf(st, DI_ERR_FORMAT, "model.type: missing");
  if (strcmp(type, "BPE") != 0)
    return di_errorf(st, DI_ERR_UNSUPPORTED, "model.type: \"%s\" is not supported (BPE only)", type);
  if (!json_is_object(vocab)) return di_errorf(st, DI_ERR_FORMAT, "model.vocab: expected an object");
  if (!json_is_array(merges)) return di_errorf(st, DI_ERR_FORMAT, "model.merges: expected an array");
  const char *cp = jstr(m, "continuing_subword_prefix"), *ew = jstr(m, "end_of_word_suffix");
  if ((cp && *cp) || (ew && *ew))
    return di_errorf(st, DI_ERR_UNSUPPORTED, "model: continuing_subword_prefix/end_of_word_suffix are not supported");
  t->model = DI_MODEL_BPE;
  t->byte_fallback = jbool(m, "byte_fallback", false);
  t->fuse_unk = jbool(m, "fuse_unk", false);
  t->ignore_merges = jbool(m, "ignore_merges", false);
  /* vocabulary size covers the model and the added tokens */
  json_int_t maxid = -1;
  const char *k;
  json_t *v;
  json_object_foreach(vocab, k, v) {
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= (1 << 24))
      return di_errorf(st, DI_ERR_FORMAT, "model.vocab[\"%.60s\"]: bad id", k);
    if (json_integer_value(v) > maxid) maxid = json_integer_value(v);
  }
  for (size_t i = 0; i < json_array_size(added); i++) {
    json_t *id = json_object_get(json_array_get(added, i), "id");
    if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) >= (1 << 24))
      return di_errorf(st, DI_ERR_FORMAT, "added_tokens[%zu].id: bad id", i);
    if (json_integer_value(id) > maxid) maxid = json_integer_value(id);
  }
  di_code rc = di_tok_set_vocab_size(t, (int32_t)(maxid + 1), st);
  if (rc != DI_OK) return rc;
  di_buf key = {0};
  json_object_foreach(vocab, k, v) {
    int32_t id = (int32_t)json_integer_value(v);
    size_t n = strlen(k);
    if (t->flags[id] & DI_TF_PRESENT) {
      free(key.p);
      return di_errorf(st, DI_ERR_FORMAT, "model.vocab[\"%.60s\"]: id %d used twice", k, id);
    }
    if ((rc = set_text(t, id, k, n, st)) != DI_OK) break;
    if (!model_key(t, k, n, &key)) continue;
    uint32_t off;
    if (!di_tok_pool_add(t, key.p ? key.p : "", key.n, &off) ||
        !di_smap_put(&t->model_map, off, (uint32_t)key.n, id, NULL)) {
      rc = oom(st);
      break;
    }
    if (t->byte_level && key.n == 1) t->byte_sym[(unsigned char)key.p[0]] = id;
  }
  free(key.p);
  if (rc != DI_OK) return rc;
  const char *unk = jstr(m, "unk_token");
  if (unk) {
    t->unk_id = di_smap_get(&t->text_map, unk, strlen(unk));
    if (t->unk_id < 0) return di_errorf(st, DI_ERR_FORMAT, "model.unk_token: \"%.60s\" not in vocab", unk);
  }
  if (!di_pmap_init(&t->merges, json_array_size(merges))) return oom(st);
  di_buf cat = {0};
  for (size_t i = 0; i < json_array_size(merges); i++) {
    json_t *e = json_array_get(merges, i);
    const char *a, *b;
    size_t al, bl;
    if (json_is_string(e)) {
      const char *s = json_string_value(e);
      const char *sp = strchr(s + (s[0] == ' ' ? 1 : 0), ' ');
      if (!sp) {
        free(cat.p);
        return di_errorf(st, DI_ERR_FORMAT, "model.merges[%zu]: \"%.60s\" is not \"a b\"", i, s);
      }
      a = s, al = (size_t)(sp - s), b = sp + 1, bl = strlen(sp + 1);
    } else if (json_is_array(e) && json_array_size(e) == 2 && json_is_string(json_array_get(e, 0)) &&
               json_is_string(json_array_get(e, 1))) {
      a = json_string_value(json_array_get(e, 0)), al = json_string_length(json_array_get(e, 0));
      b = json_string_value(json_array_get(e, 1)), bl = json_string_length(json_array_get(e, 1));
    } else {
      free(cat.p);
      return di_errorf(st, DI_ERR_FORMAT, "model.merges[%zu]: expected \"a b\" or [\"a\", \"b\"]", i);
    }
    int32_t ia = di_smap_get(&t->text_map, a, al), ib = di_smap_get(&t->text_map, b, bl);
    cat.n = 0;
    if (!di_buf_put(&cat, a, al) || !di_buf_put(&cat, b, bl)) {
      free(cat.p);
      return oom(st);
    }
    int32_t iab = di_smap_get(&t->text_map, cat.p, cat.n);
    if (ia < 0 || ib < 0 || iab < 0) {
      free(cat.p);
      return di_errorf(st, DI_ERR_FORMAT, "model.merges[%zu]: \"%.40s\" + \"%.40s\" refers to a token not in the vocab",
                       i, ia < 0 ? a : b, ia < 0 ? "" : b);
    }
    if (!di_pmap_put(&t->merges, ia, ib, (int32_t)i, iab)) {
      free(cat.p);
      return oom(st);
    }
  }
  free(cat.p);
  return DI_OK;
}

static di_code parse_added(di_tokenizer *t, json_t *added, di_status *st) {
  size_t n = json_array_size(added);
  t->added = calloc(n ? n : 1, sizeof *t->added);
  if (!t->added) return oom(st);
  di_buf nb = {0};
  di_code rc = DI_OK;
  for (size_t i = 0; i < n && rc == DI_OK; i++) {
    json_t *a = json_array_get(added, i);
    json_t *c = json_object_get(a, "content");
    if (!json_is_string(c) || json_string_length(c) == 0) {
      rc = di_errorf(st, DI_ERR_FORMAT, "added_tokens[%zu].content: expected a non-empty string", i);
      break;
    }
    int32_t id = (int32_t)json_integer_value(json_object_get(a, "id"));
    di_added d = {.id = id,
                  .special = jbool(a, "special", false),
                  .lstrip = jbool(a, "lstrip", false),
                  .rstrip = jbool(a, "rstrip", false),
                  .single_word = jbool(a, "single_word", false),
                  .normalized = jbool(a, "normalized", !jbool(a, "special", false))};
    const char *s = json_string_value(c);
    size_t sl = json_string_length(c);
    if (d.normalized && t->n_norms) {
      /* HF keeps the normalized content as the token's text (decode and
       * id_to_token show it); the written content still finds the id */
      uint32_t off;
      if (!di_tok_pool_add(t, s, sl, &off) || !di_smap_put(&t->text_map, off, (uint32_t)sl, id, NULL)) {
        rc = oom(st);
        break;
      }
      if ((rc = di_tok_normalize(t, s, sl, &nb, st)) != DI_OK) break;
      /* HF's skip_special_tokens looks the *normalized* text up among the
       * special contents, so a special token that normalization changes is
       * never skipped; kept for id/byte parity */
      if (d.special && (nb.n != sl || memcmp(nb.p, s, sl) != 0)) t->flags[id] |= DI_TF_NOSKIP;
      s = nb.p, sl = nb.n;
    }
    if ((rc = set_text(t, id, s, sl, st)) != DI_OK) break;
    t->flags[id] |= DI_TF_ADDED | (d.special ? DI_TF_SPECIAL : 0);
    if (!di_tok_pool_add(t, s, sl, &d.off)) {
      rc = oom(st);
      break;
    }
    d.len = (uint32_t)sl;
    t->added[t->n_added] = d;
    if (!di_trie_add(d.normalized ? &t->trie_norm : &t->trie_raw, t->pool + d.off, d.len, (int32_t)t->n_added))
      rc = oom(st);
    t->n_added++;
  }
  free(nb.p);
  return rc;
}

di_code di_tok_add_template(di_tokenizer *t, const char *name, const char *text, size_t len,
                            bool replace) {
  for (size_t i = 0; i < t->n_tmpl; i++)
    if (!strcmp(t->tmpl_names[i], name)) {
      if (!replace) return DI_OK;
      char *p = dupn(text, len);
      if (!p) return DI_ERR_NOMEM;
      free(t->tmpls[i]);
      t->tmpls[i] = p;
      return DI_OK;
    }
  char **a = realloc(t->tmpl_names, (t->n_tmpl + 1) * sizeof *a);
  if (!a) return DI_ERR_NOMEM;
  t->tmpl_names = a;
  char **b = realloc(t->tmpls, (t->n_tmpl + 1) * sizeof *b);
  if (!b) return DI_ERR_NOMEM;
  t->tmpls = b;
  t->tmpl_names[t->n_tmpl] = dupn(name, strlen(name));
  t->tmpls[t->n_tmpl] = dupn(text, len);
  if (!t->tmpl_names[t->n_tmpl] || !t->tmpls[t->n_tmpl]) {
    free(t->tmpl_names[t->n_tmpl]);
    free(t->tmpls[t->n_tmpl]);
    return DI_ERR_NOMEM;
  }
  t->n_tmpl++;
  return DI_OK;
}

static const char *const EOT_NAMES[] = {
    "<|eot_id|>", "<|eom_id|>", "<end_of_turn>", "<|im_end|>", "<|return|>", "<|call|>",
    "<|end_of_text|>", "<|endoftext|>", "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
    "<|EOT|>", "</s>", "<eos>", NULL};

static void add_known_eots(di_tokenizer *t) {
  for (int i = 0; EOT_NAMES[i]; i++) {
    int32_t id = di_smap_get(&t->text_map, EOT_NAMES[i], strlen(EOT_NAMES[i]));
    if (id >= 0 && (t->flags[id] & DI_TF_ADDED)) di_tok_add_eos(t, id);
  }
}

di_code di_tok_load_generation_config(di_tokenizer *t, const char *js, size_t len) {
  json_error_t e;
  json_t *j = json_loadb(js, len, JSON_DECODE_INT_AS_REAL, &e);
  if (!j) return DI_OK; /* generation_config is advisory */
  json_t *eos = json_object_get(j, "eos_token_id");
  if (json_is_number(eos) && json_number_value(eos) >= 0 && json_number_value(eos) < (1 << 24))
    di_tok_add_eos(t, (int32_t)json_number_value(eos));
  for (size_t i = 0; json_is_array(eos) && i < json_array_size(eos); i++) {
    double v = json_number_value(json_array_get(eos, i));
    if (v >= 0 && v < (1 << 24)) di_tok_add_eos(t, (int32_t)v);
  }
  json_decref(j);
  return DI_OK;
}

di_code di_tok_load_config(di_tokenizer *t, const char *cfg, size_t len, const char *name,
                           di_status *st) {
  json_error_t e;
  json_t *j = json_loadb(cfg, len, JSON_DECODE_INT_AS_REAL, &e);
  if (!j || !json_is_object(j)) {
    if (j) json_decref(j);
    return di_errorf(st, DI_ERR_FORMAT, "%s: line %d column %d: %s", name, e.line, e.column, e.text);
  }
  static const char *keys[4] = {"bos_token", "eos_token", "pad_token", "unk_token"};
  for (int i = 0; i < 4; i++) {
    json_t *v = json_object_get(j, keys[i]);
    if (json_is_object(v)) v = json_object_get(v, "content");
    if (json_is_string(v)) {
      free(t->special_text[i]);
      t->special_text[i] = dupn(json_string_value(v), json_string_length(v));
    }
  }
  json_t *ct = json_object_get(j, "chat_template");
  di_code rc = DI_OK;
  if (json_is_string(ct)) {
    rc = di_tok_add_template(t, "default", json_string_value(ct), json_string_length(ct), true);
  } else if (json_is_array(ct)) {
    for (size_t i = 0; i < json_array_size(ct) && rc == DI_OK; i++) {
      json_t *it = json_array_get(ct, i);
      const char *nm = jstr(it, "name");
      json_t *tx = json_object_get(it, "template");
      if (nm && json_is_string(tx))
        rc = di_tok_add_template(t, nm, json_string_value(tx), json_string_length(tx), true);
    }
  }
  json_decref(j);
  if (rc != DI_OK) return oom(st);
  if (t->special_text[0]) {
    int32_t id = di_smap_get(&t->text_map, t->special_text[0], strlen(t->special_text[0]));
    if (id >= 0) t->bos_id = id;
  }
  if (t->special_text[1]) {
    int32_t id = di_smap_get(&t->text_map, t->special_text[1], strlen(t->special_text[1]));
    if (id >= 0) di_tok_add_eos(t, id);
  }
  return DI_OK;
}

di_code di_tokenizer_from_json(const char *tokenizer_json, size_t len, const char *config_json,
                               size_t config_len, di_tokenizer **out, di_status *st) {
  *out = NULL;
  json_error_t e;
  json_t *j = json_loadb(tokenizer_json, len, 0, &e);
  if (!j) return di_errorf(st, DI_ERR_FORMAT, "tokenizer.json: line %d column %d: %s", e.line, e.column, e.text);
  di_tokenizer *t = di_tok_alloc();
  di_code rc = t ? DI_OK : oom(st);
  json_t *model = json_object_get(j, "model"), *added = json_object_get(j, "added_tokens");
  if (rc == DI_OK && !json_is_object(j)) rc = di_errorf(st, DI_ERR_FORMAT, "tokenizer.json: top level is not an object");
  if (rc == DI_OK && !json_is_object(model)) rc = di_errorf(st, DI_ERR_FORMAT, "tokenizer.json: missing \"model\"");
  if (rc == DI_OK && added && !json_is_array(added) && !json_is_null(added))
    rc = di_errorf(st, DI_ERR_FORMAT, "added_tokens: expected an array");
  if (rc == DI_OK) rc = parse_pretok(t, json_object_get(j, "pre_tokenizer"), "pre_tokenizer", st);
  if (rc == DI_OK) rc = parse_normalizer(t, json_object_get(j, "normalizer"), "normalizer", st);
  if (rc == DI_OK) rc = parse_model(t, model, added, st);
  if (rc == DI_OK) rc = parse_added(t, added, st);
  if (rc == DI_OK && config_json) rc = di_tok_load_config(t, config_json, config_len, "tokenizer_config.json", st);
  if (rc == DI_OK) rc = parse_post(t, json_object_get(j, "post_processor"), "post_processor", st);
  json_t *dec = json_object_get(j, "decoder");
  bool fused = false;
  if (rc == DI_OK) {
    if (!dec || json_is_null(dec)) t->dec_none = true;
    else rc = parse_decoder(t, dec, "decoder", &fused, st);
  }
  if (rc == DI_OK && t->n_post && t->post[0] >= 0 && t->bos_id < 0) {
    t->bos_id = t->post[0];
    t->post_has_bos = true;
  }
  if (rc == DI_OK && t->n_post && t->post[0] == t->bos_id) t->post_has_bos = true;
  if (rc == DI_OK) {
    add_known_eots(t);
    rc = di_tok_finish(t, st);
  }
  json_decref(j);
  if (rc != DI_OK) {
    di_tokenizer_free(t);
    return rc;
  }
  *out = t;
  return DI_OK;
}
