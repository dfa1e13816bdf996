/* Tool calls (see tools.c): tool_choice, the tool-call formats of known chat
 * templates, the forcing grammar, the prompt for templates without tools,
 * and the output parser shared by streamed and whole answers. */
#ifndef DI_SERVER_TOOLS_H
#define DI_SERVER_TOOLS_H

#include "server/internal.h"

/* How a template's model writes a call (one table row per format).
 * open/close: tags around each call in output (NULL open: the whole reply is
 * one JSON call); block_open/block_close: tags around all of a reply's calls
 * (DeepSeek), dropped from content. name_sep NULL: a call is a JSON object
 * {"name": ..., args_key: ...}; else it is [name_pre] NAME name_sep ARGS
 * [args_end] (DeepSeek). before/after/sep: what the forcing grammar writes
 * around and between calls (JSON bodies). */
typedef struct di_srv_toolfmt {
  const char *name;
  const char *open, *close;
  const char *block_open, *block_close;
  const char *name_pre, *name_sep, *args_end;
  const char *lead, *tok_sep; /* name_pre as its text and its tag (V3: "function", <｜tool▁sep｜>) */
  const char *before, *after, *sep;
  const char *args_key; /* "arguments" (Hermes) or "parameters" (Llama 3) */
  int multi;            /* several calls in one reply */
} di_srv_toolfmt;

extern const di_srv_toolfmt DI_TOOLFMT_HERMES, DI_TOOLFMT_LLAMA3, DI_TOOLFMT_DEEPSEEK_V3, DI_TOOLFMT_DEEPSEEK_V31;
/* The format a chat template source writes calls in ("hermes", "llama3",
 * "deepseek_v3", "deepseek_v31"), NULL = unknown. */
const char *di_srv_toolfmt_detect(const char *tmpl);
const di_srv_toolfmt *di_srv_toolfmt_named(const char *name);

/* Renders q's messages into *ids (freed first) and picks the format calls
 * come back in (*fmt; NULL for tool_choice none): the template's own when it
 * reads tools, else the tools described in a system message (DeepSeek's
 * prompt for DeepSeek templates, which write calls but never show tools;
 * Hermes' otherwise). Errors name messages or tool_choice. */
bool di_srv_tools_render(const di_srv_backend *be, const di_srv_chat_req *q, int32_t **ids, size_t *n, int *think_open,
                         const di_srv_toolfmt **fmt, di_srv_err *e);

/* required / named: a grammar of calls in format f whose name is a declared
 * function and whose arguments follow its parameters schema; c->mode auto or
 * none: out->on = 0. */
bool di_srv_tools_constraint(json_t *tools, const di_srv_tool_choice *c, const di_srv_toolfmt *f,
                             di_srv_constraint *out, di_srv_err *e);
/* A copy of messages whose system message describes tools and format f's
 * way of calling them (DeepSeek's own prompt; Hermes' for the other formats). */
json_t *di_srv_tools_in_system(json_t *messages, json_t *tools, const di_srv_toolfmt *f);

/* The parser's output: content, and calls as they are read: call() when a
 * call's name is known, then args() with the pieces of its arguments' text as
 * they arrive (streamed as OpenAI's delta.tool_calls fragments; a whole
 * answer joins them). */
typedef struct di_srv_toolsink {
  void *user;
  void (*text)(void *user, const char *s, size_t n);
  void (*call)(void *user, int index, const char *name);
  void (*args)(void *user, int index, const char *s, size_t n);
} di_srv_toolsink;

typedef struct di_srv_toolparse {
  const di_srv_toolfmt *f;
  di_srv_buf buf; /* text not yet known to be content or call */
  int phase;      /* tool_parse.c: outside a call, its start, arguments, tail */
  int state;      /* whole-reply formats: 0 undecided, 1 JSON held, 2 text */
  int n_calls;
  int trim_lead; /* a call just ended: drop the whitespace that follows it */
  int depth, in_str, esc; /* the JSON arguments value being streamed */
} di_srv_toolparse;

void di_srv_toolparse_init(di_srv_toolparse *p, const di_srv_toolfmt *f);
/* Feeds content; calls k's callbacks in order, the same whether the text
 * arrives whole or in pieces. final: the reply ended (held text is flushed;
 * a call cut short keeps the arguments read so far). */
void di_srv_toolparse_feed(di_srv_toolparse *p, const char *s, size_t n, int final, const di_srv_toolsink *k);
void di_srv_toolparse_free(di_srv_toolparse *p);

#endif
