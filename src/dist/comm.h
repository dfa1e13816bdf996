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
 * second later: the requests in flight get their error within that second). */
void di_dist_interrupt(void);

/* Time inside collectives and bytes moved, since start (for bench). */
typedef struct di_dist_stats {
  uint64_t ops, bytes;
  double seconds;
} di_dist_stats;
di_dist_stats di_dist_get_stats(void);

/* Where this rank runs (hwloc): cores of its binding and their NUMA nodes. */
void di_dist_placement(char *buf, size_t len);
/* Ping-pong between rank 0 and every other rank: mean round trip / 2 for
 * `bytes`-byte messages, in seconds (on rank 0; other ranks get 0). */
di_code di_dist_pingpong(size_t bytes, int reps, double *one_way, di_status *st);

#endif
