/* Tool calls: the request's tool_choice, the tool-call formats of the chat
 * templates we know (Qwen/Hermes <tool_call> blocks, Llama 3 JSON), the
 * prompt that describes tools to a model whose template ignores them, the
 * grammar that forces a call (tool_choice required or named), and the
 * incremental parser that turns output text back into tool_calls. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/tools.h"

const di_srv_toolfmt DI_TOOLFMT_HERMES = {"hermes", "<tool_call>", "</tool_call>", "<tool_call>\n", "\n</tool_call>",
                                          "\n", "arguments", 1};
const di_srv_toolfmt DI_TOOLFMT_LLAMA3 = {"llama3", NULL, NULL, "", "", "", "parameters", 0};

const di_srv_toolfmt *di_srv_toolfmt_named(const char *name) {
  if (!name) return NULL;
  if (!strcmp(name, "hermes")) return &DI_TOOLFMT_HERMES;
  if (!strcmp(name, "llama3")) return &DI_TOOLFMT_LLAMA3;
  return NULL;
}

const char *di_srv_toolfmt_detect(const char *tmpl) {
  if (!tmpl) return NULL;
  if (strstr(tmpl, "<tool_call>")) return "hermes";
  if (strstr(tmpl, "<|python_tag|>") || strstr(tmpl, "\"parameters\": ")) return "llama3";
  return NULL;
}

static json_t *fn_of(json_t *tool) { return json_object_get(tool, "function"); }

/* One call as JSON Schema: {name: const, <args_key>: the parameters}. */
static json_t *call_schema(json_t *fn, const char *args_key) {
  json_t *params = json_object_get(fn, "parameters");
  /* OpenAI: a function without parameters takes none */
  json_t *p = params && !json_is_null(params)
                  ? json_incref(params)
                  : json_pack("{s:s,s:{},s:b}", "type", "object", "properties", "additionalProperties", 0);
  return json_pack("{s:s,s:{s:{s:O},s:o},s:[s,s],s:b}", "type", "object", "properties", "name", "const",
                   json_object_get(fn, "name"), args_key, p, "required", "name", args_key, "additionalProperties", 0);
}

bool di_srv_tools_constraint(json_t *tools, const di_srv_tool_choice *c, const di_srv_toolfmt *f,
                             di_srv_constraint *out, di_srv_err *e) {
  memset(out, 0, sizeof *out);
  if (c->mode != DI_TOOLS_REQUIRED && c->mode != DI_TOOLS_NAMED) return true;
  json_t *alts = json_array();
  size_t i;
  json_t *t;
  json_array_foreach(tools, i, t) {
    json_t *fn = fn_of(t);
    if (c->mode == DI_TOOLS_NAMED && strcmp(json_string_value(json_object_get(fn, "name")), c->name)) continue;
    json_array_append_new(alts, call_schema(fn, f->args_key));
  }
  json_t *schema = json_array_size(alts) == 1 ? json_incref(json_array_get(alts, 0)) : json_pack("{s:O}", "anyOf", alts);
  json_decref(alts);
  char *text = schema ? json_dumps(schema, JSON_COMPACT) : NULL;
  json_decref(schema);
  if (!text) return di_srv_fail(e, 500, "server_error", NULL, "out of memory");
  out->on = 1;
  out->kind = DI_GRAMMAR_JSON_SCHEMA;
  out->src = text;
  out->len = strlen(text);
  out->opts.ws = DI_JSON_WS_PYTHON; /* the spacing these templates show the model */
  out->opts.before = f->before;
  out->opts.after = f->after;
  out->opts.sep = f->sep;
  /* parallel calls: at most one per declared function, so a small model
   * that keeps calling still ends inside a bounded reply */
  out->opts.max_repeat = f->multi && c->parallel && c->mode == DI_TOOLS_REQUIRED ? (int)json_array_size(tools) : 1;
  snprintf(out->param, sizeof out->param, "tools");
  return true;
}

/* Hermes' tool prompt, for templates that never read `tools`: the model is
 * told the functions and the <tool_call> format in a system message. */
json_t *di_srv_tools_in_system(json_t *messages, json_t *tools) {
  char *list = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&list, &len);
  if (!f) return NULL;
  fputs("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>", f);
  size_t i;
  json_t *t;
  json_array_foreach(tools, i, t) {
    char *s = json_dumps(t, JSON_COMPACT | JSON_ENSURE_ASCII);
    if (s) fprintf(f, "\n%s", s);
    free(s);
  }
  fputs("\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
        "<args-json-object>}\n</tool_call>",
        f);
  if (fclose(f)) {
    free(list);
    return NULL;
  }
  json_t *out = json_deep_copy(messages);
  json_t *first = json_array_get(out, 0);
  const char *role = json_string_value(json_object_get(first, "role"));
  const char *sys = role && !strcmp(role, "system") ? json_string_value(json_object_get(first, "content")) : NULL;
  if (out && sys) {
    size_t n = strlen(sys) + 2 + len + 1;
    char *joined = malloc(n);
    if (joined) {
      snprintf(joined, n, "%s\n\n%s", sys, list);
      json_object_set_new(first, "content", json_string(joined));
    }
    free(joined);
  } else if (out) {
    json_array_insert_new(out, 0, json_pack("{s:s,s:s}", "role", "system", "content", list));
  }
  free(list);
  return out;
}

/* ---- output parsing ---- */

static int is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

void di_srv_toolparse_init(di_srv_toolparse *p, const di_srv_toolfmt *f) {
  memset(p, 0, sizeof *p);
  p->f = f;
}

