/* di_srv_backend over the real engine, tokenizer and chat recipe. Usage:
 * fill the table, start the server (answers 503 while loading), create the
 * engine, attach, di_server_set_model, then mark ready. */
#ifndef DI_SERVER_ENGINE_BACKEND_H
#define DI_SERVER_ENGINE_BACKEND_H

#include <stdatomic.h>

#include "server/server.h"

struct di_tokenizer;
struct di_chat_template;

typedef struct di_srv_engine {
  di_engine *e;
  const struct di_tokenizer *tok;
  struct di_chat_template *tmpl; /* NULL: the model has no (usable) chat template */
  const char *bos, *eos;
  int fim; /* index of the FIM marker set, -1 = none */
  const char *tool_format; /* the template's tool-call format (server/tools.h), NULL = unknown */
  atomic_int ready;
} di_srv_engine;

void di_srv_engine_backend(di_srv_engine *x, di_srv_backend *be);
di_code di_srv_engine_attach(di_srv_engine *x, di_engine *e, di_status *st);
void di_srv_engine_ready(di_srv_engine *x);
void di_srv_engine_detach(di_srv_engine *x);
/* Submits p with m (NULL: none) constraining its tokens; m must outlive the
 * request's final event. */
di_code di_srv_submit_matcher(di_engine *e, const di_request_params *p, di_gmatcher *m, uint64_t *id, char *err,
                              size_t errlen);

#endif
