/* `deepinfer serve`: the OpenAI/DeepSeek-compatible HTTP server. The socket
 * is bound first so /health can answer 503 while the model loads. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/engine_opts.h"
#include "dist/comm.h"
#include "server/engine_backend.h"
#include "server/server.h"

static const char USAGE[] =
    "usage: deepinfer serve -m MODEL [options]\n"
    "\n"
    "OpenAI- and DeepSeek-compatible HTTP server: /v1/chat/completions, /v1/completions,\n"
    "/v1/models, /health, /metrics, /tokenize, /detokenize.\n"
    "\n"
    "server options:\n"
    "  --host ADDR              address to bind (default 127.0.0.1; 0.0.0.0 exposes the server)\n"
    "  --port N                 TCP port (default 8080; 0 = any free port, printed at start)\n"
    "  --api-key KEY            require 'Authorization: Bearer KEY' on /v1/* and /tokenize\n"
    "  --api-key-file F         read the key from the first line of F\n"
    "  --served-model-name NAME model id clients send and /v1/models lists\n"
    "                           (default: the model file name without extension)\n"
    "  --max-queue N            sequences (prompts x n) admitted beyond --max-seqs before 429 (default 256)\n"
    "  --max-body BYTES         largest request body; larger get 413 (default 4194304)\n"
    "  --request-timeout S      idle-connection timeout and deadline for receiving a body (default 60)\n"
    "  --max-connections N      simultaneous connections (default 1024)\n"
    "  --max-connections-per-ip N  simultaneous connections from one address (default 0 = no limit)\n"
    "  --header-timeout S       deadline for a request's headers to arrive complete (default 10)\n"
    "  --stream-buffer BYTES    unsent output a stream may hold; past it the request is paused (its\n"
    "                           KV freed) until the client reads half of it (default 1M)\n"
    "  --stream-stall-timeout S a stream paused that long is cancelled as stalled (default 30)\n"
    "  --drain-timeout S        on SIGTERM/SIGINT, time open requests get to finish before they\n"
    "                           are cancelled (default 30; a second signal exits at once)\n"
    "  --quiet                  no per-request log lines\n"
    "\n"
    "engine options:\n"
    "  -m, --model PATH         GGUF file or Hugging Face model directory (required)\n"
    "  --threads N              compute threads (default: all cores)\n"
    "  --ctx N                  positions per sequence (default: the model's training context)\n"
    "  --kv-type f16|bf16|f32   KV cache dtype (default f16)\n"
    "  --kv-mem BYTES           KV block pool size; K/M/G suffixes (default: sized for --max-seqs)\n"
    "  --max-seqs N             sequences running at once (default 16)\n"
    "  --max-batch-tokens N     tokens per step (default 512)\n"
    "  --seed N                 base of the seeds given to requests that set none\n" DI_CLI_SWA_OPTS_HELP
    DI_CLI_SPEC_OPTS_HELP;

static int parse_int(const char *s, long long lo, long long hi, long long *out) {
  char *end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (!*s || *end || errno || v < lo || v > hi) return 0;
  *out = v;
  return 1;
}

static int parse_bytes(const char *s, size_t *out) {
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (!*s || *s == '-' || errno || end == s) return 0;
  unsigned long long mul = 1;
  if (*end == 'k' || *end == 'K') mul = 1ull << 10, end++;
  else if (*end == 'm' || *end == 'M') mul = 1ull << 20, end++;
  else if (*end == 'g' || *end == 'G') mul = 1ull << 30, end++;
  if (*end == 'i' && mul > 1) end++;
  if (*end == 'B' || *end == 'b') end++;
  if (*end || v > (~0ull) / mul) return 0;
  *out = (size_t)(v * mul);
  return 1;
}

static char *read_key_file(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return NULL;
  char buf[4096];
  char *line = fgets(buf, sizeof buf, f);
  fclose(f);
  if (!line) return NULL;
  buf[strcspn(buf, "\r\n")] = 0;
  return buf[0] ? strdup(buf) : NULL;
}

/* "path/to/SmolLM2-135M-Instruct.Q8_0.gguf" -> "SmolLM2-135M-Instruct.Q8_0"; a directory keeps its name. */
static char *default_name(const char *path) {
  size_t n = strlen(path);
  while (n > 1 && path[n - 1] == '/') n--;
  size_t b = n;
  while (b && path[b - 1] != '/') b--;
  char *name = strndup(path + b, n - b);
  if (!name) return NULL;
  size_t l = strlen(name);
  if (l > 5 && !strcmp(name + l - 5, ".gguf")) name[l - 5] = 0;
  return name;
}

