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
#include "engine/spec/draft.h"
#include "engine/spec/tune.h"
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
  int align;              /* main table: di_kv_table.align (DeepSeek-V4's sliced HCA rows), 0: none */
  bool window_sparse;     /* the sliding-window tables are di_kv_table.sparse (DeepSeek-V4) */
  /* the last n_swa_short sliding-window tables keep window_short positions,
   * the others `window` (DeepSeek-V4's CSA compressor series; 0: none) */
  int n_swa_short, window_short;
  const int32_t *eos_ids;
  int n_eos;
  void *user;
  /* forward honours di_batch.split (tensor parallel: the logits stay split
   * by vocabulary and the ranks reduce them for sampling) */
  bool split_logits;
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
  /* --spec mtp (NULL: the model has no MTP module): forward also leaves each
   * token's last hidden state in hidden ([tokens][n_embd]), the pool has one
   * more layer (n_layers counts it) for the module's K/V, and forward_mtp
   * runs the module (graph/forward.h, di_forward_mtp) writing logits rows
   * and each token's output state into hidden_out (to chain it).
   * mtp_window: the module attends to its last mtp_window pairs (DeepSeek-V4's
   * sliding block); 0: to every earlier pair (DeepSeek-V3). mtp_kv_only: it
   * honours di_batch.kv_only (writes those rows' K/V and stops). */
  int n_embd, mtp_window;
  bool mtp_kv_only;
  const float *hidden;
  di_code (*forward_mtp)(void *user, di_kv_pool *kv, const di_batch *b, const float *hidden, float *logits,
                         float *hidden_out, di_status *st);
} di_engine_backend;

/* The positions sliding-window table k keeps. */
static inline int di_engine_swa_window(const di_engine_backend *be, int k) {
  return k >= be->n_swa_tables - be->n_swa_short ? be->window_short : be->window;
}

/* A request's token constraint (a grammar matcher, src/grammar/): fill_mask
 * gives the allowed next tokens (bit i % 32 of word i / 32), accept advances
 * over one token (false: not allowed, state unchanged), finished says no
 * token may follow, rollback undoes the last n accepts. The engine masks each
 * sampled position with it and advances it on every emitted token, so its
 * state is always that of the emitted tokens; speculation also walks a draft
 * through it to cut the draft before the first token it forbids (the target
 * could never choose it) and rolls that walk back. n = 1 only. */
typedef struct di_constraint {
  void *self;
  void (*fill_mask)(void *self, uint32_t *mask);
  bool (*accept)(void *self, int32_t token);
  bool (*finished)(void *self);
  void (*rollback)(void *self, size_t n);
} di_constraint;

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
  int replay_end;         /* the main (full-attention) table already holds [0, replay_end):
                             positions [n_computed, replay_end) are a bounded replay (replay.c) */
  di_kv_table table;
  di_kv_table swa[DI_KV_MAX_SWA_TABLES]; /* [be.n_swa_tables] */
  int32_t *pins;          /* while preempted: blocks of its latest checkpoint's windows it holds (replay.c) */
  int n_pins;
  uint64_t rng;
  void *detok;
  char *pending;          /* decoded text held back while it may start a stop string */
  size_t pending_len, pending_cap;
  int n_gen;
  int n_preempted;
  di_spec_seq spec;       /* acceptance estimates, back-off and counts (spec/tune.h) */
  di_draft_seq *dseq;     /* draft-model KV and proposal (spec/draft.c); NULL until it drafts */
  int32_t mtp_draft[DI_SPEC_K_LIMIT]; /* --spec mtp: the module's proposal for tokens[mtp_at..] (spec/mtp.c) */
  int mtp_n, mtp_at;
  int mtp_done;           /* the module's K/V hold the pairs of [0, mtp_done) (spec/mtp.c) */
  float *mtp_ring;        /* the target's hidden states of positions [mtp_ring_lo, mtp_ring_hi), slot p % cap */
  int mtp_ring_lo, mtp_ring_hi;
  uint64_t queued_at;     /* engine step when it last entered the waiting queue */
  /* per-step scratch */
  int take;               /* tokens in this step's batch */
  int n_delivered;        /* positions whose logits went to the request's logits_cb */
  int n_draft;            /* draft tokens among them (at tokens[len..len+n_draft)) */
  bool draft_forced;      /* the draft is a run the constraint forces (spec.c), not a drafter's guess */
  int row0;               /* first logits row of the sequence this step; -1 = none */
  int logits_row;         /* row of the last token (the one sampled from); -1 = none this step */
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
  int replayed_tokens;    /* of the prompt, recomputed by bounded replay at first admission */
  di_constraint constraint; /* .accept == NULL: none */
  bool admitted_once, cancelled;
  bool paused;            /* di_engine_pause: its sequences wait, holding no KV, until resumed */
  double t_submit, t_admit; /* monotonic seconds: submission, first admission */
  di_req *next;           /* all live requests */
};

