/* Tokenizers that reproduce Hugging Face `tokenizers` id for id: loaded from
 * tokenizer.json (+ tokenizer_config.json / chat_template.jinja /
 * generation_config.json beside it) or from GGUF tokenizer metadata.
 *
 * A di_tokenizer is immutable after load and safe to use from many threads at
 * once (encode/decode take it const; the BPE word cache is internally locked).
 * All returned arrays/strings from encode/decode are malloc'ed; free() them. */
#ifndef DI_TOKENIZER_H
#define DI_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/gguf.h"
#include "util/status.h"

typedef struct di_tokenizer di_tokenizer;

/* path: a tokenizer.json file, a directory holding one (and optionally
 * tokenizer_config.json, chat_template.jinja, generation_config.json), or a
 * .gguf file. Errors name the file and the JSON key or byte offset at fault. */
di_code di_tokenizer_load(const char *path, di_tokenizer **out, di_status *st);
di_code di_tokenizer_from_gguf(const di_gguf *g, di_tokenizer **out, di_status *st);
/* From in-memory JSON texts (used by the fuzzer and tests). config may be NULL. */
di_code di_tokenizer_from_json(const char *tokenizer_json, size_t len, const char *config_json,
                               size_t config_len, di_tokenizer **out, di_status *st);
void di_tokenizer_free(di_tokenizer *t);

/* Which added tokens may be recognised in a piece of text.
 *  NONE        no added token at all: the text is plain text (safe for user content)
 *  NONSPECIAL  only added tokens flagged special=false (HF `encode_special_tokens=True`)
 *  ALL         every added token (HF default `encode`) */
typedef enum di_tok_parse {
  DI_TOK_PARSE_NONE = 0,
  DI_TOK_PARSE_NONSPECIAL = 1,
  DI_TOK_PARSE_ALL = 2,
} di_tok_parse;

/* Encodes UTF-8 text. add_special applies the post-processor (BOS/EOS as the
 * tokenizer defines). parse_special=true is HF's default encode; false is HF
 * with encode_special_tokens=True (special=true tokens are not matched, the
 * non-special added tokens still are). Invalid UTF-8 is rejected with
 * DI_ERR_INVALID and the byte offset in the message. *ids is malloc'ed. */
di_code di_tokenizer_encode(const di_tokenizer *t, const char *text, size_t len, bool add_special,
                            bool parse_special, int32_t **ids, size_t *n, di_status *st);

/* Encodes the concatenation of spans exactly as HF would encode the joined
 * text, except that an added token is recognised only if it lies wholly inside
 * one span whose mode allows it. Text between recognised tokens forms one
 * segment even across span boundaries, so assembling a prompt from template
 * spans (ALL) and content spans (NONE) gives the ids of the whole prompt. */
typedef struct di_tok_span {
  const char *text;
  size_t len;
  di_tok_parse parse;
} di_tok_span;
di_code di_tokenizer_encode_spans(const di_tokenizer *t, const di_tok_span *spans, size_t n_spans,
                                  bool add_special, int32_t **ids, size_t *n, di_status *st);

/* Full decode (HF `decode`). skip_special drops special=true ids only.
 * Ids outside the vocabulary are an error (DI_ERR_RANGE naming the index).
 * *out is malloc'ed and NUL-terminated (len excludes the NUL). */
di_code di_tokenizer_decode(const di_tokenizer *t, const int32_t *ids, size_t n, bool skip_special,
                            char **out, size_t *len, di_status *st);

/* Streaming detokenizer for one request. Each push returns the newly
 * completed text (never a partial UTF-8 character); the concatenation of all
 * pushes plus the final flush equals di_tokenizer_decode of all ids. The
 * returned pointer is valid until the next call on the stream. */
typedef struct di_detok_stream di_detok_stream;
di_code di_detok_stream_new(const di_tokenizer *t, bool skip_special, di_detok_stream **out,
                            di_status *st);
di_code di_detok_stream_push(di_detok_stream *s, int32_t id, const char **text, size_t *len,
                             di_status *st);
di_code di_detok_stream_flush(di_detok_stream *s, const char **text, size_t *len, di_status *st);
void di_detok_stream_free(di_detok_stream *s);

/* Accessors. Ids are in [0, n_vocab). */
int32_t di_tokenizer_n_vocab(const di_tokenizer *t);
/* A number no other tokenizer of this process has had or will have: caches
 * of data derived from a tokenizer key on it, since a freed tokenizer's
 * address can come back for a different one. */
uint64_t di_tokenizer_serial(const di_tokenizer *t);
int32_t di_tokenizer_bos(const di_tokenizer *t); /* -1 if none */
/* End-of-generation ids: eos_token plus generation_config eos ids, GGUF
 * eot/eom ids and the usual end-of-turn tokens (<|eot_id|>, <end_of_turn>,
 * <|im_end|>, <|return|> ...) the vocabulary has. Returns the count. */
size_t di_tokenizer_eos(const di_tokenizer *t, const int32_t **ids);
bool di_tokenizer_add_bos(const di_tokenizer *t); /* whether add_special adds BOS */
/* The vocabulary string of id (e.g. "Ġhello", "▁the", "<0x0A>"), NULL if out of range. */
const char *di_tokenizer_token_text(const di_tokenizer *t, int32_t id, size_t *len);
/* The bytes id decodes to on its own (ByteLevel unmapped, "▁" -> " ", <0xNN>
 * -> one byte); may be an incomplete UTF-8 sequence. For grammar masks. */
const char *di_tokenizer_token_bytes(const di_tokenizer *t, int32_t id, size_t *len);
bool di_tokenizer_is_special(const di_tokenizer *t, int32_t id); /* special=true / GGUF control */
bool di_tokenizer_is_added(const di_tokenizer *t, int32_t id);
int32_t di_tokenizer_find(const di_tokenizer *t, const char *text, size_t len); /* -1 if absent */
/* The chat template: name NULL = "default" (or the only one); NULL if none. */
const char *di_tokenizer_chat_template(const di_tokenizer *t, const char *name);
/* Text of a named special token from tokenizer_config.json / GGUF
 * ("bos_token", "eos_token", "pad_token", "unk_token"); NULL if unset. */
const char *di_tokenizer_special_text(const di_tokenizer *t, const char *name);

/* true if s[0..len) is valid UTF-8 (no overlongs, surrogates, > U+10FFFF);
 * otherwise false and *bad_offset = offset of the first invalid byte. */
bool di_utf8_valid(const char *s, size_t len, size_t *bad_offset);

#endif
