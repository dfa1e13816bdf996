/* Hugging Face model directories: config.json + model.safetensors or a
 * sharded model.safetensors.index.json. */
#ifndef DI_MODEL_HF_H
#define DI_MODEL_HF_H

#include "model/model.h"

di_code di_hf_load(di_model *m, bool use_mmap, di_status *st);
void di_hf_close(di_model *m);

/* Shared with model.c */
float *di_model_alloc_f32(di_model *m, size_t n);
di_code di_model_to_f32(di_model *m, di_tensor *t, float offset, di_status *st);

#endif
