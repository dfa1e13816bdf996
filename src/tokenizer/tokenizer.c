/* Tokenizer object: construction helpers shared by the loaders, the derived
 * tables built once at load, accessors, and loading by path. */
#define _GNU_SOURCE /* memmem */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tokenizer/tok_internal.h"
#include "util/readall.h"

static di_code oom(di_status *st) { return di_errorf(st, DI_ERR_NOMEM, "tokenizer: out of memory"); }

di_tokenizer *di_tok_alloc(void) {
  di_tokenizer *t = calloc(1, sizeof *t);
  if (!t) return NULL;
  static _Atomic uint64_t next_serial = 1;
  t->serial = next_serial++;
  t->unk_id = -1;
  t->bos_id = -1;
  for (int i = 0; i < 256; i++) t->byte_sym[i] = -1;
  if (!di_smap_init(&t->model_map, 1024, (const char *const *)&t->pool) ||
      !di_smap_init(&t->text_map, 1024, (const char *const *)&t->pool)) {
    di_tokenizer_free(t);
    return NULL;
  }
  return t;
}

bool di_tok_pool_add(di_tokenizer *t, const char *s, size_t n, uint32_t *off) {
  if (t->pool_len + n + 1 > UINT32_MAX) return false;
  if (t->pool_len + n + 1 > t->pool_cap) {
    size_t cap = t->pool_cap ? t->pool_cap : 1 << 16;
    while (cap < t->pool_len + n + 1) cap *= 2;
    char *p = realloc(t->pool, cap);
    if (!p) return false;
    t->pool = p;
    t->pool_cap = cap;
  }
  if (n) memcpy(t->pool + t->pool_len, s, n);
  t->pool[t->pool_len + n] = 0;
  *off = (uint32_t)t->pool_len;
  t->pool_len += n + 1;
  return true;
}

di_code di_tok_set_vocab_size(di_tokenizer *t, int32_t n, di_status *st) {
  if (n <= 0 || n > (1 << 24))
    return di_errorf(st, DI_ERR_FORMAT, "tokenizer: vocabulary size %d out of range", n);
  t->n_vocab = n;
  t->text_off = calloc((size_t)n, sizeof *t->text_off);
  t->text_len = calloc((size_t)n, sizeof *t->text_len);
  t->bytes_off = calloc((size_t)n, sizeof *t->bytes_off);
  t->bytes_len = calloc((size_t)n, sizeof *t->bytes_len);
  t->flags = calloc((size_t)n, 1);
  t->byteval = calloc((size_t)n, 1);
  if (!t->text_off || !t->text_len || !t->bytes_off || !t->bytes_len || !t->flags || !t->byteval)
    return oom(st);
  return DI_OK;
}

di_code di_tok_add_eos(di_tokenizer *t, int32_t id) {
  if (id < 0 || id >= t->n_vocab || !(t->flags[id] & DI_TF_PRESENT)) return DI_OK;
  for (size_t i = 0; i < t->n_eos; i++)
    if (t->eos[i] == id) return DI_OK;
  int32_t *p = realloc(t->eos, (t->n_eos + 1) * sizeof *p);
  if (!p) return DI_ERR_NOMEM;
  t->eos = p;
  t->eos[t->n_eos++] = id;
  return DI_OK;
}

pcre2_code *di_tok_compile_regex(const char *pat, size_t len, di_status *st, const char *what) {
  int err;
  PCRE2_SIZE eoff;
  pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, len, PCRE2_UTF | PCRE2_UCP, &err, &eoff, NULL);
  if (!re) {
    PCRE2_UCHAR msg[160];
    pcre2_get_error_message(err, msg, sizeof msg);
    di_errorf(st, DI_ERR_FORMAT, "%s: bad regex at offset %zu: %s", what, (size_t)eoff, (char *)msg);
    return NULL;
  }
  pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* optional: falls back to the interpreter */
  return re;
}

