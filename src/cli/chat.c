/* `deepinfer chat`: a conversation in the terminal through the public engine
 * API, rendered with the model's chat template like the server's chat
 * endpoint. Every turn re-renders the whole history; the prefix cache finds
 * the earlier turns' KV blocks, so a turn costs only its new tokens. */
#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "cli/engine_opts.h"
#include "deepinfer.h"
#include "recipe/chat.h"
#include "tokenizer/tokenizer.h"

static const char *const USAGE =
    "usage: deepinfer chat -m MODEL [options]\n"
    "\n"
    "An interactive conversation using the model's chat template. Type a message and\n"
    "press Enter; Ctrl-C stops a reply; /reset starts over; /exit (or Ctrl-D) quits.\n"
    "\n"
    "options:\n" DI_CLI_ENGINE_OPTS_HELP
    "      --system TEXT        system prompt\n"
    "  -n, --max-tokens N       reply length limit (default: until the model ends its turn)\n"
    "      --temp T             sampling temperature (default 0.7; 0 = greedy)\n"
    "      --top-p P            nucleus sampling (default 0.95)\n"
    "      --top-k K            top-k sampling (default 40; 0 = off)\n"
    "      --seed N             sampling seed (default 1)\n"
    "      --stats              after each reply, one line: prompt and generated tokens,\n"
    "                           prefill and decode tokens/s\n"
    "  -h, --help               this text\n";

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig) {
  (void)sig;
  interrupted = 1;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct chat {
  di_engine *e;
  const di_tokenizer *tok;
  di_chat_template *tmpl;
  const char *bos, *eos;
  json_t *messages;
  const char *system;
  di_request_params base;
  bool stats, tty;
} chat;

static void reset(chat *c) {
  json_array_clear(c->messages);
  if (c->system) json_array_append_new(c->messages, json_pack("{s:s,s:s}", "role", "system", "content", c->system));
}

/* One turn: render the history, stream the reply, keep it (even when cut
 * short by Ctrl-C, so the next turn sees what the user saw). */
static int turn(chat *c, const char *user) {
  json_array_append_new(c->messages, json_pack("{s:s,s:s}", "role", "user", "content", user));
  di_chat_opts o = {.add_generation_prompt = true, .bos_token = c->bos, .eos_token = c->eos};
  di_render_out r = {0};
  di_status st = {0};
  int32_t *ids = NULL;
  size_t n_ids = 0;
  if (di_chat_render_ex(c->tmpl, c->messages, &o, &r, &st) ||
      di_chat_assemble_ids(c->tok, &r, false, &ids, &n_ids, &st)) {
    di_render_out_free(&r);
    json_array_remove(c->messages, json_array_size(c->messages) - 1);
    fprintf(stderr, "chat template: %s\n", st.msg);
    return 1;
  }
  di_render_out_free(&r);
  di_request_params p = c->base;
  p.prompt_ids = ids;
  p.n_prompt = n_ids;
  di_stream *s = NULL;
  char err[256];
  double t0 = now_s(), t_first = 0;
  if (di_engine_submit_stream(c->e, &p, &s, err, sizeof err)) {
    free(ids);
    json_array_remove(c->messages, json_array_size(c->messages) - 1);
    fprintf(stderr, "%s%s\n", err, strstr(err, "context") ? " (/reset starts a new conversation)" : "");
    return 1;
  }
  free(ids);
  char *reply = NULL;
  size_t len = 0, cap = 0;
  di_event ev;
  di_event last = {0};
  bool cancelled = false; /* a Ctrl-C since the line was read stops this reply */
  for (;;) {
    int k = di_stream_next(s, &ev, 50);
    if (interrupted && !cancelled) {
      di_engine_cancel(c->e, di_stream_id(s));
      cancelled = true;
    }
    if (k < 0) break;
    if (k == 0) continue;
    if (ev.token >= 0 && t_first == 0) t_first = now_s();
    if (ev.text_len) {
      if (len + ev.text_len + 1 > cap) {
        cap = (len + ev.text_len + 1) * 2;
        char *nr = realloc(reply, cap);
        if (!nr) break;
        reply = nr;
      }
      memcpy(reply + len, ev.text, ev.text_len);
      len += ev.text_len;
      reply[len] = 0;
      fwrite(ev.text, 1, ev.text_len, stdout);
      fflush(stdout);
    }
    if (ev.finish != DI_FINISH_NONE) last = ev;
  }
  double t1 = now_s();
  di_stream_free(s);
  fputc('\n', stdout);
  if (cancelled) fputs("[stopped]\n", stdout);
  if (last.finish == DI_FINISH_ERROR) fprintf(stderr, "error: %s\n", last.error ? last.error : "?");
  if (last.finish == DI_FINISH_LENGTH && c->base.max_tokens == 0)
    fputs("[the context is full: /reset starts a new conversation]\n", stdout);
  json_array_append_new(c->messages,
                        json_pack("{s:s,s:s%}", "role", "assistant", "content", reply ? reply : "", len));
  free(reply);
  if (c->stats) {
    int fresh = last.prompt_tokens - last.cached_tokens;
    double pre = t_first > 0 ? t_first - t0 : t1 - t0, dec = t_first > 0 ? t1 - t_first : 0;
    fprintf(stdout, "[stats] prompt %d tokens (%d cached, %d new), generated %d tokens; prefill %.1f tok/s, "
            "decode %.1f tok/s\n",
            last.prompt_tokens, last.cached_tokens, fresh, last.completion_tokens, pre > 0 ? fresh / pre : 0.0,
            dec > 0 && last.completion_tokens > 1 ? (last.completion_tokens - 1) / dec : 0.0);
  }
  fflush(stdout);
  return 0;
}

/* A line from stdin without its newline; NULL at end of input. Ctrl-C at
 * the prompt gives an empty line. */
static char *read_line(char **buf, size_t *cap) {
  errno = 0;
  interrupted = 0;
  ssize_t n = getline(buf, cap, stdin);
  if (n < 0) {
    if (errno == EINTR || interrupted) {
      clearerr(stdin);
      fputc('\n', stdout);
      (*buf)[0] = 0;
      return *buf;
    }
    return NULL;
  }
  while (n > 0 && ((*buf)[n - 1] == '\n' || (*buf)[n - 1] == '\r')) (*buf)[--n] = 0;
  return *buf;
}

int di_cmd_chat(int argc, char **argv) {
  di_engine_opts eo;
  di_engine_opts_default(&eo);
  eo.max_seqs = 1;
  chat c = {0};
  di_request_params_default(&c.base);
  c.base.sampling.temperature = 0.7f;
  c.base.sampling.top_p = 0.95f;
  c.base.sampling.top_k = 40;
  c.base.sampling.seed = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    long long n;
    double d;
    int r = di_cli_engine_opt("chat", argc, argv, &i, &eo);
    if (r == 2) return 2;
    if (r == 1) continue;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      fputs(USAGE, stdout);
      return 0;
    } else if (!strcmp(a, "--stats")) {
      c.stats = true;
      continue;
    }
    if (!v) return di_cli_fail("chat", "unknown option or missing value: %s (see --help)", a);
    i++;
    if (!strcmp(a, "--system")) {
      c.system = v;
    } else if (!strcmp(a, "-n") || !strcmp(a, "--max-tokens")) {
      if (!di_arg_int(v, 1, 1 << 24, &n)) return di_cli_fail("chat", "%s: '%s' must be a positive integer", a, v);
      c.base.max_tokens = (int)n;
    } else if (!strcmp(a, "--temp")) {
      if (!di_arg_float(v, 0, 100, &d)) return di_cli_fail("chat", "--temp: '%s' must be 0..100", v);
      c.base.sampling.temperature = (float)d;
    } else if (!strcmp(a, "--top-p")) {
      if (!di_arg_float(v, 1e-9, 1, &d)) return di_cli_fail("chat", "--top-p: '%s' must be in (0, 1]", v);
      c.base.sampling.top_p = (float)d;
    } else if (!strcmp(a, "--top-k")) {
      if (!di_arg_int(v, 0, 1 << 24, &n)) return di_cli_fail("chat", "--top-k: '%s' must be >= 0", v);
      c.base.sampling.top_k = (int)n;
    } else if (!strcmp(a, "--seed")) {
      if (!di_arg_int(v, 0, INT64_MAX, &n)) return di_cli_fail("chat", "--seed: '%s' must be >= 0", v);
      c.base.sampling.seed = (uint64_t)n;
    } else {
      return di_cli_fail("chat", "unknown option %s (see --help)", a);
    }
  }
  if (!eo.model_path) return di_cli_fail("chat", "-m MODEL is required (see --help)");
  char err[512];
  if (di_engine_create(&eo, &c.e, err, sizeof err)) return di_cli_fail("chat", "%s", err);
  int ret = 0;
  c.tok = di_engine_tokenizer(c.e);
  const char *src = c.tok ? di_tokenizer_chat_template(c.tok, NULL) : NULL;
  di_status st = {0};
  if (!src) {
    ret = di_cli_fail("chat", "%s has no chat template (use deepinfer run for plain completion)", eo.model_path);
    goto out;
  }
  if (di_chat_template_compile(src, strlen(src), &c.tmpl, &st)) {
    ret = di_cli_fail("chat", "chat template unusable: %s", st.msg);
    goto out;
  }
  c.bos = di_tokenizer_special_text(c.tok, "bos_token");
  c.eos = di_tokenizer_special_text(c.tok, "eos_token");
  if (di_engine_start(c.e)) {
    ret = di_cli_fail("chat", "cannot start the engine thread");
    goto out;
  }
  struct sigaction sa = {0};
  sa.sa_handler = on_sigint; /* no SA_RESTART: Ctrl-C must interrupt a read at the prompt */
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  c.tty = isatty(STDIN_FILENO);
  c.messages = json_array();
  reset(&c);
  if (c.tty)
    printf("deepinfer chat: %s (Ctrl-C stops a reply, /reset starts over, /exit quits)\n", eo.model_path);
  char *line = NULL;
  size_t cap = 0;
  for (;;) {
    if (c.tty) {
      fputs("> ", stdout);
      fflush(stdout);
    }
    if (!read_line(&line, &cap)) break;
    if (!line[0]) continue;
    if (!strcmp(line, "/exit") || !strcmp(line, "/quit") || !strcmp(line, "/bye")) break;
    if (!strcmp(line, "/reset")) {
      reset(&c);
      puts("[new conversation]");
      continue;
    }
    if (line[0] == '/' && line[1] != '/' && !strchr(line, ' ')) {
      printf("unknown command %s (/reset, /exit; start a message with // to send a slash)\n", line);
      continue;
    }
    turn(&c, !strncmp(line, "//", 2) ? line + 1 : line);
  }
  free(line);
  signal(SIGINT, SIG_DFL);
  di_engine_stop(c.e);
out:
  json_decref(c.messages);
  di_chat_template_free(c.tmpl);
  di_engine_destroy(c.e);
  return ret;
}
