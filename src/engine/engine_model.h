/* The model behind an engine created by di_engine_create, for front ends that
 * report on it (bench: weight bytes, parameter counts). */
#ifndef DI_ENGINE_ENGINE_MODEL_H
#define DI_ENGINE_ENGINE_MODEL_H

#include "deepinfer.h"
#include "model/model.h"

/* NULL for an engine over another backend (the tests' fake model). */
const di_model *di_engine_model(const di_engine *e);

/* Loads (and frees) a model's weights the way the engine does, ready for
 * di_forward_ctx_create: also for the --tp follower ranks (cli/tp.c), which
 * run the same forward without an engine. tp: the model a tensor-parallel job
 * splits (the main one), of which this rank keeps its part when the job has
 * several ranks (di_model_tp_slice). */
di_code di_engine_load_weights(const char *path, bool use_mmap, bool tp, di_model **out, di_status *st);
void di_engine_free_weights(di_model *m);

#endif
