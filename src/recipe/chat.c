/* The public face of the recipe: compile, render with transformers'
 * variables, and the small output-side helpers. */
#include "recipe/chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recipe/jinja.h"

#define TEMPLATE_ARENA_LIMIT ((size_t)64 << 20)
#define MAX_JSON_DEPTH 128

struct di_chat_template {
  jarena arena;
  jnode *root;
};

bool di_recipe_utf8_valid(const char *s, size_t len, size_t *bad) {
  const unsigned char *p = (const unsigned char *)s;
  size_t i = 0;
  while (i < len) {
    unsigned char c = p[i];
    if (c < 0x80) { i++; continue; }
    size_t n;
    uint32_t cp, min;
    if (c >= 0xC2 && c <= 0xDF) { n = 2; cp = c & 0x1F; min = 0x80; }
    else if (c >= 0xE0 && c <= 0xEF) { n = 3; cp = c & 0x0F; min = 0x800; }
    else if (c >= 0xF0 && c <= 0xF4) { n = 4; cp = c & 0x07; min = 0x10000; }
    else { *bad = i; return false; }
    if (len - i < n) { *bad = i; return false; }
    for (size_t k = 1; k < n; k++) {
      if ((p[i + k] & 0xC0) != 0x80) { *bad = i; return false; }
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) { *bad = i; return false; }
    i += n;
  }
  return true;
}

di_code di_chat_template_compile(const char *src, size_t len, di_chat_template **out, di_status *st) {
  *out = NULL;
  size_t bad;
  if (!di_recipe_utf8_valid(src, len, &bad))
    return di_errorf(st, DI_ERR_INVALID, "chat template: invalid UTF-8 at byte offset %zu", bad);
  di_chat_template *t = calloc(1, sizeof *t);
  if (!t) return di_errorf(st, DI_ERR_NOMEM, "chat template: out of memory");
  jarena_init(&t->arena, TEMPLATE_ARENA_LIMIT + len * 64);
  jtok *toks;
  size_t nt;
  di_code rc = jinja_lex(&t->arena, src, len, &toks, &nt, st);
  if (!rc) rc = jinja_parse(&t->arena, toks, nt, &t->root, st);
  if (rc) {
    di_error_wrap(st, "chat template: ");
    di_chat_template_free(t);
    return rc;
  }
  *out = t;
  return DI_OK;
}

void di_chat_template_free(di_chat_template *t) {
  if (!t) return;
  jarena_free(&t->arena);
  free(t);
}

void di_render_out_free(di_render_out *o) {
  if (!o) return;
  free(o->text);
  free(o->spans);
  memset(o, 0, sizeof *o);
}

/* ---------------------------------------------------------------- JSON -> values */

typedef struct conv {
  jctx *c;
  uint8_t taint;
  char path[256];
} conv;

static jv from_json(conv *cv, const json_t *j, int depth) {
  jctx *c = cv->c;
  if (depth > MAX_JSON_DEPTH) return jerr(c, DI_ERR_INVALID, "%s: JSON nested deeper than %d", cv->path, MAX_JSON_DEPTH);
  switch (json_typeof(j)) {
    case JSON_NULL: return jv_none();
    case JSON_TRUE: return jv_bool(true);
    case JSON_FALSE: return jv_bool(false);
    case JSON_INTEGER: return jv_int((int64_t)json_integer_value(j));
    case JSON_REAL: return jv_float(json_real_value(j));
    case JSON_STRING: {
      const char *s = json_string_value(j);
      size_t n = json_string_length(j), bad;
      if (!di_recipe_utf8_valid(s, n, &bad))
        return jerr(c, DI_ERR_INVALID, "%s: invalid UTF-8 at byte offset %zu", cv->path, bad);
      jv v = jv_str(c->a, s, n, cv->taint);
      if (v.kind != JV_STR) return jerr(c, DI_ERR_NOMEM, "render exceeded its memory budget");
      return v;
    }
    case JSON_ARRAY: {
      size_t n = json_array_size(j);
      jlist *l = jlist_new(c->a, n);
      if (!l) return jerr(c, DI_ERR_NOMEM, "render exceeded its memory budget");
      size_t plen = strlen(cv->path);
      for (size_t i = 0; i < n && !c->err; i++) {
        snprintf(cv->path + plen, sizeof cv->path - plen, "[%zu]", i);
        l->items[i] = from_json(cv, json_array_get(j, i), depth + 1);
      }
      cv->path[plen] = 0;
      return jv_list(l);
    }
    case JSON_OBJECT: {
      jdict *d = jdict_new(c->a, json_object_size(j) + 2);
      if (!d) return jerr(c, DI_ERR_NOMEM, "render exceeded its memory budget");
      size_t plen = strlen(cv->path);
      const char *k;
      json_t *v;
      json_object_foreach((json_t *)j, k, v) {
        if (c->err) break;
        snprintf(cv->path + plen, sizeof cv->path - plen, ".%s", k);
        size_t kl = strlen(k), bad;
        if (!di_recipe_utf8_valid(k, kl, &bad))
          return jerr(c, DI_ERR_INVALID, "%s: invalid UTF-8 in key at byte offset %zu", cv->path, bad);
        jv val = from_json(cv, v, depth + 1);
        if (!jdict_append(c->a, d, jv_str(c->a, k, kl, cv->taint), val))
          return jerr(c, DI_ERR_NOMEM, "render exceeded its memory budget");
      }
      cv->path[plen] = 0;
      jv r = {.kind = JV_DICT};
      r.u.d = d;
      return r;
    }
  }
  return jv_none();
}

