#include "kv/pool.h"

#include <stdlib.h>
#include <string.h>

#include "kv/prefix.h"
#include "util/mem.h"

size_t di_kv_spec_block_bytes(const di_kv_spec *s, int block_size) {
  size_t elt = s->type == DI_KV_DTYPE_F32 ? 4 : 2;
  return (size_t)s->n_layers * (s->v_in_k ? 1 : 2) * (size_t)block_size * (size_t)s->kv_dim * elt;
}

size_t di_kv_block_bytes(int block_size, int n_layers, int kv_dim, di_kv_dtype type) {
  di_kv_spec s = {.n_layers = n_layers, .kv_dim = kv_dim, .type = type};
  return di_kv_spec_block_bytes(&s, block_size);
}

di_code di_kv_pool_create(di_kv_pool **out, size_t mem_bytes, int block_size, int n_layers, int kv_dim,
                          di_kv_dtype type, di_status *st) {
  di_kv_spec s = {.n_layers = n_layers, .kv_dim = kv_dim, .type = type};
  return di_kv_pool_create_spec(out, mem_bytes, block_size, &s, st);
}

di_code di_kv_pool_create_spec(di_kv_pool **out, size_t mem_bytes, int block_size, const di_kv_spec *s,
                               di_status *st) {
  *out = NULL;
  const int n_layers = s->n_layers, kv_dim = s->kv_dim;
  const di_kv_dtype type = s->type;
  if (block_size <= 0 || n_layers <= 0 || kv_dim <= 0)
    return di_errorf(st, DI_ERR_INVALID, "kv pool: bad geometry (block %d, layers %d, kv_dim %d)", block_size,
                     n_layers, kv_dim);
  size_t bb = di_kv_spec_block_bytes(s, block_size);
  size_t n = mem_bytes / bb;
  if (n < 1)
    return di_errorf(st, DI_ERR_INVALID, "kv pool: --kv-mem %zu bytes is less than one block (%zu bytes)",
                     mem_bytes, bb);
  if (n > INT32_MAX / 2) n = INT32_MAX / 2;
  di_kv_pool *p = calloc(1, sizeof *p);
  if (!p) return di_errorf(st, DI_ERR_NOMEM, "kv pool: out of memory");
  p->block_size = block_size;
  p->n_blocks = (int)n;
  p->n_layers = n_layers;
  p->kv_dim = kv_dim;
  p->type = type;
  p->elt_bytes = type == DI_KV_DTYPE_F32 ? 4 : 2;
  p->block_bytes = bb;
  p->layer_bytes = bb / (size_t)n_layers;
  p->v_in_k = s->v_in_k;
  p->v_off = s->v_in_k ? 0 : p->layer_bytes / 2;
  /* Small pages: blocks are first touched inside decode steps. On VMs whose
   * host takes back free guest memory (this one: no compaction stalls, but
   * 1 GiB of reclaimed memory faults in at 5-13 s), a 2 MiB fault always
   * draws such memory, while 4 KiB ones mostly reuse recently freed pages;
   * a block is read whole, so huge pages buy attention little. */
  p->base = di_alloc_aligned(bb * n, false);
  p->refcount = calloc(n, sizeof *p->refcount);
  p->free_list = malloc(n * sizeof *p->free_list);
  p->group = calloc(n, 1);
  if (!p->base || !p->refcount || !p->free_list || !p->group) {
    di_kv_pool_destroy(p);
    return di_errorf(st, DI_ERR_NOMEM, "kv pool: cannot allocate %zu bytes for %zu blocks", bb * n, n);
  }
  /* Stack order: block 0 is handed out first. */
  for (size_t i = 0; i < n; i++) p->free_list[i] = (int32_t)(n - 1 - i);
  p->n_free = (int)n;
  *out = p;
  return DI_OK;
}

void di_kv_pool_destroy(di_kv_pool *p) {
  if (!p) return;
  di_kv_prefix_disable(p);
  di_free_aligned(p->base, p->block_bytes * (size_t)p->n_blocks);
  free(p->refcount);
  free(p->free_list);
  free(p->group);
  free(p->copy_log);
  free(p);
}

int32_t di_kv_alloc(di_kv_pool *p) { return di_kv_alloc_group(p, DI_KV_GROUP_FULL); }

int32_t di_kv_alloc_group(di_kv_pool *p, int group) {
  int32_t b;
  if (p->n_free > 0)
    b = p->free_list[--p->n_free];
  else if ((b = di_kv_prefix_evict(p)) < 0) /* reuse the least recently used cached block */
    return -1;
  p->refcount[b] = 1;
  p->group[b] = (uint8_t)group;
  if (++p->used_by_group[group] > p->high_by_group[group]) p->high_by_group[group] = p->used_by_group[group];
  int used = di_kv_n_used(p);
  if (used > p->high_water) p->high_water = used;
  return b;
}

void di_kv_ref(di_kv_pool *p, int32_t block) { p->refcount[block]++; }

void di_kv_unref(di_kv_pool *p, int32_t block) {
  if (block < 0 || block >= p->n_blocks || p->refcount[block] <= 0) return; /* defensive: double free */
  if (--p->refcount[block] > 0) return;
  p->used_by_group[p->group[block]]--;
  /* A block that holds a cached prefix stays readable until evicted. */
  if (di_kv_prefix_park(p, block)) return;
  p->free_list[p->n_free++] = block;
}

int di_kv_n_free(const di_kv_pool *p) { return p->n_free; }

int di_kv_n_available(const di_kv_pool *p) { return p->n_free + di_kv_prefix_n_parked(p); }

int di_kv_n_used(const di_kv_pool *p) { return p->n_blocks - di_kv_n_available(p); }

void di_kv_copy_block(di_kv_pool *p, int32_t dst, int32_t src) {
  if (p->log_copies) {
    if (p->n_copy_log + 1 > p->cap_copy_log) {
      int cap = p->cap_copy_log ? 2 * p->cap_copy_log : 16;
      int32_t *q = realloc(p->copy_log, (size_t)cap * 2 * sizeof *q);
      if (!q) p->copy_log_lost = true;
      else p->copy_log = q, p->cap_copy_log = cap;
    }
    if (p->n_copy_log < p->cap_copy_log) {
      p->copy_log[2 * p->n_copy_log] = dst, p->copy_log[2 * p->n_copy_log + 1] = src;
      p->n_copy_log++;
    }
  }
  memcpy(p->base + (size_t)dst * p->block_bytes, p->base + (size_t)src * p->block_bytes, p->block_bytes);
}
