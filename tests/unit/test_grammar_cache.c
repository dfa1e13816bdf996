/* Grammar mask caches are exact: for grammars built to exercise the
 * whole-subtree shortcuts of mask.c (strings with length bounds and
 * patterns, escapes, Unicode, byte classes that admit control bytes), every
 * state's cached decisions equal a node-by-node walk of the vocabulary trie,
 * and along random token walks (with rollbacks, so memoised configurations
 * come back) each mask the matcher gives equals one computed afresh without
 * any cache. Llama 3 tokenizer. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "test_tok.h"
#include "grammar/internal.h"

static di_tokenizer *tok;

/* Same accepted set and the same uncertain tokens, leaving their rule at the
 * same points, in the same order. */
static bool same_cache(const gcache *a, const gcache *b, int32_t V) {
  if (a->n_acc != b->n_acc || a->n_ent != b->n_ent) return false;
  size_t words = ((size_t)V + 31) / 32;
  uint32_t *x = calloc(words, 4), *y = calloc(words, 4);
  const gcache *c[2] = {a, b};
  uint32_t *m[2] = {x, y};
  for (int i = 0; i < 2; i++) {
    if (c[i]->acc_bits) memcpy(m[i], c[i]->acc_bits, words * 4);
    else
      for (uint32_t k = 0; k < c[i]->n_acc; k++) m[i][c[i]->acc_list[k] >> 5] |= 1u << (c[i]->acc_list[k] & 31);
  }
  bool ok = !memcmp(x, y, words * 4) &&
            (!a->n_ent || (!memcmp(a->ent_tok, b->ent_tok, a->n_ent * sizeof *a->ent_tok) &&
                           !memcmp(a->ent_j, b->ent_j, a->n_ent * sizeof *a->ent_j)));
  free(x);
  free(y);
  return ok;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)(rng >> 11);
}

/* From here the masks of g walk every group of rests whose skips no mask has
 * built yet entry by entry, as when another thread builds them: the groups
 * are marked as being built, and memoised masks forgotten. */
static void skips_elsewhere(di_grammar *g) {
  for (uint32_t s = 0; s < g->a.n_st; s++) {
    gcache *c = g->cache[s];
    if (!c || !c->grp.nx_ready) continue;
    for (uint32_t i = 0; i < c->grp.n; i++)
      if (c->grp.nx_ready[i] == NX_NONE) c->grp.nx_ready[i] = NX_BUILDING;
  }
  if (g->memo)
    for (int i = 0; i < MEMO_SLOTS; i++) g->memo[i].k0 = g->memo[i].k1 = 0;
}

/* min_ref / min_brun: how many trie subtrees the grammar's states must have
 * copied from a reference state / decided by an ASCII class run (so the
 * shortcut under test is really taken). */
