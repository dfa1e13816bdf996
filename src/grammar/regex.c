/* ECMAScript regex parser (see regex.h). */
#include "grammar/regex.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

typedef struct rx {
  gx *g;
  const char *s;
  size_t n, i;
  rx_encode_fn enc;
  void *ctx;
  di_status *st;
  bool err;
  int depth;
} rx;

/* An element's anchoring: ^ may only open a pattern (or an opening group),
 * $ only close it. */
typedef struct rpiece {
  int32_t e;
  bool sa, ea; /* starts with ^, ends with $ */
} rpiece;

static int32_t fail(rx *r, const char *msg) {
  if (!r->err) di_errorf(r->st, DI_ERR_INVALID, "regex at offset %zu: %s", r->i, msg);
  r->err = true;
  return GX_NOTHING;
}

static bool eof(rx *r) { return r->i >= r->n; }
static int peek(rx *r) { return eof(r) ? -1 : (unsigned char)r->s[r->i]; }

/* One UTF-8 code point from the pattern text. */
static uint32_t next_cp(rx *r) {
  int32_t cp;
  utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)r->s + r->i, (utf8proc_ssize_t)(r->n - r->i), &cp);
  if (k <= 0) {
    fail(r, "invalid UTF-8");
    r->i = r->n;
    return 0;
  }
  r->i += (size_t)k;
  return (uint32_t)cp;
}

static int32_t enc(rx *r, gx_cpset *s) {
  gx_cpset_normalize(s);
  int32_t e = r->enc(r->g, s, r->ctx);
  gx_cpset_free(s);
  return e;
}

