/* Collectives over Open MPI, each started nonblocking and polled against a
 * deadline (see comm.h): MPI's own blocking calls would wait forever on a
 * rank that hangs, and on a rank that died they either abort the job without
 * a word from us or hang too, depending on the transport.
 *
 * Two layouts (di_dist_get_layout): flat, one MPI collective over all ranks;
 * and two-level, where the ranks of a host first gather their parts on the
 * host's first rank (its leader) through the host's communicator (MPI's
 * shared-memory transport), the leaders exchange whole hosts' blocks across
 * hosts, and each leader broadcasts (scatters) the result on its host. Data
 * is only moved, never combined, so both give the same bytes. */
#include "dist/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef DI_HAVE_MPI
#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "dist/place.h"

static struct {
  bool started, active;
  int rank, size;
  double timeout;
  bool failed;
  char err[400];
  di_dist_stats stats;
  int *cnt, *dsp, *cnt2, *dsp2, *hcnt, *hdsp; /* [size] MPI's int counts and displacements */
  volatile int interrupted;
  /* hosts: node holds this rank's host (ranks in world order, the host's
   * first rank its leader, rank 0 there), leaders the hosts' first ranks
   * (MPI_COMM_NULL on the others); members lists the world ranks host by
   * host, host h's at members[host_at[h] .. host_at[h + 1]) */
  MPI_Comm node, leaders;
  int host, lrank, lsize, *host_of, *members, *host_at;
  size_t *z;       /* [2 * size * size + size]: all-to-all's count matrix, its row prefixes, scratch */
  uint8_t *stage[4];
  size_t stage_cap[4];
  di_dist_layout lay;
} g = {.size = 1, .node = MPI_COMM_NULL, .leaders = MPI_COMM_NULL, .lay = {.hosts = 1}};

void di_dist_interrupt(void) { g.interrupted = 1; }

bool di_dist_built(void) { return true; }
bool di_dist_active(void) { return g.active; }
int di_dist_rank(void) { return g.rank; }
int di_dist_size(void) { return g.size; }
bool di_dist_failed(void) { return g.failed || g.interrupted; }
di_dist_stats di_dist_get_stats(void) { return g.stats; }
di_dist_layout di_dist_get_layout(void) { return g.lay; }
int di_dist_host_of(int rank) { return g.host_of && rank >= 0 && rank < g.size ? g.host_of[rank] : 0; }

static void *exit_later(void *p) {
  (void)p;
  sleep(1); /* the engine hands the error to the requests in flight meanwhile */
  fprintf(stderr, "deepinfer: tensor parallel job stopped: %s\n", g.err);
  _exit(1);
}

/* The job cannot go on: rank 0 fails every later operation with the message
 * and exits a second later; another rank exits half a second later (rank 0
 * reports). */