static void check_grammar_run(di_grammar_kind kind, const char *src, int walks, int steps, uint32_t min_ref,
                              uint32_t min_brun, di_json_ws ws) {
  di_grammar *g = NULL;
  di_grammar_opts o = {.ws = ws};
  di_status st = {0};
  CHECKF(!di_grammar_compile(tok, kind, src, src ? strlen(src) : 0, &o, &g, &st), "%s: %s", src, st.msg);
  if (!g) return;
  int32_t V = di_grammar_n_vocab(g);
  /* every state: cached (shortcuts, shared between grammars) == node-by-node walk */
  int bad = 0;
  for (uint32_t s = 0; s < g->a.n_st && s < 400; s++) {
    const gcache *c = grammar_state_cache(g, (int32_t)s);
    gcache *f = grammar_state_cache_fresh(g, (int32_t)s, false);
    if (!same_cache(c, f, V) && bad++ < 3)
      fprintf(stderr, "%s: state %u: cached %u accepted / %u uncertain, walk %u / %u\n", src ? src : "(any)", s,
              c->n_acc, c->n_ent, f->n_acc, f->n_ent);
    gcache_free(f);
  }
  CHECKF(bad == 0, "%s: %d states whose cached decisions differ from a walk", src ? src : "(any)", bad);
  CHECKF(g->ref_copies >= min_ref, "%s: %u subtrees copied from a reference state, expected >= %u", src ? src : "(any)",
         g->ref_copies, min_ref);
  CHECKF(g->brun_subtrees >= min_brun, "%s: %u subtrees decided by a class run, expected >= %u", src ? src : "(any)",
         g->brun_subtrees, min_brun);
  /* random walks: the matcher's masks (memoised, cached) == masks made afresh */
  size_t words = di_grammar_mask_words(g);
  uint32_t *mask = malloc(words * 4), *ref = malloc(words * 4);
  int32_t *allowed = malloc(sizeof *allowed * (size_t)V);
  int diff = 0;
  for (int w = 0; w < walks; w++) {
    if (w == walks / 2) skips_elsewhere(g);
    di_gmatcher *m = NULL;
    di_gmatcher_new(g, &m, &st);
    for (int k = 0; k < steps; k++) {
      di_gmatcher_fill_mask(m, mask);
      gmatcher_fill_mask_fresh(m, ref);
      if (memcmp(mask, ref, words * 4) && diff++ < 3)
        fprintf(stderr, "%s: walk %d step %d: mask differs from a fresh one\n", src ? src : "(any)", w, k);
      size_t n = 0;
      for (int32_t t = 0; t < V; t++)
        if (mask[t >> 5] >> (t & 31) & 1 && di_tokenizer_token_bytes(tok, t, &(size_t){0}) &&
            !di_tokenizer_is_special(tok, t))
          allowed[n++] = t;
      if (!n) break;
      /* short tokens now and then, so long strings and their bounds are reached */
      int32_t t = allowed[rnd() % n];
      if (rnd() % 2) {
        int32_t u = allowed[rnd() % n];
        size_t lt, lu;
        di_tokenizer_token_bytes(tok, t, &lt);
        di_tokenizer_token_bytes(tok, u, &lu);
        if (lu < lt) t = u;
      }
      CHECK(di_gmatcher_accept_token(m, t));
      if (k > 2 && rnd() % 5 == 0) di_gmatcher_rollback(m, 1 + rnd() % 2);
    }
    di_gmatcher_free(m);
  }
  CHECKF(diff == 0, "%s: %d masks differ from fresh ones", src ? src : "(any)", diff);
  free(mask);
  free(ref);
  free(allowed);
  di_grammar_release(g);
}

static void check_grammar_ws(di_grammar_kind kind, const char *src, int walks, int steps, uint32_t min_ref,
                             di_json_ws ws) {
  check_grammar_run(kind, src, walks, steps, min_ref, 0, ws);
}

static void check_grammar_ref(di_grammar_kind kind, const char *src, int walks, int steps, uint32_t min_ref) {
  check_grammar_ws(kind, src, walks, steps, min_ref, DI_JSON_WS_PYTHON);
}

static void check_grammar(di_grammar_kind kind, const char *src, int walks, int steps) {
  check_grammar_ref(kind, src, walks, steps, 0);
}

