#include "engine/spec/tune.h"

/* Forgetting factor per step: about the last 50 steps count, so the fit
 * follows load changes (other processes, a growing batch) within a second. */
#define COST_DECAY 0.98
/* Before any spread of token counts was measured, the cost of one more token
 * is taken as 1/16 of a step's fixed cost (a memory-bound decode); the first
 * verifications of different lengths replace it with the measurement. */
#define COST_PRIOR_RATIO (1.0 / 16)
/* Interference on a shared host only ever adds time, in spikes several
 * steps long: a step slower than COST_CLIP times the prediction counts as
 * that, so one descheduled step cannot tilt the slope (which is fitted only
 * once COST_MIN_STEPS steps are in: a few points give no slope to trust). */
#define COST_CLIP 1.5
#define COST_MIN_STEPS 8
/* The slope is a ridge fit pulled towards the prior's (as if steps whose
 * token counts spread by this much, squared and summed, had shown it): a
 * lone request's steps differ by a few draft tokens, and a load that grows
 * while its drafts lengthen would otherwise pass for their cost, pushing the
 * fixed part (the intercept, extrapolated to one token) towards nothing and
 * turning off a drafter accepted every time (seen: 7.7 ms fixed + 5.5 ms per
 * token for a 25-30 ms step). A batch's spread (tens of tokens) outweighs it. */
#define COST_PRIOR_SXX 8.0
#define P_PRIOR 0.5f
/* A position's n-th verified outcome moves its estimate by 1/(n + 1) of the
 * gap (the mean of the prior and the outcomes so far) until that is
 * P_RATE, the moving average's rate: a request's first verifications teach
 * the estimate what they show instead of 1/4 of it each (at 25% a drafter
 * right every time needs 6 verifications to lift p[0] from 0.5 past 0.9, and
 * the tuner holds k short meanwhile: a third of a 128-token reply). */
#define P_RATE 0.25f
/* Positions past the verified ones: slower than P_RATE, so verified
 * outcomes outweigh the drift, unless every draft was accepted (nothing
 * was rejected to outweigh: the deeper positions follow at P_RATE). */
#define P_DRIFT 0.1f
/* A draft row is verified only if it yields a token at least this often
 * (tune.h): above it the measured costs decide, below it the gain is too
 * small for a timing fit on a shared host to resolve. */
#define ROW_P_MIN 0.1
#define BACKOFF_MIN 3
#define BACKOFF_MAX 10

void di_spec_cost_add(di_spec_cost *c, int tokens, double seconds) {
  double x = tokens;
  if (c->fitted && c->w >= COST_MIN_STEPS && seconds > COST_CLIP * (c->c0 + c->c1 * x))
    seconds = COST_CLIP * (c->c0 + c->c1 * x);
  c->w = c->w * COST_DECAY + 1;
  c->x = c->x * COST_DECAY + x;
  c->y = c->y * COST_DECAY + seconds;
  c->xx = c->xx * COST_DECAY + x * x;
  c->xy = c->xy * COST_DECAY + x * seconds;
  double mx = c->x / c->w, my = c->y / c->w;
  /* the prior's slope through the mean step: a fixed part of 1 / COST_PRIOR_RATIO tokens */
  double s0 = my / (1 / COST_PRIOR_RATIO + mx);
  if (c->w >= COST_MIN_STEPS) {
    double sxx = c->xx - c->x * mx, sxy = c->xy - c->x * my;
    double c1 = (sxy + COST_PRIOR_SXX * s0) / (sxx + COST_PRIOR_SXX);
    if (c1 < my * 1e-3) c1 = my * 1e-3; /* noise can tilt it: a token never costs nothing */
    double c0 = my - c1 * mx;
    if (c0 < c1) { /* ... nor more than the fixed part, all weights read once: the best fit with c0 = c1 */
      c1 = (c->xy + c->y) / (c->xx + 2 * c->x + c->w);
      c0 = c1;
    }
    c->c0 = c0, c->c1 = c1;
  } else {
    c->c1 = s0;
    c->c0 = s0 / COST_PRIOR_RATIO;
  }
  c->fitted = true;
}

double di_spec_cost_time(const di_spec_cost *c, int tokens) {
  if (!c->fitted) return 1 + COST_PRIOR_RATIO * tokens;
  return c->c0 + c->c1 * tokens;
}