static di_code fail(di_status *st) {
  if (!g.failed) {
    g.failed = true;
    fprintf(stderr, "deepinfer: rank %d: %s\n", g.rank, g.err);
    if (g.rank != 0) {
      /* mpirun (Open MPI 4) sends SIGTERM, then SIGKILL as soon as any rank
       * exits: a rank that left at once would cut rank 0 off before its
       * requests in flight got their error. */
      usleep(500 * 1000);
      _exit(1);
    }
    pthread_t th;
    if (pthread_create(&th, NULL, exit_later, NULL) == 0) pthread_detach(th);
    else _exit(1);
  }
  return di_errorf(st, DI_ERR_IO, "tensor parallel: %s", g.err);
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Polls r to completion: spinning for 100 us (a step's exchanges are short),
 * then napping between polls (the timer's slack makes a nap ~50 us; a 1 us
 * slack, PR_SET_TIMERSLACK, made TP2 decode 5-8x slower here: the waiting
 * rank then polls ~20x as often against the rank it waits for) so a rank
 * that shares a core with the one it waits for lets that one run (on this
 * loaded 2-core host, naps instead of sched_yield took a TP2 decode from 8 to
 * 13 tok/s; a 20 us spin was slower still), and in idle waits sleeping. */
static di_code wait_req(MPI_Request *r, const char *what, bool idle, di_status *st) {
  if (g.failed) return di_errorf(st, DI_ERR_IO, "tensor parallel: %s", g.err);
  double t0 = now(), t = t0;
  for (unsigned i = 0;; i++) {
    int done = 0;
    if (MPI_Test(r, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
      snprintf(g.err, sizeof g.err, "%s failed: a rank exited or cannot be reached", what);
      return fail(st);
    }
    if (done) return DI_OK;
    if (g.interrupted) {
      snprintf(g.err, sizeof g.err, "%s: the job is being stopped (a signal; mpirun sends one when a rank exits)",
               what);
      return fail(st);
    }
    if ((i & 63) == 0) t = now();
    if (t - t0 < 1e-4) continue;
    if (!idle && t - t0 > g.timeout) {
      snprintf(g.err, sizeof g.err, "%s: no answer from every rank within %.1f s (a rank exited or hangs)", what,
               g.timeout);
      return fail(st);
    }
    /* an idle follower of an idle server: 100 us naps, 1 ms after a second */
    if (idle && t - t0 > 2e-3) nanosleep(&(struct timespec){0, t - t0 > 1 ? 1000000 : 100000}, NULL);
    else nanosleep(&(struct timespec){0, 1000}, NULL);
  }
}

/* Waits for the request an MPI_I* call started (rc its return code). */
static di_code finish(int rc, MPI_Request *r, const char *what, bool idle, di_status *st) {
  if (rc != MPI_SUCCESS) {
    snprintf(g.err, sizeof g.err, "%s could not start (MPI error %d)", what, rc);
    return fail(st);
  }
  return wait_req(r, what, idle, st);
}

static void account(double t0, size_t bytes) {
  g.stats.ops++;
  g.stats.bytes += bytes;
  g.stats.seconds += now() - t0;
}

static di_code failed_already(di_status *st) { return di_errorf(st, DI_ERR_IO, "tensor parallel: %s", g.err); }

/* size_t byte counts as MPI's ints, with displacements in order. */
static di_code counts(const size_t *bytes, int n, int *cnt, int *dsp, size_t *total, di_status *st) {
  size_t off = 0;
  for (int r = 0; r < n; r++) {
    if (bytes[r] > INT_MAX || off > INT_MAX)
      return di_errorf(st, DI_ERR_RANGE, "tensor parallel: an exchange of %zu bytes is over MPI's limit", bytes[r]);
    cnt[r] = (int)bytes[r], dsp[r] = (int)off;
    off += bytes[r];
  }
  *total = off;
  return DI_OK;
}

/* Scratch buffer i of at least n bytes (NULL: out of memory). */
static uint8_t *stage(int i, size_t n, di_status *st) {
  if (n <= g.stage_cap[i] && g.stage[i]) return g.stage[i];
  void *p = realloc(g.stage[i], n ? n : 1);
  if (!p) {
    di_errorf(st, DI_ERR_NOMEM, "tensor parallel: out of memory for a %zu-byte exchange", n);
    return NULL;
  }
  g.stage[i] = p, g.stage_cap[i] = n;
  return p;
}

static bool two_level(void) { return g.active && g.lay.two_level; }

/* ---- hosts ---- */

/* Splits the ranks by host: MPI_COMM_TYPE_SHARED, or DI_TP_HOSTS=K (tests:
 * rank r on pretend host r % K). Pins the rank (place.c) by its real host. */
static di_code hosts_init(di_status *st) {
  const int n = g.size;
  MPI_Comm shm;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g.rank, MPI_INFO_NULL, &shm) != MPI_SUCCESS)
    return di_errorf(st, DI_ERR_IO, "tensor parallel: cannot group the ranks by host (MPI_Comm_split_type)");
  int lr = 0, ln = 1;
  MPI_Comm_rank(shm, &lr);
  MPI_Comm_size(shm, &ln);
  di_dist_pin(lr, ln);
  const char *k = getenv("DI_TP_HOSTS");
  const int K = k ? atoi(k) : 0;
  g.lay.fake = K > 1;
  if (g.lay.fake) {
    MPI_Comm_free(&shm);
    if (MPI_Comm_split(MPI_COMM_WORLD, g.rank % K, g.rank, &shm) != MPI_SUCCESS)
      return di_errorf(st, DI_ERR_IO, "tensor parallel: DI_TP_HOSTS=%d: MPI_Comm_split failed", K);
  }
  g.node = shm;
  MPI_Comm_rank(g.node, &g.lrank);
  MPI_Comm_size(g.node, &g.lsize);
  int lead = g.rank;
  MPI_Bcast(&lead, 1, MPI_INT, 0, g.node);
  int *lead_of = g.cnt; /* scratch: every rank's leader */
  if (MPI_Allgather(&lead, 1, MPI_INT, lead_of, 1, MPI_INT, MPI_COMM_WORLD) != MPI_SUCCESS ||
      MPI_Comm_split(MPI_COMM_WORLD, g.lrank == 0 ? 0 : MPI_UNDEFINED, g.rank, &g.leaders) != MPI_SUCCESS)
    return di_errorf(st, DI_ERR_IO, "tensor parallel: cannot group the ranks by host");
  /* host h: the h-th leader in rank order (so rank 0 leads host 0) */
  int hosts = 0;
  for (int r = 0; r < n; r++) {
    if (lead_of[r] == r) g.host_at[hosts++] = r; /* the leader's rank, for now */
  }
  for (int r = 0; r < n; r++)
    for (int h = 0; h < hosts; h++)
      if (g.host_at[h] == lead_of[r]) g.host_of[r] = h;
  for (int h = 0, i = 0; h < hosts; h++) {
    g.host_at[h] = i;
    for (int r = 0; r < n; r++)
      if (g.host_of[r] == h) g.members[i++] = r;
  }
  g.host_at[hosts] = n;
  g.host = g.host_of[g.rank];
  g.lay.hosts = hosts;
  return DI_OK;
}

/* The one-way time of a bytes-byte message between ranks a and b (reps round
 * trips), on every rank (rank a's measure, broadcast). */
static di_code pingpong(int a, int b, size_t bytes, int reps, double *one_way, di_status *st) {
  uint8_t *buf = stage(3, bytes, st);
  if (!buf) return st->code;
  memset(buf, 0, bytes);
  MPI_Request r;
  di_code rc = finish(MPI_Ibarrier(MPI_COMM_WORLD, &r), &r, "link probe", true, st);
  double t0 = now();
  for (int i = 0; i < reps && !rc && (g.rank == a || g.rank == b); i++) {
    const int peer = g.rank == a ? b : a;
    for (int k = 0; k < 2 && !rc; k++) {
      const int mr = (g.rank == a) == (k == 0) ? MPI_Isend(buf, (int)bytes, MPI_BYTE, peer, 7, MPI_COMM_WORLD, &r)
                                               : MPI_Irecv(buf, (int)bytes, MPI_BYTE, peer, 7, MPI_COMM_WORLD, &r);
      rc = finish(mr, &r, "link probe", false, st);
    }
  }
  double t = (now() - t0) / (2.0 * reps);
  if (!rc) rc = finish(MPI_Ibcast(&t, 1, MPI_DOUBLE, a, MPI_COMM_WORLD, &r), &r, "link probe", false, st);
  *one_way = t;
  return rc;
}

static di_code probe_link(int a, int b, di_dist_link *l, di_status *st) {
  double lat = 0, big = 0;
  di_code rc = pingpong(a, b, 8, 200, &lat, st);
  if (!rc) rc = pingpong(a, b, 1 << 20, 8, &big, st);
  *l = (di_dist_link){.lat_s = lat, .gbs = big > 0 ? (1 << 20) / big / 1e9 : 0};
  return rc;
}

static double xfer(di_dist_link l, double bytes) { return l.lat_s + (l.gbs > 0 ? bytes / (l.gbs * 1e9) : 0); }

/* A bytes-byte all-gather's modelled time: flat, MPI's ring over every rank,
 * each of its n - 1 steps as slow as the slowest link on the ring (between
 * hosts); two-level, a gather and a broadcast on the host (a binomial tree,
 * every byte over the host link twice) around the leaders' ring. */
static double allgather_model(bool two, size_t bytes) {
  const di_dist_layout *l = &g.lay;
  const di_dist_link x = l->hosts > 1 ? l->inter : l->intra, in = l->intra;
  const double S = (double)bytes, n = g.size;
  if (!two || l->hosts == 1) return (n - 1) * xfer(x, S / n);
  int p = 0;
  for (int h = 0; h < l->hosts; h++)
    if (g.host_at[h + 1] - g.host_at[h] > p) p = g.host_at[h + 1] - g.host_at[h];
  int depth = 0;
  while ((1 << depth) < p) depth++;
  const double H = l->hosts;
  return 2 * (depth * in.lat_s + (p > 1 ? xfer(in, S) - in.lat_s : 0)) + (H - 1) * xfer(x, S / H);
}

di_code di_dist_measure(di_status *st) {
  if (!g.active) return DI_OK;
  if (g.failed) return failed_already(st);
  di_dist_layout *l = &g.lay;
  l->intra = l->inter = (di_dist_link){0};
  di_code rc = DI_OK;
  for (int h = 0; h < l->hosts && !rc; h++) /* the first host with two ranks */
    if (g.host_at[h + 1] - g.host_at[h] > 1) {
      rc = probe_link(g.members[g.host_at[h]], g.members[g.host_at[h] + 1], &l->intra, st);
      break;
    }
  if (!rc && l->hosts > 1) rc = probe_link(0, g.members[g.host_at[1]], &l->inter, st);
  if (rc) return rc;
  /* rank 0 chooses (DI_TP_LAYOUT=flat|two-level forces, for tests) and every rank takes its choice */
  double v = 0;
  if (g.rank == 0) {
    l->flat_s = allgather_model(false, 65536), l->two_s = allgather_model(true, 65536);
    const char *f = getenv("DI_TP_LAYOUT");
    int forced = f && !strcmp(f, "flat") ? 0 : f && !strcmp(f, "two-level") ? 1 : -1;
    bool hier = false; /* a host with more than one rank beside another host */
    for (int h = 0; h < l->hosts && l->hosts > 1; h++) hier |= g.host_at[h + 1] - g.host_at[h] > 1;
    v = forced >= 0 ? forced + 2 : hier && l->two_s < l->flat_s;
  }
  MPI_Request r;
  if ((rc = finish(MPI_Ibcast(&v, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD, &r), &r, "link probe", false, st))) return rc;
  l->forced = v >= 2;
  l->two_level = (l->forced ? v == 3 : v == 1) && l->hosts > 1;
  return DI_OK;
}

di_code di_dist_init(int want, di_status *st) {
  if (g.started) return DI_OK;
  int provided = 0;
  /* The engine's step may run on a thread other than main (serve), one at a time. */
  if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
    return di_errorf(st, DI_ERR_IO, "--tp %d: MPI_Init failed", want);
  g.started = true;
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &g.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g.size);
  const char *t = getenv("DI_TP_TIMEOUT_MS");
  g.timeout = (t && atoi(t) > 0 ? atoi(t) : 5000) / 1000.0;
  if (provided < MPI_THREAD_SERIALIZED)
    return di_errorf(st, DI_ERR_UNSUPPORTED, "--tp %d: this MPI library does not allow calls from several threads",
                     want);
  if (g.size != want)
    return di_errorf(st, DI_ERR_INVALID, "--tp %d: the job has %d MPI rank%s (start it with mpirun -np %d)", want,
                     g.size, g.size == 1 ? "" : "s", want);
  const size_t n = (size_t)g.size;
  g.cnt = calloc(n * 9 + 1, sizeof(int));
  g.z = calloc(2 * n * n + n, sizeof *g.z);
  if (!g.cnt || !g.z) return di_errorf(st, DI_ERR_NOMEM, "--tp %d: out of memory", want);
  g.dsp = g.cnt + n, g.cnt2 = g.dsp + n, g.dsp2 = g.cnt2 + n, g.hcnt = g.dsp2 + n, g.hdsp = g.hcnt + n;
  g.host_of = g.hdsp + n, g.members = g.host_of + n, g.host_at = g.members + n;
  g.active = g.size > 1;
  g.lay.hosts = 1;
  di_code rc = hosts_init(st);
  /* links are measured at start where there is a choice to make */
  if (!rc && g.lay.hosts > 1) rc = di_dist_measure(st);
  return rc;
}

