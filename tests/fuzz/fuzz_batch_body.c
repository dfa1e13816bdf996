/* libFuzzer target: the request bodies that `deepinfer batch` lines carry,
 * through the parsers batch shares with the server (server/oai.h): model
 * check, chat validation (messages normalized in place, tool calls, tools),
 * sampling/stop/logit-bias fields, output constraints (response_format,
 * grammar, regex) and the context check. The first byte
 * picks chat or completions. Any body must parse or fail with an OpenAI
 * error that names a message; normalized messages must stay valid input to
 * a second parse (batch and the server both render what the first left). */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/oai.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  int chat = data[0] & 1;
  json_t *body = json_loadb((const char *)data + 1, size - 1, JSON_REJECT_DUPLICATES, NULL);
  if (!json_is_object(body)) {
    json_decref(body);
    return 0;
  }
  di_srv_err e = {0};
  bool ok = di_srv_model_ok(body, "m", &e);
  if (ok && chat) {
    di_srv_chat_req q;
    ok = di_srv_chat_parse(body, &q, &e);
    if (ok) {
      if (q.n < 1 || q.n > 128 || !json_is_array(q.messages)) abort();
      di_srv_chat_req again;
      di_srv_err e2 = {0};
      if (!di_srv_chat_parse(body, &again, &e2)) abort(); /* normalization is idempotent */
    }
  }
  di_srv_sampling sq = {0};
  di_request_params_default(&sq.params);
  if (ok) ok = di_srv_sampling_parse(body, 260, &sq, &e);
  if (ok) {
    int max_tokens = 0;
    ok = di_srv_context_fits(512, 16, sq.max_tokens, chat ? "messages" : "prompt", &max_tokens, &e);
    if (ok && (max_tokens < 1 || max_tokens > 512 - 16)) abort();
  }
  di_srv_constraint con = {0};
  if (ok) ok = di_srv_constraint_parse(body, &con, &e);
  if (ok && con.on && (!con.param[0] || (!con.src) != (con.kind == DI_GRAMMAR_JSON_ANY))) abort();
  di_srv_constraint_free(&con);
  if (!ok && (!e.msg[0] || e.status < 400 || e.status > 599)) abort();
  di_srv_sampling_free(&sq);
  json_decref(body);
  return 0;
}
