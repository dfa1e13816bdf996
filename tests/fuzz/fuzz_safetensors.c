/* libFuzzer target: safetensors header parsing and bounds checks. */
#include <stdlib.h>
#include <string.h>

#include "model/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  di_st_file f = {0};
  f.path = strdup("fuzz.safetensors");
  f.base = malloc(size ? size : 1);
  memcpy(f.base, data, size);
  f.size = size;
  di_status st = {0};
  if (di_st_parse(&f, &st) == DI_OK) {
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < f.n_tensors; i++)
      if (f.tensors[i].nbytes) sink ^= ((const uint8_t *)f.tensors[i].data)[f.tensors[i].nbytes - 1];
    (void)sink;
  }
  uint8_t *base = f.base;
  f.base = NULL; /* di_st_close frees only what di_st_open allocated */
  di_st_close(&f);
  free(base);
  return 0;
}
