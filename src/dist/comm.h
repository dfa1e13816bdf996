/* Communication between the processes of one tensor-parallel job (Open MPI).
 * Rank 0 leads: it runs the command (serve, run, bench) and broadcasts each
 * step's inputs; the other ranks follow. Every operation here is a collective
 * of all ranks, started nonblocking and polled against a deadline, so a rank
 * that died or hangs turns into an error within DI_TP_TIMEOUT_MS (default
 * 5000) instead of a silent hang. Without MPI (DI_MPI off) the job has one
 * rank and di_dist_init refuses more. */
#ifndef DI_DIST_COMM_H
#define DI_DIST_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/status.h"

/* Starts MPI and checks that the job has `want` ranks (mpirun -np want). */
di_code di_dist_init(int want, di_status *st);
/* Ends MPI (a no-op when not started). */
void di_dist_finalize(void);
bool di_dist_active(void); /* started with more than one rank */
int di_dist_rank(void);    /* 0 when not active */
int di_dist_size(void);    /* 1 when not active */
/* Whether this binary was built with MPI. */
bool di_dist_built(void);

/* Rank 0's bytes into every rank's buf. idle: the followers may wait without
 * a deadline (they wait for the leader's next step, which may be far off). */
di_code di_dist_bcast(void *buf, size_t bytes, bool idle, di_status *st);
/* Whether every rank is ok; waits without a deadline (a rank loading a large
 * model may take long; one that fails to load says so and exits). */
di_code di_dist_agree(bool ok, bool *all_ok, di_status *st);
/* Every rank's send (bytes[rank] bytes) into recv in rank order on all ranks;
 * send NULL: this rank's part is already in place in recv. */
di_code di_dist_allgatherv(const void *send, void *recv, const size_t *bytes, di_status *st);
/* Every rank's send (bytes[rank] bytes) into recv in rank order on rank 0
 * only (recv is not touched elsewhere); send NULL on rank 0: its part is in place. */
di_code di_dist_gatherv(const void *send, void *recv, const size_t *bytes, di_status *st);
/* send holds sbytes[r] bytes for each rank r in rank order; recv gets rbytes[r]
 * from each rank r in rank order. */
di_code di_dist_alltoallv(const void *send, const size_t *sbytes, void *recv, const size_t *rbytes, di_status *st);

/* After an error every operation fails at once with the first error; the
 * leader then exits (see di_dist_init) a second later, after the engine has
 * handed the error to the requests in flight. */
bool di_dist_failed(void);
/* The process got a stop signal: operations in progress and later fail now
 * (mpirun sends SIGTERM to the other ranks when one exits, then SIGKILL a
 * second later or as soon as another rank exits; the followers, which catch
 * the signal, exit half a second after it, so the requests in flight get
 * their error within that half second). */
void di_dist_interrupt(void);

/* Time inside collectives and bytes moved, since start (for bench). */
typedef struct di_dist_stats {
  uint64_t ops, bytes;
  double seconds;
} di_dist_stats;
di_dist_stats di_dist_get_stats(void);

/* Where this rank runs (hwloc): cores of its binding, their NUMA nodes and
 * whether it was pinned (dist/place.h). */
void di_dist_placement(char *buf, size_t len);

/* The collectives' layout. Ranks are grouped by host (MPI_COMM_TYPE_SHARED;
 * DI_TP_HOSTS=K pretends rank r is on host r % K, to test the two-level path
 * on one machine). With more than one host, the links are measured at start
 * (8 B and 1 MiB ping-pongs inside a host and between the first two hosts)
 * and rank 0 chooses between flat collectives and two-level ones (gather on
 * the host's first rank through shared memory, exchange between those ranks
 * across hosts, broadcast or scatter on the host) by a model of a 64 KB
 * all-gather's time in each (DI_TP_LAYOUT=flat|two-level forces it). Both
 * move the same bytes to the same places. */
typedef struct di_dist_link {
  double lat_s, gbs; /* one way: an 8 B message's seconds, 1 MiB's GB/s; 0: not measured */
} di_dist_link;
typedef struct di_dist_layout {
  int hosts;
  bool fake;               /* hosts from DI_TP_HOSTS */
  bool two_level, forced;  /* forced: by DI_TP_LAYOUT */
  di_dist_link intra, inter;
  double flat_s, two_s;    /* the model's 64 KB all-gather (rank 0) */
} di_dist_layout;
di_dist_layout di_dist_get_layout(void);
int di_dist_host_of(int rank);
/* Measures the links again and chooses the layout (a collective of every rank). */
di_code di_dist_measure(di_status *st);

#endif
