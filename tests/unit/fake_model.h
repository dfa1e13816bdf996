/* A tiny deterministic "model" for engine tests. Its logits for a token are
 * a hash of the whole token history *read back from the KV pool through the
 * block table*, so any paging, chunking, copy-on-write, prefix-cache or
 * preemption bug changes the output. Text: ids < 26 are the letters a..z,
 * others two letters, id 2 is EOS ("") — enough for stop-string tests. */
#ifndef DI_TEST_FAKE_MODEL_H
#define DI_TEST_FAKE_MODEL_H

#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"

#define FAKE_VOCAB 300
#define FAKE_EOS 2

static const int32_t fake_eos_ids[1] = {FAKE_EOS};
static int fake_forward_calls;
static int fake_window; /* > 0: attention sees only the last fake_window positions */
static uint64_t fake_mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

/* Mixed model (with fake_window > 0): a full-attention layer hashes the whole
 * history from seqs[].blocks, then a sliding-window layer the last fake_window
 * positions, from the sliding-window tables when the batch has them (grouped
 * KV) and from seqs[].blocks otherwise; both layouts must give the same logits. */
static int fake_mixed; /* number of sliding-window layers */

/* Checks and writes (token, pos) at a position of one table. */
static di_code fake_write(di_kv_pool *kv, const int32_t *tab, int n_blocks, int32_t tok, int pos, di_status *st) {
  int bs = kv->block_size, bi = pos / bs;
  if (bi >= n_blocks || tab[bi] < 0 || tab[bi] >= kv->n_blocks || kv->refcount[tab[bi]] != 1)
    return di_errorf(st, DI_ERR_INTERNAL, "fake: pos %d writes a bad/shared block", pos);
  float *k = (float *)di_kv_k(kv, tab[bi], 0) + (size_t)(pos % bs) * kv->kv_dim;
  k[0] = (float)tok;
  k[1] = (float)pos;
  return DI_OK;
}

/* Hashes positions [lo, hi] read back through a table. */
static di_code fake_read(di_kv_pool *kv, const int32_t *tab, int lo, int hi, uint64_t *h, di_status *st) {
  int bs = kv->block_size;
  for (int p = lo; p <= hi; p++) {
    int32_t blk = tab[p / bs];
    if (blk < 0 || blk >= kv->n_blocks || kv->refcount[blk] < 1)
      return di_errorf(st, DI_ERR_INTERNAL, "fake: pos %d reads a bad block", p);
    const float *k = (const float *)di_kv_k(kv, blk, 0) + (size_t)(p % bs) * kv->kv_dim;
    if ((int)k[1] != p) return di_errorf(st, DI_ERR_INTERNAL, "fake: pos %d holds pos %d", p, (int)k[1]);
    *h = fake_mix(*h ^ (uint64_t)(int)k[0]) + (uint64_t)p;
  }
  return DI_OK;
}


static di_code fake_forward(void *user, di_kv_pool *kv, const di_batch *b, float *logits, di_status *st) {
  (void)user;
  fake_forward_calls++;
  di_code rc;
  for (int i = 0; i < b->n_tokens; i++) { /* write K (token, pos) of every token first, in every table */
    const di_batch_seq *s = &b->seqs[b->seq[i]];
    if (b->pos[i] >= s->full_cached && (rc = fake_write(kv, s->blocks, s->n_blocks, b->tokens[i], b->pos[i], st)))
      return rc; /* below full_cached: a replay, the full-attention rows are cached */
    for (int k = 0; k < b->n_swa_tables; k++)
      if ((rc = fake_write(kv, s->swa[k], s->n_swa_blocks, b->tokens[i], b->pos[i], st))) return rc;
  }
  int row = 0;
  for (int i = 0; i < b->n_tokens; i++) {
    bool want = b->want_logits ? b->want_logits[i] : i == b->n_tokens - 1;
    if (!want) continue;
    const di_batch_seq *s = &b->seqs[b->seq[i]];
    uint64_t h = 1469598103934665603ull;
    int lo = fake_window > 0 && b->pos[i] - fake_window + 1 > 0 ? b->pos[i] - fake_window + 1 : 0;
    if (fake_mixed) {
      if ((rc = fake_read(kv, s->blocks, 0, b->pos[i], &h, st))) return rc;
      for (int l = 0; l < fake_mixed; l++) /* sliding-window layer l: in table l % n when grouped */
        if ((rc = fake_read(kv, b->n_swa_tables ? s->swa[l % b->n_swa_tables] : s->blocks, lo, b->pos[i], &h, st)))
          return rc;
    } else if ((rc = fake_read(kv, s->blocks, lo, b->pos[i], &h, st))) {
      return rc;
    }
    float *l = logits + (size_t)row++ * FAKE_VOCAB;
    for (int v = 0; v < FAKE_VOCAB; v++) l[v] = (float)(fake_mix(h + (uint64_t)v * 0x9E3779B97F4A7C15ull) % 1000) / 200.0f;
    l[FAKE_EOS] = h % 29 == 0 ? 10.0f : -5.0f; /* EOS now and then */
  }
  return DI_OK;
}

typedef struct fake_detok {
  char buf[4];
} fake_detok;

static size_t fake_piece(int32_t id, char *out) {
  if (id == FAKE_EOS) return 0;
  if (id < 26) {
    out[0] = (char)('a' + id);
    return 1;
  }
  out[0] = (char)('a' + id % 26);
  out[1] = (char)('a' + (id / 26) % 26);
  return 2;
}

static void *fake_detok_new(void *u) {
  (void)u;
  return calloc(1, sizeof(fake_detok));
}
static void fake_detok_push(void *s, int32_t id, const char **t, size_t *n) {
  fake_detok *d = s;
  *n = fake_piece(id, d->buf);
  *t = d->buf;
}
static void fake_detok_flush(void *s, const char **t, size_t *n) {
  (void)s;
  *t = "";
  *n = 0;
}
static void fake_detok_free(void *s) { free(s); }

static di_code fake_encode(void *u, const char *text, size_t len, bool ps, int32_t **ids, size_t *n, di_status *st) {
  (void)u;
  (void)ps;
  *ids = malloc((len ? len : 1) * sizeof **ids);
  if (!*ids) return di_errorf(st, DI_ERR_NOMEM, "oom");
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)text[i];
    (*ids)[i] = c >= 'a' && c <= 'z' ? c - 'a' : 26 + c % 200;
  }
  *n = len;
  return DI_OK;
}

static di_engine_backend fake_backend(int n_ctx) {
  di_engine_backend be = {0};
  be.n_vocab = FAKE_VOCAB;
  be.n_ctx = n_ctx;
  be.n_layers = 1;
  be.kv_dim = 2;
  be.policy = DI_KV_POLICY_FULL;
  be.eos_ids = fake_eos_ids;
  be.n_eos = 1;
  be.forward = fake_forward;
  be.encode = fake_encode;
  be.detok_new = fake_detok_new;
  be.detok_push = fake_detok_push;
  be.detok_flush = fake_detok_flush;
  be.detok_free = fake_detok_free;
  return be;
}

#endif
