/* deepinfer batch: offline OpenAI Batch API runner. Each input line is
 * {"custom_id", "method": "POST", "url": "/v1/completions", "body": {...}};
 * each output line (in input order) is
 * {"id", "custom_id", "response": {"status_code": 200, "body": <completion>}, "error": null}
 * or, for a line that cannot run, {"id", "custom_id", "response": null,
 * "error": {"code", "message"}}. A bad line never stops the run. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "cli/engine_opts.h"
#include "recipe/chat.h"
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
    "  -q, --quiet              no progress lines\n" DI_CLI_ENGINE_OPTS_HELP
    "  -h, --help               this help\n"
    "\n"
    "Body fields: prompt (string or array of ids), max_tokens (16), temperature (1),\n"
    "top_p, n, stop (string or array), seed, frequency_penalty, presence_penalty,\n"
    "logit_bias, logprobs (0..20); extensions: top_k, min_p, repetition_penalty,\n"
    "ignore_eos, priority, return_token_ids.\n";

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
  int prompt_tokens, cached_tokens;
  const di_tokenizer *tok;
  char *result;              /* output line when finished */
  struct batch *b;
} job;

typedef struct batch {
  const char *model_name;
  char **results;            /* [n_lines] pending output lines */
  int n_done, n_errors;
  int jobs_finished;         /* submitted requests that finished */
  di_chat_template *tmpl;    /* compiled on the first chat line */
  char tmpl_err[600];
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

static const char *finish_name(di_finish f) {
  switch (f) {
  case DI_FINISH_STOP: return "stop";
  case DI_FINISH_LENGTH: return "length";
  case DI_FINISH_CANCELLED: return "cancelled";
  case DI_FINISH_ERROR: return "error";
  default: return "none";
  }
}

static char *error_line(int line, json_t *custom_id, const char *code, const char *msg) {
  char id[32];
  snprintf(id, sizeof id, "batch_req_%d", line + 1);
  json_t *o = json_pack("{s:s, s:O?, s:n, s:{s:s, s:s}}", "id", id, "custom_id", custom_id, "response", "error",
                        "code", code, "message", msg);
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
    json_t *text = json_text(c->text ? c->text : "", c->len);
    json_t *ch = j->chat ? json_pack("{s:i, s:{s:s, s:o}, s:o, s:s}", "index", i, "message", "role", "assistant",
                                     "content", text, "logprobs", lp, "finish_reason", finish_name(c->finish))
                         : json_pack("{s:i, s:o, s:o, s:s}", "index", i, "text", text, "logprobs", lp,
                                     "finish_reason", finish_name(c->finish));
    if (j->want_ids) json_object_set(ch, "token_ids", c->ids);
    json_array_append_new(choices, ch);
  }
  char id[32];
  snprintf(id, sizeof id, "batch_req_%d", j->line + 1);
  if (err) {
    j->result = error_line(j->line, j->custom_id, "engine_error", err);
    b->n_errors++;
  } else {
    json_t *body = json_pack(
        "{s:s, s:s, s:I, s:s, s:o, s:{s:i, s:i, s:i, s:i, s:i}}", "id", id, "object", j->chat ? "chat.completion" : "text_completion", "created",
        (json_int_t)time(NULL), "model", b->model_name, "choices", choices, "usage", "prompt_tokens", j->prompt_tokens,
        "completion_tokens", completion, "total_tokens", j->prompt_tokens + completion, "prompt_cache_hit_tokens",
        j->cached_tokens, "prompt_cache_miss_tokens", j->prompt_tokens - j->cached_tokens);
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
  if (++j->n_done == j->n) job_finish(j);
}

/* Fills p from an OpenAI completions body; returns an error message or NULL.
 * Arrays referenced by p live in `keep` (freed after submission). */
static const char *parse_body(json_t *body, di_request_params *p, job *j, json_t *keep, int32_t **ids_buf,
                              const char ***stops_buf, int32_t **bias_ids, float **bias_vals, char *msg, size_t msglen) {
  json_t *prompt = json_object_get(body, "prompt");
  if (json_is_array(prompt) && json_array_size(prompt) == 1 && json_is_string(json_array_get(prompt, 0)))
    prompt = json_array_get(prompt, 0);
  if (j->chat) {
    /* the caller rendered the messages into p->prompt_ids */
  } else if (json_is_string(prompt)) {
    p->prompt_text = json_string_value(prompt);
    p->prompt_text_len = json_string_length(prompt);
  } else if (json_is_array(prompt) && json_array_size(prompt) > 0 && json_is_integer(json_array_get(prompt, 0))) {
    size_t n = json_array_size(prompt);
    *ids_buf = malloc(n * sizeof **ids_buf);
    for (size_t i = 0; i < n; i++) {
      json_t *v = json_array_get(prompt, i);
      if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX) {
        snprintf(msg, msglen, "prompt[%zu] is not a token id", i);
        return msg;
      }
      (*ids_buf)[i] = (int32_t)json_integer_value(v);
    }
    p->prompt_ids = *ids_buf;
    p->n_prompt = n;
  } else if (json_is_array(prompt) && json_array_size(prompt) > 1) {
    return "one prompt per batch line (split arrays of prompts into lines)";
  } else {
    return "body.prompt must be a string or an array of token ids";
  }
  (void)keep;
  json_t *v;
#define NUM(key, dst, type)                                                            \
  if ((v = json_object_get(body, key)) && !json_is_null(v)) {                          \
    if (!json_is_number(v)) return "body." key " must be a number";                    \
    dst = (type)json_number_value(v);                                                  \
  }
  p->max_tokens = 16; /* OpenAI's default */
  p->sampling.temperature = 1.0f;
  NUM("max_tokens", p->max_tokens, int);
  NUM("max_completion_tokens", p->max_tokens, int);
  NUM("temperature", p->sampling.temperature, float);
  NUM("top_p", p->sampling.top_p, float);
  NUM("top_k", p->sampling.top_k, int);
  NUM("min_p", p->sampling.min_p, float);
  NUM("repetition_penalty", p->sampling.repetition_penalty, float);
  NUM("frequency_penalty", p->sampling.frequency_penalty, float);
  NUM("presence_penalty", p->sampling.presence_penalty, float);
  NUM("n", p->n, int);
  NUM("priority", p->priority, int);
  if ((v = json_object_get(body, "max_tokens")) && json_is_integer(v) && json_integer_value(v) == 0)
    return "body.max_tokens must be >= 1";
  if ((v = json_object_get(body, "seed")) && !json_is_null(v)) {
    if (!json_is_integer(v)) return "body.seed must be an integer";
    p->sampling.seed = (uint64_t)json_integer_value(v);
  }
  if ((v = json_object_get(body, "ignore_eos"))) p->ignore_eos = json_is_true(v);
  if ((v = json_object_get(body, "echo")) && json_is_true(v)) return "body.echo is not supported";
  if ((v = json_object_get(body, "best_of")) && json_is_integer(v) && json_integer_value(v) > 1)
    return "body.best_of is not supported";
  if (j->chat && (v = json_object_get(body, "logprobs")) && json_is_true(v))
    return "body.logprobs is not supported for chat lines in batch mode yet";
  if (!j->chat && (v = json_object_get(body, "logprobs")) && !json_is_null(v)) {
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 20)
      return "body.logprobs must be an integer in [0, 20]";
    j->logprobs = (int)json_integer_value(v);
    p->logprobs = 1;
    p->top_logprobs = j->logprobs;
  }
  j->want_ids = (v = json_object_get(body, "return_token_ids")) && json_is_true(v);
  json_t *stop = json_object_get(body, "stop");
  if (json_is_string(stop)) {
    *stops_buf = malloc(sizeof **stops_buf);
    (*stops_buf)[0] = json_string_value(stop);
    p->stop = *stops_buf;
    p->n_stop = 1;
  } else if (json_is_array(stop)) {
    size_t n = json_array_size(stop);
    *stops_buf = malloc((n ? n : 1) * sizeof **stops_buf);
    for (size_t i = 0; i < n; i++) {
      if (!json_is_string(json_array_get(stop, i))) return "body.stop must be a string or an array of strings";
      (*stops_buf)[i] = json_string_value(json_array_get(stop, i));
    }
    p->stop = *stops_buf;
    p->n_stop = (int)n;
  } else if (stop && !json_is_null(stop)) {
    return "body.stop must be a string or an array of strings";
  }
  json_t *bias = json_object_get(body, "logit_bias");
  if (json_is_object(bias)) {
    size_t n = json_object_size(bias), k = 0;
    *bias_ids = malloc((n ? n : 1) * sizeof **bias_ids);
    *bias_vals = malloc((n ? n : 1) * sizeof **bias_vals);
    const char *key;
    json_t *val;
    json_object_foreach(bias, key, val) {
      long long id;
      if (!di_arg_int(key, 0, INT32_MAX, &id) || !json_is_number(val)) return "body.logit_bias must map token ids to numbers";
      (*bias_ids)[k] = (int32_t)id;
      (*bias_vals)[k++] = (float)json_number_value(val);
    }
    p->sampling.n_logit_bias = (int)k;
    p->sampling.logit_bias_ids = *bias_ids;
    p->sampling.logit_bias_values = *bias_vals;
  } else if (bias && !json_is_null(bias)) {
    return "body.logit_bias must be an object";
  }
