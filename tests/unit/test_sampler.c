/* Sampler: greedy, seeded reproducibility, top-k/top-p/min-p truncation,
 * logit bias, penalties, logprobs, parameter validation. */
#include <math.h>
#include <string.h>

#include "check.h"
#include "engine/sampler.h"

#define V 1000

static float logits[V];

static di_sampling params(void) {
  di_sampling s = {0};
  s.top_p = 1;
  s.repetition_penalty = 1;
  return s;
}

static int32_t sample(di_sampler *sm, const di_sampling *p, uint64_t *rng, const int32_t *hist, int nh, int np,
                      di_sample_out *o) {
  di_sample_in in = {.p = p, .history = hist, .n_history = nh, .n_prompt = np, .rng = rng, .top_logprobs = 5, .logprob = true};
  di_sampler_sample(sm, logits, &in, o);
  return o->token;
}

int main(void) {
  di_sampler sm;
  di_status st = {0};
  CHECK(di_sampler_init(&sm, V, &st) == DI_OK);
  for (int i = 0; i < V; i++) logits[i] = (float)((i * 7919) % 1000) / 100.0f; /* max 9.99 at i with 7919i%1000==999 */
  int32_t best = 0;
  for (int i = 1; i < V; i++) best = logits[i] > logits[best] ? i : best;
  di_sample_out o;
  uint64_t rng = di_sampler_seed(1, 0);
  di_sampling p = params();
  CHECK(sample(&sm, &p, &rng, NULL, 0, 0, &o) == best);
  /* logprobs: the top alternative is the argmax, and they are sorted */
  CHECK(o.n_top == 5 && o.top_ids[0] == best && o.top_logprobs[0] >= o.top_logprobs[1] && o.logprob == o.top_logprobs[0]);
  double z = 0;
  for (int i = 0; i < V; i++) z += exp(logits[i] - logits[best]);
  CHECK(fabs(o.logprob + log(z)) < 1e-4);
  /* greedy argmax (no copy of the logits): the first of equal maxima wherever it
   * falls (any lane, the tail past a multiple of 8), the plain scan's answer with NaN */
  {
    di_sampler s13;
    CHECK(di_sampler_init(&s13, 13, &st) == DI_OK);
    static const struct { int hi1, hi2, nan_at, want; } cases[] = {
        {-1, -1, -1, 0}, {12, -1, -1, 12}, {9, 5, -1, 5}, {3, 11, -1, 3}, {7, -1, 4, 7}, {7, -1, 0, 0}, {8, 12, 12, 8}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
      float l[13];
      for (int i = 0; i < 13; i++) l[i] = -1.0f;
      if (cases[c].hi1 >= 0) l[cases[c].hi1] = 2.0f;
      if (cases[c].hi2 >= 0) l[cases[c].hi2] = 2.0f;
      if (cases[c].nan_at >= 0) l[cases[c].nan_at] = NAN;
      di_sampling pg = params();
      di_sample_in in13 = {.p = &pg, .rng = &rng};
      di_sampler_sample(&s13, l, &in13, &o);
      CHECKF(o.token == cases[c].want, "argmax case %zu: got %d, want %d", c, o.token, cases[c].want);
    }
    di_sampler_free(&s13);
  }
  /* a vocabulary of many argmax chunks: maxima tied across and inside chunks,
   * NaNs and -inf anywhere, against the plain scan */
  {
    enum { NB = 49157 };
    static float lb[NB];
    di_sampler sb;
    CHECK(di_sampler_init(&sb, NB, &st) == DI_OK);
    uint64_t r = 12345;
    for (int c = 0; c < 64; c++) {
      for (int i = 0; i < NB; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        lb[i] = (float)((r >> 33) % 1000) / 10.0f - 50.0f;
      }
      const int n_hi = c % 4;
      for (int h = 0; h < n_hi; h++) lb[(size_t)(r >> (7 + 11 * h)) % NB] = 60.0f; /* ties */
      if (c % 3 == 1) lb[(size_t)(r >> 20) % NB] = NAN;
      if (c % 5 == 2) lb[(size_t)(r >> 24) % NB] = -INFINITY;
      if (c == 7) lb[0] = NAN;
      if (c == 8) lb[NB - 1] = 99.0f;
      if (c == 9)
        for (int i = 0; i < NB; i++) lb[i] = i % 7 ? NAN : -INFINITY;
      int32_t want = 0;
      for (int i = 1; i < NB; i++) want = lb[i] > lb[want] ? i : want;
      di_sampling pg = params();
      di_sample_in inb = {.p = &pg, .rng = &rng};
      di_sampler_sample(&sb, lb, &inb, &o);
      CHECKF(o.token == want, "argmax %d: got %d, want %d", c, o.token, want);
    }
    di_sampler_free(&sb);
  }
  /* logprob without alternatives */
  {
    di_sample_in in0 = {.p = &p, .rng = &rng, .top_logprobs = 0, .logprob = true};
    di_sampler_sample(&sm, logits, &in0, &o);
    CHECK(o.token == best && o.n_top == 0 && fabs(o.logprob + log(z)) < 1e-4);
  }
  /* seeded reproducibility; different seeds differ */
  p.temperature = 1.5f;
  int32_t seq_a[50], seq_b[50], seq_c[50];
  uint64_t ra = di_sampler_seed(7, 0), rb = di_sampler_seed(7, 0), rc = di_sampler_seed(8, 0);
  for (int i = 0; i < 50; i++) {
    seq_a[i] = sample(&sm, &p, &ra, NULL, 0, 0, &o);
    seq_b[i] = sample(&sm, &p, &rb, NULL, 0, 0, &o);
    seq_c[i] = sample(&sm, &p, &rc, NULL, 0, 0, &o);
  }
  CHECK(!memcmp(seq_a, seq_b, sizeof seq_a) && memcmp(seq_a, seq_c, sizeof seq_a));
  CHECK(di_sampler_seed(7, 0) != di_sampler_seed(7, 1));
  /* truncations: top_k = 3 only ever picks the 3 best */
  int32_t top3[3] = {best, -1, -1};
  for (int k = 1; k < 3; k++) {
    int32_t b = -1;
    for (int i = 0; i < V; i++) {
      bool taken = false;
      for (int j = 0; j < k; j++) taken |= top3[j] == i;
      if (!taken && (b < 0 || logits[i] > logits[b])) b = i;
    }
    top3[k] = b;
  }
  p.top_k = 3;
  for (int i = 0; i < 200; i++) {
    int32_t t = sample(&sm, &p, &ra, NULL, 0, 0, &o);
    CHECK(t == top3[0] || t == top3[1] || t == top3[2]);
  }
  p.top_k = 0;
  p.top_p = 1e-6f; /* only the best survives */
  for (int i = 0; i < 20; i++) CHECK(sample(&sm, &p, &ra, NULL, 0, 0, &o) == best);
  p.top_p = 1;
  p.min_p = 1; /* only tokens as likely as the best */
  for (int i = 0; i < 20; i++) CHECK(sample(&sm, &p, &ra, NULL, 0, 0, &o) == best);
  p.min_p = 0;
  /* logit bias forces a token (greedy) */
  di_sampling g = params();
  int32_t bid = 5;
  float bval = 100;
  g.n_logit_bias = 1;
  g.logit_bias_ids = &bid;
  g.logit_bias_values = &bval;
  CHECK(sample(&sm, &g, &rng, NULL, 0, 0, &o) == 5);
  /* presence penalty on a generated token moves greedy off it; a prompt token is not penalised */
  g = params();
  g.presence_penalty = 2;
  g.frequency_penalty = 2;
  int32_t hist[2] = {best, best};
  CHECK(sample(&sm, &g, &rng, hist, 2, 1, &o) != best);
  CHECK(sample(&sm, &g, &rng, hist, 2, 2, &o) == best);
  g = params();
  g.repetition_penalty = 100;
  CHECK(sample(&sm, &g, &rng, hist, 1, 1, &o) != best);
  /* the count scratch is clean after penalties */
  int dirty = 0;
  for (int i = 0; i < V; i++) dirty += sm.count[i] != 0;
  CHECK(dirty == 0);
  /* validation */
  di_sampling bad = params();
  bad.top_p = 0;
  CHECK(di_sampling_validate(&bad, V, &st) == DI_ERR_INVALID && strstr(st.msg, "top_p"));
  bad = params();
  bad.temperature = -0.5f;
  di_status_clear(&st);
  CHECK(di_sampling_validate(&bad, V, &st) == DI_ERR_INVALID && strstr(st.msg, "temperature"));
  bad = params();
  bad.temperature = NAN;
  di_status_clear(&st);
  CHECK(di_sampling_validate(&bad, V, &st) == DI_ERR_INVALID);
  bad = params();
  bid = V;
  bad.n_logit_bias = 1;
  bad.logit_bias_ids = &bid;
  bad.logit_bias_values = &bval;
  di_status_clear(&st);
  CHECK(di_sampling_validate(&bad, V, &st) == DI_ERR_RANGE);
  bad = params();
  bad.min_p = 2;
  di_status_clear(&st);
  CHECK(di_sampling_validate(&bad, V, &st) == DI_ERR_INVALID);
  di_status_clear(&st);
  p = params();
  CHECK(di_sampling_validate(&p, V, &st) == DI_OK);
  { /* a mask allowing one token: that token, greedy or sampled, and a sampled
     * run's seeded stream advances as a sampled draw would */
    uint32_t mask[(V + 31) / 32] = {0};
    int32_t only = best == 3 ? 4 : 3;
    mask[only >> 5] |= 1u << (only & 31);
    di_sampling ps = params();
    ps.temperature = 0.8f;
    uint64_t r1 = di_sampler_seed(9, 0), r2 = r1;
    di_sample_in in = {.p = &ps, .rng = &r1, .mask = mask};
    di_sampler_sample(&sm, logits, &in, &o);
    CHECK(o.token == only);
    di_sample_in free_in = {.p = &ps, .rng = &r2};
    di_sampler_sample(&sm, logits, &free_in, &o);
    CHECK(r1 == r2 && r1 != di_sampler_seed(9, 0));
    ps.temperature = 0;
    di_sampler_sample(&sm, logits, &in, &o);
    CHECK(o.token == only && r1 == r2);
  }
  { /* sampling on split logits: slices' reductions merged (di_topk_slice / di_topk_merge, as
     * tensor parallel ranks make them) give the token of the whole row, ties included */
    static float row[V];
    static di_topk_pair parts[4 * 256], scratch[V], cand[256];
    const int cuts[][4] = {{0, 336, 672, V}, {0, 512, V, V}, {0, 16, 992, V}};
    const int ks[] = {1, 2, 7, 40, 256};
    uint64_t x = 12345;
    for (int trial = 0; trial < 60; trial++) {
      for (int i = 0; i < V; i++) { /* few distinct values: many ties, some -inf */
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        int q = (int)(x >> 59);
        row[i] = q == 0 ? -INFINITY : (float)(q % 9) * 0.75f - 3.0f;
      }
      if (trial % 20 == 19) row[0] = NAN; /* the greedy scan keeps a NaN at 0 */
      if (trial % 20 == 18)
        for (int i = 0; i < V; i++) row[i] = -INFINITY;
      const int(*cut)[4] = &cuts[trial % 3];
      for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++) {
        di_sampling ps = params();
        ps.temperature = ks[ki] == 1 ? 0 : 0.5f + 0.1f * (float)(trial % 7);
        ps.top_k = ks[ki];
        ps.top_p = trial % 2 ? 0.9f : 1.0f;
        ps.min_p = trial % 3 == 1 ? 0.05f : 0;
        if (trial % 20 >= 18 && ks[ki] > 1) continue; /* NaN / all -inf: greedy's only */
        int n = 0;
        for (int s = 0; s < 3; s++)
          n += di_topk_slice(row + (*cut)[s], (*cut)[s + 1] - (*cut)[s], (*cut)[s], ks[ki], ps.temperature, scratch,
                             parts + n);
        di_topk_merge(parts, n, ks[ki], row[0], cand);
        CHECKF(di_sampler_split_k(&ps, false, false, V, 256) == ks[ki], "split_k %d", ks[ki]);
        uint64_t r1 = di_sampler_seed((uint64_t)trial, 0), r2 = r1;
        di_sample_in whole = {.p = &ps, .rng = &r1}, split = {.p = &ps, .rng = &r2, .cand = cand};
        di_sample_out o1, o2;
        di_sampler_sample(&sm, row, &whole, &o1);
        di_sampler_sample(&sm, row, &split, &o2);
        CHECKF(o1.token == o2.token && r1 == r2, "trial %d k %d: whole row %d, split %d", trial, ks[ki], o1.token,
               o2.token);
      }
    }
    /* what needs the whole row */
    di_sampling ps = params();
    ps.temperature = 0.7f;
    CHECK(di_sampler_split_k(&ps, false, false, V, 256) == 0); /* no top-k */
    ps.top_k = 300;
    CHECK(di_sampler_split_k(&ps, false, false, V, 256) == 0);
    ps.top_k = 40;
    CHECK(di_sampler_split_k(&ps, true, false, V, 256) == 0 && di_sampler_split_k(&ps, false, true, V, 256) == 0);
    ps.presence_penalty = 0.5f;
    CHECK(di_sampler_split_k(&ps, false, false, V, 256) == 0);
  }
  { /* masks of every density (whole words allowed or refused, single bits, the
     * partial last word), ties, NaN and -inf: greedy and sampled draws equal the
     * same draws without a mask on a copy whose refused logits are -inf */
    uint32_t mask[(V + 31) / 32];
    static float ref[V];
    uint64_t x = 88172645463325252ull;
    int bad = 0;
    for (int trial = 0; trial < 400; trial++) {
      int dens = trial % 5; /* 0: few allowed ... 4: all but a few */
      for (int w = 0; w < (V + 31) / 32; w++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        uint32_t r = (uint32_t)x, q = (uint32_t)(x >> 32);
        uint32_t words[5] = {r & q & (q >> 3), r & q, r, r | q, ~(r & q & (q >> 5))};
        mask[w] = (x >> 60) == 0 ? 0 : (x >> 60) == 1 ? 0xFFFFFFFFu : words[dens];
      }
      for (int i = 0; i < V; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        logits[i] = (float)(x % 64) / 8.0f; /* many ties */
      }
      if (trial % 7 == 1) logits[0] = NAN;
      if (trial % 11 == 2) logits[5] = NAN;
      if (trial % 13 == 3)
        for (int i = 0; i < V; i++) logits[i] = -INFINITY;
      if (trial % 17 == 4) memset(mask, 0, sizeof mask);
      for (int i = 0; i < V; i++) ref[i] = mask[i >> 5] >> (i & 31) & 1 ? logits[i] : -INFINITY;
      di_sampling ps = params();
      ps.temperature = trial % 2 ? 0.7f : 0;
      uint64_t r1 = di_sampler_seed((uint64_t)trial, 0), r2 = r1;
      di_sample_in in = {.p = &ps, .rng = &r1, .mask = mask}, rin = {.p = &ps, .rng = &r2};
      di_sample_out o1, o2;
      di_sampler_sample(&sm, logits, &in, &o1);
      int32_t f = di_sampler_forced(mask, V);
      if (f >= 0) { /* a forced token skips the logits: the reference is that token */
        if (o1.token != f) bad++;
        continue;
      }
      di_sampler_sample(&sm, ref, &rin, &o2);
      if (o1.token != o2.token || r1 != r2) bad++;
    }
    CHECKF(bad == 0, "%d masked draws differ from unmasked draws on -inf'd copies", bad);
  }
  di_sampler_free(&sm);
  return di_test_finish("test_sampler");
}
