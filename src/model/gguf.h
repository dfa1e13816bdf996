/* GGUF v2/v3 reader. The file is validated completely at open (counts,
 * string lengths, tensor shapes, offsets inside the file) so later accessors
 * never read out of bounds. Split files (-00001-of-0000N.gguf) are opened as
 * one logical model. */
#ifndef DI_MODEL_GGUF_H
#define DI_MODEL_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/status.h"

typedef enum di_gguf_type {
  DI_GGUF_UINT8 = 0, DI_GGUF_INT8 = 1, DI_GGUF_UINT16 = 2, DI_GGUF_INT16 = 3,
  DI_GGUF_UINT32 = 4, DI_GGUF_INT32 = 5, DI_GGUF_FLOAT32 = 6, DI_GGUF_BOOL = 7,
  DI_GGUF_STRING = 8, DI_GGUF_ARRAY = 9, DI_GGUF_UINT64 = 10, DI_GGUF_INT64 = 11,
  DI_GGUF_FLOAT64 = 12,
} di_gguf_type;

typedef struct di_gguf_str {
  uint64_t len;
  const char *ptr; /* points into the file image; NOT NUL-terminated */
} di_gguf_str;

typedef struct di_gguf_kv {
  const char *key; /* NUL-terminated copy */
  di_gguf_type type;
  /* scalars */
  union {
    uint64_t u64;
    int64_t i64;
    double f64;
    bool b;
    di_gguf_str str;
  } v;
  /* arrays: element type, count, and the raw little-endian elements;
   * for string arrays `strs` holds the decoded entries. */
  di_gguf_type arr_type;
  uint64_t arr_n;
  const void *arr_data;
  di_gguf_str *strs;
} di_gguf_kv;

/* ggml tensor types, numbered as in ggml so files load unchanged. */
typedef enum di_dtype {
  DI_F32 = 0, DI_F16 = 1, DI_Q4_0 = 2, DI_Q4_1 = 3, DI_Q5_0 = 6, DI_Q5_1 = 7,
  DI_Q8_0 = 8, DI_Q8_1 = 9, DI_Q2_K = 10, DI_Q3_K = 11, DI_Q4_K = 12,
  DI_Q5_K = 13, DI_Q6_K = 14, DI_Q8_K = 15, DI_I8 = 24, DI_I16 = 25,
  DI_I32 = 26, DI_I64 = 27, DI_F64 = 28, DI_BF16 = 30,
  /* OCP MX FP4 (32 E2M1 codes and one E8M0 scale): read, then converted at load (model/mxfp4.c) */
  DI_MXFP4 = 39, DI_DTYPE_COUNT = 40,
} di_dtype;

typedef struct di_gguf_tensor {
  const char *name;
  di_dtype type;
  int n_dims;
  int64_t ne[4];      /* ggml order: ne[0] is the fastest-varying (row length) */
  uint64_t nbytes;
  const void *data;   /* inside the mapped/loaded image, aligned */
} di_gguf_tensor;

typedef struct di_gguf di_gguf;

/* Opens and validates `path`. If it is the first part of a split model
 * (name ends in -00001-of-0000N.gguf) the other parts are opened too and
 * their tensors merged. `use_mmap` false reads the file into aligned memory
 * (the fast, steady default on these machines). */
di_code di_gguf_open(const char *path, bool use_mmap, di_gguf **out, di_status *st);
/* Parses an in-memory image (used by the fuzzer); `data` must outlive g. */
di_code di_gguf_open_memory(const void *data, size_t size, const char *name, di_gguf **out,
                            di_status *st);
void di_gguf_close(di_gguf *g);

uint32_t di_gguf_version(const di_gguf *g);
const char *di_gguf_path(const di_gguf *g);
size_t di_gguf_n_kv(const di_gguf *g);
const di_gguf_kv *di_gguf_kv_at(const di_gguf *g, size_t i);
const di_gguf_kv *di_gguf_find(const di_gguf *g, const char *key);
size_t di_gguf_n_tensors(const di_gguf *g);
const di_gguf_tensor *di_gguf_tensor_at(const di_gguf *g, size_t i);
const di_gguf_tensor *di_gguf_find_tensor(const di_gguf *g, const char *name);

/* Typed getters. Return false (and leave *out unchanged) when the key is
 * absent; set *st and return false when it exists with an incompatible type. */
bool di_gguf_get_u64(const di_gguf *g, const char *key, uint64_t *out);
bool di_gguf_get_i64(const di_gguf *g, const char *key, int64_t *out);
bool di_gguf_get_f64(const di_gguf *g, const char *key, double *out);
bool di_gguf_get_bool(const di_gguf *g, const char *key, bool *out);
/* Returns a malloc'ed NUL-terminated copy, or NULL if absent/not a string. */
char *di_gguf_get_str(const di_gguf *g, const char *key);

/* dtype facts (block size in elements, bytes per block, name). */
int di_dtype_block(di_dtype t);
size_t di_dtype_block_bytes(di_dtype t);
const char *di_dtype_name(di_dtype t);
bool di_dtype_known(di_dtype t);
/* Bytes for a row of n elements (n must be a multiple of the block size). */
size_t di_dtype_row_bytes(di_dtype t, int64_t n);

#endif
