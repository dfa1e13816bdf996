/* Front door: compile (front end -> gx -> automaton), the compiled-grammar
 * cache keyed by a hash of the source, and reference counting. */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "grammar/internal.h"

enum { CACHE_SLOTS = 64 };
static pthread_mutex_t g_cache_mu = PTHREAD_MUTEX_INITIALIZER;
static di_grammar *g_cache[CACHE_SLOTS];
static size_t g_cache_next;

/* Budgets that bound compile time and memory whatever the input. */
static const size_t GX_MAX_NODES = 4u << 20;
static const ga_limits LIMITS = {.max_nfa_states = 2u << 20, .max_dfa_states = 1u << 18};

static void key_of(const di_tokenizer *tok, di_grammar_kind kind, const char *src, size_t len,
                   const di_grammar_opts *o, uint64_t key[2]) {
  XXH3_state_t *s = XXH3_createState();
  XXH3_128bits_reset(s);
  uint64_t hdr[3] = {tok ? di_tokenizer_serial(tok) : 0, (uint64_t)kind, (uint64_t)o->ws};
  XXH3_128bits_update(s, hdr, sizeof hdr);
  if (src) XXH3_128bits_update(s, src, len);
  if (o->before || o->after) {
    /* each piece with its terminating NUL, so the concatenation is unambiguous */
    const char *w[3] = {o->before ? o->before : "", o->after ? o->after : "", o->sep ? o->sep : ""};
    for (int i = 0; i < 3; i++) XXH3_128bits_update(s, w[i], strlen(w[i]) + 1);
    XXH3_128bits_update(s, &o->max_repeat, sizeof o->max_repeat);
  }
  XXH128_hash_t h = XXH3_128bits_digest(s);
  XXH3_freeState(s);
  key[0] = h.low64;
  key[1] = h.high64;
}

static void grammar_destroy(di_grammar *g) {
  if (g->cache)
    for (uint32_t i = 0; i < g->a.n_st; i++)
      if (g->cache[i] && !g->cache[i]->shared) gcache_free(g->cache[i]);
  free(g->local);
  free(g->chain);
  free(g->cstep);
  free(g->brun);
  free(g->rule_n);
  free(g->acc_scratch);
  free(g->tw_scratch);
  free(g->cache);
  if (g->memo)
    for (size_t i = 0; i < MEMO_SLOTS; i++) free(g->memo[i].mask);
  free(g->memo);
  gp_free(&g->scratch);
  ga_free(&g->a);
  pthread_mutex_destroy(&g->mu);
  free(g);
}

void di_grammar_release(di_grammar *g) {
  if (g && __atomic_sub_fetch(&g->refs, 1, __ATOMIC_ACQ_REL) == 0) grammar_destroy(g);
}

di_grammar *di_grammar_retain(di_grammar *g) {
  __atomic_add_fetch(&g->refs, 1, __ATOMIC_ACQ_REL);
  return g;
}

int32_t di_grammar_n_vocab(const di_grammar *g) { return g->v->n_vocab; }

/* before root after (sep before root after){0, max_repeat - 1} as a new root rule. */
static int32_t wrap_root(gx *x, int32_t root, const di_grammar_opts *o) {
  int32_t r = gx_rule_new(x, "wrapped_root");
  int32_t one = gx_seq3(x, gx_str(x, o->before ? o->before : ""), gx_ref(x, root), gx_str(x, o->after ? o->after : ""));
  int32_t more = o->max_repeat == 0 || o->max_repeat == 1
                     ? GX_EMPTY
                     : gx_rep(x, gx_seq2(x, gx_str(x, o->sep ? o->sep : ""), one), 0,
                              o->max_repeat < 0 ? -1 : o->max_repeat - 1);
  gx_rule_define(x, r, gx_seq2(x, one, more));
  return r;
}

