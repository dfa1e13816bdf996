#include "model/hf.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model/arch.h"
#include "model/hf_config.h"
#include "model/safetensors.h"
#include "model/tensors.h"
#include "util/readall.h"

typedef struct di_st_model {
  di_st_file *files;
  int n_files;
} di_st_model;

static const di_st_tensor *find(const di_st_model *s, const char *name) {
  for (int i = 0; i < s->n_files; i++)
    for (size_t j = 0; j < s->files[i].n_tensors; j++)
      if (!strcmp(s->files[i].tensors[j].name, name)) return &s->files[i].tensors[j];
  return NULL;
}

/* A JSON file that must be a regular file of sane size (a FIFO or device
 * named config.json must not block or stream for ever). NULL with jerr->text
 * set on failure. */
static json_t *load_json_file(const char *path, json_error_t *jerr) {
  char *text = NULL;
  size_t len = 0;
  di_status fst = {0};
  if (di_read_regular(path, (size_t)256 << 20, &text, &len, &fst) != DI_OK) {
    memset(jerr, 0, sizeof *jerr);
    snprintf(jerr->text, sizeof jerr->text, "%.150s", fst.msg);
    return NULL;
  }
  json_t *j = json_loadb(text, len, 0, jerr);
  free(text);
  return j;
}

static di_code open_shards(di_model *m, bool use_mmap, di_status *st) {
  di_st_model *s = calloc(1, sizeof *s);
  if (!s) return di_errorf(st, DI_ERR_NOMEM, "out of memory");
  m->st = s;
  char p[4096];
  struct stat sb;
  snprintf(p, sizeof p, "%s/model.safetensors", m->path);
  if (stat(p, &sb) == 0) {
    s->files = calloc(1, sizeof *s->files);
    if (!s->files) return di_errorf(st, DI_ERR_NOMEM, "out of memory");
    s->n_files = 1;
    return di_st_open(p, use_mmap, &s->files[0], st);
  }
  snprintf(p, sizeof p, "%s/model.safetensors.index.json", m->path);
  json_error_t jerr;
  json_t *idx = load_json_file(p, &jerr);
  if (!idx)
    return di_errorf(st, DI_ERR_FORMAT, "%s: no model.safetensors, and model.safetensors.index.json: %s", m->path,
                     jerr.text);
  json_t *wm = json_object_get(idx, "weight_map");
  if (!json_is_object(wm)) {
    json_decref(idx);
    return di_errorf(st, DI_ERR_FORMAT, "%s: missing object weight_map", p);
  }
  /* Distinct shard names, in first-seen order. */
  const char *key;
  json_t *val;
  const char **names = calloc(json_object_size(wm) + 1, sizeof *names);
  int n = 0;
  di_code rc = DI_OK;
  json_object_foreach(wm, key, val) {
    if (!json_is_string(val) || strchr(json_string_value(val), '/')) {
      rc = di_errorf(st, DI_ERR_FORMAT, "%s: weight_map[%s] is not a plain file name", p, key);
      break;
    }
    int k;
    for (k = 0; k < n; k++)
      if (!strcmp(names[k], json_string_value(val))) break;
    if (k == n) names[n++] = json_string_value(val);
  }
  if (!rc) {
    s->files = calloc((size_t)n + 1, sizeof *s->files);
    for (int i = 0; i < n && !rc; i++) {
      char fp[4096];
      snprintf(fp, sizeof fp, "%s/%s", m->path, names[i]);
      rc = di_st_open(fp, use_mmap, &s->files[i], st);
      s->n_files = i + 1;
    }
  }
  free(names);
  json_decref(idx);
  return rc;
}

static di_code bind(di_model *m, di_tensor *t, const char *name, int64_t ne0, int64_t ne1, int64_t n_sub,
                    bool required, di_status *st) {
  (void)n_sub; /* HF files name each expert's matrix */
  memset(t, 0, sizeof *t);
  const di_st_tensor *s = find(m->st, name);
  if (!s) {
    if (required) return di_errorf(st, DI_ERR_FORMAT, "%s: missing tensor %s", m->path, name);
    return DI_OK;
  }
  int64_t cols = s->n_dims ? s->shape[s->n_dims - 1] : 1, rows = 1;
  for (int d = 0; d + 1 < s->n_dims; d++) rows *= s->shape[d];
  if (cols != ne0 || rows != ne1)
    return di_errorf(st, DI_ERR_FORMAT, "%s: tensor %s has shape [%lld, %lld], expected [%lld, %lld]", m->path, name,
                     (long long)rows, (long long)cols, (long long)ne1, (long long)ne0);
  t->type = s->type;
  t->ne[0] = cols;
  t->ne[1] = rows;
  t->row_bytes = di_dtype_row_bytes(s->type, cols);
  t->data = s->data;
  t->name = s->name;
  m->weight_bytes += s->nbytes;
  m->n_params += (uint64_t)(rows * cols);
  return di_model_note_bound(m, s->data, st);
}

