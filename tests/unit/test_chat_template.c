/* Chat templates against the reference renders of transformers 5.24 /
 * jinja2 3.1.6 (../shared/data/tokenizers/chat/<name>/renders.jsonl.xz):
 * every text byte-equal, every expected error, and — with the tokenizer —
 * the ids: naive assembly equals apply_chat_template(tokenize=True) for all
 * renders, safe assembly equals it whenever message content holds no
 * added-token text, and no special token typed into content survives. */
#define _GNU_SOURCE
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "recipe/chat.h"
#include "tokenizer/tokenizer.h"

static const char *const NAMES[] = {"deepseek-v3", "llama3", "qwen3", "gemma3", "gpt-oss", "mistral7b", NULL};
#define FIXED_NOW 1754395200 /* 2025-08-05 12:00:00, as gen_chat.py pins strftime_now */

static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *p = malloc((size_t)n + 1);
  if (p && fread(p, 1, (size_t)n, f) != (size_t)n) { free(p); p = NULL; }
  fclose(f);
  if (p) { p[n] = 0; if (len) *len = (size_t)n; }
  return p;
}

static const char *tok_text(json_t *cfg, const char *key) {
  json_t *v = json_object_get(cfg, key);
  if (json_is_string(v)) return json_string_value(v);
  if (json_is_object(v)) return json_string_value(json_object_get(v, "content"));
  return NULL;
}

/* ~/.cache/deepinfer/tokenizers/<name>: the tokenizer folder decompressed once (shared with the tokenizer tests). */
static bool prepare_dir(const char *name, char *dir, size_t n) {
  const char *home = getenv("HOME");
  snprintf(dir, n, "%s/.cache/deepinfer/tokenizers/%s", home ? home : "/tmp", name);
  char tj[1200], cmd[16384], src[1024];
  snprintf(tj, sizeof tj, "%s/tokenizer.json", dir);
  di_test_data("tokenizers", src, sizeof src);
  struct stat sb;
  if (stat(tj, &sb) == 0) return true;
  int k = snprintf(cmd, sizeof cmd,
           "mkdir -p '%s' && cp '%s/%s/tokenizer_config.json' '%s/' && "
           "{ [ ! -f '%s/%s/chat_template.jinja' ] || cp '%s/%s/chat_template.jinja' '%s/'; } && "
           "xz -dc '%s/%s/tokenizer.json.xz' > '%s.tmp.%d' && mv '%s.tmp.%d' '%s'",
           dir, src, name, dir, src, name, src, name, dir, src, name, tj, (int)getpid(), tj, (int)getpid(), tj);
  if (k < 0 || (size_t)k >= sizeof cmd) return false;
  return system(cmd) == 0;
}

static bool ids_equal(const int32_t *a, size_t na, json_t *b) {
  if (na != json_array_size(b)) return false;
  for (size_t i = 0; i < na; i++)
    if (a[i] != (int32_t)json_integer_value(json_array_get(b, i))) return false;
  return true;
}

/* The texts of the non-whitespace added tokens of a vocabulary. */
typedef struct added_list {
  const char **text;
  size_t *len;
  size_t n;
} added_list;

static void added_list_init(const di_tokenizer *tok, added_list *al) {
  memset(al, 0, sizeof *al);
  int32_t nv = di_tokenizer_n_vocab(tok);
  al->text = malloc(sizeof(char *) * (size_t)nv);
  al->len = malloc(sizeof(size_t) * (size_t)nv);
  for (int32_t id = 0; id < nv; id++) {
    if (!di_tokenizer_is_added(tok, id)) continue;
    size_t l;
    const char *t = di_tokenizer_token_text(tok, id, &l);
    if (!t || !l || strspn(t, " \n\t\r") == l) continue;
    al->text[al->n] = t;
    al->len[al->n++] = l;
  }
}

/* true if any string in j contains the text of a non-whitespace added token */
static bool has_added_text(const added_list *al, json_t *j) {
  if (json_is_string(j)) {
    const char *s = json_string_value(j);
    for (size_t i = 0; i < al->n; i++)
      if (memmem(s, strlen(s), al->text[i], al->len[i])) return true;
    return false;
  }
  size_t i;
  json_t *v;
  const char *k;
  if (json_is_array(j)) json_array_foreach(j, i, v) if (has_added_text(al, v)) return true;
  if (json_is_object(j)) json_object_foreach(j, k, v) if (has_added_text(al, v)) return true;
  return false;
}

