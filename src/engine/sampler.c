#include "engine/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

di_code di_sampler_init(di_sampler *s, int n_vocab, di_status *st) {
  memset(s, 0, sizeof *s);
  s->n_vocab = n_vocab;
  s->logits = malloc((size_t)n_vocab * sizeof *s->logits);
  s->pairs = malloc((size_t)n_vocab * sizeof *s->pairs);
  s->count = calloc((size_t)n_vocab, sizeof *s->count);
  if (!s->logits || !s->pairs || !s->count) {
    di_sampler_free(s);
    return di_errorf(st, DI_ERR_NOMEM, "sampler: cannot allocate scratch for %d logits", n_vocab);
  }
  return DI_OK;
}

void di_sampler_free(di_sampler *s) {
  free(s->logits);
  free(s->pairs);
  free(s->count);
  memset(s, 0, sizeof *s);
}

di_code di_sampling_validate(const di_sampling *p, int n_vocab, di_status *st) {
  if (!(p->temperature >= 0) || !isfinite(p->temperature))
    return di_errorf(st, DI_ERR_INVALID, "temperature must be >= 0 (got %g)", p->temperature);
  if (!(p->top_p > 0 && p->top_p <= 1)) return di_errorf(st, DI_ERR_INVALID, "top_p must be in (0, 1] (got %g)", p->top_p);
  if (p->top_k < 0) return di_errorf(st, DI_ERR_INVALID, "top_k must be >= 0 (got %d)", p->top_k);
  if (!(p->min_p >= 0 && p->min_p <= 1)) return di_errorf(st, DI_ERR_INVALID, "min_p must be in [0, 1] (got %g)", p->min_p);
  if (!(p->repetition_penalty > 0) || !isfinite(p->repetition_penalty))
    return di_errorf(st, DI_ERR_INVALID, "repetition_penalty must be > 0 (got %g)", p->repetition_penalty);
  if (!isfinite(p->frequency_penalty) || fabsf(p->frequency_penalty) > 2)
    return di_errorf(st, DI_ERR_INVALID, "frequency_penalty must be in [-2, 2] (got %g)", p->frequency_penalty);
  if (!isfinite(p->presence_penalty) || fabsf(p->presence_penalty) > 2)
    return di_errorf(st, DI_ERR_INVALID, "presence_penalty must be in [-2, 2] (got %g)", p->presence_penalty);
  if (p->n_logit_bias < 0 || (p->n_logit_bias > 0 && (!p->logit_bias_ids || !p->logit_bias_values)))
    return di_errorf(st, DI_ERR_INVALID, "logit_bias: bad array");
  for (int i = 0; i < p->n_logit_bias; i++) {
    if (p->logit_bias_ids[i] < 0 || p->logit_bias_ids[i] >= n_vocab)
      return di_errorf(st, DI_ERR_RANGE, "logit_bias: token id %d is outside the vocabulary [0, %d)",
                       p->logit_bias_ids[i], n_vocab);
    if (!(fabsf(p->logit_bias_values[i]) <= 100))
      return di_errorf(st, DI_ERR_INVALID, "logit_bias: value for token %d must be in [-100, 100]",
                       p->logit_bias_ids[i]);
  }
  return DI_OK;
}

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t di_sampler_seed(uint64_t seed, int index) {
  uint64_t x = seed ^ ((uint64_t)(index + 1) * 0xD1B54A32D192ED03ull);
  return splitmix64(&x);
}

/* Uniform double in [0, 1) from 53 random bits. */
static double rng_uniform(uint64_t *rng) { return (double)(splitmix64(rng) >> 11) * (1.0 / 9007199254740992.0); }

static void apply_penalties(di_sampler *s, const di_sample_in *in) {
  const di_sampling *p = in->p;
  float *l = s->logits;
  if (p->repetition_penalty != 1.0f) { /* HF: every distinct token seen, prompt included */
    for (int i = 0; i < in->n_history; i++) {
      int32_t t = in->history[i];
      if (s->count[t]) continue;
      s->count[t] = 1;
      l[t] = l[t] > 0 ? l[t] / p->repetition_penalty : l[t] * p->repetition_penalty;
    }
    for (int i = 0; i < in->n_history; i++) s->count[in->history[i]] = 0;
  }
  if (p->frequency_penalty != 0 || p->presence_penalty != 0) { /* OpenAI: generated tokens only */
    for (int i = in->n_prompt; i < in->n_history; i++) s->count[in->history[i]]++;
    for (int i = in->n_prompt; i < in->n_history; i++) {
      int32_t t = in->history[i];
      if (!s->count[t]) continue;
      l[t] -= (float)s->count[t] * p->frequency_penalty + p->presence_penalty;
      s->count[t] = 0;
    }
  }
}

