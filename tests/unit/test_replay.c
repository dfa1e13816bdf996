/* SWA checkpoints and bounded replay (kv/table.c, kv/prefix.c,
 * engine/replay.c) against the fake mixed model (tests/unit/fake_model.h):
 * one full-attention layer that hashes the whole history and two
 * sliding-window layers (window 6) that hash the last 6 positions, each read
 * back from its own table. The reference is the one-table layout (every
 * layer's KV kept in full, like --swa-full); replays must give the same
 * tokens and logprobs, cover at most C positions, and reuse the cached prefix. */
#include "check.h"
#include "fake_model.h"
#include "kv/prefix.h"

#define W 6
#define BS 4
#define DOC 120
#define GEN 24

typedef struct out {
  int32_t tokens[GEN + 8];
  float logprobs[GEN + 8];
  int n, cached, replayed, final;
} out;

static void on_event(const di_event *ev, void *user) {
  out *o = user;
  if (ev->token >= 0 && o->n < GEN + 8) {
    o->logprobs[o->n] = ev->logprob;
    o->tokens[o->n++] = ev->token;
  }
  if (ev->finish != DI_FINISH_NONE) {
    o->final++;
    o->cached = ev->cached_tokens;
    o->replayed = ev->replayed_tokens;
  }
}

static bool same(const out *a, const out *b) {
  return a->n == b->n && a->n == GEN && !memcmp(a->tokens, b->tokens, sizeof(int32_t) * GEN) &&
         !memcmp(a->logprobs, b->logprobs, sizeof(float) * GEN);
}

/* grouped: sliding-window tables (else one table for all layers). */
static di_engine *make(bool grouped, int ckpt, int no_replay, size_t kv_blocks, int max_seqs, di_status *st) {
  di_engine_opts o;
  di_engine_opts_default(&o);
  o.kv_type = DI_KV_DTYPE_F32;
  o.max_seqs = max_seqs;
  o.max_batch_tokens = 32;
  o.block_size = BS;
  o.swa_checkpoint = ckpt;
  o.no_replay = no_replay;
  o.kv_mem = kv_blocks * di_kv_block_bytes(BS, 1, 2, DI_KV_DTYPE_F32);
  di_engine_backend be = fake_backend(1024);
  be.window = W;
  be.n_swa_tables = grouped ? 2 : 0;
  di_engine *e = NULL;
  if (di_engine_create_backend(&o, &be, &e, st) != DI_OK) return NULL;
  return e;
}

static int32_t doc[DOC + 40], other[DOC + 40];

static void submit(di_engine *e, const int32_t *ids, int n, out *o) {
  memset(o, 0, sizeof *o);
  di_request_params p;
  di_request_params_default(&p);
  p.ignore_eos = 1;
  p.prompt_ids = ids;
  p.n_prompt = (size_t)n;
  p.max_tokens = GEN;
  p.logprobs = 1;
  p.cb = on_event;
  p.user = o;
  char err[256];
  CHECKF(di_engine_submit(e, &p, NULL, err, sizeof err) == DI_OK, "%s", err);
}

static void run_all(di_engine *e) {
  int guard = 0;
  while (di_engine_step(e) > 0 && guard++ < 100000) {
  }
  CHECK(guard < 100000);
}

/* The workload, one request after the other: the whole document, an
 * unrelated prompt (pushes the document's windows out of a small pool), then
 * the document cut at a position that is no checkpoint (a branch from an
 * earlier point) and the document again with another tail. */
#define NQ 4
static const int q_len[NQ] = {DOC, DOC, 86, DOC + 6};

static const int32_t *q_ids(int i) { return i == 1 ? other : doc; }

static void run_queries(di_engine *e, out *o, di_engine_stats *s) {
  for (int i = 0; i < NQ; i++) {
    submit(e, q_ids(i), q_len[i], &o[i]);
    run_all(e);
    CHECK(o[i].final == 1);
  }
  di_engine_stats_get(e, s);
  CHECKF(s->kv_blocks_used == 0, "%d blocks still used", s->kv_blocks_used);
}

