/* Subcommands of the `deepinfer` binary. Each lives in its own file and
 * follows one contract: `--help` prints usage to stdout and returns 0; a usage
 * or runtime error prints one line "deepinfer <cmd>: message" on stderr and
 * returns 2. */
#ifndef DI_CLI_H
#define DI_CLI_H

#include "deepinfer.h"
#include "grammar/grammar.h"

int di_cmd_run(int argc, char **argv);
int di_cmd_serve(int argc, char **argv);
int di_cmd_batch(int argc, char **argv);
int di_cmd_bench(int argc, char **argv);
int di_cmd_info(int argc, char **argv);
int di_cmd_tokenize(int argc, char **argv);
int di_cmd_detokenize(int argc, char **argv);
int di_cmd_template(int argc, char **argv);
int di_cmd_grammar_bench(int argc, char **argv);
int di_cmd_grammar_check(int argc, char **argv);
int di_cmd_chat(int argc, char **argv);

/* Compiles --json-schema FILE / --grammar FILE / --regex RE (the one given)
 * for the engine's tokenizer, and a matcher for it when gm is not NULL;
 * on failure prints the error for <cmd> and returns 2. */
int di_cli_load_grammar(const char *cmd, di_engine *e, const char *schema_path, const char *gbnf_path,
                        const char *regex, const di_grammar_opts *gopts, di_grammar **grammar, di_gmatcher **gm);

/* Prints "deepinfer <cmd>: <msg>\n" to stderr and returns 2. */
int di_cli_fail(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