static void add_digit(gx_cpset *s) { gx_cpset_add(s, '0', '9'); }
static void add_word(gx_cpset *s) {
  gx_cpset_add(s, '0', '9');
  gx_cpset_add(s, 'A', 'Z');
  gx_cpset_add(s, 'a', 'z');
  gx_cpset_add(s, '_', '_');
}
static void add_space(gx_cpset *s) {
  static const uint32_t ws[][2] = {{9, 13},         {32, 32},         {0xA0, 0xA0},   {0x1680, 0x1680},
                                   {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F},
                                   {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
  for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) gx_cpset_add(s, ws[i][0], ws[i][1]);
}

static void add_negated(gx_cpset *s, void (*f)(gx_cpset *)) {
  gx_cpset t = {0};
  f(&t);
  gx_cpset_negate(&t);
  for (size_t i = 0; i < t.n; i++) gx_cpset_add(s, t.r[i][0], t.r[i][1]);
  gx_cpset_free(&t);
}

/* \p{..}: general categories via utf8proc, computed once per category. */
static pthread_mutex_t cat_mu = PTHREAD_MUTEX_INITIALIZER;
static gx_cpset cat_sets[32];
static bool cat_done[32];

static const struct {
  const char *name, *cats;
} props[] = {
    {"L", "Lu Ll Lt Lm Lo"}, {"Letter", "Lu Ll Lt Lm Lo"}, {"Lu", "Lu"}, {"Ll", "Ll"}, {"Lt", "Lt"},
    {"Lm", "Lm"}, {"Lo", "Lo"}, {"M", "Mn Mc Me"}, {"Mn", "Mn"}, {"Mc", "Mc"}, {"Me", "Me"},
    {"N", "Nd Nl No"}, {"Nd", "Nd"}, {"Nl", "Nl"}, {"No", "No"},
    {"P", "Pc Pd Ps Pe Pi Pf Po"}, {"Pc", "Pc"}, {"Pd", "Pd"}, {"Ps", "Ps"}, {"Pe", "Pe"}, {"Pi", "Pi"},
    {"Pf", "Pf"}, {"Po", "Po"}, {"S", "Sm Sc Sk So"}, {"Sm", "Sm"}, {"Sc", "Sc"}, {"Sk", "Sk"},
    {"So", "So"}, {"Z", "Zs Zl Zp"}, {"Zs", "Zs"}, {"Zl", "Zl"}, {"Zp", "Zp"},
    {"C", "Cc Cf Cs Co Cn"}, {"Cc", "Cc"}, {"Cf", "Cf"}, {"Co", "Co"},
};

static const char *cat_names[] = {"Cn", "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl",
                                  "No", "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "Sm", "Sc", "Sk",
                                  "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co"};

static void add_category(gx_cpset *s, int cat) {
  pthread_mutex_lock(&cat_mu);
  if (!cat_done[cat]) {
    uint32_t start = 0;
    bool in = false;
    for (uint32_t cp = 0; cp <= 0x110000; cp++) {
      bool m = cp <= 0x10FFFF && (int)utf8proc_category((utf8proc_int32_t)cp) == cat;
      if (m && !in) start = cp;
      if (!m && in) gx_cpset_add(&cat_sets[cat], start, cp - 1);
      in = m;
    }
    cat_done[cat] = true;
  }
  for (size_t i = 0; i < cat_sets[cat].n; i++) gx_cpset_add(s, cat_sets[cat].r[i][0], cat_sets[cat].r[i][1]);
  pthread_mutex_unlock(&cat_mu);
}

static bool add_property(rx *r, gx_cpset *s, bool neg) {
  if (peek(r) != '{') return fail(r, "\\p needs {Property}"), false;
  size_t st = ++r->i;
  while (!eof(r) && peek(r) != '}') r->i++;
  if (eof(r)) return fail(r, "unterminated \\p{"), false;
  char name[48];
  size_t len = r->i - st;
  r->i++;
  if (len >= sizeof name) return fail(r, "unknown Unicode property"), false;
  memcpy(name, r->s + st, len);
  name[len] = 0;
  const char *nm = name;
  if (!strncmp(nm, "General_Category=", 17)) nm += 17;
  else if (!strncmp(nm, "gc=", 3)) nm += 3;
  gx_cpset t = {0};
  bool found = false;
  for (size_t i = 0; i < sizeof props / sizeof props[0] && !found; i++) {
    if (strcmp(props[i].name, nm)) continue;
    found = true;
    for (size_t c = 0; c < sizeof cat_names / sizeof cat_names[0]; c++)
      if (strstr(props[i].cats, cat_names[c])) add_category(&t, (int)c);
  }
  if (!found) {
    gx_cpset_free(&t);
    char msg[96];
    snprintf(msg, sizeof msg, "Unicode property '%s' is not supported", name);
    return fail(r, msg), false;
  }
  if (neg) gx_cpset_negate(&t);
  for (size_t i = 0; i < t.n; i++) gx_cpset_add(s, t.r[i][0], t.r[i][1]);
  gx_cpset_free(&t);
  return true;
}

static int hexval(int c) {
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static int64_t hexn(rx *r, int n) {
  int64_t v = 0;
  for (int k = 0; k < n; k++) {
    int h = hexval(peek(r));
    if (h < 0) return -1;
    v = v * 16 + h;
    r->i++;
  }
  return v;
}

/* After a backslash: a class escape (adds to s, returns -2) or a single code
 * point (returned). in_class: inside [...] (\b is backspace there). */
static int64_t escape(rx *r, gx_cpset *s, bool in_class) {
  if (eof(r)) return fail(r, "pattern ends with a backslash"), -1;
  int c = peek(r);
  r->i++;
  switch (c) {
  case 'd': add_digit(s); return -2;
  case 'D': add_negated(s, add_digit); return -2;
  case 'w': add_word(s); return -2;
  case 'W': add_negated(s, add_word); return -2;
  case 's': add_space(s); return -2;
  case 'S': add_negated(s, add_space); return -2;
  case 'p':
  case 'P': return add_property(r, s, c == 'P') ? -2 : -1;
  case 'n': return '\n';
  case 'r': return '\r';
  case 't': return '\t';
  case 'f': return '\f';
  case 'v': return '\v';
  case '0': return 0;
  case 'b':
    if (in_class) return '\b';
    return fail(r, "word boundary \\b is not supported"), -1;
  case 'B': return fail(r, "word boundary \\B is not supported"), -1;
  case 'c': {
    int l = peek(r);
    if ((l >= 'a' && l <= 'z') || (l >= 'A' && l <= 'Z')) {
      r->i++;
      return l % 32;
    }
    return '\\'; /* Annex B: a literal backslash, 'c' read next */
  }
  case 'x': {
    int64_t v = hexn(r, 2);
    return v < 0 ? (fail(r, "bad \\x escape"), -1) : v;
  }
  case 'u': {
    if (peek(r) == '{') {
      r->i++;
      int64_t v = 0;
      int k = 0;
      while (hexval(peek(r)) >= 0 && k < 8) v = v * 16 + hexval(r->s[r->i++]), k++;
      if (peek(r) != '}' || k == 0 || v > 0x10FFFF) return fail(r, "bad \\u{...} escape"), -1;
      r->i++;
      return v;
    }
    int64_t v = hexn(r, 4);
    if (v < 0) return fail(r, "bad \\u escape"), -1;
    if (v >= 0xD800 && v < 0xDC00 && peek(r) == '\\' && r->i + 1 < r->n && r->s[r->i + 1] == 'u') {
      size_t save = r->i;
      r->i += 2;
      int64_t lo = hexn(r, 4);
      if (lo >= 0xDC00 && lo < 0xE000) return 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
      r->i = save;
    }
    return v;
  }
  default:
    if (c >= '1' && c <= '9') return fail(r, "backreferences are not supported"), -1;
    if (c == 'k' && peek(r) == '<') return fail(r, "named backreferences are not supported"), -1;
    r->i--;
    return (int64_t)next_cp(r); /* identity escape */
  }
}

static int32_t parse_class(rx *r) {
  gx_cpset s = {0};
  bool neg = false;
  if (peek(r) == '^') {
    neg = true;
    r->i++;
  }
  while (!r->err) {
    if (eof(r)) {
      gx_cpset_free(&s);
      return fail(r, "unterminated character class");
    }
    if (peek(r) == ']') {
      r->i++;
      break;
    }
    int64_t lo;
    if (peek(r) == '\\') {
      r->i++;
      lo = escape(r, &s, true);
      if (lo == -2 || lo < 0) continue;
    } else {
      lo = next_cp(r);
    }
    if (peek(r) == '-' && r->i + 1 < r->n && r->s[r->i + 1] != ']') {
      r->i++;
      int64_t hi;
      if (peek(r) == '\\') {
        r->i++;
        gx_cpset junk = {0};
        hi = escape(r, &junk, true);
        if (hi == -2) { /* [a-\d]: Annex B reads '-' literally */
          gx_cpset_add(&s, (uint32_t)lo, (uint32_t)lo);
          gx_cpset_add(&s, '-', '-');
          for (size_t k = 0; k < junk.n; k++) gx_cpset_add(&s, junk.r[k][0], junk.r[k][1]);
          gx_cpset_free(&junk);
          continue;
        }
        gx_cpset_free(&junk);
        if (hi < 0) continue;
      } else {
        hi = next_cp(r);
      }
      if (hi < lo) {
        gx_cpset_free(&s);
        return fail(r, "character class range out of order");
      }
      gx_cpset_add(&s, (uint32_t)lo, (uint32_t)hi);
    } else {
      gx_cpset_add(&s, (uint32_t)lo, (uint32_t)lo);
    }
  }
  if (r->err) {
    gx_cpset_free(&s);
    return GX_NOTHING;
  }
  if (neg) gx_cpset_negate(&s);
  return enc(r, &s);
}

static rpiece parse_alt(rx *r);

static bool parse_count(rx *r, int32_t *v) {
  if (peek(r) < '0' || peek(r) > '9') return false;
  int64_t x = 0;
  while (peek(r) >= '0' && peek(r) <= '9') {
    x = x * 10 + (r->s[r->i++] - '0');
    if (x > 100000) x = 100000;
  }
  *v = (int32_t)x;
  return true;
}

/* {n}, {n,}, {n,m}; false (position unchanged) if not a quantifier (then '{' is literal). */
static bool parse_brace(rx *r, int32_t *mn, int32_t *mx) {
  size_t save = r->i;
  r->i++;
  if (!parse_count(r, mn)) goto no;
  *mx = *mn;
  if (peek(r) == ',') {
    r->i++;
    if (!parse_count(r, mx)) *mx = -1;
  }
  if (peek(r) != '}') goto no;
  r->i++;
  return true;
no:
  r->i = save;
  return false;
}

static rpiece parse_seq(rx *r) {
  rpiece out = {.e = GX_EMPTY};
  int32_t *items = NULL;
  size_t n = 0, cap = 0;
  bool consumed = false;
  while (!eof(r) && !r->err && peek(r) != '|' && peek(r) != ')') {
    int c = peek(r);
    rpiece a = {.e = GX_NOTHING};
    if (out.ea) {
      fail(r, "text after '$' is not supported");
      break;
    }
    if (c == '^') {
      r->i++;
      if (consumed) {
        fail(r, "'^' inside the pattern is not supported");
        break;
      }
      out.sa = true;
      continue;
    }
    if (c == '$') {
      r->i++;
      out.ea = true;
      continue;
    }
    if (c == '(') {
      r->i++;
      if (peek(r) == '?') {
        r->i++;
        int k = peek(r);
        if (k == ':') r->i++;
        else if (k == '=' || k == '!') fail(r, "lookahead assertions are not supported");
        else if (k == '<' && r->i + 1 < r->n && (r->s[r->i + 1] == '=' || r->s[r->i + 1] == '!'))
          fail(r, "lookbehind assertions are not supported");
        else if (k == '<') {
          while (!eof(r) && peek(r) != '>') r->i++;
          if (eof(r)) fail(r, "unterminated group name");
          else r->i++;
        } else fail(r, "unknown group syntax '(?'");
      }
      if (r->err) break;
      if (++r->depth > 200) {
        fail(r, "groups nested too deeply");
        break;
      }
      a = parse_alt(r);
      r->depth--;
      if (r->err) break;
      if (peek(r) != ')') {
        fail(r, "missing ')'");
        break;
      }
      r->i++;
      if (r->g->split_groups && !a.sa && !a.ea) {
        int32_t rule = gx_rule_new(r->g, "group");
        gx_rule_define(r->g, rule, a.e);
        a.e = gx_ref(r->g, rule);
      }
      if (a.sa && consumed) {
        fail(r, "'^' inside the pattern is not supported");
        break;
      }
      out.sa |= a.sa;
    } else if (c == '[') {
      r->i++;
      a.e = parse_class(r);
    } else if (c == '.') {
      r->i++;
      gx_cpset s = {0};
      gx_cpset_add(&s, '\n', '\n');
      gx_cpset_add(&s, '\r', '\r');
      gx_cpset_add(&s, 0x2028, 0x2029);
      gx_cpset_negate(&s);
      a.e = enc(r, &s);
    } else if (c == '\\') {
      r->i++;
      gx_cpset s = {0};
      int64_t cp = escape(r, &s, false);
      if (cp >= 0) gx_cpset_add(&s, (uint32_t)cp, (uint32_t)cp);
      a.e = r->err ? GX_NOTHING : enc(r, &s);
      if (r->err) gx_cpset_free(&s);
    } else if (c == '*' || c == '+' || c == '?') {
      fail(r, "nothing to repeat");
      break;
    } else {
      int32_t mn, mx;
      if (c == '{' && parse_brace(r, &mn, &mx)) {
        fail(r, "nothing to repeat");
        break;
      }
      gx_cpset s = {0};
      uint32_t cp = next_cp(r);
      gx_cpset_add(&s, cp, cp);
      a.e = enc(r, &s);
    }
    /* quantifier */
    int q = peek(r);
    int32_t mn = 1, mx = 1;
    bool quant = false;
    if (q == '*') mn = 0, mx = -1, quant = true, r->i++;
    else if (q == '+') mn = 1, mx = -1, quant = true, r->i++;
    else if (q == '?') mn = 0, mx = 1, quant = true, r->i++;
    else if (q == '{' && parse_brace(r, &mn, &mx)) quant = true;
    if (quant) {
      if (peek(r) == '?') r->i++; /* lazy: same language */
      if (a.sa || a.ea) {
        fail(r, "a quantified group may not contain anchors");
        break;
      }
      if (mx >= 0 && mx < mn) {
        fail(r, "numbers out of order in {} quantifier");
        break;
      }
      a.e = gx_rep(r->g, a.e, mn, mx);
    }
    if (a.ea) out.ea = true;
    if (n == cap) {
      cap = cap ? cap * 2 : 8;
      int32_t *ni = realloc(items, cap * sizeof *items);
      if (!ni) abort();
      items = ni;
    }
    items[n++] = a.e;
    consumed = true;
  }
  out.e = gx_seq(r->g, items, n);
  free(items);
  return out;
}

/* Alternatives must agree on anchoring, except at the top level (handled by
 * the caller through top_alts). */
static rpiece parse_alt(rx *r) {
  rpiece first = parse_seq(r);
  if (peek(r) != '|' || r->err) return first;
  int32_t *items = malloc(sizeof *items * 4);
  size_t n = 0, cap = 4;
  items[n++] = first.e;
  while (peek(r) == '|' && !r->err) {
    r->i++;
    rpiece p = parse_seq(r);
    if (p.sa != first.sa || p.ea != first.ea) fail(r, "alternatives with different anchors inside a group are not supported");
    if (n == cap) {
      cap *= 2;
      int32_t *ni = realloc(items, cap * sizeof *items);
      if (!ni) abort();
      items = ni;
    }
    items[n++] = p.e;
  }
  first.e = gx_alt(r->g, items, n);
  free(items);
  return first;
}

int32_t rx_compile(gx *g, const char *src, size_t len, bool search, rx_encode_fn encf, void *ctx,
                   di_status *st) {
  rx r = {.g = g, .s = src, .n = len, .enc = encf, .ctx = ctx, .st = st};
  int32_t any = GX_EMPTY;
  if (search) {
    gx_cpset s = {0};
    gx_cpset_add(&s, 0, 0x10FFFF);
    any = gx_star(g, enc(&r, &s));
  }
  int32_t *alts = NULL;
  size_t n = 0;
  for (;;) {
    rpiece p = parse_seq(&r);
    if (r.err) break;
    int32_t e = p.e;
    if (search) e = gx_seq3(g, p.sa ? GX_EMPTY : any, e, p.ea ? GX_EMPTY : any);
    int32_t *na = realloc(alts, sizeof *alts * (n + 1));
    if (!na) abort();
    alts = na;
    alts[n++] = e;
    if (peek(&r) == '|') {
      r.i++;
      continue;
    }
    if (!eof(&r)) fail(&r, "unmatched ')'");
    break;
  }
  int32_t e = r.err ? -1 : gx_alt(g, alts, n);
  free(alts);
  return e;
}

int32_t rx_encode_utf8(gx *g, const gx_cpset *chars, void *ctx) {
  (void)ctx;
  return gx_utf8_class(g, chars);
}
