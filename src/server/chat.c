/* POST /v1/chat/completions: message validation, rendering through the
 * model's chat template (backend), and the chat response shapes, streamed
 * and not, with DeepSeek's reasoning_content split and prefix completion. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "server/internal.h"
#include "server/toolcon.h"
#include "server/tools.h"

#define MAX_MESSAGES 4096

static const char *const ROLES[] = {"system", "user", "assistant", "tool", "developer"};

/* Content is a string, null, or an array of text parts; parts are joined
 * and written back into the message so the template sees one string. */
static bool msg_content(json_t *m, size_t i, const char *role, di_srv_err *e) {
  char param[64];
  snprintf(param, sizeof param, "messages[%zu].content", i);
  json_t *c = json_object_get(m, "content");
  if (!c || json_is_null(c)) {
    if (strcmp(role, "assistant")) return di_srv_bad(e, param, "%s is required for role %s", param, role);
    /* An assistant turn that only made tool calls: templates that join
     * content with strings would fail on a missing key, so it becomes ""
     * (as vLLM does), which every template treats as no content. */
    return json_object_set_new(m, "content", json_string("")) ? di_srv_fail(e, 500, "server_error", NULL, "out of memory") : true;
  }
  if (json_is_string(c)) return true;
  if (!json_is_array(c)) return di_srv_bad(e, param, "%s must be a string or an array of content parts", param);
  di_srv_buf b = {0};
  size_t k;
  json_t *part;
  json_array_foreach(c, k, part) {
    const char *type = json_string_value(json_object_get(part, "type"));
    json_t *text = json_object_get(part, "text");
    if (!json_is_object(part) || !type || strcmp(type, "text") || !json_is_string(text)) {
      di_srv_buf_free(&b);
      return di_srv_bad(e, param, "%s[%zu]: only {\"type\":\"text\",\"text\":...} parts are supported", param, k);
    }
    di_srv_buf_put(&b, json_string_value(text), json_string_length(text));
  }
  int bad = b.oom || json_object_set_new(m, "content", json_stringn(b.p ? b.p : "", b.len));
  di_srv_buf_free(&b);
  return bad ? di_srv_fail(e, 500, "server_error", NULL, "out of memory") : true;
}

/* OpenAI sends tool-call arguments as a JSON string; chat templates
 * (written for transformers) expect a mapping and render it with tojson or
 * items(), so a string that holds a JSON object is given to them parsed. */
static bool tool_calls_for_template(json_t *tc, const char *param, di_srv_err *e) {
  size_t k;
  json_t *call;
  json_array_foreach(tc, k, call) {
    json_t *fn = json_object_get(call, "function");
    if (!json_is_object(call) || !json_is_object(fn) || !json_is_string(json_object_get(fn, "name")))
      return di_srv_bad(e, param, "%s[%zu] must be {\"type\":\"function\",\"function\":{\"name\":...,\"arguments\":...}}",
                        param, k);
    json_t *args = json_object_get(fn, "arguments");
    if (json_is_string(args)) {
      json_t *parsed = json_loadb(json_string_value(args), json_string_length(args), 0, NULL);
      if (json_is_object(parsed)) json_object_set_new(fn, "arguments", parsed);
      else json_decref(parsed);
    }
  }
  return true;
}

/* Validates messages in place; *prefix = 1 when the last one asks for
 * DeepSeek prefix completion. */
