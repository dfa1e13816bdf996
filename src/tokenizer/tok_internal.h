/* Internal structures shared by the tokenizer files. The pipeline mirrors HF
 * `tokenizers`: added tokens split the raw text, each remaining segment is
 * normalized, pre-tokenized into pieces, and each piece is run through the
 * model (BPE, or SentencePiece score merging for GGUF "llama" vocabularies).
 * Byte-level tokenizers keep their vocabulary as raw bytes (the GPT-2
 * byte->char map is undone at load), so the hot path never re-encodes text. */
#ifndef DI_TOKENIZER_INTERNAL_H
#define DI_TOKENIZER_INTERNAL_H

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tokenizer.h"

/* ---- growable buffers ---- */
typedef struct di_buf {
  char *p;
  size_t n, cap;
} di_buf;
bool di_buf_reserve(di_buf *b, size_t extra);
bool di_buf_put(di_buf *b, const void *s, size_t n);
static inline bool di_buf_putc(di_buf *b, char c) { return di_buf_put(b, &c, 1); }

typedef struct di_ivec {
  int32_t *p;
  size_t n, cap;
} di_ivec;
bool di_ivec_push(di_ivec *v, int32_t x);

/* A piece of text: [off, off+len) into some buffer. */
typedef struct di_span {
  size_t off, len;
} di_span;
typedef struct di_spanvec {
  di_span *p;
  size_t n, cap;
} di_spanvec;
bool di_spanvec_push(di_spanvec *v, size_t off, size_t len);

/* ---- hash maps ---- */
uint64_t di_tok_hash(const void *p, size_t n);

/* bytes -> int32; keys live in the tokenizer's string pool (off/len). */
typedef struct di_smap_slot {
  uint32_t hash;
  int32_t val; /* -1 = empty */
  uint32_t koff, klen;
} di_smap_slot;
typedef struct di_smap {
  di_smap_slot *slots;
  size_t cap, n;
  const char *const *pool; /* points at the owner's pool pointer (it may move) */
} di_smap;
bool di_smap_init(di_smap *m, size_t expect, const char *const *pool);
void di_smap_free(di_smap *m);
/* Inserts if absent; returns false only on OOM. *existing is the old value or -1. */
bool di_smap_put(di_smap *m, uint32_t koff, uint32_t klen, int32_t val, int32_t *existing);
int32_t di_smap_get(const di_smap *m, const char *k, size_t n);

/* (left id, right id) -> (rank, merged id) */
typedef struct di_pmap_slot {
  uint64_t key; /* UINT64_MAX = empty */
  int32_t rank, id;
} di_pmap_slot;
typedef struct di_pmap {
  di_pmap_slot *slots;
  size_t cap, n;
} di_pmap;
bool di_pmap_init(di_pmap *m, size_t expect);
void di_pmap_free(di_pmap *m);
bool di_pmap_put(di_pmap *m, int32_t a, int32_t b, int32_t rank, int32_t id); /* first wins */
static inline const di_pmap_slot *di_pmap_get(const di_pmap *m, int32_t a, int32_t b) {
  if (!m->cap) return NULL;
  uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
  uint64_t h = key * 0x9E3779B97F4A7C15ull;
  size_t mask = m->cap - 1, i = (size_t)(h >> 20) & mask;
  for (;;) {
    const di_pmap_slot *s = &m->slots[i];
    if (s->key == key) return s;
    if (s->key == UINT64_MAX) return NULL;
    i = (i + 1) & mask;
  }
}

/* ---- UTF-8 ---- */
/* Decodes one code point of a VALID UTF-8 string; returns its length. */
static inline int di_utf8_len(unsigned char c) {
  return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}