void di_dist_finalize(void) {
  if (g.started && !g.failed) {
    if (g.leaders != MPI_COMM_NULL) MPI_Comm_free(&g.leaders);
    if (g.node != MPI_COMM_NULL) MPI_Comm_free(&g.node);
    MPI_Finalize();
  }
  free(g.cnt), free(g.z);
  for (int i = 0; i < 4; i++) free(g.stage[i]), g.stage[i] = NULL, g.stage_cap[i] = 0;
  g.cnt = NULL, g.z = NULL;
  g.started = g.active = false;
}

/* ---- broadcast and agreement ---- */

di_code di_dist_bcast(void *buf, size_t bytes, bool idle, di_status *st) {
  if (!g.active) return DI_OK;
  if (g.failed) return failed_already(st);
  if (bytes > INT_MAX)
    return di_errorf(st, DI_ERR_RANGE, "tensor parallel: a broadcast of %zu bytes is too big", bytes);
  /* only the followers wait idly: for the leader a late follower is a fault */
  idle = idle && g.rank != 0;
  const double t0 = now();
  MPI_Request r;
  di_code rc = DI_OK;
  if (!two_level()) {
    rc = finish(MPI_Ibcast(buf, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD, &r), &r, "broadcast", idle, st);
  } else { /* rank 0 to the leaders, each leader on its host */
    if (g.leaders != MPI_COMM_NULL)
      rc = finish(MPI_Ibcast(buf, (int)bytes, MPI_BYTE, 0, g.leaders, &r), &r, "broadcast", idle, st);
    if (!rc && g.lsize > 1)
      rc = finish(MPI_Ibcast(buf, (int)bytes, MPI_BYTE, 0, g.node, &r), &r, "broadcast", idle, st);
  }
  if (!rc && !idle) account(t0, bytes);
  return rc;
}

