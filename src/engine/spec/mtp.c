/* The MTP drafter (--spec mtp): DeepSeek-V3's and V4's multi-token-prediction
 * module proposes one token per step from the target's own last hidden state
 * (V4: its hc_mult streams, be.n_embd wide).
 *
 * The module's pair at position p is (the target's hidden state at p, the
 * token at p + 1) and predicts the token at p + 2; its attention reads the
 * pairs of earlier positions (V3: every one; V4: the last be.mtp_window), so
 * their K/V must be in the cache when it drafts. They live in the target's
 * pool as one more layer of the same geometry (V3: an MLA latent row; V4: one
 * more sliding layer of its cache plan, in the window tables when grouped), in
 * the sequence's own blocks: rollback, preemption and freeing follow the
 * target's tables with no bookkeeping of their own.
 *
 * The module runs only for a sequence that drafts in the next step. A pair's
 * K/V row depends on the pair alone (the module is one block: its K/V are
 * projections of its input), so the rows need not be written in the step that
 * computed the position: each step keeps the target's hidden states of the
 * positions it computed in the sequence's ring, and before a draft the module
 * runs, in one batched forward, over the pairs it has not seen yet
 * (mtp_done..), the draft's pair last; V4's sliding block writes only the
 * K/V rows of the pairs before it (be.mtp_kv_only, di_batch.kv_only) and
 * runs whole for the draft's pair alone, V3's runs whole over all of them. A sequence backed off between probes
 * (spec/tune.h), opted out, or in the middle of its prompt costs no module
 * row, only a copy of its hidden state; a probe then finds the cache exactly
 * as if the module had run every step, so it drafts what it would have.
 *   V4 (windowed): only the last be.mtp_window pairs are ever read, so the
 *   catch-up is at most that many rows, and the ring holds that many states.
 *   V3 (full attention): every missed pair is caught up. The ring holds
 *   e->spec.mtp_ring positions: the longest probe spacing (tune.c: 2^10
 *   steps) where that fits DI_MTP_RING_BYTES (a tiny model), so a decoding
 *   sequence never outgrows it while backed off; one that would (a long
 *   prompt, a recompute after preemption, a ring cut short by a wide model:
 *   DeepSeek-V3's holds 146 positions) runs the module over the ring
 *   first, batched. The catch-up costs the rows the per-step upkeep
 *   would have, in one forward instead of one per step: on a memory-bound
 *   decode the module's weights are read once per probe, not once per token.
 *   Catching up instead of leaving holes keeps acceptance after a probe what
 *   it would have been: an unwritten row (stale K/V from the block's previous
 *   owner) is attended like any other and can pull every later draft off.
 *
 * Each completion of an n > 1 request drafts with its own module state
 * (fork_siblings). A prefix-cache hit brings blocks whose module rows were
 * written with the original sequence's tokens (or not at all, if it was
 * backed off there): only the acceptance can suffer, never the output, which
 * verification decides. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"

/* A chained draft position is worth computing while the sequence's estimate
 * that every draft up to it is accepted stays at least this; with a module
 * that predicts poorly p[0] falls and no chain runs. */
#define MTP_CHAIN_MIN 0.3
static int ring_cap(const di_engine *e) { return e->be.mtp_window > 0 ? e->be.mtp_window : e->spec.mtp_ring; }

void di_spec_mtp_seq_free(di_seq *s) {
  free(s->mtp_ring);
  s->mtp_ring = NULL;
}

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

/* Runs the module over mb, writes draft index j of every sequence whose row
 * it wanted and keeps that row's output state (the next chained pair's
 * input); false on failure (no drafts then). */