static bool parse_messages(json_t *body, int *prefix, di_srv_err *e) {
  json_t *ms = json_object_get(body, "messages");
  if (!json_is_array(ms) || json_array_size(ms) == 0)
    return di_srv_bad(e, "messages", "'messages' must be a non-empty array");
  size_t n = json_array_size(ms);
  if (n > MAX_MESSAGES) return di_srv_bad(e, "messages", "too many messages (%zu > %d)", n, MAX_MESSAGES);
  for (size_t i = 0; i < n; i++) {
    json_t *m = json_array_get(ms, i);
    char param[64];
    snprintf(param, sizeof param, "messages[%zu]", i);
    if (!json_is_object(m)) return di_srv_bad(e, param, "%s must be an object", param);
    const char *role = json_string_value(json_object_get(m, "role"));
    snprintf(param, sizeof param, "messages[%zu].role", i);
    if (!role) return di_srv_bad(e, param, "%s must be a string", param);
    size_t r = 0;
    while (r < sizeof ROLES / sizeof ROLES[0] && strcmp(role, ROLES[r])) r++;
    if (r == sizeof ROLES / sizeof ROLES[0])
      return di_srv_bad(e, param, "%s: unknown role '%.40s' (system, user, assistant, tool)", param, role);
    if (r == 4) json_object_set_new(m, "role", json_string("system")); /* OpenAI's newer name */
    role = ROLES[r == 4 ? 0 : r];
    if (!msg_content(m, i, role, e)) return false;
    const char *keys[] = {"name", "tool_call_id", "reasoning_content"};
    for (int k = 0; k < 3; k++) {
      json_t *v = json_object_get(m, keys[k]);
      snprintf(param, sizeof param, "messages[%zu].%s", i, keys[k]);
      if (v && !json_is_null(v) && !json_is_string(v)) return di_srv_bad(e, param, "%s must be a string", param);
    }
    json_t *tc = json_object_get(m, "tool_calls");
    snprintf(param, sizeof param, "messages[%zu].tool_calls", i);
    if (tc && !json_is_null(tc) && !json_is_array(tc)) return di_srv_bad(e, param, "%s must be an array", param);
    if (json_is_array(tc) && !tool_calls_for_template(tc, param, e)) return false;
    json_t *pf = json_object_get(m, "prefix");
    snprintf(param, sizeof param, "messages[%zu].prefix", i);
    if (pf && !json_is_null(pf)) {
      if (!json_is_boolean(pf)) return di_srv_bad(e, param, "%s must be a boolean", param);
      if (json_is_true(pf) && (i != n - 1 || strcmp(role, "assistant")))
        return di_srv_bad(e, param, "prefix is only allowed on the last message, with role assistant");
      *prefix = json_is_true(pf);
    }
  }
  return true;
}

static json_t *fn_of(json_t *tool) { return json_object_get(tool, "function"); }

static bool parse_tool_choice(json_t *body, json_t *tools, di_srv_tool_choice *c, di_srv_err *e) {
  memset(c, 0, sizeof *c);
  size_t n_tools = json_is_array(tools) ? json_array_size(tools) : 0;
  c->mode = n_tools ? DI_TOOLS_AUTO : DI_TOOLS_NONE;
  c->parallel = 1;
  if (!di_srv_get_bool(body, "parallel_tool_calls", &c->parallel, e)) return false;
  json_t *tc = json_object_get(body, "tool_choice");
  if (!tc || json_is_null(tc)) return true;
  const char *s = json_string_value(tc);
  if (s && !strcmp(s, "none")) c->mode = DI_TOOLS_NONE;
  else if (s && !strcmp(s, "auto")) c->mode = n_tools ? DI_TOOLS_AUTO : DI_TOOLS_NONE;
  else if (s && !strcmp(s, "required")) c->mode = DI_TOOLS_REQUIRED;
  else if (json_is_object(tc)) {
    const char *type = json_string_value(json_object_get(tc, "type"));
    const char *name = json_string_value(json_object_get(json_object_get(tc, "function"), "name"));
    if (!type || strcmp(type, "function") || !name)
      return di_srv_bad(e, "tool_choice", "'tool_choice' object must be {\"type\":\"function\",\"function\":{\"name\":...}}");
    c->mode = DI_TOOLS_NAMED;
    c->name = name;
  } else {
    return di_srv_bad(e, "tool_choice", "'tool_choice' must be none, auto, required or an object");
  }
  if ((c->mode == DI_TOOLS_REQUIRED || c->mode == DI_TOOLS_NAMED) && !n_tools)
    return di_srv_bad(e, "tool_choice", "'tool_choice' %s needs 'tools'", s ? s : "naming a function");
  if (c->mode == DI_TOOLS_NAMED) {
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) if (!strcmp(json_string_value(json_object_get(fn_of(t), "name")), c->name)) return true;
    return di_srv_bad(e, "tool_choice", "'tool_choice' names function '%.64s', which is not in 'tools'", c->name);
  }
  return true;
}

