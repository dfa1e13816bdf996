/* --tp N: the process's part in a tensor-parallel job (mpirun -np N deepinfer
 * CMD ... --tp N). Rank 0 runs CMD as usual and its engine's forward leads
 * (graph/forward_tp.h); every other rank runs the follower loop here: load
 * what the leader loads, repeat its steps, stop when it stops. `info --tp N`
 * also prints each rank's placement, the hosts, the measured links and the
 * collectives' layout (dist/comm.h). */
#include "cli/tp.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "dist/comm.h"
#include "engine/engine_model.h"
#include "graph/forward_tp.h"
#include "model/model.h"

typedef struct follower {
  di_model *m;
  di_forward_ctx *f;
} follower;

static void follower_drop(follower *fl) {
  di_forward_ctx_free(fl->f);
  di_engine_free_weights(fl->m);
  fl->f = NULL, fl->m = NULL;
}

static di_code follower_load(follower *fl, const di_tp_msg *h, const char *path, di_status *st) {
  follower_drop(fl);
  di_code rc = di_engine_load_weights(path, h->a[DI_TP_A_MMAP] != 0, true, &fl->m, st);
  if (rc) return rc;
  fl->m->hp.sliding_window = h->a[DI_TP_A_WINDOW]; /* as the leader's --swa-window left them */
  fl->m->hp.swa_pattern = h->a[DI_TP_A_SWA_PATTERN];
  fl->m->hp.v4.mtp_kv = h->a[DI_TP_A_V4_MTP] != 0; /* --spec mtp on DeepSeek-V4 */
  rc = di_forward_ctx_create(fl->m, h->a[DI_TP_A_MAX_BATCH], h->a[DI_TP_A_THREADS], &fl->f, st);
  return rc ? rc : di_forward_tp_follow_init(fl->f, st);
}

/* SIGTERM or SIGINT (mpirun forwards them, and sends SIGTERM to every rank
 * when one dies): the operation in progress fails and the rank exits through
 * dist/comm.c's failure path, which leaves rank 0 the time to answer its
 * requests, instead of dying at once. */
static void on_stop(int sig) {
  (void)sig;
  di_dist_interrupt();
}

static int follow(void) {
  struct sigaction sa = {.sa_handler = on_stop};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  follower fl = {0};
  void *buf = NULL;
  size_t cap = 0;
  di_status st = {0};
  int code = 0;
  for (;;) {
    di_tp_msg h;
    di_code rc = di_tp_recv(&h, &buf, &cap, &st);
    if (!rc && h.cmd == DI_TP_STOP) break;
    if (!rc && h.cmd == DI_TP_LOAD) {
      ((char *)buf)[h.payload - 1] = 0;
      rc = follower_load(&fl, &h, buf, &st);
      bool all = false;
      di_status st2 = {0};
      if (rc) fprintf(stderr, "deepinfer: rank %d: %s\n", di_dist_rank(), st.msg);
      if (di_dist_agree(rc == DI_OK, &all, &st2) || !all || di_forward_tp_follow_memory(fl.f, &st2)) {
        code = 1;
        break;
      }
      continue;
    }
    if (!rc && (h.cmd == DI_TP_FORWARD || h.cmd == DI_TP_MTP))
      rc = fl.f ? di_forward_tp_follow(fl.f, &h, buf, &st)
                : di_errorf(&st, DI_ERR_INVALID, "tensor parallel: a step before any model");
    else if (!rc)
      rc = di_errorf(&st, DI_ERR_INVALID, "tensor parallel: unknown message %d from rank 0", h.cmd);
    if (rc) {
      fprintf(stderr, "deepinfer: rank %d: %s\n", di_dist_rank(), st.msg);
      code = 1;
      break;
    }
  }
  follower_drop(&fl);
  free(buf);
  return code;
}

static void print_link(const char *name, di_dist_link l) {
  if (l.lat_s > 0) printf("%s %.2f us one way (8 B), %.2f GB/s (1 MiB)", name, l.lat_s * 1e6, l.gbs);
  else printf("%s not measured (no two ranks there)", name);
}

/* Every rank's placement and host, the measured links, the collectives'
 * layout and a 64 KB all-gather's time, printed by rank 0. */