di_code di_dist_agree(bool ok, bool *all_ok, di_status *st) {
  *all_ok = ok;
  if (!g.active) return DI_OK;
  if (g.failed) return failed_already(st);
  int in = ok, out = 0;
  MPI_Request r;
  di_code rc = finish(MPI_Iallreduce(&in, &out, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD, &r), &r, "agreement", true, st);
  *all_ok = out != 0;
  return rc;
}

/* ---- gathers ---- */

/* The start of the variable-size gathers: with one rank its own part is the
 * whole result (*local); otherwise the failure check and MPI's counts. */
static di_code gather_start(const void *send, void *recv, const size_t *bytes, size_t *total, bool *local,
                            di_status *st) {
  *local = !g.active;
  if (*local) {
    if (send && send != recv) memcpy(recv, send, bytes[0]);
    return DI_OK;
  }
  if (g.failed) return failed_already(st);
  return counts(bytes, g.size, g.cnt, g.dsp, total, st);
}

/* Two-level, first step: the host's parts (in rank order) gathered on its
 * leader into stage 0 at the host's place, hosts in order (g.hcnt/g.hdsp:
 * each host's block); mine is this rank's part. */
static di_code host_gather(const uint8_t *mine, const size_t *bytes, const char *what, uint8_t **out, di_status *st) {
  size_t total = 0;
  for (int h = 0; h < g.lay.hosts; h++) {
    size_t hb = 0;
    for (int i = g.host_at[h]; i < g.host_at[h + 1]; i++) hb += bytes[g.members[i]];
    if (hb > INT_MAX || total > INT_MAX)
      return di_errorf(st, DI_ERR_RANGE, "tensor parallel: an exchange of %zu bytes is over MPI's limit", hb);
    g.hcnt[h] = (int)hb, g.hdsp[h] = (int)total;
    total += hb;
  }
  uint8_t *s = stage(0, total, st);
  if (!s) return st->code;
  *out = s;
  uint8_t *mine_at = s + g.hdsp[g.host];
  if (g.lsize == 1) {
    memcpy(mine_at, mine, bytes[g.rank]);
    return DI_OK;
  }
  const int i0 = g.host_at[g.host];
  for (int i = 0, off = 0; i < g.lsize; off += g.cnt2[i], i++)
    g.cnt2[i] = (int)bytes[g.members[i0 + i]], g.dsp2[i] = off;
  MPI_Request r;
  return finish(MPI_Igatherv(mine, (int)bytes[g.rank], MPI_BYTE, mine_at, g.cnt2, g.dsp2, MPI_BYTE, 0, g.node, &r), &r,
                what, false, st);
}

