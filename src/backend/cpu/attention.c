/* Attention scheduling over the paged KV cache (attention.h).
 *
 * Tiles are aligned to absolute positions (0-63, 64-127, ...). A token at pos
 * with window start lo has tiles lo/64 .. pos/64; all but its first and last
 * are whole, and a whole tile A is the same work for every token that has it:
 * the same 64 K/V rows. Consecutive tokens of one sequence (a prefill chunk)
 * that share a whole tile form one unit, so di_cpu_attn_tile_group converts the
 * tile's K/V once for all their query heads (before, once per token: for MHA
 * models with an f16 cache the K and V passes were bound by that conversion).
 * The tokens whose last tile (not whole) is the same one form a ragged unit:
 * one group call over the rows up to the unit's last position, each query
 * stopping at its own. Every query still gets the bits of its own single
 * tile, so grouping is invisible in the results. */
#include "backend/cpu/attention.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "backend/cpu/attn.h"

/* A run of c tokens t.. (one sequence, consecutive positions) and a tile, given
 * as token t's tile index k; cost = c * positions in the tile, for splitting. */
typedef struct attn_unit {
  int t, k, c;
  bool ragged; /* the tokens' own last tile: token t + i stops at its position */
  int64_t cost_before, cost; /* cost_before: sum of the costs of the units before this one */
} attn_unit;

struct di_attn_sched {
  int max_tokens;
  size_t *item_off;  /* [T+1] first (tile, head) partial of each token */
  uint8_t *partials; /* one partial state per (token, tile, head) */
  size_t partials_cap;
  attn_unit *units;
  uint32_t *unit_of; /* unit of each (token, tile): [item_off[t] / H + k] */
  size_t units_cap, unit_of_cap;
  size_t n_units;
  int64_t total_cost;
};

/* What one di_attn_run hands its threads. */
typedef struct attn_job {
  di_attn_sched *s;
  const di_hparams *hp;
  const di_kv_pool *kv;
  const di_batch *b;
  int kv_table, kv_layer;
  bool swa;
  const float *q;
  float *att;
  float scale;       /* the score scale, once per layer rather than per group call */
  bool merge_inline; /* every token has one tile: merge each partial where it is made */
  bool by_token;     /* single-token units (decode): threads take whole tokens and merge them */
  bool by_head;      /* threads take whole KV heads (a prompt) and merge them */
  int group;         /* query heads per KV head */
  size_t pairs;      /* (token, tile) pairs in the batch */
} attn_job;

di_attn_sched *di_attn_sched_create(int max_tokens) {
  di_attn_sched *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->max_tokens = max_tokens;
  s->item_off = malloc(((size_t)max_tokens + 1) * sizeof *s->item_off);
  if (!s->item_off) {
    free(s);
    return NULL;
  }
  return s;
}

void di_attn_sched_free(di_attn_sched *s) {
  if (!s) return;
  free(s->item_off);
  free(s->partials);
  free(s->units);
  free(s->unit_of);
  free(s);
}

static int attn_lo(const di_hparams *hp, bool swa, int pos) {
  return swa && pos - hp->sliding_window + 1 > 0 ? pos - hp->sliding_window + 1 : 0;
}

static int first_tile(const di_hparams *hp, bool swa, int pos) { return attn_lo(hp, swa, pos) / DI_ATTN_TILE; }

/* Positions [j0, j1] of tile k of a token at pos. */
static void tile_range(const di_hparams *hp, bool swa, int pos, int k, int *j0, int *j1) {
  int lo = attn_lo(hp, swa, pos), tile_lo = (lo / DI_ATTN_TILE + k) * DI_ATTN_TILE;
  *j0 = tile_lo > lo ? tile_lo : lo;
  *j1 = tile_lo + DI_ATTN_TILE - 1 < pos ? tile_lo + DI_ATTN_TILE - 1 : pos;
}

static bool tile_whole(const di_hparams *hp, bool swa, int pos, int k) {
  int j0, j1;
  tile_range(hp, swa, pos, k, &j0, &j1);
  return j1 - j0 + 1 == DI_ATTN_TILE;
}

/* Tile k of a token at pos starts at the tile's first position (not cut by a
 * sliding window's start). */
static bool tile_starts(const di_hparams *hp, bool swa, int pos, int k) {
  int j0, j1;
  tile_range(hp, swa, pos, k, &j0, &j1);
  return j0 % DI_ATTN_TILE == 0;
}

