/* Structured output fields of a request body: response_format (json_object,
 * json_schema), the extension fields grammar (GBNF) and regex, and the JSON
 * whitespace mode, read into one grammar source; and its compilation into a
 * per-request matcher. A constraint that cannot be compiled is a 400 naming
 * the field, never a request answered unconstrained. */
#include <stdlib.h>
#include <string.h>

#include "server/oai.h"

static bool set_source(di_srv_constraint *c, di_grammar_kind kind, const char *param, const char *src, size_t len,
                       di_srv_err *e) {
  if (c->on)
    return di_srv_bad(e, param, "'%s' and '%s' cannot be used together: give one output constraint", c->param,
                      param);
  c->on = 1;
  c->kind = kind;
  snprintf(c->param, sizeof c->param, "%s", param);
  if (src) {
    c->src = malloc(len + 1);
    if (!c->src) return di_srv_fail(e, 500, "server_error", NULL, "out of memory");
    memcpy(c->src, src, len);
    c->src[len] = 0;
    c->len = len;
  }
  return true;
}

/* OpenAI's rule for the schema's name: 1-64 of a-z A-Z 0-9 _ -. */
static bool name_ok(const char *s) {
  size_t n = strlen(s);
  if (n < 1 || n > 64) return false;
  for (size_t i = 0; i < n; i++)
    if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') ||
          s[i] == '_' || s[i] == '-'))
      return false;
  return true;
}

static bool parse_json_schema(json_t *rf, di_srv_constraint *c, di_srv_err *e) {
  static const char *P = "response_format.json_schema";
  json_t *js = json_object_get(rf, "json_schema");
  if (!json_is_object(js)) return di_srv_bad(e, P, "'%s' must be an object with 'name' and 'schema'", P);
  const char *name = NULL, *desc = NULL;
  int strict = 0;
  if (!di_srv_get_str(js, "name", &name, e) || !di_srv_get_str(js, "description", &desc, e) ||
      !di_srv_get_bool(js, "strict", &strict, e)) {
    char key[sizeof e->param];
    memcpy(key, e->param, sizeof key);
    snprintf(e->param, sizeof e->param, "%s.%.40s", P, key);
    return false;
  }
  if (!name || !name_ok(name))
    return di_srv_bad(e, "response_format.json_schema.name",
                      "'response_format.json_schema.name' is required: 1 to 64 characters of a-z, A-Z, 0-9, _ and -");
  json_t *schema = json_object_get(js, "schema");
  /* strict or not, the schema is enforced: that is what the mask is for */
  if (!schema || json_is_null(schema)) return set_source(c, DI_GRAMMAR_JSON_ANY, "response_format", NULL, 0, e);
  if (!json_is_object(schema) && !json_is_boolean(schema))
    return di_srv_bad(e, "response_format.json_schema.schema", "'response_format.json_schema.schema' must be a JSON Schema object");
  char *text = json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY);
  if (!text) return di_srv_fail(e, 500, "server_error", NULL, "out of memory");
  bool ok = set_source(c, DI_GRAMMAR_JSON_SCHEMA, "response_format.json_schema.schema", text, strlen(text), e);
  free(text);
  return ok;
}

static bool parse_text_field(json_t *body, const char *key, di_grammar_kind kind, di_srv_constraint *c,
                             di_srv_err *e) {
  const char *s = NULL;
  if (!di_srv_get_str(body, key, &s, e)) return false;
  if (!s) return true;
  size_t n = json_string_length(json_object_get(body, key));
  if (!n) return di_srv_bad(e, key, "'%s' is empty", key);
  return set_source(c, kind, key, s, n, e);
}

bool di_srv_constraint_parse(json_t *body, di_srv_constraint *c, di_srv_err *e) {
  memset(c, 0, sizeof *c);
  c->opts.ws = DI_JSON_WS_FREE;
  const char *ws = NULL;
  if (!di_srv_get_str(body, "json_whitespace", &ws, e)) return false;
  if (ws) {
    if (!strcmp(ws, "free")) c->opts.ws = DI_JSON_WS_FREE;
    else if (!strcmp(ws, "compact")) c->opts.ws = DI_JSON_WS_COMPACT;
    else if (!strcmp(ws, "python")) c->opts.ws = DI_JSON_WS_PYTHON;
    else return di_srv_bad(e, "json_whitespace", "'json_whitespace' must be free, compact or python");
  }
  json_t *rf = json_object_get(body, "response_format");
  if (rf && !json_is_null(rf)) {
    const char *type = json_string_value(json_object_get(rf, "type"));
    if (!json_is_object(rf) || !type)
      return di_srv_bad(e, "response_format", "'response_format' must be an object with a 'type'");
    if (!strcmp(type, "json_object")) {
      if (!set_source(c, DI_GRAMMAR_JSON_ANY, "response_format", NULL, 0, e)) return false;
    } else if (!strcmp(type, "json_schema")) {
      if (!parse_json_schema(rf, c, e)) return false;
    } else if (strcmp(type, "text")) {
      return di_srv_bad(e, "response_format.type",
                        "unknown response_format type '%.40s' (text, json_object, json_schema)", type);
    }
  }
  if (!parse_text_field(body, "grammar", DI_GRAMMAR_GBNF, c, e) ||
      !parse_text_field(body, "regex", DI_GRAMMAR_REGEX, c, e)) {
    di_srv_constraint_free(c);
    return false;
  }
  return true;
}

void di_srv_constraint_free(di_srv_constraint *c) {
  free(c->src);
  c->src = NULL;
  c->on = 0;
}

bool di_srv_constraint_matcher(const di_srv_backend *be, const di_srv_constraint *c, di_gmatcher **out,
                               di_srv_err *e) {
  *out = NULL;
  if (!be->grammar || !be->submit_constrained)
    return di_srv_bad(e, c->param, "'%s': this server cannot constrain generation", c->param);
  di_grammar *g = NULL;
  di_status st = {0};
  di_code rc = be->grammar(be->ctx, c->kind, c->src, c->len, &c->opts, &g, &st);
  if (rc == DI_OK) rc = di_gmatcher_new(g, out, &st);
  di_grammar_release(g);
  if (rc == DI_OK) return true;
  if (rc == DI_ERR_NOMEM || rc == DI_ERR_INTERNAL)
    return di_srv_fail(e, 500, "server_error", NULL, "%s: %s", c->param, st.msg);
  return di_srv_bad(e, c->param, "%s: %s", c->param, st.msg);
}
