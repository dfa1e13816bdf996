/* libFuzzer target: config.json reading (src/model/hf_config.c) must turn any
 * JSON into hyperparameters or a clean error, never crash or leak. */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "model/hf_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  json_t *cfg = json_loadb((const char *)data, size, 0, NULL);
  if (!cfg) return 0;
  di_hparams hp = {0};
  di_status st = {0};
  float norm_offset = 0;
  di_hf_read_config(&hp, cfg, "fuzz", &norm_offset, &st);
  json_decref(cfg);
  return 0;
}