static int count_control(const di_tokenizer *tok, const int32_t *ids, size_t n) {
  int c = 0;
  for (size_t i = 0; i < n; i++) {
    if (!di_tokenizer_is_added(tok, ids[i])) continue;
    size_t l;
    const char *t = di_tokenizer_token_text(tok, ids[i], &l);
    if (t && l && strspn(t, " \n\t\r") != l && !strstr(t, "\xe2\x96\x81\xe2\x96\x81")) c++;
  }
  return c;
}

static void injection(const char *name, di_tokenizer *tok, di_chat_template *t, const char *bos, const char *eos) {
  size_t cap = 1 << 20, len = 0;
  char *content = malloc(cap);
  int n_special = 0;
  content[0] = 0;
  for (int32_t id = 0; id < di_tokenizer_n_vocab(tok); id++) {
    if (!di_tokenizer_is_special(tok, id)) continue;
    size_t l;
    const char *s = di_tokenizer_token_text(tok, id, &l);
    if (!s || !l || len + l + 8 > cap) continue;
    memcpy(content + len, "a ", 2);
    memcpy(content + len + 2, s, l);
    len += l + 2;
    content[len] = 0;
    n_special++;
  }
  /* system and user text, and for templates that print tool calls with tojson
   * (llama3, qwen3) tool-call arguments and tool results too */
  bool tools = !strcmp(name, "qwen3") || !strcmp(name, "llama3");
  json_t *evil = json_pack("[{s:s, s:s}, {s:s, s:s}]", "role", "system", "content", content, "role", "user",
                           "content", content);
  json_t *benign = json_pack("[{s:s, s:s}, {s:s, s:s}]", "role", "system", "content", "a", "role", "user",
                             "content", "a");
  if (tools) {
    json_t *msgs[2] = {evil, benign};
    for (int k = 0; k < 2; k++) {
      const char *x = k ? "b" : content;
      json_array_append_new(msgs[k], json_pack("{s:s, s:s, s:[{s:s, s:{s:s, s:{s:s}}}]}", "role", "assistant",
                                               "content", "", "tool_calls", "type", "function", "function", "name",
                                               "f", "arguments", x, x));
      json_array_append_new(msgs[k], json_pack("{s:s, s:s}", "role", k ? "tool" : "tool", "content", x));
    }
  }
  di_status st = {0};
  di_render_out re, rb;
  CHECKF(di_chat_render(t, evil, NULL, true, NULL, bos, eos, &re, &st) == DI_OK, "%s: %s", name, st.msg);
  CHECKF(di_chat_render(t, benign, NULL, true, NULL, bos, eos, &rb, &st) == DI_OK, "%s: %s", name, st.msg);
  int32_t *ie = NULL, *ib = NULL, *in = NULL;
  size_t ne = 0, nb = 0, nn = 0;
  CHECKF(di_chat_assemble_ids(tok, &re, false, &ie, &ne, &st) == DI_OK, "%s: %s", name, st.msg);
  CHECKF(di_chat_assemble_ids(tok, &rb, false, &ib, &nb, &st) == DI_OK, "%s: %s", name, st.msg);
  CHECKF(di_chat_assemble_ids(tok, &re, true, &in, &nn, &st) == DI_OK, "%s: %s", name, st.msg);
  CHECKF(count_control(tok, ie, ne) == count_control(tok, ib, nb),
         "%s: %d special tokens typed in content: %d control ids in the safe prompt, %d in a benign one", name,
         n_special, count_control(tok, ie, ne), count_control(tok, ib, nb));
  int missing = 0;
  for (int32_t id = 0; id < di_tokenizer_n_vocab(tok); id++) {
    if (!di_tokenizer_is_special(tok, id)) continue;
    bool found = false;
    for (size_t i = 0; i < nn && !found; i++) found = in[i] == id;
    missing += !found;
  }
  CHECKF(missing == 0, "%s: with --allow-special-in-content %d of %d special tokens did not come through", name,
         missing, n_special);
  free(ie); free(ib); free(in); free(content);
  di_render_out_free(&re);
  di_render_out_free(&rb);
  json_decref(evil);
  json_decref(benign);
}

