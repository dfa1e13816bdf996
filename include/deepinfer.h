/* DeepInfer public C API. See docs/API.md. */
#ifndef DEEPINFER_H
#define DEEPINFER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum di_code {
  DI_OK = 0,
  DI_ERR_INVALID,     /* a caller-supplied value is wrong */
  DI_ERR_IO,          /* open/read/write failed */
  DI_ERR_FORMAT,      /* a file or request body is malformed */
  DI_ERR_NOMEM,       /* allocation or budget exhausted */
  DI_ERR_UNSUPPORTED, /* well-formed but not implemented (dtype, architecture) */
  DI_ERR_RANGE,       /* a length or index exceeds a limit (context, vocab) */
  DI_ERR_CANCELLED,
  DI_ERR_FULL,        /* a queue or pool is full; retry later */
  DI_ERR_INTERNAL,
} di_code;

#define DI_VERSION "0.1.0"

/* ------------------------------------------------------------------------
 * Engine: one loaded model serving many requests with continuous batching.
 * Thread model: di_engine_submit / di_engine_cancel / di_engine_stats are
 * safe from any thread. Steps run either on the caller's thread
 * (di_engine_step) or on a background thread (di_engine_start). Event
 * callbacks are invoked on the thread that runs the step and must not block;
 * they may call di_engine_submit / di_engine_cancel. Pointers inside an event
 * are valid only during the callback. See docs/API.md.
 * ---------------------------------------------------------------------- */

typedef struct di_engine di_engine;

typedef enum di_kv_dtype { DI_KV_DTYPE_F16 = 0, DI_KV_DTYPE_F32 = 1, DI_KV_DTYPE_BF16 = 2 } di_kv_dtype;

/* Speculative decoding (docs/API.md): drafts verified by the model itself, so
 * outputs are those without it, bit for bit; only the speed changes. */
typedef enum di_spec_kind { DI_SPEC_OFF = 0, DI_SPEC_NGRAM, DI_SPEC_DRAFT, DI_SPEC_MTP } di_spec_kind;
typedef enum di_spec_mode {
  DI_SPEC_AUTO = 0,  /* draft length tuned per request from measured costs; backs off when it does not pay */
  DI_SPEC_ALWAYS = 1 /* verify every proposed token (up to spec_k_max) */
} di_spec_mode;
#define DI_SPEC_K_DEFAULT 8

typedef struct di_engine_opts {
  const char *model_path;   /* GGUF file or Hugging Face directory */
  int threads;              /* 0 = number of cores */
  int ctx;                  /* max positions per sequence; 0 = model's training context */
  di_kv_dtype kv_type;      /* default F16 */
  size_t kv_mem;            /* bytes for the KV block pool; 0 = enough for max_seqs full contexts, capped */
  int max_seqs;             /* running sequences at once; 0 = 16 */
  int max_batch_tokens;     /* tokens per step; 0 = 512 */
  int block_size;           /* KV block size in tokens; 0 = 16 */
  int prefix_cache;         /* 1 = on (default), 0 = off */
  int allow_special_in_content; /* trusted callers only: prompt_text may spell special tokens */
  int use_mmap;             /* 1 = memory-map the weights instead of reading them */
  int tokenizer_optional;   /* 1 = a model without a tokenizer loads (ids only, events carry no text) */
  di_spec_kind spec;        /* speculative decoding: DI_SPEC_OFF (default) or a drafter */
  int spec_k_max;           /* most draft tokens per sequence and step, 1..32; 0 = DI_SPEC_K_DEFAULT */
  di_spec_mode spec_mode;
  const char *draft_model_path; /* DI_SPEC_DRAFT: the draft model (same vocabulary), greedy, KV beside the target's */
  /* Sliding-window KV (docs/ARCHITECTURE.md, "Checkpoints and bounded replay"). */
  int swa_checkpoint;       /* checkpoint interval C in positions (multiple of block_size, >= the window); 0 = 4x window */
  int swa_full;             /* 1 = sliding-window layers keep full-size KV (the reference path) */
  int no_replay;            /* 1 = no checkpoints: a hit whose windows are gone recomputes the prefix */
  int swa_window;           /* > 0: every layer of a model without sliding layers gets this window */
} di_engine_opts;