static void test_ckpt_blocks(void) {
  /* window 6, blocks of 4, C = 12: the window of 12 is positions 7..11 = blocks 1, 2;
   * of 24: 19..23 = blocks 4, 5; of 36: blocks 7, 8 */
  di_kv_table t = {.window = W, .ckpt = 12};
  bool want[12] = {false, true, true, false, true, true, false, true, true, false, true, true};
  for (int i = 0; i < 12; i++) CHECKF(di_kv_table_ckpt_block(&t, BS, i) == want[i], "block %d", i);
  t.ckpt = 0;
  CHECK(!di_kv_table_ckpt_block(&t, BS, 1));
  /* a window of 16 blocks of 16, C = 64: positions 49..63 -> block 3 only */
  di_kv_table u = {.window = 16, .ckpt = 64};
  CHECK(di_kv_table_ckpt_block(&u, 16, 3) && !di_kv_table_ckpt_block(&u, 16, 2) && !di_kv_table_ckpt_block(&u, 16, 4));
  CHECK(di_kv_window_first(W, BS, 12) == 1 && di_kv_window_first(W, BS, 3) == 0);
}

/* The prefix cache evicts WINDOW-class blocks before KEEP and CKPT ones. */
static void test_eviction_order(void) {
  di_kv_pool *p = NULL;
  di_status st = {0};
  CHECK(di_kv_pool_create(&p, di_kv_block_bytes(BS, 1, 2, DI_KV_DTYPE_F32) * 3, BS, 1, 2, DI_KV_DTYPE_F32, &st) == DI_OK);
  CHECK(di_kv_prefix_enable(p, &st) == DI_OK);
  int32_t tok[3][BS] = {{1, 2, 3, 4}, {5, 6, 7, 8}, {9, 10, 11, 12}};
  int32_t b[3];
  di_kv_cache_class cls[3] = {DI_KV_CACHE_KEEP, DI_KV_CACHE_CKPT, DI_KV_CACHE_WINDOW};
  for (int i = 0; i < 3; i++) {
    b[i] = di_kv_alloc_group(p, i ? DI_KV_GROUP_WINDOW : DI_KV_GROUP_FULL);
    di_kv_prefix_insert(p, b[i], (uint64_t)i + 1, 0, tok[i], cls[i]);
  }
  CHECK(p->used_by_group[DI_KV_GROUP_FULL] == 1 && p->used_by_group[DI_KV_GROUP_WINDOW] == 2);
  CHECK(di_kv_prefix_n_ckpt(p) == 1);
  for (int i = 0; i < 3; i++) di_kv_unref(p, b[i]); /* parked in order KEEP, CKPT, WINDOW */
  CHECK(p->used_by_group[DI_KV_GROUP_WINDOW] == 0 && p->high_by_group[DI_KV_GROUP_WINDOW] == 2);
  CHECK(di_kv_alloc(p) == b[2]); /* the window block first, though parked last */
  CHECK(di_kv_alloc(p) == b[0]); /* then LRU among the rest */
  CHECK(di_kv_prefix_n_ckpt(p) == 1 && di_kv_prefix_contains(p, 2, 0, tok[1]));
  CHECK(di_kv_alloc(p) == b[1] && di_kv_prefix_n_ckpt(p) == 0);
  di_kv_pool_destroy(p);
  /* A superseded checkpoint goes before full-attention blocks and deepest
   * checkpoints, even when those were parked earlier. */
  CHECK(di_kv_pool_create(&p, di_kv_block_bytes(BS, 1, 2, DI_KV_DTYPE_F32) * 3, BS, 1, 2, DI_KV_DTYPE_F32, &st) == DI_OK);
  CHECK(di_kv_prefix_enable(p, &st) == DI_OK);
  di_kv_cache_class cls2[3] = {DI_KV_CACHE_KEEP, DI_KV_CACHE_CKPT, DI_KV_CACHE_CKPT};
  for (int i = 0; i < 3; i++) {
    b[i] = di_kv_alloc_group(p, DI_KV_GROUP_WINDOW);
    di_kv_prefix_insert(p, b[i], (uint64_t)i + 1, 0, tok[i], cls2[i]);
  }
  for (int i = 0; i < 3; i++) di_kv_unref(p, b[i]);
  di_kv_prefix_demote(p, 3, 0, tok[2]); /* parked: moves to the earlier tier */
  di_kv_prefix_demote(p, 1, 0, tok[0]); /* KEEP stays KEEP */
  CHECK(di_kv_prefix_class(p, 3, 0, tok[2]) == DI_KV_CACHE_CKPT_SHADOWED &&
        di_kv_prefix_class(p, 1, 0, tok[0]) == DI_KV_CACHE_KEEP && di_kv_prefix_n_ckpt(p) == 2);
  CHECK(di_kv_alloc(p) == b[2] && di_kv_alloc(p) == b[0] && di_kv_alloc(p) == b[1]);
  di_kv_pool_destroy(p);
}

