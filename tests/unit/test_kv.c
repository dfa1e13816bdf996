/* KV block pool, block tables (copy-on-write, window release) and the
 * prefix cache (hash chain, exact verification, LRU parking and eviction). */
#include "check.h"
#include "kv/prefix.h"
#include "kv/table.h"

static di_kv_pool *pool(int n_blocks, int bs, bool prefix) {
  di_kv_pool *p = NULL;
  di_status st = {0};
  CHECK(di_kv_pool_create(&p, di_kv_block_bytes(bs, 2, 4, DI_KV_DTYPE_F32) * (size_t)n_blocks, bs, 2, 4, DI_KV_DTYPE_F32, &st) == DI_OK);
  if (p && prefix) CHECK(di_kv_prefix_enable(p, &st) == DI_OK);
  return p;
}

static void test_pool(void) {
  di_kv_pool *p = pool(4, 8, false);
  di_status st = {0};
  di_kv_pool *bad = NULL;
  CHECK(di_kv_pool_create(&bad, 10, 8, 2, 4, DI_KV_DTYPE_F32, &st) == DI_ERR_INVALID && strstr(st.msg, "less than one block"));
  int32_t a = di_kv_alloc(p), b = di_kv_alloc(p), c = di_kv_alloc(p), d = di_kv_alloc(p);
  CHECK(a >= 0 && b >= 0 && c >= 0 && d >= 0 && di_kv_alloc(p) == -1);
  CHECK(di_kv_n_used(p) == 4 && p->high_water == 4);
  di_kv_ref(p, a);
  di_kv_unref(p, a);
  CHECK(di_kv_n_free(p) == 0);
  di_kv_unref(p, a);
  di_kv_unref(p, a); /* double free is ignored, not corrupting */
  CHECK(di_kv_n_free(p) == 1);
  di_kv_unref(p, b);
  di_kv_unref(p, c);
  di_kv_unref(p, d);
  CHECK(di_kv_n_used(p) == 0);
  di_kv_pool_destroy(p);
}

static void test_table_cow_and_window(void) {
  di_kv_pool *p = pool(16, 4, false);
  di_status st = {0};
  di_kv_table t, u;
  CHECK(di_kv_table_init(&t, 4, 40, &st) == DI_OK && di_kv_table_init(&u, 4, 40, &st) == DI_OK);
  CHECK(di_kv_table_blocks_needed(p, &t, 0, 10) == 3);
  di_kv_table_prepare(p, &t, 0, 10);
  CHECK(t.n_blocks == 3 && di_kv_n_used(p) == 3);
  float *k = di_kv_k(p, t.blocks[2], 1);
  k[0] = 42;
  di_kv_table_fork(p, &u, &t);
  CHECK(p->refcount[t.blocks[2]] == 2 && di_kv_n_used(p) == 3);
  /* Writing position 10 (block 2, shared and partial) copies it first. */
  CHECK(di_kv_table_blocks_needed(p, &u, 10, 11) == 1);
  di_kv_table_prepare(p, &u, 10, 11);
  CHECK(u.blocks[2] != t.blocks[2] && u.blocks[0] == t.blocks[0] && p->refcount[t.blocks[2]] == 1);
  CHECK(((float *)di_kv_k(p, u.blocks[2], 1))[0] == 42);
  /* Window: positions < 9 no longer needed -> blocks 0 and 1 go. */
  di_kv_table_release_before(p, &u, 9);
  CHECK(u.blocks[0] == -1 && u.blocks[1] == -1 && u.n_released == 2 && p->refcount[t.blocks[0]] == 1);
  di_kv_table_release(p, &u);
  di_kv_table_release(p, &t);
  CHECK(di_kv_n_used(p) == 0);
  di_kv_table_free(&t);
  di_kv_table_free(&u);
  di_kv_pool_destroy(p);
}

