/* The token-level tool-call constraint. A call is a fixed list of steps,
 * each either one token (a format's tag that the tokenizer has as one added
 * token: DeepSeek's <｜tool▁call▁begin｜>, <｜tool▁sep｜>, ...) or a grammar
 * (a function's name, its arguments under its parameters schema). Every
 * declared function has its own list of the same shape; while a call is
 * open the functions still possible run side by side (the mask is the union
 * of theirs), so the name picks the arguments' schema without one grammar
 * holding every function's prefix. Around calls:
 *   forced (required / named, DeepSeek):  <calls_begin> call (call)* <calls_end>, then the end;
 *   auto with strict tools:  free text; the format's opening tag (a token, or
 *   text matched across tokens) starts a constrained call; after it, free
 *   text again;
 *   Llama 3 (no tag: a reply that is one JSON object is a call), auto with
 *   strict tools: a reply whose first token starts '{' is constrained to one
 *   call and ends with it;
 *   a prompt that opened <think>: free reasoning up to </think> first.
 * One record per accepted token (the state before it and which matchers it
 * advanced) makes rollback(n) exact for speculative decoding. */
#include <stdlib.h>
#include <string.h>

#include "server/toolcon.h"

enum { M_THINK, M_FREE, M_START, M_CALL, M_AFTER, M_END };
enum { MAX_FNS = 64, MAX_CALLS = 16, MAX_STEPS = 5 };

typedef struct tstep {
  int32_t tok;   /* >= 0: this one token */
  di_grammar *g; /* else this grammar */
} tstep;

typedef struct rec {
  uint64_t alive, adv; /* adv: the matchers of (call, step) this token advanced */
  int16_t mode, step, n_calls, call;
  int16_t kmp, tkmp;
} rec;

/* A tag watched for in free text: one token, or its text across tokens
 * (KMP over the tokens' bytes). */
typedef struct watch {
  int32_t tok;
  char s[32];
  int len, fail[32];
} watch;

struct di_srv_toolcon {
  int n_fn, n_steps, auto_mode, max_calls;
  int whole; /* Llama 3: a reply whose first byte but whitespace is '{' is one call, and all of the reply */
  tstep st[MAX_FNS][MAX_STEPS];
  int32_t block_open, block_close; /* -1: none (Hermes) */
  watch trig;                      /* auto: the opening tag */
  watch think;                     /* the prompt opened <think>: free until its close */
  void *ctx; /* token bytes for a text tag */
  int (*token_bytes)(void *ctx, int32_t id, char *buf, size_t cap);
  size_t words;
  uint32_t *tmp, *eos;
  di_gmatcher **m; /* [MAX_CALLS][n_steps][n_fn] */
  int mode, step, n_calls, kmp, tkmp;
  uint64_t alive;
  rec *h;
  size_t n_h, cap_h;
};

static void set_bit(uint32_t *m, int32_t t) { m[t >> 5] |= 1u << (t & 31); }

static di_gmatcher **slot(di_srv_toolcon *t, int call, int step, int fn) {
  return &t->m[((size_t)call * (size_t)t->n_steps + (size_t)step) * (size_t)t->n_fn + (size_t)fn];
}

bool di_srv_toolcon_wanted(json_t *tools, const di_srv_tool_choice *c, const di_srv_toolfmt *f) {
  if (!f) return false;
  if (c->mode == DI_TOOLS_REQUIRED || c->mode == DI_TOOLS_NAMED) return f->name_sep != NULL;
  if (c->mode != DI_TOOLS_AUTO) return false;
  size_t i;
  json_t *x;
  json_array_foreach(tools, i, x) if (json_is_true(json_object_get(json_object_get(x, "function"), "strict"))) return true;
  return false;
}

/* ---- building ---- */

