/* MoE routing (graph/ffn_moe.c): one token's expert choice. */
#ifndef DI_GRAPH_MOE_H
#define DI_GRAPH_MOE_H

#include <stdint.h>

#include "model/model.h"

/* From the router's logits[n_expert] (and the noaux_tc selection bias, or
 * NULL): ids[n_expert_used] ascending and their weights w (normalized if
 * norm_topk_prob, times routed_scaling_factor). */
void di_moe_route(const di_hparams *hp, const float *logits, const float *sel_bias, int32_t *ids, float *w);

#endif