static bool parse_tools(json_t *body, di_srv_err *e) {
  json_t *tools = json_object_get(body, "tools");
  if (tools && !json_is_null(tools)) {
    if (!json_is_array(tools)) return di_srv_bad(e, "tools", "'tools' must be an array");
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
      json_t *fn = json_object_get(t, "function");
      json_t *type = json_object_get(t, "type");
      if (!json_is_object(t) || !json_is_object(fn) || !json_is_string(json_object_get(fn, "name")) ||
          (type && !json_is_null(type) && (!json_is_string(type) || strcmp(json_string_value(type), "function"))))
        return di_srv_bad(e, "tools", "tools[%zu] must be {\"type\":\"function\",\"function\":{\"name\":...}}", i);
      /* names are written into the prompt, grammars and the parser's buffers */
      size_t nl = json_string_length(json_object_get(fn, "name"));
      if (nl == 0 || nl > 128)
        return di_srv_bad(e, "tools", "tools[%zu].function.name must be 1 to 128 bytes long", i);
      json_t *params = json_object_get(fn, "parameters");
      if (params && !json_is_null(params) && !json_is_object(params))
        return di_srv_bad(e, "tools", "tools[%zu].function.parameters must be a JSON Schema object", i);
      json_t *strict = json_object_get(fn, "strict");
      if (strict && !json_is_null(strict) && !json_is_boolean(strict))
        return di_srv_bad(e, "tools", "tools[%zu].function.strict must be a boolean", i);
    }
  }
  /* The legacy form is not translated: a client using it would otherwise
   * get answers that silently ignore its functions. */
  json_t *fns = json_object_get(body, "functions");
  if (fns && !json_is_null(fns))
    return di_srv_bad(e, "functions", "'functions' is deprecated and not supported; use 'tools'");
  json_t *fc = json_object_get(body, "function_call");
  if (fc && !json_is_null(fc))
    return di_srv_bad(e, "function_call", "'function_call' is deprecated and not supported; use 'tool_choice'");
  return true;
}

/* Renders the prompt and decides the tool-call format (di_srv_tools_render).
 * A forced call in a format that is one grammar becomes that grammar in
 * tcon; calls server/toolcon.c constrains are built per completion later. */
static bool prepare_tools(di_srv_gen *g, const di_srv_chat_req *q, const di_srv_toolfmt **fmt, di_srv_constraint *tcon,
                          di_srv_err *e) {
  di_srv_sub *sub = &g->subs[0];
  memset(tcon, 0, sizeof *tcon);
  if (!di_srv_tools_render(&g->s->be, q, &sub->prompt_ids, &sub->n_prompt, &g->think_open, fmt, e)) return false;
  if (di_srv_toolcon_wanted(q->tools, &q->tool_choice, *fmt)) return true;
  return !*fmt || di_srv_tools_constraint(q->tools, &q->tool_choice, *fmt, tcon, e);
}

static bool any_strict(json_t *tools) {
  size_t i;
  json_t *t;
  json_array_foreach(tools, i, t) if (json_is_true(json_object_get(fn_of(t), "strict"))) return true;
  return false;
}

bool di_srv_chat_parse(json_t *body, di_srv_chat_req *q, di_srv_err *e) {
  long long n = 1, top = 0;
  int logprobs = 0;
  if (!di_srv_get_int(body, "n", 1, 128, &n, e) || !di_srv_get_bool(body, "logprobs", &logprobs, e) ||
      !di_srv_get_int(body, "top_logprobs", 0, 20, &top, e) || !parse_tools(body, e))
    return false;
  if (top && !logprobs) return di_srv_bad(e, "top_logprobs", "'top_logprobs' requires 'logprobs': true");
  q->prefix = 0;
  if (!parse_messages(body, &q->prefix, e)) return false;
  q->n = (int)n;
  q->logprobs = logprobs;
  q->top_logprobs = (int)top;
  q->messages = json_object_get(body, "messages");
  json_t *tools = json_object_get(body, "tools");
  q->tools = json_is_array(tools) ? tools : NULL;
  return parse_tool_choice(body, q->tools, &q->tool_choice, e);
}

