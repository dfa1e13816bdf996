/* Prometheus text exposition of the `deepinfer:*` metrics (docs/METRICS.md).
 * Counters and histograms are kept here; gauges come from the engine's
 * stats at scrape time so they are never stale. */
#include "server/metrics.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const double LAT[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                             0.75,  1.0,   2.5,  5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0};
static const double TPOT[] = {0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1,
                              0.15,  0.2,    0.3,   0.4,  0.5,  0.75, 1.0,  2.5,  5.0,   10.0};
static const double TOKENS[] = {1,    2,    5,     10,    20,    50,    100,   200,    500,
                                1000, 2000, 5000, 10000, 20000, 50000, 100000, 200000};

static void hist_init(di_srv_hist *h, const double *b, int nb) {
  memset(h, 0, sizeof *h);
  h->bounds = b;
  h->nb = nb;
}

static void hist_add(di_srv_hist *h, double v) {
  int i = 0;
  while (i < h->nb && v > h->bounds[i]) i++;
  h->counts[i]++;
  h->sum += v;
  h->n++;
}

#define N(a) ((int)(sizeof a / sizeof a[0]))

void di_srv_metrics_init(di_srv_metrics *m) {
  memset(m, 0, sizeof *m);
  pthread_mutex_init(&m->mu, NULL);
  hist_init(&m->ttft, LAT, N(LAT));
  hist_init(&m->e2e, LAT, N(LAT));
  hist_init(&m->queue, LAT, N(LAT));
  hist_init(&m->tpot, TPOT, N(TPOT));
  hist_init(&m->prompt_len, TOKENS, N(TOKENS));
  hist_init(&m->gen_len, TOKENS, N(TOKENS));
}

void di_srv_metrics_destroy(di_srv_metrics *m) { pthread_mutex_destroy(&m->mu); }

void di_srv_metrics_http(di_srv_metrics *m, int status) {
  pthread_mutex_lock(&m->mu);
  if (status >= 100 && status < 600) m->http[status]++;
  pthread_mutex_unlock(&m->mu);
}

void di_srv_metrics_finish(di_srv_metrics *m, di_finish f, int completion_tokens) {
  pthread_mutex_lock(&m->mu);
  if (f >= 0 && f < 5) m->finished[f]++;
  m->generation_tokens += (uint64_t)(completion_tokens > 0 ? completion_tokens : 0);
  hist_add(&m->gen_len, completion_tokens);
  pthread_mutex_unlock(&m->mu);
}

void di_srv_metrics_request(di_srv_metrics *m, int prompt_tokens, int cached_tokens, double queue,
                            double ttft, double tpot, double e2e) {
  pthread_mutex_lock(&m->mu);
  m->prompt_tokens += (uint64_t)(prompt_tokens > 0 ? prompt_tokens : 0);
  m->cached_prompt_tokens += (uint64_t)(cached_tokens > 0 ? cached_tokens : 0);
  hist_add(&m->prompt_len, prompt_tokens);
  if (queue >= 0) hist_add(&m->queue, queue);
  if (ttft >= 0) hist_add(&m->ttft, ttft);
  if (tpot >= 0) hist_add(&m->tpot, tpot);
  if (e2e >= 0) hist_add(&m->e2e, e2e);
  pthread_mutex_unlock(&m->mu);
}

void di_srv_metrics_ttft(di_srv_metrics *m, double seconds) {
  pthread_mutex_lock(&m->mu);
  hist_add(&m->ttft, seconds);
  pthread_mutex_unlock(&m->mu);
}

void di_srv_metrics_rejected(di_srv_metrics *m) {
  pthread_mutex_lock(&m->mu);
  m->rejected_full++;
  pthread_mutex_unlock(&m->mu);
}

typedef struct out {
  char *p;
  size_t len, cap;
  int oom;
} out;

