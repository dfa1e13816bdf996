/* deepinfer batch: offline OpenAI Batch API runner. Each input line is
 * {"custom_id", "method": "POST", "url": "/v1/completions", "body": {...}};
 * each output line (in input order) is
 * {"id", "custom_id", "response": {"status_code": 200, "body": <completion>}, "error": null}
 * or, for a line that cannot run, {"id", "custom_id", "response": null,
 * "error": {"code", "message", "param"}}. Every input line (blank ones too)
 * gets exactly one output line. Bodies are read by the server's own parsers
 * (server/oai.h: the same fields, limits and messages) and chat messages are
 * rendered by the server's backend. A bad line never stops the run. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "cli/engine_opts.h"
#include "recipe/chat.h"
#include "server/engine_backend.h"
#include "server/oai.h"
#include "server/toolcon.h"
#include "server/tools.h"
#include "tokenizer/tokenizer.h"

static const char *usage =
    "usage: deepinfer batch -m MODEL -i requests.jsonl -o results.jsonl [options]\n"
    "\n"
    "Runs OpenAI Batch API request lines (/v1/completions with a text or token-id\n"
    "prompt) through the serving engine and writes one result line per input line,\n"
    "in input order. Progress goes to stderr.\n"
    "\n"
    "  -i, --input PATH         request lines (JSONL)\n"
    "  -o, --output PATH        result lines (JSONL)\n"
    "      --concurrency N      requests in flight (default 16; also the engine's max-seqs)\n"
    "      --stats-json PATH    write the engine's final counters as JSON\n"
    "      --served-model-name NAME  the model id lines may name (default: the file name)\n"
    "  -q, --quiet              no progress lines\n" DI_CLI_ENGINE_OPTS_HELP
    "  -h, --help               this help\n"
    "\n"
    "Bodies are read exactly as `deepinfer serve` reads them (same fields, limits and\n"
    "errors; max_tokens defaults to the rest of the context), plus return_token_ids\n"
    "and priority; one prompt per completions line; no streaming. Every input line\n"
    "gets one output line: blank lines, unknown models and missing or repeated\n"
    "custom_id values are per-line errors.\n";

typedef struct choice {
  char *text;
  size_t len, cap;
  json_t *ids;               /* token ids (return_token_ids) */
  json_t *lp_tokens, *lp_values, *lp_top;
  di_finish finish;
  const char *error;
  int completion_tokens;
} choice;

typedef struct job {
  int line;
  json_t *custom_id;
  int n, n_done;
  choice *ch;
  bool want_ids;
  int logprobs;              /* -1 = none */
  bool chat;                 /* /v1/chat/completions */
  int prompt_tokens, cached_tokens, replayed_tokens;
  const di_tokenizer *tok;
  char *result;              /* output line when finished */
  di_gmatcher *matcher;      /* response_format / grammar / regex / forced tool calls (n = 1) */
  di_srv_toolcon *toolcon;   /* or tool calls constrained token by token (n = 1) */
  const di_srv_toolfmt *fmt; /* chat with tools: the format replies' calls are parsed in */
  struct batch *b;
} job;

typedef struct batch {
  const char *model_name;
  di_srv_engine x;           /* tokenizer and chat template, as the server holds them */
  di_srv_backend be;
  bool attached;
  int n_ctx, n_vocab;
  json_t *seen;              /* custom_id -> first line number */
  char **results;            /* [n_lines] pending output lines */
  int n_done, n_errors;
  int jobs_finished;         /* submitted requests that finished */
  long long tokens;
} batch;

static void text_append(choice *c, const char *s, size_t n) {
  if (c->len + n + 1 > c->cap) {
    size_t cap = (c->len + n + 1) * 2;
    char *p = realloc(c->text, cap);
    if (!p) return;
    c->text = p;
    c->cap = cap;
  }
  memcpy(c->text + c->len, s, n);
  c->len += n;
  c->text[c->len] = 0;
}

/* JSON string of possibly invalid UTF-8 (a byte-fallback token can split a
 * character at a length limit): invalid bytes become U+FFFD. */
