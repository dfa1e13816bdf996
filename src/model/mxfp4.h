/* MXFP4 weights: kept as stored where the backend runs them (quantized files),
 * else rewritten losslessly as Q8_0 (quantized files) or F32 (float files). */
#ifndef DI_MODEL_MXFP4_H
#define DI_MODEL_MXFP4_H

#include "model/model.h"

/* Every MXFP4 matrix of a GGUF-loaded model (layers, experts, MTP, embedding,
 * output) in place. A float file's become F32 (they then compute without
 * activation quantization, as the float checkpoint of the same weights does).
 * A quantized file's (one with other block-quantized tensors) stay MXFP4 when
 * keep_quantized, else become Q8_0 where every block's scale is an f16 power
 * of two, F32 otherwise. di_model_load calls it with keep_quantized true; a
 * backend without MXFP4 kernels calls it again with false. */
di_code di_model_convert_mxfp4(di_model *m, bool keep_quantized, di_status *st);

#endif
