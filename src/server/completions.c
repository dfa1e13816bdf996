/* POST /v1/completions: prompt as a string, strings, token ids or arrays of
 * ids (one engine submission per prompt), suffix (fill-in-the-middle), echo,
 * and the legacy logprobs shape. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "server/internal.h"

#define MAX_PROMPTS 64

static bool ids_from_json(di_server *s, json_t *arr, size_t k, di_srv_sub *sub, di_srv_err *e) {
  size_t n = json_array_size(arr);
  sub->prompt_ids = malloc((n ? n : 1) * sizeof *sub->prompt_ids);
  if (!sub->prompt_ids) return di_srv_fail(e, 500, "server_error", NULL, "out of memory");
  for (size_t i = 0; i < n; i++) {
    json_t *v = json_array_get(arr, i);
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= s->be.n_vocab)
      return di_srv_bad(e, "prompt", "prompt[%zu][%zu] is not a token id in [0, %d)", k, i, s->be.n_vocab);
    sub->prompt_ids[i] = (int32_t)json_integer_value(v);
  }
  sub->n_prompt = n;
  return true;
}

/* Sorts the prompt forms into a list of texts or id arrays. */
static bool parse_prompts(json_t *body, json_t **items, size_t *n, int *as_ids, di_srv_err *e) {
  json_t *p = json_object_get(body, "prompt");
  static const char *form = "'prompt' must be a string, an array of strings, an array of token ids, or an array of arrays of token ids";
  if (!p || json_is_null(p)) return di_srv_bad(e, "prompt", "'prompt' is required");
  if (json_is_string(p)) {
    items[0] = p;
    *n = 1;
    *as_ids = 0;
    return true;
  }
  if (!json_is_array(p) || json_array_size(p) == 0) return di_srv_bad(e, "prompt", "%s", form);
  json_t *first = json_array_get(p, 0);
  if (json_is_integer(first)) { /* one prompt of ids */
    items[0] = p;
    *n = 1;
    *as_ids = 1;
    return true;
  }
  *as_ids = json_is_array(first);
  if (json_array_size(p) > MAX_PROMPTS)
    return di_srv_bad(e, "prompt", "at most %d prompts per request", MAX_PROMPTS);
  for (size_t i = 0; i < json_array_size(p); i++) {
    json_t *v = json_array_get(p, i);
    if (*as_ids ? !json_is_array(v) : !json_is_string(v)) return di_srv_bad(e, "prompt", "%s", form);
    items[i] = v;
  }
  *n = json_array_size(p);
  return true;
}

static bool prepare_sub(di_srv_gen *g, di_srv_sub *sub, size_t item_k, json_t *item, int as_ids, const char *suffix,
                        int echo, di_srv_err *e) {
  di_server *s = g->s;
  di_status st = {0};
  if (as_ids) {
    if (suffix) return di_srv_bad(e, "suffix", "'suffix' needs a text prompt");
    if (!ids_from_json(s, item, item_k, sub, e)) return false;
    if (echo) {
      size_t len = 0;
      if (s->be.detokenize(s->be.ctx, sub->prompt_ids, sub->n_prompt, &sub->echo, &len, &st) != DI_OK)
        return di_srv_bad(e, "prompt", "%s", st.msg);
    }
  } else {
    const char *text = json_string_value(item);
    di_code rc = suffix ? s->be.fim(s->be.ctx, text, suffix, &sub->prompt_ids, &sub->n_prompt, &st)
                        /* Text is text: "<|im_start|>" in a prompt is 7 plain tokens, as
                         * /tokenize gives; special tokens only as token ids. */
                        : s->be.tokenize(s->be.ctx, text, json_string_length(item), 1, 0, &sub->prompt_ids,
                                         &sub->n_prompt, &st);
    if (rc == DI_ERR_UNSUPPORTED && suffix)
      return di_srv_bad(e, "suffix", "this model's vocabulary has no fill-in-the-middle tokens, so 'suffix' cannot be used");
    if (rc != DI_OK) return di_srv_bad(e, "prompt", "%s", st.msg);
    if (echo && !(sub->echo = strdup(text))) return di_srv_fail(e, 500, "server_error", NULL, "out of memory");
  }
  return di_srv_check_context(g, sub, e);
}