/* A command for a request, queued by any thread and applied by the stepping one. */
typedef enum { DI_CMD_CANCEL, DI_CMD_PAUSE, DI_CMD_RESUME } di_engine_cmd_op;
typedef struct di_engine_cmd {
  uint64_t id;
  di_engine_cmd_op op;
} di_engine_cmd;

/* A sorted-by-(priority desc, arrival asc, index asc) list of sequences. */
typedef struct di_seq_list {
  di_seq **v;
  int n, cap;
} di_seq_list;

struct di_engine {
  di_engine_backend be;
  int max_seqs, max_batch_tokens, ctx;
  int swa_ckpt;           /* checkpoint interval C in positions; 0 = none (no replay) */
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
  float *logits;          /* [logits_cap][n_vocab] */
  uint32_t *cmask;        /* [(n_vocab + 31) / 32] a constraint's allowed tokens */
  int logits_cap;         /* rows; grows when drafts or logits callbacks need more than max_seqs */
  /* be.split_logits: a step's rows reduced on the ranks (di_logits_split;
   * [max_seqs] rows), and the row di_engine_sample_emit samples from */
  di_logits_split split;
  int32_t *split_k;
  float *split_t;
  di_sampler_pair *split_out;
  const di_sampler_pair *cand;
  int step_prefill;       /* prompt tokens in this step's batch (the cost fit uses decode steps) */
  struct {
    bool on, always;
    int k_max;
    di_drafter drafter;
    di_spec_model *model; /* --spec draft: the draft model (proposals come from di_spec_model_step) */
    bool mtp;             /* --spec mtp: proposals from the model's MTP module (di_spec_mtp_step) */
    float *mtp_hidden;    /* [max_batch_tokens][n_embd] the module's input rows */
    float *mtp_out;       /* [max_batch_tokens][n_embd] its output rows (the next chained pair's input) */
    int32_t *mtp_tokens, *mtp_pos, *mtp_seq;
    bool *mtp_want;
    int *mtp_depth;       /* [max_seqs] per batch slot: tokens to draft */
    float *mtp_chain;     /* [max_seqs][n_embd] per batch slot: the module's output state at its last draft */
    int mtp_ring;         /* positions of hidden state a full-attention module's sequence keeps (spec/mtp.c) */
    bool *mtp_grew;           /* [max_seqs] a chained round took a block (given back after) */
    di_spec_cost cost;    /* step time against tokens (spec/tune.h) */
    double plan_emit;     /* expected tokens the step being built emits */
  } spec;
  /* cross-thread inbox: submissions, and cancel / pause / resume commands */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  di_req *inbox_head, *inbox_tail;
  di_engine_cmd *cmds;
  int n_cmds, cap_cmds;
  int n_paused;           /* unfinished requests paused (guarded by mu; counted by the stepping thread) */
  uint64_t next_id, next_arrival;
  int n_unfinished;       /* submitted and not finished (guarded by mu) */
  di_engine_stats stats;  /* published copy (guarded by mu) */
  di_engine_stats acc;    /* counters maintained by the stepping thread */
  pthread_t thread;
  bool thread_on, stop;
};

