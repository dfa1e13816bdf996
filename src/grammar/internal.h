/* Shared internals of the grammar engine (compiled grammar, vocabulary trie,
 * per-state token caches). */
#ifndef DI_GRAMMAR_INTERNAL_H
#define DI_GRAMMAR_INTERNAL_H

#include <pthread.h>

#include "grammar/automaton.h"
#include "grammar/grammar.h"
#include "grammar/gx.h"
#include "grammar/pool.h"

/* The vocabulary as a byte trie in depth-first preorder, built once per
 * tokenizer. Special tokens and tokens without bytes are left out (never
 * allowed by a grammar; end of generation is handled apart). */
typedef struct gvocab {
  uint64_t tok_serial; /* the tokenizer it was built from (di_tokenizer_serial) */
  int32_t n_vocab;
  uint32_t n_nodes;
  uint32_t root[256]; /* per byte: the root's child that reads it, or UINT32_MAX */
  uint8_t *byte;    /* per node: the byte that enters it */
  uint16_t *depth;  /* per node: 1 = child of the root */
  uint32_t *end;    /* per node: index just past its subtree */
  uint32_t *t_off;  /* per node: tokens ending here are sorted[t_off .. t_off + t_n) */
  uint16_t *t_n;
  int32_t *sorted;  /* token ids in byte order */
  uint16_t *sorted_lcp; /* per sorted position: bytes shared with the previous token */
  uint32_t *tok_cum;   /* per node (+1): tokens of earlier nodes; subtree j's tokens are
                          sorted[tok_cum[j] .. tok_cum[end[j]]) */
  uint32_t *rare_cum;  /* per node (+1): earlier "rare" nodes (see vocab.c) */
  uint8_t *u8;         /* per node: UTF-8 decoding state after it, from the token's start */
  uint32_t *spec_cum;  /* per node (+1): earlier "special" nodes: '"', '\\' or invalid UTF-8 */
  uint8_t *ccn;        /* per node: characters completed from the token's start (saturating) */
  uint8_t *mcc;        /* per node: the most characters of a token in its subtree (partial: 1) */
  uint8_t *cct;        /* per sorted position: the token's characters (a partial last one: 1) */
  uint32_t max_cc;     /* the most characters of a plain token */
  uint32_t **plain;    /* [K], K <= max_cc: bitmap of the plain tokens (no rare node from the
                          start) of at most K characters */
  uint32_t *pos;       /* per token id: its index in sorted (tokens left out: UINT32_MAX) */
  const uint8_t **tb; /* per token id: bytes (NULL if left out) */
  uint32_t *tlen;
  int32_t *eos;
  size_t n_eos;
  uint32_t max_len;
} gvocab;

const gvocab *gvocab_get(const di_tokenizer *tok, di_status *st);
enum { U8_BOUNDARY = 0, U8_INVALID = 1 }; /* gvocab.u8 values (others: inside a character) */

/* An order of a cache's entries parted where their rests' first bytes part
 * (lcp 0): group i is entries k[i] .. k[i + 1] (k[n] = the entry count), all
 * of first byte b[i] (256: an empty rest). A mask refuses a group whose first
 * byte the caller's stacks cannot read without loading its entries: between
 * two forwards those come from memory, and most groups are refused (a
 * free-whitespace state's rests part into ~150 groups; the caller reads one
 * or two of their first bytes). */
typedef struct ggroups {
  uint32_t *k;
  uint16_t *b;
  uint32_t n;
  /* per group, atomic: its skips (the order's nx) are NX_NONE, NX_BUILDING or
   * NX_READY; NULL: all ready. Trie order builds a group's skips when a mask
   * first walks it: most groups are never walked, and a free-whitespace
   * state's ~33K entries cost as much to index as to list. */
  uint8_t *nx_ready;
} ggroups;
enum { NX_NONE, NX_BUILDING, NX_READY };

/* The skips of order nx (lcp: its rest lcps) within group i of gr, built now
 * if no thread has; NULL while another thread builds them (the caller steps
 * entry by entry: the skips only save steps). */