/* What one token decodes to in isolation, following the decoder plan. */
static di_code token_bytes(di_tokenizer *t, int32_t id, di_buf *b, di_status *st) {
  const char *s = t->pool + t->text_off[id];
  size_t n = t->text_len[id];
  b->n = 0;
  if (!di_buf_put(b, "", 0)) return oom(st);
  bool mapped = false;
  if (t->dec_bytelevel) {
    mapped = true;
    for (size_t i = 0; i < n && mapped;) {
      int l;
      int32_t cp = di_utf8_decode(s + i, n - i, &l);
      int by = di_bytelevel_byte(cp);
      if (by < 0) mapped = false;
      else if (!di_buf_putc(b, (char)by)) return oom(st);
      i += (size_t)l;
    }
  }
  if (!mapped) {
    b->n = 0;
    if (!di_buf_put(b, s, n)) return oom(st);
  }
  for (size_t k = 0; k < t->n_dec_repl; k++) {
    const di_dec_replace *r = &t->dec_repl[k];
    if (!r->flen || !memmem(b->p, b->n, r->from, r->flen)) continue;
    di_buf nb = {0};
    size_t i = 0;
    bool ok = di_buf_put(&nb, "", 0);
    while (ok && i < b->n) {
      const char *hit = memmem(b->p + i, b->n - i, r->from, r->flen);
      if (!hit) {
        ok = di_buf_put(&nb, b->p + i, b->n - i);
        break;
      }
      ok = di_buf_put(&nb, b->p + i, (size_t)(hit - b->p) - i) && di_buf_put(&nb, r->to, r->tlen);
      i = (size_t)(hit - b->p) + r->flen;
    }
    free(b->p);
    *b = nb;
    if (!ok) return oom(st);
  }
  return DI_OK;
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

static _Thread_local const float *g_scores;
static int by_score_desc(const void *a, const void *b) {
  float x = g_scores[*(const int32_t *)a], y = g_scores[*(const int32_t *)b];
  return x > y ? -1 : x < y ? 1 : (*(const int32_t *)a > *(const int32_t *)b) - (*(const int32_t *)a < *(const int32_t *)b);
}

di_code di_tok_finish(di_tokenizer *t, di_status *st) {
  di_buf b = {0};
  t->max_token_len = 0;
  for (int32_t id = 0; id < t->n_vocab; id++) {
    if (!(t->flags[id] & DI_TF_PRESENT)) continue;
    const char *s = t->pool + t->text_off[id];
    size_t n = t->text_len[id];
    if (n == 6 && s[0] == '<' && s[1] == '0' && s[2] == 'x' && s[5] == '>' && hexval(s[3]) >= 0 &&
        hexval(s[4]) >= 0 && !(t->flags[id] & DI_TF_ADDED)) {
      int v = hexval(s[3]) * 16 + hexval(s[4]);
      t->flags[id] |= DI_TF_BYTE;
      t->byteval[id] = (uint8_t)v;
      if (!t->byte_level && t->byte_sym[v] < 0) t->byte_sym[v] = id;
    }
    di_code rc = token_bytes(t, id, &b, st);
    if (rc != DI_OK) {
      free(b.p);
      return rc;
    }
    if ((t->flags[id] & DI_TF_BYTE) && t->dec_byte_fallback) {
      b.n = 1;
      b.p[0] = (char)t->byteval[id];
    }
    uint32_t off;
    if (!di_tok_pool_add(t, b.p, b.n, &off)) {
      free(b.p);
      return oom(st);
    }
    t->bytes_off[id] = off;
    t->bytes_len[id] = (uint32_t)b.n;
  }
  free(b.p);
  for (size_t i = 0; i < t->model_map.cap; i++)
    if (t->model_map.slots[i].val >= 0 && t->model_map.slots[i].klen > t->max_token_len)
      t->max_token_len = t->model_map.slots[i].klen;
  if (t->model == DI_MODEL_SPM) {
    /* equal scores share a rank: ties are broken by position, as llama.cpp does */
    int32_t *order = malloc((size_t)t->n_vocab * sizeof *order);
    t->spm_rank = malloc((size_t)t->n_vocab * sizeof *t->spm_rank);
    if (!order || !t->spm_rank) {
      free(order);
      return oom(st);
    }
    for (int32_t i = 0; i < t->n_vocab; i++) order[i] = i;
    g_scores = t->scores;
    qsort(order, (size_t)t->n_vocab, sizeof *order, by_score_desc);
    uint32_t r = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) {
      if (i > 0 && t->scores[order[i]] != t->scores[order[i - 1]]) r++;
      t->spm_rank[order[i]] = r;
    }
    free(order);
  }
  if (!t->cache && !(t->cache = di_bpe_cache_new())) return oom(st);
  return DI_OK;
}