#undef NUM
  return NULL;
}

/* Renders body.messages with the model's chat template into prompt ids. */
static const char *render_chat(di_engine *e, batch *b, json_t *body, int32_t **ids, di_request_params *p, char *msg,
                               size_t msglen) {
  const di_tokenizer *tok = di_engine_tokenizer(e);
  if (!b->tmpl && !b->tmpl_err[0]) {
    const char *src = tok ? di_tokenizer_chat_template(tok, NULL) : NULL;
    di_status st = {0};
    if (!src) snprintf(b->tmpl_err, sizeof b->tmpl_err, "this model has no chat template; use /v1/completions");
    else if (di_chat_template_compile(src, strlen(src), &b->tmpl, &st) != DI_OK)
      snprintf(b->tmpl_err, sizeof b->tmpl_err, "the chat template is unusable: %.500s", st.msg);
  }
  if (!b->tmpl) return b->tmpl_err;
  json_t *messages = json_object_get(body, "messages");
  if (!json_is_array(messages) || json_array_size(messages) == 0) return "body.messages must be a non-empty array";
  di_chat_opts o = {0};
  o.tools = json_object_get(body, "tools");
  o.add_generation_prompt = true;
  o.bos_token = di_tokenizer_special_text(tok, "bos_token");
  o.eos_token = di_tokenizer_special_text(tok, "eos_token");
  di_render_out r = {0};
  di_status st = {0};
  size_t n = 0;
  if (di_chat_render_ex(b->tmpl, messages, &o, &r, &st) != DI_OK ||
      di_chat_assemble_ids(tok, &r, false, ids, &n, &st) != DI_OK) {
    di_render_out_free(&r);
    snprintf(msg, msglen, "messages: %.400s", st.msg);
    return msg;
  }
  di_render_out_free(&r);
  p->prompt_ids = *ids;
  p->n_prompt = n;
  return NULL;
}