/* The stage's blocks (hosts in order, ranks in order within) into recv in rank order. */
static void unstage(const uint8_t *s, uint8_t *recv) {
  for (int i = 0, off = 0; i < g.size; off += g.cnt[g.members[i]], i++)
    memcpy(recv + g.dsp[g.members[i]], s + off, (size_t)g.cnt[g.members[i]]);
}

di_code di_dist_allgatherv(const void *send, void *recv, const size_t *bytes, di_status *st) {
  size_t total;
  bool local;
  di_code rc = gather_start(send, recv, bytes, &total, &local, st);
  if (rc || local) return rc;
  const double t0 = now();
  MPI_Request r;
  if (!two_level()) {
    rc = finish(MPI_Iallgatherv(send ? send : MPI_IN_PLACE, g.cnt[g.rank], MPI_BYTE, recv, g.cnt, g.dsp, MPI_BYTE,
                                MPI_COMM_WORLD, &r), &r,
                "all-gather", false, st);
  } else {
    const uint8_t *mine = send ? send : (const uint8_t *)recv + g.dsp[g.rank];
    uint8_t *s = NULL;
    rc = host_gather(mine, bytes, "all-gather", &s, st);
    if (!rc && g.leaders != MPI_COMM_NULL) {
      rc = finish(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_BYTE, s, g.hcnt, g.hdsp, MPI_BYTE, g.leaders, &r), &r,
                  "all-gather", false, st);
      if (!rc) unstage(s, recv);
    }
    if (!rc && g.lsize > 1)
      rc = finish(MPI_Ibcast(recv, (int)total, MPI_BYTE, 0, g.node, &r), &r, "all-gather", false, st);
  }
  if (!rc) account(t0, total);
  return rc;
}