/* Positions [j0, j1] of a unit's tile: a ragged unit's reach its last token. */
static void unit_range(const di_hparams *hp, bool swa, const di_batch *b, const attn_unit *u, int *j0, int *j1) {
  int tile = first_tile(hp, swa, b->pos[u->t]) + u->k, last = u->t + (u->ragged ? u->c - 1 : 0);
  tile_range(hp, swa, b->pos[last], tile - first_tile(hp, swa, b->pos[last]), j0, j1);
}

static di_attn_partial *partial_at(const di_attn_sched *s, int head_dim, size_t item) {
  return (di_attn_partial *)(s->partials + item * di_attn_partial_bytes(head_dim));
}

/* The partial of (token, tile) pair `pair` (item_off[t] / H + k for token t's
 * k-th tile) for query head h, made by thread ith. By KV head, a thread's
 * partials live in its own region, laid out (pair, head of the group), which
 * every KV head it takes reuses: merged before the next KV head starts, they
 * stay in its cache (a 512-token MHA prompt's partials are ~7 MB a layer:
 * head-interleaved, they would go to memory and back between the tiles and
 * the merge of each head). */
static di_attn_partial *part(const attn_job *a, int ith, size_t pair, int h) {
  if (!a->by_head) return partial_at(a->s, a->hp->head_dim, pair * (size_t)a->hp->n_head + (size_t)h);
  return partial_at(a->s, a->hp->head_dim, ((size_t)ith * a->pairs + pair) * (size_t)a->group + (size_t)(h % a->group));
}

static bool grow(void **p, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return true;
  void *np = realloc(*p, need * elem);
  if (!np) return false;
  *p = np;
  *cap = need;
  return true;
}

/* Scratch whose contents need not survive, on 64-byte lines (each partial's
 * acc then starts a line). */
static bool grow_aligned(uint8_t **p, size_t *cap, size_t need) {
  if (need <= *cap) return true;
  size_t bytes = (need + 63) / 64 * 64;
  uint8_t *np = aligned_alloc(64, bytes);
  if (!np) return false;
  free(*p);
  *p = np;
  *cap = bytes;
  return true;
}

/* Lays out the batch's partials and units. A unit grows while the next token
 * is the next position of the same sequence, has the tile whole too, and the
 * unit's queries (tokens x heads per KV head) still fit one group call. */
static di_code plan(di_attn_sched *s, const di_hparams *hp, const di_batch *b, bool swa, di_status *st) {
  int H = hp->n_head, group = hp->n_head / hp->n_head_kv;
  int cap = DI_ATTN_MAX_Q / group > 1 ? DI_ATTN_MAX_Q / group : 1;
  s->item_off[0] = 0;
  for (int t = 0; t < b->n_tokens; t++) {
    int pos = b->pos[t];
    size_t tiles = (size_t)(pos / DI_ATTN_TILE - first_tile(hp, swa, pos) + 1);
    if (tiles > DI_ATTN_MAX_TILES)
      return di_errorf(st, DI_ERR_RANGE, "attention: position %d needs %zu tiles (limit %d)", pos, tiles,
                       DI_ATTN_MAX_TILES);
    s->item_off[t + 1] = s->item_off[t] + tiles * (size_t)H;
  }
  size_t pairs = s->item_off[b->n_tokens] / (size_t)H, pbytes = di_attn_partial_bytes(hp->head_dim);
  if (!grow_aligned(&s->partials, &s->partials_cap, s->item_off[b->n_tokens] * pbytes) ||
      !grow((void **)&s->units, &s->units_cap, pairs, sizeof *s->units) ||
      !grow((void **)&s->unit_of, &s->unit_of_cap, pairs, sizeof *s->unit_of))
    return di_errorf(st, DI_ERR_NOMEM, "attention: cannot allocate scratch for %zu tiles", pairs);
  s->n_units = 0;
  s->total_cost = 0;
  for (int t = 0; t < b->n_tokens; t++) {
    int pos = b->pos[t], first = first_tile(hp, swa, pos), n = pos / DI_ATTN_TILE - first + 1;
    bool follows = t > 0 && b->seq[t - 1] == b->seq[t] && b->pos[t - 1] == pos - 1;
    int pfirst = follows ? first_tile(hp, swa, pos - 1) : 0, pn = follows ? (pos - 1) / DI_ATTN_TILE - pfirst + 1 : 0;
    for (int k = 0; k < n; k++) {
      size_t pair = s->item_off[t] / (size_t)H + (size_t)k;
      bool whole = tile_whole(hp, swa, pos, k);
      int pk = first + k - pfirst; /* the same tile among the previous token's */
      /* the last tile, not whole: the tile's start is the same for the token
       * before when it has this tile last too (then also not whole) */
      bool diag = !whole && k == n - 1 && tile_starts(hp, swa, pos, k);
      if (follows && pk >= 0 && pk < pn &&
          ((whole && tile_whole(hp, swa, pos - 1, pk)) || (diag && pk == pn - 1 && tile_starts(hp, swa, pos - 1, pk)))) {
        /* the unit holding the previous token ends with it, so it may grow by one */
        uint32_t u = s->unit_of[s->item_off[t - 1] / (size_t)H + (size_t)pk];
        if (s->units[u].c < cap && s->units[u].ragged == diag) {
          s->units[u].c++;
          s->unit_of[pair] = u;
          continue;
        }
      }
      s->units[s->n_units] = (attn_unit){t, k, 1, diag, 0, 0};
      s->unit_of[pair] = (uint32_t)s->n_units++;
    }
  }
  for (size_t u = 0; u < s->n_units; u++) {
    int j0, j1;
    unit_range(hp, swa, b, &s->units[u], &j0, &j1);
    s->units[u].cost_before = s->total_cost;
    s->units[u].cost = (int64_t)s->units[u].c * (j1 - j0 + 1);
    s->total_cost += s->units[u].cost;
  }
  return DI_OK;
}