static json_t *json_text(const char *s, size_t n) {
  json_t *j = json_stringn(s, n);
  if (j) return j;
  char *o = malloc(n * 3 + 1);
  size_t k = 0, bad = 0;
  while (n > 0) {
    if (di_utf8_valid(s, n, &bad)) bad = n;
    memcpy(o + k, s, bad);
    k += bad;
    if (bad == n) break;
    memcpy(o + k, "\xEF\xBF\xBD", 3);
    k += 3;
    s += bad + 1;
    n -= bad + 1;
  }
  j = json_stringn(o, k);
  free(o);
  return j ? j : json_string("");
}

/* A chat reply with tools, parsed as the server parses it (server/tool_parse.c):
 * c's text becomes its content, *calls OpenAI's tool_calls (NULL: none). */
typedef struct tool_sink {
  di_srv_buf text;
  json_t *calls;
  char id[48];
} tool_sink;

static void ts_text(void *u, const char *s, size_t n) { di_srv_buf_put(&((tool_sink *)u)->text, s, n); }

static void ts_call(void *u, int index, const char *name) {
  tool_sink *k = u;
  char id[64];
  snprintf(id, sizeof id, "%s_%d", k->id, index);
  if (!k->calls) k->calls = json_array();
  json_array_append_new(k->calls, json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", id, "type", "function", "function", "name",
                                            name, "arguments", ""));
}

static void ts_args(void *u, int index, const char *s, size_t n) {
  json_t *fn = json_object_get(json_array_get(((tool_sink *)u)->calls, (size_t)index), "function");
  const char *was = json_string_value(json_object_get(fn, "arguments"));
  if (!was) return;
  di_srv_buf joined = {0};
  di_srv_buf_puts(&joined, was);
  di_srv_buf_put(&joined, s, n);
  if (!joined.oom) json_object_set_new(fn, "arguments", json_stringn(joined.p, joined.len));
  di_srv_buf_free(&joined);
}

static void tool_calls(const job *j, int i, choice *c, json_t **calls) {
  tool_sink k = {0};
  snprintf(k.id, sizeof k.id, "call_batch_%d_%d", j->line + 1, i);
  di_srv_toolparse p;
  di_srv_toolparse_init(&p, j->fmt);
  di_srv_toolsink sink = {&k, ts_text, ts_call, ts_args};
  di_srv_toolparse_feed(&p, c->text ? c->text : "", c->len, 1, &sink);
  di_srv_toolparse_free(&p);
  if (k.text.oom) {
    di_srv_buf_free(&k.text);
    json_decref(k.calls);
    return; /* the reply stays as it was */
  }
  free(c->text);
  c->text = k.text.p;
  c->len = c->cap = k.text.len;
  *calls = k.calls;
}

static const char *finish_name(di_finish f) {
  switch (f) {
  case DI_FINISH_STOP: return "stop";
  case DI_FINISH_LENGTH: return "length";
  case DI_FINISH_CANCELLED: return "cancelled";
  case DI_FINISH_ERROR: return "error";
  default: return "none";
  }
}

static char *error_line(int line, json_t *custom_id, const char *code, const char *msg, const char *param) {
  char id[32];
  snprintf(id, sizeof id, "batch_req_%d", line + 1);
  json_t *o = json_pack("{s:s, s:O?, s:n, s:{s:s, s:s, s:s?}}", "id", id, "custom_id", custom_id, "response", "error",
                        "code", code, "message", msg, "param", param && *param ? param : NULL);
  char *s = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  return s;
}

