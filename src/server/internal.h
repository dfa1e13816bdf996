/* Shared internals of src/server/: the server object, one HTTP request,
 * error answers, JSON field validation, and the generation context that
 * carries engine events to the chat/completions formatters. */
#ifndef DI_SERVER_INTERNAL_H
#define DI_SERVER_INTERNAL_H

#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "server/metrics.h"
#include "server/oai.h"
#include "server/server.h"
#include "server/think.h"

typedef struct di_srv_gen di_srv_gen;

/* ---- growable byte buffer (bodies, SSE output) ---- */
typedef struct di_srv_buf {
  char *p;
  size_t len, cap;
  int oom; /* an append failed; the content is truncated */
} di_srv_buf;
void di_srv_buf_put(di_srv_buf *b, const char *s, size_t n);
void di_srv_buf_puts(di_srv_buf *b, const char *s);
void di_srv_buf_free(di_srv_buf *b);

double di_srv_now(void); /* monotonic seconds */

struct di_server {
  struct MHD_Daemon *d;
  di_server_opts o;
  di_srv_backend be;
  char host[128];
  char *model_name;
  char *api_key;
  size_t api_key_len;
  int port;
  long created;
  atomic_int inflight;     /* sequences (prompts x n) admitted and not yet finished in the engine */
  atomic_int live_gens;    /* generation contexts alive (the engine may still call into them) */
  atomic_int stopping;     /* di_server_stop began: waits give up and cancel */
  atomic_int draining;     /* di_server_drain began: no new generation requests */
  atomic_int cancel_all;   /* the drain timed out: open requests are cancelled and answered */
  atomic_ullong next_seq;  /* request numbers for ids and log lines */
  uint64_t id_salt;
  di_srv_metrics metrics;
  struct di_srv_guard *guard; /* header deadlines (guard.c) */
};

/* ---- one HTTP request ---- */

typedef struct di_srv_req {
  di_server *s;
  struct MHD_Connection *c;
  const char *method, *url;
  char *raw_url;     /* the request target as sent, before percent-decoding */
  const void *route; /* chosen when the headers arrived (routes.c) */
  di_srv_buf body;
  int started;       /* the headers-only first call has been seen */
  int too_large;
  int close;         /* answer with Connection: close (the body was not read) */
  struct di_srv_err *refused; /* decided on the headers; the body is discarded, then this answers */
  int probed;        /* a half-closed client was probed (di_srv_client_left) */
  size_t parse_bytes; /* allocated while parsing the body (di_srv_json_trim) */
  double t0;
  uint64_t seq;
  int status;        /* answered status (for the log and metrics) */
  di_srv_gen *gen;   /* generation requests: usage for the log line */
} di_srv_req;

extern const char di_srv_chat_page[]; /* chat_page.c */
extern const size_t di_srv_chat_page_len;
/* Queues resp (and drops the caller's reference), adding Connection: close when
 * the request asked for it or the server is draining. */
enum MHD_Result di_srv_queue(di_srv_req *r, unsigned status, struct MHD_Response *resp);
enum MHD_Result di_srv_reply(di_srv_req *r, int status, const char *ctype, const char *body,
                             size_t len);
enum MHD_Result di_srv_reply_json(di_srv_req *r, int status, json_t *body); /* steals body */
enum MHD_Result di_srv_reply_err(di_srv_req *r, const di_srv_err *e);
/* 1 when the client is gone. A FIN alone may be a half-close (the client
 * still reads): *probed records that a probe was sent to tell the two apart
 * (sse: the probe is an SSE comment appended to out; NULL: a 100 Continue
 * written to the socket, which HTTP/1.1 clients must skip). */
int di_srv_client_left(struct MHD_Connection *c, int *probed, di_srv_buf *sse_out);

/* ---- header deadlines (guard.c): a connection gets header_timeout seconds
 * from its accept, or from the end of its previous request plus the idle
 * timeout, to deliver complete request headers; past that its socket is shut
 * down, so slow-header clients cannot hold connection slots. ---- */
di_code di_srv_guard_start(di_server *s, di_status *st);
void di_srv_guard_stop(di_server *s);
void di_srv_guard_notify(void *cls, struct MHD_Connection *c, void **socket_ctx,
                         enum MHD_ConnectionNotificationCode code);
