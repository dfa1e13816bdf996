/* The scheduler: every step builds one batch under max_batch_tokens.
 *
 * Order of service (each pass in (priority desc, arrival asc) order):
 *  1. decode tokens of running sequences (one each), so TPOT stays flat;
 *  2. the next prompt chunk of running sequences still in prefill;
 *  3. admission of waiting sequences (new requests and preempted ones, which
 *     keep their arrival order so they resume first: no starvation), while
 *     running + n <= max_seqs and the budget lasts. While sequences wait,
 *     pass 2 leaves half of its budget to this pass (chunked prefill
 *     interleaves: a long prompt cannot starve a short request).
 *
 * Preemption by recompute: when a running sequence needs a block and the pool
 * (free + parked prefix blocks) is empty, the lowest-priority, latest-arrived
 * running sequence not yet scheduled this step gives back all its blocks and
 * returns to the waiting queue with its token history; when readmitted it
 * recomputes its K/V (hitting the prefix cache where its blocks survived) and
 * continues exactly where it stopped: it samples nothing during recompute, so
 * its RNG stream and outputs are unchanged. If no other victim exists the
 * sequence itself yields; a sequence alone in the pool that still cannot grow
 * finishes with "length". Admission never preempts, and readmits a
 * preempted sequence beside running ones only when the rest of it fits
 * (resume_fits), so that it is not the next victim at its next block.
 *
 * Resumption and prefix hits go through replay.c: a sequence whose
 * sliding-window blocks were evicted while it waited replays from the last
 * checkpoint instead of recomputing from position 0.
 *
 * Aging: priority could starve a low-priority request under a steady stream
 * of higher-priority ones, so a sequence that has waited DI_SCHED_AGING_STEPS
 * steps is admitted next regardless of priority (oldest first). */
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "kv/prefix.h"

#define DI_SCHED_AGING_STEPS 256

static bool seq_before(const di_seq *a, const di_seq *b) {
  if (a->req->priority != b->req->priority) return a->req->priority > b->req->priority;
  if (a->req->arrival != b->req->arrival) return a->req->arrival < b->req->arrival;
  return a->index < b->index;
}

void di_seq_list_insert(di_seq_list *l, di_seq *s) {
  if (l->n == l->cap) { /* grows with submissions, never during a step's hot loop */
    int cap = l->cap ? l->cap * 2 : 64;
    di_seq **v = realloc(l->v, (size_t)cap * sizeof *v);
    if (!v) abort(); /* lists are presized for max_seqs; only a huge queue gets here */
    l->v = v;
    l->cap = cap;
  }
  int i = l->n;
  while (i > 0 && seq_before(s, l->v[i - 1])) i--;
  memmove(l->v + i + 1, l->v + i, (size_t)(l->n - i) * sizeof *l->v);
  l->v[i] = s;
  l->n++;
}

void di_seq_list_remove(di_seq_list *l, di_seq *s) {
  for (int i = 0; i < l->n; i++)
    if (l->v[i] == s) {
      memmove(l->v + i, l->v + i + 1, (size_t)(l->n - i - 1) * sizeof *l->v);
      l->n--;
      return;
    }
}

/* The blocks its tables map (a preempted sequence's held checkpoint stays). */
static void release_tables(di_engine *e, di_seq *s) {
  di_kv_table *t[DI_KV_MAX_SWA_TABLES + 1] = {&s->table};
  for (int k = 0; k < e->be.n_swa_tables; k++) t[k + 1] = &s->swa[k];
  di_kv_tables_release(e->pool, t, 1 + e->be.n_swa_tables, s->tokens);
}

void di_seq_kv_release(di_engine *e, di_seq *s) {
  di_replay_drop(e, s);
  release_tables(e, s);
}

void di_seq_kv_fork(di_engine *e, di_seq *dst, const di_seq *src) {
  di_kv_table_fork(e->pool, &dst->table, &src->table);
  for (int k = 0; k < e->be.n_swa_tables; k++) di_kv_table_fork(e->pool, &dst->swa[k], &src->swa[k]);
}

