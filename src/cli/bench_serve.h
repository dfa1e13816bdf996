/* Serving benchmark: `deepinfer bench --concurrency N ...` (the bench
 * subcommand dispatches here when --concurrency is given). */
#ifndef DI_CLI_BENCH_SERVE_H
#define DI_CLI_BENCH_SERVE_H

int di_cmd_bench_serve(int argc, char **argv);

#endif
