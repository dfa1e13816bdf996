/* OpenAI request bodies, read one way for `deepinfer serve` and `deepinfer
 * batch`: errors in OpenAI's shape, field getters, the sampling/limit fields
 * chat and completions share, and chat message validation. Nothing here
 * needs an HTTP connection. */
#ifndef DI_SERVER_OAI_H
#define DI_SERVER_OAI_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "deepinfer.h"
#include "grammar/grammar.h"
#include "server/server.h"

/* ---- errors in OpenAI's shape ---- */
typedef struct di_srv_err {
  int status;       /* HTTP status */
  const char *type; /* "invalid_request_error", ... */
  const char *code; /* may be NULL */
  char param[96];   /* "" = null */
  char msg[512];
  int retry_after;  /* seconds, 0 = no header */
} di_srv_err;

/* Fills e (status 400 unless said) and returns false, so validators can
 * `return di_srv_bad(e, "temperature", "...")`. */
bool di_srv_bad(di_srv_err *e, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
bool di_srv_fail(di_srv_err *e, int status, const char *type, const char *code, const char *fmt,
                 ...) __attribute__((format(printf, 5, 6)));
json_t *di_srv_err_json(const di_srv_err *e);

/* Returns the offset of the first invalid UTF-8 byte, or (size_t)-1 if valid. */
size_t di_srv_utf8_invalid_at(const char *s, size_t n);

/* ---- JSON field validation. Each getter leaves *out untouched when the key
 * is absent or null, and fails with the parameter's name when the type or
 * range is wrong. ---- */
bool di_srv_get_num(json_t *o, const char *key, double lo, double hi, double *out, di_srv_err *e);
bool di_srv_get_int(json_t *o, const char *key, long long lo, long long hi, long long *out,
                    di_srv_err *e);
bool di_srv_get_bool(json_t *o, const char *key, int *out, di_srv_err *e);
bool di_srv_get_str(json_t *o, const char *key, const char **out, di_srv_err *e);

/* ---- the fields chat and completions share ---- */
/* 404 model_not_found when body.model is given and is not `served`. */
bool di_srv_model_ok(json_t *body, const char *served, di_srv_err *e);

typedef struct di_srv_sampling {
  di_request_params params; /* default it first; stop and logit_bias point into the arrays below */
  char **stops;
  int n_stops;
  int32_t *bias_ids;
  float *bias_vals;
  int max_tokens; /* requested; 0 = up to the context */
  int stream, include_usage;
} di_srv_sampling;
/* Sampling, stop strings, logit bias (ids below n_vocab), max_tokens, stream
 * options. On failure the arrays may be partly filled: free them either way. */
bool di_srv_sampling_parse(json_t *body, int n_vocab, di_srv_sampling *q, di_srv_err *e);
void di_srv_sampling_free(di_srv_sampling *q);
/* The prompt against the context: *max_tokens = the completion budget. param
 * names the prompt's field in errors. */
bool di_srv_context_fits(long long ctx, long long n_prompt, long long want, const char *param, int *max_tokens,
                         di_srv_err *e);

/* ---- chat bodies ---- */
typedef enum di_srv_tool_mode { DI_TOOLS_NONE = 0, DI_TOOLS_AUTO, DI_TOOLS_REQUIRED, DI_TOOLS_NAMED } di_srv_tool_mode;

typedef struct di_srv_tool_choice {
  di_srv_tool_mode mode; /* none when there are no tools */
  const char *name;      /* DI_TOOLS_NAMED: borrowed from the body */
  int parallel;          /* parallel_tool_calls */
} di_srv_tool_choice;

typedef struct di_srv_chat_req {
  int n;            /* completions, 1..128 */
  int logprobs, top_logprobs;
  int prefix;       /* DeepSeek prefix completion of the last (assistant) message */
  json_t *messages; /* borrowed from the body, validated and normalized in place */
  json_t *tools;    /* borrowed; NULL when absent */
  di_srv_tool_choice tool_choice;
} di_srv_chat_req;
/* Validates n, logprobs, tools, tool_choice, response_format and messages. */
bool di_srv_chat_parse(json_t *body, di_srv_chat_req *q, di_srv_err *e);

/* ---- structured output: response_format, grammar, regex (and tools) ---- */
typedef struct di_srv_constraint {
  int on;
  di_grammar_kind kind;
  char *src; /* owned: the schema as JSON text, the GBNF or the regex */
  size_t len;
  di_grammar_opts opts;
  char param[40]; /* the field that asked for it, named in compile errors */
} di_srv_constraint;
/* Reads response_format ({"type":"text"|"json_object"|"json_schema"}), the
 * extension fields grammar (GBNF) and regex, and json_whitespace (free,
 * compact, python). More than one constraint at once is a 400. */
bool di_srv_constraint_parse(json_t *body, di_srv_constraint *c, di_srv_err *e);
void di_srv_constraint_free(di_srv_constraint *c);
/* Compiles c for the backend's tokenizer and makes a matcher; a compile
 * error is a 400 naming c->param and the keyword at fault. */
bool di_srv_constraint_matcher(const di_srv_backend *be, const di_srv_constraint *c, di_gmatcher **out,
                               di_srv_err *e);

#endif
