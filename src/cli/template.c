/* deepinfer template: render a chat template as transformers'
 * apply_chat_template does, or print the safely assembled ids. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "recipe/chat.h"
#include "tokenizer/tokenizer.h"

char *di_cli_read_all(FILE *f, size_t *len); /* cli/tokenize.c */

static const char USAGE[] =
    "usage: deepinfer template --tokenizer PATH --messages FILE [--tools FILE]\n"
    "                          [--add-generation-prompt] [--kwargs JSON] [--ids]\n"
    "                          [--allow-special-in-content] [--now YYYY-MM-DD[THH:MM:SS]]\n"
    "                          [--template FILE]\n"
    "\n"
    "Renders the tokenizer's chat template over a conversation and prints the prompt.\n"
    "  --tokenizer PATH   tokenizer.json, a directory holding one (with tokenizer_config.json\n"
    "                     or chat_template.jinja), or a .gguf file\n"
    "  --messages FILE    JSON array of messages ('-' = stdin); an object with \"messages\"\n"
    "                     (and optionally \"tools\") is accepted too\n"
    "  --tools FILE       JSON array of tool schemas ({\"type\":\"function\",\"function\":{...}})\n"
    "  --add-generation-prompt  end with the assistant turn header\n"
    "  --kwargs JSON      object of extra template variables (e.g. '{\"enable_thinking\":false}')\n"
    "  --ids              print the token ids (a JSON array) instead of the text; only the\n"
    "                     template may produce special tokens, message text is plain text\n"
    "  --allow-special-in-content  trusted input: special-token text in messages becomes\n"
    "                     special tokens (Hugging Face's naive behaviour)\n"
    "  --now DATE         the date strftime_now() sees (default: now, local time)\n"
    "  --template FILE    use this Jinja template instead of the tokenizer's; without\n"
    "                     --tokenizer the text is rendered with bos_token/eos_token taken\n"
    "                     from --kwargs\n";

static int fail(const char *fmt, const char *a, const char *b) {
  char m[640];
  snprintf(m, sizeof m, fmt, a, b ? b : "");
  /* one line on stderr, even when a template's own message spans several */
  for (char *p = m; *p; p++)
    if (*p == '\n' || *p == '\r') *p = ' ';
  return di_cli_fail("template", "%s", m);
}

static json_t *load_json(const char *path, json_error_t *e) {
  if (!strcmp(path, "-")) return json_loadf(stdin, JSON_DECODE_ANY, e);
  return json_load_file(path, JSON_DECODE_ANY, e);
}

static bool parse_now(const char *s, int64_t *out) {
  struct tm tm = {0};
  int y, mo, d, h = 0, mi = 0, sec = 0;
  int k = sscanf(s, "%d-%d-%d%*[T ]%d:%d:%d", &y, &mo, &d, &h, &mi, &sec);
  if (k < 3 || mo < 1 || mo > 12 || d < 1 || d > 31) return false;
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = sec;
  *out = (int64_t)timegm(&tm);
  return true;
}