static void run_reference(const char *name) {
  char p[1200], dir[1024];
  snprintf(p, sizeof p, "tokenizers/%s/tokenizer_config.json", name);
  char path[1300];
  di_test_data(p, path, sizeof path);
  json_error_t je;
  json_t *cfg = json_load_file(path, JSON_DECODE_INT_AS_REAL, &je);
  CHECKF(cfg != NULL, "%s: %s", path, je.text);
  if (!cfg) return;
  const char *src = json_string_value(json_object_get(cfg, "chat_template"));
  char *jsrc = NULL;
  if (!src) {
    snprintf(p, sizeof p, "tokenizers/%s/chat_template.jinja", name);
    jsrc = read_file(di_test_data(p, path, sizeof path), NULL);
    src = jsrc;
  }
  CHECKF(src != NULL, "%s: no chat template", name);
  if (!src) return;
  const char *bos = tok_text(cfg, "bos_token"), *eos = tok_text(cfg, "eos_token");
  di_status st = {0};
  di_chat_template *t = NULL;
  CHECKF(di_chat_template_compile(src, strlen(src), &t, &st) == DI_OK, "%s: %s", name, st.msg);
  if (!t) return;

  di_tokenizer *tok = NULL;
  di_status tst = {0};
  if (prepare_dir(name, dir, sizeof dir)) {
    if (di_tokenizer_load(dir, &tok, &tst) != DI_OK) tok = NULL;
  }
  CHECKF(tok != NULL, "%s: tokenizer did not load (%s); ids not checked", name, tst.msg);
  added_list al = {0};
  if (tok) added_list_init(tok, &al);

  snprintf(p, sizeof p, "tokenizers/chat/%s/conversations.json", name);
  json_t *convs = json_load_file(di_test_data(p, path, sizeof path), 0, &je);
  snprintf(p, sizeof p, "tokenizers/chat/%s/renders.jsonl.xz", name);
  char cmd[1500];
  snprintf(cmd, sizeof cmd, "xz -dc '%s'", di_test_data(p, path, sizeof path));
  FILE *f = popen(cmd, "r");
  CHECK(convs && f);
  char *line = NULL;
  size_t lcap = 0;
  int n_text = 0, n_err = 0, n_ids = 0, n_safe = 0;
  while (f && convs && getline(&line, &lcap, f) > 0) {
    json_t *rec = json_loads(line, 0, &je);
    const char *cid = json_string_value(json_object_get(rec, "conversation"));
    json_t *conv = NULL, *c;
    size_t i;
    json_array_foreach(convs, i, c) if (!strcmp(json_string_value(json_object_get(c, "id")), cid)) conv = c;
    json_t *kw = json_deep_copy(json_object_get(rec, "kwargs"));
    bool agp = json_is_true(json_object_get(kw, "add_generation_prompt"));
    json_object_del(kw, "add_generation_prompt");
    di_chat_opts o = {.tools = json_object_get(conv, "tools"), .add_generation_prompt = agp, .kwargs = kw,
                      .bos_token = bos, .eos_token = eos, .now = FIXED_NOW};
    di_render_out r;
    di_status rs = {0};
    di_code rc = di_chat_render_ex(t, json_object_get(conv, "messages"), &o, &r, &rs);
    const char *want = json_string_value(json_object_get(rec, "text"));
    const char *werr = json_string_value(json_object_get(rec, "error"));
    char *kws = json_dumps(json_object_get(rec, "kwargs"), JSON_COMPACT);
    if (want) {
      CHECKF(rc == DI_OK, "%s %s %s: render failed: %s", name, cid, kws, rs.msg);
      if (rc == DI_OK) {
        bool eq = r.len == strlen(want) && !memcmp(r.text, want, r.len);
        CHECKF(eq, "%s %s %s: render differs\n--- got ---\n%s\n--- want ---\n%s", name, cid, kws, r.text, want);
        n_text += eq;
        if (tok) {
          int32_t *ids;
          size_t n;
          json_t *wids = json_object_get(rec, "ids");
          di_status is = {0};
          CHECKF(di_chat_assemble_ids(tok, &r, true, &ids, &n, &is) == DI_OK, "%s: %s", name, is.msg);
          if (!is.code) {
            bool ok = ids_equal(ids, n, wids);
            CHECKF(ok, "%s %s %s: naive ids differ from apply_chat_template(tokenize=True)", name, cid, kws);
            n_ids += ok;
            free(ids);
          }
          CHECKF(di_chat_assemble_ids(tok, &r, false, &ids, &n, &is) == DI_OK, "%s: %s", name, is.msg);
          if (!is.code) {
            if (!has_added_text(&al, json_object_get(conv, "messages"))) {
              bool ok = ids_equal(ids, n, wids);
              CHECKF(ok, "%s %s %s: safe ids differ on a benign conversation", name, cid, kws);
              n_safe += ok;
            }
            free(ids);
          }
        }
      }
    } else {
      CHECKF(rc != DI_OK, "%s %s %s: expected error '%s', rendered instead", name, cid, kws, werr);
      bool eq = rc != DI_OK && !strncmp(rs.msg, werr, strlen(werr));
      CHECKF(eq, "%s %s %s: error '%s', want '%s'", name, cid, kws, rs.msg, werr);
      n_err += eq;
    }
    free(kws);
    if (rc == DI_OK) di_render_out_free(&r);
    json_decref(kw);
    json_decref(rec);
  }
  free(line);
  if (f) pclose(f);
  printf("%s: %d texts, %d errors, %d naive ids, %d safe ids equal the reference\n", name, n_text, n_err, n_ids, n_safe);
  if (tok) injection(name, tok, t, bos, eos);
  free(al.text);
  free(al.len);
  di_tokenizer_free(tok);
  di_chat_template_free(t);
  json_decref(convs);
  json_decref(cfg);
  free(jsrc);
}