enum MHD_Result di_srv_handle_chat(di_srv_req *r, json_t *body) {
  di_server *s = r->s;
  di_srv_err e = {0};
  di_srv_chat_req q;
  if (!di_srv_check_model(s, body, &e) || !di_srv_chat_parse(body, &q, &e)) return di_srv_reply_err(r, &e);
  int logprobs = q.logprobs;
  long long n = q.n, top = q.top_logprobs;
  if (s->be.max_seqs > 0 && n > s->be.max_seqs) {
    di_srv_bad(&e, "n", "'n' = %lld exceeds the sequences this server runs at once (--max-seqs %d)", n,
               s->be.max_seqs);
    return di_srv_reply_err(r, &e);
  }
  di_srv_constraint con;
  if (!di_srv_constraint_parse(body, &con, &e)) return di_srv_reply_err(r, &e);
  int forced = q.tool_choice.mode == DI_TOOLS_REQUIRED || q.tool_choice.mode == DI_TOOLS_NAMED;
  if (con.on && forced) {
    di_srv_bad(&e, "tool_choice", "a forced tool call cannot be combined with '%s'", con.param);
    di_srv_constraint_free(&con);
    return di_srv_reply_err(r, &e);
  }
  /* constrained: one submission per completion, each with its own matcher
   * (strict tools in auto mode may constrain a call, whatever the format) */
  int one_each = con.on || forced || (q.tool_choice.mode == DI_TOOLS_AUTO && any_strict(q.tools));
  di_srv_gen *g = one_each ? di_srv_gen_new(r, DI_SRV_CHAT, (int)n, 1) : di_srv_gen_new(r, DI_SRV_CHAT, 1, (int)n);
  if (!g) {
    di_srv_constraint_free(&con);
    return MHD_NO;
  }
  r->gen = g; /* the request's reference; dropped when the request completes */
  g->logprobs = logprobs;
  g->top_logprobs = (int)top;
  g->params.logprobs = logprobs;
  g->params.top_logprobs = (int)top;
  const di_srv_toolfmt *fmt = NULL;
  di_srv_constraint tcon = {0};
  bool ok = di_srv_parse_sampling(body, g, &e) && prepare_tools(g, &q, &fmt, &tcon, &e);
  if (tcon.on) {
    di_srv_constraint_free(&con);
    con = tcon;
  }
  if (ok) ok = di_srv_check_context(g, &g->subs[0], &e);
  for (int k = 1; ok && k < g->n_subs; k++) ok = di_srv_sub_copy_prompt(g, k, 0, &e);
  int tc = ok && di_srv_toolcon_wanted(q.tools, &q.tool_choice, fmt);
  if (tc && con.on) /* one constraint per completion: neither may be dropped silently */
    ok = di_srv_bad(&e, "tools", "strict tools under tool_choice auto cannot be combined with '%s'", con.param);
  if (ok) ok = di_srv_gen_constrain(g, &con, &e);
  di_srv_constraint_free(&con);
  if (tc)
    for (int k = 0; ok && k < g->n_subs; k++)
      ok = di_srv_toolcon_new(&s->be, q.tools, &q.tool_choice, fmt, g->think_open, &g->subs[k].toolcon, &e);
  for (int i = 0; ok && fmt && i < g->n_choices; i++) {
    if (!(g->choices[i].tp = malloc(sizeof *g->choices[i].tp))) ok = di_srv_fail(&e, 500, "server_error", NULL, "out of memory");
    else di_srv_toolparse_init(g->choices[i].tp, fmt);
  }
  if (!ok) return di_srv_reply_err(r, &e);
  for (int i = 0; i < g->n_choices; i++) di_srv_think_init(&g->choices[i].think, g->think_open);
  if (!di_srv_gen_submit(g, &e)) return di_srv_reply_err(r, &e);
  return di_srv_gen_answer(r, g);
}