static void test_replay_outputs(void) {
  di_status st = {0};
  out ref[NQ], got[NQ];
  di_engine_stats s;
  di_engine *e = make(false, 0, 0, 400, 4, &st); /* one table: the reference */
  CHECKF(e, "%s", st.msg);
  if (!e) return;
  run_queries(e, ref, &s);
  di_engine_destroy(e);
  /* A roomy grouped pool: every window stays cached, hits need no replay. */
  e = make(true, 12, 0, 400, 4, &st);
  run_queries(e, got, &s);
  for (int i = 0; i < NQ; i++) CHECKF(same(&ref[i], &got[i]), "roomy pool, query %d", i);
  CHECKF(s.swa_replays == 0 && got[2].cached == 84 && got[3].cached == DOC, "replays %llu, cached %d %d",
         (unsigned long long)s.swa_replays, got[2].cached, got[3].cached);
  di_engine_destroy(e);
  /* A pool that holds the full-attention blocks of both documents and the
   * checkpoints but not every window (150 blocks; checkpoint blocks peak at
   * 72, 64 and 48 for these C): the branch and the return hit the cached
   * prefix and replay at most C positions; with --no-replay they recompute.
   * Several C. A tighter pool (110) cannot keep every checkpoint: the cache
   * gives up the superseded ones first (kv/prefix.h), so the branch at 86,
   * whose checkpoint is superseded, replays longer (from position 0 at
   * C = 16, 24) and the return to the document's end up to 40 positions,
   * both exact: only the outputs are checked there. */
  const int cs[] = {16, 24, 48, 0};
  for (size_t k = 0; k < 2 * sizeof cs / sizeof *cs; k++) {
    const int c = cs[k % 4], pool = k < 4 ? 150 : 110;
    e = make(true, c, c == 0, (size_t)pool, 4, &st);
    CHECKF(e, "%s", st.msg);
    if (!e) continue;
    run_queries(e, got, &s);
    for (int i = 0; i < NQ; i++) CHECKF(same(&ref[i], &got[i]), "pool %d, C %d, query %d", pool, c, i);
    printf("pool %d, C %d: replays %llu (longest %d), branch cached %d replayed %d, return cached %d replayed %d, "
           "checkpoint blocks %d, window group high water %d\n",
           pool, c, (unsigned long long)s.swa_replays, s.swa_replay_max, got[2].cached, got[2].replayed, got[3].cached,
           got[3].replayed, s.kv_ckpt_blocks, s.kv_blocks_high_window);
    if (pool < 150) {
      CHECKF(c == 0 ? s.swa_replays == 0 : s.swa_replays >= 1, "pool %d C %d: %llu replays", pool, c,
             (unsigned long long)s.swa_replays);
    } else if (c > 0) {
      CHECKF(s.swa_replays >= 1 && s.swa_replay_max <= c && s.swa_checkpoint == c, "C %d: %llu replays, longest %d",
             c, (unsigned long long)s.swa_replays, s.swa_replay_max);
      for (int i = 2; i < NQ; i++)
        CHECKF(got[i].cached >= 48 && got[i].replayed <= c && got[i].cached + got[i].replayed >= 72,
               "C %d query %d: cached %d replayed %d", c, i, got[i].cached, got[i].replayed);
    } else {
      CHECKF(s.swa_replays == 0 && got[2].replayed == 0, "no replay: %llu replays", (unsigned long long)s.swa_replays);
    }
    di_engine_destroy(e);
  }
}

