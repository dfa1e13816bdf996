/* The request fields chat and completions share: model, sampling, limits,
 * stop strings, logit bias, streaming options. Every value is checked and a
 * bad one is named in the 400 answer. `deepinfer batch` reads its lines
 * through the same functions (server/oai.h), so both have one set of limits. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "server/internal.h"

#define MAX_STOPS 16

static bool parse_stop(json_t *body, di_srv_sampling *g, di_srv_err *e) {
  json_t *v = json_object_get(body, "stop");
  if (!v || json_is_null(v)) return true;
  size_t n = json_is_string(v) ? 1 : json_is_array(v) ? json_array_size(v) : 0;
  if (!json_is_string(v) && !json_is_array(v))
    return di_srv_bad(e, "stop", "'stop' must be a string or an array of strings");
  if (n > MAX_STOPS) return di_srv_bad(e, "stop", "'stop' has %zu entries; at most %d are allowed", n, MAX_STOPS);
  g->stops = calloc(n ? n : 1, sizeof *g->stops);
  if (!g->stops) return di_srv_fail(e, 500, "server_error", NULL, "out of memory");
  for (size_t i = 0; i < n; i++) {
    json_t *s = json_is_string(v) ? v : json_array_get(v, i);
    if (!json_is_string(s)) return di_srv_bad(e, "stop", "stop[%zu] must be a string", i);
    if (!json_string_length(s)) return di_srv_bad(e, "stop", "stop[%zu] is empty", i);
    g->stops[g->n_stops] = strdup(json_string_value(s));
    if (!g->stops[g->n_stops]) return di_srv_fail(e, 500, "server_error", NULL, "out of memory");
    g->n_stops++;
  }
  g->params.stop = (const char *const *)g->stops;
  g->params.n_stop = g->n_stops;
  return true;
}

static bool parse_bias(json_t *body, int n_vocab, di_srv_sampling *g, di_srv_err *e) {
  json_t *v = json_object_get(body, "logit_bias");
  if (!v || json_is_null(v)) return true;
  if (!json_is_object(v)) return di_srv_bad(e, "logit_bias", "'logit_bias' must be an object of token id -> bias");
  size_t n = json_object_size(v);
  if (n > 1024) return di_srv_bad(e, "logit_bias", "'logit_bias' has %zu entries; at most 1024", n);
  g->bias_ids = malloc((n ? n : 1) * sizeof *g->bias_ids);
  g->bias_vals = malloc((n ? n : 1) * sizeof *g->bias_vals);
  if (!g->bias_ids || !g->bias_vals) return di_srv_fail(e, 500, "server_error", NULL, "out of memory");
  const char *key;
  json_t *val;
  int i = 0;
  json_object_foreach(v, key, val) {
    char *end = NULL;
    errno = 0;
    long id = strtol(key, &end, 10);
    if (!*key || *end || errno || id < 0 || id >= n_vocab)
      return di_srv_bad(e, "logit_bias", "logit_bias key '%.40s' is not a token id in [0, %d)", key, n_vocab);
    if (!json_is_number(val) || json_number_value(val) < -100 || json_number_value(val) > 100)
      return di_srv_bad(e, "logit_bias", "logit_bias['%s'] must be a number in [-100, 100]", key);
    g->bias_ids[i] = (int32_t)id;
    g->bias_vals[i] = (float)json_number_value(val);
    i++;
  }
  g->params.sampling.n_logit_bias = i;
  g->params.sampling.logit_bias_ids = g->bias_ids;
  g->params.sampling.logit_bias_values = g->bias_vals;
  return true;
}

bool di_srv_model_ok(json_t *body, const char *served, di_srv_err *e) {
  const char *model = NULL;
  if (!di_srv_get_str(body, "model", &model, e)) return false;
  if (model && strcmp(model, served)) {
    di_srv_fail(e, 404, "invalid_request_error", "model_not_found",
                "The model '%.200s' does not exist; this server serves '%.200s'", model, served);
    snprintf(e->param, sizeof e->param, "model");
    return false;
  }
  return true;
}

bool di_srv_check_model(di_server *s, json_t *body, di_srv_err *e) { return di_srv_model_ok(body, s->model_name, e); }

bool di_srv_sampling_parse(json_t *body, int n_vocab, di_srv_sampling *g, di_srv_err *e) {
  di_sampling *sp = &g->params.sampling;
  double temperature = sp->temperature, top_p = sp->top_p, min_p = sp->min_p;
  double rep = sp->repetition_penalty, pres = sp->presence_penalty, freq = sp->frequency_penalty;
  long long top_k = sp->top_k, seed = -1, max_tokens = 0, max_completion = 0;
  int ignore_eos = g->params.ignore_eos, stream = 0, include_usage = 0, speculative = !g->params.spec_off;
  const char *user = NULL;
  if (!di_srv_get_num(body, "temperature", 0, 2, &temperature, e) ||
      !di_srv_get_num(body, "top_p", 0, 1, &top_p, e) ||
      !di_srv_get_num(body, "min_p", 0, 1, &min_p, e) ||
      !di_srv_get_num(body, "repetition_penalty", 0.01, 10, &rep, e) ||
      !di_srv_get_num(body, "presence_penalty", -2, 2, &pres, e) ||
      !di_srv_get_num(body, "frequency_penalty", -2, 2, &freq, e) ||
      !di_srv_get_int(body, "top_k", -1, 1 << 30, &top_k, e) ||
      !di_srv_get_int(body, "seed", INT64_MIN, INT64_MAX, &seed, e) ||
      !di_srv_get_int(body, "max_tokens", 1, 1 << 30, &max_tokens, e) ||
      !di_srv_get_int(body, "max_completion_tokens", 1, 1 << 30, &max_completion, e) ||
      !di_srv_get_bool(body, "ignore_eos", &ignore_eos, e) ||
      !di_srv_get_bool(body, "speculative", &speculative, e) || /* extension: false opts out */
      !di_srv_get_bool(body, "stream", &stream, e) || !di_srv_get_str(body, "user", &user, e))
    return false;
  if (json_object_get(body, "top_p") && top_p <= 0)
    return di_srv_bad(e, "top_p", "'top_p' must be greater than 0");
  json_t *so = json_object_get(body, "stream_options");
  if (so && !json_is_null(so)) {
    if (!json_is_object(so)) return di_srv_bad(e, "stream_options", "'stream_options' must be an object");
    if (!stream) return di_srv_bad(e, "stream_options", "'stream_options' is only allowed when 'stream' is true");
    if (!di_srv_get_bool(so, "include_usage", &include_usage, e)) {
      snprintf(e->param, sizeof e->param, "stream_options.include_usage");
      return false;
    }
  }
  if (!parse_stop(body, g, e) || !parse_bias(body, n_vocab, g, e)) return false;
  sp->temperature = (float)temperature;
  sp->top_p = (float)top_p;
  sp->min_p = (float)min_p;
  sp->repetition_penalty = (float)rep;
  sp->presence_penalty = (float)pres;
  sp->frequency_penalty = (float)freq;
  sp->top_k = top_k < 0 ? 0 : (int)top_k;
  if (json_object_get(body, "seed") && !json_is_null(json_object_get(body, "seed"))) sp->seed = (uint64_t)seed;
  g->params.ignore_eos = ignore_eos;
  g->params.spec_off = !speculative;
  g->max_tokens = (int)(max_completion ? max_completion : max_tokens);
  g->stream = stream;
  g->include_usage = include_usage;
  return true;
}

