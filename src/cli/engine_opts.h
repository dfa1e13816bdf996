/* Engine options shared by the subcommands that run di_engine (batch,
 * bench --concurrency): one spelling everywhere (DESIGN.md section 6). */
#ifndef DI_CLI_ENGINE_OPTS_H
#define DI_CLI_ENGINE_OPTS_H

#include "deepinfer.h"

#define DI_CLI_ENGINE_OPTS_HELP                                                              \
  "  -m, --model PATH         GGUF file or Hugging Face directory (required)\n"              \
  "  -t, --threads N          threads (default: all cores)\n"                                \
  "      --ctx N              max positions per sequence (default: the model's)\n"           \
  "      --kv-type T          KV cache dtype: f16 (default), bf16, f32\n"                    \
  "      --kv-mem BYTES       KV block pool size, K/M/G suffixes (default: max-seqs full\n"  \
  "                           contexts, at most 1G)\n"                                       \
  "      --max-seqs N         sequences running at once\n"                                   \
  "      --max-batch-tokens N tokens per forward step (default 512)\n"                       \
  "      --block-size N       KV block size in tokens (default 16)\n"                        \
  "      --no-prefix-cache    disable automatic prefix caching\n"                          \
  DI_CLI_SWA_OPTS_HELP                                                                       \
  DI_CLI_SPEC_OPTS_HELP

#define DI_CLI_SWA_OPTS_HELP                                                                 \
  "      --swa-checkpoint C   sliding-window checkpoint every C tokens (multiple of the block\n" \
  "                           size, >= the window; default 4x window): a prefix hit replays\n" \
  "                           at most C tokens to rebuild evicted windows, exactly\n"        \
  "      --swa-full           full-size KV for sliding-window layers (the reference path)\n" \
  "      --no-replay          no checkpoints: a hit whose windows were evicted recomputes\n" \
  "      --swa-window N       force a sliding window of N tokens on every layer (testing)\n"

#define DI_CLI_SPEC_OPTS_HELP                                                                \
  "      --spec KIND          speculative decoding: off (default), ngram (prompt lookup),\n"  \
  "                           draft (a draft model); outputs are identical to off\n"        \
  "      --draft-model PATH   --spec draft: a smaller or lower-precision model with the\n"   \
  "                           target's vocabulary (its KV takes a share of --kv-mem)\n"     \
  "      --spec-k-max K       most draft tokens per sequence and step (1..32, default 8)\n"  \
  "      --spec-mode M        auto (default: tuned per request, backs off) or always\n"

/* The --spec options alone (for subcommands with their own engine options):
 * same contract as di_cli_engine_opt. */
int di_cli_spec_opt(const char *cmd, int argc, char **argv, int *i, di_engine_opts *o);

/* The sliding-window options alone (serve parses its own engine options). */
int di_cli_swa_opt(const char *cmd, int argc, char **argv, int *i, di_engine_opts *o);

/* If argv[*i] is an engine option, consumes it (and its value), updates o
 * and returns 1; returns 0 if it is not one; returns 2 after printing the
 * usage error for a bad value. */
int di_cli_engine_opt(const char *cmd, int argc, char **argv, int *i, di_engine_opts *o);

#endif
