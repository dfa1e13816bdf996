/* libFuzzer target: the chat-template compiler and renderer must reject or
 * render any byte string cleanly and in bounded time and memory. The input is
 * the template source; if it contains a line "---", what follows is used as
 * the messages JSON instead of the fixed conversation. */
#define _GNU_SOURCE
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "recipe/chat.h"

static const char MESSAGES[] =
    "[{\"role\":\"system\",\"content\":\"sys <|im_start|>\"},"
    "{\"role\":\"user\",\"content\":\"hi\",\"name\":null},"
    "{\"role\":\"assistant\",\"content\":\"<think>r</think>ok\",\"tool_calls\":[{\"id\":\"call00001\","
    "\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":{\"a\":[1,2.5,true,null]}}}]},"
    "{\"role\":\"tool\",\"content\":\"42\"},{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"x\"}]}]";
static const char TOOLS[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"description\":\"d\",\"parameters\":"
    "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}}}}}}]";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *src = (const char *)data;
  size_t src_len = size;
  json_t *msgs = NULL;
  const char *sep = size >= 5 ? memmem(data, size, "\n---\n", 5) : NULL;
  if (sep) {
    src_len = (size_t)(sep - src);
    msgs = json_loadb(sep + 5, size - src_len - 5, 0, NULL);
  }
  if (!msgs) msgs = json_loads(MESSAGES, 0, NULL);
  json_t *tools = json_loads(TOOLS, 0, NULL);
  json_t *kw = json_pack("{s:b,s:s}", "enable_thinking", 0, "date_string", "1 Jan 2025");
  di_chat_template *t = NULL;
  di_status st = {0};
  if (di_chat_template_compile(src, src_len, &t, &st) == DI_OK) {
    di_chat_opts o = {.tools = tools, .add_generation_prompt = true, .kwargs = kw, .bos_token = "<s>",
                      .eos_token = "</s>", .now = 1754395200, .max_output = 1 << 16, .max_memory = 32 << 20,
                      .max_steps = 200000, .max_depth = 32};
    di_render_out r;
    if (di_chat_render_ex(t, msgs, &o, &r, &st) == DI_OK) {
      size_t covered = 0;
      for (size_t i = 0; i < r.n_spans; i++) covered += r.spans[i].len;
      if (covered != r.len || r.text[r.len] != 0) abort();
      di_render_out_free(&r);
    }
    di_chat_template_free(t);
  }
  json_decref(msgs);
  json_decref(tools);
  json_decref(kw);
  return 0;
}
