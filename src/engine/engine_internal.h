/* Engine internals shared by engine.c (API, requests, events), scheduler.c
 * (batch building, preemption) and engine_model.c (the real model backend).
 * The engine core only talks to a model through di_engine_backend, so unit
 * tests drive the full scheduler with a tiny deterministic fake model. */
#ifndef DI_ENGINE_INTERNAL_H
#define DI_ENGINE_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "deepinfer.h"
#include "engine/sampler.h"
#include "graph/batch.h"
#include "kv/pool.h"
#include "kv/table.h"
#include "util/status.h"

/* What the engine needs from a model. Text functions may be NULL (then text
 * prompts and stop strings are rejected and events carry no text). */
typedef struct di_engine_backend {
  int n_vocab, n_ctx;     /* n_ctx: max positions per sequence */
  int n_layers, kv_dim;   /* KV pool geometry */
  bool kv_v_in_k;         /* blocks hold one row per token and layer, read as K and V (MLA's latent) */
  di_kv_policy policy;
  int window;             /* WINDOW policy / sliding-window tables: attention window in positions */
  /* Mixed models (full-attention and sliding-window layers): the pool's blocks
   * hold n_layers full-attention layers, and the sliding-window layers go to
   * n_swa_tables extra tables per sequence under the WINDOW policy (0: none). */
  int n_swa_tables;
  const int32_t *eos_ids;
  int n_eos;
  void *user;
  di_code (*forward)(void *user, di_kv_pool *kv, const di_batch *b, float *logits, di_status *st);
  di_code (*encode)(void *user, const char *text, size_t len, bool parse_special, int32_t **ids, size_t *n,
                    di_status *st);
  void *(*detok_new)(void *user);
  /* Newly complete text for id (valid until the next call on the stream). */
  void (*detok_push)(void *stream, int32_t id, const char **text, size_t *len);
  void (*detok_flush)(void *stream, const char **text, size_t *len);
  void (*detok_free)(void *stream);
  const struct di_tokenizer *tokenizer;
  void (*destroy)(void *user);
} di_engine_backend;

typedef enum di_seq_state { DI_SEQ_WAITING = 0, DI_SEQ_RUNNING, DI_SEQ_DONE } di_seq_state;

typedef struct di_req di_req;

/* One completion: its token history, KV blocks and output state. */
typedef struct di_seq {
  di_req *req;
  int index;              /* completion index */
  di_seq_state state;
  int32_t *tokens;        /* prompt followed by generated tokens */
  int len, cap;
  int n_computed;         /* leading tokens whose K/V are in the pool */
  di_kv_table table;
  di_kv_table swa[DI_KV_MAX_SWA_TABLES]; /* [be.n_swa_tables] */
  uint64_t rng;
  void *detok;
  char *pending;          /* decoded text held back while it may start a stop string */
  size_t pending_len, pending_cap;
  int n_gen;
  int n_preempted;
  uint64_t queued_at;     /* engine step when it last entered the waiting queue */
  /* per-step scratch */
  int take;               /* tokens in this step's batch */
  int logits_row;         /* -1 = no logits this step */
  bool scheduled;
} di_seq;

struct di_req {
  uint64_t id;
  uint64_t arrival;       /* FCFS order */
  int priority;
  di_request_params p;    /* copied; pointers below own the arrays */
  int32_t *prompt;
  int n_prompt;
  char **stop;
  size_t *stop_len;
  int32_t *stop_ids, *bias_ids;
  float *bias_vals;
  int n;                  /* completions */
  di_seq **seqs;          /* [n]; seqs[1..] exist once the prompt is computed */
  int n_seqs, n_done;
  int cached_tokens;      /* prefix-cache hit tokens at first admission */
  bool admitted_once, cancelled;
  double t_submit, t_admit; /* monotonic seconds: submission, first admission */
  di_req *next;           /* all live requests */
};

/* A sorted-by-(priority desc, arrival asc, index asc) list of sequences. */
typedef struct di_seq_list {
  di_seq **v;
  int n, cap;
} di_seq_list;

struct di_engine {
  di_engine_backend be;
  int max_seqs, max_batch_tokens, ctx;
  di_kv_pool *pool;
  di_sampler sampler;
  di_seq_list waiting, running;
  di_req *reqs;
  int n_reqs;
  /* batch buffers, sized once */
  int32_t *b_tokens, *b_pos, *b_seq;
  bool *b_want;
  di_batch_seq *b_seqs;
  di_seq **b_owner;       /* [max_seqs + ...] sequence of each batch seq slot */
  int b_cap_seqs;
  float *logits;          /* [max_seqs][n_vocab] */
  /* cross-thread inbox: submissions and cancellations */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  di_req *inbox_head, *inbox_tail;
  uint64_t *cancels;
  int n_cancels, cap_cancels;
  uint64_t next_id, next_arrival;
  int n_unfinished;       /* submitted and not finished (guarded by mu) */
  di_engine_stats stats;  /* published copy (guarded by mu) */
  di_engine_stats acc;    /* counters maintained by the stepping thread */
  pthread_t thread;
  bool thread_on, stop;
};

/* engine.c */
di_code di_engine_create_backend(const di_engine_opts *o, const di_engine_backend *be, di_engine **out,
                                 di_status *st);
void di_engine_finish_seq(di_engine *e, di_seq *s, di_finish why, const char *error);
void di_engine_after_forward(di_engine *e, di_seq *s, const float *logits);

/* scheduler.c */
/* A sequence's tables (main + sliding-window ones): drop every block / share src's. */
void di_seq_kv_release(di_engine *e, di_seq *s);
void di_seq_kv_fork(di_engine *e, di_seq *dst, const di_seq *src);
void di_seq_list_insert(di_seq_list *l, di_seq *s);
void di_seq_list_remove(di_seq_list *l, di_seq *s);
/* Builds this step's batch; returns its token count (0 = nothing to run). */
int di_sched_build(di_engine *e, di_batch *b);

double di_engine_now(void);

#endif