/* ---------------------------------------------------------------- behaviour */

static di_code render1(const char *src, const char *messages_json, char **text, di_status *st) {
  di_status_clear(st);
  di_chat_template *t;
  di_code rc = di_chat_template_compile(src, strlen(src), &t, st);
  if (rc) return rc;
  json_error_t je;
  json_t *m = json_loads(messages_json, 0, &je);
  di_render_out r;
  rc = di_chat_render(t, m, NULL, false, NULL, "<s>", "</s>", &r, st);
  if (!rc) {
    free(*text);
    *text = strdup(r.text);
    di_render_out_free(&r);
  }
  json_decref(m);
  di_chat_template_free(t);
  return rc;
}

static void hostile(void) {
  di_status st = {0};
  char *out = NULL;
  const char *M = "[{\"role\":\"user\",\"content\":\"hi\"}]";
  CHECK(render1("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", M, &out, &st) == DI_ERR_RANGE);
  CHECKF(strstr(st.msg, "recursion") != NULL, "%s", st.msg);
  di_status_clear(&st);
  di_code rc = render1("{% for i in range(1000000) %}{% for j in range(1000000) %}{% endfor %}{% endfor %}", M, &out, &st);
  CHECKF(rc == DI_ERR_RANGE || rc == DI_ERR_NOMEM, "%s", st.msg);
  di_status_clear(&st);
  CHECK(render1("{% set s = 'x' * 1000000 %}{% for i in range(100000) %}{{ s }}{% endfor %}", M, &out, &st) != DI_OK);
  CHECKF(strstr(st.msg, "exceeds") || strstr(st.msg, "budget"), "%s", st.msg);
  di_status_clear(&st);
  CHECK(render1("{{ 'x' * 100000000000 }}", M, &out, &st) == DI_ERR_NOMEM);
  di_status_clear(&st);
  CHECK(render1("{{ range(100000000000) | length }}", M, &out, &st) == DI_ERR_RANGE);
  di_status_clear(&st);
  /* quadratic work is charged to the step budget */
  CHECK(render1("{% set l = range(1000000) %}{% for i in l %}{{ i in l }}{% endfor %}", M, &out, &st) == DI_ERR_RANGE);
  CHECK(render1("{% set l = range(300000) | list %}{{ l | unique | length }}", M, &out, &st) == DI_ERR_RANGE);
  /* values nested without bound print with an error, not a stack overflow */
  CHECK(render1("{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}"
                "{{ ns.x }}", M, &out, &st) == DI_ERR_RANGE);
  CHECK(render1("{% set ns = namespace(x=[]) %}{% for i in range(5000) %}{% set ns.x = [ns.x] %}{% endfor %}"
                "{{ ns.x == ns.x }}{{ ns.x | tojson }}", M, &out, &st) == DI_ERR_RANGE);
  char deep[4000];
  memset(deep, '(', 1500);
  strcpy(deep + 1500, "1");
  memset(deep + 1501, ')', 1500);
  deep[3001] = 0;
  char tpl[4100];
  snprintf(tpl, sizeof tpl, "{{ %s }}", deep);
  CHECK(render1(tpl, M, &out, &st) == DI_ERR_RANGE);
  di_status_clear(&st);
}

