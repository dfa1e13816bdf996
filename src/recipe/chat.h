/* Chat templates and injection-proof prompt assembly.
 *
 * A template (the Jinja2 `chat_template` of tokenizer_config.json,
 * chat_template.jinja or GGUF `tokenizer.chat_template`) is compiled once;
 * unsupported constructs fail here with line:column. Rendering follows
 * transformers' apply_chat_template byte for byte and records which output
 * bytes came from message/tool data ("content") and which from the template.
 * Assembly then lets only template bytes become special tokens: content is
 * tokenized as plain text, so `<|im_start|>` typed by a user stays text.
 *
 * Thread safety: a compiled template is immutable; renders may run on many
 * threads at once. */
#ifndef DI_RECIPE_CHAT_H
#define DI_RECIPE_CHAT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/status.h"

typedef struct di_tokenizer di_tokenizer;
typedef struct di_chat_template di_chat_template;

/* src need not be NUL-terminated; it must be valid UTF-8. */
di_code di_chat_template_compile(const char *src, size_t len, di_chat_template **out, di_status *st);
void di_chat_template_free(di_chat_template *t);

/* A run of output bytes: content=true when they came from messages/tools/kwargs data. */
typedef struct di_render_span {
  size_t off, len;
  bool content;
} di_render_span;

typedef struct di_render_out {
  char *text; /* malloc'ed, NUL-terminated */
  size_t len;
  di_render_span *spans; /* cover text in order */
  size_t n_spans;
} di_render_out;
void di_render_out_free(di_render_out *o);

typedef struct di_chat_opts {
  const json_t *tools;        /* list of {"type":"function","function":{...}}, or NULL */
  bool add_generation_prompt;
  const json_t *kwargs;       /* object of extra template variables, or NULL */
  const char *bos_token;      /* NULL = undefined in the template */
  const char *eos_token;
  bool kwargs_trusted;        /* false (default): strings in kwargs count as content */
  int64_t now;                /* strftime_now clock as UTC seconds; 0 = the real local time */
  size_t max_output;          /* bytes; 0 = 8 MiB */
  size_t max_memory;          /* arena bytes per render; 0 = 256 MiB */
  uint64_t max_steps;         /* evaluation steps; 0 = 20 million */
  int max_depth;              /* macro call depth; 0 = 64 */
} di_chat_opts;

/* Renders messages (a JSON array of message objects) as transformers 5 does:
 * message keys whose value is null are dropped, and reasoning fields are
 * aliased (reasoning_content/thinking/reasoning). Every string in messages and
 * tools must be valid UTF-8 (else DI_ERR_INVALID naming the field and byte
 * offset). Template errors come back as DI_ERR_INVALID with the Python/Jinja
 * error text ("TemplateError: ...", "UndefinedError: ..."); exceeded limits
 * as DI_ERR_RANGE or DI_ERR_NOMEM. o may be NULL (all defaults). */
di_code di_chat_render_ex(const di_chat_template *t, const json_t *messages, const di_chat_opts *o,
                          di_render_out *out, di_status *st);
di_code di_chat_render(const di_chat_template *t, const json_t *messages, const json_t *tools,
                       bool add_generation_prompt, const json_t *kwargs, const char *bos,
                       const char *eos, di_render_out *out, di_status *st);

/* Token ids of a render, without BOS/EOS added on top of the template's own
 * (like apply_chat_template(tokenize=True)). Only template bytes may form
 * added tokens; content bytes are plain text, except runs of whitespace/"▁"
 * in content, which may still match the non-special whitespace pieces some
 * vocabularies add (Gemma's "\n\n"), so benign prompts get Hugging Face's
 * exact ids. allow_special_in_content restores HF's naive behaviour (every
 * added token recognised anywhere) for trusted callers. *ids is malloc'ed. */
di_code di_chat_assemble_ids(const di_tokenizer *tok, const di_render_out *r, bool allow_special_in_content,
                             int32_t **ids, size_t *n, di_status *st);

/* Splits a model's output into reasoning and answer around open/close tags
 * (NULL = "<think>" / "</think>"). Templates that end the prompt with the open
 * tag make models emit only the close tag, so a close without an open counts
 * everything before it as reasoning; an open without a close (still thinking,
 * or cut off) makes the rest reasoning. Pointers alias text. */
typedef struct di_reasoning_split {
  const char *reasoning;
  size_t reasoning_len;
  const char *content;
  size_t content_len;
  bool found; /* false: no tags, content = all of text */
} di_reasoning_split;
void di_recipe_split_reasoning(const char *text, size_t len, const char *open, const char *close,
                               di_reasoning_split *out);

/* true if s[0..len) is valid UTF-8 (no overlongs, surrogates, > U+10FFFF, stray or
 * truncated sequences); else false with *bad = offset of the first bad byte. */
bool di_recipe_utf8_valid(const char *s, size_t len, size_t *bad);

#endif