/* transformers 5: drop None-valued keys, then alias the reasoning fields as
 * {"thinking": r, **message, "reasoning_content": r} (that key order). */
static jv normalize_message(jctx *c, jv m) {
  if (m.kind != JV_DICT) return m;
  jdict *src = m.u.d, *d = jdict_new(c->a, src->n + 2);
  if (!d) return jerr(c, DI_ERR_NOMEM, "render exceeded its memory budget");
  static const char *const names[] = {"reasoning_content", "thinking", "reasoning"};
  const jv *r = NULL;
  for (int k = 0; k < 3 && !r; k++) {
    r = jdict_get(src, names[k], strlen(names[k]));
    if (r && r->kind == JV_NONE) r = NULL;
  }
  const jv *th = jdict_get(src, "thinking", 8);
  if (r && (!th || th->kind == JV_NONE)) jdict_set(c->a, d, jv_cstr(c->a, "thinking"), *r);
  /* keys are unique, and "thinking" was only put first if src has none */
  for (size_t i = 0; i < src->n; i++)
    if (src->vals[i].kind != JV_NONE) jdict_append(c->a, d, src->keys[i], src->vals[i]);
  if (r) jdict_set(c->a, d, jv_cstr(c->a, "reasoning_content"), *r);
  jv out = {.kind = JV_DICT};
  out.u.d = d;
  return out;
}

static void set_global(jctx *c, const char *name, jv v) {
  if (!jdict_set(c->a, c->globals->vars, jv_cstr(c->a, name), v))
    jerr(c, DI_ERR_NOMEM, "render exceeded its memory budget");
}

