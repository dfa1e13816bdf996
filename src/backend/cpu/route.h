/* MoE routing on the CPU (route.c). */
#ifndef DI_BACKEND_CPU_ROUTE_H
#define DI_BACKEND_CPU_ROUTE_H

#include <stdint.h>

#include "model/model.h"

/* As di_backend.moe_route (backend/backend.h). */
void di_cpu_moe_route(const di_hparams *hp, const float *logits, const float *sel_bias, int32_t *ids, float *w);

#endif