static void job_finish(job *j) {
  batch *b = j->b;
  json_t *choices = json_array();
  int completion = 0;
  const char *err = NULL;
  for (int i = 0; i < j->n; i++) {
    choice *c = &j->ch[i];
    if (c->finish == DI_FINISH_ERROR) err = c->error ? c->error : "engine error";
    completion += c->completion_tokens;
    json_t *lp = json_null();
    if (j->logprobs >= 0)
      lp = json_pack("{s:O, s:O, s:O}", "tokens", c->lp_tokens, "token_logprobs", c->lp_values, "top_logprobs",
                     j->logprobs > 0 ? c->lp_top : json_null());
    json_t *calls = NULL;
    if (j->fmt) tool_calls(j, i, c, &calls);
    json_t *text = calls && !c->len ? json_null() : json_text(c->text ? c->text : "", c->len);
    json_t *ch = j->chat ? json_pack("{s:i, s:{s:s, s:o}, s:o, s:s}", "index", i, "message", "role", "assistant",
                                     "content", text, "logprobs", lp, "finish_reason",
                                     calls && c->finish == DI_FINISH_STOP ? "tool_calls" : finish_name(c->finish))
                         : json_pack("{s:i, s:o, s:o, s:s}", "index", i, "text", text, "logprobs", lp,
                                     "finish_reason", finish_name(c->finish));
    if (calls) json_object_set_new(json_object_get(ch, "message"), "tool_calls", calls);
    if (j->want_ids) json_object_set(ch, "token_ids", c->ids);
    json_array_append_new(choices, ch);
  }
  char id[32];
  snprintf(id, sizeof id, "batch_req_%d", j->line + 1);
  if (err) {
    j->result = error_line(j->line, j->custom_id, "engine_error", err, NULL);
    b->n_errors++;
  } else {
    json_t *body = json_pack(
        "{s:s, s:s, s:I, s:s, s:o, s:{s:i, s:i, s:i, s:i, s:i, s:{s:i, s:i}}}", "id", id, "object", j->chat ? "chat.completion" : "text_completion", "created",
        (json_int_t)time(NULL), "model", b->model_name, "choices", choices, "usage", "prompt_tokens", j->prompt_tokens,
        "completion_tokens", completion, "total_tokens", j->prompt_tokens + completion, "prompt_cache_hit_tokens",
        j->cached_tokens, "prompt_cache_miss_tokens", j->prompt_tokens - j->cached_tokens, "prompt_tokens_details",
        "cached_tokens", j->cached_tokens, "replayed_tokens", j->replayed_tokens);
    choices = NULL;
    json_t *o = json_pack("{s:s, s:O?, s:{s:i, s:s, s:o}, s:n}", "id", id, "custom_id", j->custom_id, "response",
                          "status_code", 200, "request_id", id, "body", body, "error");
    j->result = json_dumps(o, JSON_COMPACT);
    json_decref(o);
  }
  json_decref(choices);
  b->results[j->line] = j->result;
  b->n_done++;
  b->jobs_finished++;
  b->tokens += completion;
}

static void job_free(job *j) {
  for (int i = 0; i < j->n; i++) {
    free(j->ch[i].text);
    free((char *)j->ch[i].error);
    json_decref(j->ch[i].ids);
    json_decref(j->ch[i].lp_tokens);
    json_decref(j->ch[i].lp_values);
    json_decref(j->ch[i].lp_top);
  }
  free(j->ch);
  di_gmatcher_free(j->matcher);
  di_srv_toolcon_free(j->toolcon);
  json_decref(j->custom_id);
  free(j);
}

/* A token's own bytes ("▁the" -> " the"), as OpenAI's logprobs show them. */
static json_t *token_string(const di_tokenizer *t, int32_t id) {
  size_t n = 0;
  const char *s = t ? di_tokenizer_token_bytes(t, id, &n) : NULL;
  return s ? json_text(s, n) : json_string("");
}