/* Preemption: a long sequence decoding when a higher-priority one arrives
 * in a pool that cannot hold both; the first is preempted, and resumes from
 * its cached full-attention prefix plus a replay from its latest checkpoint,
 * with the cold outputs. A preempted sequence holds that checkpoint's window
 * blocks while it waits; a sequence that cannot grow beside others in this
 * step's batch yields (holding it) rather than letting it go; and a preempted
 * sequence comes back only when the pool holds the rest of it. Without these,
 * pools below 84 blocks ping-ponged (up to 12 preemptions, resumes replaying
 * 68-136 positions: the victim's checkpoint was evicted while it waited).
 * Now each pool preempts once and recomputes at most C + a block more than
 * the run without preemption. 88 blocks and more need no preemption at all
 * (older checkpoints are given back first). */
static void run_preempt(di_engine *e, out *o) {
  submit(e, doc, DOC, &o[0]);
  for (int i = 0; i < 12 && o[0].n < 8; i++) di_engine_step(e);
  memset(&o[1], 0, sizeof o[1]);
  di_request_params p;
  di_request_params_default(&p);
  p.ignore_eos = 1;
  p.prompt_ids = other;
  p.n_prompt = DOC;
  p.max_tokens = GEN;
  p.logprobs = 1;
  p.priority = 1;
  p.cb = on_event;
  p.user = &o[1];
  char err[256];
  CHECKF(di_engine_submit(e, &p, NULL, err, sizeof err) == DI_OK, "%s", err);
  run_all(e);
}

static int32_t branch[DOC + 40];

/* B shares A's document (its full-attention prefix stays in use by B while
 * A waits), then branches off with its own tail and a long answer. */
static void run_shared(di_engine *e, out *o) {
  submit(e, doc, DOC, &o[0]);
  for (int i = 0; i < 12 && o[0].n < 8; i++) di_engine_step(e);
  memset(&o[1], 0, sizeof o[1]);
  di_request_params p;
  di_request_params_default(&p);
  p.ignore_eos = 1;
  p.prompt_ids = branch;
  p.n_prompt = DOC + 30;
  p.max_tokens = GEN;
  p.logprobs = 1;
  p.priority = 1;
  p.cb = on_event;
  p.user = &o[1];
  char err[256];
  CHECKF(di_engine_submit(e, &p, NULL, err, sizeof err) == DI_OK, "%s", err);
  run_all(e);
}

/* Where the hold matters: B's hit keeps A's full-attention prefix in use
 * while A waits, so the LRU's next victims are A's parked checkpoint windows.
 * Without the hold A's resume replayed 108, 108 and 36 positions at pools of
 * 50, 52 and 56 blocks (C = 24); with it 12 each. (At 54 blocks A's own
 * full-attention tail past its held checkpoint is evicted too, so its hit
 * ends before that checkpoint, and the one before, unpinned earlier, is
 * gone as well: 36 with the hold, 60 without. The hold covers the windows
 * only; bounding that case would mean holding the full-attention tail.) */
