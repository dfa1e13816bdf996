/* The tool-call output parser (server/tool_parse.c): Hermes <tool_call>
 * blocks, Llama 3 whole-reply JSON and DeepSeek V3/R1 and V3.1 call tokens
 * into content and calls, the same whether the text arrives at once or byte
 * by byte (streamed deltas and whole answers must agree); a name is reported
 * once known and arguments as they arrive (a call cut after its name keeps
 * what it has); text that never becomes a call stays text; the formats'
 * detection, the forcing schema and the tool prompts. */
#include <jansson.h>

#include "check.h"
#include "server/tools.h"

typedef struct out {
  di_srv_buf text;
  char calls[1024];
} out;

static void on_text(void *u, const char *s, size_t n) { di_srv_buf_put(&((out *)u)->text, s, n); }

/* calls as "index:name:arguments;" (the arguments joined from their pieces) */
static void on_call(void *u, int index, const char *name) {
  out *o = u;
  size_t l = strlen(o->calls);
  if (l && o->calls[l - 1] != ';') o->calls[l++] = ';', o->calls[l] = 0;
  snprintf(o->calls + l, sizeof o->calls - l, "%d:%s:", index, name);
}

static void on_args(void *u, int index, const char *s, size_t n) {
  out *o = u;
  (void)index;
  size_t l = strlen(o->calls);
  snprintf(o->calls + l, sizeof o->calls - l, "%.*s", (int)n, s);
}

/* Parses s in pieces of `step` bytes (0 = whole). */
static void parse(const di_srv_toolfmt *f, const char *s, size_t step, out *o) {
  memset(o, 0, sizeof *o);
  di_srv_toolparse p;
  di_srv_toolparse_init(&p, f);
  di_srv_toolsink k = {o, on_text, on_call, on_args};
  size_t n = strlen(s);
  if (!step) step = n ? n : 1;
  for (size_t i = 0; i < n; i += step) di_srv_toolparse_feed(&p, s + i, i + step > n ? n - i : step, 0, &k);
  di_srv_toolparse_feed(&p, "", 0, 1, &k);
  di_srv_toolparse_free(&p);
  size_t l = strlen(o->calls);
  if (l && o->calls[l - 1] != ';' && l + 1 < sizeof o->calls) o->calls[l] = ';', o->calls[l + 1] = 0;
}

static void expect(const di_srv_toolfmt *f, const char *s, const char *text, const char *calls) {
  for (size_t step = 0; step < 4; step++) {
    out o;
    parse(f, s, step, &o);
    const char *got = o.text.p ? o.text.p : "";
    CHECKF(!strcmp(got, text), "step %zu: text '%s', want '%s' (input %s)", step, got, text, s);
    CHECKF(!strcmp(o.calls, calls), "step %zu: calls '%s', want '%s' (input %s)", step, o.calls, calls, s);
    di_srv_buf_free(&o.text);
  }
}

