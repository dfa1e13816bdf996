/* GBNF, llama.cpp's grammar format: `name ::= alternatives`, string
 * literals, [character classes], `.`, groups, * + ? {m,n}, # comments. A rule
 * ends at a newline outside parentheses; after `|` the next line continues
 * it. The root rule is "root". Left recursion is rejected by the compiler. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "grammar/internal.h"

typedef struct gb {
  gx *g;
  const char *s;
  size_t n, i;
  di_status *st;
  bool err;
  int depth;
  char (*names)[64];
  int32_t *ids;
  size_t n_names, cap_names;
} gb;

static int32_t fail(gb *p, const char *msg) {
  if (!p->err) {
    size_t line = 1, col = 1;
    for (size_t k = 0; k < p->i && k < p->n; k++) {
      if (p->s[k] == '\n') line++, col = 1;
      else col++;
    }
    di_errorf(p->st, DI_ERR_INVALID, "GBNF line %zu column %zu: %s", line, col, msg);
  }
  p->err = true;
  return GX_NOTHING;
}

static int cur(gb *p) { return p->i < p->n ? (unsigned char)p->s[p->i] : -1; }

static void space(gb *p, bool newline_ok) {
  while (p->i < p->n) {
    char c = p->s[p->i];
    if (c == '#') {
      while (p->i < p->n && p->s[p->i] != '\n') p->i++;
    } else if (c == ' ' || c == '\t' || ((c == '\n' || c == '\r') && newline_ok)) {
      p->i++;
    } else {
      break;
    }
  }
}

static bool name_char(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_'; }

static int32_t rule_id(gb *p, const char *name, size_t len) {
  char nm[64];
  if (len >= sizeof nm) len = sizeof nm - 1;
  memcpy(nm, name, len);
  nm[len] = 0;
  for (size_t k = 0; k < p->n_names; k++)
    if (!strcmp(p->names[k], nm)) return p->ids[k];
  if (p->n_names == p->cap_names) {
    p->cap_names = p->cap_names ? p->cap_names * 2 : 32;
    p->names = realloc(p->names, p->cap_names * sizeof *p->names);
    p->ids = realloc(p->ids, p->cap_names * sizeof *p->ids);
    if (!p->names || !p->ids) abort();
  }
  memcpy(p->names[p->n_names], nm, len + 1);
  p->ids[p->n_names] = gx_rule_new(p->g, nm);
  return p->ids[p->n_names++];
}

static int hexv(int c) {
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* One (possibly escaped) code point. */
static int64_t read_char(gb *p) {
  if (p->i >= p->n) return fail(p, "unexpected end of grammar"), -1;
  if (p->s[p->i] == '\\') {
    p->i++;
    int c = cur(p);
    p->i++;
    int nh = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
    if (nh) {
      int64_t v = 0;
      for (int k = 0; k < nh; k++) {
        int h = hexv(cur(p));
        if (h < 0) return fail(p, "bad hex escape"), -1;
        v = v * 16 + h;
        p->i++;
      }
      return v;
    }
    switch (c) {
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    case '\\': return '\\';
    case '"': return '"';
    case '[': return '[';
    case ']': return ']';
    case '-': return '-';
    case '^': return '^';
    default: return fail(p, "unknown escape"), -1;
    }
  }
  int32_t cp;
  utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)p->s + p->i, (utf8proc_ssize_t)(p->n - p->i), &cp);
  if (k <= 0) return fail(p, "invalid UTF-8"), -1;
  p->i += (size_t)k;
  return cp;
}

static int32_t parse_alts(gb *p, bool nested);

