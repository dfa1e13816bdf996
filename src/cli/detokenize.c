#include "cli/cli.h"

/* Placeholder until the owning issue lands: fails loudly, never pretends. */
int di_cmd_detokenize(int argc, char **argv) {
  (void)argc;
  (void)argv;
  return di_cli_fail("detokenize", "not implemented yet");
}
