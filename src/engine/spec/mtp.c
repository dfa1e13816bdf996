/* The MTP drafter (--spec mtp): DeepSeek-V3's and V4's multi-token-prediction
 * module proposes one token per step from the target's own last hidden state
 * (V4: its hc_mult streams, be.n_embd wide).
 *
 * The module's pair at position p is (the target's hidden state at p, the
 * token at p + 1) and predicts the token at p + 2; its attention reads the
 * pairs of every earlier position, so its K/V are kept for every computed
 * position. They live in the target's pool as one more layer of the same
 * geometry (V3: an MLA latent row; V4: one more sliding layer of its cache
 * plan, in the window tables when grouped), in the sequence's own blocks: rollback,
 * preemption and freeing follow the target's tables with no bookkeeping of
 * their own. After each forward, every position the step computed (prompt
 * chunks included; for a verification the base and accepted positions) gets
 * its pair once the next token is known, i.e. after sampling, and the last
 * pair of a decode-ready sequence yields the draft for the next step.
 * Requests with n > 1 are not drafted (their completions share the block the
 * fork happened in, so the pair at the fork position would be written once
 * per completion). A prefix-cache hit brings blocks whose module rows were
 * written with the original sequence's tokens: only the acceptance can
 * suffer, never the output, which verification decides. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"

/* A chained draft position is worth computing while the sequence's estimate
 * that every draft up to it is accepted stays at least this; with a module
 * that predicts poorly p[0] falls and no chain runs. */
#define MTP_CHAIN_MIN 0.3

static int argmax(const float *row, int n) {
  int best = 0;
  for (int v = 1; v < n; v++)
    if (row[v] > row[best]) best = v;
  return best;
}

/* How many tokens s's module drafts this step (the pair already formed, then
 * chained ones: the module's own output state beside its last draft). */
static int chain_depth(const di_engine *e, const di_seq *s) {
  int cap = di_spec_k_cap(e, s, e->spec.k_max), d = 1;
  double run = s->spec.init ? s->spec.p[0] : 0.5;
  while (d < cap && (e->spec.always || (run *= s->spec.init ? s->spec.p[d] : 0.5) >= MTP_CHAIN_MIN)) d++;
  return d;
}

/* DI_MTP_DUMP=FILE: the module's logits rows appended as f32, as they come
 * (to check them bit for bit, e.g. under --tp against one rank). */
static void dump_rows(const float *rows, int n, int vocab) {
  static FILE *fp;
  static bool tried;
  if (!tried) {
    tried = true;
    const char *path = getenv("DI_MTP_DUMP");
    fp = path && *path ? fopen(path, "wb") : NULL;
  }
  if (fp) {
    fwrite(rows, sizeof *rows, (size_t)n * (size_t)vocab, fp);
    fflush(fp);
  }
}

/* Runs the module over mb and writes draft index j of every sequence whose
 * row it wanted; false on failure (no drafts then). */
static bool run_module(di_engine *e, di_batch *mb, int j) {
  di_status st = {0};
  int want = 0;
  for (int n = 0; n < mb->n_tokens; n++) want += mb->want_logits[n];
  if (want > e->logits_cap && !di_engine_logit_rows(e, want)) return false;
  if (e->be.forward_mtp(e->be.user, e->pool, mb, e->spec.mtp_hidden, e->logits, e->spec.mtp_out, &st) != DI_OK)
    return false;
  dump_rows(e->logits, want, e->be.n_vocab);
  for (int n = 0, r = 0; n < mb->n_tokens; n++) {
    if (!mb->want_logits[n]) continue;
    di_seq *s = e->b_owner[mb->seq[n]];
    s->mtp_draft[j] = argmax(e->logits + (size_t)r++ * e->be.n_vocab, e->be.n_vocab);
    s->mtp_n = j + 1;
    s->mtp_at = s->len;
  }
  return true;
}

/* Blocks for a chained round's scratch row at q in every table of s (the
 * window tables too: DeepSeek-V4 keeps the module's K/V there), only if the
 * pool has them free; false: none taken. */
