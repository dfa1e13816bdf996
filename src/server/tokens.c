/* Token strings for logprobs. A token may hold part of a UTF-8 character;
 * JSON strings must be valid UTF-8, so "token" gets U+FFFD where bytes are
 * incomplete and "bytes" carries the exact bytes (as OpenAI does). */
#include <math.h>
#include <string.h>

#include "server/internal.h"

static int token_raw(di_server *s, int32_t id, char *buf, size_t cap) {
  int n = s->be.token_bytes ? s->be.token_bytes(s->be.ctx, id, buf, cap) : -1;
  return n < 0 ? 0 : n > (int)cap ? (int)cap : n;
}

json_t *di_srv_token_str(di_server *s, int32_t id) {
  char raw[256];
  int n = token_raw(s, id, raw, sizeof raw);
  di_srv_buf b = {0};
  size_t i = 0;
  while (i < (size_t)n) {
    size_t bad = di_srv_utf8_invalid_at(raw + i, (size_t)n - i);
    if (bad == (size_t)-1) {
      di_srv_buf_put(&b, raw + i, (size_t)n - i);
      break;
    }
    di_srv_buf_put(&b, raw + i, bad);
    di_srv_buf_puts(&b, "\xEF\xBF\xBD");
    i += bad + 1;
  }
  json_t *j = json_stringn(b.p ? b.p : "", b.len);
  di_srv_buf_free(&b);
  return j ? j : json_string("");
}

static json_t *lp_num(float lp) { return json_real(isfinite(lp) ? (double)lp : -9999.0); }

json_t *di_srv_token_json(di_server *s, int32_t id, float logprob) {
  char raw[256];
  int n = token_raw(s, id, raw, sizeof raw);
  json_t *bytes = json_array();
  for (int i = 0; i < n; i++) json_array_append_new(bytes, json_integer((unsigned char)raw[i]));
  return json_pack("{s:o,s:o,s:o}", "token", di_srv_token_str(s, id), "logprob", lp_num(logprob),
                   "bytes", bytes);
}