int main(void) {
  const di_srv_toolfmt *H = &DI_TOOLFMT_HERMES, *L = &DI_TOOLFMT_LLAMA3, *D3 = &DI_TOOLFMT_DEEPSEEK_V3,
                       *D31 = &DI_TOOLFMT_DEEPSEEK_V31;
  expect(H, "Hello there.", "Hello there.", "");
  expect(H, "a < b <tool", "a < b <tool", "");
  /* arguments as written (streamed raw), the object's own close brace and the tag dropped */
  expect(H, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>", "", "0:f:{\"x\": 1};");
  /* a close tag inside an argument string does not end the call; another key order is read whole */
  expect(H, "Sure.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>\n<tool_call>{\"name\": \"g\", "
            "\"parameters\": {\"s\": \"</tool_call>\"}}</tool_call>\nDone.",
         "Sure.Done.", "0:f:{};1:g:{\"s\":\"</tool_call>\"};");
  expect(H, "<tool_call>{\"name\": \"g\", \"arguments\": {\"s\": \"}</tool_call>\\\"{\"}}</tool_call>", "",
         "0:g:{\"s\": \"}</tool_call>\\\"{\"};");
  expect(H, "<tool_call>{\"arguments\": {\"a\": [1]}, \"name\": \"h\"}</tool_call>", "", "0:h:{\"a\":[1]};");
  /* not JSON, or cut before its arguments: text; cut inside them: the call so far */
  expect(H, "<tool_call>oops</tool_call>", "<tool_call>oops</tool_call>", "");
  expect(H, "<tool_call>\n{\"name\": \"f\", \"argu", "<tool_call>\n{\"name\": \"f\", \"argu", "");
  expect(H, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": \"x", "", "0:f:{\"a\": \"x;");
  expect(L, "{\"name\": \"f\", \"parameters\": {\"a\": [1, 2]}}", "", "0:f:{\"a\":[1,2]};");
  expect(L, "  {\"name\": 3}", "  {\"name\": 3}", "");
  expect(L, "The answer is {x}.", "The answer is {x}.", "");
  /* DeepSeek V3 / R1: fenced arguments, calls in one block */
  expect(D3, "Let me check.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
             "{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>add\n```json\n"
             "{\"a\": \"``\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
         "Let me check.", "0:get_weather:{\"city\": \"Paris\"};1:add:{\"a\": \"``\"};");
  /* V3.1: bare arguments */
  expect(D31, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Oslo\"}<｜tool▁call▁end｜>"
              "<｜tool▁call▁begin｜>add<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
         "", "0:get_weather:{\"city\": \"Oslo\"};1:add:{};");
  expect(D31, "<｜tool▁call▁begin｜>f<｜tool▁sep｜>{\"a\": 1", "", "0:f:{\"a\": 1;");
  expect(D31, "<｜tool▁call▁begin｜><｜tool▁call▁end｜> x", "<｜tool▁call▁begin｜><｜tool▁call▁end｜> x", "");
  expect(D31, "plain <｜tool▁sep｜> text", "plain <｜tool▁sep｜> text", "");
  CHECK(!strcmp(di_srv_toolfmt_detect("{{'<｜tool▁calls▁begin｜>' + name + '```json'}}"), "deepseek_v3"));
  CHECK(!strcmp(di_srv_toolfmt_detect("{{'<｜tool▁calls▁begin｜>' + name + '<｜tool▁sep｜>'}}"), "deepseek_v31"));
  CHECK(di_srv_toolfmt_named("deepseek_v31") == D31 && di_srv_toolfmt_named("deepseek_v3") == D3);
  CHECK(!strcmp(di_srv_toolfmt_detect("{% if tools %}<tool_call>{% endif %}"), "hermes"));
  CHECK(!strcmp(di_srv_toolfmt_detect("<|python_tag|>"), "llama3"));
  CHECK(!di_srv_toolfmt_detect("{{ messages }}") && !di_srv_toolfmt_detect(NULL));

  /* forcing schema: one alternative per function (named: only it), its parameters as arguments */
  json_t *tools = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}},"
                             "{\"type\":\"function\",\"function\":{\"name\":\"g\"}}]", 0, NULL);
  di_srv_tool_choice c = {DI_TOOLS_REQUIRED, NULL, 1};
  di_srv_constraint con;
  di_srv_err e = {0};
  CHECK(di_srv_tools_constraint(tools, &c, H, &con, &e) && con.on && con.kind == DI_GRAMMAR_JSON_SCHEMA);
  CHECKF(con.src && strstr(con.src, "\"anyOf\"") && strstr(con.src, "\"const\":\"g\"") && con.opts.max_repeat == 2 &&
             !strcmp(con.opts.before, "<tool_call>\n"), "%s", con.src);
  di_srv_constraint_free(&con);
  c = (di_srv_tool_choice){DI_TOOLS_NAMED, "g", 1};
  CHECK(di_srv_tools_constraint(tools, &c, L, &con, &e) && con.on && con.opts.max_repeat == 1);
  CHECKF(con.src && !strstr(con.src, "anyOf") && strstr(con.src, "\"parameters\":{") && !strstr(con.src, "\"f\""), "%s",
         con.src);
  di_srv_constraint_free(&con);
  c.mode = DI_TOOLS_AUTO;
  CHECK(di_srv_tools_constraint(tools, &c, H, &con, &e) && !con.on);
  /* the system prompt for templates without tools joins an existing system message */
  json_t *msgs = json_loads("[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":\"hi\"}]", 0, NULL);
  json_t *sys = di_srv_tools_in_system(msgs, tools, H);
  const char *sc = json_string_value(json_object_get(json_array_get(sys, 0), "content"));
  CHECK(json_array_size(sys) == 2 && sc && !strncmp(sc, "Be brief.\n\n# Tools", 18) && strstr(sc, "\"name\":\"g\""));
  CHECK(!strcmp(json_string_value(json_object_get(json_array_get(msgs, 0), "content")), "Be brief.")); /* a copy */
  json_decref(sys);
  /* DeepSeek's own prompt: its call format with the real tokens */
  sys = di_srv_tools_in_system(msgs, tools, D31);
  sc = json_string_value(json_object_get(json_array_get(sys, 0), "content"));
  CHECKF(sc && strstr(sc, "\n### f\n") && strstr(sc, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>tool_call_name<｜tool▁sep｜>"
                                                      "tool_call_arguments<｜tool▁call▁end｜>{{additional_tool_calls}}"
                                                      "<｜tool▁calls▁end｜>"), "%s", sc);
  json_decref(sys);
  json_decref(msgs);
  json_decref(tools);
  printf("test_server_tools: %d checks, %d failed\n", di_test_checks, di_test_failures);
  return di_test_failures != 0;
}