static void seq_init(di_spec_seq *s, bool unverified) {
  if (s->init) return;
  for (int j = 0; j < DI_SPEC_K_LIMIT; j++) s->p[j] = P_PRIOR;
  s->backoff = BACKOFF_MIN;
  s->off = s->unverified = unverified; /* probe_at 0: the first plan probes */
  s->init = true;
}

bool di_spec_active(const di_spec_seq *s, uint64_t step) {
  return !s->init || !s->off || s->probing || step >= s->probe_at;
}

double di_spec_expected(const di_spec_seq *s, int k) {
  double e = 0, run = 1;
  for (int j = 0; j < k; j++) e += run *= s->p[j];
  return e;
}

static int best_k(const di_spec_seq *s, const di_spec_cost *c, const di_spec_plan_in *in) {
  double best = in->emit / di_spec_cost_time(c, in->tokens), e = 0, run = 1;
  int k_best = 0;
  for (int k = 1; k <= in->k_avail; k++) {
    e += run *= s->p[k - 1];
    if (run < ROW_P_MIN) break; /* deeper rows are reached even less often */
    double f = (in->emit + e) / (di_spec_cost_time(c, in->tokens + k) + k * in->k_cost);
    if (f > best * (1 + 1e-9)) best = f, k_best = k;
  }
  return k_best;
}

/* Every fallback and every failed probe doubles the next spacing (up to
 * 2^BACKOFF_MAX steps); verifications accepted while on halve it again. */
static void back_off(di_spec_seq *s, uint64_t step) {
  s->probe_at = step + (1ull << s->backoff);
  s->backoff += s->unverified && !s->hit ? 2 : 1;
  if (s->backoff > BACKOFF_MAX) s->backoff = BACKOFF_MAX;
}

int di_spec_plan(di_spec_seq *s, const di_spec_cost *c, const di_spec_plan_in *in, bool *fallback) {
  seq_init(s, in->unverified);
  *fallback = false;
  if (in->k_avail <= 0) return 0;
  if (in->always) return in->k_avail;
  int k = best_k(s, c, in);
  if (s->off) {
    if (s->probing) { /* the last probe's verification has been observed */
      s->probing = false;
      if (k > 0) {
        s->off = false;
        return k;
      }
      back_off(s, in->step);
      return 0;
    }
    if (in->step < s->probe_at) return 0;
    s->probing = true; /* one verification to refresh the estimate */
    if (in->unverified) {
      s->shadow = true;
      return 0;
    }
    return k > 0 ? k : (in->k_avail < 2 ? in->k_avail : 2);
  }
  if (k == 0) {
    s->off = true;
    back_off(s, in->step);
    *fallback = true;
  }
  return k;
}

void di_spec_shadow_seen(di_spec_seq *s, bool match, uint64_t step) {
  s->shadow = false;
  di_spec_observe(s, 1, match);
  if (match) return; /* still probing: the next plan decides as after a verified probe */
  s->probing = false;
  back_off(s, step);
}

void di_spec_observe(di_spec_seq *s, int k, int a) {
  seq_init(s, false);
  if (k <= 0) return;
  int n = 0;
  for (int j = 0; j < k && j <= a; j++, n++) {
    if (s->seen[j] < 1 / P_RATE) s->seen[j]++;
    float rate = 1.0f / (float)(s->seen[j] + 1);
    s->p[j] += (rate > P_RATE ? rate : P_RATE) * ((j < a ? 1.0f : 0.0f) - s->p[j]);
  }
  if (a == 0) { /* the third miss in a row halves p[0], the fourth quarters it, ... */
    if (s->misses < 16) s->misses++;
    if (s->misses > 2) s->p[0] *= 1.0f / (float)(1u << (s->misses - 2));
  } else {
    s->misses = 0;
    s->hit = true;
    if (!s->off && s->backoff > BACKOFF_MIN) s->backoff--; /* accepted while on: probe sooner next time */
  }
  float drift = a == k ? P_RATE : P_DRIFT;
  for (int j = n; j < DI_SPEC_K_LIMIT; j++) s->p[j] += drift * (s->p[n - 1] - s->p[j]);
}