enum MHD_Result di_srv_handle_completions(di_srv_req *r, json_t *body) {
  di_server *s = r->s;
  di_srv_err e = {0};
  long long n = 1, best_of = 0, logprobs = -1;
  int echo = 0;
  const char *suffix = NULL;
  json_t *items[MAX_PROMPTS];
  size_t n_items = 0;
  int as_ids = 0;
  if (!di_srv_check_model(s, body, &e) || !di_srv_get_int(body, "n", 1, 128, &n, &e) ||
      !di_srv_get_int(body, "best_of", 1, 128, &best_of, &e) || !di_srv_get_bool(body, "echo", &echo, &e) ||
      !di_srv_get_int(body, "logprobs", 0, 20, &logprobs, &e) || !di_srv_get_str(body, "suffix", &suffix, &e) ||
      !parse_prompts(body, items, &n_items, &as_ids, &e))
    return di_srv_reply_err(r, &e);
  if (s->be.max_seqs > 0 && n > s->be.max_seqs) {
    di_srv_bad(&e, "n", "'n' = %lld exceeds the sequences this server runs at once (--max-seqs %d)", n,
               s->be.max_seqs);
    return di_srv_reply_err(r, &e);
  }
  if (best_of && best_of != n) {
    di_srv_bad(&e, "best_of", "'best_of' different from 'n' is not supported");
    return di_srv_reply_err(r, &e);
  }
  if (suffix && !*suffix) suffix = NULL;
  di_srv_constraint con;
  if (!di_srv_constraint_parse(body, &con, &e)) return di_srv_reply_err(r, &e);
  /* constrained: one submission per completion, each with its own matcher */
  int per = con.on ? 1 : (int)n, reps = con.on ? (int)n : 1;
  di_srv_gen *g = di_srv_gen_new(r, DI_SRV_COMPLETION, (int)n_items * reps, per);
  if (!g) {
    di_srv_constraint_free(&con);
    return MHD_NO;
  }
  r->gen = g;
  g->logprobs = logprobs >= 0;
  g->top_logprobs = logprobs > 0 ? (int)logprobs : 0;
  g->params.logprobs = g->logprobs;
  g->params.top_logprobs = g->top_logprobs;
  bool ok = di_srv_parse_sampling(body, g, &e);
  if (ok && g->stream && g->logprobs && echo) ok = di_srv_bad(&e, "echo", "'echo' with 'logprobs' is not supported when streaming");
  for (size_t k = 0; ok && k < n_items; k++) {
    ok = prepare_sub(g, &g->subs[k * (size_t)reps], k, items[k], as_ids, suffix, echo, &e);
    for (int j = 1; ok && j < reps; j++) ok = di_srv_sub_copy_prompt(g, (int)k * reps + j, (int)k * reps, &e);
  }
  if (ok) ok = di_srv_gen_constrain(g, &con, &e);
  di_srv_constraint_free(&con);
  if (!ok || !di_srv_gen_submit(g, &e)) return di_srv_reply_err(r, &e);
  return di_srv_gen_answer(r, g);
}

/* ---- response shapes ---- */

static json_t *lp_num(float lp) { return json_real(isfinite(lp) ? (double)lp : -9999.0); }

static json_t *new_logprobs(void) {
  return json_pack("{s:[],s:[],s:[],s:[]}", "tokens", "token_logprobs", "top_logprobs", "text_offset");
}

/* Appends one token to the legacy {tokens, token_logprobs, top_logprobs,
 * text_offset} object; prompt tokens echoed back have null logprobs. */
