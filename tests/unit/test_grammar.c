/* Grammar engine: front ends (JSON Schema, regex, GBNF) on byte strings,
 * masks checked token by token against the matcher itself (the cached
 * context-free decisions must equal a plain walk of every token), rollback,
 * fork, and the compile errors bad input must give. Llama 3 tokenizer. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
#include "test_tok.h"
#include "grammar/grammar.h"
#include "tokenizer/tokenizer.h"

static di_tokenizer *tok;

static di_grammar *compile(di_grammar_kind kind, const char *src, di_json_ws ws, di_status *st) {
  di_grammar *g = NULL;
  di_grammar_opts o = {.ws = ws};
  di_status_clear(st);
  if (di_grammar_compile(tok, kind, src, src ? strlen(src) : 0, &o, &g, st)) return NULL;
  return g;
}

/* Whole-string match through the byte interface. */
static bool matches(di_grammar *g, const char *s) {
  di_gmatcher *m;
  di_status st = {0};
  di_gmatcher_new(g, &m, &st);
  bool ok = di_gmatcher_accept_bytes(m, s, strlen(s)) && di_gmatcher_is_accepting(m);
  di_gmatcher_free(m);
  return ok;
}

static void expect(di_grammar_kind kind, const char *src, const char *const *yes, const char *const *no) {
  di_status st;
  di_grammar *g = compile(kind, src, DI_JSON_WS_PYTHON, &st);
  CHECKF(g, "%s: %s", src, st.msg);
  if (!g) return;
  for (size_t i = 0; yes[i]; i++) CHECKF(matches(g, yes[i]), "%s should match %s", src, yes[i]);
  for (size_t i = 0; no[i]; i++) CHECKF(!matches(g, no[i]), "%s should not match %s", src, no[i]);
  di_grammar_release(g);
}

static void expect_error(di_grammar_kind kind, const char *src, const char *needle) {
  di_status st;
  di_grammar *g = compile(kind, src, DI_JSON_WS_PYTHON, &st);
  CHECKF(!g, "%s should not compile", src);
  CHECKF(strstr(st.msg, needle), "%s: error '%s' should mention '%s'", src, st.msg, needle);
  di_grammar_release(g);
}

/* Walks text token by token; at each step every token's mask bit must equal
 * whether the matcher accepts it (accept + rollback). */
static void check_masks(const char *schema, di_grammar_kind kind, const char *text, size_t stride) {
  di_status st;
  di_grammar *g = compile(kind, schema, DI_JSON_WS_PYTHON, &st);
  CHECKF(g, "%s: %s", schema, st.msg);
  if (!g) return;
  int32_t *ids;
  size_t n;
  di_tokenizer_encode(tok, text, strlen(text), false, false, &ids, &n, &st);
  int32_t V = di_grammar_n_vocab(g);
  uint32_t *mask = calloc(di_grammar_mask_words(g), 4);
  di_gmatcher *m;
  di_gmatcher_new(g, &m, &st);
  int bad = 0;
  for (size_t k = 0; k <= n; k++) {
    di_gmatcher_fill_mask(m, mask);
    for (int32_t t = (int32_t)(k % stride); t < V && bad < 5; t += (int32_t)stride) {
      bool in = mask[t >> 5] >> (t & 31) & 1;
      bool acc = di_gmatcher_accept_token(m, t);
      if (acc) di_gmatcher_rollback(m, 1);
      if (in != acc) {
        bad++;
        size_t l;
        const char *b = di_tokenizer_token_bytes(tok, t, &l);
        fprintf(stderr, "step %zu token %d '%.*s': mask %d matcher %d\n", k, t, (int)l, b, in, acc);
      }
    }
    if (k == n) break;
    CHECKF(mask[ids[k] >> 5] >> (ids[k] & 31) & 1, "token %zu of %s not in the mask", k, text);
    CHECK(di_gmatcher_accept_token(m, ids[k]));
  }
  CHECKF(bad == 0, "%d mask/matcher disagreements for %s", bad, schema);
  CHECK(di_gmatcher_is_accepting(m));
  /* rollback and fork replay the same states */
  size_t total = di_gmatcher_n_accepted(m);
  di_gmatcher *f = di_gmatcher_fork(m);
  di_gmatcher_rollback(m, total / 2);
  CHECK(di_gmatcher_n_accepted(m) == total - total / 2);
  for (size_t k = total - total / 2; k < n; k++) CHECK(di_gmatcher_accept_token(m, ids[k]));
  CHECK(di_gmatcher_is_accepting(m) && di_gmatcher_is_accepting(f));
  di_gmatcher_free(f);
  di_gmatcher_free(m);
  free(mask);
  free(ids);
  di_grammar_release(g);
}