/* ---- response shapes ---- */

static json_t *chunk(di_srv_gen *g, json_t *choice) {
  json_t *j = json_pack("{s:s,s:s,s:I,s:s,s:s,s:[o]}", "id", g->id, "object", "chat.completion.chunk",
                        "created", (json_int_t)g->created, "model", g->s->model_name,
                        "system_fingerprint", "deepinfer-" DI_VERSION, "choices", choice);
  if (j && g->include_usage) json_object_set_new(j, "usage", json_null());
  return j;
}

void di_srv_chat_stream_open(di_srv_gen *g) {
  for (int i = 0; i < g->n_choices; i++)
    di_srv_sse_put(g, chunk(g, json_pack("{s:i,s:{s:s,s:s},s:n,s:n}", "index", i, "delta", "role",
                                         "assistant", "content", "", "logprobs", "finish_reason")));
}

typedef struct sink {
  di_srv_gen *g;
  di_srv_choice *ch;
  int idx;
  json_t *delta;      /* streaming: this event's delta */
  di_srv_buf content; /* streaming: this event's content */
} sink;

static void content_out(void *user, const char *s, size_t n) {
  sink *k = user;
  di_srv_buf_put(k->delta ? &k->content : &k->ch->text, s, n);
}

/* The call's entry in the tool_calls being built: this event's delta when
 * streaming (OpenAI's fragments: the first carries id, type and name, later
 * ones only argument text), else the whole answer's list. */
static json_t *call_entry(sink *k, int index) {
  json_t *a;
  if (k->delta) {
    if (!(a = json_object_get(k->delta, "tool_calls"))) json_object_set_new(k->delta, "tool_calls", a = json_array());
    json_t *last = json_array_get(a, json_array_size(a) - 1);
    if (last && json_integer_value(json_object_get(last, "index")) == index) return last;
    json_t *tc = json_pack("{s:i,s:{}}", "index", index, "function");
    json_array_append_new(a, tc);
    return tc;
  }
  if (!k->ch->tool_calls) k->ch->tool_calls = json_array();
  return json_array_get(k->ch->tool_calls, (size_t)index);
}

static void call_out(void *user, int index, const char *name) {
  sink *k = user;
  char id[40];
  /* unique within the server's answers: the completion id, choice and call */
  snprintf(id, sizeof id, "call_%.20s_%d_%d", k->g->id + strlen(k->g->id) - 16, k->idx, index);
  k->ch->n_tool_calls++;
  json_t *tc = json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", id, "type", "function", "function", "name", name, "arguments", "");
  if (k->delta) {
    json_object_update(call_entry(k, index), tc);
    json_decref(tc);
  } else {
    if (!k->ch->tool_calls) k->ch->tool_calls = json_array();
    json_array_append_new(k->ch->tool_calls, tc);
  }
}

static void args_out(void *user, int index, const char *s, size_t n) {
  sink *k = user;
  json_t *fn = json_object_get(call_entry(k, index), "function");
  if (!fn) return;
  const char *was = json_string_value(json_object_get(fn, "arguments"));
  size_t wl = was ? strlen(was) : 0;
  char *joined = malloc(wl + n + 1);
  if (!joined) return;
  if (wl) memcpy(joined, was, wl);
  memcpy(joined + wl, s, n);
  joined[wl + n] = 0;
  json_object_set_new(fn, "arguments", json_stringn(joined, wl + n));
  free(joined);
}

static void on_piece(void *user, int reasoning, const char *s, size_t n) {
  sink *k = user;
  if (reasoning) {
    if (k->delta) json_object_set_new(k->delta, "reasoning_content", json_stringn(s, n));
    else di_srv_buf_put(&k->ch->reasoning, s, n);
    return;
  }
  if (k->ch->tp) {
    di_srv_toolsink ts = {k, content_out, call_out, args_out};
    di_srv_toolparse_feed(k->ch->tp, s, n, 0, &ts);
  } else {
    content_out(k, s, n);
  }
}

