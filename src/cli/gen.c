#include "cli/gen.h"

#include <stdlib.h>
#include <string.h>

#include "util/progress.h"

di_code di_gen_open(di_gen *g, const di_gen_opts *o, di_status *st) {
  memset(g, 0, sizeof *g);
  di_model_opts mo = {.use_mmap = o->use_mmap};
  di_progress_set(di_progress_stderr, NULL);
  di_code rc = di_model_load(o->model_path, &mo, &g->model, st);
  if (rc) return rc;
  const di_hparams *hp = &g->model->hp;
  g->ctx = o->ctx > 0 ? o->ctx : (hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096);
  g->chunk = o->chunk > 0 ? o->chunk : 512;
  if (g->chunk > g->ctx) g->chunk = g->ctx;
  const int bs = 16;
  g->n_blocks = (g->ctx + bs - 1) / bs;
  di_kv_spec spec;
  di_forward_kv_spec(g->model, &spec);
  spec.type = o->kv_type;
  if ((rc = di_kv_pool_create_spec(&g->kv, di_kv_spec_block_bytes(&spec, bs) * (size_t)g->n_blocks, bs, &spec, st)))
    return rc;
  g->blocks = malloc((size_t)g->n_blocks * sizeof *g->blocks);
  g->logits = malloc((size_t)g->chunk * hp->n_vocab * sizeof(float));
  if (!g->blocks || !g->logits) return di_errorf(st, DI_ERR_NOMEM, "out of memory");
  for (int i = 0; i < g->n_blocks; i++) g->blocks[i] = di_kv_alloc(g->kv);
  return di_forward_ctx_create(g->model, g->chunk, o->threads, &g->fwd, st);
}

void di_gen_close(di_gen *g) {
  di_forward_ctx_free(g->fwd);
  di_kv_pool_destroy(g->kv);
  di_model_free(g->model);
  free(g->blocks);
  free(g->logits);
  memset(g, 0, sizeof *g);
}

void di_gen_reset(di_gen *g) { g->n_past = 0; }

di_code di_gen_feed(di_gen *g, const int32_t *ids, int n, bool all_logits, float *out, di_status *st) {
  const int V = g->model->hp.n_vocab;
  if (g->n_past + n > g->ctx)
    return di_errorf(st, DI_ERR_RANGE, "prompt of %d tokens exceeds the context of %d tokens", g->n_past + n,
                     g->ctx);
  int32_t *pos = malloc((size_t)g->chunk * sizeof *pos), *seq = calloc((size_t)g->chunk, sizeof *seq);
  bool *want = malloc((size_t)g->chunk);
  if (!pos || !seq || !want) {
    free(pos), free(seq), free(want);
    return di_errorf(st, DI_ERR_NOMEM, "out of memory");
  }
  di_batch_seq s = {.blocks = g->blocks, .n_blocks = g->n_blocks};
  di_code rc = DI_OK;
  for (int i = 0; i < n && !rc; i += g->chunk) {
    int c = n - i < g->chunk ? n - i : g->chunk;
    for (int j = 0; j < c; j++) {
      pos[j] = g->n_past + j;
      want[j] = all_logits || i + j == n - 1;
    }
    di_batch b = {.n_tokens = c, .tokens = ids + i, .pos = pos, .seq = seq, .want_logits = want, .n_seqs = 1, .seqs = &s};
    rc = di_forward(g->fwd, g->kv, &b, g->logits, st);
    if (rc) break;
    g->n_past += c;
    if (all_logits) memcpy(out + (size_t)i * V, g->logits, (size_t)c * V * sizeof(float));
    else if (i + c == n) memcpy(out, g->logits, (size_t)V * sizeof(float));
  }
  free(pos), free(seq), free(want);
  return rc;
}