static void test_shared_preempt(void) {
  di_status st = {0};
  out ref[2], got[2];
  di_engine_stats s;
  di_engine *e = make(false, 0, 0, 400, 2, &st);
  run_shared(e, ref);
  di_engine_destroy(e);
  const int pools[] = {50, 52, 56};
  for (size_t k = 0; k < sizeof pools / sizeof *pools; k++) {
    const int pool = pools[k];
    e = make(true, 24, 0, (size_t)pool, 2, &st);
    CHECKF(e, "%s", st.msg);
    if (!e) return;
    run_shared(e, got);
    di_engine_stats_get(e, &s);
    int resume = (int)s.swa_replay_tokens - got[1].replayed; /* B's hit replay is its own */
    printf("shared document, pool %d: %llu preemptions, A's resume replayed %d, B's hit cached %d replayed %d\n", pool,
           (unsigned long long)s.preemptions, resume, got[1].cached, got[1].replayed);
    CHECKF(same(&ref[0], &got[0]) && same(&ref[1], &got[1]), "pool %d: n %d %d", pool, got[0].n, got[1].n);
    CHECKF(s.preemptions == 1 && resume > 0 && resume <= 24 && s.kv_blocks_used == 0 && s.swa_held_blocks == 0,
           "pool %d: %llu preemptions, resume replayed %d, %d used", pool, (unsigned long long)s.preemptions, resume,
           s.kv_blocks_used);
    di_engine_destroy(e);
  }
}

static void test_preemption(void) {
  di_status st = {0};
  out ref[2], got[2];
  di_engine_stats s;
  di_engine *e = make(false, 0, 0, 400, 2, &st);
  run_preempt(e, ref);
  di_engine_stats_get(e, &s);
  const uint64_t work = s.batch_tokens; /* positions computed without preemption */
  di_engine_destroy(e);
  const int pools[] = {48, 56, 64, 72, 76, 80, 84, 85};
  uint64_t replays = 0;
  for (size_t k = 0; k < sizeof pools / sizeof *pools; k++) {
    e = make(true, 24, 0, (size_t)pools[k], 2, &st);
    CHECKF(e, "%s", st.msg);
    if (!e) return;
    run_preempt(e, got);
    di_engine_stats_get(e, &s);
    CHECKF(same(&ref[0], &got[0]) && same(&ref[1], &got[1]), "pool %d: n %d %d", pools[k], got[0].n, got[1].n);
    printf("preemption, pool %d: %llu preemptions, %llu replays (longest %d, %llu positions), %llu holds given up, "
           "%llu positions computed (%llu without preemption)\n",
           pools[k], (unsigned long long)s.preemptions, (unsigned long long)s.swa_replays, s.swa_replay_max,
           (unsigned long long)s.swa_replay_tokens, (unsigned long long)s.swa_hold_drops,
           (unsigned long long)s.batch_tokens, (unsigned long long)work);
    CHECKF(s.preemptions == 1 && s.swa_replay_max <= 24 && s.batch_tokens <= work + 24 + BS,
           "pool %d: preemptions %llu, replays %llu, longest %d", pools[k], (unsigned long long)s.preemptions,
           (unsigned long long)s.swa_replays, s.swa_replay_max);
    replays += s.swa_replays;
    CHECKF(s.kv_blocks_used == 0 && s.swa_held_blocks == 0, "pool %d: %d blocks used, %d held", pools[k],
           s.kv_blocks_used, s.swa_held_blocks);
    di_engine_destroy(e);
  }
  CHECKF(replays >= 4, "%llu replays", (unsigned long long)replays); /* the resumes did replay, not only hit */
}

/* Held checkpoints give way: three long requests, two at a time, in a pool
 * (70 blocks) where a running sequence needs what a waiting one holds; that
 * hold goes (counted), its resume replays from what the cache still has, and
 * the outputs stay exact. */