/* Unit u's group calls for KV head kvh (merged at once where the job says so). */
static void unit_run(const attn_job *a, int ith, const attn_unit *u, int kvh) {
  const di_attn_sched *s = a->s;
  const di_hparams *hp = a->hp;
  const di_batch *b = a->b;
  int H = hp->n_head, HKV = hp->n_head_kv, hd = hp->head_dim, group = H / HKV;
  const float *qs[DI_ATTN_MAX_Q];
  di_attn_partial *out[DI_ATTN_MAX_Q];
  int qhi[DI_ATTN_MAX_Q], qidx[DI_ATTN_MAX_Q]; /* qidx: the query's token * H + head */
  int t = u->t, j0, j1, tile = first_tile(hp, a->swa, b->pos[t]) + u->k;
  /* a ragged unit's rows reach its last token's position */
  unit_range(hp, a->swa, b, u, &j0, &j1);
  const int32_t *blocks = di_batch_seq_table(&b->seqs[b->seq[t]], a->kv_table);
  int n = 0;
  for (int i = 0; i < u->c; i++) {
    int tt = t + i, k = tile - first_tile(hp, a->swa, b->pos[tt]);
    size_t pair = s->item_off[tt] / (size_t)H + (size_t)k;
    for (int g = 0; g < group; g++) {
      int h = kvh * group + g;
      qs[n] = a->q + ((size_t)tt * H + h) * hd;
      qhi[n] = b->pos[tt];
      qidx[n] = tt * H + h;
      out[n++] = part(a, ith, pair, h);
      /* a ragged group's rows end at its last query's position */
      if (n == DI_ATTN_MAX_Q || (i == u->c - 1 && g == group - 1)) {
        di_cpu_attn_tile_group(a->kv, a->kv_layer, blocks, kvh, hd, qs, n, j0, u->ragged ? qhi[n - 1] : j1,
                               u->ragged ? qhi : NULL, a->scale, hp->attn_softcap, out);
        if (a->merge_inline)
          for (int q = 0; q < n; q++)
            di_cpu_attn_merge((const di_attn_partial *const *)&out[q], 1, hd, a->att + (size_t)qidx[q] * hd);
        n = 0;
      }
    }
  }
}

/* Token t's head h: its tiles' partials merged in tile order into att. */
static void merge_one(const attn_job *a, int ith, int t, int h) {
  const di_attn_sched *s = a->s;
  int H = a->hp->n_head, hd = a->hp->head_dim;
  const di_attn_partial *parts[DI_ATTN_MAX_TILES];
  int n = (int)((s->item_off[t + 1] - s->item_off[t]) / (size_t)H);
  size_t first = s->item_off[t] / (size_t)H;
  for (int k = 0; k < n; k++) parts[k] = part(a, ith, first + (size_t)k, h);
  di_cpu_attn_merge(parts, n, hd, a->att + ((size_t)t * H + h) * hd);
}

/* Thread ith takes the (unit, KV head) items whose cost prefix falls in its
 * share, so a long prompt's many whole tiles spread evenly. A batch of
 * single-token units (decode) is shared by whole tokens instead, each thread
 * merging its own tokens as soon as their tiles are done. */