static bool compile(const di_srv_backend *be, di_grammar_kind kind, const char *src, const di_grammar_opts *o,
                    di_grammar **out, const char *param, di_srv_err *e) {
  di_status st = {0};
  di_code rc = be->grammar(be->ctx, kind, src, strlen(src), o, out, &st);
  if (rc == DI_OK) return true;
  if (rc == DI_ERR_NOMEM || rc == DI_ERR_INTERNAL) return di_srv_fail(e, 500, "server_error", NULL, "%s: %s", param, st.msg);
  return di_srv_bad(e, param, "%s: %s", param, st.msg);
}

/* A grammar whose one string is s (GBNF literal). */
static bool literal(const di_srv_backend *be, const char *s, di_grammar **out, di_srv_err *e) {
  di_srv_buf b = {0};
  di_srv_buf_puts(&b, "root ::= \"");
  for (; *s; s++) {
    char c = *s;
    if (c == '"' || c == '\\') di_srv_buf_put(&b, "\\", 1);
    if (c == '\n') di_srv_buf_puts(&b, "\\n");
    else di_srv_buf_put(&b, &c, 1);
  }
  di_srv_buf_puts(&b, "\"");
  bool ok = !b.oom ? compile(be, DI_GRAMMAR_GBNF, b.p, NULL, out, "tools", e)
                   : di_srv_fail(e, 500, "server_error", NULL, "out of memory");
  di_srv_buf_free(&b);
  return ok;
}

/* A tag the tokenizer reads as one token, else -1. */
static int32_t one_token(const di_srv_backend *be, const char *text) {
  int32_t *ids = NULL;
  size_t n = 0;
  di_status st = {0};
  int32_t id = -1;
  if (text && be->tokenize(be->ctx, text, strlen(text), 0, 1, &ids, &n, &st) == DI_OK && n == 1) id = ids[0];
  free(ids);
  return id;
}

static bool need_token(const di_srv_backend *be, const char *tag, int32_t *id, const di_srv_toolfmt *f, di_srv_err *e) {
  if ((*id = one_token(be, tag)) >= 0) return true;
  return di_srv_bad(e, "tool_choice", "this model's tokenizer has no single token for %s's tag '%s'", f->name, tag);
}

/* The parameters a call must follow: strict, forced or named calls their
 * schema; a non-strict tool in auto mode any object. */
static char *params_text(json_t *fn, int exact) {
  json_t *p = json_object_get(fn, "parameters");
  if (!exact || !p || json_is_null(p))
    return strdup(exact ? "{\"type\":\"object\",\"properties\":{},\"additionalProperties\":false}" : "{\"type\":\"object\"}");
  return json_dumps(p, JSON_COMPACT);
}

/* DeepSeek: <call_begin> [lead <sep>] ... <call_end> per function. */
static bool build_named(di_srv_toolcon *t, const di_srv_backend *be, json_t *tools, const di_srv_tool_choice *c,
                        const di_srv_toolfmt *f, di_srv_err *e) {
  int32_t open, close, sep;
  if (!need_token(be, f->open, &open, f, e) || !need_token(be, f->close, &close, f, e) ||
      !need_token(be, f->block_open, &t->block_open, f, e) || !need_token(be, f->block_close, &t->block_close, f, e) ||
      !need_token(be, f->lead ? f->tok_sep : f->name_sep, &sep, f, e))
    return false;
  t->trig.tok = t->block_open;
  t->n_steps = 5;
  size_t i;
  json_t *x;
  json_array_foreach(tools, i, x) {
    json_t *fn = json_object_get(x, "function");
    const char *name = json_string_value(json_object_get(fn, "name"));
    if (c->mode == DI_TOOLS_NAMED && strcmp(name, c->name)) continue;
    if (t->n_fn == MAX_FNS) return di_srv_bad(e, "tools", "at most %d functions can be constrained at once", MAX_FNS);
    tstep *s = t->st[t->n_fn++];
    s[0].tok = open, s[2].tok = sep, s[4].tok = close;
    s[1].tok = s[3].tok = -1;
    int exact = c->mode != DI_TOOLS_AUTO || json_is_true(json_object_get(fn, "strict"));
    char *params = params_text(fn, exact);
    if (!params) return di_srv_fail(e, 500, "server_error", NULL, "out of memory");
    di_grammar_opts o = {.ws = DI_JSON_WS_PYTHON, .after = f->args_end, .max_repeat = 1};
    char before[320];
    bool ok;
    if (f->lead) { /* V3 / R1: <call_begin> lead <sep> NAME name_sep ARGS args_end <call_end> */
      snprintf(before, sizeof before, "%s%s", name, f->name_sep);
      o.before = before;
      ok = literal(be, f->lead, &s[1].g, e);
    } else { /* V3.1: <call_begin> NAME <sep> ARGS <call_end> */
      ok = literal(be, name, &s[1].g, e);
    }
    ok = ok && compile(be, DI_GRAMMAR_JSON_SCHEMA, params, &o, &s[3].g, "tools", e);
    free(params);
    if (!ok) return false;
  }
  return true;
}