static int tp_report(void) {
  enum { LINE = 256 };
  int n = di_dist_size(), me = di_dist_rank();
  char *all = calloc((size_t)n, LINE), mine[LINE] = {0};
  size_t *bytes = malloc((size_t)n * sizeof *bytes);
  if (!all || !bytes) return di_cli_fail("info", "out of memory");
  di_dist_placement(mine, sizeof mine);
  for (int r = 0; r < n; r++) bytes[r] = LINE;
  di_status st = {0};
  di_code rc = di_dist_allgatherv(mine, all, bytes, &st);
  if (!rc) rc = di_dist_measure(&st);
  /* the exchange a decode step makes: an all-gather of 64 KB in all */
  size_t nr = n > 1 ? (size_t)n : 1, part = (65536 / nr + 3) / 4 * 4;
  char *s = calloc(part, 1), *r = calloc(part, nr);
  for (int k = 0; k < n; k++) bytes[k] = part;
  di_dist_stats s0 = di_dist_get_stats();
  for (int i = 0; i < 500 && !rc && s && r; i++) rc = di_dist_allgatherv(s, r, bytes, &st);
  di_dist_stats s1 = di_dist_get_stats();
  const double g64 = (s1.seconds - s0.seconds) / 500;
  free(s), free(r);
  if (rc) return di_cli_fail("info", "%s", st.msg);
  if (me == 0) {
    const di_dist_layout l = di_dist_get_layout();
    printf("tensor parallel: %d ranks (MPI); columns of every matmul split in 16-column tiles\n", n);
    for (int k = 0; k < n; k++) printf("rank %d: %s\n", k, all + (size_t)k * LINE);
    printf("hosts: %d (%s)\n", l.hosts,
           l.fake ? "DI_TP_HOSTS: rank r on pretend host r % hosts" : "MPI shared-memory groups");
    for (int h = 0; h < l.hosts; h++) {
      printf("host %d: ranks", h);
      for (int k = 0, c = 0; k < n; k++)
        if (di_dist_host_of(k) == h) printf("%s %d", c++ ? "," : "", k);
      printf("\n");
    }
    print_link("links: intra-host", l.intra);
    print_link("; inter-host", l.inter);
    printf("\nlayout: %s (%s)", l.two_level ? "two-level" : "flat",
           l.forced ? "DI_TP_LAYOUT" : l.hosts == 1 ? "one host" : "the faster by the measured links");
    if (l.hosts > 1)
      printf("; a 64 KB all-gather modelled: flat %.1f us, two-level %.1f us", l.flat_s * 1e6, l.two_s * 1e6);
    const di_dist_link x = l.intra.lat_s > 0 ? l.intra : l.inter;
    printf("\nexchange: %.2f us one way (8 B ping-pong), %.2f GB/s (1 MiB ping-pong), %.2f us per 64 KB all-gather\n",
           x.lat_s * 1e6, x.gbs, g64 * 1e6);
  }
  free(all), free(bytes);
  return 0;
}

static int g_ranks = 1;

int di_cli_tp_ranks(void) { return g_ranks; }

bool di_cli_tp_begin(int *argc, char **argv, int *code) {
  int want = 0, at = -1;
  for (int i = 2; i + 1 < *argc; i++)
    if (!strcmp(argv[i], "--tp")) at = i;
  if (at < 0) {
    for (int i = 2; i < *argc; i++)
      if (!strcmp(argv[i], "--tp")) {
        *code = di_cli_fail(argv[1], "option --tp needs a value");
        return true;
      }
    return false;
  }
  long long n = 0;
  if (!di_arg_int(argv[at + 1], 1, 4096, &n)) {
    *code = di_cli_fail(argv[1], "--tp: '%s' must be a number of ranks 1..4096", argv[at + 1]);
    return true;
  }
  want = g_ranks = (int)n;
  for (int i = at; i + 2 <= *argc; i++) argv[i] = argv[i + 2]; /* the command never sees --tp */
  *argc -= 2;
  if (want == 1) return false;
  if (strcmp(argv[1], "run") && strcmp(argv[1], "serve") && strcmp(argv[1], "bench") && strcmp(argv[1], "batch") &&
      strcmp(argv[1], "info")) {
    *code = di_cli_fail(argv[1], "--tp: runs with run, serve, batch, bench and info only");
    return true;
  }
  di_status st = {0};
  if (di_dist_init(want, &st)) {
    *code = di_dist_rank() == 0 ? di_cli_fail(argv[1], "%s", st.msg) : 2;
    di_dist_finalize();
    return true;
  }
  if (!strcmp(argv[1], "info")) {
    *code = tp_report();
    if (di_dist_rank() != 0 || *code || *argc == 2) { /* bare `info --tp N`: the report alone */
      di_dist_finalize();
      return true;
    }
    di_dist_finalize(); /* the model part runs on rank 0 alone */
    return false;
  }
  if (di_dist_rank() == 0) return false;
  *code = follow();
  di_dist_finalize();
  return true;
}

bool di_cli_tp_end(void) {
  if (!di_dist_active() || di_dist_rank() != 0) return false;
  bool failed = di_dist_failed();
  di_status st = {0};
  di_tp_msg h = {.cmd = DI_TP_STOP};
  if (!failed) failed = di_tp_send(&h, NULL, &st) != DI_OK;
  di_dist_finalize();
  return failed;
}