static void test_hold_fallback(void) {
  di_status st = {0};
  out ref[3], got[3];
  di_engine_stats s;
  const int32_t *ids[3] = {doc, other, doc + 7};
  for (int pass = 0; pass < 2; pass++) {
    di_engine *e = pass ? make(true, 24, 0, 70, 2, &st) : make(false, 0, 0, 400, 3, &st);
    CHECKF(e, "%s", st.msg);
    if (!e) return;
    out *o = pass ? got : ref;
    for (int i = 0; i < 3; i++) {
      memset(&o[i], 0, sizeof o[i]);
      di_request_params p;
      di_request_params_default(&p);
      p.ignore_eos = 1;
      p.prompt_ids = ids[i];
      p.n_prompt = DOC;
      p.max_tokens = GEN;
      p.logprobs = 1;
      p.priority = i;
      p.cb = on_event;
      p.user = &o[i];
      char err[256];
      CHECKF(di_engine_submit(e, &p, NULL, err, sizeof err) == DI_OK, "%s", err);
      for (int k = 0; k < 6; k++) di_engine_step(e);
    }
    run_all(e);
    di_engine_stats_get(e, &s);
    if (pass) {
      printf("three at once, pool 70: %llu preemptions, %llu replays (longest %d), %llu holds given up\n",
             (unsigned long long)s.preemptions, (unsigned long long)s.swa_replays, s.swa_replay_max,
             (unsigned long long)s.swa_hold_drops);
      for (int i = 0; i < 3; i++) CHECKF(same(&ref[i], &got[i]), "request %d: n %d", i, got[i].n);
      CHECKF(s.preemptions > 0 && s.swa_hold_drops > 0 && s.kv_blocks_used == 0 && s.swa_held_blocks == 0,
             "%llu preemptions, %d used, %d held",
             (unsigned long long)s.preemptions, s.kv_blocks_used, s.swa_held_blocks);
    }
    di_engine_destroy(e);
  }
}

/* Shared documents under a pool that holds their full-attention KV and about
 * one checkpoint each, not every checkpoint: three documents of 100 positions
 * (no multiple of C = 24), then a second question on each (the document plus
 * another tail), interleaved. The superseded checkpoints (24, 48, 72) go
 * first, then the windows kept at the prompts' ends; each document keeps its
 * full-attention KV and its deepest checkpoint in the prompt (96), so every
 * second question reuses the document (>= 90% of its prompt) and replays
 * less than C: 4 positions at 136 blocks, 0-4 at 150 (the prompt-end windows
 * mostly survive). With one LRU for checkpoints and full-attention blocks and
 * no prompt-end windows, each second question took 48 positions from the
 * cache and replayed 20 at 136 blocks (the LRU document lost its tail,
 * deepest checkpoints included), and 96 + 4 at 150. */
#define SD_LEN 100
#define SD_DOCS 3
static void run_shared_docs(di_engine *e, int32_t (*q)[SD_LEN + 4], out *o) {
  for (int k = 0; k < 2 * SD_DOCS; k++) {
    submit(e, q[k], SD_LEN + 4, &o[k]);
    run_all(e);
    CHECK(o[k].final == 1);
  }
}

static void test_shared_docs(void) {
  static int32_t q[2 * SD_DOCS][SD_LEN + 4];
  for (int k = 0; k < 2 * SD_DOCS; k++)
    for (int i = 0; i < SD_LEN + 4; i++)
      q[k][i] = (int32_t)(3 + fake_mix((uint64_t)(i < SD_LEN ? k % SD_DOCS : 10 + k) * 1000 + (uint64_t)i) % 290);
  di_status st = {0};
  out ref[2 * SD_DOCS], got[2 * SD_DOCS];
  di_engine_stats s;
  di_engine *e = make(false, 0, 0, 400, 1, &st);
  run_shared_docs(e, q, ref);
  di_engine_destroy(e);
  const int pools[] = {136, 150};
  for (size_t k = 0; k < sizeof pools / sizeof *pools; k++) {
    e = make(true, 24, 0, (size_t)pools[k], 1, &st);
    CHECKF(e, "%s", st.msg);
    if (!e) return;
    run_shared_docs(e, q, got);
    di_engine_stats_get(e, &s);
    for (int i = 0; i < 2 * SD_DOCS; i++) CHECKF(same(&ref[i], &got[i]), "pool %d, question %d", pools[k], i);
    for (int i = SD_DOCS; i < 2 * SD_DOCS; i++) {
      printf("shared documents, pool %d: question %d cached %d replayed %d\n", pools[k], i, got[i].cached,
             got[i].replayed);
      CHECKF(got[i].replayed < 24 && got[i].cached * 10 >= (SD_LEN + 4) * 9, "pool %d question %d: cached %d replayed %d",
             pools[k], i, got[i].cached, got[i].replayed);
    }
    di_engine_destroy(e);
  }
}