int32_t di_utf8_decode(const char *s, size_t n, int *len); /* valid input only */
int di_utf8_encode(uint32_t cp, char out[4]);
bool di_uni_is_whitespace(int32_t cp); /* Rust char::is_whitespace (White_Space) */
bool di_uni_is_numeric(int32_t cp);    /* Rust char::is_numeric (Nd, Nl, No) */
bool di_uni_is_punct(int32_t cp);      /* ASCII punctuation or category P* */
bool di_uni_is_alnum(int32_t cp);      /* Rust char::is_alphanumeric */

/* GPT-2 byte<->char map. */
extern const uint16_t di_bytelevel_char[256]; /* byte -> code point */
int di_bytelevel_byte(int32_t cp);            /* code point -> byte, -1 if unmapped */

/* ---- normalizers ---- */
typedef enum {
  DI_NORM_NFC, DI_NORM_NFD, DI_NORM_NFKC, DI_NORM_NFKD, DI_NORM_LOWER, DI_NORM_REPLACE,
  DI_NORM_PREPEND, DI_NORM_STRIP, DI_NORM_STRIP_ACCENTS,
} di_norm_kind;
typedef struct di_norm {
  di_norm_kind kind;
  char *a, *b; /* Replace: pattern/content (pattern NULL if regex); Prepend: a */
  size_t alen, blen;
  pcre2_code *re;
  bool left, right; /* Strip */
} di_norm;

/* ---- pre-tokenizers ---- */
typedef enum {
  DI_PRE_SPLIT, DI_PRE_BYTELEVEL, DI_PRE_DIGITS, DI_PRE_METASPACE, DI_PRE_PUNCT,
  DI_PRE_WHITESPACE, DI_PRE_WSSPLIT, DI_PRE_BERT,
} di_pre_kind;
typedef enum {
  DI_SPLIT_REMOVED, DI_SPLIT_ISOLATED, DI_SPLIT_MERGED_PREV, DI_SPLIT_MERGED_NEXT,
  DI_SPLIT_CONTIGUOUS,
} di_split_behavior;
typedef struct di_pre {
  di_pre_kind kind;
  di_split_behavior behavior;
  bool invert;
  pcre2_code *re;   /* Split regex / ByteLevel regex / Whitespace */
  char *lit;        /* Split string pattern / Metaspace replacement */
  size_t litlen;
  bool add_prefix_space, individual_digits, ms_split;
  int prepend_scheme; /* Metaspace: 0 always, 1 first, 2 never */
} di_pre;

/* ---- decoder plan (see decode.c) ---- */
typedef struct di_dec_replace {
  char *from, *to;
  size_t flen, tlen;
} di_dec_replace;

/* ---- added tokens ---- */
typedef struct di_added {
  int32_t id;
  uint32_t off, len; /* content in pool (normalized form for normalized tokens) */
  bool special, lstrip, rstrip, single_word, normalized;
} di_added;

typedef struct di_trie {
  /* node 0 is the root; children found through a hash of (node, byte). */
  uint32_t *keys; /* (node << 8 | byte) + 1, 0 = empty */
  uint32_t *vals; /* child node */
  size_t cap, n_nodes;
  int32_t *term;       /* per node: index into added[] or -1 */
  size_t term_cap;
  uint8_t first[32];   /* bitmap of first bytes */
  size_t n_entries;
} di_trie;

enum { DI_MODEL_BPE = 0, DI_MODEL_SPM = 1 };

enum {
  DI_TF_SPECIAL = 1,
  DI_TF_ADDED = 2,
  DI_TF_BYTE = 4,    /* <0xNN> byte-fallback token */
  DI_TF_PRESENT = 8, /* id is defined */
  DI_TF_CONTROL = 16,
  DI_TF_NOSKIP = 32, /* special, but HF's skip_special_tokens misses it (see load_json.c) */
};

typedef struct di_bpe_cache di_bpe_cache;

struct di_tokenizer {
  uint64_t serial; /* process-unique, never reused (di_tokenizer_serial) */
  int32_t n_vocab;
  char *pool;
  size_t pool_len, pool_cap;
  /* per id */
  uint32_t *text_off, *text_len;   /* vocab string as written in the file */
  uint32_t *bytes_off, *bytes_len; /* what the id decodes to on its own */
  uint8_t *flags;
  uint8_t *byteval;
  float *scores;     /* SPM only */
  uint32_t *spm_rank; /* SPM: merge priority of each piece (higher score = lower rank) */