void di_tokenizer_free(di_tokenizer *t) {
  if (!t) return;
  free(t->pool);
  free(t->text_off);
  free(t->text_len);
  free(t->bytes_off);
  free(t->bytes_len);
  free(t->flags);
  free(t->byteval);
  free(t->scores);
  free(t->spm_rank);
  di_smap_free(&t->model_map);
  di_smap_free(&t->text_map);
  di_pmap_free(&t->merges);
  free(t->added);
  di_trie_free(&t->trie_raw);
  di_trie_free(&t->trie_norm);
  for (size_t i = 0; i < t->n_norms; i++) {
    free(t->norms[i].a);
    free(t->norms[i].b);
    if (t->norms[i].re) pcre2_code_free(t->norms[i].re);
  }
  free(t->norms);
  for (size_t i = 0; i < t->n_pres; i++) {
    free(t->pres[i].lit);
    if (t->pres[i].re) pcre2_code_free(t->pres[i].re);
  }
  free(t->pres);
  free(t->post);
  for (size_t i = 0; i < t->n_dec_repl; i++) {
    free(t->dec_repl[i].from);
    free(t->dec_repl[i].to);
  }
  free(t->dec_repl);
  free(t->eos);
  for (int i = 0; i < 4; i++) free(t->special_text[i]);
  for (size_t i = 0; i < t->n_tmpl; i++) {
    free(t->tmpl_names[i]);
    free(t->tmpls[i]);
  }
  free(t->tmpl_names);
  free(t->tmpls);
  di_bpe_cache_free(t->cache);
  free(t);
}

/* ---- accessors ---- */

int32_t di_tokenizer_n_vocab(const di_tokenizer *t) { return t->n_vocab; }
uint64_t di_tokenizer_serial(const di_tokenizer *t) { return t->serial; }
int32_t di_tokenizer_bos(const di_tokenizer *t) { return t->bos_id; }
size_t di_tokenizer_eos(const di_tokenizer *t, const int32_t **ids) {
  *ids = t->eos;
  return t->n_eos;
}
bool di_tokenizer_add_bos(const di_tokenizer *t) { return t->post_has_bos; }

const char *di_tokenizer_token_text(const di_tokenizer *t, int32_t id, size_t *len) {
  if (id < 0 || id >= t->n_vocab || !(t->flags[id] & DI_TF_PRESENT)) return NULL;
  if (len) *len = t->text_len[id];
  return t->pool + t->text_off[id];
}

const char *di_tokenizer_token_bytes(const di_tokenizer *t, int32_t id, size_t *len) {
  if (id < 0 || id >= t->n_vocab || !(t->flags[id] & DI_TF_PRESENT)) return NULL;
  if (len) *len = t->bytes_len[id];
  return t->pool + t->bytes_off[id];
}

bool di_tokenizer_is_special(const di_tokenizer *t, int32_t id) {
  return id >= 0 && id < t->n_vocab && (t->flags[id] & DI_TF_SPECIAL);
}

bool di_tokenizer_is_added(const di_tokenizer *t, int32_t id) {
  return id >= 0 && id < t->n_vocab && (t->flags[id] & DI_TF_ADDED);
}

int32_t di_tokenizer_find(const di_tokenizer *t, const char *text, size_t len) {
  return di_smap_get(&t->text_map, text, len);
}

const char *di_tokenizer_chat_template(const di_tokenizer *t, const char *name) {
  if (!t->n_tmpl) return NULL;
  const char *want = name ? name : "default";
  for (size_t i = 0; i < t->n_tmpl; i++)
    if (strcmp(t->tmpl_names[i], want) == 0) return t->tmpls[i];
  return name ? NULL : t->tmpls[0];
}

const char *di_tokenizer_special_text(const di_tokenizer *t, const char *name) {
  static const char *names[4] = {"bos_token", "eos_token", "pad_token", "unk_token"};
  for (int i = 0; i < 4; i++)
    if (strcmp(name, names[i]) == 0) return t->special_text[i];
  return NULL;
}

