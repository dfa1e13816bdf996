/* MXFP4 weights rewritten at load as Q8_0 (quantized files) or F32 (float files), losslessly. */
#ifndef DI_MODEL_MXFP4_H
#define DI_MODEL_MXFP4_H

#include "model/model.h"

/* Every MXFP4 matrix of a GGUF-loaded model (layers, experts, MTP, embedding,
 * output) in place: Q8_0 when the file has other block-quantized tensors and
 * every block's scale is an f16 power of two, F32 otherwise. */
di_code di_model_convert_mxfp4(di_model *m, di_status *st);

#endif
