/* The tool-call output parser: model text in one of the tools.h formats into
 * content and calls. It reads byte by byte in effect (every decision waits
 * until the bytes that settle it have arrived), so a reply fed whole and one
 * fed token by token give the same callbacks: streamed delta.tool_calls and
 * the whole answer's message.tool_calls agree (fuzz_tool_parse checks it).
 *
 * A call's name is reported as soon as it is known and its arguments as they
 * arrive, as OpenAI streams them: for a JSON body once `{"name": "N",
 * "arguments": ` has been read (then the arguments object is scanned to its
 * end, raw, so strings may hold the close tag); for DeepSeek's bodies after
 * the name's separator, up to the close tag. A JSON body in another shape
 * (keys in another order, arguments as a string) is read whole at its close
 * tag instead. Text that never becomes a call stays content. */
#include <stdlib.h>
#include <string.h>

#include "server/tools.h"

enum { P_OUT, P_START, P_ARGS, P_TAIL, P_WHOLE };

static int is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

void di_srv_toolparse_init(di_srv_toolparse *p, const di_srv_toolfmt *f) {
  memset(p, 0, sizeof *p);
  p->f = f;
}

void di_srv_toolparse_free(di_srv_toolparse *p) { di_srv_buf_free(&p->buf); }

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

/* Bytes at the end of s that could begin tag (held back while streaming). */
static size_t partial_tail(const char *s, size_t n, const char *tag) {
  if (!tag) return 0;
  size_t k = strlen(tag);
  for (size_t m = k - 1; m > 0; m--)
    if (m <= n && !memcmp(s + n - m, tag, m)) return m;
  return 0;
}

static size_t trailing_ws(const char *s, size_t n) {
  size_t m = 0;
  while (m < n && is_ws(s[n - 1 - m])) m++;
  return m;
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

/* A call's JSON text into its name and arguments text; false if it is not one. */
static bool whole_call(const char *s, size_t n, const char *args_key, const di_srv_toolsink *k, int index) {
  json_t *j = json_loadb(s, n, 0, NULL);
  json_t *name = json_object_get(j, "name");
  json_t *args = json_object_get(j, args_key);
  if (!args) args = json_object_get(j, strcmp(args_key, "arguments") ? "arguments" : "parameters");
  bool ok = json_is_string(name) && (json_is_object(args) || json_is_string(args) || !args);
  if (ok) {
    char *text = args ? (json_is_string(args) ? strdup(json_string_value(args)) : json_dumps(args, JSON_COMPACT))
                      : strdup("{}");
    k->call(k->user, index, json_string_value(name));
    if (text && *text) k->args(k->user, index, text, strlen(text));
    free(text);
  }
  json_decref(j);
  return ok;
}

/* `{"name": "N", "<args key>": ` then an object: 1 (name copied, *used =
 * bytes read), 0 not decided yet, -1 another shape. */
static int json_head(const char *s, size_t n, const char *args_key, char *name, size_t cap, size_t *used) {
  size_t i = 0;
#define WS()                                                                                                           \
  while (i < n && is_ws(s[i])) i++;                                                                                    \
  if (i == n) return 0
#define LIT(t)                                                                                                         \
  for (const char *q_ = (t); *q_; q_++, i++) {                                                                         \
    if (i == n) return 0;                                                                                              \
    if (s[i] != *q_) return -1;                                                                                        \
  }
  WS();
  LIT("{");
  WS();
  LIT("\"name\"");
  WS();
  LIT(":");
  WS();
  LIT("\"");
  size_t at = i;
  while (i < n && s[i] != '"') {
    if (s[i] == '\\' || (unsigned char)s[i] < 0x20 || i - at + 1 >= cap) return -1; /* escaped names: read whole */
    i++;
  }
  if (i == n) return 0;
  memcpy(name, s + at, i - at);
  name[i - at] = 0;
  i++;
  WS();
  LIT(",");
  WS();
  if (s[i] != '"') return -1;
  i++;
  size_t kl = strlen(args_key);
  if (n - i < kl + 1) return memcmp(s + i, args_key, n - i) ? -1 : 0;
  if (memcmp(s + i, args_key, kl) || s[i + kl] != '"') return -1;
  i += kl + 1;
  WS();
  LIT(":");
  WS();
  if (s[i] != '{') return -1;
  *used = i;
  return name[0] ? 1 : -1;
#undef WS
#undef LIT
}

/* Scans the JSON arguments value; returns the bytes that belong to it, and
 * sets *done when it ended there. */
static size_t scan_json(di_srv_toolparse *p, const char *s, size_t n, int *done) {
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (p->in_str) {
      if (p->esc) p->esc = 0;
      else if (c == '\\') p->esc = 1;
      else if (c == '"') p->in_str = 0;
    } else if (c == '"') {
      p->in_str = 1;
    } else if (c == '{' || c == '[') {
      p->depth++;
    } else if ((c == '}' || c == ']') && --p->depth == 0) {
      *done = 1;
      return i + 1;
    }
  }
  *done = 0;
  return n;
}