/* Pool accounting of one long sequence (prompt 120 + 24 generated, chunks of
 * 32): the full-attention group holds every position (36 blocks); each of the
 * 2 window tables holds at most its window and a chunk (3 + 9 blocks) plus the
 * checkpoints C predicts: 2 blocks (positions kC-5 .. kC-1) for each multiple
 * of C, which stay cached afterwards, with the prompt's end (the windows of
 * positions 116..120, W/4 rounded up to a block: blocks 27-29). */
static void test_accounting(void) {
  di_status st = {0};
  out o;
  di_engine_stats s;
  for (int c = 24; c <= 48; c += 24) {
    di_engine *e = make(true, c, 0, 400, 4, &st);
    submit(e, doc, DOC, &o);
    run_all(e);
    di_engine_stats_get(e, &s);
    /* 143 positions computed (the last token is sampled, not computed): 35 full blocks */
    di_kv_table t = {.window = W, .ckpt = c, .tip = DOC};
    int ckpt = 0;
    for (int i = 0; i < 35; i++) ckpt += 2 * (di_kv_table_ckpt_block(&t, BS, i) || di_kv_table_tip_block(&t, BS, i));
    CHECKF(s.kv_blocks_high_full == 36 && s.kv_ckpt_blocks == ckpt &&
           s.kv_blocks_high_window <= 2 * (3 + 9) + ckpt && s.kv_blocks_high_window >= ckpt,
           "C %d: full %d, window %d, checkpoint blocks %d (%d predicted)", c, s.kv_blocks_high_full,
           s.kv_blocks_high_window, s.kv_ckpt_blocks, ckpt);
    di_engine_destroy(e);
  }
}

/* Creation fails with a message naming the flag and the numbers. */
static void bad(bool grouped, int ckpt, int no_replay, size_t blocks, const char *want1, const char *want2) {
  di_status st = {0};
  di_engine *e = make(grouped, ckpt, no_replay, blocks, 4, &st);
  CHECKF(!e && strstr(st.msg, want1) && strstr(st.msg, want2), "C %d: '%s'", ckpt, st.msg);
  if (e) di_engine_destroy(e);
}

static void test_bad_settings(void) {
  bad(true, 10, 0, 400, "--swa-checkpoint 10", "block size 4");
  bad(true, 4, 0, 400, "--swa-checkpoint 4", "window 6");
  bad(true, 12, 1, 400, "--swa-checkpoint 12", "--no-replay");
  bad(false, 12, 0, 400, "--swa-checkpoint 12", "no sliding-window KV");
  bad(true, 12, 0, 5, "--kv-mem", "need 7 (window 6 in 2 tables)");
  di_engine_opts o;
  di_engine_opts_default(&o);
  o.swa_full = o.no_replay = 1;
  di_engine_backend be = fake_backend(1024);
  di_engine *e = NULL;
  di_status st = {0};
  CHECK(di_engine_create_backend(&o, &be, &e, &st) != DI_OK && strstr(st.msg, "--swa-full and --no-replay"));
}

int main(void) {
  for (int i = 0; i < DOC + 40; i++) {
    doc[i] = (int32_t)(3 + fake_mix((uint64_t)i * 7 + 1) % 290);
    other[i] = (int32_t)(3 + fake_mix((uint64_t)i * 13 + 5) % 290);
    branch[i] = i < DOC - 10 ? doc[i] : other[i];
  }
  fake_window = W;
  fake_mixed = 2;
  test_ckpt_blocks();
  test_eviction_order();
  test_replay_outputs();
  test_preemption();
  test_hold_fallback();
  test_shared_preempt();
  test_accounting();
  test_shared_docs();
  test_bad_settings();
  return di_test_finish("test_replay");
}