/* ---- loading by path ---- */

/* Tokenizer and template files are JSON of at most a few tens of MiB; the
 * cap keeps a wrong path (a disk image, a device) from being read whole. */
#define TOKENIZER_FILE_MAX ((size_t)1 << 30)

static di_code read_file(const char *path, char **data, size_t *len, di_status *st) {
  return di_read_regular(path, TOKENIZER_FILE_MAX, data, len, st);
}

static bool file_exists(const char *p) {
  struct stat sb;
  return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

di_code di_tokenizer_load(const char *path, di_tokenizer **out, di_status *st) {
  *out = NULL;
  struct stat sb;
  if (!path || stat(path, &sb) != 0)
    return di_errorf(st, DI_ERR_IO, "%s: %s", path ? path : "(null)", strerror(errno));
  size_t pl = strlen(path);
  if (S_ISREG(sb.st_mode) && pl >= 5 && strcmp(path + pl - 5, ".gguf") == 0) {
    di_gguf *g;
    di_code rc = di_gguf_open(path, true, &g, st);
    if (rc != DI_OK) return rc;
    rc = di_tokenizer_from_gguf(g, out, st);
    di_gguf_close(g);
    if (rc != DI_OK) di_error_wrap(st, "%s: ", path);
    return rc;
  }
  char dir[4096], file[4200];
  if (S_ISDIR(sb.st_mode)) {
    snprintf(dir, sizeof dir, "%s", path);
    snprintf(file, sizeof file, "%s/tokenizer.json", path);
  } else {
    snprintf(file, sizeof file, "%s", path);
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    else snprintf(dir, sizeof dir, ".");
  }
  if (S_ISDIR(sb.st_mode) && !file_exists(file)) {
    /* a directory with a single GGUF in it */
    DIR *d = opendir(path);
    struct dirent *e;
    char gg[4200] = "";
    while (d && (e = readdir(d))) {
      size_t l = strlen(e->d_name);
      if (l > 5 && strcmp(e->d_name + l - 5, ".gguf") == 0) {
        snprintf(gg, sizeof gg, "%s/%s", path, e->d_name);
        break;
      }
    }
    if (d) closedir(d);
    if (!gg[0]) return di_errorf(st, DI_ERR_IO, "%s: no tokenizer.json or .gguf in directory", path);
    return di_tokenizer_load(gg, out, st);
  }
  char *js = NULL, *cfg = NULL;
  size_t jl = 0, cl = 0;
  di_code rc = read_file(file, &js, &jl, st);
  if (rc != DI_OK) return rc;
  char cfgpath[4300];
  snprintf(cfgpath, sizeof cfgpath, "%s/tokenizer_config.json", dir);
  if (file_exists(cfgpath) && (rc = read_file(cfgpath, &cfg, &cl, st)) != DI_OK) {
    free(js);
    return rc;
  }
  rc = di_tokenizer_from_json(js, jl, cfg, cl, out, st);
  free(js);
  free(cfg);
  if (rc != DI_OK) {
    di_error_wrap(st, "%s: ", path);
    return rc;
  }
  di_tokenizer *t = *out;
  char p2[4300];
  snprintf(p2, sizeof p2, "%s/chat_template.jinja", dir);
  if (file_exists(p2)) {
    char *tx;
    size_t tl;
    if ((rc = read_file(p2, &tx, &tl, st)) == DI_OK) {
      rc = di_tok_add_template(t, "default", tx, tl, true);
      free(tx);
    }
  }
  snprintf(p2, sizeof p2, "%s/generation_config.json", dir);
  if (rc == DI_OK && file_exists(p2)) {
    char *tx;
    size_t tl;
    if ((rc = read_file(p2, &tx, &tl, st)) == DI_OK) {
      rc = di_tok_load_generation_config(t, tx, tl);
      free(tx);
    }
  }
  if (rc != DI_OK) {
    di_tokenizer_free(t);
    *out = NULL;
    return rc == DI_ERR_NOMEM ? oom(st) : rc;
  }
  return DI_OK;
}
