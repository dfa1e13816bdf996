/* The MTP drafter (--spec mtp): DeepSeek-V3's multi-token-prediction module
 * proposes one token per step from the target's own last hidden state.
 *
 * The module's pair at position p is (the target's hidden state at p, the
 * token at p + 1) and predicts the token at p + 2; its attention reads the
 * pairs of every earlier position, so its K/V are kept for every computed
 * position. They live in the target's pool as one more layer of the same
 * geometry (an MLA latent row), in the sequence's own blocks: rollback,
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
#include <string.h>

#include "engine/engine_internal.h"

static int argmax(const float *row, int n) {
  int best = 0;
  for (int v = 1; v < n; v++)
    if (row[v] > row[best]) best = v;
  return best;
}

void di_spec_mtp_step(di_engine *e, const di_batch *b) {
  const int D = e->be.n_embd;
  di_batch mb = {.tokens = e->spec.mtp_tokens, .pos = e->spec.mtp_pos, .seq = e->spec.mtp_seq,
                 .want_logits = e->spec.mtp_want, .seqs = b->seqs, .n_seqs = b->n_seqs};
  int n_want = 0;
  for (int i = 0, t0 = 0; i < b->n_seqs; t0 += e->b_owner[i]->take, i++) {
    di_seq *s = e->b_owner[i];
    if (s->state != DI_SEQ_RUNNING || s->req->n > 1) continue;
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
      n_want++;
    }
  }
  if (mb.n_tokens == 0) return;
  di_status st = {0};
  if (n_want > e->logits_cap && !di_engine_logit_rows(e, n_want)) return;
  if (e->be.forward_mtp(e->be.user, e->pool, &mb, e->spec.mtp_hidden, e->logits, &st) != DI_OK) return; /* no drafts */
  for (int n = 0, r = 0; n < mb.n_tokens; n++) {
    if (!mb.want_logits[n]) continue;
    di_seq *s = e->b_owner[mb.seq[n]];
    s->mtp_draft = argmax(e->logits + (size_t)r++ * e->be.n_vocab, e->be.n_vocab);
    s->mtp_at = s->len;
  }
}
