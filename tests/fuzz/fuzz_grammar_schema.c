/* libFuzzer target: the JSON Schema front end
 * (the shared body is in fuzz_grammar_common.h). */
#include "fuzz_grammar_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  return fuzz_grammar(DI_GRAMMAR_JSON_SCHEMA, "{\"a\": [1, \"x\"]}", data, size);
}