di_code di_dist_gatherv(const void *send, void *recv, const size_t *bytes, di_status *st) {
  size_t total;
  bool local;
  di_code rc = gather_start(send, recv, bytes, &total, &local, st);
  if (rc || local) return rc;
  const double t0 = now();
  MPI_Request r;
  if (!two_level()) {
    const void *s = send ? send : g.rank == 0 ? MPI_IN_PLACE : recv;
    rc = finish(MPI_Igatherv(s, g.cnt[g.rank], MPI_BYTE, recv, g.cnt, g.dsp, MPI_BYTE, 0, MPI_COMM_WORLD, &r), &r,
                "gather", false, st);
  } else {
    const uint8_t *mine = send ? send : recv; /* dsp[0] is 0 */
    uint8_t *s = NULL;
    rc = host_gather(mine, bytes, "gather", &s, st);
    if (!rc && g.leaders != MPI_COMM_NULL) {
      const void *in = g.rank == 0 ? MPI_IN_PLACE : s + g.hdsp[g.host];
      rc = finish(MPI_Igatherv(in, g.hcnt[g.host], MPI_BYTE, s, g.hcnt, g.hdsp, MPI_BYTE, 0, g.leaders, &r), &r,
                  "gather", false, st);
      if (!rc && g.rank == 0) unstage(s, recv);
    }
  }
  if (!rc) account(t0, g.rank == 0 ? total : bytes[g.rank]);
  return rc;
}

/* ---- all-to-all ---- */

/* Two-level: every rank's counts to every rank (C[a][b]: a's bytes for b,
 * P[a][b]: where they start in a's send buffer); the host's send buffers on
 * its leader; the leaders exchange, for each pair of hosts, the blocks from
 * one host's ranks to the other's ([a][b], both in rank order); each leader
 * puts its ranks' blocks in source rank order and scatters them. */