static void end_call(di_srv_toolparse *p, size_t consumed) {
  drop(&p->buf, consumed);
  p->n_calls++;
  p->trim_lead = 1;
  p->phase = P_OUT;
}

/* Not a call after all: the open tag and what followed stay text. */
static void not_a_call(di_srv_toolparse *p, size_t n, const di_srv_toolsink *k) {
  k->text(k->user, p->f->open, strlen(p->f->open));
  if (n) k->text(k->user, p->buf.p, n);
  drop(&p->buf, n);
  p->trim_lead = 0;
  p->phase = P_OUT;
}

/* Outside calls: content up to the next tag. Returns false when it waits for more. */
static bool step_out(di_srv_toolparse *p, int final, const di_srv_toolsink *k) {
  const di_srv_toolfmt *f = p->f;
  di_srv_buf *b = &p->buf;
  const char *tags[3] = {f->open, f->block_open, f->block_close};
  const char *at = NULL;
  int which = -1;
  for (int t = 0; t < 3; t++) {
    const char *x = tags[t] && b->len ? find(b->p, b->len, tags[t]) : NULL;
    if (x && (!at || x < at)) at = x, which = t;
  }
  if (at) {
    text_out(p, b->p, (size_t)(at - b->p), which != 2, k);
    drop(b, (size_t)(at - b->p) + strlen(tags[which]));
    if (which == 0) p->phase = P_START;
    else p->trim_lead = 1;
    return true;
  }
  size_t keep = 0;
  if (!final) { /* what may still be the start of a tag, and the whitespace before it */
    for (int t = 0; t < 3; t++) {
      size_t m = partial_tail(b->p, b->len, tags[t]);
      if (m > keep) keep = m;
    }
    keep += trailing_ws(b->p, b->len - keep);
  }
  if (b->len > keep) {
    text_out(p, b->p, b->len - keep, final && p->n_calls, k);
    drop(b, b->len - keep);
  }
  return false;
}

/* DeepSeek: [name_pre] NAME name_sep, then arguments up to the close tag. */
static bool step_named_start(di_srv_toolparse *p, int final, const di_srv_toolsink *k) {
  const di_srv_toolfmt *f = p->f;
  di_srv_buf *b = &p->buf;
  const char *sep = find(b->p, b->len, f->name_sep);
  const char *close = find(b->p, b->len, f->close);
  if (close && (!sep || close < sep)) { /* closed before any name */
    not_a_call(p, (size_t)(close - b->p) + strlen(f->close), k);
    return true;
  }
  if (!sep) {
    if (final) not_a_call(p, b->len, k);
    return false;
  }
  const char *s = b->p, *e = sep;
  size_t pl = f->name_pre ? strlen(f->name_pre) : 0;
  if (pl && (size_t)(e - s) >= pl && !memcmp(s, f->name_pre, pl)) s += pl;
  while (s < e && is_ws(*s)) s++;
  while (e > s && is_ws(e[-1])) e--;
  char name[256];
  if (s == e || (size_t)(e - s) >= sizeof name) {
    not_a_call(p, (size_t)(sep - b->p) + strlen(f->name_sep), k);
    return true;
  }
  memcpy(name, s, (size_t)(e - s));
  name[e - s] = 0;
  k->call(k->user, p->n_calls, name);
  drop(b, (size_t)(sep - b->p) + strlen(f->name_sep));
  p->phase = P_ARGS;
  return true;
}

/* DeepSeek arguments: raw text up to the close tag, less the fence's closing
 * backticks and the whitespace around them (held back until they are known
 * to be inside the arguments). */
