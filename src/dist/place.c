/* Rank placement with hwloc (place.h). */
#include "dist/place.h"

#ifdef DI_HAVE_MPI
#include <errno.h>
#include <hwloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dist/comm.h"

static char g_pin[160] = "not pinned (placement not set up)";

/* Whether cur leaves out some of the host's usable PUs (someone bound us). */
static bool bound(hwloc_topology_t topo, hwloc_const_bitmap_t cur) {
  return !hwloc_bitmap_isincluded(hwloc_topology_get_allowed_cpuset(topo), cur);
}

void di_dist_pin(int lr, int ln) {
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) || hwloc_topology_load(topo)) {
    snprintf(g_pin, sizeof g_pin, "not pinned (hwloc: no topology)");
    return;
  }
  const char *e = getenv("DI_TP_BIND"), *pol = getenv("OMPI_MCA_hwloc_base_binding_policy");
  const bool off = e && !strcmp(e, "0"), force = e && atoi(e) > 0;
  hwloc_bitmap_t cur = hwloc_bitmap_alloc(), want = hwloc_bitmap_alloc();
  const int C = hwloc_get_nbobjs_inside_cpuset_by_type(topo, hwloc_topology_get_allowed_cpuset(topo), HWLOC_OBJ_CORE);
  if (hwloc_get_cpubind(topo, cur, HWLOC_CPUBIND_PROCESS) == 0 && bound(topo, cur)) {
    snprintf(g_pin, sizeof g_pin, "pinned by the launcher");
  } else if (off) {
    snprintf(g_pin, sizeof g_pin, "not pinned (DI_TP_BIND=0)");
  } else if (pol && !strcmp(pol, "none") && !force) {
    snprintf(g_pin, sizeof g_pin, "not pinned (mpirun --bind-to none; DI_TP_BIND=1 pins)");
  } else if (C < ln) {
    snprintf(g_pin, sizeof g_pin, "not pinned (%d ranks on this host's %d cores)", ln, C);
  } else {
    const int c0 = C * lr / ln, c1 = C * (lr + 1) / ln;
    for (int c = c0; c < c1; c++) {
      hwloc_obj_t o = hwloc_get_obj_inside_cpuset_by_type(topo, hwloc_topology_get_allowed_cpuset(topo),
                                                          HWLOC_OBJ_CORE, c);
      if (o) hwloc_bitmap_or(want, want, o->cpuset);
    }
    /* check that it holds: the threads started later inherit the binding */
    if (hwloc_set_cpubind(topo, want, HWLOC_CPUBIND_PROCESS) == 0 &&
        hwloc_get_cpubind(topo, cur, HWLOC_CPUBIND_PROCESS) == 0 && hwloc_bitmap_isequal(cur, want))
      snprintf(g_pin, sizeof g_pin, "pinned by deepinfer to cores %d-%d of %d", c0, c1 - 1, C);
    else
      snprintf(g_pin, sizeof g_pin, "not pinned (hwloc_set_cpubind: %s)", strerror(errno));
  }
  hwloc_bitmap_free(cur);
  hwloc_bitmap_free(want);
  hwloc_topology_destroy(topo);
}

void di_dist_placement(char *buf, size_t len) {
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) || hwloc_topology_load(topo)) {
    snprintf(buf, len, "hwloc: topology unavailable");
    return;
  }
  hwloc_bitmap_t cpus = hwloc_bitmap_alloc(), nodes = hwloc_bitmap_alloc();
  char c[128] = "?", n[64] = "?";
  if (hwloc_get_cpubind(topo, cpus, HWLOC_CPUBIND_PROCESS) == 0) {
    hwloc_bitmap_list_snprintf(c, sizeof c, cpus);
    hwloc_cpuset_to_nodeset(topo, cpus, nodes);
    hwloc_bitmap_list_snprintf(n, sizeof n, nodes);
  }
  int ncore = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE), npu = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
  int ncov = hwloc_get_nbobjs_inside_cpuset_by_type(topo, cpus, HWLOC_OBJ_CORE);
  char host[64] = "?";
  gethostname(host, sizeof host);
  host[sizeof host - 1] = 0;
  snprintf(buf, len, "host %s, PUs %s (%d of %d cores, %d PUs on the host), NUMA node %s; %s", host, c, ncov, ncore,
           npu, n, g_pin);
  hwloc_bitmap_free(cpus);
  hwloc_bitmap_free(nodes);
  hwloc_topology_destroy(topo);
}
#else
void di_dist_pin(int local_rank, int local_size) { (void)local_rank, (void)local_size; }
#endif