const uint32_t *ggroups_nx(const ggroups *gr, uint32_t i, const uint16_t *lcp, uint32_t *nx);

/* What a state decides about every token without knowing the stack below:
 * accepted whatever the context, rejected whatever the context, or
 * uncertain (the token finishes the state's rule and reads on into the
 * caller), checked against the real stack at mask time. */
typedef struct gcache {
  uint32_t *acc_bits;  /* dense accepted set, or NULL */
  int32_t *acc_list;   /* sparse accepted set */
  uint32_t n_acc;
  int32_t *unc;        /* uncertain tokens in trie order (node-by-node walks only, for tests) */
  uint16_t *unc_lcp;   /* bytes shared with the previous uncertain token */
  uint32_t n_unc;
  /* Where the uncertain tokens leave the rule: one entry (token, j) per
   * byte count j after which the walk from the state returned from its rule
   * (a token may leave at several), in trie order. An uncertain token is
   * accepted on a real stack iff for one of its entries the caller's stack
   * reads the rest of the token (its bytes from j), so masks walk those
   * rests, not whole tokens. */
  int32_t *ent_tok;
  uint16_t *ent_j;
  uint16_t *ent_lcp; /* bytes of rest shared with the previous entry's */
  uint32_t *ent_nx;  /* next smaller of ent_lcp within each group (grp.nx_ready) */
  uint32_t n_ent;
  uint32_t n_ent_groups; /* entries whose rest shares no byte with the previous one's */
  ggroups grp;           /* trie order's groups */
  /* The entries ordered by their rests, built by the second mask that uses
   * this cache (a first use should cost no sort; caches are shared between
   * threads, hence atomics): sorted walks share the rests' prefixes. */
  struct gsx *sx; /* atomic; NULL until built */
  int sx_state;   /* atomic: uses so far, or -1 once a thread builds sx */
  bool shared; /* owned by the process-wide cache, not by a grammar */
} gcache;

typedef struct gsx {
  int32_t *tok;
  uint16_t *j, *lcp; /* lcp: bytes of rest shared with the previous entry's */
  uint32_t *nx;      /* gcache_next_smaller of lcp */
  ggroups grp;
} gsx;

/* nx[k]: the first i > k with lcp[i] < lcp[k], or n. A walk that finds no
 * stack reading the first d bytes of entry k's rest skips every following
 * entry that shares them: from i = k + 1, while lcp[i] >= d, i = nx[i]. */
uint32_t *gcache_next_smaller(const uint16_t *lcp, uint32_t n);
/* The same for k in [lo, hi) into nx, with hi in place of n. */
void gcache_next_smaller_range(const uint16_t *lcp, uint32_t *nx, uint32_t lo, uint32_t hi);

/* The sorted entries of c (NULL: not built yet; the caller walks trie order). */
const gsx *gcache_sorted(const gvocab *v, gcache *c);

struct di_grammar {
  int refs;
  uint64_t key[2];
  ga a;
  const gvocab *v;
  pthread_mutex_t mu; /* guards cache[] and scratch */
  gcache **cache;     /* per automaton state, filled on first use */
  gp scratch;
  size_t cache_bytes;
  int32_t *local; /* per state, -1: scratch numbering for state keys */
  int16_t *chain; /* per state: string-character chain length (mask.c), allocated on first use */
  int32_t *cstep;  /* per state: mask.c's char_step + 2 (0: unknown), allocated on first use */
  uint32_t *brun;  /* per state: mask.c's ASCII class run (0: unknown, 1: none), allocated on first use */
  uint32_t *rule_n;      /* per rule: its states, counted on first use; UINT32_MAX once a state of it
                            reached too many to be shared (cache_share.c) */
  uint32_t *acc_scratch; /* mask.c: a vocabulary bitmap, all zero between uses */
  uint32_t *tw_scratch;  /* mask.c: its words that a walk set */
  uint32_t ref_copies; /* trie subtrees whose decisions mask.c copied from a reference state (tests) */
  uint32_t brun_subtrees; /* trie subtrees mask.c decided by an ASCII class run (tests) */
  /* Whole masks by the matcher configuration they were made for (the stacks
   * as state sequences, and whether the output is complete): a mask is a
   * function of that alone, and decoding revisits the same configuration
   * token after token (inside a string, a number, ...). Direct-mapped. */
  struct gmemo *memo; /* MEMO_SLOTS entries, allocated on first use */
};