static void fill_logprobs(const float *raw, int n, const di_sample_in *in, di_sample_out *out) {
  float mx = -INFINITY;
  for (int i = 0; i < n; i++) mx = raw[i] > mx ? raw[i] : mx;
  double z = 0;
  for (int i = 0; i < n; i++) z += exp((double)raw[i] - mx);
  float lz = mx + (float)log(z);
  out->logprob = raw[out->token] - lz;
  int k = in->top_logprobs < n ? in->top_logprobs : n;
  out->n_top = 0;
  for (int i = 0; i < n && k > 0; i++) { /* insertion into a sorted top-k list */
    di_sampler_pair c = {raw[i], i};
    int j = out->n_top;
    if (j == k) {
      di_sampler_pair last = {out->top_logprobs[k - 1], out->top_ids[k - 1]};
      if (!di_topk_before(c, last)) continue;
      j--;
    } else {
      out->n_top++;
    }
    while (j > 0 && di_topk_before(c, (di_sampler_pair){out->top_logprobs[j - 1], out->top_ids[j - 1]})) {
      out->top_logprobs[j] = out->top_logprobs[j - 1];
      out->top_ids[j] = out->top_ids[j - 1];
      j--;
    }
    out->top_logprobs[j] = c.v;
    out->top_ids[j] = c.id;
  }
  for (int i = 0; i < out->n_top; i++) out->top_logprobs[i] -= lz;
}

/* Sampling's rest after temperature and top-k: the first m pairs (sorted
 * when top-k selected them) through min-p and top-p, then the draw. */
static int32_t sample_tail(di_sampler *s, const di_sample_in *in, int m, bool sorted) {
  const di_sampling *p = in->p;
  float mx = s->pairs[0].v;
  if (!sorted)
    for (int i = 1; i < m; i++) mx = s->pairs[i].v > mx ? s->pairs[i].v : mx;
  if (p->min_p > 0) { /* keep tokens with p >= min_p * p_max (order preserved) */
    float thr = mx + logf(p->min_p);
    int w = 0;
    for (int i = 0; i < m; i++)
      if (s->pairs[i].v >= thr) s->pairs[w++] = s->pairs[i];
    m = w;
  }
  if (p->top_p < 1) {
    /* The smallest head with mass >= top_p; sort only as much of the
     * distribution as that needs: start with 64 candidates and widen. */
    double z = 0;
    for (int i = 0; i < m; i++) z += exp((double)s->pairs[i].v - mx);
    int k = m < 64 ? m : 64;
    for (;;) {
      if (!sorted) di_topk_select(s->pairs, m, k);
      double c = 0;
      int cut = 0;
      while (cut < k) {
        c += exp((double)s->pairs[cut++].v - mx);
        if (c >= p->top_p * z) break;
      }
      if (c >= p->top_p * z || k == m) {
        m = cut;
        break;
      }
      k = k * 8 < m ? k * 8 : m;
    }
  }
  double z = 0;
  for (int i = 0; i < m; i++) z += exp((double)s->pairs[i].v - mx);
  double u = rng_uniform(in->rng) * z, c = 0;
  for (int i = 0; i < m; i++) {
    c += exp((double)s->pairs[i].v - mx);
    if (u < c) return s->pairs[i].id;
  }
  return s->pairs[m - 1].id;
}

static int32_t sample_dist(di_sampler *s, const di_sample_in *in) {
  const di_sampling *p = in->p;
  int n = s->n_vocab;
  float inv_t = 1.0f / p->temperature;
  for (int i = 0; i < n; i++) s->pairs[i] = (di_sampler_pair){s->logits[i] * inv_t, i};
  if (p->top_k > 0 && p->top_k < n) {
    di_topk_select(s->pairs, n, p->top_k);
    return sample_tail(s, in, p->top_k, true);
  }
  return sample_tail(s, in, n, false);
}

static bool is_greedy(const di_sampling *p) { return p->temperature == 0 || p->top_k == 1; }

static bool modifies_logits(const di_sampling *p) {
  return p->n_logit_bias != 0 || p->repetition_penalty != 1.0f || p->frequency_penalty != 0 || p->presence_penalty != 0;
}

int di_sampler_split_k(const di_sampling *p, bool masked, bool logprobs, int n_vocab, int max_k) {
  if (masked || logprobs || modifies_logits(p)) return 0;
  if (is_greedy(p)) return 1;
  return p->top_k > 1 && p->top_k <= max_k && p->top_k < n_vocab ? p->top_k : 0;
}