/* Parses and submits one line; on failure stores an error result. */
static bool submit_line(di_engine *e, batch *b, int line, const char *text, job **out) {
  *out = NULL;
  json_error_t jerr;
  json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
  char msg[512];
  const char *err = NULL;
  json_t *custom_id = NULL;
  if (!root || !json_is_object(root)) {
    snprintf(msg, sizeof msg, "line %d: not a JSON object%s%s", line + 1, root ? "" : ": ", root ? "" : jerr.text);
    err = msg;
  } else {
    custom_id = json_object_get(root, "custom_id");
    const char *url = json_string_value(json_object_get(root, "url"));
    const char *method = json_string_value(json_object_get(root, "method"));
    json_t *body = json_object_get(root, "body");
    if (method && strcmp(method, "POST")) err = "method must be POST";
    else if (!url) err = "missing url";
    else if (strcmp(url, "/v1/completions") && strcmp(url, "/v1/chat/completions"))
      err = "url must be /v1/completions or /v1/chat/completions";
    else if (!json_is_object(body)) err = "missing body object";
    if (!err) {
      job *j = calloc(1, sizeof *j);
      j->line = line;
      j->b = b;
      j->custom_id = json_incref(custom_id);
      j->logprobs = -1;
      j->tok = di_engine_tokenizer(e);
      di_request_params p;
      di_request_params_default(&p);
      int32_t *ids = NULL, *bias_ids = NULL;
      const char **stops = NULL;
      float *bias_vals = NULL;
      j->chat = !strcmp(url, "/v1/chat/completions");
      if (j->chat) err = render_chat(e, b, body, &ids, &p, msg, sizeof msg);
      if (!err) err = parse_body(body, &p, j, root, &ids, &stops, &bias_ids, &bias_vals, msg, sizeof msg);
      if (!err) {
        j->n = p.n > 0 ? p.n : 1;
        j->ch = calloc((size_t)(j->n > 0 ? j->n : 1), sizeof *j->ch);
        for (int i = 0; i < j->n; i++) {
          j->ch[i].ids = json_array();
          j->ch[i].lp_tokens = json_array();
          j->ch[i].lp_values = json_array();
          j->ch[i].lp_top = json_array();
        }
        p.cb = on_event;
        p.user = j;
        char eerr[512];
        if (p.n >= 0 && p.n <= 4096 && di_engine_submit(e, &p, NULL, eerr, sizeof eerr) == DI_OK) {
          *out = j;
        } else {
          snprintf(msg, sizeof msg, "%s", p.n < 0 || p.n > 4096 ? "n must be >= 1" : eerr);
          err = msg;
        }
      }
      free(ids);
      free(stops);
      free(bias_ids);
      free(bias_vals);
      if (!*out) job_free(j);
    }
  }
  if (err) {
    b->results[line] = error_line(line, custom_id, "invalid_request", err);
    b->n_done++;
    b->n_errors++;
  }
  json_decref(root);
  return err == NULL;
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
          " \"kv_blocks_used\": %d, \"kv_blocks_high_water\": %d, \"kv_block_size\": %d, \"kv_block_bytes\": %zu}\n",
          b->n_done, b->n_errors, secs, b->tokens, (unsigned long long)s.preemptions,
          (unsigned long long)s.prompt_tokens, (unsigned long long)s.generated_tokens,
          (unsigned long long)s.prefix_queries, (unsigned long long)s.prefix_query_tokens,
          (unsigned long long)s.prefix_hit_tokens, (unsigned long long)s.steps, (unsigned long long)s.batch_tokens,
          s.kv_blocks_total, s.kv_blocks_used, s.kv_blocks_high_water, s.kv_block_size, s.kv_block_bytes);
  return fclose(f);
}

int di_cmd_batch(int argc, char **argv) {
  di_engine_opts o;
  di_engine_opts_default(&o);
  o.max_seqs = 0; /* 0 after parsing = not given: follows --concurrency */
  const char *in_path = NULL, *out_path = NULL, *stats_path = NULL;
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
               !strcmp(a, "--concurrency") || !strcmp(a, "--stats-json")) {
      if (!v) return di_cli_fail("batch", "option %s needs a value", a);
      i++;
      if (a[1] == 'i' || !strcmp(a, "--input")) in_path = v;
      else if (a[1] == 'o' || !strcmp(a, "--output")) out_path = v;
      else if (!strcmp(a, "--stats-json")) stats_path = v;
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
    if (got == 0) continue;
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
  batch b = {.model_name = o.model_path};
  const char *slash = strrchr(o.model_path, '/');
  if (slash && slash[1]) b.model_name = slash + 1;
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
  di_engine_destroy(e);
  di_chat_template_free(b.tmpl);
  for (size_t i = 0; i < n_lines; i++) free(lines[i]);
  free(lines);
  free(jobs);
  free(b.results);
  return ret;
}