  /* model */
  int model;
  bool byte_level; /* initial symbols are bytes; model keys are raw bytes */
  bool byte_fallback, fuse_unk, ignore_merges;
  int32_t unk_id;
  int32_t byte_sym[256]; /* byte-level: id of each single byte; fallback: <0xNN> id */
  di_smap model_map;     /* model key bytes -> id (model vocab only) */
  di_smap text_map;      /* vocab string -> id (model vocab + added) */
  di_pmap merges;
  size_t max_token_len;

  /* added tokens */
  di_added *added;
  size_t n_added;
  di_trie trie_raw, trie_norm;

  di_norm *norms;
  size_t n_norms;
  di_pre *pres;
  size_t n_pres;

  /* post-processor: single-sequence template; -1 marks the sequence itself */
  int32_t *post;
  size_t n_post;
  bool post_has_bos;

  /* decoder plan */
  bool dec_none; /* no decoder: tokens joined by " " */
  bool dec_bytelevel, dec_byte_fallback;
  int dec_strip_start;        /* chars of dec_strip_char stripped from the start of the output */
  int32_t dec_strip_char;
  bool dec_metaspace_first;   /* Metaspace: drop the first token's leading space */
  di_dec_replace *dec_repl;   /* per-token string replacements, in order */
  size_t n_dec_repl;

  /* config */
  int32_t bos_id;
  int32_t *eos;
  size_t n_eos;
  bool add_bos;
  char *special_text[4]; /* bos, eos, pad, unk */
  char **tmpl_names, **tmpls;
  size_t n_tmpl;

  di_bpe_cache *cache;
};

/* pool helpers */
bool di_tok_pool_add(di_tokenizer *t, const char *s, size_t n, uint32_t *off);
static inline const char *di_tok_pool(const di_tokenizer *t, uint32_t off) { return t->pool + off; }

/* construction steps shared by the JSON and GGUF loaders */
di_tokenizer *di_tok_alloc(void);
di_code di_tok_set_vocab_size(di_tokenizer *t, int32_t n, di_status *st);
di_code di_tok_finish(di_tokenizer *t, di_status *st); /* derived tables, trie, token bytes */
di_code di_tok_add_eos(di_tokenizer *t, int32_t id);
pcre2_code *di_tok_compile_regex(const char *pat, size_t len, di_status *st, const char *what);
di_code di_tok_add_template(di_tokenizer *t, const char *name, const char *text, size_t len,
                            bool replace);
di_code di_tok_load_generation_config(di_tokenizer *t, const char *json, size_t len);
di_code di_tok_load_config(di_tokenizer *t, const char *cfg, size_t len, const char *name,
                           di_status *st);

/* trie */
bool di_trie_add(di_trie *tr, const char *s, size_t n, int32_t idx);
void di_trie_free(di_trie *tr);
/* Longest added-token match starting exactly at s[0]; returns index into added[] or -1. */
int32_t di_trie_longest(const di_trie *tr, const char *s, size_t n, size_t *mlen);

/* normalize.c */
di_code di_tok_normalize(const di_tokenizer *t, const char *s, size_t n, di_buf *out,
                         di_status *st);
/* pretok.c: splits s into pieces (spans into *buf, which may be rewritten). */
di_code di_tok_pretokenize(const di_tokenizer *t, di_buf *buf, bool at_start, di_spanvec *out,
                           di_status *st);
/* bpe.c */
di_code di_tok_model_encode(const di_tokenizer *t, const char *w, size_t n, di_ivec *out,
                            di_status *st);
di_bpe_cache *di_bpe_cache_new(void);
void di_bpe_cache_free(di_bpe_cache *c);

#endif
