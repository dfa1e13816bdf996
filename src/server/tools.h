/* Tool calls (see tools.c): tool_choice, the tool-call formats of known chat
 * templates, the forcing grammar, the prompt for templates without tools,
 * and the output parser shared by streamed and whole answers. */
#ifndef DI_SERVER_TOOLS_H
#define DI_SERVER_TOOLS_H

#include "server/internal.h"

/* How a template's model writes a call. open/close: tags that delimit each
 * call in output (NULL: the whole reply is one JSON call); before/after/sep:
 * what the forcing grammar writes around and between calls. */
typedef struct di_srv_toolfmt {
  const char *name;
  const char *open, *close;
  const char *before, *after, *sep;
  const char *args_key; /* "arguments" (Hermes) or "parameters" (Llama 3) */
  int multi;            /* several calls in one reply */
} di_srv_toolfmt;

extern const di_srv_toolfmt DI_TOOLFMT_HERMES, DI_TOOLFMT_LLAMA3;
/* The format a chat template source writes calls in ("hermes", "llama3"), NULL = unknown. */
const char *di_srv_toolfmt_detect(const char *tmpl);
const di_srv_toolfmt *di_srv_toolfmt_named(const char *name);

/* required / named: a grammar of calls in format f whose name is a declared
 * function and whose arguments follow its parameters schema; c->mode auto or
 * none: out->on = 0. */
bool di_srv_tools_constraint(json_t *tools, const di_srv_tool_choice *c, const di_srv_toolfmt *f,
                             di_srv_constraint *out, di_srv_err *e);
/* A copy of messages whose system message describes tools in Hermes' format. */
json_t *di_srv_tools_in_system(json_t *messages, json_t *tools);

typedef struct di_srv_toolsink {
  void *user;
  void (*text)(void *user, const char *s, size_t n);
  /* call = {"name": str, "arguments": str}, borrowed */
  void (*call)(void *user, int index, json_t *call);
} di_srv_toolsink;

typedef struct di_srv_toolparse {
  const di_srv_toolfmt *f;
  di_srv_buf buf; /* text not yet known to be content or call */
  int in_call;
  int state; /* whole-reply formats: 0 undecided, 1 JSON held, 2 text */
  int n_calls;
  int trim_lead; /* a call just ended: drop the whitespace that follows it */
} di_srv_toolparse;

void di_srv_toolparse_init(di_srv_toolparse *p, const di_srv_toolfmt *f);
/* Feeds content; calls k->text for content and k->call for each complete
 * call, in order. final: the reply ended (held text is flushed). */
void di_srv_toolparse_feed(di_srv_toolparse *p, const char *s, size_t n, int final, const di_srv_toolsink *k);
void di_srv_toolparse_free(di_srv_toolparse *p);

#endif