static void lp_add(di_srv_gen *g, json_t *lp, int32_t id, const di_srv_evt *v, size_t offset) {
  json_array_append_new(json_object_get(lp, "tokens"), di_srv_token_str(g->s, id));
  json_array_append_new(json_object_get(lp, "token_logprobs"), v ? lp_num(v->logprob) : json_null());
  json_t *top = json_null();
  if (v && g->top_logprobs) {
    top = json_object();
    for (int t = 0; t < v->n_top && t < g->top_logprobs; t++) {
      json_t *tok = di_srv_token_str(g->s, v->top_ids[t]);
      json_object_set_new(top, json_string_value(tok), lp_num(v->top_logprobs[t]));
      json_decref(tok);
    }
  }
  json_array_append_new(json_object_get(lp, "top_logprobs"), top);
  json_array_append_new(json_object_get(lp, "text_offset"), json_integer((json_int_t)offset));
}

void di_srv_cmpl_apply(di_srv_gen *g, di_srv_choice *ch, int idx, const di_srv_evt *v) {
  di_srv_sub *sub = &g->subs[idx / g->n_per];
  size_t start = ch->text.len;
  json_t *lp = g->logprobs ? new_logprobs() : NULL;
  if (sub->echo && !ch->started) {
    di_srv_buf_puts(&ch->text, sub->echo);
    if (lp) {
      size_t off = 0;
      for (size_t i = 0; i < sub->n_prompt; i++) {
        lp_add(g, lp, sub->prompt_ids[i], NULL, off);
        char raw[256];
        int nb = g->s->be.token_bytes ? g->s->be.token_bytes(g->s->be.ctx, sub->prompt_ids[i], raw, sizeof raw) : 0;
        off += nb > 0 ? (size_t)nb : 0;
      }
    }
  }
  ch->started = 1;
  if (lp && v->token >= 0) lp_add(g, lp, v->token, v, ch->text_offset + (ch->text.len - start));
  di_srv_buf_put(&ch->text, v->text ? v->text : "", v->text_len);
  size_t added = ch->text.len - start;
  ch->text_offset += added;
  const char *fin = v->finish == DI_FINISH_STOP || v->finish == DI_FINISH_LENGTH ? di_srv_finish_name(v->finish) : NULL;
  if (!g->stream) {
    if (lp) {
      if (!ch->logprobs) ch->logprobs = new_logprobs();
      const char *keys[] = {"tokens", "token_logprobs", "top_logprobs", "text_offset"};
      for (int i = 0; i < 4; i++) json_array_extend(json_object_get(ch->logprobs, keys[i]), json_object_get(lp, keys[i]));
      json_decref(lp);
    }
    return;
  }
  if (added || fin || (lp && v->token >= 0)) {
    const char *tp = ch->text.p ? ch->text.p + start : "";
    json_t *j = json_pack("{s:s,s:s,s:I,s:s,s:[{s:s%,s:i,s:o,s:o}]}", "id", g->id, "object", "text_completion",
                          "created", (json_int_t)g->created, "model", g->s->model_name, "choices", "text",
                          tp, added, "index", idx, "logprobs", lp ? lp : json_null(),
                          "finish_reason", fin ? json_string(fin) : json_null());
    if (j && g->include_usage) json_object_set_new(j, "usage", json_null());
    di_srv_sse_put(g, j);
  } else {
    json_decref(lp);
  }
  /* A stream only needs the text of this event; keep the buffer small. */
  ch->text.len = 0;
}

json_t *di_srv_cmpl_result(di_srv_gen *g) {
  json_t *choices = json_array();
  for (int i = 0; i < g->n_choices; i++) {
    di_srv_choice *ch = &g->choices[i];
    json_t *lp = json_null();
    if (g->logprobs) lp = ch->logprobs ? json_incref(ch->logprobs) : new_logprobs();
    json_array_append_new(choices, json_pack("{s:s%,s:i,s:o,s:s}", "text", ch->text.p ? ch->text.p : "",
                                             ch->text.len, "index", i, "logprobs", lp, "finish_reason",
                                             di_srv_finish_name(ch->finish)));
  }
  return json_pack("{s:s,s:s,s:I,s:s,s:o,s:o}", "id", g->id, "object", "text_completion", "created",
                   (json_int_t)g->created, "model", g->s->model_name, "choices", choices, "usage",
                   di_srv_gen_usage(g));
}