static int32_t parse_seq(gb *p, bool nested) {
  int32_t *items = NULL;
  size_t n = 0, cap = 0;
  while (!p->err) {
    int c = cur(p);
    int32_t e;
    if (c == '"') {
      p->i++;
      int32_t *lit = NULL;
      size_t ln = 0, lc = 0;
      while (cur(p) != '"' && !p->err) {
        if (cur(p) < 0) {
          fail(p, "unterminated string literal");
          break;
        }
        int64_t cp = read_char(p);
        if (cp < 0) break;
        gx_cpset one = {0};
        gx_cpset_add(&one, (uint32_t)cp, (uint32_t)cp);
        if (ln == lc) {
          lc = lc ? lc * 2 : 16;
          lit = realloc(lit, lc * sizeof *lit);
          if (!lit) abort();
        }
        lit[ln++] = gx_utf8_class(p->g, &one);
        gx_cpset_free(&one);
      }
      p->i++;
      e = gx_seq(p->g, lit, ln);
      free(lit);
    } else if (c == '[') {
      p->i++;
      bool neg = cur(p) == '^';
      if (neg) p->i++;
      gx_cpset s = {0};
      while (cur(p) != ']' && !p->err) {
        if (cur(p) < 0) {
          fail(p, "unterminated character class");
          break;
        }
        int64_t lo = read_char(p), hi = lo;
        if (lo < 0) break;
        if (cur(p) == '-' && p->i + 1 < p->n && p->s[p->i + 1] != ']') {
          p->i++;
          hi = read_char(p);
          if (hi < lo) {
            fail(p, "character range out of order");
            break;
          }
        }
        gx_cpset_add(&s, (uint32_t)lo, (uint32_t)hi);
      }
      p->i++;
      gx_cpset_normalize(&s);
      if (neg) gx_cpset_negate(&s);
      e = gx_utf8_class(p->g, &s);
      gx_cpset_free(&s);
    } else if (c == '.') {
      p->i++;
      e = gx_utf8_range(p->g, 0, 0x10FFFF);
    } else if (c == '(') {
      p->i++;
      if (++p->depth > 100) {
        free(items);
        return fail(p, "groups nested too deeply");
      }
      space(p, true);
      e = parse_alts(p, true);
      p->depth--;
      if (cur(p) != ')') {
        fail(p, "missing ')'");
        break;
      }
      p->i++;
    } else if (name_char(c)) {
      size_t st = p->i;
      while (name_char(cur(p))) p->i++;
      e = gx_ref(p->g, rule_id(p, p->s + st, p->i - st));
    } else {
      break;
    }
    space(p, nested);
    /* repetition */
    int q = cur(p);
    if (q == '*' || q == '+' || q == '?') {
      p->i++;
      e = q == '*' ? gx_star(p->g, e) : q == '+' ? gx_plus(p->g, e) : gx_opt(p->g, e);
      space(p, nested);
    } else if (q == '{') {
      p->i++;
      space(p, nested);
      long mn = 0, mx;
      while (cur(p) >= '0' && cur(p) <= '9') mn = mn * 10 + (p->s[p->i++] - '0'), mn = mn > 100000 ? 100000 : mn;
      mx = mn;
      space(p, nested);
      if (cur(p) == ',') {
        p->i++;
        space(p, nested);
        if (cur(p) >= '0' && cur(p) <= '9') {
          mx = 0;
          while (cur(p) >= '0' && cur(p) <= '9') mx = mx * 10 + (p->s[p->i++] - '0'), mx = mx > 100000 ? 100000 : mx;
        } else mx = -1;
      }
      space(p, nested);
      if (cur(p) != '}') {
        fail(p, "expected '}' after a repetition count");
        break;
      }
      p->i++;
      if (mx >= 0 && mx < mn) {
        fail(p, "repetition {m,n} with n < m");
        break;
      }
      e = gx_rep(p->g, e, (int32_t)mn, (int32_t)mx);
      space(p, nested);
    }
    if (n == cap) {
      cap = cap ? cap * 2 : 8;
      items = realloc(items, cap * sizeof *items);
      if (!items) abort();
    }
    items[n++] = e;
  }
  int32_t r = gx_seq(p->g, items, n);
  free(items);
  return r;
}

static int32_t parse_alts(gb *p, bool nested) {
  int32_t *alts = NULL;
  size_t n = 0, cap = 0;
  for (;;) {
    int32_t e = parse_seq(p, nested);
    if (n == cap) {
      cap = cap ? cap * 2 : 4;
      alts = realloc(alts, cap * sizeof *alts);
      if (!alts) abort();
    }
    alts[n++] = e;
    if (cur(p) != '|' || p->err) break;
    p->i++;
    space(p, true);
  }
  int32_t r = gx_alt(p->g, alts, n);
  free(alts);
  return r;
}

int32_t gfe_gbnf(gx *g, const char *src, size_t len, di_status *st) {
  gb p = {.g = g, .s = src, .n = len, .st = st};
  int32_t root = rule_id(&p, "root", 4);
  bool *defined = NULL;
  for (;;) {
    space(&p, true);
    if (p.i >= p.n || p.err) break;
    size_t s0 = p.i;
    while (name_char(cur(&p))) p.i++;
    if (p.i == s0) {
      fail(&p, "expected a rule name");
      break;
    }
    int32_t r = rule_id(&p, src + s0, p.i - s0);
    space(&p, false);
    if (p.i + 3 > p.n || memcmp(src + p.i, "::=", 3)) {
      fail(&p, "expected '::='");
      break;
    }
    p.i += 3;
    space(&p, true);
    if (g->rules[r].body >= 0) {
      fail(&p, "rule defined twice");
      break;
    }
    int32_t e = parse_alts(&p, false);
    gx_rule_define(g, r, e);
    if (p.err) break;
    if (cur(&p) == '\r') p.i++;
    if (p.i < p.n && cur(&p) != '\n') {
      fail(&p, "unexpected character");
      break;
    }
  }
  free(defined);
  free(p.names);
  free(p.ids);
  if (p.err) return -1;
  if (g->rules[root].body < 0) {
    di_errorf(st, DI_ERR_INVALID, "GBNF: no 'root' rule");
    return -1;
  }
  return root;
}