void di_engine_opts_default(di_engine_opts *o);
/* On failure returns the code and writes a one-line message into err. */
di_code di_engine_create(const di_engine_opts *o, di_engine **out, char *err, size_t errlen);
void di_engine_destroy(di_engine *e);

typedef enum di_finish {
  DI_FINISH_NONE = 0, DI_FINISH_STOP, DI_FINISH_LENGTH, DI_FINISH_CANCELLED, DI_FINISH_ERROR
} di_finish;

typedef struct di_sampling {
  float temperature;        /* 0 = greedy */
  int top_k;                /* 0 = off */
  float top_p;              /* 1 = off; must be in (0, 1] */
  float min_p;              /* 0 = off */
  float repetition_penalty; /* 1 = off */
  float frequency_penalty, presence_penalty;
  uint64_t seed;            /* per-request RNG */
  int n_logit_bias;
  const int32_t *logit_bias_ids;
  const float *logit_bias_values;
} di_sampling;

/* Events of one completion: one per sampled output token (finish == NONE),
 * then exactly one final event (token == -1, finish != NONE) that carries any
 * text still held back and the usage counts. A stop token (EOS, stop_ids) or
 * the token that completes a stop string gets no text of its own. */
typedef struct di_event {
  uint64_t request_id;
  int index;                /* completion index when n > 1 */
  int32_t token;            /* -1 on a final event that carries no token */
  const char *text;         /* newly complete UTF-8 text (may be empty), stop strings removed */
  size_t text_len;
  float logprob;
  int n_top;                /* top alternatives when logprobs were asked for */
  const int32_t *top_ids;
  const float *top_logprobs;
  di_finish finish;         /* != NONE on the last event of this completion */
  const char *error;        /* message when finish == DI_FINISH_ERROR */
  int prompt_tokens, cached_tokens, completion_tokens; /* cached = prefix-cache hit tokens */
  int replayed_tokens;      /* prompt tokens recomputed by bounded replay to rebuild sliding windows */
  double queue_seconds;     /* submission to first scheduling (excludes prefill); -1 before that */
  int spec_drafted, spec_accepted, spec_verify_steps; /* speculation so far: draft tokens verified, accepted */
} di_event;

typedef void (*di_event_cb)(const di_event *ev, void *user);

typedef struct di_request_params {
  const int32_t *prompt_ids; /* either ids ... */
  size_t n_prompt;
  const char *prompt_text;   /* ... or text, tokenized with the model's tokenizer */
  size_t prompt_text_len;
  di_sampling sampling;
  int max_tokens;            /* 0 = until the context is full; < 0 is an error */
  int ignore_eos;
  const char *const *stop;   /* stop strings */
  int n_stop;
  const int32_t *stop_ids;
  int n_stop_ids;
  int logprobs;              /* 1 = report logprob of each sampled token */
  int top_logprobs;          /* 0..20 */
  int n;                     /* completions sharing the prompt's KV blocks; 0 = one; < 0 error */
  int priority;              /* larger runs first; ties FCFS */
  di_event_cb cb;
  void *user;
  int spec_off;              /* 1 = never speculate for this request */
  /* Optional (n = 1 only): the logits row of every position, prompt and
   * generated, once each in position order, on the stepping thread; such a
   * request computes its whole prompt (no prefix-cache hit). */
  void (*logits_cb)(const float *row, int n_vocab, int pos, void *user);
} di_request_params;

void di_request_params_default(di_request_params *p);
/* Validates and queues a request (all arrays and strings are copied). A bad
 * request is rejected here with a message and never affects others. */
di_code di_engine_submit(di_engine *e, const di_request_params *p, uint64_t *id, char *err, size_t errlen);
/* Finishes every completion of the request with DI_FINISH_CANCELLED at the
 * next step and returns its KV blocks. DI_ERR_INVALID if the id is unknown. */
di_code di_engine_cancel(di_engine *e, uint64_t id);
/* Pauses (pause != 0) or resumes a request at the next step. A paused
 * request computes nothing and holds no KV: its sequences give their blocks
 * back (they stay in the prefix cache until evicted) and wait; resumed, they
 * recompute what was evicted, like a preempted sequence, and continue with
 * the same output as if never paused. For a consumer that cannot take more
 * events for now (a stream whose client stopped reading). */