__attribute__((format(printf, 2, 3))) static void outf(out *o, const char *fmt, ...) {
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    size_t room = o->cap - o->len;
    int n = o->p ? vsnprintf(o->p + o->len, room, fmt, ap) : -1;
    va_end(ap);
    if (n >= 0 && (size_t)n < room) {
      o->len += (size_t)n;
      return;
    }
    size_t cap = o->cap ? o->cap * 2 : 8192;
    char *p = realloc(o->p, cap);
    if (!p) {
      o->oom = 1;
      return;
    }
    o->p = p;
    o->cap = cap;
  }
}

static void head(out *o, const char *name, const char *type, const char *help) {
  outf(o, "# HELP deepinfer:%s %s\n# TYPE deepinfer:%s %s\n", name, help, name, type);
}

static void scalar(out *o, const char *name, const char *type, const char *help, double v) {
  head(o, name, type, help);
  outf(o, "deepinfer:%s %.17g\n", name, v);
}

static void hist(out *o, const char *name, const char *help, const di_srv_hist *h) {
  head(o, name, "histogram", help);
  uint64_t cum = 0;
  for (int i = 0; i < h->nb; i++) {
    cum += h->counts[i];
    outf(o, "deepinfer:%s_bucket{le=\"%g\"} %llu\n", name, h->bounds[i], (unsigned long long)cum);
  }
  cum += h->counts[h->nb];
  outf(o, "deepinfer:%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
  outf(o, "deepinfer:%s_sum %.17g\n", name, h->sum);
  outf(o, "deepinfer:%s_count %llu\n", name, (unsigned long long)h->n);
}

char *di_srv_metrics_render(di_srv_metrics *m, const di_engine_stats *st, size_t *len) {
  static const di_engine_stats zero;
  if (!st) st = &zero;
  out o = {0};
  double total = st->kv_blocks_total > 0 ? st->kv_blocks_total : 1;
  scalar(&o, "num_requests_running", "gauge", "Sequences in the running batch.", st->running);
  scalar(&o, "num_requests_waiting", "gauge", "Requests waiting to be scheduled.", st->waiting);
  scalar(&o, "num_requests_paused", "gauge",
         "Requests paused because their stream's client stopped reading (holding no KV).", st->paused);
  scalar(&o, "kv_cache_usage_perc", "gauge", "Fraction of KV cache blocks in use (0-1).",
         st->kv_blocks_used / total);
  scalar(&o, "kv_cache_usage_high_water_perc", "gauge",
         "Highest fraction of KV cache blocks ever in use (0-1).", st->kv_blocks_high_water / total);
  scalar(&o, "kv_cache_blocks", "gauge", "KV cache blocks in the pool.", st->kv_blocks_total);
  scalar(&o, "kv_cache_block_bytes", "gauge", "Bytes of one KV cache block (every layer group's blocks are this size).",
         (double)st->kv_block_bytes);
  scalar(&o, "kv_cache_blocks_used", "gauge", "KV cache blocks in use (all, and by layer group).",
         st->kv_blocks_used);
  outf(&o, "deepinfer:kv_cache_blocks_used{group=\"full\"} %d\n", st->kv_blocks_used_full);
  outf(&o, "deepinfer:kv_cache_blocks_used{group=\"window\"} %d\n", st->kv_blocks_used_window);
  scalar(&o, "swa_replays_total", "counter",
         "Bounded replays: prefix hits or resumptions that rebuilt sliding-window state from a checkpoint.",
         (double)st->swa_replays);
  scalar(&o, "swa_replay_tokens_total", "counter", "Positions recomputed by bounded replay.",
         (double)st->swa_replay_tokens);
  scalar(&o, "swa_checkpoint_blocks", "gauge", "Sliding-window KV blocks cached as checkpoints.",
         st->kv_ckpt_blocks);
  scalar(&o, "prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.",
         (double)st->prefix_query_tokens);
  scalar(&o, "prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache.",
         (double)st->prefix_hit_tokens);
  scalar(&o, "num_preemptions_total", "counter", "Sequences preempted for lack of KV blocks.",
         (double)st->preemptions);
  scalar(&o, "engine_prompt_tokens_total", "counter",
         "Prompt tokens processed by the engine (includes recomputation after preemption).",
         (double)st->prompt_tokens);
  scalar(&o, "engine_generation_tokens_total", "counter", "Tokens generated by the engine.",
         (double)st->generated_tokens);
  if (st->spec_drafter) { /* speculative decoding, labelled by drafter */
    static const struct {
      const char *name, *help;
      size_t off;
    } spec[] = {
        {"spec_draft_tokens_total", "Draft tokens verified by the target model.", offsetof(di_engine_stats, spec_drafted)},
        {"spec_accepted_tokens_total", "Draft tokens the target model accepted.", offsetof(di_engine_stats, spec_accepted)},
        {"spec_verify_steps_total", "Verifications of a sequence's draft (one per sequence and step).",
         offsetof(di_engine_stats, spec_verify_steps)},
        {"spec_fallbacks_total", "Times a sequence turned speculation off because it stopped paying.",
         offsetof(di_engine_stats, spec_fallbacks)},
        {"spec_mtp_forwards_total", "Forwards of the MTP module (--spec mtp; none while a sequence is backed off).",
         offsetof(di_engine_stats, spec_mtp_forwards)},
        {"spec_mtp_rows_total", "Positions (pairs) the MTP module computed, catch-ups and chained drafts included.",
         offsetof(di_engine_stats, spec_mtp_rows)},
        {"spec_shadow_probes_total", "Probes of a backed-off sequence checked against its sampled token (--spec mtp), not verified.",
         offsetof(di_engine_stats, spec_shadow_probes)},
    };
    for (size_t i = 0; i < sizeof spec / sizeof *spec; i++) {
      head(&o, spec[i].name, "counter", spec[i].help);
      outf(&o, "deepinfer:%s{drafter=\"%s\"} %llu\n", spec[i].name, st->spec_drafter,
           (unsigned long long)*(const uint64_t *)((const char *)st + spec[i].off));
    }
  }

  pthread_mutex_lock(&m->mu);
  static const char *reasons[5] = {"none", "stop", "length", "cancelled", "error"};
  head(&o, "request_success_total", "counter", "Finished completions by finish reason.");
  for (int f = 1; f < 5; f++)
    outf(&o, "deepinfer:request_success_total{finished_reason=\"%s\"} %llu\n", reasons[f],
         (unsigned long long)m->finished[f]);
  scalar(&o, "prompt_tokens_total", "counter", "Prompt tokens of finished requests.",
         (double)m->prompt_tokens);
  scalar(&o, "prompt_tokens_cached_total", "counter",
         "Prompt tokens of finished requests served from the prefix cache.",
         (double)m->cached_prompt_tokens);
  scalar(&o, "generation_tokens_total", "counter", "Generated tokens of finished completions.",
         (double)m->generation_tokens);
  scalar(&o, "request_rejected_total", "counter", "Requests refused with 429 because the queue was full.",
         (double)m->rejected_full);
  hist(&o, "time_to_first_token_seconds", "Time from request arrival to the first generated token.", &m->ttft);
  hist(&o, "time_per_output_token_seconds", "Mean time between generated tokens of a request.", &m->tpot);
  hist(&o, "e2e_request_latency_seconds", "Time from request arrival to its last token.", &m->e2e);
  hist(&o, "request_queue_time_seconds",
       "Time a request waited in the engine queue before it was first scheduled.", &m->queue);
  hist(&o, "request_prompt_tokens", "Prompt length of finished requests.", &m->prompt_len);
  hist(&o, "request_generation_tokens", "Generated length of finished completions.", &m->gen_len);
  head(&o, "http_requests_total", "counter", "HTTP responses by status code (499: client left).");
  int any = 0;
  for (int c = 100; c < 600; c++)
    if (m->http[c]) {
      outf(&o, "deepinfer:http_requests_total{code=\"%d\"} %llu\n", c, (unsigned long long)m->http[c]);
      any = 1;
    }
  if (!any) outf(&o, "deepinfer:http_requests_total{code=\"200\"} 0\n");
  pthread_mutex_unlock(&m->mu);
  if (o.oom) {
    free(o.p);
    return NULL;
  }
  *len = o.len;
  return o.p;
}
