/* Internal interface of the chat-template interpreter: a Jinja2 subset, as
 * transformers' apply_chat_template configures it (trim_blocks, lstrip_blocks,
 * loopcontrols, immutable sandbox). Source -> tokens (lexer.c) -> AST
 * (parser.c), compiled once; each render evaluates the AST (eval.c) with
 * values (value.c) and builtins (builtins.c) allocated from one arena that is
 * dropped when the render ends.
 *
 * Every string value carries taint: which of its bytes came from message or
 * tool data rather than from the template. Taint flows through concatenation,
 * slicing and filters into the output, so prompt assembly can refuse to let
 * content bytes become special tokens. */
#ifndef DI_RECIPE_JINJA_H
#define DI_RECIPE_JINJA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/status.h"

/* ---------------------------------------------------------------- arena */

typedef struct jarena {
  struct jchunk *head;
  size_t used;  /* bytes handed out so far */
  size_t limit; /* budget: a render that exceeds it fails, never the process */
  bool failed;
} jarena;

void jarena_init(jarena *a, size_t limit);
void jarena_free(jarena *a);
/* Zeroed memory, or NULL once the budget is exhausted (a->failed is set). */
void *jarena_alloc(jarena *a, size_t n);

/* ---------------------------------------------------------------- values */

typedef enum jkind {
  JV_UNDEF = 0, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT, JV_NS, JV_FUNC,
} jkind;

enum { JT_CLEAN = 0, JT_ALL = 1, JT_MIXED = 2 };

typedef struct jstr {
  size_t len;
  uint8_t tflag;  /* JT_CLEAN, JT_ALL (every byte is content) or JT_MIXED */
  uint8_t *taint; /* per byte (0/1) when JT_MIXED */
  char *s;        /* NUL-terminated for convenience; len is authoritative */
} jstr;

typedef struct jv jv;
typedef struct jlist {
  size_t n;
  bool tuple;
  jv *items;
} jlist;

typedef struct jdict { /* insertion-ordered, like Python's dict */
  size_t n, cap;
  jv *keys;
  jv *vals;
} jdict;

struct jnode;
typedef struct jfunc {
  int kind;        /* JF_MACRO, JF_BUILTIN, JF_METHOD */
  const char *name;
  const struct jnode *macro;
  struct jv *self; /* bound object of a method, NULL otherwise */
} jfunc;
enum { JF_MACRO = 1, JF_BUILTIN, JF_METHOD };

struct jv {
  uint8_t kind;
  union {
    bool b;
    int64_t i;
    double f;
    jstr *s;
    jlist *l;
    jdict *d; /* JV_DICT and JV_NS (a namespace is a mutable dict) */
    jfunc *fn;
    const char *undef; /* why it is undefined ("'x' is undefined"), for errors */
  } u;
};

static inline jv jv_undef(const char *why) { jv v = {.kind = JV_UNDEF}; v.u.undef = why; return v; }
static inline jv jv_none(void) { jv v = {.kind = JV_NONE}; return v; }
static inline jv jv_bool(bool b) { jv v = {.kind = JV_BOOL}; v.u.b = b; return v; }
static inline jv jv_int(int64_t i) { jv v = {.kind = JV_INT}; v.u.i = i; return v; }
static inline jv jv_float(double f) { jv v = {.kind = JV_FLOAT}; v.u.f = f; return v; }

jstr *jstr_new(jarena *a, const char *s, size_t len, uint8_t tflag);
jv jv_str(jarena *a, const char *s, size_t len, uint8_t tflag);
jv jv_cstr(jarena *a, const char *s); /* clean literal */
static inline bool jstr_tainted(const jstr *s, size_t i) {
  return s->tflag == JT_ALL || (s->tflag == JT_MIXED && s->taint[i]);
}
/* Substring [from, to) keeping taint. */
jv jv_substr(jarena *a, const jstr *s, size_t from, size_t to);