static void on_event(const di_event *ev, void *user) {
  job *j = user;
  choice *c = &j->ch[ev->index];
  if (ev->text_len) text_append(c, ev->text, ev->text_len);
  if (ev->token >= 0) {
    if (j->want_ids) json_array_append_new(c->ids, json_integer(ev->token));
    if (j->logprobs >= 0) {
      json_array_append_new(c->lp_tokens, token_string(j->tok, ev->token));
      json_array_append_new(c->lp_values, json_real(ev->logprob));
      if (j->logprobs > 0) {
        json_t *top = json_object();
        for (int k = 0; k < ev->n_top; k++) {
          json_t *key = token_string(j->tok, ev->top_ids[k]);
          json_object_set_new(top, json_string_value(key), json_real(ev->top_logprobs[k]));
          json_decref(key);
        }
        json_array_append_new(c->lp_top, top);
      }
    }
  }
  if (ev->finish == DI_FINISH_NONE) return;
  c->finish = ev->finish;
  c->error = ev->error ? strdup(ev->error) : NULL;
  c->completion_tokens = ev->completion_tokens;
  j->prompt_tokens = ev->prompt_tokens;
  j->cached_tokens = ev->cached_tokens;
  j->replayed_tokens = ev->replayed_tokens;
  if (++j->n_done == j->n) job_finish(j);
}

/* The prompt of a completions line: a string (tokenized as the server does)
 * or one array of token ids. */
static bool line_prompt(batch *b, json_t *body, int32_t **ids, size_t *n, di_srv_err *e) {
  json_t *prompt = json_object_get(body, "prompt");
  if (json_is_array(prompt) && json_array_size(prompt) == 1 && json_is_string(json_array_get(prompt, 0)))
    prompt = json_array_get(prompt, 0);
  if (json_is_string(prompt)) {
    di_status st = {0};
    if (!b->attached) return di_srv_bad(e, "prompt", "this model has no tokenizer; send token ids");
    /* The server's rule (docs/SECURITY.md): prompt text is text; special
     * tokens only as token ids. */
    if (b->be.tokenize(b->be.ctx, json_string_value(prompt), json_string_length(prompt), 1, 0, ids, n, &st))
      return di_srv_bad(e, "prompt", "%s", st.msg);
    return true;
  }
  if (json_is_array(prompt) && json_array_size(prompt) > 0 && json_is_integer(json_array_get(prompt, 0))) {
    size_t k = json_array_size(prompt);
    *ids = malloc(k * sizeof **ids);
    if (!*ids) return di_srv_fail(e, 500, "server_error", NULL, "out of memory");
    for (size_t i = 0; i < k; i++) {
      json_t *v = json_array_get(prompt, i);
      if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= b->n_vocab)
        return di_srv_bad(e, "prompt", "prompt[%zu] is not a token id in [0, %d)", i, b->n_vocab);
      (*ids)[i] = (int32_t)json_integer_value(v);
    }
    *n = k;
    return true;
  }
  if (json_is_array(prompt) && json_array_size(prompt) > 1)
    return di_srv_bad(e, "prompt", "one prompt per batch line (split arrays of prompts into lines)");
  return di_srv_bad(e, "prompt", "'prompt' must be a string or an array of token ids");
}

/* Forced calls (a grammar, or server/toolcon.c) and strict tools in auto
 * mode, one completion per line. */
static bool batch_tools(batch *b, job *j, json_t *body, const di_srv_chat_req *cq, int think_open, di_srv_err *e) {
  bool forced = cq->tool_choice.mode == DI_TOOLS_REQUIRED || cq->tool_choice.mode == DI_TOOLS_NAMED;
  bool tc = di_srv_toolcon_wanted(cq->tools, &cq->tool_choice, j->fmt);
  if ((forced || tc) && cq->n > 1)
    return di_srv_bad(e, "n", "'n' > 1 with constrained tool calls is not supported in batch mode (send one line per "
                              "completion)");
  if (forced && (json_object_get(body, "response_format") || json_object_get(body, "grammar") ||
                 json_object_get(body, "regex")))
    return di_srv_bad(e, "tool_choice", "a forced tool call cannot be combined with response_format, grammar or regex");
  if (tc) return di_srv_toolcon_new(&b->be, cq->tools, &cq->tool_choice, j->fmt, think_open, &j->toolcon, e);
  di_srv_constraint con;
  bool ok = di_srv_tools_constraint(cq->tools, &cq->tool_choice, j->fmt, &con, e);
  if (ok && con.on) ok = di_srv_constraint_matcher(&b->be, &con, &j->matcher, e);
  di_srv_constraint_free(&con);
  return ok;
}