static bool watch_init(const di_srv_backend *be, watch *w, const char *tag) {
  memset(w, 0, sizeof *w);
  if ((w->tok = one_token(be, tag)) >= 0) return true;
  size_t n = strlen(tag);
  if (!be->token_bytes || n >= sizeof w->s) return false;
  memcpy(w->s, tag, n);
  w->len = (int)n;
  for (int q = 1, k = 0; q < w->len; q++) { /* KMP failure links */
    while (k && w->s[q] != w->s[k]) k = w->fail[k - 1];
    if (w->s[q] == w->s[k]) k++;
    w->fail[q] = k;
  }
  return true;
}

/* Feeds token tok to w from state *st: the offset in the token's bytes just
 * past the tag when it completes there, else -1. */
static int watch_feed(const di_srv_toolcon *t, const watch *w, int *st, int32_t tok, char *b, int *n) {
  *n = 0;
  if (w->tok >= 0) return tok == w->tok ? 0 : -1;
  *n = t->token_bytes(t->ctx, tok, b, 256);
  for (int j = 0; j < *n; j++) {
    while (*st && b[j] != w->s[*st]) *st = w->fail[*st - 1];
    if (b[j] == w->s[*st]) ++*st;
    if (*st == w->len) {
      *st = 0;
      return j + 1;
    }
  }
  return -1;
}

/* Hermes-style (a JSON call between text tags), auto mode only: after the
 * opening tag, one grammar of every function's call and the closing tag. */
static bool build_json(di_srv_toolcon *t, const di_srv_backend *be, json_t *tools, const di_srv_tool_choice *c,
                       const di_srv_toolfmt *f, di_srv_err *e) {
  json_t *copy = json_deep_copy(tools);
  size_t i;
  json_t *x;
  json_array_foreach(copy, i, x) {
    json_t *fn = json_object_get(x, "function");
    if (!json_is_true(json_object_get(fn, "strict")))
      json_object_set_new(fn, "parameters", json_pack("{s:s}", "type", "object"));
  }
  di_srv_tool_choice req = {DI_TOOLS_REQUIRED, NULL, 0};
  di_srv_toolfmt after_open = *f;
  if (f->open) after_open.before = "\n";
  di_srv_constraint con;
  bool ok = di_srv_tools_constraint(copy, &req, &after_open, &con, e);
  json_decref(copy);
  (void)c;
  if (!ok) return false;
  con.opts.max_repeat = 1;
  t->n_fn = 1;
  t->n_steps = 1;
  t->st[0][0].tok = -1;
  ok = compile(be, con.kind, con.src, &con.opts, &t->st[0][0].g, "tools", e);
  di_srv_constraint_free(&con);
  if (!ok) return false;
  t->block_open = t->block_close = -1;
  if (!f->open) { /* Llama 3: the reply's first token decides (accept_whole) */
    t->whole = 1;
    return true;
  }
  if (!watch_init(be, &t->trig, f->open)) return di_srv_bad(e, "tools", "cannot watch for '%s' in this model's output", f->open);
  return true;
}

