/* Tool calls: the tool-call formats of the chat templates we know
 * (Qwen/Hermes <tool_call> blocks, Llama 3 JSON, DeepSeek V3/R1 and V3.1
 * call tokens), the prompt that describes tools to a model whose template
 * ignores them, and the grammar that forces a call (tool_choice required or
 * named). The output parser is tool_parse.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/tools.h"

#define DS_CALLS_BEGIN "<｜tool▁calls▁begin｜>"
#define DS_CALLS_END "<｜tool▁calls▁end｜>"
#define DS_CALL_BEGIN "<｜tool▁call▁begin｜>"
#define DS_CALL_END "<｜tool▁call▁end｜>"
#define DS_SEP "<｜tool▁sep｜>"

const di_srv_toolfmt DI_TOOLFMT_HERMES = {.name = "hermes",
                                          .open = "<tool_call>",
                                          .close = "</tool_call>",
                                          .before = "<tool_call>\n",
                                          .after = "\n</tool_call>",
                                          .sep = "\n",
                                          .args_key = "arguments",
                                          .multi = 1};
const di_srv_toolfmt DI_TOOLFMT_LLAMA3 = {.name = "llama3", .before = "", .after = "", .sep = "", .args_key = "parameters"};
/* DeepSeek V3 / R1: <calls_begin><call_begin>function<sep>NAME\n```json\nARGS\n```<call_end>...<calls_end> */
const di_srv_toolfmt DI_TOOLFMT_DEEPSEEK_V3 = {.name = "deepseek_v3",
                                               .open = DS_CALL_BEGIN,
                                               .close = DS_CALL_END,
                                               .block_open = DS_CALLS_BEGIN,
                                               .block_close = DS_CALLS_END,
                                               .name_pre = "function" DS_SEP,
                                               .name_sep = "\n```json\n",
                                               .args_end = "\n```",
                                               .lead = "function",
                                               .tok_sep = DS_SEP,
                                               .args_key = "arguments",
                                               .multi = 1};
/* DeepSeek V3.1: <calls_begin><call_begin>NAME<sep>ARGS<call_end>...<calls_end> */
const di_srv_toolfmt DI_TOOLFMT_DEEPSEEK_V31 = {.name = "deepseek_v31",
                                                .open = DS_CALL_BEGIN,
                                                .close = DS_CALL_END,
                                                .block_open = DS_CALLS_BEGIN,
                                                .block_close = DS_CALLS_END,
                                                .name_sep = DS_SEP,
                                                .args_key = "arguments",
                                                .multi = 1};

static const di_srv_toolfmt *const FORMATS[] = {&DI_TOOLFMT_HERMES, &DI_TOOLFMT_LLAMA3, &DI_TOOLFMT_DEEPSEEK_V3,
                                                &DI_TOOLFMT_DEEPSEEK_V31};

const di_srv_toolfmt *di_srv_toolfmt_named(const char *name) {
  if (!name) return NULL;
  for (size_t i = 0; i < sizeof FORMATS / sizeof *FORMATS; i++)
    if (!strcmp(name, FORMATS[i]->name)) return FORMATS[i];
  return NULL;
}

