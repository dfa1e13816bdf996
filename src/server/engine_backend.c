/* The production di_srv_backend: the engine, its tokenizer and the chat
 * recipe (render + injection-proof assembly). */
#include "server/engine_backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "recipe/chat.h"
#include "server/tools.h"
#include "tokenizer/tokenizer.h"

static int eb_ready(void *ctx) { return atomic_load_explicit(&((di_srv_engine *)ctx)->ready, memory_order_acquire); }

static di_code eb_submit(void *ctx, const di_request_params *p, uint64_t *id, char *err, size_t errlen) {
  return di_engine_submit(((di_srv_engine *)ctx)->e, p, id, err, errlen);
}

static di_code eb_cancel(void *ctx, uint64_t id) { return di_engine_cancel(((di_srv_engine *)ctx)->e, id); }
static di_code eb_pause(void *ctx, uint64_t id, int pause) {
  return di_engine_pause(((di_srv_engine *)ctx)->e, id, pause);
}

/* The grammar matcher as the engine's request constraint. */
static void gm_mask(void *m, uint32_t *mask) { di_gmatcher_fill_mask(m, mask); }
static bool gm_accept(void *m, int32_t t) { return di_gmatcher_accept_token(m, t); }
static bool gm_finished(void *m) { return di_gmatcher_is_finished(m); }
static void gm_rollback(void *m, size_t n) { di_gmatcher_rollback(m, n); }

di_code di_srv_submit_matcher(di_engine *e, const di_request_params *p, di_gmatcher *m, uint64_t *id, char *err,
                              size_t errlen) {
  di_constraint c = {m, gm_mask, gm_accept, gm_finished, gm_rollback};
  return di_engine_submit_constrained(e, p, m ? &c : NULL, id, err, errlen);
}

static di_code eb_submit_constrained(void *ctx, const di_request_params *p, di_gmatcher *m, uint64_t *id, char *err,
                                     size_t errlen) {
  return di_srv_submit_matcher(((di_srv_engine *)ctx)->e, p, m, id, err, errlen);
}

static di_code eb_submit_tokcon(void *ctx, const di_request_params *p, const di_srv_tokcon *t, uint64_t *id, char *err,
                                size_t errlen) {
  di_constraint c = {t->self, t->fill_mask, t->accept, t->finished, t->rollback};
  return di_engine_submit_constrained(((di_srv_engine *)ctx)->e, p, &c, id, err, errlen);
}

static di_code eb_grammar(void *ctx, di_grammar_kind kind, const char *src, size_t len, const di_grammar_opts *o,
                          di_grammar **out, di_status *st) {
  di_srv_engine *x = ctx;
  if (!x->tok) return di_errorf(st, DI_ERR_UNSUPPORTED, "this model has no tokenizer");
  di_code rc = di_grammar_compile(x->tok, kind, src, len, o, out, st);
  /* the engine's mask holds its own vocabulary; a larger tokenizer would write past it */
  if (rc == DI_OK && di_grammar_n_vocab(*out) > di_engine_n_vocab(x->e)) {
    int nt = di_grammar_n_vocab(*out);
    di_grammar_release(*out);
    *out = NULL;
    return di_errorf(st, DI_ERR_UNSUPPORTED, "the tokenizer has more tokens than the model (%d > %d)", nt,
                     di_engine_n_vocab(x->e));
  }
  return rc;
}

static const char *eb_tool_format(void *ctx) { return ((di_srv_engine *)ctx)->tool_format; }

static void eb_stats(void *ctx, di_engine_stats *s) { di_engine_stats_get(((di_srv_engine *)ctx)->e, s); }

static di_code eb_tokenize(void *ctx, const char *text, size_t len, int add_special, int parse_special,
                           int32_t **ids, size_t *n, di_status *st) {
  return di_tokenizer_encode(((di_srv_engine *)ctx)->tok, text, len, add_special, parse_special, ids, n, st);
}

static di_code eb_detokenize(void *ctx, const int32_t *ids, size_t n, char **text, size_t *len, di_status *st) {
  return di_tokenizer_decode(((di_srv_engine *)ctx)->tok, ids, n, false, text, len, st);
}

static int eb_token_bytes(void *ctx, int32_t id, char *buf, size_t cap) {
  size_t len = 0;
  const char *b = di_tokenizer_token_bytes(((di_srv_engine *)ctx)->tok, id, &len);
  if (!b) return -1;
  if (len > cap) len = cap;
  memcpy(buf, b, len);
  return (int)len;
}

/* Cuts a render right after the last content byte: what follows the final
 * assistant message (its end-of-turn) must not be in a continued prompt. */
static void cut_after_last_content(di_render_out *r) {
  for (size_t i = r->n_spans; i-- > 0;) {
    if (!r->spans[i].content) continue;
    r->len = r->spans[i].off + r->spans[i].len;
    r->text[r->len] = 0;
    r->n_spans = i + 1;
    return;
  }
}