static void tiles_run(void *p, int ith, int nth) {
  const attn_job *a = p;
  const di_attn_sched *s = a->s;
  int HKV = a->hp->n_head_kv, H = a->hp->n_head;
  if (a->by_token) {
    int64_t lo_c = s->total_cost * ith / nth, hi_c = s->total_cost * (ith + 1) / nth;
    for (int t = 0; t < a->b->n_tokens; t++) {
      size_t first = s->item_off[t] / (size_t)H, n = (s->item_off[t + 1] - s->item_off[t]) / (size_t)H;
      int64_t c = s->units[s->unit_of[first]].cost_before;
      if (c < lo_c || c >= hi_c) continue;
      for (size_t k = 0; k < n; k++)
        for (int kvh = 0; kvh < HKV; kvh++) unit_run(a, ith, &s->units[s->unit_of[first + k]], kvh);
      if (!a->merge_inline)
        for (int h = 0; h < H; h++) merge_one(a, ith, t, h);
    }
    return;
  }
  if (a->by_head) {
    int group = H / HKV;
    for (int kvh = HKV * ith / nth; kvh < HKV * (ith + 1) / nth; kvh++) {
      for (size_t ui = 0; ui < s->n_units; ui++) unit_run(a, ith, &s->units[ui], kvh);
      if (!a->merge_inline)
        for (int t = 0; t < a->b->n_tokens; t++)
          for (int g = 0; g < group; g++) merge_one(a, ith, t, kvh * group + g);
    }
    return;
  }
  int64_t total = s->total_cost * HKV, lo_c = total * ith / nth, hi_c = total * (ith + 1) / nth;
  for (size_t ui = 0; ui < s->n_units; ui++) {
    const attn_unit *u = &s->units[ui];
    for (int kvh = 0; kvh < HKV; kvh++) {
      int64_t start = u->cost_before * HKV + (int64_t)kvh * u->cost;
      if (start >= lo_c && start < hi_c) unit_run(a, ith, u, kvh);
    }
  }
}

static void merge_run(void *p, int ith, int nth) {
  const attn_job *a = p;
  int H = a->hp->n_head;
  for (int idx = ith; idx < a->b->n_tokens * H; idx += nth) merge_one(a, ith, idx / H, idx % H);
}

di_code di_attn_run(di_attn_sched *s, di_threadpool *tp, const di_hparams *hp, const di_kv_pool *kv,
                    const di_batch *b, int kv_table, int kv_layer, bool swa, const float *q, float *att,
                    di_status *st) {
  if (b->n_tokens > s->max_tokens)
    return di_errorf(st, DI_ERR_INVALID, "attention: batch of %d tokens (scratch for %d)", b->n_tokens,
                     s->max_tokens);
  di_code rc = plan(s, hp, b, swa, st);
  if (rc) return rc;
  float scale = hp->attn_scale > 0 ? hp->attn_scale : 1.0f / sqrtf((float)hp->head_dim);
  attn_job job = {.s = s, .hp = hp, .kv = kv, .b = b, .kv_table = kv_table, .kv_layer = kv_layer, .swa = swa, .q = q,
                  .att = att, .scale = scale, .merge_inline = true, .by_token = b->n_tokens >= 4 * di_threadpool_size(tp),
                  .group = hp->n_head / hp->n_head_kv, .pairs = s->item_off[b->n_tokens] / (size_t)hp->n_head};
  for (size_t u = 0; u < s->n_units && job.by_token; u++) job.by_token = s->units[u].c == 1;
  /* A token whose positions all lie in one tile (decode at short context) has
   * one partial: the merge that finishes it runs right after the tile, by the
   * same thread, with no second pass and no second thread handoff. */
  for (int t = 0; t < b->n_tokens && job.merge_inline; t++)
    job.merge_inline = s->item_off[t + 1] - s->item_off[t] == (size_t)hp->n_head;
  /* A prompt whose KV heads split evenly over the threads: each thread merges
   * the heads it made right after their tiles, while their partials are still
   * in its cache (a 512-token MHA prompt writes ~7 MB of partials a layer,
   * which a later merge would read back from memory after a second handoff). */
  int nth = di_threadpool_size(tp);
  job.by_head = !job.by_token && hp->n_head_kv % nth == 0;
  di_threadpool_run(tp, tiles_run, &job);
  if (!job.merge_inline && !job.by_token && !job.by_head) di_threadpool_run(tp, merge_run, &job);
  return DI_OK;
}