/* Where the main table's writes start: a replay's positions are already there. */
static int main_start(const di_seq *s) { return s->replay_end > s->n_computed ? s->replay_end : s->n_computed; }

/* Blocks needed in all of s's tables to write positions [s->n_computed, end). */
static int blocks_needed(di_engine *e, di_seq *s, int end) {
  int n = di_kv_table_blocks_needed(e->pool, &s->table, main_start(s), end);
  for (int k = 0; k < e->be.n_swa_tables; k++)
    n += di_kv_table_blocks_needed(e->pool, &s->swa[k], s->n_computed, end);
  return n;
}

/* Gives back all of a running sequence's blocks and returns it to the
 * waiting queue with its token history (resumed, it recomputes). */
static void to_waiting(di_engine *e, di_seq *s) {
  release_tables(e, s);
  s->n_computed = s->replay_end = 0;
  s->state = DI_SEQ_WAITING;
  s->queued_at = e->acc.steps;
  di_seq_list_remove(&e->running, s);
  di_seq_list_insert(&e->waiting, s);
}

static void preempt(di_engine *e, di_seq *s) {
  di_replay_hold(e, s); /* its latest checkpoint's windows outlive the wait */
  to_waiting(e, s);
  s->n_preempted++;
  e->acc.preemptions++;
}

/* Sequences of paused requests leave the running batch (di_engine_pause). */
static void park_paused(di_engine *e) {
  for (int i = e->running.n - 1; i >= 0; i--)
    if (e->running.v[i]->req->paused) to_waiting(e, e->running.v[i]);
}

/* Lowest-ranked running sequence that is not in this step's batch. */
static di_seq *pick_victim(di_engine *e, const di_seq *except) {
  for (int i = e->running.n - 1; i >= 0; i--) {
    di_seq *v = e->running.v[i];
    if (!v->scheduled && v != except) return v;
  }
  return NULL;
}

static int fits(di_engine *e, di_seq *s, int end) { return blocks_needed(e, s, end) <= di_kv_n_available(e->pool); }

/* Whether a preempted sequence can come back and reach its next token: the
 * main table's blocks up to len + 1, each window table's window and a chunk.
 * Readmitted with less, it would be the first victim again at the next
 * block (two sequences ping-ponging, each resume replaying). */
static bool resume_fits(di_engine *e, di_seq *s) {
  const int bs = e->pool->block_size;
  int n = di_kv_table_blocks_needed(e->pool, &s->table, main_start(s), s->len + 1);
  if (e->be.policy == DI_KV_POLICY_WINDOW && e->be.window > 0) {
    int cap = (e->be.window + e->max_batch_tokens) / bs + 2;
    n = n < cap ? n : cap;
  }
  for (int k = 0; k < e->be.n_swa_tables; k++) {
    int w = di_kv_table_blocks_needed(e->pool, &s->swa[k], s->n_computed, s->len + 1);
    int cap = di_kv_window_span(s->swa[k].window, e->max_batch_tokens, s->swa[k].sparse) / bs + 2;
    n += w < cap ? w : cap;
  }
  return n <= di_kv_n_available(e->pool);
}

/* Waiting sequences give back their held checkpoints, lowest-ranked first,
 * until s fits [.., end) (end < 0: all of them); their resumes then replay
 * from whatever checkpoint the cache still has (longer, still exact). True
 * if any was given back. */
static bool drop_waiting_holds(di_engine *e, di_seq *s, int end) {
  bool any = false;
  for (int i = e->waiting.n - 1; i >= 0 && (end < 0 || !fits(e, s, end)); i--)
    if (di_replay_drop(e, e->waiting.v[i]) > 0) {
      e->acc.swa_hold_drops++;
      any = true;
    }
  return any;
}

/* A sequence's checkpoints go back to the cache (kept until evicted): a later
 * hit or resume then replays further. True if it freed any. */
static bool unpin_ckpts(di_engine *e, di_seq *s, bool keep_last) {
  int n = 0;
  if (e->be.policy == DI_KV_POLICY_WINDOW) n += di_kv_table_unpin_ckpts(e->pool, &s->table, keep_last);
  for (int k = 0; k < e->be.n_swa_tables; k++) n += di_kv_table_unpin_ckpts(e->pool, &s->swa[k], keep_last);
  return n > 0;
}

