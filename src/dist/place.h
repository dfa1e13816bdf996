/* Where a rank of a tensor-parallel job runs (hwloc): pinning at start-up
 * and the placement `info --tp N` prints (comm.h di_dist_placement). */
#ifndef DI_DIST_PLACE_H
#define DI_DIST_PLACE_H

/* Pins this process, rank local_rank of local_size ranks on its host, to its
 * share of the host's cores: cores [C*i/n, C*(i+1)/n) of C. Left as it is
 * where the launcher bound it already (mpirun's default at -np <= 2), where
 * mpirun was told --bind-to none (DI_TP_BIND=1 pins anyway), where
 * DI_TP_BIND=0, or where the host has fewer cores than ranks; the placement
 * line says which. */
void di_dist_pin(int local_rank, int local_size);

#endif