/* A body into a submitted request: the server's checks, then the engine. */
static bool submit_body(di_engine *eng, batch *b, job *j, json_t *body, di_srv_err *e) {
  di_srv_sampling q = {0};
  di_request_params_default(&q.params);
  int32_t *ids = NULL;
  size_t n_ids = 0;
  long long n = 1, logprobs = -1;
  int flag = 0;
  bool ok = di_srv_model_ok(body, b->model_name, e);
  if (ok && j->chat) {
    di_srv_chat_req cq;
    int think_open = 0;
    di_status st = {0};
    ok = di_srv_chat_parse(body, &cq, e);
    if (ok && cq.logprobs) ok = di_srv_bad(e, "logprobs", "logprobs on chat lines are not supported in batch mode yet");
    if (ok && !b->attached) ok = di_srv_bad(e, "messages", "this model has no tokenizer");
    (void)st;
    if (ok) ok = di_srv_tools_render(&b->be, &cq, &ids, &n_ids, &think_open, &j->fmt, e);
    n = cq.n;
    /* tool calls constrained as the server constrains them */
    if (ok && j->fmt) ok = batch_tools(b, j, body, &cq, think_open, e);
  } else if (ok) {
    ok = di_srv_get_int(body, "n", 1, 128, &n, e) && di_srv_get_int(body, "logprobs", 0, 20, &logprobs, e) &&
         di_srv_get_bool(body, "echo", &flag, e);
    if (ok && flag) ok = di_srv_bad(e, "echo", "'echo' is not supported in batch mode");
    long long best_of = 0;
    if (ok && !di_srv_get_int(body, "best_of", 1, 128, &best_of, e)) ok = false;
    if (ok && best_of && best_of != n) ok = di_srv_bad(e, "best_of", "'best_of' different from 'n' is not supported");
    if (ok) ok = line_prompt(b, body, &ids, &n_ids, e);
  }
  di_srv_constraint con = {0};
  if (ok) ok = di_srv_constraint_parse(body, &con, e);
  if (ok && con.on && j->toolcon)
    ok = di_srv_bad(e, "tools", "strict tools under tool_choice auto cannot be combined with '%s'", con.param);
  if (ok && con.on && n > 1)
    ok = di_srv_bad(e, "n", "'n' > 1 with '%s' is not supported in batch mode (send one line per completion)", con.param);
  if (ok && con.on) ok = di_srv_constraint_matcher(&b->be, &con, &j->matcher, e);
  di_srv_constraint_free(&con);
  if (ok) ok = di_srv_sampling_parse(body, b->n_vocab, &q, e);
  if (ok && q.stream) ok = di_srv_bad(e, "stream", "'stream' is not supported in batch mode");
  flag = 0;
  if (ok && !di_srv_get_bool(body, "return_token_ids", &flag, e)) ok = false;
  long long priority = 0;
  if (ok && !di_srv_get_int(body, "priority", -1000000, 1000000, &priority, e)) ok = false;
  int max_tokens = 0;
  if (ok) ok = di_srv_context_fits(b->n_ctx, (long long)n_ids, q.max_tokens, j->chat ? "messages" : "prompt",
                                   &max_tokens, e);
  if (ok) {
    j->want_ids = flag;
    j->logprobs = (int)logprobs;
    j->n = (int)n;
    j->ch = calloc((size_t)j->n, sizeof *j->ch);
    if (!j->ch) ok = di_srv_fail(e, 500, "server_error", NULL, "out of memory");
    for (int i = 0; ok && i < j->n; i++) {
      j->ch[i].ids = json_array();
      j->ch[i].lp_tokens = json_array();
      j->ch[i].lp_values = json_array();
      j->ch[i].lp_top = json_array();
    }
  }
  if (ok) {
    di_request_params p = q.params;
    p.prompt_ids = ids;
    p.n_prompt = n_ids;
    p.max_tokens = max_tokens;
    p.n = j->n;
    p.priority = (int)priority;
    p.logprobs = logprobs >= 0;
    p.top_logprobs = logprobs > 0 ? (int)logprobs : 0;
    p.cb = on_event;
    p.user = j;
    char eerr[512];
    di_code rc;
    if (j->toolcon) {
      di_srv_tokcon tc;
      di_srv_toolcon_bind(j->toolcon, &tc);
      rc = b->be.submit_tokcon(b->be.ctx, &p, &tc, NULL, eerr, sizeof eerr);
    } else {
      rc = di_srv_submit_matcher(eng, &p, j->matcher, NULL, eerr, sizeof eerr);
    }
    if (rc != DI_OK) ok = di_srv_bad(e, NULL, "%s", eerr);
  }
  free(ids);
  di_srv_sampling_free(&q);
  return ok;
}