static bool scratch_row(di_engine *e, di_seq *s, di_batch_seq *bseq, int q) {
  int need = di_kv_table_blocks_needed(e->pool, &s->table, q, q + 1);
  for (int k = 0; k < e->be.n_swa_tables; k++) need += di_kv_table_blocks_needed(e->pool, &s->swa[k], q, q + 1);
  if (need > di_kv_n_available(e->pool)) return false;
  di_kv_table_prepare(e->pool, &s->table, q, q + 1);
  bseq->n_blocks = s->table.n_blocks;
  for (int k = 0; k < e->be.n_swa_tables; k++) {
    di_kv_table_prepare(e->pool, &s->swa[k], q, q + 1);
    bseq->swa[k] = s->swa[k].blocks;
    bseq->n_swa_blocks = s->swa[k].n_blocks;
  }
  return true;
}

void di_spec_mtp_step(di_engine *e, const di_batch *b) {
  const int D = e->be.n_embd, bs = e->pool->block_size;
  di_batch mb = {.tokens = e->spec.mtp_tokens, .pos = e->spec.mtp_pos, .seq = e->spec.mtp_seq,
                 .want_logits = e->spec.mtp_want, .seqs = b->seqs, .n_seqs = b->n_seqs,
                 .n_swa_tables = b->n_swa_tables};
  int *depth = e->spec.mtp_depth, *row = e->spec.mtp_row, kmax = 0;
  bool *grew = e->spec.mtp_grew;
  for (int i = 0, t0 = 0; i < b->n_seqs; t0 += e->b_owner[i]->take, i++) {
    di_seq *s = e->b_owner[i];
    depth[i] = 0;
    grew[i] = false;
    if (s->state != DI_SEQ_RUNNING || s->req->n > 1) continue;
    s->mtp_n = 0;
    int last = -1;
    for (int t = t0; t < t0 + s->take; t++) {
      int p = b->pos[t];
      if (p >= s->n_computed || p + 1 >= s->len) break; /* rejected drafts' positions and beyond */
      int n = mb.n_tokens++;
      e->spec.mtp_tokens[n] = s->tokens[p + 1];
      e->spec.mtp_pos[n] = p;
      e->spec.mtp_seq[n] = i;
      e->spec.mtp_want[n] = false;
      memcpy(e->spec.mtp_hidden + (size_t)n * D, e->be.hidden + (size_t)t * D, (size_t)D * sizeof(float));
      last = n;
    }
    /* a decode-ready sequence whose pair at len - 2 was just formed drafts the token at len */
    bool ready = last >= 0 && s->n_computed == s->len - 1 && e->spec.mtp_pos[last] == s->len - 2;
    if (ready && di_spec_k_cap(e, s, 1) > 0 && di_spec_active(&s->spec, e->acc.steps)) {
      e->spec.mtp_want[last] = true;
      depth[i] = chain_depth(e, s);
      row[i] = last;
      if (depth[i] > kmax) kmax = depth[i];
    }
  }
  if (mb.n_tokens == 0 || !run_module(e, &mb, 0)) return;
  /* Chained rounds: pair (module output at q - 1, draft j - 1) at q = len - 2 + j.
   * Its K/V row is scratch (the next step's real pair at q replaces it), in a
   * block taken only if one is free and given back right after. */
  for (int j = 1; j < kmax; j++) {
    memcpy(e->spec.mtp_hidden, e->spec.mtp_out, (size_t)mb.n_tokens * D * sizeof(float)); /* last round's outputs */
    int n = 0;
    for (int i = 0; i < b->n_seqs; i++) {
      di_seq *s = e->b_owner[i];
      if (depth[i] <= j || s->mtp_n != j) continue;
      int q = s->len - 2 + j;
      if (!scratch_row(e, s, &e->b_seqs[i], q)) continue;
      grew[i] = true;
      memmove(e->spec.mtp_hidden + (size_t)n * D, e->spec.mtp_hidden + (size_t)row[i] * D, (size_t)D * sizeof(float));
      e->spec.mtp_tokens[n] = s->mtp_draft[j - 1];
      e->spec.mtp_pos[n] = q;
      e->spec.mtp_seq[n] = i;
      e->spec.mtp_want[n] = true;
      row[i] = n++;
    }
    mb.n_tokens = n;
    if (n == 0 || !run_module(e, &mb, j)) break;
  }
  for (int i = 0; i < b->n_seqs; i++) {
    if (!grew[i]) continue;
    di_seq *s = e->b_owner[i];
    const int keep = (s->n_computed + bs - 1) / bs;
    di_kv_table_truncate(e->pool, &s->table, keep);
    for (int k = 0; k < e->be.n_swa_tables; k++) di_kv_table_truncate(e->pool, &s->swa[k], keep);
  }
}