static bool run_module(di_engine *e, di_batch *mb, int j) {
  di_status st = {0};
  const int D = e->be.n_embd;
  int want = 0;
  for (int n = 0; n < mb->n_tokens; n++) want += mb->want_logits[n];
  if (want > e->logits_cap && !di_engine_logit_rows(e, want)) return false;
  if (e->be.forward_mtp(e->be.user, e->pool, mb, e->spec.mtp_hidden, e->logits, e->spec.mtp_out, &st) != DI_OK)
    return false;
  dump_rows(e->logits, want, e->be.n_vocab);
  e->acc.spec_mtp_forwards++;
  e->acc.spec_mtp_rows += (uint64_t)mb->n_tokens;
  for (int n = 0, r = 0; n < mb->n_tokens; n++) {
    if (!mb->want_logits[n]) continue;
    const int i = mb->seq[n];
    di_seq *s = e->b_owner[i];
    s->mtp_draft[j] = argmax(e->logits + (size_t)r++ * e->be.n_vocab, e->be.n_vocab);
    s->mtp_n = j + 1;
    s->mtp_at = s->len;
    memcpy(e->spec.mtp_chain + (size_t)i * D, e->spec.mtp_out + (size_t)n * D, (size_t)D * sizeof(float));
  }
  mb->n_tokens = 0;
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

/* A window table entry before the window is -1: a row there cannot be written (nor is it read). */
static bool row_mapped(const di_engine *e, const di_batch_seq *bseq, int p) {
  for (int k = 0; k < e->be.n_swa_tables; k++)
    if (bseq->swa[k][p / e->pool->block_size] < 0) return false;
  return true;
}

/* Catches s (batch slot i, its step rows from batch token t0 on, the first at
 * position first) up to the pairs of [.., to): appends them to mb, running
 * the module whenever mb is full; with draft the last pair wants logits. A
 * module that can write K/V rows alone (be.mtp_kv_only: mb is K/V-only) gets
 * the last pair apart (its hidden state kept in mtp_chain[i]), to run once
 * every row it attends to is written. */
static bool catch_up(di_engine *e, di_batch *mb, int i, int t0, int first, int to, bool draft) {
  di_seq *s = e->b_owner[i];
  const int D = e->be.n_embd, cap = ring_cap(e), W = e->be.mtp_window;
  int start = s->mtp_done;
  if (W > 0 && start < to - W) start = to - W; /* older pairs are never read again */
  if (start < first) { /* from the ring: what it holds (a prefix-cache hit's positions it never saw stay holes) */
    int lo = s->mtp_ring_hi >= first ? s->mtp_ring_lo : first;
    if (start < lo) start = lo < first ? lo : first;
  }
  const bool apart = draft && e->be.mtp_kv_only;
  if (apart)
    memcpy(e->spec.mtp_chain + (size_t)i * D, e->be.hidden + (size_t)(t0 + to - 1 - first) * D, (size_t)D * sizeof(float));
  for (int p = start; p < to - apart; p++) {
    if (!row_mapped(e, &e->b_seqs[i], p)) continue;
    if (mb->n_tokens == e->max_batch_tokens && !run_module(e, mb, 0)) return false;
    int n = mb->n_tokens++;
    const float *h = p < first ? s->mtp_ring + (size_t)(p % cap) * D : e->be.hidden + (size_t)(t0 + p - first) * D;
    memcpy(e->spec.mtp_hidden + (size_t)n * D, h, (size_t)D * sizeof(float));
    e->spec.mtp_tokens[n] = s->tokens[p + 1];
    e->spec.mtp_pos[n] = p;
    e->spec.mtp_seq[n] = i;
    e->spec.mtp_want[n] = draft && p == to - 1;
  }
  s->mtp_done = to;
  return true;
}

/* Keeps the hidden states of the step's positions [first, to) in s's ring. */
static void ring_store(di_engine *e, di_seq *s, int t0, int first, int to) {
  const int D = e->be.n_embd, cap = ring_cap(e);
  int a = first > to - cap ? first : to - cap;
  for (int p = a; p < to; p++)
    memcpy(s->mtp_ring + (size_t)(p % cap) * D, e->be.hidden + (size_t)(t0 + p - first) * D, (size_t)D * sizeof(float));
  if (a > s->mtp_ring_hi || a < s->mtp_ring_lo) s->mtp_ring_lo = a; /* not contiguous with what it held */
  s->mtp_ring_hi = to;
  if (s->mtp_ring_lo < to - cap) s->mtp_ring_lo = to - cap;
}

/* The fork step of an n > 1 request (its first completion s just computed the
 * prompt; the siblings, forked after sampling, share its blocks and start
 * from the next step): each sibling takes s's ring. The pairs before the fork
 * position f (the prompt's last) are every completion's, written once by s;
 * the pair at f holds the completion's own first token, so a sibling writes
 * it again in its own copy of f's block, which its first step copies when
 * that block also holds its next position (f + 1 in the same block); when
 * f ends a block (shared, as the prompt blocks before it) the sibling keeps
 * s's pair there: its acceptance may suffer, never its output. */
static void fork_siblings(di_engine *e, const di_seq *s) {
  const di_req *r = s->req;
  const int cap = ring_cap(e), bs = e->pool->block_size, f = s->n_computed - 1;
  const size_t bytes = (size_t)cap * (size_t)e->be.n_embd * sizeof *s->mtp_ring;
  for (int k = 1; k < r->n_seqs; k++) {
    di_seq *c = r->seqs[k];
    if (c->state != DI_SEQ_RUNNING || c->mtp_ring || c->n_computed != s->n_computed || !(c->mtp_ring = malloc(bytes)))
      continue;
    memcpy(c->mtp_ring, s->mtp_ring, bytes);
    c->mtp_ring_lo = s->mtp_ring_lo;
    c->mtp_ring_hi = s->mtp_ring_hi;
    c->mtp_done = s->mtp_done > f && f % bs != bs - 1 ? f : s->mtp_done;
  }
}

/* A sibling c forked this step (fork_siblings) drafts in its first step too,
 * from batch slot j of its own (the first completion's is i): its pair at the
 * fork position f (h at f beside its own first token) goes in its own copy of
 * f's block, taken now, once the first completion's catch-up has written the
 * pairs before f there (its first step would take that copy anyway). Not when
 * f ends a block (shared, see fork_siblings) or the pool has no block free. */
static bool sibling_slot(di_engine *e, int i, di_seq *c, int j) {
  const int D = e->be.n_embd, bs = e->pool->block_size, f = c->len - 2;
  if (c->state != DI_SEQ_RUNNING || !c->mtp_ring || c->mtp_done != f || f % bs == bs - 1 || c->n_computed != f + 1 ||
      di_spec_k_cap(e, c, 1) <= 0 || !di_spec_active(&c->spec, e->acc.steps))
    return false;
  int need = di_kv_table_blocks_needed(e->pool, &c->table, f, f + 1);
  for (int k = 0; k < e->be.n_swa_tables; k++) need += di_kv_table_blocks_needed(e->pool, &c->swa[k], f, f + 1);
  if (need > di_kv_n_available(e->pool)) return false;
  di_batch_seq *q = &e->b_seqs[j];
  *q = e->b_seqs[i];
  di_kv_table_prepare(e->pool, &c->table, f, f + 1);
  q->blocks = c->table.blocks;
  q->n_blocks = c->table.n_blocks;
  for (int k = 0; k < e->be.n_swa_tables; k++) {
    di_kv_table_prepare(e->pool, &c->swa[k], f, f + 1);
    q->swa[k] = c->swa[k].blocks;
    q->n_swa_blocks = c->swa[k].n_blocks;
  }
  e->b_owner[j] = c;
  memcpy(e->spec.mtp_chain + (size_t)j * D, c->mtp_ring + (size_t)(f % ring_cap(e)) * D, (size_t)D * sizeof(float));
  c->mtp_done = f + 1;
  c->mtp_n = 0;
  return true;
}

void di_spec_mtp_step(di_engine *e, const di_batch *b) {
  const int D = e->be.n_embd, bs = e->pool->block_size, cap = ring_cap(e);
  di_batch mb = {.tokens = e->spec.mtp_tokens, .pos = e->spec.mtp_pos, .seq = e->spec.mtp_seq,
                 .want_logits = e->spec.mtp_want, .seqs = b->seqs, .n_seqs = b->n_seqs,
                 .n_swa_tables = b->n_swa_tables, .kv_only = e->be.mtp_kv_only};
  int *depth = e->spec.mtp_depth, kmax = 0;
  bool *grew = e->spec.mtp_grew, ok = true;
  for (int i = 0, t0 = 0; i < b->n_seqs; t0 += e->b_owner[i]->take, i++) {
    di_seq *s = e->b_owner[i];
    depth[i] = 0;
    grew[i] = false;
    s->mtp_n = 0;
    if (s->state != DI_SEQ_RUNNING || di_spec_k_cap(e, s, 1) <= 0) continue;
    /* pairs are formed for the positions computed (not rejected drafts') whose next token is known */
    const int first = b->pos[t0], to = s->n_computed < s->len - 1 ? s->n_computed : s->len - 1;
    if (to <= first) continue;
    if (!s->mtp_ring && !(s->mtp_ring = malloc((size_t)cap * (size_t)D * sizeof *s->mtp_ring))) continue;
    if (s->mtp_done > first) s->mtp_done = first; /* recomputed positions (preemption) are written again */
    /* a decode-ready sequence whose pair at len - 2 was just formed drafts the token at len if active */
    bool draft = s->n_computed == s->len - 1 && di_spec_active(&s->spec, e->acc.steps);
    /* full attention: a ring about to lose positions the module has not seen is caught up first */
    bool spill = e->be.mtp_window == 0 && to - s->mtp_done > cap;
    if (ok && (draft || spill)) ok = catch_up(e, &mb, i, t0, first, to, draft);
    if (ok && draft) {
      depth[i] = chain_depth(e, s);
      if (depth[i] > kmax) kmax = depth[i];
    }
    ring_store(e, s, t0, first, to);
    if (s->req->n > 1 && s->index == 0 && s->n_gen == 1) fork_siblings(e, s);
  }
  if (!ok || (mb.n_tokens > 0 && !run_module(e, &mb, 0))) return;
  /* siblings forked this step, after their first completion's catch-up */
  int n_slots = b->n_seqs;
  for (int i = 0; i < b->n_seqs; i++) {
    di_seq *s = e->b_owner[i];
    if (depth[i] == 0 || s->req->n <= 1 || s->index != 0 || s->n_gen != 1) continue;
    for (int k = 1; k < s->req->n_seqs; k++) {
      if (!sibling_slot(e, i, s->req->seqs[k], n_slots)) continue;
      grew[n_slots] = false;
      depth[n_slots] = chain_depth(e, s->req->seqs[k]);
      if (depth[n_slots] > kmax) kmax = depth[n_slots];
      n_slots++;
    }
  }
  mb.n_seqs = n_slots;
  /* The drafting pairs (at len - 2) kept apart (siblings' always): their K/V rows and logits */
  mb.kv_only = false;
  for (int i = 0; i < n_slots; i++) {
    if (depth[i] == 0 || (i < b->n_seqs && !e->be.mtp_kv_only)) continue;
    di_seq *s = e->b_owner[i];
    int n = mb.n_tokens++;
    memcpy(e->spec.mtp_hidden + (size_t)n * D, e->spec.mtp_chain + (size_t)i * D, (size_t)D * sizeof(float));
    e->spec.mtp_tokens[n] = s->tokens[s->len - 1];
    e->spec.mtp_pos[n] = s->len - 2;
    e->spec.mtp_seq[n] = i;
    e->spec.mtp_want[n] = true;
  }
  if (mb.n_tokens > 0 && !run_module(e, &mb, 0)) return;
  /* Chained rounds: pair (module output at q - 1, draft j - 1) at q = len - 2 + j.
   * Its K/V row is scratch (the next step's real pair at q replaces it), in a
   * block taken only if one is free and given back right after. */
  for (int j = 1; j < kmax; j++) {
    for (int i = 0; i < n_slots; i++) {
      di_seq *s = e->b_owner[i];
      if (depth[i] <= j || s->mtp_n != j) continue;
      int q = s->len - 2 + j;
      if (!scratch_row(e, s, &e->b_seqs[i], q)) continue;
      grew[i] = true;
      int n = mb.n_tokens++;
      memcpy(e->spec.mtp_hidden + (size_t)n * D, e->spec.mtp_chain + (size_t)i * D, (size_t)D * sizeof(float));
      e->spec.mtp_tokens[n] = s->mtp_draft[j - 1];
      e->spec.mtp_pos[n] = q;
      e->spec.mtp_seq[n] = i;
      e->spec.mtp_want[n] = true;
    }
    if (mb.n_tokens == 0 || !run_module(e, &mb, j)) break;
  }
  for (int i = 0; i < n_slots; i++) {
    if (!grew[i]) continue;
    di_seq *s = e->b_owner[i];
    const int keep = (s->n_computed + bs - 1) / bs;
    di_kv_table_truncate(e->pool, &s->table, keep);
    for (int k = 0; k < e->be.n_swa_tables; k++) di_kv_table_truncate(e->pool, &s->swa[k], keep);
  }
}
