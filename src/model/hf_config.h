/* config.json (transformers 4.x and 5.x spellings) → hyperparameters. */
#ifndef DI_MODEL_HF_CONFIG_H
#define DI_MODEL_HF_CONFIG_H

#include <jansson.h>

#include "model/model.h"

/* Fills hp from a parsed config.json; path names the model directory in
 * errors. A key that would change the computation and is not implemented is
 * an error naming it. norm_offset: what to add to RMSNorm weights. */
di_code di_hf_read_config(di_hparams *hp, json_t *cfg, const char *path, float *norm_offset, di_status *st);

#endif