/* Largest chunk end <= want that fits in the available blocks (blocks needed
 * grow with end, over all of the sequence's tables: a binary search). */
static int shrink_to_fit(di_engine *e, di_seq *s, int want) {
  if (want <= s->n_computed || !fits(e, s, s->n_computed + 1)) return want < s->n_computed ? want : s->n_computed;
  int lo = s->n_computed + 1, hi = want;
  while (lo < hi) {
    int mid = lo + (hi - lo + 1) / 2;
    if (fits(e, s, mid)) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/* A request with a logits callback wants every position's row; its prompt
 * goes in chunks of at most this many (row invariance: same bits). */
#define DI_LOGITS_CB_CHUNK 64

/* Adds positions [n_computed, n_computed + take) of s (its drafts, if any,
 * are the last n_draft of them); the rows they want are consecutive. */
static void add_to_batch(di_engine *e, di_batch *b, di_seq *s, int take, int *n_out) {
  di_kv_table_prepare(e->pool, &s->table, main_start(s), s->n_computed + take);
  int slot = b->n_seqs++;
  di_batch_seq *bs = &e->b_seqs[slot];
  *bs = (di_batch_seq){.blocks = s->table.blocks, .n_blocks = s->table.n_blocks, .full_cached = s->replay_end};
  for (int k = 0; k < e->be.n_swa_tables; k++) {
    di_kv_table_prepare(e->pool, &s->swa[k], s->n_computed, s->n_computed + take);
    bs->swa[k] = s->swa[k].blocks;
    bs->n_swa_blocks = s->swa[k].n_blocks;
  }
  e->b_owner[slot] = s;
  const bool all = s->req->p.logits_cb != NULL;
  s->row0 = -1;
  s->logits_row = -1;
  for (int i = 0; i < take; i++) {
    int n = b->n_tokens++;
    int pos = s->n_computed + i;
    e->b_tokens[n] = s->tokens[pos];
    e->b_pos[n] = pos;
    e->b_seq[n] = slot;
    e->b_want[n] = all || pos >= s->len - 1;
    if (e->b_want[n] && s->row0 < 0) s->row0 = *n_out;
    if (pos == s->len - 1) s->logits_row = *n_out;
    if (e->b_want[n]) (*n_out)++;
    if (pos < s->len - 1) e->step_prefill++;
  }
  s->take = take;
  s->scheduled = true;
}

/* Blocks wholly before the window of the next token to compute go back to the pool. */
static void window_release(di_engine *e, di_seq *s) {
  int lo = s->n_computed - e->be.window + 1;
  if (e->be.window <= 0) return;
  if (e->be.policy == DI_KV_POLICY_WINDOW && lo > 0) di_kv_table_release_before(e->pool, &s->table, lo);
  for (int k = 0; k < e->be.n_swa_tables; k++)
    if ((lo = s->n_computed - s->swa[k].window + 1) > 0) di_kv_table_release_before(e->pool, &s->swa[k], lo);
}

/* Draft tokens for a decode sequence whose own token fits: as many as the
 * planner wants, the budget allows, the logits buffer can take and the pool
 * holds without preempting anyone (a draft is never worth a preemption). */
static int plan_drafts(di_engine *e, di_batch *b, di_seq *s, int budget, int n_out) {
  if (!e->spec.on) return 0;
  int k = di_spec_propose(e, s, budget - 1, b->n_tokens + 1);
  if (k > 0 && !di_engine_logit_rows(e, n_out + 1 + k + (e->running.n - b->n_seqs))) k = 0;
  while (k > 0 && !fits(e, s, s->len + k)) k--;
  e->spec.plan_emit += 1 + di_spec_expected(&s->spec, k);
  return k;
}

/* Schedules running sequences of one kind (decode or prefill); returns true
 * if the running list changed so the caller rescans. */
static bool schedule_running(di_engine *e, di_batch *b, int *budget, int *n_out, bool decode) {
  for (int i = 0; i < e->running.n && *budget > 0; i++) {
    di_seq *s = e->running.v[i];
    int need = s->len - s->n_computed;
    if (s->scheduled || (need == 1) != decode) continue;
    window_release(e, s);
    if (!decode && s->req->p.logits_cb) {
      if (need > DI_LOGITS_CB_CHUNK) need = DI_LOGITS_CB_CHUNK;
      if (need > *budget) need = *budget; /* else a chunk wider than the step could never get its rows */
      if (!di_engine_logit_rows(e, *n_out + need + (e->running.n - b->n_seqs - 1))) continue; /* rows for the others still to come */
    }
    int end = s->n_computed + (need < *budget ? need : *budget);
    if (!decode && !fits(e, s, end)) {
      int shrunk = shrink_to_fit(e, s, end);
      if (shrunk > s->n_computed) end = shrunk;
    }
    bool changed = false;
    /* Checkpoints before a sequence's latest one are cache for other
     * requests' prefix hits, live KV is not: every running sequence lets them
     * go before anyone is preempted. The latest stays pinned (a preempted
     * sequence resumes by replaying from it) until no one is left to preempt. */
    for (int k = -1; k < e->running.n && !fits(e, s, end); k++) unpin_ckpts(e, k < 0 ? s : e->running.v[k], true);
    /* Its own older checkpoints also go before the cache gives up other
     * prompts' deepest checkpoints, end windows or full-attention KV (which
     * fits() counts as available): a long prompt pinning all of its
     * checkpoints would otherwise push out the documents cached before it. */
    if (blocks_needed(e, s, end) > di_kv_n_free(e->pool) + di_kv_prefix_n_expendable(e->pool)) unpin_ckpts(e, s, true);
    while (!fits(e, s, end)) {
      di_seq *v = pick_victim(e, s);
      if (!v) break;
      preempt(e, v);
      changed = true;
    }
    drop_waiting_holds(e, s, end);
    /* Alone, its latest checkpoint goes too; beside others (all in this
     * step's batch) it yields instead, holding that checkpoint. */
    if (!fits(e, s, end) && e->running.n == 1 && unpin_ckpts(e, s, false) && !decode && !fits(e, s, end)) {
      int shrunk = shrink_to_fit(e, s, end);
      if (shrunk > s->n_computed) end = shrunk;
    }
    if (!fits(e, s, end)) {
      if (e->running.n == 1)
        di_engine_finish_seq(e, s, s->n_gen > 0 ? DI_FINISH_LENGTH : DI_FINISH_ERROR,
                             "the KV pool is too small for this sequence");
      else
        preempt(e, s);
      return true;
    }
    s->n_draft = decode ? plan_drafts(e, b, s, *budget, *n_out) : 0;
    end += s->n_draft;
    add_to_batch(e, b, s, end - s->n_computed, n_out);
    *budget -= end - s->n_computed;
    if (changed) return true;
  }
  return false;
}

/* The head of the queue, unless a sequence has waited too long; paused
 * requests' sequences are passed over. NULL if every one is paused. */
static di_seq *next_waiting(di_engine *e) {
  di_seq *s = NULL, *old = NULL;
  for (int i = 0; i < e->waiting.n; i++) {
    di_seq *w = e->waiting.v[i];
    if (w->req->paused) continue;
    if (!s) s = old = w;
    else if (w->req->arrival < old->req->arrival || (w->req->arrival == old->req->arrival && w->index < old->index))
      old = w;
  }
  return s && e->acc.steps - old->queued_at >= DI_SCHED_AGING_STEPS ? old : s;
}

/* Running sequences plus the siblings that running n > 1 requests will fork
 * when their prompt completes: admission keeps this <= max_seqs. */
static int running_slots(const di_engine *e) {
  int n = e->running.n;
  for (int i = 0; i < e->running.n; i++) {
    const di_seq *s = e->running.v[i];
    if (s->index == 0 && s->req->n_seqs < s->req->n) n += s->req->n - 1;
  }
  return n;
}

static void admit(di_engine *e, di_batch *b, int *budget, int *n_out) {
  while (e->waiting.n > 0 && *budget > 0) {
    di_seq *s = next_waiting(e);
    if (!s) break;
    di_req *r = s->req;
    int slots = (s->index == 0 && r->n_seqs < r->n) ? r->n : 1; /* siblings are forked later */
    if (e->running.n > 0 && running_slots(e) + slots > e->max_seqs) break;
    const bool all = r->p.logits_cb != NULL; /* every row wanted: no prefix hits, bounded chunks */
    int replayed = 0;
    if (s->n_computed == 0 && s->table.n_blocks == 0 && !all) s->n_computed = di_replay_match(e, s, &replayed);
    int want = s->len - s->n_computed < *budget ? s->len - s->n_computed : *budget;
    if (all && want > DI_LOGITS_CB_CHUNK) want = DI_LOGITS_CB_CHUNK;
    if (!di_engine_logit_rows(e, *n_out + (all ? want : 1))) break;
    int end = s->n_computed + want;
    if (!fits(e, s, end)) end = shrink_to_fit(e, s, end);
    if (s->n_preempted > 0 && e->running.n > 0 && !resume_fits(e, s)) end = s->n_computed;
    if (end <= s->n_computed) {
      release_tables(e, s); /* give back the prefix hits; retry later */
      s->n_computed = s->replay_end = 0;
      if (e->running.n == 0 && b->n_tokens == 0) {
        if (drop_waiting_holds(e, s, -1)) continue; /* nothing runs: held checkpoints must not block it */
        di_engine_finish_seq(e, s, DI_FINISH_ERROR, "the KV pool is too small for this sequence");
      }
      break;
    }
    di_replay_drop(e, s); /* its tables map what it held */
    if (!r->admitted_once && s->index == 0) { /* hits count once per request, at first admission */
      r->t_admit = di_engine_now();
      r->cached_tokens = s->n_computed;
      e->acc.prefix_queries++;
      e->acc.prefix_query_tokens += (uint64_t)r->n_prompt;
      e->acc.prefix_hit_tokens += (uint64_t)s->n_computed;
      r->replayed_tokens = replayed;
    }
      if (replayed > 0) { /* a hit's or a resume's */
      e->acc.swa_replays++;
      e->acc.swa_replay_tokens += (uint64_t)replayed;
      if (replayed > e->acc.swa_replay_max) e->acc.swa_replay_max = replayed;
    }
    r->admitted_once = true;
    di_seq_list_remove(&e->waiting, s);
    s->state = DI_SEQ_RUNNING;
    di_seq_list_insert(&e->running, s);
    add_to_batch(e, b, s, end - s->n_computed, n_out);
    *budget -= end - s->n_computed;
  }
}

int di_sched_build(di_engine *e, di_batch *b) {
  memset(b, 0, sizeof *b);
  b->tokens = e->b_tokens;
  b->pos = e->b_pos;
  b->seq = e->b_seq;
  b->want_logits = e->b_want;
  b->seqs = e->b_seqs;
  b->n_swa_tables = e->be.n_swa_tables;
  for (int i = 0; i < e->running.n; i++) {
    e->running.v[i]->scheduled = false;
    e->running.v[i]->logits_row = e->running.v[i]->row0 = -1;
    e->running.v[i]->n_draft = 0;
  }
  e->step_prefill = 0;
  e->spec.plan_emit = 0;
  park_paused(e);
  int budget = e->max_batch_tokens, n_out = 0;
  while (schedule_running(e, b, &budget, &n_out, true)) {
  }
  /* A long prompt must not hold the budget for all of its chunks while new
   * requests wait: while any wait (and a slot is free), running prefills get
   * half of what decode left and admission the rest, so a short request
   * starts between two chunks instead of after the whole prompt. */
  int reserve = next_waiting(e) && running_slots(e) < e->max_seqs ? budget / 2 : 0;
  int prefill = budget - reserve;
  while (schedule_running(e, b, &prefill, &n_out, false)) {
  }
  budget = prefill + reserve;
  admit(e, b, &budget, &n_out);
  return b->n_tokens;
}