int di_cmd_template(int argc, char **argv) {
  const char *path = NULL, *mpath = NULL, *tpath = NULL, *kwargs_s = NULL, *now_s = NULL, *tmpl_path = NULL;
  bool agp = false, want_ids = false, allow = false;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    bool more = i + 1 < argc;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      fputs(USAGE, stdout);
      return 0;
    } else if (!strcmp(a, "--tokenizer") && more) path = argv[++i];
    else if (!strcmp(a, "--messages") && more) mpath = argv[++i];
    else if (!strcmp(a, "--tools") && more) tpath = argv[++i];
    else if (!strcmp(a, "--kwargs") && more) kwargs_s = argv[++i];
    else if (!strcmp(a, "--now") && more) now_s = argv[++i];
    else if (!strcmp(a, "--template") && more) tmpl_path = argv[++i];
    else if (!strcmp(a, "--add-generation-prompt")) agp = true;
    else if (!strcmp(a, "--ids")) want_ids = true;
    else if (!strcmp(a, "--allow-special-in-content")) allow = true;
    else return fail("unknown or incomplete option '%s' (see --help)", a, NULL);
  }
  if (!path && !tmpl_path) return fail("--tokenizer PATH is required%s", "", NULL);
  if (!path && want_ids) return fail("--ids needs --tokenizer PATH%s", "", NULL);
  if (!mpath) return fail("--messages FILE is required%s", "", NULL);
  di_chat_opts o = {.add_generation_prompt = agp, .kwargs_trusted = true};
  if (now_s && !parse_now(now_s, &o.now)) return fail("--now: expected YYYY-MM-DD[THH:MM:SS], got '%s'", now_s, NULL);

  json_error_t je;
  json_t *msgs = load_json(mpath, &je), *tools = NULL, *kw = NULL;
  if (!msgs) {
    char where[300];
    if (je.line > 0) snprintf(where, sizeof where, "line %d column %d: %s", je.line, je.column, je.text);
    else snprintf(where, sizeof where, "%s", je.text);
    return fail("--messages %s: %s", mpath, where);
  }
  json_t *messages = msgs;
  if (json_is_object(msgs)) {
    messages = json_object_get(msgs, "messages");
    json_t *t = json_object_get(msgs, "tools");
    if (t && !json_is_null(t)) tools = json_incref(t);
  }
  int rc = 2;
  di_tokenizer *tok = NULL;
  di_chat_template *tmpl = NULL;
  di_render_out r = {0};
  di_status st = {0};
  char *tsrc = NULL;
  if (!json_is_array(messages)) {
    fail("--messages %s: expected a JSON array of messages%s", mpath, NULL);
    goto done;
  }
  if (tpath) {
    if (tools) json_decref(tools);
    if (!(tools = load_json(tpath, &je))) {
      char m[400];
      if (je.line > 0) snprintf(m, sizeof m, "%s: line %d column %d: %s", tpath, je.line, je.column, je.text);
      else snprintf(m, sizeof m, "%s: %s", tpath, je.text);
      fail("--tools %s%s", m, NULL);
      goto done;
    }
  }
  if (kwargs_s && !(kw = json_loads(kwargs_s, 0, &je))) {
    fail("--kwargs: invalid JSON object: %s%s", je.text, NULL);
    goto done;
  }
  if (path && di_tokenizer_load(path, &tok, &st) != DI_OK) {
    fail("%s%s", st.msg, NULL);
    goto done;
  }
  const char *src = tok ? di_tokenizer_chat_template(tok, NULL) : NULL;
  size_t src_len = src ? strlen(src) : 0;
  if (tmpl_path) {
    FILE *f = fopen(tmpl_path, "rb");
    if (!f || !(tsrc = di_cli_read_all(f, &src_len))) {
      if (f) fclose(f);
      fail("--template %s: cannot read the file%s", tmpl_path, NULL);
      goto done;
    }
    fclose(f);
    src = tsrc;
  }
  if (!src) {
    fail("%s: no chat template (tokenizer_config.json chat_template, chat_template.jinja or GGUF "
         "tokenizer.chat_template)%s", path, NULL);
    goto done;
  }
  if (di_chat_template_compile(src, src_len, &tmpl, &st) != DI_OK) {
    fail("%s%s", st.msg, NULL);
    goto done;
  }
  o.tools = tools;
  o.kwargs = kw;
  if (tok) {
    o.bos_token = di_tokenizer_special_text(tok, "bos_token");
    o.eos_token = di_tokenizer_special_text(tok, "eos_token");
  }
  if (di_chat_render_ex(tmpl, messages, &o, &r, &st) != DI_OK) {
    fail("%s%s", st.msg, NULL);
    goto done;
  }
  if (want_ids) {
    int32_t *ids;
    size_t n;
    if (di_chat_assemble_ids(tok, &r, allow, &ids, &n, &st) != DI_OK) {
      fail("%s%s", st.msg, NULL);
      goto done;
    }
    putchar('[');
    for (size_t i = 0; i < n; i++) printf(i ? ", %d" : "%d", ids[i]);
    puts("]");
    free(ids);
  } else {
    fwrite(r.text, 1, r.len, stdout);
  }
  rc = fflush(stdout) == 0 ? 0 : di_cli_fail("template", "writing stdout failed");
done:
  free(tsrc);
  di_render_out_free(&r);
  di_chat_template_free(tmpl);
  di_tokenizer_free(tok);
  json_decref(msgs);
  if (tools) json_decref(tools);
  if (kw) json_decref(kw);
  return rc;
}