/* The shards' tensors as one list (di_model_check_unused). */
static const di_st_tensor *st_at(const di_st_model *s, size_t i) {
  int f = 0;
  while (i >= s->files[f].n_tensors) i -= s->files[f++].n_tensors;
  return &s->files[f].tensors[i];
}
static const char *st_name_at(const void *s, size_t i) { return st_at(s, i)->name; }
static const void *st_data_at(const void *s, size_t i) { return st_at(s, i)->data; }

static di_code check_unused(di_model *m, di_status *st) {
  size_t n = 0;
  for (int f = 0; f < m->st->n_files; f++) n += m->st->files[f].n_tensors;
  return di_model_check_unused(m, n, st_name_at, st_data_at, m->st, st);
}

/* DeepSeek-V4 checkpoints keep DeepSeek's own names, without a prefix. */
static di_code bind_v4(di_model *m, di_status *st) {
  const di_hparams *hp = &m->hp;
  const int64_t D = hp->n_embd, N = hp->v4.hc_mult;
  di_code rc;
  if ((rc = bind(m, &m->tok_embd, "embed.weight", D, hp->n_vocab, 0, true, st)) ||
      (rc = bind(m, &m->output_norm, "norm.weight", D, 1, 0, true, st)) ||
      (rc = bind(m, &m->output, "head.weight", D, hp->n_vocab, 0, !hp->tied_output, st)) ||
      (rc = bind(m, &m->hc_head_fn, "hc_head_fn", N * D, N, 0, true, st)) ||
      (rc = bind(m, &m->hc_head_base, "hc_head_base", N, 1, 0, true, st)) ||
      (rc = bind(m, &m->hc_head_scale, "hc_head_scale", 1, 1, 0, true, st)))
    return rc;
  if ((rc = di_model_bind_layers(m, "", bind, 0, st))) return rc;
  return di_model_bind_mtp(m, "", bind, 0, st);
}

di_code di_hf_load(di_model *m, bool use_mmap, di_status *st) {
  char p[4096];
  snprintf(p, sizeof p, "%s/config.json", m->path);
  json_error_t jerr;
  json_t *cfg = load_json_file(p, &jerr);
  if (!cfg)
    return di_errorf(st, DI_ERR_FORMAT, "%s: %s (line %d, column %d)", p, jerr.text, jerr.line, jerr.column);
  float norm_offset = 0;
  di_code rc = di_hf_read_config(&m->hp, cfg, m->path, &norm_offset, st);
  json_decref(cfg);
  if (rc) return rc;
  if ((rc = open_shards(m, use_mmap, st))) return rc;
  di_hparams *hp = &m->hp;
  if (hp->attn_kind == DI_ATTN_DSV4) return (rc = bind_v4(m, st)) ? rc : check_unused(m, st);
  /* Gemma 3 HF checkpoints prefix the text model. */
  const char *pre = find(m->st, "model.embed_tokens.weight") ? "model" : "language_model.model";
  char n[160];
  snprintf(n, sizeof n, "%s.embed_tokens.weight", pre);
  if ((rc = bind(m, &m->tok_embd, n, hp->n_embd, hp->n_vocab, 0, true, st))) return rc;
  snprintf(n, sizeof n, "%s.norm.weight", pre);
  if ((rc = bind(m, &m->output_norm, n, hp->n_embd, 1, 0, true, st))) return rc;
  if ((rc = bind(m, &m->output, "lm_head.weight", hp->n_embd, hp->n_vocab, 0, !hp->tied_output, st))) return rc;
  if ((rc = di_model_bind_layers(m, pre, bind, norm_offset, st))) return rc;
  if ((rc = di_model_bind_mtp(m, pre, bind, norm_offset, st))) return rc;
  if (norm_offset != 0 && (rc = di_model_to_f32(m, &m->output_norm, norm_offset, st))) return rc;
  return check_unused(m, st);
}

void di_hf_close(di_model *m) {
  if (!m->st) return;
  for (int i = 0; i < m->st->n_files; i++) di_st_close(&m->st->files[i]);
  free(m->st->files);
  free(m->st);
  m->st = NULL;
}
