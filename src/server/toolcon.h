/* The token-level tool-call constraint (see toolcon.c): forces or guards
 * calls in formats whose tags are special tokens (DeepSeek) and, for
 * tool_choice auto with strict tools, constrains a call only once the model
 * opens one (free text otherwise). */
#ifndef DI_SERVER_TOOLCON_H
#define DI_SERVER_TOOLCON_H

#include "server/tools.h"

typedef struct di_srv_toolcon di_srv_toolcon;

/* Whether tools and tool_choice c in format f need a toolcon: forced calls
 * in a format with token tags (DeepSeek), or auto with a strict tool. */
bool di_srv_toolcon_wanted(json_t *tools, const di_srv_tool_choice *c, const di_srv_toolfmt *f);
/* Builds one (per completion) with the backend's tokenizer and grammars;
 * think_open: the prompt left the model inside <think> (reasoning stays free
 * up to </think>). Errors name tool_choice or tools. */
bool di_srv_toolcon_new(const di_srv_backend *be, json_t *tools, const di_srv_tool_choice *c, const di_srv_toolfmt *f,
                        int think_open, di_srv_toolcon **out, di_srv_err *e);
void di_srv_toolcon_free(di_srv_toolcon *t);
/* As the engine's request constraint (di_srv_tokcon). */
void di_srv_toolcon_bind(di_srv_toolcon *t, di_srv_tokcon *c);

#endif