/* Parses and submits one line; on failure stores an error result. */
static bool submit_line(di_engine *e, batch *b, int line, const char *text, job **out) {
  *out = NULL;
  json_error_t jerr;
  const char *p = text;
  while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\v' || *p == '\f') p++;
  json_t *root = *p ? json_loads(text, JSON_REJECT_DUPLICATES, &jerr) : NULL;
  di_srv_err err = {0};
  const char *code = "invalid_request";
  json_t *custom_id = NULL;
  bool ok = false;
  if (!*p) {
    snprintf(err.msg, sizeof err.msg, "line %d is empty: one request object per line", line + 1);
  } else if (!root || !json_is_object(root)) {
    snprintf(err.msg, sizeof err.msg, "line %d: not a JSON object%s%s", line + 1, root ? "" : ": ", root ? "" : jerr.text);
  } else {
    custom_id = json_object_get(root, "custom_id");
    const char *url = json_string_value(json_object_get(root, "url"));
    const char *method = json_string_value(json_object_get(root, "method"));
    json_t *body = json_object_get(root, "body");
    json_t *first = json_is_string(custom_id) ? json_object_get(b->seen, json_string_value(custom_id)) : NULL;
    if (!json_is_string(custom_id) || !json_string_length(custom_id)) {
      snprintf(err.msg, sizeof err.msg, "custom_id (a non-empty string) is required");
      snprintf(err.param, sizeof err.param, "custom_id");
    } else if (first) {
      snprintf(err.msg, sizeof err.msg, "duplicate custom_id '%.200s' (first on line %d)", json_string_value(custom_id),
               (int)json_integer_value(first));
      snprintf(err.param, sizeof err.param, "custom_id");
      code = "duplicate_custom_id";
    } else {
      json_object_set_new(b->seen, json_string_value(custom_id), json_integer(line + 1));
      if (method && strcmp(method, "POST")) snprintf(err.msg, sizeof err.msg, "method must be POST");
      else if (!url) snprintf(err.msg, sizeof err.msg, "missing url");
      else if (strcmp(url, "/v1/completions") && strcmp(url, "/v1/chat/completions"))
        snprintf(err.msg, sizeof err.msg, "url must be /v1/completions or /v1/chat/completions");
      else if (!json_is_object(body)) snprintf(err.msg, sizeof err.msg, "missing body object");
      else {
        job *j = calloc(1, sizeof *j);
        j->line = line;
        j->b = b;
        j->custom_id = json_incref(custom_id);
        j->logprobs = -1;
        j->tok = di_engine_tokenizer(e);
        j->chat = !strcmp(url, "/v1/chat/completions");
        if (submit_body(e, b, j, body, &err)) {
          *out = j;
          ok = true;
        } else {
          if (err.code) code = err.code;
          job_free(j);
        }
      }
    }
  }
  if (!ok) {
    b->results[line] = error_line(line, custom_id, code, err.msg, err.param);
    b->n_done++;
    b->n_errors++;
  }
  json_decref(root);
  return ok;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int write_stats(const char *path, di_engine *e, double secs, const batch *b) {
  di_engine_stats s;
  di_engine_stats_get(e, &s);
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  fprintf(f,
          "{\"requests\": %d, \"errors\": %d, \"seconds\": %.3f, \"completion_tokens\": %lld, \"preemptions\": %llu,\n"
          " \"prompt_tokens\": %llu, \"generated_tokens\": %llu, \"prefix_queries\": %llu, \"prefix_query_tokens\": %llu,\n"
          " \"prefix_hit_tokens\": %llu, \"steps\": %llu, \"batch_tokens\": %llu, \"kv_blocks_total\": %d,\n"
          " \"kv_blocks_used\": %d, \"kv_blocks_high_water\": %d, \"kv_block_size\": %d, \"kv_block_bytes\": %zu,\n"
          " \"kv_blocks_high_full\": %d, \"kv_blocks_high_window\": %d, \"kv_ckpt_blocks\": %d, \"swa_checkpoint\": %d,\n"
          " \"swa_replays\": %llu, \"swa_replay_tokens\": %llu, \"swa_replay_max\": %d,\n"
          " \"spec_drafted\": %llu, \"spec_accepted\": %llu, \"spec_verify_steps\": %llu, \"spec_fallbacks\": %llu,\n"
          " \"spec_mtp_forwards\": %llu, \"spec_mtp_rows\": %llu, \"spec_shadow_probes\": %llu}\n",
          b->n_done, b->n_errors, secs, b->tokens, (unsigned long long)s.preemptions,
          (unsigned long long)s.prompt_tokens, (unsigned long long)s.generated_tokens,
          (unsigned long long)s.prefix_queries, (unsigned long long)s.prefix_query_tokens,
          (unsigned long long)s.prefix_hit_tokens, (unsigned long long)s.steps, (unsigned long long)s.batch_tokens,
          s.kv_blocks_total, s.kv_blocks_used, s.kv_blocks_high_water, s.kv_block_size, s.kv_block_bytes,
          s.kv_blocks_high_full, s.kv_blocks_high_window, s.kv_ckpt_blocks, s.swa_checkpoint,
          (unsigned long long)s.swa_replays, (unsigned long long)s.swa_replay_tokens, s.swa_replay_max,
          (unsigned long long)s.spec_drafted, (unsigned long long)s.spec_accepted,
          (unsigned long long)s.spec_verify_steps, (unsigned long long)s.spec_fallbacks,
          (unsigned long long)s.spec_mtp_forwards, (unsigned long long)s.spec_mtp_rows,
          (unsigned long long)s.spec_shadow_probes);
  return fclose(f);
}

int di_cmd_batch(int argc, char **argv) {
  di_engine_opts o;
  di_engine_opts_default(&o);
  o.max_seqs = 0; /* 0 after parsing = not given: follows --concurrency */
  const char *in_path = NULL, *out_path = NULL, *stats_path = NULL, *served = NULL;
  long long conc = 16;
  bool quiet = false;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int r = di_cli_engine_opt("batch", argc, argv, &i, &o);
    if (r == 2) return 2;
    if (r == 1) continue;
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      fputs(usage, stdout);
      return 0;
    } else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
      quiet = true;
    } else if (!strcmp(a, "-i") || !strcmp(a, "--input") || !strcmp(a, "-o") || !strcmp(a, "--output") ||
               !strcmp(a, "--concurrency") || !strcmp(a, "--stats-json") || !strcmp(a, "--served-model-name")) {
      if (!v) return di_cli_fail("batch", "option %s needs a value", a);
      i++;
      if (!strcmp(a, "-i") || !strcmp(a, "--input")) in_path = v;
      else if (!strcmp(a, "-o") || !strcmp(a, "--output")) out_path = v;
      else if (!strcmp(a, "--stats-json")) stats_path = v;
      else if (!strcmp(a, "--served-model-name")) served = v;
      else if (!di_arg_int(v, 1, 4096, &conc)) return di_cli_fail("batch", "--concurrency: '%s' must be 1..4096", v);
    } else {
      return di_cli_fail("batch", "unknown option '%s' (see --help)", a);
    }
  }
  if (!o.model_path) return di_cli_fail("batch", "missing -m MODEL (see --help)");
  if (!in_path || !out_path) return di_cli_fail("batch", "need -i INPUT and -o OUTPUT (see --help)");
  if (!o.max_seqs) o.max_seqs = (int)conc;
  FILE *in = fopen(in_path, "r");
  if (!in) return di_cli_fail("batch", "cannot open %s", in_path);
  /* Lines are read up front: the output keeps their order. */
  char **lines = NULL, *buf = NULL;
  size_t cap = 0, n_lines = 0, lines_cap = 0;
  ssize_t got;
  while ((got = getline(&buf, &cap, in)) >= 0) {
    while (got > 0 && (buf[got - 1] == '\n' || buf[got - 1] == '\r')) buf[--got] = 0;
    if (n_lines == lines_cap) {
      lines_cap = lines_cap ? lines_cap * 2 : 256;
      lines = realloc(lines, lines_cap * sizeof *lines);
    }
    lines[n_lines++] = strdup(buf);
  }
  free(buf);
  fclose(in);
  char err[512];
  di_engine *e = NULL;
  int rc = 0;
  FILE *out = NULL;
  if (di_engine_create(&o, &e, err, sizeof err) != DI_OK) rc = di_cli_fail("batch", "%s", err);
  else if (!(out = fopen(out_path, "w"))) rc = di_cli_fail("batch", "cannot create %s", out_path);
  if (rc) {
    di_engine_destroy(e);
    for (size_t i = 0; i < n_lines; i++) free(lines[i]);
    free(lines);
    return rc;
  }
  batch b = {.model_name = o.model_path, .seen = json_object()};
  const char *slash = strrchr(o.model_path, '/');
  if (slash && slash[1]) b.model_name = slash + 1;
  if (served) b.model_name = served;
  di_status ast = {0};
  b.attached = di_srv_engine_attach(&b.x, e, &ast) == DI_OK;
  di_srv_engine_backend(&b.x, &b.be);
  b.be.n_vocab = di_engine_n_vocab(e); /* the masks tool-call constraints write */
  b.n_ctx = di_engine_ctx(e);
  b.n_vocab = di_engine_n_vocab(e);
  b.results = calloc(n_lines ? n_lines : 1, sizeof *b.results);
  job **jobs = calloc(n_lines ? n_lines : 1, sizeof *jobs);
  size_t next = 0, written = 0;
  int submitted = 0;
  double t0 = now_s(), last = t0;
  while (written < n_lines) {
    while (submitted - b.jobs_finished < conc && next < n_lines) {
      job *j = NULL;
      if (submit_line(e, &b, (int)next, lines[next], &j)) {
        jobs[next] = j;
        submitted++;
      }
      next++;
    }
    if (submitted > b.jobs_finished) di_engine_step(e);
    for (; written < n_lines && b.results[written]; written++) {
      fputs(b.results[written], out);
      fputc('\n', out);
      free(b.results[written]);
      if (jobs[written]) job_free(jobs[written]);
    }
    double t = now_s();
    if (!quiet && (t - last > 2 || written == n_lines)) {
      fprintf(stderr, "deepinfer batch: %zu/%zu done, %d errors, %lld tokens, %.1f tok/s\n", written, n_lines,
              b.n_errors, b.tokens, (double)b.tokens / (t - t0 > 1e-9 ? t - t0 : 1e-9));
      last = t;
    }
  }
  int ret = 0;
  if (fclose(out) != 0) ret = di_cli_fail("batch", "writing %s failed", out_path);
  if (stats_path && write_stats(stats_path, e, now_s() - t0, &b) != 0) ret = di_cli_fail("batch", "cannot write %s", stats_path);
  di_srv_engine_detach(&b.x);
  di_engine_destroy(e);
  json_decref(b.seen);
  for (size_t i = 0; i < n_lines; i++) free(lines[i]);
  free(lines);
  free(jobs);
  free(b.results);
  return ret;
}