int di_cmd_serve(int argc, char **argv) {
  di_server_opts so;
  di_server_opts_default(&so);
  di_engine_opts eo;
  di_engine_opts_default(&eo);
  const char *key_file = NULL, *name = NULL;
  long long seed = -1;
  int drain_s = 30;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      fputs(USAGE, stdout);
      return 0;
    }
    if (!strcmp(a, "--quiet")) {
      so.quiet = 1;
      continue;
    }
    int sp = di_cli_spec_opt("serve", argc, argv, &i, &eo);
    if (!sp) sp = di_cli_swa_opt("serve", argc, argv, &i, &eo);
    if (sp == 2) return 2;
    if (sp == 1) continue;
    if (i + 1 >= argc) return di_cli_fail("serve", "option %s needs a value (see --help)", a);
    const char *v = argv[++i];
    long long x = 0;
    size_t bytes = 0;
    if (!strcmp(a, "-m") || !strcmp(a, "--model")) eo.model_path = v;
    else if (!strcmp(a, "--host")) so.host = v;
    else if (!strcmp(a, "--port")) {
      if (!parse_int(v, 0, 65535, &x)) return di_cli_fail("serve", "--port must be 0..65535, got '%s'", v);
      so.port = (int)x;
    } else if (!strcmp(a, "--api-key")) {
      if (!*v) return di_cli_fail("serve", "--api-key is empty; give a key, or omit the option to run without one");
      so.api_key = v;
    }
    else if (!strcmp(a, "--api-key-file")) key_file = v;
    else if (!strcmp(a, "--served-model-name")) name = v;
    else if (!strcmp(a, "--max-queue")) {
      if (!parse_int(v, 0, 1 << 20, &x)) return di_cli_fail("serve", "--max-queue must be 0..1048576, got '%s'", v);
      so.max_queue = (int)x;
    } else if (!strcmp(a, "--max-body")) {
      if (!parse_bytes(v, &bytes) || bytes < 1024) return di_cli_fail("serve", "--max-body must be at least 1024 bytes, got '%s'", v);
      so.max_body = bytes;
    } else if (!strcmp(a, "--request-timeout")) {
      if (!parse_int(v, 1, 86400, &x)) return di_cli_fail("serve", "--request-timeout must be 1..86400 seconds, got '%s'", v);
      so.request_timeout = (int)x;
    } else if (!strcmp(a, "--max-connections")) {
      if (!parse_int(v, 1, 100000, &x)) return di_cli_fail("serve", "--max-connections must be 1..100000, got '%s'", v);
      so.max_connections = (int)x;
    } else if (!strcmp(a, "--max-connections-per-ip")) {
      if (!parse_int(v, 0, 100000, &x)) return di_cli_fail("serve", "--max-connections-per-ip must be 0..100000, got '%s'", v);
      so.max_connections_per_ip = (int)x;
    } else if (!strcmp(a, "--header-timeout")) {
      if (!parse_int(v, 1, 86400, &x)) return di_cli_fail("serve", "--header-timeout must be 1..86400 seconds, got '%s'", v);
      so.header_timeout = (int)x;
    } else if (!strcmp(a, "--stream-buffer")) {
      if (!parse_bytes(v, &bytes) || bytes < 1024) return di_cli_fail("serve", "--stream-buffer must be at least 1024 bytes, got '%s'", v);
      so.stream_buffer = bytes;
    } else if (!strcmp(a, "--stream-stall-timeout")) {
      if (!parse_int(v, 1, 86400, &x)) return di_cli_fail("serve", "--stream-stall-timeout must be 1..86400 seconds, got '%s'", v);
      so.stream_stall_timeout = (double)x;
    } else if (!strcmp(a, "--drain-timeout")) {
      if (!parse_int(v, 0, 86400, &x)) return di_cli_fail("serve", "--drain-timeout must be 0..86400 seconds, got '%s'", v);
      drain_s = (int)x;
    } else if (!strcmp(a, "--threads")) {
      if (!parse_int(v, 0, 4096, &x)) return di_cli_fail("serve", "--threads must be 0..4096, got '%s'", v);
      eo.threads = (int)x;
    } else if (!strcmp(a, "--ctx")) {
      if (!parse_int(v, 0, 1 << 24, &x)) return di_cli_fail("serve", "--ctx must be a positive integer, got '%s'", v);
      eo.ctx = (int)x;
    } else if (!strcmp(a, "--kv-type")) {
      if (!strcmp(v, "f16")) eo.kv_type = DI_KV_DTYPE_F16;
      else if (!strcmp(v, "bf16")) eo.kv_type = DI_KV_DTYPE_BF16;
      else if (!strcmp(v, "f32")) eo.kv_type = DI_KV_DTYPE_F32;
      else return di_cli_fail("serve", "--kv-type must be f16, bf16 or f32, got '%s'", v);
    } else if (!strcmp(a, "--kv-mem")) {
      if (!parse_bytes(v, &bytes)) return di_cli_fail("serve", "--kv-mem must be a byte count (K/M/G suffixes), got '%s'", v);
      eo.kv_mem = bytes;
    } else if (!strcmp(a, "--max-seqs")) {
      if (!parse_int(v, 1, 65536, &x)) return di_cli_fail("serve", "--max-seqs must be 1..65536, got '%s'", v);
      eo.max_seqs = (int)x;
    } else if (!strcmp(a, "--max-batch-tokens")) {
      if (!parse_int(v, 1, 1 << 20, &x)) return di_cli_fail("serve", "--max-batch-tokens must be 1..1048576, got '%s'", v);
      eo.max_batch_tokens = (int)x;
    } else if (!strcmp(a, "--seed")) {
      if (!parse_int(v, 0, INT64_MAX, &x)) return di_cli_fail("serve", "--seed must be a non-negative integer, got '%s'", v);
      seed = x;
    } else
      return di_cli_fail("serve", "unknown option '%s' (see --help)", a);
  }
  if (!eo.model_path) return di_cli_fail("serve", "-m/--model is required (see --help)");
  char *key = NULL;
  if (key_file) {
    if (so.api_key) return di_cli_fail("serve", "give --api-key or --api-key-file, not both");
    if (!(key = read_key_file(key_file))) return di_cli_fail("serve", "cannot read an API key from '%s'", key_file);
    so.api_key = key;
  }
  char *model_name = name ? strdup(name) : default_name(eo.model_path);
  so.model_name = model_name;
  so.seed = seed;

  /* Signals are taken by sigwait on this thread; every other thread inherits the mask. */
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, NULL);
  signal(SIGPIPE, SIG_IGN);

  di_srv_engine x = {0};
  di_srv_backend be;
  di_srv_engine_backend(&x, &be);
  di_server *s = NULL;
  di_status st = {0};
  int rc = 0;
  if (di_server_start(&so, &be, &s, &st) != DI_OK) {
    rc = di_cli_fail("serve", "%s", st.msg);
    goto out;
  }
  fprintf(stderr, "deepinfer serve: listening on http://%s:%d (model '%s' loading)\n", so.host, di_server_port(s),
          model_name);
  di_engine *e = NULL;
  char err[512] = "";
  if (di_engine_create(&eo, &e, err, sizeof err) != DI_OK) {
    di_server_stop(s);
    rc = di_cli_fail("serve", "%s", err[0] ? err : "cannot load the model");
    goto out;
  }
  if (di_srv_engine_attach(&x, e, &st) != DI_OK || di_engine_start(e) != DI_OK) {
    di_server_stop(s);
    di_engine_destroy(e);
    rc = di_cli_fail("serve", "%s", st.msg[0] ? st.msg : "cannot start the engine");
    goto out;
  }
  di_server_set_model(s, di_engine_ctx(e), di_engine_n_vocab(e), eo.max_seqs);
  di_srv_engine_ready(&x);
  fprintf(stderr, "deepinfer serve: ready (ctx %d, vocab %d, max-seqs %d)\n", di_engine_ctx(e),
          di_engine_n_vocab(e), eo.max_seqs);
  int sig = 0;
  sigwait(&sigs, &sig);
  di_dist_interrupt(); /* --tp: the other ranks are stopping too, no step can finish */
  if (di_dist_active())
    fprintf(stderr, "deepinfer serve: signal %d, tensor parallel job stopping (the requests in flight get an error)\n",
            sig);
  else
    fprintf(stderr, "deepinfer serve: signal %d, draining (up to %d s; a second signal exits at once)\n", sig,
            drain_s);
  /* Under --tp the job is stopping with the first signal: every step fails at
   * once and the requests in flight get their error within milliseconds,
   * unless a second signal cut the drain first, and mpirun may send its
   * SIGTERM more than once (for the rank that died and for each rank that
   * exits after it). Rank 0 exits on its own a second after the failure. */
  if (!di_server_drain(s, drain_s, di_dist_active() ? NULL : &sigs)) {
    fprintf(stderr, "deepinfer serve: second signal, exiting now\n");
    _exit(130);
  }
  fprintf(stderr, "deepinfer serve: drained, shutting down\n");
  di_server_stop(s); /* cancels what is left while the engine still runs to finish it */
  di_engine_stop(e);
  di_srv_engine_detach(&x);
  di_engine_destroy(e);
out:
  free(key);
  free(model_name);
  return rc;
}
