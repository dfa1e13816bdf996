/* Subcommands of the `deepinfer` binary. Each lives in its own file and
 * follows one contract: `--help` prints usage to stdout and returns 0; a usage
 * or runtime error prints one line "deepinfer <cmd>: message" on stderr and
 * returns 2. */
#ifndef DI_CLI_H
#define DI_CLI_H

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

/* Prints "deepinfer <cmd>: <msg>\n" to stderr and returns 2. */
int di_cli_fail(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
