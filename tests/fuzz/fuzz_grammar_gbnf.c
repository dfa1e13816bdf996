/* libFuzzer target: the GBNF front end
 * (the shared body is in fuzz_grammar_common.h). */
#include "fuzz_grammar_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  return fuzz_grammar(DI_GRAMMAR_GBNF, "(a (b c) 12)", data, size);
}
