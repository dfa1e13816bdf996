/* The model behind an engine created by di_engine_create, for front ends that
 * report on it (bench: weight bytes, parameter counts). */
#ifndef DI_ENGINE_ENGINE_MODEL_H
#define DI_ENGINE_ENGINE_MODEL_H

#include "deepinfer.h"
#include "model/model.h"

/* NULL for an engine over another backend (the tests' fake model). */
const di_model *di_engine_model(const di_engine *e);

#endif