static void errors_and_utf8(void) {
  di_status st = {0};
  char *out = NULL;
  CHECK(render1("line one\n{% include 'x' %}", "[]", &out, &st) == DI_ERR_UNSUPPORTED);
  CHECKF(strstr(st.msg, "line 2:4") != NULL, "%s", st.msg);
  di_status_clear(&st);
  CHECK(render1("{{ x | nosuchfilter }}", "[]", &out, &st) == DI_ERR_UNSUPPORTED);
  CHECKF(strstr(st.msg, "line 1:8") != NULL, "%s", st.msg);
  di_status_clear(&st);
  CHECK(render1("{% for x in y %}", "[]", &out, &st) == DI_ERR_FORMAT);
  CHECKF(strstr(st.msg, "endfor") != NULL, "%s", st.msg);
  di_status_clear(&st);
  /* invalid UTF-8 in content: built without jansson's check */
  di_chat_template *t;
  CHECK(di_chat_template_compile("{{ messages[0].content }}", 25, &t, &st) == DI_OK);
  json_t *m = json_array();
  json_t *msg = json_object();
  json_object_set_new(msg, "role", json_string("user"));
  json_object_set_new(msg, "content", json_stringn_nocheck("ok\xc0\xaf", 4));
  json_array_append_new(m, msg);
  di_render_out r;
  CHECK(di_chat_render(t, m, NULL, false, NULL, NULL, NULL, &r, &st) == DI_ERR_INVALID);
  CHECKF(strstr(st.msg, "messages[0].content") && strstr(st.msg, "byte offset 2"), "%s", st.msg);
  json_decref(m);
  di_chat_template_free(t);
  di_status_clear(&st);
  CHECK(di_chat_template_compile("bad \xff", 5, &t, &st) == DI_ERR_INVALID);
  CHECKF(strstr(st.msg, "byte offset 4") != NULL, "%s", st.msg);
  di_status_clear(&st);
  CHECK(render1("{{ raise_exception('nope') }}", "[]", &out, &st) == DI_ERR_INVALID);
  CHECKF(!strcmp(st.msg, "TemplateError: nope"), "%s", st.msg);
}

static void spans(void) {
  di_status st = {0};
  di_chat_template *t;
  const char *src = "{% for m in messages %}<|im_start|>{{ m.role + '\\n' + m.content | trim }}<|im_end|>{% endfor %}";
  CHECK(di_chat_template_compile(src, strlen(src), &t, &st) == DI_OK);
  json_t *m = json_loads("[{\"role\":\"user\",\"content\":\"  <|im_end|> \"}]", 0, NULL);
  di_render_out r;
  CHECK(di_chat_render(t, m, NULL, false, NULL, NULL, NULL, &r, &st) == DI_OK);
  CHECKF(!strcmp(r.text, "<|im_start|>user\n<|im_end|><|im_end|>"), "%s", r.text);
  /* template | content(role) | template "\n" | content | template */
  CHECK(r.n_spans == 5);
  if (r.n_spans == 5) {
    CHECK(!r.spans[0].content && r.spans[0].len == 12);
    CHECK(r.spans[1].content && r.spans[1].len == 4);
    CHECK(!r.spans[2].content && r.spans[2].len == 1);
    CHECK(r.spans[3].content && r.spans[3].len == 10);
    CHECK(!r.spans[4].content);
  }
  di_render_out_free(&r);
  json_decref(m);
  di_chat_template_free(t);

  di_reasoning_split rs;
  const char *o = "<think>plan</think>answer";
  di_recipe_split_reasoning(o, strlen(o), NULL, NULL, &rs);
  CHECK(rs.found && rs.reasoning_len == 4 && !strncmp(rs.reasoning, "plan", 4) && !strcmp(rs.content, "answer"));
  o = "plan</think>answer";
  di_recipe_split_reasoning(o, strlen(o), NULL, NULL, &rs);
  CHECK(rs.found && rs.reasoning_len == 4 && !strcmp(rs.content, "answer"));
  o = "no tags";
  di_recipe_split_reasoning(o, strlen(o), NULL, NULL, &rs);
  CHECK(!rs.found && rs.content_len == 7);
  o = "<think>still going";
  di_recipe_split_reasoning(o, strlen(o), NULL, NULL, &rs);
  CHECK(rs.found && rs.reasoning_len == 11 && rs.content_len == 0);
}

int main(void) {
  hostile();
  errors_and_utf8();
  spans();
  for (int i = 0; NAMES[i]; i++) run_reference(NAMES[i]);
  return di_test_finish("test_chat_template");
}
