/* DeepSeek-V4 ("deepseek4") hyperparameters from the keys llama.cpp's converter writes. */
#ifndef DI_MODEL_GGUF_V4_H
#define DI_MODEL_GGUF_V4_H

#include "model/model.h"

/* After the generic GGUF keys (sizes, key_length, rope.*) are read into m->hp:
 * the V4 keys (q_lora_rank, experts, compress_ratios, hyper connections,
 * indexer, output groups, swiglu clamps, hash layers), each checked by name. */
di_code di_gguf_v4_hparams(di_model *m, const char *arch, di_status *st);

#endif
