/* Template source -> tokens, mirroring jinja2.lexer with the options
 * transformers uses: trim_blocks=True, lstrip_blocks=True,
 * keep_trailing_newline=False. Whitespace control is resolved here, so the
 * parser sees TEXT tokens exactly as Jinja2 would output them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recipe/jinja.h"

typedef struct lexer {
  jarena *a;
  const char *s; /* normalized source */
  size_t n, pos;
  size_t *line_start;
  size_t n_lines;
  jtok *toks;
  size_t nt, cap;
  di_status *st;
  bool err;
} lexer;

static void where(const lexer *L, size_t off, int *line, int *col) {
  size_t lo = 0, hi = L->n_lines;
  while (hi - lo > 1) {
    size_t mid = (lo + hi) / 2;
    if (L->line_start[mid] <= off) lo = mid; else hi = mid;
  }
  *line = (int)lo + 1;
  *col = (int)(off - L->line_start[lo]) + 1;
}

static di_code lex_fail(lexer *L, size_t off, const char *msg) {
  int line, col;
  where(L, off, &line, &col);
  L->err = true;
  return di_errorf(L->st, DI_ERR_FORMAT, "template line %d:%d: %s", line, col, msg);
}

static jtok *push(lexer *L, int kind, size_t off) {
  if (L->nt == L->cap) {
    size_t cap = L->cap ? L->cap * 2 : 256;
    jtok *t = realloc(L->toks, cap * sizeof *t);
    if (!t) {
      L->err = true;
      di_errorf(L->st, DI_ERR_NOMEM, "template: out of memory while lexing");
      return NULL;
    }
    L->toks = t;
    L->cap = cap;
  }
  jtok *t = &L->toks[L->nt++];
  memset(t, 0, sizeof *t);
  t->kind = (uint8_t)kind;
  where(L, off, &t->line, &t->col);
  return t;
}

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
static bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool is_digit(char c) { return c >= '0' && c <= '9'; }