/* Growable string with taint, used to build outputs and new strings. */
typedef struct jbuf {
  jarena *a;
  char *s;
  uint8_t *t;
  size_t len, cap;
  size_t limit; /* fails with ok=false beyond this many bytes */
  bool any_taint, ok;
} jbuf;
void jbuf_init(jbuf *b, jarena *a, size_t limit);
void jbuf_put(jbuf *b, const char *s, size_t n, bool taint);
void jbuf_puts(jbuf *b, const char *s); /* clean */
void jbuf_putstr(jbuf *b, const jstr *s);
void jbuf_putstr_range(jbuf *b, const jstr *s, size_t from, size_t to);
jv jbuf_value(jbuf *b); /* a string value sharing the buffer */

jlist *jlist_new(jarena *a, size_t n);
jv jv_list(jlist *l);
jdict *jdict_new(jarena *a, size_t cap);
bool jdict_set(jarena *a, jdict *d, jv key, jv val); /* false when out of memory */
/* Adds a key known to be absent (JSON objects): O(1) instead of a scan. */
bool jdict_append(jarena *a, jdict *d, jv key, jv val);
const jv *jdict_get(const jdict *d, const char *key, size_t klen);
const jv *jdict_getv(const jdict *d, jv key);

bool jv_truthy(jv v);
bool jv_equal(jv a, jv b);
const char *jv_type_name(jv v);    /* Python type name: str, int, list, dict, NoneType */
const char *jv_object_repr(jv v);  /* Jinja's object_type_repr: 'dict object', 'None' */

/* ---------------------------------------------------------------- tokens and AST */

typedef enum jtok_kind {
  TK_EOF = 0, TK_TEXT, TK_VAR_BEGIN, TK_VAR_END, TK_BLOCK_BEGIN, TK_BLOCK_END,
  TK_NAME, TK_STRING, TK_INT, TK_FLOAT, TK_OP,
} jtok_kind;

typedef struct jtok {
  uint8_t kind;
  int line, col;
  const char *s; /* TEXT/NAME/STRING/OP: decoded bytes (arena); NUL-terminated */
  size_t len;
  int64_t i;
  double f;
} jtok;

typedef enum jnode_kind {
  /* statements */
  N_BODY = 1, N_TEXT, N_OUTPUT, N_IF, N_FOR, N_SET, N_SET_ATTR, N_SET_BLOCK, N_MACRO, N_BREAK,
  N_CONTINUE, N_WITH, N_GENERATION, N_FILTER_BLOCK,
  /* expressions */
  N_LITERAL, N_NAME, N_LIST, N_TUPLE, N_DICT, N_ATTR, N_ITEM, N_SLICE, N_CALL, N_FILTER, N_TEST,
  N_NOT, N_NEG, N_POS, N_AND, N_OR, N_BINOP, N_COMPARE, N_CONCAT, N_COND, N_KWARG,
} jnode_kind;

typedef struct jnode {
  uint8_t kind;
  int line, col;
  const char *name; /* NAME/ATTR/FILTER/TEST/KWARG/MACRO/SET target; BINOP/COMPARE operator */
  jv lit;           /* LITERAL */
  struct jnode **kids;
  size_t n;
  /* N_FOR: kids[0]=target (NAME/TUPLE), kids[1]=iter, kids[2]=cond or NULL, kids[3]=body,
   *        kids[4]=else or NULL. N_IF: kids = cond, body, [else-chain]. N_CALL/FILTER/TEST:
   *        kids[0]=callee/operand, rest args (N_KWARG for keyword args).
   * N_COMPARE: kids = operands, ops in `ops`. N_MACRO: kids[0]=body, rest params
   *        (N_NAME or N_KWARG with default). */
  const char **ops;
  bool flag; /* N_FOR recursive; N_TEST negated */
} jnode;

typedef struct jtemplate {
  jarena arena; /* the AST lives here for the template's lifetime */
  jnode *root;
} jtemplate;

/* Lexes src (any newline convention) as transformers' Jinja environment does.
 * On error fills st with "line L:C: ..." and returns the code. */