bool di_srv_toolcon_new(const di_srv_backend *be, json_t *tools, const di_srv_tool_choice *c, const di_srv_toolfmt *f,
                        int think_open, di_srv_toolcon **out, di_srv_err *e) {
  *out = NULL;
  if (!be->grammar || !be->submit_tokcon || !be->tokenize)
    return di_srv_bad(e, "tools", "this server cannot constrain tool calls");
  di_srv_toolcon *t = calloc(1, sizeof *t);
  if (!t) return di_srv_fail(e, 500, "server_error", NULL, "out of memory");
  t->ctx = be->ctx;
  t->token_bytes = be->token_bytes;
  t->auto_mode = c->mode == DI_TOOLS_AUTO;
  t->trig.tok = -1;
  bool ok = f->name_sep ? build_named(t, be, tools, c, f, e) : build_json(t, be, tools, c, f, e);
  if (ok && !t->n_fn) ok = di_srv_bad(e, "tool_choice", "no function to call");
  /* parallel calls: at most one per declared function when forced (a small
   * model that keeps calling still ends inside a bounded reply) */
  t->max_calls = !c->parallel || c->mode == DI_TOOLS_NAMED ? 1 : t->auto_mode ? MAX_CALLS : t->n_fn;
  if (t->max_calls > MAX_CALLS) t->max_calls = MAX_CALLS;
  /* the end-of-generation ids: the mask of a grammar whose one string is empty, at its end */
  di_grammar *empty = NULL;
  di_gmatcher *em = NULL;
  di_status st = {0};
  if (ok) ok = compile(be, DI_GRAMMAR_GBNF, "root ::= \"\"", NULL, &empty, "tools", e);
  if (ok && di_gmatcher_new(empty, &em, &st) != DI_OK) ok = di_srv_fail(e, 500, "server_error", NULL, "%s", st.msg);
  if (ok) {
    /* masks span the engine's vocabulary (the tokenizer's may be smaller, never larger) */
    size_t gw = di_grammar_mask_words(empty);
    t->words = be->n_vocab > 0 ? ((size_t)be->n_vocab + 31) / 32 : gw;
    t->tmp = calloc(gw > t->words ? gw : t->words, sizeof *t->tmp);
    t->eos = calloc(gw > t->words ? gw : t->words, sizeof *t->eos);
    t->m = calloc((size_t)MAX_CALLS * (size_t)t->n_steps * (size_t)t->n_fn, sizeof *t->m);
    if (!t->tmp || !t->eos || !t->m) ok = di_srv_fail(e, 500, "server_error", NULL, "out of memory");
    else di_gmatcher_fill_mask(em, t->eos);
  }
  di_gmatcher_free(em);
  di_grammar_release(empty);
  if (!ok) {
    di_srv_toolcon_free(t);
    return false;
  }
  t->mode = t->auto_mode ? M_FREE : M_START;
  if (think_open) {
    if (!watch_init(be, &t->think, "</think>")) {
      di_srv_toolcon_free(t);
      return di_srv_bad(e, "tools", "cannot watch for '</think>' in this model's output");
    }
    t->mode = M_THINK;
  }
  t->alive = t->n_fn == 64 ? ~0ull : (1ull << t->n_fn) - 1;
  *out = t;
  return true;
}

void di_srv_toolcon_free(di_srv_toolcon *t) {
  if (!t) return;
  if (t->m)
    for (size_t i = 0; i < (size_t)MAX_CALLS * (size_t)t->n_steps * (size_t)t->n_fn; i++) di_gmatcher_free(t->m[i]);
  for (int i = 0; i < t->n_fn; i++)
    for (int s = 0; s < t->n_steps; s++) di_grammar_release(t->st[i][s].g);
  free(t->m);
  free(t->tmp);
  free(t->eos);
  free(t->h);
  free(t);
}

/* ---- running ---- */

static uint64_t all_fns(const di_srv_toolcon *t) { return t->n_fn == 64 ? ~0ull : (1ull << t->n_fn) - 1; }