static int ends_in_think(const char *s, size_t n) {
  while (n && (s[n - 1] == '\n' || s[n - 1] == ' ' || s[n - 1] == '\r')) n--;
  return n >= 7 && !memcmp(s + n - 7, "<think>", 7);
}

static di_code eb_render(void *ctx, const json_t *messages, const json_t *tools, int continue_final,
                         int32_t **ids, size_t *n_ids, int *think_open, di_status *st) {
  di_srv_engine *x = ctx;
  if (!x->tmpl) return di_errorf(st, DI_ERR_UNSUPPORTED, "this model has no chat template; use /v1/completions");
  json_t *last = json_array_get(messages, json_array_size(messages) - 1);
  const char *lc = json_string_value(json_object_get(last, "content"));
  if (continue_final && (!lc || !*lc)) continue_final = 0; /* nothing to continue: a fresh turn */
  di_chat_opts o = {0};
  o.tools = tools;
  o.add_generation_prompt = !continue_final;
  o.bos_token = x->bos;
  o.eos_token = x->eos;
  di_render_out r = {0};
  di_code rc = di_chat_render_ex(x->tmpl, messages, &o, &r, st);
  if (rc != DI_OK) return rc;
  if (continue_final) cut_after_last_content(&r);
  *think_open = ends_in_think(r.text, r.len);
  rc = di_chat_assemble_ids(x->tok, &r, false, ids, n_ids, st);
  di_render_out_free(&r);
  return rc;
}

/* Fill-in-the-middle markers of the common vocabularies, in prompt order
 * (prefix marker, suffix marker, middle marker). */
static const char *const FIM[][3] = {
    {"<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"},
    {"<fim_prefix>", "<fim_suffix>", "<fim_middle>"},
    {"<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "hole\xef\xbd\x9c>",
     "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>"},
};

static di_code eb_fim(void *ctx, const char *prefix, const char *suffix, int32_t **ids, size_t *n, di_status *st) {
  di_srv_engine *x = ctx;
  if (x->fim < 0) return di_errorf(st, DI_ERR_UNSUPPORTED, "no fill-in-the-middle tokens");
  const char *const *m = FIM[x->fim];
  di_tok_span sp[5] = {
      {m[0], strlen(m[0]), DI_TOK_PARSE_ALL}, {prefix, strlen(prefix), DI_TOK_PARSE_NONE},
      {m[1], strlen(m[1]), DI_TOK_PARSE_ALL}, {suffix, strlen(suffix), DI_TOK_PARSE_NONE},
      {m[2], strlen(m[2]), DI_TOK_PARSE_ALL},
  };
  return di_tokenizer_encode_spans(x->tok, sp, 5, true, ids, n, st);
}

void di_srv_engine_backend(di_srv_engine *x, di_srv_backend *be) {
  memset(be, 0, sizeof *be);
  be->ctx = x;
  be->ready = eb_ready;
  be->params_default = di_request_params_default;
  be->submit = eb_submit;
  be->cancel = eb_cancel;
  be->pause = eb_pause;
  be->stats = eb_stats;
  be->tokenize = eb_tokenize;
  be->detokenize = eb_detokenize;
  be->token_bytes = eb_token_bytes;
  be->render_chat = eb_render;
  be->fim = eb_fim;
  be->grammar = eb_grammar;
  be->submit_constrained = eb_submit_constrained;
  be->submit_tokcon = eb_submit_tokcon;
  be->tool_format = eb_tool_format;
}

di_code di_srv_engine_attach(di_srv_engine *x, di_engine *e, di_status *st) {
  x->e = e;
  x->tok = di_engine_tokenizer(e);
  x->fim = -1;
  if (!x->tok) return di_errorf(st, DI_ERR_UNSUPPORTED, "the engine has no tokenizer");
  for (int i = 0; i < (int)(sizeof FIM / sizeof FIM[0]) && x->fim < 0; i++)
    if (di_tokenizer_find(x->tok, FIM[i][0], strlen(FIM[i][0])) >= 0 &&
        di_tokenizer_find(x->tok, FIM[i][1], strlen(FIM[i][1])) >= 0 &&
        di_tokenizer_find(x->tok, FIM[i][2], strlen(FIM[i][2])) >= 0)
      x->fim = i;
  x->bos = di_tokenizer_special_text(x->tok, "bos_token");
  x->eos = di_tokenizer_special_text(x->tok, "eos_token");
  const char *src = di_tokenizer_chat_template(x->tok, NULL);
  x->tool_format = di_srv_toolfmt_detect(src);
  if (src) {
    di_status ts = {0};
    if (di_chat_template_compile(src, strlen(src), &x->tmpl, &ts) != DI_OK) {
      /* Completions still work; chat answers with the reason. */
      fprintf(stderr, "deepinfer serve: chat template unusable: %s\n", ts.msg);
      x->tmpl = NULL;
    }
  }
  return DI_OK;
}

void di_srv_engine_ready(di_srv_engine *x) { atomic_store_explicit(&x->ready, 1, memory_order_release); }

void di_srv_engine_detach(di_srv_engine *x) {
  di_chat_template_free(x->tmpl);
  x->tmpl = NULL;
}
