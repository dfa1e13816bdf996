#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/tp.h"
#include "deepinfer.h"

int di_cli_fail(const char *cmd, const char *fmt, ...) {
  fprintf(stderr, "deepinfer %s: ", cmd);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  return 2;
}

static const struct {
  const char *name;
  int (*fn)(int, char **);
  const char *help;
} commands[] = {
    {"chat", di_cmd_chat, "interactive conversation in the terminal"},
    {"run", di_cmd_run, "generate text or ids from a prompt"},
    {"serve", di_cmd_serve, "OpenAI/DeepSeek-compatible HTTP server"},
    {"batch", di_cmd_batch, "offline batch of OpenAI Batch API requests"},
    {"bench", di_cmd_bench, "prompt-processing and generation speed"},
    {"info", di_cmd_info, "architecture, hyperparameters, dtypes, memory"},
    {"tokenize", di_cmd_tokenize, "text on stdin -> JSON array of ids"},
    {"detokenize", di_cmd_detokenize, "JSON array of ids on stdin -> text"},
    {"template", di_cmd_template, "render a chat template"},
    {"grammar-bench", di_cmd_grammar_bench, "MaskBench: structured-output masks, pass counts, timings"},
    {"grammar-check", di_cmd_grammar_check, "which strings (JSON lines on stdin) a grammar matches"},
};

static void usage(FILE *f) {
  fprintf(f, "usage: deepinfer <command> [options]   (deepinfer <command> --help)\n\ncommands:\n");
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    fprintf(f, "  %-13s %s\n", commands[i].name, commands[i].help);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    usage(stdout);
    return 0;
  }
  if (!strcmp(argv[1], "--version")) {
    printf("deepinfer %s\n", DI_VERSION);
    return 0;
  }
  int code = 0;
  if (di_cli_tp_begin(&argc, argv, &code)) return code;
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (!strcmp(argv[1], commands[i].name)) {
      code = commands[i].fn(argc - 1, argv + 1);
      if (di_cli_tp_end() && code == 0) code = 1;
      return code;
    }
  fprintf(stderr, "deepinfer: unknown command '%s' (try deepinfer --help)\n", argv[1]);
  return 2;
}