static bool step_named_args(di_srv_toolparse *p, int final, const di_srv_toolsink *k) {
  const di_srv_toolfmt *f = p->f;
  di_srv_buf *b = &p->buf;
  const char *close = find(b->p, b->len, f->close);
  size_t avail = close ? (size_t)(close - b->p) : b->len;
  if (!close && !final) avail -= partial_tail(b->p, b->len, f->close);
  size_t out = avail;
  if (f->args_end && *f->args_end)
    while (out && (is_ws(b->p[out - 1]) || b->p[out - 1] == '`')) out--;
  else
    out -= trailing_ws(b->p, out);
  if (out) k->args(k->user, p->n_calls, b->p, out);
  if (close || final) {
    end_call(p, close ? avail + strlen(f->close) : b->len);
    return close != NULL;
  }
  drop(b, out);
  return false;
}

static bool step_json_start(di_srv_toolparse *p, int final, const di_srv_toolsink *k) {
  char name[256];
  size_t used = 0;
  int r = json_head(p->buf.p, p->buf.len, p->f->args_key, name, sizeof name, &used);
  if (r == 1) {
    k->call(k->user, p->n_calls, name);
    drop(&p->buf, used);
    p->depth = p->in_str = p->esc = 0;
    p->phase = P_ARGS;
    return true;
  }
  if (r < 0) {
    p->phase = P_WHOLE;
    return true;
  }
  if (final) not_a_call(p, p->buf.len, k);
  return false;
}

static bool step_json_args(di_srv_toolparse *p, int final, const di_srv_toolsink *k) {
  int done = 0;
  size_t n = scan_json(p, p->buf.p, p->buf.len, &done);
  if (n) k->args(k->user, p->n_calls, p->buf.p, n);
  drop(&p->buf, n);
  if (done) p->phase = P_TAIL;
  else if (final) end_call(p, p->buf.len);
  return done;
}

/* After a JSON call's arguments: whatever precedes the close tag (the
 * object's closing brace) is dropped. */
static bool step_tail(di_srv_toolparse *p, int final, const di_srv_toolsink *k) {
  (void)k;
  di_srv_buf *b = &p->buf;
  const char *close = find(b->p, b->len, p->f->close);
  if (close) {
    end_call(p, (size_t)(close - b->p) + strlen(p->f->close));
    return true;
  }
  if (final) end_call(p, b->len);
  else drop(b, b->len - partial_tail(b->p, b->len, p->f->close));
  return false;
}

/* A JSON call in another shape: the first close tag after a complete call
 * ends it (one inside a JSON string does not). */
static bool step_whole(di_srv_toolparse *p, int final, const di_srv_toolsink *k) {
  di_srv_buf *b = &p->buf;
  const char *close = p->f->close;
  for (const char *at = b->p, *end; b->len && (end = find(at, b->len - (size_t)(at - b->p), close)); at = end + 1)
    if (whole_call(b->p, (size_t)(end - b->p), p->f->args_key, k, p->n_calls)) {
      end_call(p, (size_t)(end - b->p) + strlen(close));
      return true;
    }
  if (final) not_a_call(p, b->len, k);
  return false;
}

static void feed_tagged(di_srv_toolparse *p, int final, const di_srv_toolsink *k) {
  int named = p->f->name_sep != NULL;
  for (;;) {
    bool more = false;
    switch (p->phase) {
    case P_OUT: more = step_out(p, final, k); break;
    case P_START: more = named ? step_named_start(p, final, k) : step_json_start(p, final, k); break;
    case P_ARGS: more = named ? step_named_args(p, final, k) : step_json_args(p, final, k); break;
    case P_TAIL: more = step_tail(p, final, k); break;
    case P_WHOLE: more = step_whole(p, final, k); break;
    }
    if (!more || p->buf.oom) return;
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
  if (whole_call(b->p, b->len, p->f->args_key, k, p->n_calls)) p->n_calls++;
  else k->text(k->user, b->p, b->len);
  b->len = 0;
}

void di_srv_toolparse_feed(di_srv_toolparse *p, const char *s, size_t n, int final, const di_srv_toolsink *k) {
  di_srv_buf_put(&p->buf, s, n);
  if (p->buf.oom) return;
  if (p->f->open) feed_tagged(p, final, k);
  else feed_whole(p, final, k);
}