int main(void) {
  tok = di_test_tokenizer("llama3");
  if (!tok) {
    fprintf(stderr, "test_grammar: llama3 tokenizer not available\n");
    return 77;
  }
  /* regex (whole output) */
  expect(DI_GRAMMAR_REGEX, "a(b|c)*d{2,3}", (const char *const[]){"add", "abcbddd", NULL},
         (const char *const[]){"ad", "abdddd", "xadd", NULL});
  expect(DI_GRAMMAR_REGEX, "[^a-c\\d]+\\.\\u00e9\\p{Lu}", (const char *const[]){"xyz.\xc3\xa9\xc3\x89", NULL},
         (const char *const[]){"a.\xc3\xa9X", "x1.\xc3\xa9X", "x.\xc3\xa9x", NULL});
  expect(DI_GRAMMAR_REGEX, "(?:ab)?c.", (const char *const[]){"cx", "abc\xe2\x82\xac", NULL},
         (const char *const[]){"c\n", "abab", NULL});
  expect_error(DI_GRAMMAR_REGEX, "a(?=b)", "lookahead");
  expect_error(DI_GRAMMAR_REGEX, "(?<!a)b", "lookbehind");
  expect_error(DI_GRAMMAR_REGEX, "(a)\\1", "backreference");
  /* its DFA has 2^24 states: compiled again with groups as rules, matched exactly */
  expect(DI_GRAMMAR_REGEX, "(a|b)*a(a|b){24}",
         (const char *const[]){"abbbbbbbbbbbbbbbbbbbbbbbb", "bbaaaaaaaaaaaaaaaaaaaaaaaaa", NULL},
         (const char *const[]){"abbbbbbbbbbbbbbbbbbbbbbb", "bbbbbbbbbbbbbbbbbbbbbbbbb", NULL});
  expect_error(DI_GRAMMAR_REGEX, "[]", "no string");
  {
    /* tool calls: the schema's language wrapped, repeated with a separator */
    di_grammar_opts o = {.ws = DI_JSON_WS_PYTHON, .before = "<tool_call>\n", .after = "\n</tool_call>", .sep = "\n",
                         .max_repeat = 2};
    const char *sch = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"],"
                      "\"additionalProperties\":false}";
    di_grammar *g = NULL, *g1 = NULL;
    di_status st = {0};
    CHECKF(!di_grammar_compile(tok, DI_GRAMMAR_JSON_SCHEMA, sch, strlen(sch), &o, &g, &st), "%s", st.msg);
    o.max_repeat = 0;
    CHECKF(!di_grammar_compile(tok, DI_GRAMMAR_JSON_SCHEMA, sch, strlen(sch), &o, &g1, &st), "%s", st.msg);
    CHECK(g && g1 && g != g1); /* the wrapping is part of the cache key */
    const char *one = "<tool_call>\n{\"a\": 1}\n</tool_call>", *two = "<tool_call>\n{\"a\": 1}\n</tool_call>\n<tool_call>\n{\"a\": 2}\n</tool_call>";
    CHECK(g && matches(g, one) && matches(g, two));
    CHECK(g && !matches(g, "{\"a\": 1}") && !matches(g, "<tool_call>\n{\"a\": 1}") &&
          !matches(g, "<tool_call>\n{\"b\": 1}\n</tool_call>"));
    char three[256];
    snprintf(three, sizeof three, "%s\n<tool_call>\n{\"a\": 3}\n</tool_call>", two);
    CHECK(g && !matches(g, three));
    CHECK(g1 && matches(g1, one) && !matches(g1, two));
    CHECK(g && !matches(g, "<tool_call>\n{\"a\": 1}\n</tool_call><tool_call>\n{\"a\": 2}\n</tool_call>"));
    di_grammar_release(g);
    di_grammar_release(g1);
  }
  /* GBNF */
  expect(DI_GRAMMAR_GBNF, "root ::= \"x\" item+ # comment\nitem ::= [0-9] | \"(\" root \")\"\n",
         (const char *const[]){"x1", "x(x12)3", NULL}, (const char *const[]){"x", "x(x)", "y1", NULL});
  expect_error(DI_GRAMMAR_GBNF, "root ::= root \"a\" | \"b\"\n", "left recursion");
  expect_error(DI_GRAMMAR_GBNF, "root ::= item\n", "never defined");
  expect_error(DI_GRAMMAR_GBNF, "root ::= \"a\" root\n", "no string");
  /* JSON Schema, Python spacing */
  const char *obj = "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":5},"
                    "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150},\"tags\":{\"type\":\"array\","
                    "\"items\":{\"enum\":[\"a\",\"b\"]},\"maxItems\":2}},\"required\":[\"age\"],"
                    "\"additionalProperties\":false}";
  expect(DI_GRAMMAR_JSON_SCHEMA, obj,
         (const char *const[]){"{\"age\": 7}", "{\"name\": \"bo\", \"age\": 150, \"tags\": [\"a\", \"b\"]}",
                               "{\"age\": 0, \"tags\": []}", NULL},
         (const char *const[]){"{}", "{\"age\": 151}", "{\"age\": 07}", "{\"name\": \"toolong\", \"age\": 1}",
                               "{\"age\": 1, \"x\": 1}", "{\"age\":1}", "{\"age\": 1, \"tags\": [\"a\", \"b\", \"a\"]}", NULL});
  const char *rec = "{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"number\"},"
                    "\"next\":{\"anyOf\":[{\"$ref\":\"#/$defs/n\"},{\"type\":\"null\"}]}},\"required\":[\"v\",\"next\"]}},"
                    "\"$ref\":\"#/$defs/n\"}";
  /* oneOf of required sets: exactly one of the properties present */
  expect(DI_GRAMMAR_JSON_SCHEMA,
         "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"},"
         "\"n\":{\"type\":\"integer\"}},\"additionalProperties\":false,\"oneOf\":[{\"required\":[\"a\"]},"
         "{\"required\":[\"b\"]}]}",
         (const char *const[]){"{\"a\": 1}", "{\"b\": 2, \"n\": 0}", NULL},
         (const char *const[]){"{\"a\": 1, \"b\": 2}", "{\"n\": 1}", "{}", NULL});
  /* with property schemas in the branches (a parameter typed by name or by a custom type) */
  expect(DI_GRAMMAR_JSON_SCHEMA,
         "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"}},\"required\":[\"name\"],\"oneOf\":["
         "{\"properties\":{\"t\":{\"enum\":[\"x\"]}},\"required\":[\"t\"]},{\"properties\":{\"c\":{\"type\":\"string\"}},"
         "\"required\":[\"c\"]}]}",
         (const char *const[]){"{\"name\": \"n\", \"t\": \"x\"}", "{\"name\": \"n\", \"c\": \"y\"}", NULL},
         (const char *const[]){"{\"name\": \"n\", \"t\": \"x\", \"c\": \"y\"}", "{\"name\": \"n\", \"t\": \"z\"}",
                               "{\"name\": \"n\"}", NULL});
  /* a branch whose required set contains another's can never be the only match */
  expect(DI_GRAMMAR_JSON_SCHEMA,
         "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"}},"
         "\"additionalProperties\":false,\"oneOf\":[{\"required\":[\"a\"]},{\"required\":[\"a\",\"b\"]}]}",
         (const char *const[]){"{\"a\": 1}", NULL}, (const char *const[]){"{\"a\": 1, \"b\": 2}", "{\"b\": 2}", NULL});
  /* required sets that differ by two: "not both of length and width" */
  expect(DI_GRAMMAR_JSON_SCHEMA,
         "{\"type\":\"object\",\"properties\":{\"radius\":{\"type\":\"integer\"},\"length\":{\"type\":\"integer\"},"
         "\"width\":{\"type\":\"integer\"}},\"oneOf\":[{\"required\":[\"radius\"]},{\"required\":[\"length\",\"width\"]}]}",
         (const char *const[]){"{\"radius\": 5}", "{\"radius\": 5, \"length\": 10}", "{\"length\": 1, \"width\": 2}", NULL},
         (const char *const[]){"{\"radius\": 5, \"length\": 10, \"width\": 5}", "{\"length\": 1}", NULL});
  expect_error(DI_GRAMMAR_JSON_SCHEMA, "{\"type\":\"string\",\"format\":\"regex\"}", "format 'regex'");
  /* oneOf of required sets with "type": "object" in the branches, and the same through $refs */
  expect(DI_GRAMMAR_JSON_SCHEMA,
         "{\"type\":\"object\",\"oneOf\":[{\"type\":\"object\",\"required\":[\"id\",\"win\"],\"properties\":{\"id\":"
         "{\"type\":\"string\"}}},{\"type\":\"object\",\"required\":[\"id\",\"lose\"]}]}",
         (const char *const[]){"{\"id\": \"g\", \"win\": {}}", "{\"id\": \"g\", \"lose\": 1}", NULL},
         (const char *const[]){"{\"id\": \"g\", \"win\": {}, \"lose\": {}}", "{\"id\": \"g\"}", "\"s\"", NULL});
  expect(DI_GRAMMAR_JSON_SCHEMA,
         "{\"oneOf\":[{\"$ref\":\"#/definitions/a\"},{\"$ref\":\"#/definitions/b\"}],\"definitions\":{\"a\":{\"type\":"
         "\"object\",\"required\":[\"a\"],\"properties\":{\"a\":{\"type\":\"integer\"}}},\"b\":{\"type\":\"object\","
         "\"required\":[\"b\"]}}}",
         (const char *const[]){"{\"a\": 1}", "{\"b\": null}", "{\"a\": 1, \"x\": 2}", NULL},
         (const char *const[]){"{\"a\": 1, \"b\": null}", "{\"b\": null, \"a\": 1}", "{\"a\": \"1\"}", "3", NULL});
  /* branches that exclude each other (by type, by a constant tag, by ranges) compile as anyOf */
  expect(DI_GRAMMAR_JSON_SCHEMA, "{\"oneOf\":[{\"type\":\"string\"},{\"type\":\"integer\"},{\"type\":\"null\"}]}",
         (const char *const[]){"\"x\"", "7", "null", NULL}, (const char *const[]){"1.5", "true", NULL});
  expect(DI_GRAMMAR_JSON_SCHEMA,
         "{\"type\":\"object\",\"required\":[\"kind\"],\"oneOf\":[{\"properties\":{\"kind\":{\"const\":\"a\"},\"n\":"
         "{\"type\":\"integer\"}}},{\"$ref\":\"#/$defs/b\"}],\"$defs\":{\"b\":{\"properties\":{\"kind\":{\"enum\":[\"b\","
         "\"c\"]}}}}}",
         (const char *const[]){"{\"kind\": \"a\", \"n\": 1}", "{\"kind\": \"c\", \"n\": \"x\"}", NULL},
         (const char *const[]){"{\"kind\": \"a\", \"n\": \"x\"}", "{\"kind\": \"d\"}", "{\"n\": 1}", NULL});
  expect(DI_GRAMMAR_JSON_SCHEMA,
         "{\"oneOf\":[{\"type\":\"integer\",\"minimum\":-9,\"maximum\":0},{\"type\":\"integer\",\"minimum\":1,\"maximum\":99}]}",
         (const char *const[]){"0", "-3", "2", NULL}, (const char *const[]){"\"0\"", "0.5", NULL});
  /* overlapping branches: exclusivity cannot be enforced, so no grammar (never "accept both") */
  expect_error(DI_GRAMMAR_JSON_SCHEMA, "{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"number\"}]}",
               "'oneOf' whose branches 0 and 1 may both match");
  expect_error(DI_GRAMMAR_JSON_SCHEMA,
               "{\"type\":\"object\",\"required\":[\"content\"],\"oneOf\":[{\"properties\":{\"content\":{\"required\":"
               "[\"src\"]}}},{\"properties\":{\"content\":{\"required\":[\"img\"]}}}]}",
               "'oneOf' whose branches 0 and 1");
  /* two oneOfs combined by allOf keep their exclusivity */
  expect_error(DI_GRAMMAR_JSON_SCHEMA,
               "{\"allOf\":[{\"oneOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]},{\"oneOf\":[{\"type\":\"integer\"},"
               "{\"type\":\"number\"}]}]}",
               "'oneOf'");
  expect(DI_GRAMMAR_JSON_SCHEMA,
         "{\"allOf\":[{\"oneOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]},{\"oneOf\":[{\"type\":\"integer\"},"
         "{\"type\":\"array\"}]}]}",
         (const char *const[]){"3", NULL}, (const char *const[]){"\"s\"", "[]", NULL});
  /* integer ranges open on one side (once exponential in the digit count) */
  expect(DI_GRAMMAR_JSON_SCHEMA, "{\"type\":\"integer\",\"minimum\":0}",
         (const char *const[]){"0", "5", "99999999999999999999", NULL}, (const char *const[]){"-1", "05", NULL});
  expect(DI_GRAMMAR_JSON_SCHEMA, "{\"type\":\"integer\",\"maximum\":-6}",
         (const char *const[]){"-6", "-123456789012", NULL}, (const char *const[]){"-5", "0", "7", NULL});
  /* number bounds with integer values, inclusive and exclusive, both signs (no exponents) */
  expect(DI_GRAMMAR_JSON_SCHEMA, "{\"type\":\"number\",\"minimum\":-2,\"exclusiveMaximum\":3}",
         (const char *const[]){"0", "-0.0", "-2", "-2.0", "-1.5", "2.999", "0.5", NULL},
         (const char *const[]){"-2.01", "3", "3.0", "4.5", "1e-05", "00", NULL});
  expect(DI_GRAMMAR_JSON_SCHEMA, "{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":1}",
         (const char *const[]){"0.5", "1", "1.000", "0.001", NULL}, (const char *const[]){"0", "0.0", "-0.5", "1.01", NULL});
  expect(DI_GRAMMAR_JSON_SCHEMA, "{\"type\":\"number\",\"minimum\":0,\"exclusiveMinimum\":true,\"maximum\":5}",
         (const char *const[]){"0.1", "5", NULL}, (const char *const[]){"0", "5.5", NULL});
  expect_error(DI_GRAMMAR_JSON_SCHEMA, "{\"type\":\"number\",\"maximum\":0.5}", "not an integer");
  /* RFC 3986 references and RFC 6570 templates */
  expect(DI_GRAMMAR_JSON_SCHEMA, "{\"type\":\"string\",\"format\":\"uri-reference\"}",
         (const char *const[]){"\"Core\"", "\"../a/b?c#d\"", "\"http://x.org:80/%2F\"", "\"a:b\"", "\"\"", NULL},
         (const char *const[]){"\"://\"", "\"1a:b\"", "\"%zz\"", "\"a b\"", NULL});
  expect(DI_GRAMMAR_JSON_SCHEMA, "{\"type\":\"string\",\"format\":\"uri\"}",
         (const char *const[]){"\"http://[::1]/x\"", "\"urn:isbn:0451450523\"", NULL},
         (const char *const[]){"\"/x\"", "\"http://a b\"", NULL});
  expect(DI_GRAMMAR_JSON_SCHEMA, "{\"type\":\"string\",\"format\":\"uri-template\"}",
         (const char *const[]){"\"http://x/{id}\"", "\"/{+path}/x{?q,r*}{a:10}\"", NULL},
         (const char *const[]){"\"http://x/{\"", "\"{}\"", "\"{a:0}\"", NULL});
  expect(DI_GRAMMAR_JSON_SCHEMA, rec,
         (const char *const[]){"{\"v\": 1.5e-05, \"next\": {\"v\": -2, \"next\": null}}", NULL},
         (const char *const[]){"{\"v\": 1, \"next\": {\"v\": 2}}", "{\"v\": 1.}", NULL});
  expect(DI_GRAMMAR_JSON_SCHEMA, "{\"type\":\"string\",\"pattern\":\"^a+$\"}", (const char *const[]){"\"aa\"", NULL},
         (const char *const[]){"\"ab\"", "\"\"", NULL});
  expect(DI_GRAMMAR_JSON_SCHEMA, "{\"type\":\"string\",\"format\":\"date\"}", (const char *const[]){"\"2024-02-29\"", NULL},
         (const char *const[]){"\"2024-13-01\"", NULL});
  expect(DI_GRAMMAR_JSON_SCHEMA, "{\"properties\":{\"a\":{\"const\":1}}}",
         (const char *const[]){"{\"a\": 1}", "{\"b\": [1, {}]}", "{}", "\"s\"", "3", NULL},
         (const char *const[]){"{\"a\": 2}", "{\"b\": 1, \"a\": 1}", NULL});
  expect(DI_GRAMMAR_JSON_SCHEMA, "{\"type\":\"string\"}", (const char *const[]){"\"a\\\"\\n\\u001f\\\\\"", NULL},
         (const char *const[]){"\"a\nb\"", "\"\\u0041\"", NULL});
  expect_error(DI_GRAMMAR_JSON_SCHEMA, "{\"$ref\":\"#/nowhere\"}", "nowhere");
  expect_error(DI_GRAMMAR_JSON_SCHEMA, "{\"type\":\"array\",\"uniqueItems\":true}", "uniqueItems");
  expect_error(DI_GRAMMAR_JSON_SCHEMA, "{\"$ref\":\"#\"}", "no string");
  expect_error(DI_GRAMMAR_JSON_SCHEMA, "{\"type\":\"object\",\"required\":[\"a\"],\"additionalProperties\":false}", "no string");
  /* keywords combined as languages (automaton products): pattern with length bounds and formats */
  expect(DI_GRAMMAR_JSON_SCHEMA, "{\"type\":\"string\",\"pattern\":\"^[a-z\u00e9]+$\",\"minLength\":2,\"maxLength\":3}",
         (const char *const[]){"\"ab\"", "\"\u00e9\u00e9\u00e9\"", NULL},
         (const char *const[]){"\"a\"", "\"abcd\"", "\"aB\"", "\"\u00e9\u00e9\u00e9\u00e9\"", NULL});
  expect(DI_GRAMMAR_JSON_SCHEMA, "{\"type\":\"string\",\"pattern\":\"b\",\"maxLength\":3}",
         (const char *const[]){"\"b\"", "\"\\\"b\\n\"", NULL}, (const char *const[]){"\"aaa\"", "\"abcd\"", NULL});
  expect(DI_GRAMMAR_JSON_SCHEMA, "{\"type\":\"string\",\"format\":\"date\",\"pattern\":\"^2024\"}",
         (const char *const[]){"\"2024-01-02\"", NULL}, (const char *const[]){"\"2023-01-02\"", "\"2024-1-02\"", NULL});
  expect_error(DI_GRAMMAR_JSON_SCHEMA, "{\"type\":\"string\",\"pattern\":\"^a+$\",\"maxLength\":0}", "no string");
  expect_error(DI_GRAMMAR_JSON_SCHEMA, "{\"type\":\"string\",\"pattern\":\"a\",\"maxLength\":100000}", "too large");
  /* patternProperties with additionalProperties: a key in each region of the patterns it matches */
  expect(DI_GRAMMAR_JSON_SCHEMA, "{\"type\":\"object\",\"patternProperties\":{\"^x-\":{\"type\":\"integer\"}}}",
         (const char *const[]){"{}", "{\"x-a\": 1}", "{\"y\": \"s\", \"x-b\": 2}", NULL},
         (const char *const[]){"{\"x-a\": \"s\"}", "{\"y\": 1, \"x-\": true}", NULL});
  expect(DI_GRAMMAR_JSON_SCHEMA,
         "{\"properties\":{\"foo\":{\"type\":\"array\",\"maxItems\":3},\"bar\":{\"type\":\"array\"}},"
         "\"patternProperties\":{\"f.o\":{\"minItems\":2}},\"additionalProperties\":{\"type\":\"integer\"}}",
         (const char *const[]){"{\"foo\": [1, 2]}", "{\"fxo\": [1, 2]}", "{\"bar\": []}", "{\"quux\": 3}", NULL},
         (const char *const[]){"{\"foo\": [1]}", "{\"foo\": [1, 2, 3, 4]}", "{\"fxo\": [1]}", "{\"quux\": \"x\"}", NULL});
  /* a key matching both patterns must satisfy both */
  expect(DI_GRAMMAR_JSON_SCHEMA, "{\"patternProperties\":{\"a*\":{\"type\":\"integer\"},\"aaa*\":{\"maximum\":20}}}",
         (const char *const[]){"{\"a\": 1}", "{\"aaaa\": 18}", NULL},
         (const char *const[]){"{\"aaaa\": 31}", "{\"aaa\": \"foo\"}", "{\"b\": \"x\"}", NULL});
  /* a required name only a pattern covers takes that pattern's schema */
  expect(DI_GRAMMAR_JSON_SCHEMA,
         "{\"properties\":{\"a\":{\"type\":\"string\"}},\"required\":[\"a\",\"x-b\"],"
         "\"patternProperties\":{\"^x-\":{\"type\":\"integer\"}},\"additionalProperties\":false}",
         (const char *const[]){"{\"a\": \"s\", \"x-b\": 1}", "{\"a\": \"s\", \"x-b\": 1, \"x-c\": 2}", NULL},
         (const char *const[]){"{\"a\": \"s\", \"x-b\": \"1\"}", "{\"a\": \"s\", \"x-b\": 1, \"c\": 2}", "{\"a\": \"s\"}", NULL});
  /* propertyNames as a string language */
  expect(DI_GRAMMAR_JSON_SCHEMA,
         "{\"type\":\"object\",\"properties\":{\"Bad\":{},\"ok\":{}},\"propertyNames\":{\"pattern\":\"^[a-z]+$\",\"maxLength\":2}}",
         (const char *const[]){"{}", "{\"ok\": 1}", "{\"zz\": \"q\"}", NULL},
         (const char *const[]){"{\"Bad\": 1}", "{\"zzz\": 1}", "{\"A\": 1}", NULL});
  expect_error(DI_GRAMMAR_JSON_SCHEMA, "{\"propertyNames\":{\"enum\":[\"a\"],\"maxLength\":3}}", "propertyNames");
  /* enum / const keep only the values the rest of the schema admits (checked value by value) */
  expect(DI_GRAMMAR_JSON_SCHEMA, "{\"enum\":[1,5,\"abc\",\"z\"],\"minimum\":3,\"maxLength\":2}",
         (const char *const[]){"5", "\"z\"", NULL}, (const char *const[]){"1", "\"abc\"", NULL});
  expect(DI_GRAMMAR_JSON_SCHEMA, "{\"allOf\":[{\"enum\":[{\"a\":1},{\"a\":\"x\"}]},{\"properties\":{\"a\":{\"type\":\"integer\"}}}]}",
         (const char *const[]){"{\"a\": 1}", NULL}, (const char *const[]){"{\"a\": \"x\"}", NULL});
  expect(DI_GRAMMAR_JSON_SCHEMA,
         "{\"allOf\":[{\"enum\":[[1,2],[1,1.0],\"ab\",\"b\"]},{\"not\":{\"anyOf\":[{\"type\":\"array\",\"uniqueItems\":true},"
         "{\"type\":\"string\",\"pattern\":\"^a\"}]}}]}",
         (const char *const[]){"[1, 1.0]", "\"b\"", NULL}, (const char *const[]){"[1, 2]", "\"ab\"", NULL});
  expect(DI_GRAMMAR_JSON_SCHEMA, "{\"const\":{\"b\":[true]},\"not\":{\"not\":{\"required\":[\"b\"],\"additionalProperties\":{\"type\":\"array\"}}}}",
         (const char *const[]){"{\"b\": [true]}", NULL}, (const char *const[]){"{}", NULL});
  expect_error(DI_GRAMMAR_JSON_SCHEMA, "{\"const\":1,\"enum\":[2]}", "no string");
  expect_error(DI_GRAMMAR_JSON_SCHEMA, "{\"enum\":[\"a@b.c\"],\"format\":\"email\"}", "format");
  expect_error(DI_GRAMMAR_JSON_SCHEMA, "{\"enum\":[0.3],\"multipleOf\":0.1}", "multipleOf");
  /* allOf of two nots: neither holds */
  expect(DI_GRAMMAR_JSON_SCHEMA, "{\"enum\":[1,\"s\",null],\"allOf\":[{\"not\":{\"type\":\"string\"}},{\"not\":{\"type\":\"integer\"}}]}",
         (const char *const[]){"null", NULL}, (const char *const[]){"1", "\"s\"", NULL});
  expect(DI_GRAMMAR_JSON_SCHEMA, "{\"type\":\"object\",\"properties\":{\"a\":{}},\"minProperties\":1}",
         (const char *const[]){"{\"a\": 1}", "{\"b\": 2}", "{\"a\": 1, \"b\": 2}", NULL}, (const char *const[]){"{}", NULL});
  expect(DI_GRAMMAR_JSON_SCHEMA, "{\"properties\":{\"a\":{}},\"additionalProperties\":false,\"minProperties\":1}",
         (const char *const[]){"{\"a\": 1}", "3", NULL}, (const char *const[]){"{}", "{\"b\": 2}", NULL});
  /* oneOf of an enum and a schema none of its values satisfies: exclusive, so anyOf */
  expect(DI_GRAMMAR_JSON_SCHEMA, "{\"oneOf\":[{\"enum\":[\"blue\",6]},{\"type\":\"string\",\"pattern\":\"^x\"}]}",
         (const char *const[]){"\"blue\"", "6", "\"xa\"", NULL}, (const char *const[]){"\"red\"", "7", NULL});
  expect_error(DI_GRAMMAR_JSON_SCHEMA, "{\"oneOf\":[{\"enum\":[\"xblue\",6]},{\"type\":\"string\",\"pattern\":\"^x\"}]}", "oneOf");
  /* not required: an object without at least one of the names */
  expect(DI_GRAMMAR_JSON_SCHEMA,
         "{\"properties\":{\"cmd\":{\"type\":\"string\"},\"args\":{}},\"not\":{\"allOf\":[{\"required\":[\"cmd\"]},{\"required\":[\"args\"]}]}}",
         (const char *const[]){"{}", "{\"cmd\": \"x\"}", "{\"args\": 1, \"z\": 2}", NULL},
         (const char *const[]){"{\"cmd\": \"x\", \"args\": 1}", "3", "\"s\"", "{\"cmd\": 1}", NULL});
  /* member counts */
  expect(DI_GRAMMAR_JSON_SCHEMA, "{\"type\":\"object\",\"properties\":{\"a\":{},\"b\":{}},\"required\":[\"a\"],\"minProperties\":2,\"maxProperties\":3}",
         (const char *const[]){"{\"a\": 1, \"b\": 2}", "{\"a\": 1, \"x\": 2}", "{\"a\": 1, \"b\": 2, \"x\": 3}", NULL},
         (const char *const[]){"{\"a\": 1}", "{\"a\": 1, \"b\": 2, \"x\": 3, \"y\": 4}", "{\"b\": 2, \"x\": 3}", NULL});
  expect(DI_GRAMMAR_JSON_SCHEMA, "{\"properties\":{\"a\":{},\"b\":{},\"c\":{}},\"additionalProperties\":false,\"maxProperties\":1}",
         (const char *const[]){"{}", "{\"b\": 1}", NULL}, (const char *const[]){"{\"a\": 1, \"c\": 2}", "{\"x\": 1}", NULL});
  expect(DI_GRAMMAR_JSON_SCHEMA, "{\"type\":\"object\",\"minProperties\":3}",
         (const char *const[]){"{\"a\": 1, \"b\": 2, \"c\": 3}", "{\"a\": 1, \"b\": 2, \"c\": 3, \"d\": 4}", NULL},
         (const char *const[]){"{}", "{\"a\": 1, \"b\": 2}", NULL});
  expect_error(DI_GRAMMAR_JSON_SCHEMA, "{\"type\":\"object\",\"minProperties\":65}", "minProperties");
  expect(DI_GRAMMAR_JSON_SCHEMA, "{\"type\":[\"null\",\"array\"],\"maxItems\":0,\"items\":{\"type\":\"string\"}}",
         (const char *const[]){"[]", "null", NULL}, (const char *const[]){"[\"a\"]", NULL});
  /* masks equal the matcher's own decisions, token by token */
  check_masks(obj, DI_GRAMMAR_JSON_SCHEMA, "{\"name\": \"bo\", \"age\": 150, \"tags\": [\"a\", \"b\"]}", 7);
  check_masks(rec, DI_GRAMMAR_JSON_SCHEMA, "{\"v\": 1.5, \"next\": {\"v\": -2, \"next\": null}}", 11);
  check_masks(NULL, DI_GRAMMAR_JSON_ANY, "{\"k\": [1, true, {\"x\": \"y z\"}], \"m\": null}", 13);
  /* string insides with multi-byte characters (whole subtrees accepted at once
   * from a state that loops on every character), keys past the declared
   * names, and a pattern that loops on some characters only */
  check_masks("{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"string\"}}}", DI_GRAMMAR_JSON_SCHEMA,
              "{\"n\": \"\u017c\u00f3\u0142w \U0001F422 \\\" \u4e2d\u6587\", \"\u00e9t\u00e9\": 1}", 3);
  check_masks("{\"type\":\"string\",\"pattern\":\"^[a-z\u00e9]*$\"}", DI_GRAMMAR_JSON_SCHEMA, "\"ab\u00e9cd\"", 5);
  check_masks("{\"patternProperties\":{\"^x-\":{\"type\":\"integer\"}},\"properties\":{\"xa\":{\"type\":\"string\",\"pattern\":\"^[a-z]+$\",\"maxLength\":4}}}",
              DI_GRAMMAR_JSON_SCHEMA, "{\"xa\": \"abcd\", \"x-y\": 12, \"z\": [true]}", 3);
  {
    /* caches of tokenizer-derived data (the grammar vocabulary, compiled
     * grammars) belong to the tokenizer, not to its address: one freed and
     * another allocated, likely at the same address, must get masks over
     * its own tokens */
    const char *re = "a+";
    di_status st = {0};
    di_grammar *g = compile(DI_GRAMMAR_REGEX, re, DI_JSON_WS_PYTHON, &st);
    CHECKF(g, "%s", st.msg);
    di_grammar_release(g);
    const uintptr_t was = (uintptr_t)tok;
    const uint64_t serial = di_tokenizer_serial(tok);
    di_tokenizer_free(tok);
    tok = di_test_tokenizer("qwen3");
    CHECK(tok && di_tokenizer_serial(tok) != serial);
    if (!tok) return di_test_finish("test_grammar");
    fprintf(stderr, "test_grammar: second tokenizer %s the first's address\n", (uintptr_t)tok == was ? "reuses" : "does not reuse");
    g = compile(DI_GRAMMAR_REGEX, re, DI_JSON_WS_PYTHON, &st);
    CHECKF(g, "%s", st.msg);
    if (g) {
      const int32_t n = di_tokenizer_n_vocab(tok);
      CHECK(di_grammar_n_vocab(g) == n);
      di_gmatcher *m = NULL;
      di_gmatcher_new(g, &m, &st);
      uint32_t *mask = calloc(di_grammar_mask_words(g), sizeof *mask);
      di_gmatcher_fill_mask(m, mask);
      int wrong = 0, allowed = 0;
      for (int32_t t = 0; t < n; t++) {
        size_t len = 0;
        const char *b = di_tokenizer_token_bytes(tok, t, &len);
        bool all_a = b && len > 0 && !di_tokenizer_is_special(tok, t);
        for (size_t i = 0; all_a && i < len; i++) all_a = b[i] == 'a';
        const bool bit = (mask[t / 32] >> (t % 32)) & 1;
        wrong += bit != all_a;
        allowed += bit;
      }
      CHECKF(!wrong && allowed > 0, "%d tokens decided wrongly (%d allowed)", wrong, allowed);
      free(mask);
      di_gmatcher_free(m);
      di_grammar_release(g);
    }
  }
  di_tokenizer_free(tok);
  return di_test_finish("test_grammar");
}