static di_code alltoall_two(const void *send, const size_t *sbytes, void *recv, di_status *st) {
  const int n = g.size, H = g.lay.hosts, *M = g.members, *at = g.host_at;
  size_t *C = g.z, *P = C + (size_t)n * n, *row = P + (size_t)n * n;
  MPI_Request q;
  memcpy(C + (size_t)g.rank * n, sbytes, (size_t)n * sizeof *C);
  di_code rc = finish(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_BYTE, C, n * (int)sizeof *C, MPI_BYTE, MPI_COMM_WORLD, &q),
                      &q, "all-to-all", false, st);
  if (rc) return rc;
  for (int a = 0; a < n; a++)
    for (int b = 0, o = 0; b < n; o += (int)C[(size_t)a * n + b], b++) P[(size_t)a * n + b] = (size_t)o;
  const int i0 = at[g.host], ni = g.lsize;
  /* this host's send buffers on the leader (stage 1), rank by rank */
  for (int i = 0; i < ni; i++) {
    size_t s = 0;
    for (int b = 0; b < n; b++) s += C[(size_t)M[i0 + i] * n + b];
    row[i] = s;
  }
  size_t tot;
  if ((rc = counts(row, ni, g.cnt2, g.dsp2, &tot, st))) return rc;
  const uint8_t *A = send;
  if (ni > 1) {
    uint8_t *s = stage(1, tot, st);
    if (!s) return st->code;
    rc = finish(MPI_Igatherv(send, g.cnt2[g.lrank], MPI_BYTE, s, g.cnt2, g.dsp2, MPI_BYTE, 0, g.node, &q), &q,
                "all-to-all", false, st);
    A = s;
  }
  if (rc) return rc;
  size_t out_total = 0;
  for (int i = 0; i < ni; i++) {
    size_t s = 0;
    for (int a = 0; a < n; a++) s += C[(size_t)a * n + M[i0 + i]];
    row[i] = s, out_total += s;
  }
  uint8_t *out = NULL;
  if (g.leaders != MPI_COMM_NULL) {
    const int *ad = g.dsp2; /* member i's send buffer at A + ad[i] (gathered) */
    /* the leaders' exchange: to host h, [my ranks a][h's ranks b]; from host h, [h's a][my b] */
    size_t so = 0, ro = 0;
    for (int h = 0; h < H; h++) {
      size_t sb = 0, rb = 0;
      for (int i = at[h]; i < at[h + 1]; i++)
        for (int j = 0; j < ni; j++) sb += C[(size_t)M[i0 + j] * n + M[i]], rb += C[(size_t)M[i] * n + M[i0 + j]];
      if (sb > INT_MAX || rb > INT_MAX || so > INT_MAX || ro > INT_MAX)
        return di_errorf(st, DI_ERR_RANGE, "tensor parallel: an all-to-all of %zu bytes is over MPI's limit", sb + rb);
      g.cnt[h] = (int)sb, g.dsp[h] = (int)so, g.hcnt[h] = (int)rb, g.hdsp[h] = (int)ro;
      so += sb, ro += rb;
    }
    uint8_t *S = stage(2, so, st), *R = stage(3, ro, st);
    out = stage(0, out_total, st);
    if (!S || !R || !out) return st->code;
    uint8_t *o = S;
    for (int h = 0; h < H; h++)
      for (int j = 0; j < ni; j++) {
        const int a = M[i0 + j];
        for (int i = at[h]; i < at[h + 1]; i++) {
          const size_t c = C[(size_t)a * n + M[i]];
          memcpy(o, A + (ni > 1 ? ad[j] : 0) + P[(size_t)a * n + M[i]], c), o += c;
        }
      }
    if ((rc = finish(MPI_Ialltoallv(S, g.cnt, g.dsp, MPI_BYTE, R, g.hcnt, g.hdsp, MPI_BYTE, g.leaders, &q), &q,
                     "all-to-all", false, st)))
      return rc;
    /* for my rank b, the block from each rank a in rank order: in host(a)'s
     * part, after the blocks of host(a)'s ranks before a, then a's blocks for my ranks before b */
    o = out;
    for (int j = 0; j < ni; j++)
      for (int a = 0; a < n; a++) {
        const int h = g.host_of[a];
        size_t off = (size_t)g.hdsp[h];
        for (int i = at[h]; M[i] != a; i++)
          for (int k = 0; k < ni; k++) off += C[(size_t)M[i] * n + M[i0 + k]];
        for (int k = 0; k < j; k++) off += C[(size_t)a * n + M[i0 + k]];
        const size_t c = C[(size_t)a * n + M[i0 + j]];
        memcpy(o, R + off, c), o += c;
      }
  }
  if (ni == 1) {
    memcpy(recv, out, out_total);
    return DI_OK;
  }
  if ((rc = counts(row, ni, g.cnt2, g.dsp2, &tot, st))) return rc;
  return finish(MPI_Iscatterv(out, g.cnt2, g.dsp2, MPI_BYTE, recv, g.cnt2[g.lrank], MPI_BYTE, 0, g.node, &q), &q,
                "all-to-all", false, st);
}