di_code di_engine_pause(di_engine *e, uint64_t id, int pause);
/* Runs one scheduler step; returns the number of unfinished requests. */
int di_engine_step(di_engine *e);
di_code di_engine_start(di_engine *e); /* background stepping thread */
void di_engine_stop(di_engine *e);     /* stops and joins it; queued requests stay queued */

/* Pollable streams: the same events, queued for a consumer that pulls them
 * instead of being called on the stepping thread (p->cb must be NULL; p->user
 * is unused). Use with di_engine_start, or step the engine between polls. */
typedef struct di_stream di_stream;
di_code di_engine_submit_stream(di_engine *e, const di_request_params *p, di_stream **out, char *err,
                                size_t errlen);
/* Waits up to timeout_ms (-1 = forever, 0 = no wait) for the next event: 1 with
 * *ev filled (its pointers valid until the next call), 0 on timeout, -1 once
 * every completion has finished and all events were read. */
int di_stream_next(di_stream *s, di_event *ev, int timeout_ms);
uint64_t di_stream_id(const di_stream *s);
/* Cancels the request if still running; safe at any time. */
void di_stream_free(di_stream *s);

/* The engine's tokenizer (src/tokenizer/tokenizer.h), for callers that render
 * chat templates; NULL if the engine has none. */
struct di_tokenizer;
const struct di_tokenizer *di_engine_tokenizer(const di_engine *e);
/* Context length per sequence and vocabulary size. */
int di_engine_ctx(const di_engine *e);
int di_engine_n_vocab(const di_engine *e);

typedef struct di_engine_stats {
  int running, waiting;
  int paused;                    /* unfinished requests paused (di_engine_pause); their sequences count as waiting */
  uint64_t finished, preemptions;
  uint64_t prompt_tokens, generated_tokens;
  uint64_t prefix_queries, prefix_hit_tokens; /* lookups; prompt tokens served from the cache */
  int kv_blocks_total, kv_blocks_used, kv_blocks_high_water;
  uint64_t prefix_query_tokens;  /* prompt tokens looked up: hit rate = hit_tokens / query_tokens */
  int kv_blocks_cached;          /* blocks indexed by the prefix cache (in use or parked) */
  int kv_block_size;             /* tokens per block */
  size_t kv_block_bytes;         /* bytes per block (all layers, K and V) */
  uint64_t steps, batch_tokens;  /* forward steps run and tokens they carried */
  double step_seconds, sched_seconds; /* time in forward+sampling, and in scheduling alone */
  const char *spec_drafter;      /* NULL when speculation is off */
  uint64_t spec_drafted, spec_accepted, spec_verify_steps, spec_fallbacks;
  /* --spec mtp: the module's forwards and the rows (pairs) they computed; probes
   * checked against the sampled token instead of verified (a shadow, no draft row) */
  uint64_t spec_mtp_forwards, spec_mtp_rows, spec_shadow_probes;
  /* bounded replay (prefix hits, resumes): replays, positions they recomputed, the longest one */
  uint64_t swa_replays, swa_replay_tokens;
  int swa_replay_max;
  int swa_checkpoint;            /* C in positions; 0 = no checkpoints */
  int kv_ckpt_blocks;            /* cached sliding-window blocks that belong to a checkpoint */
  /* blocks in use by layer group, now and at most: full-attention, sliding-window */
  int kv_blocks_used_full, kv_blocks_used_window, kv_blocks_high_full, kv_blocks_high_window;
  /* preempted sequences hold their latest checkpoint's windows while they wait:
   * blocks held now; holds given up under memory pressure (longer replays) */
  int swa_held_blocks;
  uint64_t swa_hold_drops;
  /* time the stepping thread spent in requests' constraints (grammar masks,
   * accepting tokens, cutting drafts), within step_seconds and sched_seconds:
   * a constraint's cost measured directly, steadier than comparing two runs
   * on a loaded machine */
  double constraint_seconds;
} di_engine_stats;
void di_engine_stats_get(di_engine *e, di_engine_stats *s);

#ifdef __cplusplus
}
#endif
#endif