/* Enters step s of the current call: its matchers start fresh. */
static bool enter(di_srv_toolcon *t, int s) {
  t->step = s;
  if (s >= t->n_steps || t->st[0][s].tok >= 0) return true;
  for (int i = 0; i < t->n_fn; i++) {
    if (!(t->alive >> i & 1)) continue;
    di_gmatcher **m = slot(t, t->n_calls, s, i);
    di_status st = {0};
    if (*m) di_gmatcher_rollback(*m, di_gmatcher_n_accepted(*m));
    else if (di_gmatcher_new(t->st[i][s].g, m, &st) != DI_OK) return false;
  }
  return true;
}

static void call_done(di_srv_toolcon *t) {
  t->n_calls++;
  t->alive = all_fns(t);
  t->kmp = 0;
  t->mode = t->whole ? M_END : t->block_open < 0 ? M_FREE : M_AFTER;
}

static bool start_call(di_srv_toolcon *t) {
  t->mode = M_CALL;
  t->alive = all_fns(t);
  return enter(t, 0);
}

static void tc_fill_mask(void *self, uint32_t *mask) {
  di_srv_toolcon *t = self;
  if (t->mode == M_FREE || t->mode == M_THINK) {
    memset(mask, 0xff, t->words * sizeof *mask);
    return;
  }
  memset(mask, 0, t->words * sizeof *mask);
  switch (t->mode) {
  case M_START: set_bit(mask, t->block_open); return;
  case M_AFTER:
    if (t->n_calls < t->max_calls) set_bit(mask, t->st[0][0].tok);
    set_bit(mask, t->block_close);
    return;
  case M_END: memcpy(mask, t->eos, t->words * sizeof *mask); return;
  default: break;
  }
  const tstep *s = &t->st[0][t->step];
  if (s->tok >= 0) {
    set_bit(mask, s->tok);
    return;
  }
  int32_t next = t->step + 1 < t->n_steps ? t->st[0][t->step + 1].tok : -1;
  for (int i = 0; i < t->n_fn; i++) {
    if (!(t->alive >> i & 1)) continue;
    di_gmatcher *m = *slot(t, t->n_calls, t->step, i);
    size_t w = di_grammar_mask_words(t->st[i][t->step].g);
    di_gmatcher_fill_mask(m, t->tmp);
    for (size_t k = 0; k < w && k < t->words; k++) mask[k] |= t->tmp[k] & ~t->eos[k];
    if (next >= 0 && di_gmatcher_is_accepting(m)) set_bit(mask, next);
  }
}

/* A token in free text: the opening tag (one token, or its text across
 * tokens) starts a call; what the token holds after a text tag is the call's
 * first bytes (if the call's grammar refuses them, the call stays text). */
static bool accept_free(di_srv_toolcon *t, int32_t tok, rec *r) {
  if (t->n_calls >= t->max_calls) return true;
  char b[256];
  int n = 0, at = -1;
  if (t->whole) { /* kmp: 1 once the reply began with text */
    if (t->kmp) return true;
    n = t->token_bytes(t->ctx, tok, b, sizeof b);
    for (at = 0; at < n && (b[at] == ' ' || b[at] == '\n' || b[at] == '\t' || b[at] == '\r');) at++;
    if (at == n) return true;
    if (b[at] != '{') {
      t->kmp = 1;
      return true;
    }
  } else {
    at = watch_feed(t, &t->trig, &t->kmp, tok, b, &n);
  }
  if (at < 0) return true;
  if (!start_call(t)) return false;
  if (at >= n) return true;
  r->call = (int16_t)t->n_calls;
  di_gmatcher *m = *slot(t, t->n_calls, 0, 0);
  if (di_gmatcher_accept_bytes(m, b + at, (size_t)(n - at))) {
    r->adv = 1;
    if (di_gmatcher_is_finished(m)) call_done(t);
  } else {
    t->mode = M_FREE;
    if (t->whole) t->kmp = 1;
  }
  return true;
}