static di_code build_once(const di_tokenizer *tok, di_grammar_kind kind, const char *src, size_t len,
                          const di_grammar_opts *o, bool split, di_grammar **out, di_status *st) {
  static const gvocab no_vocab; /* tok NULL: bytes only (validation, fuzzing) */
  const gvocab *v = tok ? gvocab_get(tok, st) : &no_vocab;
  if (!v) return st->code;
  gx x;
  gx_init(&x, GX_MAX_NODES);
  x.split_groups = split;
  int32_t root = -1;
  switch (kind) {
  case DI_GRAMMAR_JSON_SCHEMA: root = gfe_json_schema(&x, src, len, o, st); break;
  case DI_GRAMMAR_JSON_ANY: root = gfe_json_any(&x, o); break;
  case DI_GRAMMAR_REGEX: root = gfe_regex(&x, src, len, st); break;
  case DI_GRAMMAR_GBNF: root = gfe_gbnf(&x, src, len, st); break;
  }
  if (root >= 0 && (o->before || o->after)) root = wrap_root(&x, root, o);
  if (root < 0) {
    gx_free(&x);
    if (st && st->code == DI_OK) di_errorf(st, DI_ERR_INTERNAL, "grammar front end failed");
    return st ? st->code : DI_ERR_INVALID;
  }
  di_grammar *g = calloc(1, sizeof *g);
  if (!g) {
    gx_free(&x);
    return di_errorf(st, DI_ERR_NOMEM, "grammar: out of memory");
  }
  /* the first attempt gives up early when a retry with split groups can help */
  ga_limits lim = LIMITS;
  if (!split && x.n_rules < 64) lim.max_dfa_states = 1u << 15;
  di_code rc = ga_compile(&x, root, &lim, &g->a, st);
  gx_free(&x);
  if (rc) {
    free(g);
    return rc;
  }
  g->refs = 1;
  g->v = v;
  pthread_mutex_init(&g->mu, NULL);
  g->cache = calloc(g->a.n_st, sizeof *g->cache);
  g->local = malloc(sizeof *g->local * g->a.n_st);
  memset(g->local, 0xff, sizeof *g->local * g->a.n_st);
  gp_init(&g->scratch);
  *out = g;
  return DI_OK;
}

/* A regex whose automaton would be too large is retried with its groups as
 * rules of their own. */
static di_code build(const di_tokenizer *tok, di_grammar_kind kind, const char *src, size_t len,
                     const di_grammar_opts *o, di_grammar **out, di_status *st) {
  di_status first = {0};
  di_code rc = build_once(tok, kind, src, len, o, false, out, &first);
  if (rc != DI_ERR_RANGE || !strstr(first.msg, "automaton states")) {
    if (rc && st) *st = first;
    return rc;
  }
  return build_once(tok, kind, src, len, o, true, out, st);
}

di_code di_grammar_compile(const di_tokenizer *tok, di_grammar_kind kind, const char *src, size_t len,
                           const di_grammar_opts *opts, di_grammar **out, di_status *st) {
  di_grammar_opts o = opts ? *opts : (di_grammar_opts){.ws = DI_JSON_WS_FREE};
  uint64_t key[2];
  key_of(tok, kind, src, len, &o, key);
  pthread_mutex_lock(&g_cache_mu);
  for (size_t i = 0; i < CACHE_SLOTS; i++) {
    di_grammar *g = g_cache[i];
    if (g && g->key[0] == key[0] && g->key[1] == key[1]) {
      __atomic_add_fetch(&g->refs, 1, __ATOMIC_ACQ_REL);
      pthread_mutex_unlock(&g_cache_mu);
      *out = g;
      return DI_OK;
    }
  }
  pthread_mutex_unlock(&g_cache_mu);
  di_grammar *g = NULL;
  di_code rc = build(tok, kind, src, len, &o, &g, st);
  if (rc) return rc;
  g->key[0] = key[0];
  g->key[1] = key[1];
  g->refs = 2; /* the caller's and the cache's */
  pthread_mutex_lock(&g_cache_mu);
  di_grammar *old = g_cache[g_cache_next];
  g_cache[g_cache_next] = g;
  g_cache_next = (g_cache_next + 1) % CACHE_SLOTS;
  pthread_mutex_unlock(&g_cache_mu);
  di_grammar_release(old);
  *out = g;
  return DI_OK;
}
