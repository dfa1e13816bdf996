/* Injection-proof assembly: a render's bytes -> token ids, where only
 * template bytes may form added tokens. The tokenizer matches added tokens
 * per span and joins the text between matches into one segment across span
 * boundaries, so a benign prompt gets exactly Hugging Face's ids. */
#include <stdlib.h>
#include <string.h>

#include "recipe/chat.h"
#include "tokenizer/tokenizer.h"

/* Whitespace and SentencePiece's "▁": the only content runs allowed to match
 * (non-special) added tokens, because such pieces carry no control meaning
 * and Gemma-style vocabularies add them ("\n\n", "▁▁"). */
static size_t ws_len(const char *s, size_t i, size_t n) {
  char c = s[i];
  if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f') return 1;
  if (n - i >= 3 && (unsigned char)c == 0xE2 && (unsigned char)s[i + 1] == 0x96 && (unsigned char)s[i + 2] == 0x81)
    return 3;
  return 0;
}

di_code di_chat_assemble_ids(const di_tokenizer *tok, const di_render_out *r, bool allow_special_in_content,
                             int32_t **ids, size_t *n, di_status *st) {
  *ids = NULL;
  *n = 0;
  size_t len = r->len;
  uint8_t *mode = malloc(len + 1);
  if (!mode) return di_errorf(st, DI_ERR_NOMEM, "prompt assembly: out of memory");
  uint8_t *content = malloc(len + 1);
  if (!content) {
    free(mode);
    return di_errorf(st, DI_ERR_NOMEM, "prompt assembly: out of memory");
  }
  memset(content, 0, len + 1);
  for (size_t k = 0; k < r->n_spans; k++) {
    const di_render_span *sp = &r->spans[k];
    if (sp->off > len || sp->len > len - sp->off) {
      free(mode);
      free(content);
      return di_errorf(st, DI_ERR_INVALID, "prompt assembly: span %zu outside the text", k);
    }
    if (sp->content) memset(content + sp->off, 1, sp->len);
  }
  for (size_t i = 0; i < len; i++)
    mode[i] = allow_special_in_content || !content[i] ? DI_TOK_PARSE_ALL : DI_TOK_PARSE_NONE;
  if (!allow_special_in_content) {
    /* a whitespace run that touches content is matched as HF would, but only
     * against non-special pieces */
    for (size_t i = 0; i < len;) {
      size_t w = ws_len(r->text, i, len);
      if (!w) { i++; continue; }
      size_t j = i;
      bool touches = false;
      while (j < len && (w = ws_len(r->text, j, len))) {
        for (size_t k = 0; k < w; k++) touches |= content[j + k] != 0;
        j += w;
      }
      if (touches) memset(mode + i, DI_TOK_PARSE_NONSPECIAL, j - i);
      i = j;
    }
  }
  size_t ns = 0;
  for (size_t i = 0; i < len; i++) ns += i == 0 || mode[i] != mode[i - 1];
  di_tok_span *spans = malloc((ns ? ns : 1) * sizeof *spans);
  if (!spans) {
    free(mode);
    free(content);
    return di_errorf(st, DI_ERR_NOMEM, "prompt assembly: out of memory");
  }
  ns = 0;
  for (size_t i = 0; i < len; i++) {
    if (i == 0 || mode[i] != mode[i - 1]) {
      spans[ns].text = r->text + i;
      spans[ns].len = 0;
      spans[ns].parse = (di_tok_parse)mode[i];
      ns++;
    }
    spans[ns - 1].len++;
  }
  di_code rc = di_tokenizer_encode_spans(tok, spans, ns, false, ids, n, st);
  free(spans);
  free(mode);
  free(content);
  return rc;
}