static void test_prefix(void) {
  di_kv_pool *p = pool(6, 4, true);
  di_status st = {0};
  int32_t toks[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  di_kv_table a, b, c;
  di_kv_table_init(&a, 4, 12, &st);
  di_kv_table_init(&b, 4, 12, &st);
  di_kv_table_init(&c, 4, 12, &st);
  CHECK(di_kv_table_match_prefix(p, &a, toks, 12) == 0);
  di_kv_table_prepare(p, &a, 0, 11);
  di_kv_table_commit(p, &a, toks, 11); /* blocks 0, 1 full; block 2 partial */
  CHECK(di_kv_prefix_n_cached(p) == 2);
  /* Same first 8 tokens: two blocks hit (max (12-1)/4 = 2). */
  CHECK(di_kv_table_match_prefix(p, &b, toks, 12) == 8);
  CHECK(b.blocks[0] == a.blocks[0] && b.blocks[1] == a.blocks[1] && p->refcount[a.blocks[0]] == 2);
  /* A different second block: only the first hits (the chain includes the parent). */
  int32_t other[12] = {1, 2, 3, 4, 5, 6, 7, 0, 9, 10, 11, 12};
  CHECK(di_kv_table_match_prefix(p, &c, other, 12) == 4);
  /* Whole prompt equal to one block: the last token must still be computed. */
  di_kv_table d;
  di_kv_table_init(&d, 4, 12, &st);
  CHECK(di_kv_table_match_prefix(p, &d, toks, 4) == 0);
  di_kv_table_release(p, &b);
  di_kv_table_release(p, &c);
  int32_t a0 = a.blocks[0], a1 = a.blocks[1];
  di_kv_table_release(p, &a);
  /* Cached blocks are parked, not freed; still counted as available. */
  CHECK(di_kv_n_used(p) == 0 && di_kv_prefix_n_parked(p) == 2 && di_kv_n_free(p) == 4);
  CHECK(di_kv_table_match_prefix(p, &b, toks, 12) == 8 && b.blocks[0] == a0 && b.blocks[1] == a1);
  CHECK(di_kv_prefix_n_parked(p) == 0);
  di_kv_table_release(p, &b);
  /* Allocating everything evicts parked blocks LRU-first: the tail (block 1) before the head. */
  int32_t got[6];
  for (int i = 0; i < 5; i++) got[i] = di_kv_alloc(p);
  CHECK(got[4] == a1 && di_kv_prefix_n_cached(p) == 1);
  got[5] = di_kv_alloc(p);
  CHECK(got[5] == a0 && di_kv_prefix_n_cached(p) == 0 && di_kv_alloc(p) == -1);
  for (int i = 0; i < 6; i++) di_kv_unref(p, got[i]);
  CHECK(di_kv_n_free(p) == 6);
  di_kv_table_free(&a);
  di_kv_table_free(&b);
  di_kv_table_free(&c);
  di_kv_table_free(&d);
  di_kv_pool_destroy(p);
}

/* align (DeepSeek-V4's sliced HCA rows: a block's values depend on the
 * positions up to the next multiple of align): hits and registrations stop at
 * multiples of it, and a write reaching one copies the shared blocks back to
 * the previous one first; a write that reaches none copies only its partial block. */
static void test_table_align(void) {
  di_kv_pool *p = pool(24, 4, true);
  di_status st = {0};
  int32_t toks[24];
  for (int i = 0; i < 24; i++) toks[i] = i + 1;
  di_kv_table a, b, c;
  di_kv_table_init(&a, 4, 24, &st), di_kv_table_init(&b, 4, 24, &st), di_kv_table_init(&c, 4, 24, &st);
  a.align = b.align = c.align = 8;
  di_kv_table_prepare(p, &a, 0, 14);
  di_kv_table_commit(p, &a, toks, 14); /* 3 full blocks, registered only up to position 8 */
  CHECK(a.n_hashed == 2 && di_kv_prefix_n_cached(p) == 2);
  CHECK(di_kv_table_match_prefix(p, &b, toks, 24) == 8); /* 2 blocks, not 3 (nor 5) */
  di_kv_table_release(p, &b);
  di_kv_table_fork(p, &b, &a);
  /* b writes 14..16: it closes the window [8, 16), so blocks 2 and 3 change: both copied */
  CHECK(di_kv_table_blocks_needed(p, &b, 14, 16) == 2);
  di_kv_table_prepare(p, &b, 14, 16);
  CHECK(b.blocks[2] != a.blocks[2] && b.blocks[3] != a.blocks[3] && b.blocks[1] == a.blocks[1]);
  /* a writes 14..15: no window closes, only its partial block 3 (now its own) changes */
  CHECK(di_kv_table_blocks_needed(p, &a, 14, 15) == 0);
  di_kv_table_fork(p, &c, &a);
  CHECK(di_kv_table_blocks_needed(p, &c, 14, 15) == 1 && di_kv_table_blocks_needed(p, &c, 14, 16) == 2);
  di_kv_table_release(p, &a), di_kv_table_release(p, &b), di_kv_table_release(p, &c);
  di_kv_table_free(&a), di_kv_table_free(&b), di_kv_table_free(&c);
  di_kv_pool_destroy(p);
}

int main(void) {
  test_pool();
  test_table_align();
  test_table_cow_and_window();
  test_prefix();
  return di_test_finish("test_kv");
}
