/* The regex front end: the whole output matches the pattern. */
#include "grammar/internal.h"
#include "grammar/regex.h"

int32_t gfe_regex(gx *g, const char *src, size_t len, di_status *st) {
  int32_t rule = gx_rule_new(g, "root");
  int32_t e = rx_compile(g, src, len, false, rx_encode_utf8, NULL, st);
  if (e < 0) return -1;
  gx_rule_define(g, rule, e);
  return rule;
}
