/* The CPU backend's parts that are not kernels (backend_cpu.c: the op table;
 * prepare.c: prepare_weights). */
#ifndef DI_BACKEND_CPU_BACKEND_CPU_H
#define DI_BACKEND_CPU_BACKEND_CPU_H

#include "backend/backend.h"

/* MLA's kv_b as per-head matrices for absorption (layers and MTP), then, for
 * GGUF files, every packable matrix packed in place (matmul.h). */
di_code di_cpu_prepare_weights(di_model *m, bool mmapped, di_status *st);

#endif