/* State changes of one connection: headers complete, request finished. */
void di_srv_guard_headers_done(di_server *s, struct MHD_Connection *c);
void di_srv_guard_request_done(di_server *s, struct MHD_Connection *c);
void di_srv_guard_drain(di_server *s); /* close idle kept-alive connections, now and from now on */
/* Cancels g from the watchdog thread (the engine callback that finds a
 * stream's buffer full must not call into the engine); holds a reference. */
void di_srv_guard_cancel_later(di_server *s, di_srv_gen *g);
/* The same for a stream paused because its buffer is full: the watchdog
 * pauses it in the engine, and cancels it if it is still paused after
 * --stream-stall-timeout; holds a reference. */
void di_srv_guard_pause_later(di_server *s, di_srv_gen *g);

/* ---- routes ---- */
/* On the headers alone: the route, its method, authentication, readiness.
 * false with e filled when the request is refused before its body. */
bool di_srv_route_begin(di_srv_req *r, di_srv_err *e);
/* Bounded JSON parsing (routes.c): installs jansson allocators that count
 * against a per-request budget while a body is parsed. */
void di_srv_json_limits_init(void);
void di_srv_json_trim(di_srv_req *r);
/* Once the body is complete: parse it and run the handler. */
enum MHD_Result di_srv_route(di_srv_req *r);
/* Copies client bytes for an error message: printable ASCII kept, the rest %XX. */
void di_srv_quote(char *dst, size_t cap, const char *src, size_t max_in);
enum MHD_Result di_srv_handle_chat(di_srv_req *r, json_t *body);
enum MHD_Result di_srv_handle_completions(di_srv_req *r, json_t *body);

/* ---- generation: one HTTP request's engine submissions and their events ---- */
typedef enum di_srv_kind { DI_SRV_CHAT, DI_SRV_COMPLETION } di_srv_kind;

typedef struct di_srv_evt {
  struct di_srv_evt *next;
  int choice; /* sub * n_per + event index */
  int32_t token;
  char *text;
  size_t text_len;
  float logprob;
  int n_top;
  int32_t *top_ids;
  float *top_logprobs;
  di_finish finish;
  char *error;
  size_t bytes; /* counted in the generation's queued_bytes */
} di_srv_evt;

typedef struct di_srv_choice {
  di_srv_buf text, reasoning;
  json_t *logprobs; /* chat: array of entries; completions: object of arrays */
  size_t text_offset;
  di_finish finish;
  int completion_tokens, reasoning_tokens;
  di_srv_think think;
  char *error;
  int started;   /* completions: the echo was sent */
  int cb_tokens; /* tokens seen by the engine callback (metrics, under g->mu) */
  int spec_drafted, spec_accepted; /* from the final event (under g->mu) */
  struct di_srv_toolparse *tp; /* chat with tools: content goes through the tool-call parser */
  json_t *tool_calls;          /* parsed calls (whole answers) */
  int n_tool_calls;
} di_srv_choice;

typedef struct di_srv_sub {
  di_srv_gen *g;
  int k;
  uint64_t id;
  int submitted, n_done, n_tokens;
  int prompt_tokens, cached_tokens, replayed_tokens;
  int32_t *prompt_ids;
  size_t n_prompt;
  int max_tokens;
  char *echo; /* completions with echo: the prompt text */
  di_gmatcher *matcher; /* structured output: constrains this sub's one completion */
  struct di_srv_toolcon *toolcon; /* or tool calls do (server/toolcon.h) */
  int fork;             /* with a matcher: which of the request's n completions this is */
} di_srv_sub;

struct di_srv_gen {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int refs;
  di_server *s;
  struct MHD_Connection *c;
  di_srv_kind kind;
  char id[48];
  long created;
  int stream, include_usage, logprobs, top_logprobs, think_open;
  int n_subs, n_per, n_choices;
  di_srv_sub *subs;
  di_srv_choice *choices;
  di_request_params params; /* shared template; prompt set per sub */
  char **stops;
  int n_stops;
  int32_t *bias_ids;
  float *bias_vals;
  di_srv_evt *head, *tail;
  int max_tokens;    /* requested; 0 = up to the context */
  int n_final;       /* choices whose last event was applied */
  int lost;          /* an event could not be stored: answer an error, never hang */
  int engine_live;   /* subs the engine still holds (admission accounting) */
  double t_start, t_submit, t_first, t_last_out;
  double queue_s; /* engine queue time of the request (submission to first scheduling); -1 unknown */
  int cancelled, first_token_seen, sent_done;
  int probed; /* a FIN was seen and a keep-alive comment sent to test the client */
  int shutdown; /* cancelled by the server's drain (answers say so) */
  size_t queued_bytes; /* events waiting for the HTTP thread (under mu) */
  int overflow;        /* the client stopped reading: cancelled, later tokens dropped (under mu) */
  int paused;          /* the client stopped reading: paused until it drains half the buffer (under mu) */
  double paused_at;    /* monotonic seconds (under mu) */
  pthread_mutex_t pause_mu; /* serializes telling the engine (di_srv_gen_sync_pause) */
  int engine_paused;   /* what the engine was last told (under pause_mu) */
  di_srv_buf out;    /* SSE bytes not yet handed to MHD */
  size_t out_off;
};