void di_srv_toolparse_free(di_srv_toolparse *p) { di_srv_buf_free(&p->buf); }

/* A call's JSON text into {"name": ..., "arguments": "<JSON text>"}; NULL if it is not one. */
static json_t *to_call(const char *s, size_t n, const char *args_key) {
  json_t *j = json_loadb(s, n, 0, NULL);
  json_t *name = json_object_get(j, "name");
  json_t *args = json_object_get(j, args_key);
  if (!args) args = json_object_get(j, strcmp(args_key, "arguments") ? "arguments" : "parameters");
  json_t *call = NULL;
  if (json_is_string(name) && (json_is_object(args) || json_is_string(args) || !args)) {
    char *text = args ? (json_is_string(args) ? strdup(json_string_value(args)) : json_dumps(args, JSON_COMPACT))
                      : strdup("{}");
    if (text) call = json_pack("{s:O,s:s}", "name", name, "arguments", text);
    free(text);
  }
  json_decref(j);
  return call;
}

static void drop(di_srv_buf *b, size_t n) {
  memmove(b->p, b->p + n, b->len - n);
  b->len -= n;
  b->p[b->len] = 0;
}

static const char *find(const char *h, size_t n, const char *needle) {
  size_t k = strlen(needle);
  for (size_t i = 0; i + k <= n; i++)
    if (!memcmp(h + i, needle, k)) return h + i;
  return NULL;
}

/* Bytes at the end of b that could begin tag (held back while streaming). */
static size_t partial_tail(const char *s, size_t n, const char *tag) {
  size_t k = strlen(tag);
  for (size_t m = k - 1; m > 0; m--)
    if (m <= n && !memcmp(s + n - m, tag, m)) return m;
  return 0;
}

/* Content around calls loses the whitespace that only separates it from
 * them (the newline after </tool_call>), so a reply of calls alone has no
 * content. */
static void text_out(di_srv_toolparse *p, const char *s, size_t n, int before_call, const di_srv_toolsink *k) {
  if (p->trim_lead)
    while (n && is_ws(*s)) s++, n--;
  if (before_call)
    while (n && is_ws(s[n - 1])) n--;
  if (n) {
    p->trim_lead = 0;
    k->text(k->user, s, n);
  }
}

static size_t trailing_ws(const char *s, size_t n) {
  size_t m = 0;
  while (m < n && is_ws(s[n - 1 - m])) m++;
  return m;
}

static void feed_tagged(di_srv_toolparse *p, int final, const di_srv_toolsink *k) {
  const di_srv_toolfmt *f = p->f;
  di_srv_buf *b = &p->buf;
  for (;;) {
    if (!p->in_call) {
      const char *at = b->len ? find(b->p, b->len, f->open) : NULL;
      if (at) {
        text_out(p, b->p, (size_t)(at - b->p), 1, k);
        drop(b, (size_t)(at - b->p) + strlen(f->open));
        p->in_call = 1;
        continue;
      }
      size_t keep = 0;
      if (!final) { /* what may still be the start of a call, and the whitespace before it */
        keep = partial_tail(b->p, b->len, f->open);
        keep += trailing_ws(b->p, b->len - keep);
      }
      if (b->len > keep) {
        text_out(p, b->p, b->len - keep, final && p->n_calls, k);
        drop(b, b->len - keep);
      }
      return;
    }
    /* the first close tag after a complete call: one inside a JSON string
     * (a model may write the tag into an argument) does not end it */
    json_t *call = NULL;
    const char *end = NULL;
    for (const char *at = b->p; !call && b->len && (end = find(at, b->len - (size_t)(at - b->p), f->close));
         at = end + 1)
      call = to_call(b->p, (size_t)(end - b->p), f->args_key);
    if (!call) {
      if (final) { /* not a call after all: the text stays text */
        k->text(k->user, f->open, strlen(f->open));
        if (b->len) k->text(k->user, b->p, b->len);
        b->len = 0;
        p->in_call = 0;
      }
      return;
    }
    k->call(k->user, p->n_calls++, call);
    json_decref(call);
    p->trim_lead = 1;
    drop(b, (size_t)(end - b->p) + strlen(f->close));
    p->in_call = 0;
  }
}

/* Llama 3: a reply that is one JSON object is a call; anything else is text. */
static void feed_whole(di_srv_toolparse *p, int final, const di_srv_toolsink *k) {
  di_srv_buf *b = &p->buf;
  if (p->state == 0) {
    size_t i = 0;
    while (i < b->len && is_ws(b->p[i])) i++;
    if (i == b->len && !final) return;
    p->state = i < b->len && b->p[i] == '{' ? 1 : 2;
  }
  if (p->state == 2) {
    if (b->len) k->text(k->user, b->p, b->len);
    b->len = 0;
    return;
  }
  if (!final || !b->len) return;
  json_t *call = to_call(b->p, b->len, p->f->args_key);
  if (call) {
    k->call(k->user, p->n_calls++, call);
    json_decref(call);
  } else if (b->len) {
    k->text(k->user, b->p, b->len);
  }
  b->len = 0;
}

void di_srv_toolparse_feed(di_srv_toolparse *p, const char *s, size_t n, int final, const di_srv_toolsink *k) {
  di_srv_buf_put(&p->buf, s, n);
  if (p->buf.oom) return;
  if (p->f->open) feed_tagged(p, final, k);
  else feed_whole(p, final, k);
}
