/* A fake MTP module (--spec mtp) over the fake model (fake_model.h), shared by
 * test_spec.c and test_spec_mtp.c. The target forward leaves "hidden states"
 * p + 0.5 (token at position p), the module p + 1 (its output, which the next
 * chained pair at p + 1 reads). It checks that each pair got the right hidden
 * state, writes (token, pos) into the pool's layer 1 at p, and for a pair of
 * the target's (not a chained one) checks that every earlier row of layer 1
 * it attends to (all, or the last fake_mtp_window) holds the token after the
 * same position of layer 0 (a stale or never written row fails the request).
 * It predicts the target's own logits for position p + 1 from the history its
 * layer 1 holds (token q + 1 at q): a perfect drafter for greedy requests,
 * also when chained, except for the pairs fake_mtp_wrong says to get wrong. */
#ifndef DI_TEST_FAKE_MTP_H
#define DI_TEST_FAKE_MTP_H

#include "fake_model.h"

#define FAKE_MTP_MAX_POS 512
static float mtp_hidden_rows[128];
static int fake_mtp_window;                 /* > 0: the module attends to its last fake_mtp_window pairs */
static bool (*fake_mtp_wrong)(int pos);     /* non-NULL: a draft from the target's pair at pos is made wrong */
static int fake_mtp_writes[FAKE_MTP_MAX_POS]; /* target pairs written per position (one request at a time) */
static uint64_t fake_mtp_rows;              /* rows the module computed */

static di_code mtp_target_forward(void *user, di_kv_pool *kv, const di_batch *b, float *logits, di_status *st) {
  for (int t = 0; t < b->n_tokens; t++) mtp_hidden_rows[t] = (float)b->pos[t] + 0.5f;
  return fake_forward(user, kv, b, logits, st);
}

static float *fake_row(di_kv_pool *kv, const int32_t *tab, int layer, int pos) {
  return (float *)di_kv_k(kv, tab[pos / kv->block_size], layer) + (size_t)(pos % kv->block_size) * kv->kv_dim;
}

static di_code fake_mtp(void *user, di_kv_pool *kv, const di_batch *b, const float *hidden, float *logits,
                        float *hidden_out, di_status *st) {
  (void)user;
  for (int t = 0; t < b->n_tokens; t++) {
    const int32_t *tab = b->seqs[b->seq[t]].blocks;
    int p = b->pos[t];
    if (hidden[t] != (float)p + 0.5f && hidden[t] != (float)p)
      return di_errorf(st, DI_ERR_INTERNAL, "fake mtp: pos %d got hidden %g", p, hidden[t]);
    if (kv->refcount[tab[p / kv->block_size]] != 1) return di_errorf(st, DI_ERR_INTERNAL, "fake mtp: shared block");
    float *k = fake_row(kv, tab, 1, p);
    k[0] = (float)b->tokens[t];
    k[1] = (float)p;
    hidden_out[t] = (float)(p + 1);
    if (hidden[t] != (float)p && p < FAKE_MTP_MAX_POS) fake_mtp_writes[p]++;
  }
  fake_mtp_rows += (uint64_t)b->n_tokens;
  for (int t = 0; t < b->n_tokens && b->kv_only; t++)
    if (b->want_logits[t]) return di_errorf(st, DI_ERR_INTERNAL, "fake mtp: a K/V-only row wants logits");
  for (int t = 0, row = 0; t < b->n_tokens; t++) {
    if (!b->want_logits[t]) continue;
    const int32_t *tab = b->seqs[b->seq[t]].blocks;
    int p = b->pos[t], lo = fake_mtp_window > 0 && p - fake_mtp_window + 1 > 0 ? p - fake_mtp_window + 1 : 0;
    for (int q = lo; q < p && hidden[t] != (float)p; q++)
      if (fake_row(kv, tab, 1, q)[0] != fake_row(kv, tab, 0, q + 1)[0] || fake_row(kv, tab, 1, q)[1] != (float)q)
        return di_errorf(st, DI_ERR_INTERNAL, "fake mtp: stale row at %d of %d", q, p);
    uint64_t h = 1469598103934665603ull;
    h = fake_mix(h ^ (uint64_t)(int)fake_row(kv, tab, 0, 0)[0]);
    for (int q = 0; q < lo; q++) h = fake_mix(h ^ (uint64_t)(int)fake_row(kv, tab, 0, q + 1)[0]) + (uint64_t)(q + 1);
    for (int q = lo; q <= p; q++) {
      const float *r = fake_row(kv, tab, 1, q);
      if ((int)r[1] != q) return di_errorf(st, DI_ERR_INTERNAL, "fake mtp: row %d holds pos %d", q, (int)r[1]);
      h = fake_mix(h ^ (uint64_t)(int)r[0]) + (uint64_t)(q + 1);
    }
    float *l = logits + (size_t)row++ * FAKE_VOCAB;
    for (int v = 0; v < FAKE_VOCAB; v++) l[v] = (float)(fake_mix(h + (uint64_t)v * 0x9E3779B97F4A7C15ull) % 1000) / 200.0f;
    l[FAKE_EOS] = h % 29 == 0 ? 10.0f : -5.0f;
    if (fake_mtp_wrong && hidden[t] != (float)p && fake_mtp_wrong(p)) { /* another token to the top */
      int best = 0;
      for (int v = 1; v < FAKE_VOCAB; v++)
        if (l[v] > l[best]) best = v;
      l[(best + 1) % FAKE_VOCAB] = l[best] + 1;
    }
  }
  return DI_OK;
}

/* The target and its module as one backend (be from fake_backend). */
static void fake_mtp_backend(di_engine_backend *be) {
  be->n_layers = 2;
  be->forward = mtp_target_forward;
  be->n_embd = 1;
  be->mtp_window = fake_mtp_window;
  be->mtp_kv_only = fake_mtp_window > 0; /* as DeepSeek-V4's: the draft's pair in a forward of its own */
  be->hidden = mtp_hidden_rows;
  be->forward_mtp = fake_mtp;
}

#endif
