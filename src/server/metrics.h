/* Server-side Prometheus metrics (`deepinfer:*`, see docs/METRICS.md):
 * counters and histograms updated as requests finish, plus gauges read from
 * the engine's stats at scrape time. */
#ifndef DI_SERVER_METRICS_H
#define DI_SERVER_METRICS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "deepinfer.h"

#define DI_SRV_HIST_MAX 20

typedef struct di_srv_hist {
  const double *bounds; /* upper bounds, ascending; +Inf implied */
  int nb;
  uint64_t counts[DI_SRV_HIST_MAX + 1]; /* per bucket, not cumulative */
  double sum;
  uint64_t n;
} di_srv_hist;

typedef struct di_srv_metrics {
  pthread_mutex_t mu;
  uint64_t finished[5]; /* by di_finish */
  uint64_t prompt_tokens, generation_tokens, cached_prompt_tokens;
  uint64_t rejected_full; /* 429s for a full queue */
  di_srv_hist ttft, tpot, e2e, queue, prompt_len, gen_len;
  uint64_t http[600];   /* responses by status code */
} di_srv_metrics;

void di_srv_metrics_init(di_srv_metrics *m);
void di_srv_metrics_destroy(di_srv_metrics *m);
void di_srv_metrics_http(di_srv_metrics *m, int status);
void di_srv_metrics_finish(di_srv_metrics *m, di_finish f, int completion_tokens);
/* One engine submission finished: its prompt and timings (seconds; < 0 = unknown). */
void di_srv_metrics_request(di_srv_metrics *m, int prompt_tokens, int cached_tokens, double queue,
                            double ttft, double tpot, double e2e);
void di_srv_metrics_ttft(di_srv_metrics *m, double seconds);
void di_srv_metrics_rejected(di_srv_metrics *m);
/* Renders the exposition text (malloc'd). st may be NULL while loading. */
char *di_srv_metrics_render(di_srv_metrics *m, const di_engine_stats *st, size_t *len);

#endif
