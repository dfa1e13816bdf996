/* libFuzzer target: the GGUF parser must reject any byte string cleanly, and
 * whatever it accepts must be safe to walk (every tensor inside the image). */
#include <stddef.h>
#include <stdint.h>

#include "model/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  di_gguf *g = NULL;
  di_status st = {0};
  if (di_gguf_open_memory(data, size, "fuzz.gguf", &g, &st) == DI_OK) {
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < di_gguf_n_tensors(g); i++) {
      const di_gguf_tensor *t = di_gguf_tensor_at(g, i);
      if (t->nbytes) sink ^= ((const uint8_t *)t->data)[t->nbytes - 1];
    }
    for (size_t i = 0; i < di_gguf_n_kv(g); i++) {
      const di_gguf_kv *kv = di_gguf_kv_at(g, i);
      if (kv->type == DI_GGUF_ARRAY && kv->arr_type == DI_GGUF_STRING)
        for (uint64_t j = 0; j < kv->arr_n; j++)
          if (kv->strs[j].len) sink ^= (uint8_t)kv->strs[j].ptr[kv->strs[j].len - 1];
    }
    (void)sink;
    di_gguf_close(g);
  }
  return 0;
}