/* engine.c */
/* di_engine_submit with a token constraint on the request (n = 1; the
 * caller keeps c->self alive until the request's final event). */
di_code di_engine_submit_constrained(di_engine *e, const di_request_params *p, const di_constraint *c, uint64_t *id,
                                     char *err, size_t errlen);
di_code di_engine_create_backend(const di_engine_opts *o, const di_engine_backend *be, di_engine **out,
                                 di_status *st);
/* The same with a draft model for --spec draft (NULL otherwise); the engine
 * owns both backends from the call on, failure included. */
di_code di_engine_create_spec(const di_engine_opts *o, const di_engine_backend *be, const di_engine_backend *draft,
                              di_engine **out, di_status *st);
/* Frees a request and its sequences (their KV back to the pool). */
void di_engine_req_free(di_engine *e, di_req *r);
void di_engine_finish_seq(di_engine *e, di_seq *s, di_finish why, const char *error);
void di_engine_after_forward(di_engine *e, di_seq *s, const float *logits);
/* Samples one token from a logits row and emits it (stop tokens, stop strings, max_tokens). */
void di_engine_sample_emit(di_engine *e, di_seq *s, const float *logits);
/* Hands the request's logits callback the row of position pos, once per
 * position (a preempted sequence recomputes rows it already delivered). */
void di_engine_deliver_logits(di_engine *e, di_seq *s, const float *row, int pos);
/* Makes the logits buffer hold at least rows rows; false if it cannot. */
bool di_engine_logit_rows(di_engine *e, int rows);

/* spec.c */
/* Drafts up to k_cap tokens after s's tokens (at tokens[len..]) and returns how
 * many the planner wants verified; tokens = the step's tokens so far with s's. */
int di_spec_propose(di_engine *e, di_seq *s, int k_cap, int tokens);
/* Most draft tokens s may verify this step given k_cap, --spec-k-max, its
 * context and max_tokens. */
int di_spec_k_cap(const di_engine *e, const di_seq *s, int k_cap);
/* spec/mtp.c: after a step's forward and sampling, keeps the target's hidden
 * states of the positions the step computed and, for each sequence that
 * drafts next step, runs the MTP module over the pairs it has not seen (the
 * target's hidden state at p beside the token at p + 1) and records the
 * draft; a sequence that does not draft next step (backed off) costs no
 * module row. */
/* A full-attention module's ring per sequence (spec/mtp.c): the longest probe
 * spacing (spec/tune.c), in at most DI_MTP_RING_BYTES of hidden states */
#define DI_MTP_RING_FULL 1024
#define DI_MTP_RING_BYTES ((size_t)4 << 20)
void di_spec_mtp_step(di_engine *e, const di_batch *b);
void di_spec_mtp_seq_free(di_seq *s);
/* After s sampled a token without drafts: a shadow probe's outcome (spec/tune.h). */
void di_spec_shadow_check(di_engine *e, di_seq *s);
/* Verifies s's drafts against the rows of this step (row 0: its base token). */
void di_spec_verify(di_engine *e, di_seq *s, const float *rows);

/* replay.c */
/* The prefix-cache hit of a waiting sequence with empty tables: maps the
 * cached blocks of every table and returns the position to compute from
 * (s->n_computed); positions [that, s->replay_end) are a bounded replay, whose
 * length (also for models without full-attention layers) goes to *replayed. */
int di_replay_match(di_engine *e, di_seq *s, int *replayed);
/* A sequence being preempted (tables still mapped) takes a reference on the
 * windows of its latest checkpoint, all window tables or none, so that they
 * outlive its wait and its resume replays at most C positions: O(window)
 * blocks per waiting sequence. */
void di_replay_hold(di_engine *e, di_seq *s);
/* Gives those references back (blocks a table maps again stay; the others
 * are parked, evictable); returns how many. */
int di_replay_drop(di_engine *e, di_seq *s);

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
