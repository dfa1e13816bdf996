/* The collectives of dist/comm.h give the same bytes in every layout: run as
 * one process it checks the one-rank path; CTest also runs it under mpirun
 * (2 and 3 ranks, flat and two-level with DI_TP_HOSTS pretending several
 * hosts; see CMakeLists.txt) with the rank count as its argument. Part sizes
 * vary per round and rank, zero included, as a decode step's do. */
#include <stdint.h>

#include "check.h"
#include "dist/comm.h"

/* A byte every rank can predict: of part (a -> b), offset i, round k. */
static uint8_t val(int a, int b, size_t i, int k) { return (uint8_t)(a * 31 + b * 7 + (int)i * 13 + k * 5 + 1); }
static size_t part(int a, int b, int k) { return (size_t)((a * 97 + b * 53 + k * 211) % 700) * ((a + b + k) % 5 != 0); }

int main(int argc, char **argv) {
  const int want = argc > 1 ? atoi(argv[1]) : 1;
  di_status st = {0};
  /* one rank: the path without MPI started, as `--tp 1` runs */
  if (want > 1 && di_dist_init(want, &st)) {
    fprintf(stderr, "test_dist: %s\n", st.msg);
    return 1;
  }
  const int n = di_dist_size(), me = di_dist_rank();
  const di_dist_layout lay = di_dist_get_layout();
  if (me == 0)
    printf("test_dist: %d ranks, %d hosts, %s\n", n, lay.hosts, lay.two_level ? "two-level" : "flat");
  size_t *bytes = calloc((size_t)n, sizeof *bytes), *rb = calloc((size_t)n, sizeof *rb);
  uint8_t *send = malloc(8192), *recv = malloc(8192 * (size_t)n), *exp = malloc(8192 * (size_t)n);
  CHECK(bytes && rb && send && recv && exp);
  for (int k = 0; k < 12 && bytes && rb && send && recv && exp; k++) {
    /* all-gather and gather: part (r -> r) from every rank r, in rank order */
    size_t tot = 0, mine = 0;
    for (int r = 0; r < n; r++) {
      bytes[r] = part(r, r, k);
      if (r == me) mine = tot;
      for (size_t i = 0; i < bytes[r]; i++) exp[tot + i] = val(r, r, i, k);
      tot += bytes[r];
    }
    for (size_t i = 0; i < bytes[me]; i++) send[i] = val(me, me, i, k);
    for (int in_place = 0; in_place < 2; in_place++) {
      memset(recv, 0xee, tot + 1);
      if (in_place) memcpy(recv + mine, send, bytes[me]);
      CHECK(di_dist_allgatherv(in_place ? NULL : send, recv, bytes, &st) == DI_OK);
      CHECKF(!memcmp(recv, exp, tot) && recv[tot] == 0xee, "all-gather, round %d, in place %d", k, in_place);
      memset(recv, 0xee, tot + 1);
      if (in_place) memcpy(recv, send, bytes[me]); /* a part in place is at recv's start */
      CHECK(di_dist_gatherv(in_place ? NULL : send, recv, bytes, &st) == DI_OK);
      if (me == 0) CHECKF(!memcmp(recv, exp, tot) && recv[tot] == 0xee, "gather, round %d, in place %d", k, in_place);
    }
    /* broadcast of rank 0's part (0 -> 1) */
    const size_t bb = part(0, 1, k) + 1;
    for (size_t i = 0; i < bb; i++) recv[i] = me == 0 ? val(0, 1, i, k) : 0;
    CHECK(di_dist_bcast(recv, bb, false, &st) == DI_OK);
    size_t bad = 0;
    for (size_t i = 0; i < bb; i++) bad += recv[i] != val(0, 1, i, k);
    CHECKF(!bad, "broadcast, round %d: %zu bytes differ", k, bad);
    /* all-to-all: part (me -> b) to every b; from every a, part (a -> me) in rank order */
    size_t so = 0, ro = 0;
    for (int b = 0; b < n; b++) {
      bytes[b] = part(me, b, k), rb[b] = part(b, me, k);
      for (size_t i = 0; i < bytes[b]; i++) send[so + i] = val(me, b, i, k);
      for (size_t i = 0; i < rb[b]; i++) exp[ro + i] = val(b, me, i, k);
      so += bytes[b], ro += rb[b];
    }
    memset(recv, 0xee, ro + 1);
    CHECK(di_dist_alltoallv(send, bytes, recv, rb, &st) == DI_OK);
    CHECKF(!memcmp(recv, exp, ro) && recv[ro] == 0xee, "all-to-all, round %d", k);
  }
  if (st.code) fprintf(stderr, "test_dist: %s\n", st.msg);
  free(bytes), free(rb), free(send), free(recv), free(exp);
  di_dist_finalize();
  return di_test_finish(me == 0 ? "test_dist" : "test_dist (rank)");
}