int32_t di_sampler_forced(const uint32_t *mask, int n) {
  int32_t tok = -1;
  for (int w = 0; w < (n + 31) / 32; w++) {
    uint32_t b = mask[w];
    if (w == (n - 1) / 32 && n % 32) b &= (1u << (n % 32)) - 1;
    if (!b) continue;
    if (tok >= 0 || (b & (b - 1))) return -1;
    tok = w * 32 + __builtin_ctz(b);
  }
  return tok;
}

/* Disallowed logits to -inf a word of the mask at a time: whole words
 * allowed (inside a string) or refused (most of the vocabulary elsewhere)
 * cost no per-token test. */
static void apply_mask(float *l, const uint32_t *mask, int n) {
  for (int w = 0; w * 32 < n; w++) {
    uint32_t b = mask[w];
    int base = w * 32, m = n - base < 32 ? n - base : 32;
    if (b == 0xFFFFFFFFu) continue;
    if (!b) {
      for (int k = 0; k < m; k++) l[base + k] = -INFINITY;
      continue;
    }
    for (int k = 0; k < m; k++)
      if (!(b >> k & 1)) l[base + k] = -INFINITY;
  }
}

/* di_argmax of the row with the refused logits at -inf, read in place: the
 * first index of the largest allowed logit, 0 if an allowed logit 0 is NaN
 * or none is above -inf (di_argmax's rules). */
static int32_t masked_argmax(const float *l, const uint32_t *mask, int n) {
  if ((mask[0] & 1) && l[0] != l[0]) return 0;
  float best = -INFINITY;
  int32_t bi = -1;
  for (int w = 0; w * 32 < n; w++) {
    uint32_t b = mask[w];
    int base = w * 32;
    if (n - base < 32) b &= (1u << (n - base)) - 1;
    if (!b) continue;
    const float *x = l + base;
    if (b == 0xFFFFFFFFu) {
      float m[8];
      for (int k = 0; k < 8; k++) m[k] = -INFINITY;
      for (int i = 0; i < 32; i += 8)
        for (int k = 0; k < 8; k++) m[k] = x[i + k] > m[k] ? x[i + k] : m[k];
      float mx = m[0];
      for (int k = 1; k < 8; k++) mx = m[k] > mx ? m[k] : mx;
      if (mx > best) {
        best = mx;
        for (int k = 0;; k++)
          if (x[k] == mx) {
            bi = base + k;
            break;
          }
      }
      continue;
    }
    for (; b; b &= b - 1) {
      int k = __builtin_ctz(b);
      if (x[k] > best) best = x[k], bi = base + k;
    }
  }
  return bi < 0 ? 0 : bi;
}

void di_sampler_sample(di_sampler *s, const float *logits, const di_sample_in *in, di_sample_out *out) {
  const di_sampling *p = in->p;
  int n = s->n_vocab;
  bool greedy = is_greedy(p);
  int32_t forced = in->mask ? di_sampler_forced(in->mask, n) : -1;
  if (forced >= 0) {
    /* a grammar leaves one choice (a tag token, a fixed stretch of a
     * schema): no logits to process; the draw a sample would take is still
     * taken, so the seeded stream is the same as sampling's */
    out->token = forced;
    if (!greedy) (void)rng_uniform(in->rng);
  } else if (in->cand) { /* the split row's reduction (di_sampler_split_k) */
    if (greedy) {
      out->token = in->cand[0].id;
    } else {
      memcpy(s->pairs, in->cand, (size_t)p->top_k * sizeof *s->pairs);
      out->token = sample_tail(s, in, p->top_k, true);
    }
  } else if (greedy && !modifies_logits(p)) { /* nothing modifies the logits: no copy */
    out->token = in->mask ? masked_argmax(logits, in->mask, n) : di_argmax(logits, n);
  } else {
    memcpy(s->logits, logits, (size_t)n * sizeof *logits);
    /* grammar first: temperature, top-k/p and penalties see allowed tokens only */
    if (in->mask) apply_mask(s->logits, in->mask, n);
    for (int i = 0; i < p->n_logit_bias; i++) s->logits[p->logit_bias_ids[i]] += p->logit_bias_values[i];
    apply_penalties(s, in);
    out->token = greedy ? di_argmax(s->logits, n) : sample_dist(s, in);
  }
  out->logprob = 0;
  out->n_top = 0;
  if (in->logprob || in->top_logprobs > 0) fill_logprobs(logits, n, in, out);
}