static json_t *logprob_entry(di_srv_gen *g, const di_srv_evt *v) {
  json_t *ent = di_srv_token_json(g->s, v->token, v->logprob);
  json_t *tops = json_array();
  for (int t = 0; t < v->n_top && t < g->top_logprobs; t++)
    json_array_append_new(tops, di_srv_token_json(g->s, v->top_ids[t], v->top_logprobs[t]));
  json_object_set_new(ent, "top_logprobs", tops);
  return ent;
}

/* A reply that made calls and ended by itself finished "tool_calls". */
static const char *chat_finish(const di_srv_choice *ch, di_finish f) {
  return f == DI_FINISH_STOP && ch->n_tool_calls ? "tool_calls" : di_srv_finish_name(f);
}

void di_srv_chat_apply(di_srv_gen *g, di_srv_choice *ch, int idx, const di_srv_evt *v) {
  if (v->token >= 0 && ch->think.state == 1) ch->reasoning_tokens++;
  sink k = {g, ch, idx, g->stream ? json_object() : NULL, {0}};
  int final = v->finish != DI_FINISH_NONE;
  di_srv_think_feed(&ch->think, v->text ? v->text : "", v->text_len, final, on_piece, &k);
  if (final && ch->tp) {
    di_srv_toolsink ts = {&k, content_out, call_out, args_out};
    di_srv_toolparse_feed(ch->tp, "", 0, 1, &ts);
  }
  if (k.delta && k.content.len) json_object_set_new(k.delta, "content", json_stringn(k.content.p, k.content.len));
  di_srv_buf_free(&k.content);
  json_t *lp = g->logprobs && v->token >= 0 ? logprob_entry(g, v) : NULL;
  if (!g->stream) {
    if (lp) {
      if (!ch->logprobs) ch->logprobs = json_array();
      json_array_append_new(ch->logprobs, lp);
    }
    return;
  }
  const char *fin = v->finish == DI_FINISH_STOP || v->finish == DI_FINISH_LENGTH ? chat_finish(ch, v->finish) : NULL;
  if (json_object_size(k.delta) || lp || fin) {
    json_t *choice = json_pack("{s:i,s:o,s:o,s:o}", "index", idx, "delta", k.delta, "logprobs",
                               lp ? json_pack("{s:[o]}", "content", lp) : json_null(), "finish_reason",
                               fin ? json_string(fin) : json_null());
    di_srv_sse_put(g, chunk(g, choice));
  } else {
    json_decref(k.delta);
  }
}

json_t *di_srv_chat_result(di_srv_gen *g) {
  json_t *choices = json_array();
  for (int i = 0; i < g->n_choices; i++) {
    di_srv_choice *ch = &g->choices[i];
    json_t *msg = json_pack("{s:s,s:s%}", "role", "assistant", "content", ch->text.p ? ch->text.p : "", ch->text.len);
    if (ch->tool_calls) {
      if (!ch->text.len) json_object_set_new(msg, "content", json_null()); /* OpenAI's shape of a calls-only reply */
      json_object_set(msg, "tool_calls", ch->tool_calls);
    }
    /* Only reasoning turns carry the field; other models' answers omit it. */
    if (ch->think.opened || ch->reasoning.len)
      json_object_set_new(msg, "reasoning_content", json_stringn(ch->reasoning.p ? ch->reasoning.p : "", ch->reasoning.len));
    json_t *lp = json_null();
    if (g->logprobs)
      lp = json_pack("{s:o}", "content", ch->logprobs ? json_incref(ch->logprobs) : json_array());
    json_array_append_new(choices, json_pack("{s:i,s:o,s:o,s:s}", "index", i, "message", msg, "logprobs", lp,
                                             "finish_reason", chat_finish(ch, ch->finish)));
  }
  return json_pack("{s:s,s:s,s:I,s:s,s:s,s:o,s:o}", "id", g->id, "object", "chat.completion", "created",
                   (json_int_t)g->created, "model", g->s->model_name, "system_fingerprint",
                   "deepinfer-" DI_VERSION, "choices", choices, "usage", di_srv_gen_usage(g));
}