void di_srv_sampling_free(di_srv_sampling *q) {
  for (int i = 0; i < q->n_stops; i++) free(q->stops[i]);
  free(q->stops);
  free(q->bias_ids);
  free(q->bias_vals);
  q->stops = NULL;
  q->n_stops = 0;
  q->bias_ids = NULL;
  q->bias_vals = NULL;
}

/* The generation owns the arrays from here on, parsed or not (gen.c frees them). */
bool di_srv_parse_sampling(json_t *body, di_srv_gen *g, di_srv_err *e) {
  di_srv_sampling q = {.params = g->params, .max_tokens = g->max_tokens};
  bool ok = di_srv_sampling_parse(body, g->s->be.n_vocab, &q, e);
  g->params = q.params;
  g->stops = q.stops;
  g->n_stops = q.n_stops;
  g->bias_ids = q.bias_ids;
  g->bias_vals = q.bias_vals;
  g->max_tokens = q.max_tokens;
  g->stream = q.stream;
  g->include_usage = q.include_usage;
  return ok;
}

bool di_srv_context_fits(long long ctx, long long np, long long want, const char *param, int *max_tokens,
                         di_srv_err *e) {
  if (np == 0) return di_srv_bad(e, param, "the prompt is empty (0 tokens)");
  if (np >= ctx || np + want > ctx) {
    if (want)
      di_srv_bad(e, param,
                 "This model's maximum context length is %lld tokens. However, you requested %lld "
                 "tokens (%lld in the prompt, %lld for the completion). Please reduce the prompt or "
                 "max_tokens.",
                 ctx, np + want, np, want);
    else
      di_srv_bad(e, param,
                 "This model's maximum context length is %lld tokens. However, the prompt has %lld "
                 "tokens, leaving no room for the completion.",
                 ctx, np);
    e->code = "context_length_exceeded";
    return false;
  }
  *max_tokens = (int)(want ? want : ctx - np);
  return true;
}

bool di_srv_check_context(di_srv_gen *g, di_srv_sub *sub, di_srv_err *e) {
  return di_srv_context_fits(g->s->be.n_ctx, (long long)sub->n_prompt, g->max_tokens,
                             g->kind == DI_SRV_CHAT ? "messages" : "prompt", &sub->max_tokens, e);
}
