#include "cli/cli.h"

/* Placeholder until the owning issue lands: fails loudly, never pretends. */
int di_cmd_run(int argc, char **argv) {
  (void)argc;
  (void)argv;
  return di_cli_fail("run", "not implemented yet");
}