di_code di_dist_alltoallv(const void *send, const size_t *sbytes, void *recv, const size_t *rbytes, di_status *st) {
  if (!g.active) {
    memcpy(recv, send, sbytes[0]);
    return DI_OK;
  }
  if (g.failed) return failed_already(st);
  size_t ts, tr;
  di_code rc = counts(sbytes, g.size, g.cnt, g.dsp, &ts, st);
  if (!rc) rc = counts(rbytes, g.size, g.cnt2, g.dsp2, &tr, st);
  if (rc) return rc;
  const double t0 = now();
  MPI_Request r;
  if (!two_level())
    rc = finish(MPI_Ialltoallv(send, g.cnt, g.dsp, MPI_BYTE, recv, g.cnt2, g.dsp2, MPI_BYTE, MPI_COMM_WORLD, &r), &r,
                "all-to-all", false, st);
  else
    rc = alltoall_two(send, sbytes, recv, st);
  if (!rc) account(t0, ts + tr);
  return rc;
}

#else /* built without MPI: one rank */

bool di_dist_built(void) { return false; }
bool di_dist_active(void) { return false; }
int di_dist_rank(void) { return 0; }
int di_dist_size(void) { return 1; }
bool di_dist_failed(void) { return false; }
void di_dist_interrupt(void) {}
di_dist_stats di_dist_get_stats(void) { return (di_dist_stats){0}; }
void di_dist_finalize(void) {}

di_code di_dist_init(int want, di_status *st) {
  if (want <= 1) return DI_OK;
  return di_errorf(st, DI_ERR_UNSUPPORTED,
                   "--tp %d: this deepinfer was built without MPI (install libopenmpi-dev and libhwloc-dev, rebuild)",
                   want);
}

di_code di_dist_bcast(void *buf, size_t bytes, bool idle, di_status *st) {
  (void)buf, (void)bytes, (void)idle, (void)st;
  return DI_OK;
}

di_code di_dist_agree(bool ok, bool *all_ok, di_status *st) {
  (void)st;
  *all_ok = ok;
  return DI_OK;
}

di_code di_dist_allgatherv(const void *send, void *recv, const size_t *bytes, di_status *st) {
  (void)st;
  if (send && send != recv) memcpy(recv, send, bytes[0]);
  return DI_OK;
}

di_code di_dist_gatherv(const void *send, void *recv, const size_t *bytes, di_status *st) {
  (void)st;
  if (send && send != recv) memcpy(recv, send, bytes[0]);
  return DI_OK;
}

di_code di_dist_alltoallv(const void *send, const size_t *sbytes, void *recv, const size_t *rbytes, di_status *st) {
  (void)rbytes, (void)st;
  memcpy(recv, send, sbytes[0]);
  return DI_OK;
}

void di_dist_placement(char *buf, size_t len) { snprintf(buf, len, "built without MPI/hwloc"); }

di_dist_layout di_dist_get_layout(void) { return (di_dist_layout){.hosts = 1}; }
int di_dist_host_of(int rank) { return (void)rank, 0; }
di_code di_dist_measure(di_status *st) { return (void)st, DI_OK; }

#endif