static void emit_text(lexer *L, size_t off, const char *s, size_t n) {
  if (!n) return;
  jtok *t = push(L, TK_TEXT, off);
  if (!t) return;
  char *d = jarena_alloc(L->a, n + 1);
  if (!d) {
    L->err = true;
    di_errorf(L->st, DI_ERR_NOMEM, "template: out of memory");
    return;
  }
  memcpy(d, s, n);
  t->s = d;
  t->len = n;
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static size_t put_utf8(char *d, uint32_t cp) {
  if (cp < 0x80) { d[0] = (char)cp; return 1; }
  if (cp < 0x800) { d[0] = (char)(0xC0 | (cp >> 6)); d[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
  if (cp < 0x10000) {
    d[0] = (char)(0xE0 | (cp >> 12)); d[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    d[2] = (char)(0x80 | (cp & 0x3F)); return 3;
  }
  d[0] = (char)(0xF0 | (cp >> 18)); d[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
  d[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); d[3] = (char)(0x80 | (cp & 0x3F)); return 4;
}

/* A string literal with Python's escapes (Jinja decodes them with unicode-escape). */
static di_code lex_string(lexer *L, size_t start) {
  char q = L->s[start];
  size_t i = start + 1;
  char *d = jarena_alloc(L->a, (L->pos < L->n ? L->n - start : 1) + 1);
  if (!d) return lex_fail(L, start, "out of memory");
  size_t k = 0;
  for (;;) {
    if (i >= L->n) return lex_fail(L, start, "unterminated string literal");
    char c = L->s[i];
    if (c == q) { i++; break; }
    if (c != '\\') { d[k++] = c; i++; continue; }
    if (i + 1 >= L->n) return lex_fail(L, start, "unterminated string literal");
    char e = L->s[i + 1];
    i += 2;
    switch (e) {
      case 'n': d[k++] = '\n'; break;
      case 't': d[k++] = '\t'; break;
      case 'r': d[k++] = '\r'; break;
      case 'b': d[k++] = '\b'; break;
      case 'f': d[k++] = '\f'; break;
      case 'v': d[k++] = '\v'; break;
      case 'a': d[k++] = '\a'; break;
      case '\\': d[k++] = '\\'; break;
      case '\'': d[k++] = '\''; break;
      case '"': d[k++] = '"'; break;
      case '\n': break; /* line continuation */
      case 'x': case 'u': case 'U': {
        int nd = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        uint32_t cp = 0;
        for (int j = 0; j < nd; j++) {
          int h = i + j < L->n ? hexval(L->s[i + j]) : -1;
          if (h < 0) return lex_fail(L, i - 2, "truncated \\x/\\u escape in string literal");
          cp = cp * 16 + (uint32_t)h;
        }
        i += nd;
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
          return lex_fail(L, i - 2, "escape is not a Unicode scalar value");
        k += put_utf8(d + k, cp);
        break;
      }
      default:
        if (e >= '0' && e <= '7') {
          uint32_t cp = (uint32_t)(e - '0');
          for (int j = 0; j < 2 && i < L->n && L->s[i] >= '0' && L->s[i] <= '7'; j++, i++)
            cp = cp * 8 + (uint32_t)(L->s[i] - '0');
          k += put_utf8(d + k, cp);
        } else { /* unknown escapes keep the backslash, as Python does */
          d[k++] = '\\';
          i--;
        }
    }
  }
  d[k] = 0;
  jtok *t = push(L, TK_STRING, start);
  if (!t) return DI_ERR_NOMEM;
  t->s = d;
  t->len = k;
  L->pos = i;
  return DI_OK;
}

static di_code lex_number(lexer *L) {
  size_t st = L->pos, i = st;
  while (i < L->n && (is_digit(L->s[i]) || (L->s[i] == '_' && i + 1 < L->n && is_digit(L->s[i + 1])))) i++;
  bool fl = false;
  bool after_dot = st > 0 && L->s[st - 1] == '.';
  if (!after_dot && i + 1 < L->n && L->s[i] == '.' && is_digit(L->s[i + 1])) {
    fl = true;
    i++;
    while (i < L->n && (is_digit(L->s[i]) || L->s[i] == '_')) i++;
  }
  if (!after_dot && i < L->n && (L->s[i] == 'e' || L->s[i] == 'E')) {
    size_t j = i + 1;
    if (j < L->n && (L->s[j] == '+' || L->s[j] == '-')) j++;
    if (j < L->n && is_digit(L->s[j])) {
      fl = true;
      i = j;
      while (i < L->n && is_digit(L->s[i])) i++;
    }
  }
  char buf[128];
  size_t k = 0;
  for (size_t j = st; j < i && k < sizeof buf - 1; j++)
    if (L->s[j] != '_') buf[k++] = L->s[j];
  buf[k] = 0;
  if (i - st >= sizeof buf - 1) return lex_fail(L, st, "number literal too long");
  jtok *t = push(L, fl ? TK_FLOAT : TK_INT, st);
  if (!t) return DI_ERR_NOMEM;
  if (fl) {
    t->f = strtod(buf, NULL);
  } else {
    unsigned long long v = strtoull(buf, NULL, 10);
    if (k > 18 && (k > 19 || strcmp(buf, "9223372036854775807") > 0))
      return lex_fail(L, st, "integer literal too large");
    t->i = (int64_t)v;
  }
  L->pos = i;
  return DI_OK;
}

static const char *const OPS2[] = {"**", "//", "==", "!=", "<=", ">=", NULL};
static const char OPS1[] = "+-*/%~[](){}.:|,=<>;";

/* Lexes the inside of a {{ }} or {% %} tag; on return L->pos is past the end delimiter. */
static di_code lex_tag(lexer *L, bool block, size_t tag_off) {
  int depth = 0;
  for (;;) {
    while (L->pos < L->n && is_ws(L->s[L->pos])) L->pos++;
    if (L->pos >= L->n) return lex_fail(L, tag_off, block ? "unclosed '{%' tag" : "unclosed '{{' tag");
    const char *p = L->s + L->pos;
    size_t rem = L->n - L->pos;
    if (depth == 0) {
      char sign = (p[0] == '-' || (block && p[0] == '+')) ? p[0] : 0;
      const char *q = sign ? p + 1 : p;
      size_t qr = sign ? rem - 1 : rem;
      if (qr >= 2 && q[0] == (block ? '%' : '}') && q[1] == '}') {
        jtok *t = push(L, block ? TK_BLOCK_END : TK_VAR_END, L->pos);
        if (!t) return DI_ERR_NOMEM;
        L->pos += (sign ? 1 : 0) + 2;
        if (sign == '-') {
          while (L->pos < L->n && is_ws(L->s[L->pos])) L->pos++;
        } else if (block && sign != '+' && L->pos < L->n && L->s[L->pos] == '\n') {
          L->pos++; /* trim_blocks */
        }
        return DI_OK;
      }
    }
    if (is_alpha(p[0])) {
      size_t i = 1;
      while (i < rem && (is_alpha(p[i]) || is_digit(p[i]))) i++;
      jtok *t = push(L, TK_NAME, L->pos);
      if (!t) return DI_ERR_NOMEM;
      char *d = jarena_alloc(L->a, i + 1);
      if (!d) return lex_fail(L, L->pos, "out of memory");
      memcpy(d, p, i);
      t->s = d;
      t->len = i;
      L->pos += i;
      continue;
    }
    if (is_digit(p[0])) {
      if (lex_number(L)) return L->st->code;
      continue;
    }
    if (p[0] == '"' || p[0] == '\'') {
      if (lex_string(L, L->pos)) return L->st->code;
      continue;
    }
    const char *op = NULL;
    size_t oplen = 0;
    for (int k = 0; OPS2[k]; k++)
      if (rem >= 2 && p[0] == OPS2[k][0] && p[1] == OPS2[k][1]) { op = OPS2[k]; oplen = 2; break; }
    if (!op && strchr(OPS1, p[0]) && p[0]) {
      static char one[sizeof OPS1][2];
      size_t idx = (size_t)(strchr(OPS1, p[0]) - OPS1);
      one[idx][0] = p[0];
      op = one[idx];
      oplen = 1;
    }
    if (!op) {
      char m[64];
      if ((unsigned char)p[0] >= 0x20 && (unsigned char)p[0] < 0x7f)
        snprintf(m, sizeof m, "unexpected character '%c'", p[0]);
      else
        snprintf(m, sizeof m, "unexpected byte 0x%02x", (unsigned char)p[0]);
      return lex_fail(L, L->pos, m);
    }
    if (op[0] == '(' || op[0] == '[' || op[0] == '{') depth++;
    if (op[0] == ')' || op[0] == ']' || op[0] == '}') {
      if (depth == 0) return lex_fail(L, L->pos, "unbalanced closing bracket");
      depth--;
    }
    jtok *t = push(L, TK_OP, L->pos);
    if (!t) return DI_ERR_NOMEM;
    char *d = jarena_alloc(L->a, 3);
    if (!d) return lex_fail(L, L->pos, "out of memory");
    memcpy(d, op, oplen);
    t->s = d;
    t->len = oplen;
    L->pos += oplen;
  }
}

/* {% raw %} ... {% endraw %}: returns true if a raw block starts at tag (the '{'). */
static bool raw_begin(const lexer *L, size_t tag, size_t *body) {
  size_t i = tag + 2;
  if (i < L->n && (L->s[i] == '-' || L->s[i] == '+')) i++;
  while (i < L->n && is_ws(L->s[i])) i++;
  if (L->n - i < 3 || memcmp(L->s + i, "raw", 3) != 0) return false;
  i += 3;
  while (i < L->n && is_ws(L->s[i])) i++;
  if (i < L->n && L->s[i] == '-') {
    if (L->n - i < 3 || L->s[i + 1] != '%' || L->s[i + 2] != '}') return false;
    i += 3;
    while (i < L->n && is_ws(L->s[i])) i++;
  } else {
    if (L->n - i < 2 || L->s[i] != '%' || L->s[i + 1] != '}') return false;
    i += 2;
  }
  *body = i;
  return true;
}

static di_code lex_raw(lexer *L, size_t tag, size_t body) {
  for (size_t i = body; i + 1 < L->n; i++) {
    if (L->s[i] != '{' || L->s[i + 1] != '%') continue;
    size_t j = i + 2;
    char sign = 0;
    if (j < L->n && (L->s[j] == '-' || L->s[j] == '+')) sign = L->s[j++];
    while (j < L->n && is_ws(L->s[j])) j++;
    if (L->n - j < 6 || memcmp(L->s + j, "endraw", 6) != 0) continue;
    j += 6;
    while (j < L->n && is_ws(L->s[j])) j++;
    char esign = 0;
    if (j < L->n && (L->s[j] == '-' || L->s[j] == '+')) esign = L->s[j++];
    if (L->n - j < 2 || L->s[j] != '%' || L->s[j + 1] != '}') continue;
    j += 2;
    size_t tend = i;
    if (sign == '-') while (tend > body && is_ws(L->s[tend - 1])) tend--;
    emit_text(L, body, L->s + body, tend - body);
    if (esign == '-') {
      while (j < L->n && is_ws(L->s[j])) j++;
    } else if (esign != '+' && j < L->n && L->s[j] == '\n') {
      j++;
    }
    L->pos = j;
    return L->err ? L->st->code : DI_OK;
  }
  return lex_fail(L, tag, "missing {% endraw %}");
}

di_code jinja_lex(jarena *a, const char *src, size_t len, jtok **toks, size_t *ntoks, di_status *st) {
  lexer L = {.a = a, .st = st};
  /* Jinja joins the source's lines with "\n" and drops one trailing newline. */
  char *s = jarena_alloc(a, len + 1);
  if (!s) return di_errorf(st, DI_ERR_NOMEM, "template: out of memory");
  size_t n = 0;
  for (size_t i = 0; i < len; i++) {
    if (src[i] == '\r') {
      s[n++] = '\n';
      if (i + 1 < len && src[i + 1] == '\n') i++;
    } else {
      s[n++] = src[i];
    }
  }
  if (n && s[n - 1] == '\n') n--;
  s[n] = 0;
  L.s = s;
  L.n = n;
  size_t nl = 1;
  for (size_t i = 0; i < n; i++) nl += s[i] == '\n';
  L.line_start = malloc(nl * sizeof(size_t));
  if (!L.line_start) return di_errorf(st, DI_ERR_NOMEM, "template: out of memory");
  L.line_start[0] = 0;
  L.n_lines = 1;
  for (size_t i = 0; i < n; i++)
    if (s[i] == '\n') L.line_start[L.n_lines++] = i + 1;

  bool line_starting = true;
  while (L.pos < n && !L.err) {
    size_t tag = L.pos;
    while (tag + 1 < n && !(s[tag] == '{' && (s[tag + 1] == '{' || s[tag + 1] == '%' || s[tag + 1] == '#'))) tag++;
    if (tag + 1 >= n) {
      emit_text(&L, L.pos, s + L.pos, n - L.pos);
      L.pos = n;
      break;
    }
    char kind = s[tag + 1];
    char sign = tag + 2 < n ? s[tag + 2] : 0;
    if (sign != '-' && !(sign == '+' && kind != '{')) sign = 0;
    size_t tstart = L.pos, tlen = tag - L.pos;
    if (sign == '-') {
      while (tlen && is_ws(s[tstart + tlen - 1])) tlen--;
    } else if (sign != '+' && kind != '{') { /* lstrip_blocks */
      size_t lpos = tlen;
      while (lpos && s[tstart + lpos - 1] != '\n') lpos--;
      if (lpos > 0 || line_starting) {
        bool allws = lpos < tlen;
        for (size_t k = lpos; k < tlen; k++)
          if (!is_ws(s[tstart + k])) { allws = false; break; }
        if (allws) tlen = lpos;
      }
    }
    emit_text(&L, tstart, s + tstart, tlen);
    size_t body;
    if (kind == '#') {
      size_t i = tag + 2 + (sign ? 1 : 0);
      size_t e = i;
      while (e + 1 < n && !(s[e] == '#' && s[e + 1] == '}')) e++;
      if (e + 1 >= n) {
        lex_fail(&L, tag, "unclosed comment");
        break;
      }
      size_t end = e + 2;
      if (e > i && s[e - 1] == '-') {
        while (end < n && is_ws(s[end])) end++;
      } else if (!(e > i && s[e - 1] == '+') && end < n && s[end] == '\n') {
        end++;
      }
      L.pos = end;
    } else if (kind == '%' && raw_begin(&L, tag, &body)) {
      lex_raw(&L, tag, body);
    } else {
      jtok *t = push(&L, kind == '%' ? TK_BLOCK_BEGIN : TK_VAR_BEGIN, tag);
      if (!t) break;
      L.pos = tag + 2 + (sign ? 1 : 0);
      lex_tag(&L, kind == '%', tag);
    }
    line_starting = L.pos > 0 && s[L.pos - 1] == '\n';
  }
  if (!L.err) push(&L, TK_EOF, n);
  free(L.line_start);
  if (L.err) {
    free(L.toks);
    return st->code ? st->code : DI_ERR_FORMAT;
  }
  jtok *out = jarena_alloc(a, L.nt * sizeof(jtok));
  if (!out) {
    free(L.toks);
    return di_errorf(st, DI_ERR_NOMEM, "template: out of memory");
  }
  memcpy(out, L.toks, L.nt * sizeof(jtok));
  free(L.toks);
  *toks = out;
  *ntoks = L.nt;
  return DI_OK;
}