di_code jinja_lex(jarena *a, const char *src, size_t len, jtok **toks, size_t *n, di_status *st);
di_code jinja_parse(jarena *a, const jtok *toks, size_t n, jnode **root, di_status *st);

/* ---------------------------------------------------------------- evaluation */

typedef struct jframe {
  struct jframe *parent;
  jdict *vars;
} jframe;

typedef struct jctx {
  jarena *a;
  jframe *globals;
  jbuf out;
  di_status *st;
  bool err;
  int depth, max_depth;
  uint64_t steps, max_steps;
  int64_t now; /* strftime_now clock; 0 = real time */
  int line, col; /* of the node being evaluated, for error positions */
  int loop_ctl;  /* 1 break, 2 continue */
} jctx;

/* Runtime error in Python/Jinja2 terms ("UndefinedError: ..."); returns an undefined value so
 * callers can `return jerr(...)`. */
jv jerr(jctx *c, di_code code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
jv jundef_fail(jctx *c, jv u);

/* Charges work proportional to n against the step budget, so that loops over
 * large values (membership tests, sorts, joins) stay bounded in time too. */
static inline bool jcharge(jctx *c, uint64_t n) {
  c->steps += n;
  if (c->steps <= c->max_steps) return !c->err;
  jerr(c, DI_ERR_RANGE, "template render exceeded %llu evaluation steps", (unsigned long long)c->max_steps);
  return false;
}

/* Python str() and repr() into a buffer (taint of strings kept). */
void jv_to_str(jctx *c, jbuf *b, jv v);
void jv_repr(jctx *c, jbuf *b, jv v);
jv jv_stringify(jctx *c, jv v); /* str(v) as a string value */
void py_float_repr(double f, char *out, size_t n);

/* json.dumps as transformers' tojson calls it. indent < 0 = none. */
bool jv_tojson(jctx *c, jbuf *b, jv v, int indent, const char *item_sep, const char *key_sep,
               bool sort_keys, bool ensure_ascii, int level);

/* Builtins: filters, tests, global functions, methods. args are positional; kw names/values are
 * keyword arguments. */
typedef struct jargs {
  jv *pos;
  size_t n;
  const char **kwn;
  jv *kwv;
  size_t nkw;
} jargs;
jv jbuiltin_filter(jctx *c, const char *name, jv v, jargs *a);
bool jbuiltin_test(jctx *c, const char *name, jv v, jargs *a, bool *out);
jv jbuiltin_call(jctx *c, const char *name, jargs *a);
jv jbuiltin_method(jctx *c, jv self, const char *name, jargs *a);
bool jbuiltin_has_filter(const char *name);
bool jbuiltin_has_test(const char *name);
bool jbuiltin_is_global(const char *name);
bool jbuiltin_is_method(jv self, const char *name);
jv jargs_get(jargs *a, size_t i, const char *kw, jv dflt);

/* Helpers shared by eval and builtins. */
jv jv_concat(jctx *c, jv a, jv b);       /* a ~ b on strings, taint kept */
jv jv_iter_list(jctx *c, jv v);          /* a list to iterate (dict -> keys, str -> chars) */
jv jv_getattr(jctx *c, jv obj, const char *name, size_t len);
jv jv_getitem(jctx *c, jv obj, jv key);
int jv_compare(jctx *c, jv a, jv b, bool *ok); /* <0, 0, >0 for ordering ops */
bool jv_contains(jctx *c, jv container, jv item);

/* String operations shared by filters and methods (methods.c). */
bool py_isspace(int32_t cp);
jv jstr_strip(jctx *c, jv s, jv chars, bool left, bool right);
jv jstr_case(jctx *c, jv s, int mode); /* 0 lower, 1 upper, 2 capitalize, 3 title */
jv jstr_replace(jctx *c, jv s, jv old, jv new_, int64_t count);
jv jstr_join(jctx *c, jv sep, jv items, jv attr);

/* Renders root with the given global variables into c->out. */
di_code jinja_render(jctx *c, const jnode *root);

#endif
