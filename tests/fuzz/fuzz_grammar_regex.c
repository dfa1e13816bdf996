/* libFuzzer target: the regex front end (ECMAScript syntax)
 * (the shared body is in fuzz_grammar_common.h). */
#include "fuzz_grammar_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  return fuzz_grammar(DI_GRAMMAR_REGEX, "abc-123 xyz", data, size);
}