int main(void) {
  tok = di_test_tokenizer("llama3");
  if (!tok) {
    fprintf(stderr, "test_grammar_cache: llama3 tokenizer not available\n");
    return 77;
  }
  /* length-bounded strings: chains of states, one per character */
  check_grammar(DI_GRAMMAR_JSON_SCHEMA, "{\"type\":\"string\",\"maxLength\":6}", 6, 12);
  check_grammar(DI_GRAMMAR_JSON_SCHEMA, "{\"type\":\"string\",\"minLength\":3,\"maxLength\":20}", 4, 16);
  check_grammar(DI_GRAMMAR_JSON_SCHEMA, "{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":2}}", 4, 20);
  check_grammar(DI_GRAMMAR_JSON_SCHEMA,
                "{\"type\":\"object\",\"properties\":{\"k\":{\"type\":\"string\",\"minLength\":1},"
                "\"v\":{\"type\":\"string\",\"pattern\":\"^[a-z\\u00e9]{0,3}$\"}},\"required\":[\"k\",\"v\"]}",
                4, 16);
  /* plain strings, escapes and "any JSON" */
  check_grammar(DI_GRAMMAR_JSON_SCHEMA, "{\"type\":\"string\"}", 4, 16);
  check_grammar(DI_GRAMMAR_JSON_ANY, NULL, 4, 16);
  /* byte classes that read control bytes, a chain that ends in a letter class,
   * and a bounded repetition of any character */
  check_grammar(DI_GRAMMAR_GBNF, "root ::= \"<\" [^>]* \">\"", 3, 12);
  check_grammar(DI_GRAMMAR_GBNF, "root ::= [^\\x00-\\x1f\"\\\\]{0,4} [a-z]+", 3, 12);
  check_grammar(DI_GRAMMAR_REGEX, ".{0,7}x", 3, 10);
  check_grammar(DI_GRAMMAR_REGEX, "[ -~]{2,9}", 3, 10);
  /* unanchored patterns: every string character is read, into one of several
   * run-counter states (a set of states closed under string characters);
   * after a string, tokens that close it and read on into the object */
  check_grammar(DI_GRAMMAR_JSON_SCHEMA, "{\"type\":\"string\",\"pattern\":\"[a-z0-9]{5}\"}", 4, 20);
  check_grammar(DI_GRAMMAR_JSON_SCHEMA,
                "{\"type\":\"object\",\"properties\":{\"p\":{\"type\":\"string\",\"pattern\":\"ab|[0-9]{3}\"},"
                "\"q\":{\"type\":\"integer\"},\"r\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}}},"
                "\"required\":[\"p\",\"q\"]}",
                4, 24);
  /* a closed set whose states read some control bytes */
  check_grammar(DI_GRAMMAR_GBNF, "root ::= ( \"a\" [^\\x00-\\x08] | [^a\\x00-\\x08] )* \"\\x05\"", 3, 12);
  /* property names other than the declared ones: the name's states copy the
   * string body's decisions where their walks meet (first characters that
   * start no declared name, and the characters after a declared prefix);
   * names that share prefixes, start with the probe characters, are
   * non-ASCII or prefixes of each other; values under any JSON */
  check_grammar_ref(DI_GRAMMAR_JSON_SCHEMA,
                    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"integer\"},\"nam\":{},"
                    "\"e\":{\"type\":\"string\"},\"xy\":{},\"\u00e9t\u00e9\":{},\"q\\\"t\":{},\" a\":{}}}",
                    4, 24, 10);
  /* (names other than one "id": every key state reads every string
   * character, a closed set, so no reference is needed) */
  check_grammar(DI_GRAMMAR_JSON_SCHEMA,
                "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\",\"maxLength\":3}},"
                "\"additionalProperties\":{\"type\":\"string\"},\"required\":[\"id\"]}",
                4, 24);
  /* a hand-made string whose first character picks a branch: 'a' starts a
   * keyword, '~' ends at once, DEL and other characters lead to the body */
  check_grammar_ref(DI_GRAMMAR_GBNF,
                    "root ::= \"\\\"\" ( \"abc\" | \"~\" | [^a~\"\\\\\\x00-\\x1f] "
                    "([^\"\\\\\\x00-\\x1f] | \"\\\\\" [nt])* ) \"\\\"\"",
                    3, 12, 10);
  /* any JSON whitespace: a whitespace state leaves its rule after every
   * token's leading blanks, so its rests (" xyz" -> "xyz") are tens of
   * thousands, kept in trie order (few first bytes), and walks skip every
   * rest that shares a refused prefix; the strings' rests are sorted */
  check_grammar_ws(DI_GRAMMAR_JSON_SCHEMA,
                   "{\"type\":\"array\",\"minItems\":3,\"items\":{\"type\":\"object\",\"additionalProperties\":false,"
                   "\"required\":[\"name\",\"n\"],\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":12},"
                   "\"n\":{\"type\":\"integer\"}}}}",
                   4, 40, 0, DI_JSON_WS_FREE);
  check_grammar_ws(DI_GRAMMAR_JSON_ANY, NULL, 3, 24, 0, DI_JSON_WS_FREE);
  /* counted runs of an ASCII class that is not every string character (a
   * UUID-like pattern, a printable class under length bounds, a run that
   * cycles, one after a fixed prefix): subtrees of class bytes only are
   * decided from the run's length */
  check_grammar_run(DI_GRAMMAR_JSON_SCHEMA,
                    "{\"type\":\"string\",\"pattern\":\"^[0-9A-Za-z]{8}-[0-9A-Za-z]{4}-[0-9a-f]{2}$\"}", 4, 24, 0, 20,
                    DI_JSON_WS_PYTHON);
  check_grammar_run(DI_GRAMMAR_JSON_SCHEMA,
                    "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\",\"pattern\":"
                    "\"^[ !#-\\\\[\\\\]-}]+$\",\"minLength\":5,\"maxLength\":9},\"s\":{\"type\":\"string\","
                    "\"pattern\":\"^[a-z_]+$\",\"minLength\":3}},\"required\":[\"id\",\"s\"]}",
                    4, 32, 0, 20, DI_JSON_WS_PYTHON);
  check_grammar_run(DI_GRAMMAR_REGEX, "v[0-9]{1,6}\\.[a-zA-Z]*", 3, 16, 0, 5, DI_JSON_WS_PYTHON);
  di_tokenizer_free(tok);
  return di_test_finish("test_grammar_cache");
}
