/* The OpenAI/DeepSeek-compatible HTTP server (libmicrohttpd + jansson).
 *
 * The server reaches the model only through di_srv_backend, a table of
 * functions filled by `deepinfer serve` from the engine, tokenizer and chat
 * recipe (and by the unit tests from a fake). Keeping HTTP behind this seam
 * lets the HTTP/JSON/SSE/metrics layers be tested without a model, and keeps
 * the dependency direction server -> engine one-way. */
#ifndef DI_SERVER_SERVER_H
#define DI_SERVER_SERVER_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "deepinfer.h"
#include "grammar/grammar.h"
#include "util/status.h"

/* A request's token constraint as the server hands it to the backend (the
 * engine's di_constraint): allowed next tokens as a bitmask, accept one
 * token (false: refused, state unchanged), no token may follow, undo the
 * last n accepts. */
typedef struct di_srv_tokcon {
  void *self;
  void (*fill_mask)(void *self, uint32_t *mask);
  bool (*accept)(void *self, int32_t token);
  bool (*finished)(void *self);
  void (*rollback)(void *self, size_t n);
} di_srv_tokcon;

typedef struct di_srv_backend {
  void *ctx;
  /* 0 while the model loads (/health answers 503), 1 once requests may flow. */
  int (*ready)(void *ctx);
  /* Optional: the engine's defaults for request parameters. */
  void (*params_default)(di_request_params *p);
  di_code (*submit)(void *ctx, const di_request_params *p, uint64_t *id, char *err, size_t errlen);
  di_code (*cancel)(void *ctx, uint64_t id);
  /* Optional: pause (pause != 0) or resume a request (di_engine_pause); a
   * stream whose client stops reading is paused, or cancelled without it. */
  di_code (*pause)(void *ctx, uint64_t id, int pause);
  void (*stats)(void *ctx, di_engine_stats *s);
  /* Text -> ids (malloc'd, freed by the caller). Special-token text is
   * parsed only when parse_special (never for untrusted chat content). */
  di_code (*tokenize)(void *ctx, const char *text, size_t len, int add_special, int parse_special,
                      int32_t **ids, size_t *n, di_status *st);
  /* Ids -> text (malloc'd, NUL-terminated). An id out of range is an error. */
  di_code (*detokenize)(void *ctx, const int32_t *ids, size_t n, char **text, size_t *len,
                        di_status *st);
  /* Raw bytes of one token (for logprobs); returns the byte count or -1. */
  int (*token_bytes)(void *ctx, int32_t id, char *buf, size_t cap);
  /* Renders validated messages (a JSON array of objects with "role" and a
   * string or null "content"; tools may be NULL) with the model's chat
   * template into ids. continue_final: the last message is an assistant turn
   * to continue (DeepSeek prefix completion), so no generation prompt is
   * added and nothing after its content is kept. think_open is set to 1 when
   * the prompt leaves the model inside a <think> block. */
  di_code (*render_chat)(void *ctx, const json_t *messages, const json_t *tools, int continue_final,
                         int32_t **ids, size_t *n_ids, int *think_open, di_status *st);
  /* Fill-in-the-middle prompt; DI_ERR_UNSUPPORTED when the vocabulary has no FIM tokens. */
  di_code (*fim)(void *ctx, const char *prefix, const char *suffix, int32_t **ids, size_t *n_ids,
                 di_status *st);
  /* Optional (structured output): compiles a grammar for the model's
   * tokenizer, and submits a request whose tokens the matcher constrains
   * (n = 1; the matcher must outlive the request's final event). */
  di_code (*grammar)(void *ctx, di_grammar_kind kind, const char *src, size_t len, const di_grammar_opts *o,
                     di_grammar **out, di_status *st);
  di_code (*submit_constrained)(void *ctx, const di_request_params *p, di_gmatcher *m, uint64_t *id, char *err,
                                size_t errlen);
  /* Optional: submits a request under any token constraint (tool calls). */
  di_code (*submit_tokcon)(void *ctx, const di_request_params *p, const di_srv_tokcon *c, uint64_t *id, char *err,
                           size_t errlen);
  /* Optional: how the chat template writes tool calls (server/tools.h:
   * "hermes", "llama3", "deepseek_v3", "deepseek_v31"), NULL when unknown. */
  const char *(*tool_format)(void *ctx);
  int n_ctx;   /* positions per sequence (or set later by di_server_set_model) */
  int n_vocab;
  int max_seqs;
} di_srv_backend;

typedef struct di_server_opts {
  const char *host;        /* default 127.0.0.1 */
  int port;                /* 0 = any free port (see di_server_port) */
  const char *api_key;     /* NULL = no auth */
  const char *model_name;  /* the id /v1/models lists and requests must name */
  int max_queue;           /* sequences (prompts x n) admitted beyond max_seqs before 429 */
  size_t max_body;         /* bytes; larger bodies get 413 */
  int request_timeout;     /* seconds: idle connection limit and body deadline */
  int max_connections;     /* simultaneous connections */
  int max_connections_per_ip; /* simultaneous connections from one address (0 = no limit) */
  int header_timeout;      /* seconds to deliver complete request headers */
  int keepalive_ms;        /* SSE ": keep-alive" period while nothing is produced */
  size_t stream_buffer;    /* bytes of events a stream may hold unsent before it is paused (or cancelled) */
  double stream_stall_timeout; /* seconds a stream may stay paused for an unread buffer before it is cancelled */
  int quiet;               /* 1 = no per-request log lines */
  long long seed;          /* >= 0: requests without a seed get seeds derived from it */
} di_server_opts;

void di_server_opts_default(di_server_opts *o);

typedef struct di_server di_server;

/* Binds and starts serving on background threads. The backend table is
 * copied; its ctx must outlive the server. */
di_code di_server_start(const di_server_opts *o, const di_srv_backend *be, di_server **out,
                        di_status *st);
int di_server_port(const di_server *s);
/* Graceful shutdown, first phase: new generation requests get 503, open
 * ones get drain_s seconds to finish; then the rest are cancelled, each
 * stream ending with an error event and [DONE], each waiting client with a
 * 503. Returns false if a signal of sigs arrived meanwhile (exit at once). */
bool di_server_drain(di_server *s, int drain_s, const sigset_t *sigs);
void di_server_stop(di_server *s);

/* Called once the model is loaded, before backend->ready turns 1: the
 * limits requests are validated against. */
void di_server_set_model(di_server *s, int n_ctx, int n_vocab, int max_seqs);

/* Renders the Prometheus exposition (for tests and the /metrics route). */
char *di_server_metrics_text(di_server *s, size_t *len);

#endif