enum { MEMO_SLOTS = 64 };
typedef struct gmemo {
  uint64_t k0, k1; /* 0, 0: empty */
  uint32_t *mask;
} gmemo;

/* A state's cache, computed on first use or shared with another grammar of
 * the same structure (cache_share.c); _locked: the caller holds g->mu. */
const gcache *grammar_state_cache(di_grammar *g, int32_t state);
const gcache *grammar_state_cache_locked(di_grammar *g, int32_t state);
/* One state's context-free walk of the vocabulary trie (mask.c); the caller
 * holds g->mu. */
gcache *grammar_state_compute(di_grammar *g, int32_t state, bool shortcuts);
void gcache_free(gcache *c);
/* A state's decisions computed afresh, not cached (tests: with and without
 * the whole-subtree shortcuts, which must agree); free with gcache_free. */
gcache *grammar_state_cache_fresh(di_grammar *g, int32_t state, bool shortcuts);
/* The mask from node-by-node walks made now, bypassing every cache (tests). */
void gmatcher_fill_mask_fresh(di_gmatcher *m, uint32_t *mask);

enum { CHAIN_INF = 255 }; /* "at least 255": more than any token has characters */

static inline bool plain_state(const ga *a, int32_t s) { return s >= 0 && !a->st[s].final && !a->st[s].c_n; }

/* Runs over an ASCII byte class that is not every string character (class_run.c): a
 * pattern's counted class (`[0-9A-Za-z]{8}`, a printable class under
 * minLength/maxLength). From a plain state t, every byte of class C leads to
 * one next plain state, K times, and then to a state that reads no byte of C
 * (or the run cycles: K infinite); the tokens below a trie node that read
 * only C bytes after it are then accepted iff they have at most K of them,
 * without a walk. Per class and vocabulary, prefix counts over the trie's
 * nodes of those whose byte is outside C make "this subtree reads only C"
 * one subtraction. A state that heads a run itself needs no walk of the
 * class's paths at all: the tokens of class bytes only are accepted by
 * length (listed shortest first), and only the subtrees where a path first
 * leaves the class (exits: a few hundred for [0-9A-Za-z] in a 128K
 * vocabulary) are walked, from the run's state at that depth. These tables
 * are built once per process for a few classes. */
typedef struct brun_cls {
  const gvocab *v;
  uint64_t m[2]; /* the class over bytes 0..127 */
  uint32_t *out_cum; /* per node (+1): earlier nodes whose byte is outside the class */
  uint32_t *exit, n_exit; /* nodes outside the class whose path before them is inside it, in preorder */
  int32_t *tok;           /* the tokens of class bytes only, shortest first */
  uint32_t *len_end;      /* per length L <= max_len: how many of them have at most L bytes */
} brun_cls;

static inline bool brun_in(const uint64_t m[2], unsigned b) { return b < 128 && (m[b >> 6] >> (b & 63) & 1); }

/* t's run: the class is the ASCII bytes that take t to its most common ASCII
 * successor, if at least 8 do; *K as above. NULL: none. Caller holds g->mu. */
const brun_cls *grammar_class_run(di_grammar *g, int32_t t, int *K);

/* Front ends: build the rules into g and return the root rule, or -1 with st set. */
int32_t gfe_json_schema(gx *g, const char *src, size_t len, const di_grammar_opts *o, di_status *st);
int32_t gfe_json_any(gx *g, const di_grammar_opts *o);
int32_t gfe_regex(gx *g, const char *src, size_t len, di_status *st);
int32_t gfe_gbnf(gx *g, const char *src, size_t len, di_status *st);

#endif