di_code di_chat_render_ex(const di_chat_template *t, const json_t *messages, const di_chat_opts *o,
                          di_render_out *out, di_status *st) {
  memset(out, 0, sizeof *out);
  static const di_chat_opts defaults = {0};
  if (!o) o = &defaults;
  if (!t || !messages || !json_is_array(messages))
    return di_errorf(st, DI_ERR_INVALID, "chat template: messages must be a JSON array");
  if (o->tools && !json_is_array(o->tools) && !json_is_null(o->tools))
    return di_errorf(st, DI_ERR_INVALID, "chat template: tools must be a JSON array");
  if (o->kwargs && !json_is_object(o->kwargs))
    return di_errorf(st, DI_ERR_INVALID, "chat template: kwargs must be a JSON object");
  jarena arena;
  jarena_init(&arena, o->max_memory ? o->max_memory : (size_t)256 << 20);
  jctx c = {.a = &arena, .st = st};
  c.max_depth = o->max_depth > 0 ? o->max_depth : 64;
  c.max_steps = o->max_steps ? o->max_steps : 20000000;
  c.now = o->now;
  jbuf_init(&c.out, &arena, o->max_output ? o->max_output : (size_t)8 << 20);
  c.globals = jarena_alloc(&arena, sizeof *c.globals);
  if (c.globals) c.globals->vars = jdict_new(&arena, 16);
  if (!c.globals || !c.globals->vars) {
    jarena_free(&arena);
    return di_errorf(st, DI_ERR_NOMEM, "chat template: out of memory");
  }
  conv cv = {.c = &c, .taint = JT_ALL};
  snprintf(cv.path, sizeof cv.path, "messages");
  jv msgs = from_json(&cv, messages, 0);
  if (!c.err)
    for (size_t i = 0; i < msgs.u.l->n; i++) msgs.u.l->items[i] = normalize_message(&c, msgs.u.l->items[i]);
  snprintf(cv.path, sizeof cv.path, "tools");
  jv tools = o->tools && !c.err ? from_json(&cv, o->tools, 0) : jv_none();
  if (!c.err) {
    set_global(&c, "messages", msgs);
    set_global(&c, "tools", tools);
    set_global(&c, "documents", jv_none());
    set_global(&c, "add_generation_prompt", jv_bool(o->add_generation_prompt));
    if (o->bos_token) set_global(&c, "bos_token", jv_cstr(&arena, o->bos_token));
    if (o->eos_token) set_global(&c, "eos_token", jv_cstr(&arena, o->eos_token));
  }
  if (o->kwargs && !c.err) {
    cv.taint = o->kwargs_trusted ? JT_CLEAN : JT_ALL;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)o->kwargs, k, v) {
      snprintf(cv.path, sizeof cv.path, "kwargs.%s", k);
      jv val = from_json(&cv, v, 0);
      if (c.err) break;
      set_global(&c, k, val);
    }
  }
  di_code rc = c.err ? st->code : jinja_render(&c, t->root);
  if (rc) {
    jarena_free(&arena);
    return rc;
  }
  size_t n = c.out.len, ns = 0;
  for (size_t i = 0; i < n; i++)
    if (i == 0 || c.out.t[i] != c.out.t[i - 1]) ns++;
  out->text = malloc(n + 1);
  out->spans = malloc((ns ? ns : 1) * sizeof *out->spans);
  if (!out->text || !out->spans) {
    jarena_free(&arena);
    di_render_out_free(out);
    return di_errorf(st, DI_ERR_NOMEM, "chat template: out of memory");
  }
  if (n) memcpy(out->text, c.out.s, n);
  out->text[n] = 0;
  out->len = n;
  for (size_t i = 0; i < n; i++) {
    if (i == 0 || c.out.t[i] != c.out.t[i - 1]) {
      out->spans[out->n_spans].off = i;
      out->spans[out->n_spans].len = 0;
      out->spans[out->n_spans].content = c.out.t[i] != 0;
      out->n_spans++;
    }
    out->spans[out->n_spans - 1].len++;
  }
  jarena_free(&arena);
  return DI_OK;
}

di_code di_chat_render(const di_chat_template *t, const json_t *messages, const json_t *tools,
                       bool add_generation_prompt, const json_t *kwargs, const char *bos, const char *eos,
                       di_render_out *out, di_status *st) {
  di_chat_opts o = {.tools = tools, .add_generation_prompt = add_generation_prompt, .kwargs = kwargs,
                    .bos_token = bos, .eos_token = eos};
  return di_chat_render_ex(t, messages, &o, out, st);
}

/* ---------------------------------------------------------------- reasoning */

static const char *find(const char *h, size_t hl, const char *n, size_t nl) {
  if (!nl || nl > hl) return NULL;
  for (size_t i = 0; i + nl <= hl; i++)
    if (h[i] == n[0] && !memcmp(h + i, n, nl)) return h + i;
  return NULL;
}

void di_recipe_split_reasoning(const char *text, size_t len, const char *open, const char *close,
                               di_reasoning_split *out) {
  if (!open) open = "<think>";
  if (!close) close = "</think>";
  size_t ol = strlen(open), cl = strlen(close);
  memset(out, 0, sizeof *out);
  out->content = text;
  out->content_len = len;
  const char *o = find(text, len, open, ol);
  const char *c = find(text, len, close, cl);
  if (o && (!c || o < c)) {
    const char *r = o + ol;
    const char *ce = find(r, len - (size_t)(r - text), close, cl);
    out->found = true;
    out->reasoning = r;
    if (ce) {
      out->reasoning_len = (size_t)(ce - r);
      out->content = ce + cl;
      out->content_len = len - (size_t)(out->content - text);
    } else {
      out->reasoning_len = len - (size_t)(r - text);
      out->content = text + len;
      out->content_len = 0;
    }
  } else if (c) {
    out->found = true;
    out->reasoning = text;
    out->reasoning_len = (size_t)(c - text);
    out->content = c + cl;
    out->content_len = len - (size_t)(out->content - text);
  }
}
