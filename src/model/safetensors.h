/* safetensors reader: 8-byte header length, a JSON header, then raw data.
 * Every entry's dtype, shape and offsets are validated against the file. */
#ifndef DI_MODEL_SAFETENSORS_H
#define DI_MODEL_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/gguf.h"
#include "util/status.h"

typedef struct di_st_tensor {
  char *name;
  di_dtype type; /* DI_F32, DI_F16, DI_BF16 */
  int n_dims;
  int64_t shape[4]; /* row-major, as in the file (shape[n_dims-1] fastest) */
  const void *data;
  size_t nbytes;
} di_st_tensor;

typedef struct di_st_file {
  char *path;
  uint8_t *base;
  size_t size;
  bool mapped;
  di_st_tensor *tensors;
  size_t n_tensors;
} di_st_file;

di_code di_st_open(const char *path, bool use_mmap, di_st_file *f, di_status *st);
/* Parses an image already in memory (fuzzing); f does not own it. */
di_code di_st_parse(di_st_file *f, di_status *st);
void di_st_close(di_st_file *f);

#endif