/* Tells the engine whether g is paused, if that changed (any thread but the
 * engine's callback). */
void di_srv_gen_sync_pause(di_srv_gen *g);
/* A paused stream: 0 no longer paused (resumed, cancelled or done), 1 still
 * paused, 2 paused for more than stall_s seconds. */
int di_srv_gen_pause_state(di_srv_gen *g, double now, double stall_s);
/* Cancels a stream whose client stopped reading (it ends with stream_stalled). */
void di_srv_gen_stall(di_srv_gen *g);
di_srv_gen *di_srv_gen_new(di_srv_req *r, di_srv_kind kind, int n_subs, int n_per);
void di_srv_gen_unref(di_srv_gen *g);
/* Parses the sampling/stop/limit fields shared by chat and completions into
 * g->params (storage owned by g). */
bool di_srv_parse_sampling(json_t *body, di_srv_gen *g, di_srv_err *e);
/* 404 when the body names a model this server does not serve. */
bool di_srv_check_model(di_server *s, json_t *body, di_srv_err *e);
/* Checks the prompt against the context and sets the sub's max_tokens. */
bool di_srv_check_context(di_srv_gen *g, di_srv_sub *sub, di_srv_err *e);
/* Structured output (and forced tool calls): gives every sub a matcher of
 * c's grammar (forks of one). Subs of a constrained request carry one
 * completion each: the engine runs a constraint with n = 1. */
bool di_srv_gen_constrain(di_srv_gen *g, const di_srv_constraint *c, di_srv_err *e);
/* Sub k repeats sub from's prompt as completion k - from of it (n > 1 under a constraint). */
bool di_srv_sub_copy_prompt(di_srv_gen *g, int k, int from, di_srv_err *e);
/* Admits and submits every sub; on failure cancels what was submitted. */
bool di_srv_gen_submit(di_srv_gen *g, di_srv_err *e);
void di_srv_gen_cancel(di_srv_gen *g);
/* Waits up to ms for the next event; NULL on timeout. */
di_srv_evt *di_srv_gen_pop(di_srv_gen *g, int ms);
void di_srv_evt_free(di_srv_evt *v);
/* Applies an event to its choice; when streaming, appends SSE to g->out. */
void di_srv_gen_apply(di_srv_gen *g, di_srv_evt *v);
int di_srv_gen_done(di_srv_gen *g);
/* Usage object of everything applied so far. */
json_t *di_srv_gen_usage(di_srv_gen *g);
/* Blocks until every choice finished (or the client left) and answers. */
enum MHD_Result di_srv_gen_answer(di_srv_req *r, di_srv_gen *g);
const char *di_srv_finish_name(di_finish f);

/* SSE: appends "data: <json>\n\n" (steals j). */
void di_srv_sse_put(di_srv_gen *g, json_t *j);
enum MHD_Result di_srv_stream_start(di_srv_req *r, di_srv_gen *g);

/* Endpoint formatters (chat.c, completions.c). */
void di_srv_chat_apply(di_srv_gen *g, di_srv_choice *ch, int idx, const di_srv_evt *v);
json_t *di_srv_chat_result(di_srv_gen *g);
void di_srv_chat_stream_open(di_srv_gen *g);
void di_srv_cmpl_apply(di_srv_gen *g, di_srv_choice *ch, int idx, const di_srv_evt *v);
json_t *di_srv_cmpl_result(di_srv_gen *g);
/* {"token","logprob","bytes"} with invalid UTF-8 replaced in "token". */
json_t *di_srv_token_json(di_server *s, int32_t id, float logprob);
/* The token's text, valid UTF-8 (replacement characters where needed). */
json_t *di_srv_token_str(di_server *s, int32_t id);

#endif