const char *di_srv_toolfmt_detect(const char *tmpl) {
  if (!tmpl) return NULL;
  /* R1 / V3 fence the arguments as ```json; V3.1 writes them bare */
  if (strstr(tmpl, DS_CALLS_BEGIN)) return strstr(tmpl, "```json") ? "deepseek_v3" : "deepseek_v31";
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
  if (f->name_sep) /* its tags are tokens: server/toolcon.c forces those calls */
    return di_srv_bad(e, "tool_choice", "%s's calls are not a single grammar", f->name);
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

/* DeepSeek's tool prompt (its templates never read `tools`; the model card
 * describes them in the system message): each function's name, description
 * and parameters, and the call format. */
static void deepseek_prompt(FILE *f, json_t *tools, const di_srv_toolfmt *fmt) {
  fputs("## Tools\nYou have access to the following tools:\n", f);
  size_t i;
  json_t *t;
  json_array_foreach(tools, i, t) {
    json_t *fn = json_object_get(t, "function");
    const char *desc = json_string_value(json_object_get(fn, "description"));
    char *params = json_dumps(json_object_get(fn, "parameters"), JSON_COMPACT | JSON_ENSURE_ASCII);
    fprintf(f, "\n### %s\nDescription: %s\n\nParameters: %s\n", json_string_value(json_object_get(fn, "name")),
            desc ? desc : "", params ? params : "{}");
    free(params);
  }
  fprintf(f, "\nIMPORTANT: ALWAYS adhere to this exact format for tool use:\n%s%s%stool_call_name%s%s%s%s"
             "{{additional_tool_calls}}%s\n\nWhere:\n\n"
             "- `tool_call_name` must be an exact match to one of the available tools\n"
             "- `tool_call_arguments` must be valid JSON that strictly follows the tool's Parameters Schema\n"
             "- For multiple tool calls, chain them directly without separators or spaces\n",
          fmt->block_open, fmt->open, fmt->name_pre ? fmt->name_pre : "", fmt->name_sep, "tool_call_arguments",
          fmt->args_end ? fmt->args_end : "", fmt->close, fmt->block_close);
}

/* Hermes' tool prompt, for templates that never read `tools`: the model is
 * told the functions and the <tool_call> format in a system message. */
static void hermes_prompt(FILE *f, json_t *tools) {
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
}

json_t *di_srv_tools_in_system(json_t *messages, json_t *tools, const di_srv_toolfmt *fmt) {
  char *list = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&list, &len);
  if (!f) return NULL;
  if (fmt->name_sep) deepseek_prompt(f, tools, fmt);
  else hermes_prompt(f, tools);
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

/* ---- the prompt ---- */

static bool render(const di_srv_backend *be, json_t *messages, json_t *tools, int prefix, int32_t **ids, size_t *n,
                   int *think_open, di_srv_err *e) {
  di_status st = {0};
  free(*ids);
  *ids = NULL;
  if (be->render_chat(be->ctx, messages, tools, prefix, ids, n, think_open, &st) == DI_OK) return true;
  di_srv_bad(e, "messages", "%s", st.msg);
  if (st.code == DI_ERR_INTERNAL || st.code == DI_ERR_NOMEM) e->status = 500, e->type = "server_error";
  return false;
}

/* Whether the template reads `tools`: a template that renders the same
 * prompt without them would never show the model the functions. */
static bool template_reads_tools(const di_srv_backend *be, json_t *messages, int prefix, const int32_t *with,
                                 size_t n_with) {
  int32_t *ids = NULL;
  size_t n = 0;
  int think = 0;
  di_status st = {0};
  if (be->render_chat(be->ctx, messages, NULL, prefix, &ids, &n, &think, &st) != DI_OK)
    return true; /* the render with tools succeeded; this one is only a comparison */
  bool same = n == n_with && (n == 0 || !memcmp(ids, with, n * sizeof *ids));
  free(ids);
  return !same;
}

bool di_srv_tools_render(const di_srv_backend *be, const di_srv_chat_req *q, int32_t **ids, size_t *n, int *think_open,
                         const di_srv_toolfmt **fmt, di_srv_err *e) {
  *fmt = NULL;
  if (!render(be, q->messages, q->tools, q->prefix, ids, n, think_open, e)) return false;
  if (q->tool_choice.mode == DI_TOOLS_NONE) return true;
  const di_srv_toolfmt *own = di_srv_toolfmt_named(be->tool_format ? be->tool_format(be->ctx) : NULL);
  if (template_reads_tools(be, q->messages, q->prefix, *ids, *n)) {
    if (!(*fmt = own) && q->tool_choice.mode != DI_TOOLS_AUTO)
      return di_srv_bad(e, "tool_choice", "this model's chat template writes tool calls in a format this server "
                                          "cannot force or parse yet; use tool_choice auto");
    return true;
  }
  /* DeepSeek's templates write calls but never show tools: its own prompt */
  if (!own || !own->name_sep) own = &DI_TOOLFMT_HERMES;
  json_t *msgs = di_srv_tools_in_system(q->messages, q->tools, own);
  if (!msgs) return di_srv_fail(e, 500, "server_error", NULL, "out of memory");
  bool ok = render(be, msgs, NULL, q->prefix, ids, n, think_open, e);
  json_decref(msgs);
  if (ok) *fmt = own;
  return ok;
}