static bool accept_call(di_srv_toolcon *t, int32_t tok, rec *r) {
  const tstep *s = &t->st[0][t->step];
  if (s->tok >= 0) {
    if (tok != s->tok) return false;
    if (t->step + 1 == t->n_steps) {
      call_done(t);
      return true;
    }
    return enter(t, t->step + 1);
  }
  int32_t next = t->step + 1 < t->n_steps ? t->st[0][t->step + 1].tok : -1;
  if (next >= 0 && tok == next) {
    uint64_t acc = 0;
    for (int i = 0; i < t->n_fn; i++)
      if ((t->alive >> i & 1) && di_gmatcher_is_accepting(*slot(t, t->n_calls, t->step, i))) acc |= 1ull << i;
    if (!acc) return false;
    t->alive = acc;
    if (t->step + 2 == t->n_steps) {
      call_done(t);
      return true;
    }
    return enter(t, t->step + 2);
  }
  uint64_t adv = 0;
  bool finished = false;
  for (int i = 0; i < t->n_fn; i++) {
    if (!(t->alive >> i & 1)) continue;
    di_gmatcher *m = *slot(t, t->n_calls, t->step, i);
    if (di_gmatcher_accept_token(m, tok)) {
      adv |= 1ull << i;
      finished |= di_gmatcher_is_finished(m);
    }
  }
  if (!adv) return false;
  r->adv = adv;
  r->call = (int16_t)t->n_calls;
  t->alive = adv;
  if (next < 0 && t->step + 1 == t->n_steps && finished) call_done(t);
  return true;
}

static bool tc_accept(void *self, int32_t tok) {
  di_srv_toolcon *t = self;
  if (t->n_h == t->cap_h) {
    size_t cap = t->cap_h ? t->cap_h * 2 : 64;
    rec *h = realloc(t->h, cap * sizeof *h);
    if (!h) return false;
    t->h = h, t->cap_h = cap;
  }
  rec r = {.alive = t->alive, .mode = (int16_t)t->mode, .step = (int16_t)t->step, .n_calls = (int16_t)t->n_calls,
           .call = (int16_t)t->n_calls, .kmp = (int16_t)t->kmp, .tkmp = (int16_t)t->tkmp};
  char b[256];
  int nb;
  bool ok;
  switch (t->mode) {
  case M_THINK: /* reasoning is free; the calls come after it (a text close's remaining bytes are reasoning's end) */
    ok = true;
    if (watch_feed(t, &t->think, &t->tkmp, tok, b, &nb) >= 0) t->mode = t->auto_mode ? M_FREE : M_START;
    break;
  case M_FREE: ok = accept_free(t, tok, &r); break;
  case M_START: ok = tok == t->block_open && start_call(t); break;
  case M_AFTER:
    ok = tok == t->block_close;
    if (ok) t->mode = t->auto_mode ? M_FREE : M_END;
    else ok = tok == t->st[0][0].tok && t->n_calls < t->max_calls && start_call(t) && enter(t, 1);
    break;
  case M_CALL: ok = accept_call(t, tok, &r); break;
  default: ok = false;
  }
  if (!ok) { /* refused: nothing moved (a matcher that refuses stays put) */
    t->alive = r.alive, t->mode = r.mode, t->step = r.step, t->n_calls = r.n_calls, t->kmp = r.kmp, t->tkmp = r.tkmp;
    return false;
  }
  t->h[t->n_h++] = r;
  return true;
}

static bool tc_finished(void *self) { return ((di_srv_toolcon *)self)->mode == M_END; }

static void tc_rollback(void *self, size_t n) {
  di_srv_toolcon *t = self;
  while (n-- && t->n_h) {
    const rec *r = &t->h[--t->n_h];
    for (int i = 0; i < t->n_fn; i++)
      if (r->adv >> i & 1) di_gmatcher_rollback(*slot(t, r->call, r->mode == M_FREE ? 0 : r->step, i), 1);
    t->alive = r->alive, t->mode = r->mode, t->step = r->step, t->n_calls = r->n_calls, t->kmp = r->kmp;
    t->tkmp = r->tkmp;
  }
}

void di_srv_toolcon_bind(di_srv_toolcon *t, di_srv_tokcon *c) {
  c->self = t;
  c->fill_mask = tc_fill_mask;
  c->accept = tc_accept;
  c->finished = tc_finished;
  c->rollback = tc_rollback;
}
