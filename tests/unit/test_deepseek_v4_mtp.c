/* DeepSeek-V4's multi-token-prediction block (--spec mtp's drafter) against
 * the reference assembled from transformers' deepseek_v4 blocks
 * (tests/golden/make_goldens_deepseek_v4_mtp.py): the module's logits at every
 * pair position of a 96-token sequence (window 16: it overflows several times)
 * within 1e-4, in both cache layouts (one row per position; the grouped
 * window tables), fed whole and in chunks (bit-identical to whole). The
 * checkpoint is gen_tiny.py's "tiny-mtp" (tiny's main weights and an mtp.0.*
 * block), regenerated with numpy; without mtp.* tensors the same
 * model loads with no module; one MTP tensor missing is refused naming it. */
#include <jansson.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/backend.h"
#include "check.h"
#include "graph/forward.h"

#define MAXN 128
#define NBLK 16
#define BS 16

static char cache_dir[512];

static const char *src_dir(void) {
  const char *s = getenv("DI_SOURCE_DIR");
  return s ? s : "..";
}

static bool make_model(void) {
  const char *c = getenv("DI_TEST_CACHE"), *home = getenv("HOME");
  if (c) snprintf(cache_dir, sizeof cache_dir, "%s/deepseek-v4-mtp-g2", c);
  else snprintf(cache_dir, sizeof cache_dir, "%s/.cache/deepinfer/gen/deepseek-v4-mtp-g2", home ? home : "/tmp");
  char p[700], py[600], tmp[600], cmd[4096];
  struct stat sb;
  snprintf(p, sizeof p, "%s/tiny-mtp-partial/model.safetensors", cache_dir);
  if (stat(p, &sb) == 0) return true;
  snprintf(py, sizeof py, "%s/.venv/bin/python", src_dir());
  if (access(py, X_OK) != 0) snprintf(py, sizeof py, "python3");
  snprintf(tmp, sizeof tmp, "%s.tmp%d", cache_dir, (int)getpid());
  snprintf(cmd, sizeof cmd,
           "'%s' '%s/tests/golden/deepseek_v4/gen_tiny.py' --out '%s' --config tiny-mtp,tiny-mtp-absent,tiny-mtp-partial >/dev/null && rm -rf '%s' && mv '%s' '%s'",
           py, src_dir(), tmp, cache_dir, tmp, cache_dir);
  int rc = system(cmd);
  CHECKF(rc == 0, "generating the model failed: %s", cmd);
  return rc == 0;
}

typedef struct cache {
  di_kv_pool *kv;
  int n_tables;                                  /* grouped: window tables; 0: one row per position */
  int32_t tab[1 + DI_KV_MAX_SWA_TABLES][NBLK];
  di_batch_seq s;
} cache;

static bool cache_open(cache *c, const di_model *m, bool grouped) {
  memset(c, 0, sizeof *c);
  di_kv_spec spec;
  di_status st = {0};
  if (grouped) {
    di_v4_geometry g;
    di_forward_v4_geometry(&m->hp, BS, &g);
    spec = (di_kv_spec){.n_layers = 1, .kv_dim = g.unit, .v_in_k = true, .type = DI_KV_DTYPE_F32};
    c->n_tables = g.n_tables;
  } else {
    di_forward_kv_spec(m, &spec);
  }
  CHECKF(di_kv_pool_create_spec(&c->kv, (size_t)(1 + c->n_tables) * NBLK * di_kv_spec_block_bytes(&spec, BS), BS, &spec,
                                &st) == DI_OK, "%s", st.msg);
  if (!c->kv) return false;
  for (int k = 0; k <= c->n_tables; k++)
    for (int i = 0; i < NBLK; i++) c->tab[k][i] = di_kv_alloc(c->kv);
  c->s = (di_batch_seq){.blocks = c->tab[0], .n_blocks = NBLK, .n_swa_blocks = NBLK};
  for (int k = 0; k < c->n_tables; k++) c->s.swa[k] = c->tab[1 + k];
  return true;
}

/* The main forward over ids[0, n) and then the module over the pairs (hidden
 * at p, token p + 1) for p in [0, n - 1), both in chunks of `chunk`: the
 * module's logits into out[n - 1][V]. */
static void run_mtp(const di_model *m, di_forward_ctx *f, cache *c, const int32_t *ids, int n, int chunk, bool kv_only,
                    float *out) {
  const int V = m->hp.n_vocab, W = m->hp.v4.hc_mult * m->hp.n_embd;
  static int32_t pos[MAXN], seq[MAXN];
  static bool want[MAXN];
  static float hidden[MAXN * 256], main_logits[MAXN * 128];
  di_status st = {0};
  CHECK(W <= 256 && V <= 128);
  for (int i = 0, k; i < n; i += k) { /* the main model's streams at every position */
    k = chunk < n - i ? chunk : n - i;
    for (int j = 0; j < k; j++) pos[j] = i + j, seq[j] = 0, want[j] = false;
    want[k - 1] = true;
    di_forward_capture_hidden(f, hidden + (size_t)i * W);
    di_batch b = {.n_tokens = k, .tokens = ids + i, .pos = pos, .seq = seq, .want_logits = want, .n_seqs = 1,
                  .seqs = &c->s, .n_swa_tables = c->n_tables};
    CHECKF(di_forward(f, c->kv, &b, main_logits, &st) == DI_OK, "%s", st.msg);
  }
  di_forward_capture_hidden(f, NULL);
  for (int i = 0, k; i < n - 1; i += k) {
    const int end = kv_only && i < n - 2 ? n - 2 : n - 1; /* K/V only: all but the last pair, then that one */
    k = chunk < end - i ? chunk : end - i;
    for (int j = 0; j < k; j++) pos[j] = i + j, seq[j] = 0, want[j] = !kv_only || i + j == n - 2;
    di_batch b = {.n_tokens = k, .tokens = ids + i + 1, .pos = pos, .seq = seq, .want_logits = want, .n_seqs = 1,
                  .seqs = &c->s, .n_swa_tables = c->n_tables, .kv_only = kv_only && end == n - 2};
    float *o = kv_only ? out + (size_t)(n - 2) * V : out + (size_t)i * V;
    CHECKF(di_forward_mtp(f, c->kv, &b, hidden + (size_t)i * W, o, NULL, &st) == DI_OK, "%s", st.msg);
  }
}

/* The block from llama.cpp's GGUF layout (to_gguf.py: blk.4.nextn.*, F32
 * matrices and experts): the same logits as the checkpoint's, once the HF
 * model's block takes the main hyper head (a combined GGUF has no name for the
 * block's own; llama.cpp's MTP graph reads output_hc_* too). */
static void check_gguf(const int32_t *ids, int n) {
  char gg[700], cmd[4096];
  snprintf(gg, sizeof gg, "%s/tiny-mtp.gguf", cache_dir);
  struct stat sb;
  if (stat(gg, &sb) != 0) {
    snprintf(cmd, sizeof cmd, "'%s/.venv/bin/python' '%s/tests/golden/deepseek_v4/to_gguf.py' --hf '%s/tiny-mtp' --out '%s' --experts F32",
             src_dir(), src_dir(), cache_dir, gg);
    CHECKF(system(cmd) == 0, "%s", cmd);
  }
  di_model *a = NULL, *b = NULL;
  di_status st = {0};
  char p[700];
  snprintf(p, sizeof p, "%s/tiny-mtp", cache_dir);
  CHECKF(di_backend_load_model(di_backend_cpu(), p, NULL, &a, &st) == DI_OK, "%s", st.msg);
  CHECKF(di_backend_load_model(di_backend_cpu(), gg, NULL, &b, &st) == DI_OK, "%s", st.msg);
  if (!a || !b || !b->mtp) {
    CHECK(b && b->mtp);
    di_model_free(a), di_model_free(b);
    return;
  }
  CHECK(b->hp.n_layer == a->hp.n_layer && b->hp.n_nextn == 1);
  a->mtp->hc_head_fn = a->hc_head_fn, a->mtp->hc_head_base = a->hc_head_base, a->mtp->hc_head_scale = a->hc_head_scale;
  const int V = a->hp.n_vocab;
  float *la = malloc((size_t)n * V * sizeof(float)), *lb = malloc((size_t)n * V * sizeof(float));
  di_model *ms[2] = {a, b};
  float *out[2] = {la, lb};
  for (int k = 0; k < 2; k++) {
    ms[k]->hp.v4.mtp_kv = true;
    di_forward_ctx *f = NULL;
    cache c;
    CHECKF(di_forward_ctx_create(ms[k], n, 1, &f, &st) == DI_OK, "%s", st.msg);
    if (f && cache_open(&c, ms[k], true)) {
      run_mtp(ms[k], f, &c, ids, n, 9, false, out[k]);
      di_kv_pool_destroy(c.kv);
    }
    di_forward_ctx_free(f);
  }
  double worst = 0;
  for (size_t i = 0; i < (size_t)(n - 1) * V; i++) worst = fmax(worst, fabs(la[i] - lb[i]));
  CHECKF(worst <= 1e-4, "GGUF MTP logits: max |diff| %.3g vs the checkpoint's", worst);
  printf("tiny-mtp GGUF (llama.cpp's nextn names): MTP logits max |diff| %.2e vs the checkpoint\n", worst);
  free(la), free(lb);
  di_model_free(a), di_model_free(b);
}

static void check_golden(void) {
  char p[1024];
  snprintf(p, sizeof p, "%s/tests/golden/deepseek_v4/tiny-mtp.json", src_dir());
  json_t *g = json_load_file(p, 0, NULL);
  CHECKF(g != NULL, "cannot read %s", p);
  if (!g) return;
  json_t *tj = json_object_get(g, "tokens");
  const int n = (int)json_array_size(tj), V = (int)json_integer_value(json_object_get(g, "vocab"));
  int32_t ids[MAXN];
  CHECK(n <= MAXN);
  for (int i = 0; i < n; i++) ids[i] = (int32_t)json_integer_value(json_array_get(tj, i));
  json_decref(g);
  snprintf(p, sizeof p, "%s/tests/golden/deepseek_v4/tiny-mtp.logits.f32", src_dir());
  size_t nref = 0;
  float *ref = di_test_read_f32(p, &nref);
  CHECKF(ref && nref == (size_t)(n - 1) * V, "golden logits %s", p);
  di_model *m = NULL;
  di_status st = {0};
  snprintf(p, sizeof p, "%s/tiny-mtp", cache_dir);
  CHECKF(di_backend_load_model(di_backend_cpu(), p, NULL, &m, &st) == DI_OK, "%s", st.msg);
  if (!m || !ref) return;
  CHECK(m->mtp != NULL && m->hp.n_vocab == V);
  m->hp.v4.mtp_kv = true; /* what the engine sets under --spec mtp, before sizing the cache */
  di_forward_ctx *f = NULL;
  CHECKF(di_forward_ctx_create(m, n, 1, &f, &st) == DI_OK, "%s", st.msg);
  float *full = malloc((size_t)n * V * sizeof(float)), *alt = malloc((size_t)n * V * sizeof(float));
  for (int grouped = 0; grouped < 2 && f; grouped++) {
    cache c;
    if (!cache_open(&c, m, grouped)) break;
    run_mtp(m, f, &c, ids, n, n, false, full);
    double worst = 0;
    for (size_t i = 0; i < (size_t)(n - 1) * V; i++) worst = fmax(worst, fabs(full[i] - ref[i]));
    CHECKF(worst <= 1e-4, "MTP logits (%s): max |diff| %.3g vs the reference", grouped ? "grouped" : "one row", worst);
    printf("tiny-mtp %s cache: MTP logits at %d pairs, max |diff| %.2e vs transformers' blocks\n",
           grouped ? "grouped" : "one-row", n - 1, worst);
    const int chunks[] = {1, 5, 17};
    for (int k = 0; k < 3; k++) {
      run_mtp(m, f, &c, ids, n, chunks[k], false, alt);
      CHECKF(!memcmp(alt, full, (size_t)(n - 1) * V * sizeof(float)), "MTP logits in chunks of %d differ", chunks[k]);
      /* the engine's catch-up, in a fresh cache: every earlier pair's K/V row alone, then the
       * drafting pair (the same logits) */
      cache fresh;
      if (!cache_open(&fresh, m, grouped)) break;
      memset(alt, 0, (size_t)n * V * sizeof(float));
      run_mtp(m, f, &fresh, ids, n, chunks[k], true, alt);
      CHECKF(!memcmp(alt + (size_t)(n - 2) * V, full + (size_t)(n - 2) * V, (size_t)V * sizeof(float)),
             "MTP logits after K/V-only pairs in chunks of %d differ", chunks[k]);
      di_kv_pool_destroy(fresh.kv);
    }
    di_kv_pool_destroy(c.kv);
  }
  /* without the cache's MTP window the module refuses to run */
  m->hp.v4.mtp_kv = false;
  cache c;
  if (f && cache_open(&c, m, false)) {
    int32_t pos0 = 0, seq0 = 0;
    float h[256] = {0};
    di_batch b = {.n_tokens = 1, .tokens = ids, .pos = &pos0, .seq = &seq0, .n_seqs = 1, .seqs = &c.s};
    CHECK(di_forward_mtp(f, c.kv, &b, h, alt, NULL, &st) != DI_OK && strstr(st.msg, "MTP"));
    di_kv_pool_destroy(c.kv);
  }
  free(full), free(alt), free(ref);
  di_forward_ctx_free(f);
  di_model_free(m);
  check_gguf(ids, n);
}

/* The checkpoint without its mtp.* tensors (config still counting one MTP
 * layer) loads without a module; one MTP tensor missing is an error naming it. */
static void check_without(void) {
  char p[700];
  di_model *m = NULL;
  di_status st = {0};
  snprintf(p, sizeof p, "%s/tiny-mtp-absent", cache_dir);
  CHECKF(di_backend_load_model(di_backend_cpu(), p, NULL, &m, &st) == DI_OK, "%s", st.msg);
  CHECK(m && !m->mtp && m->hp.n_nextn == 1);
  di_model_free(m);
  m = NULL;
  snprintf(p, sizeof p, "%s/tiny-mtp-partial", cache_dir);
  di_code rc = di_backend_load_model(di_backend_cpu(), p, NULL, &m, &st);
  CHECKF(rc != DI_OK && strstr(st.msg, "mtp.0.h_proj.weight"), "rc %d: %s", rc, st.msg);
  di_model_free(m);
}

int main(void) {
  if (!make_model()) return 1;
  check_golden();
  check_without();
  printf("%d checks, %d failures\n", di_test_checks, di_test_failures);
  return di_test_failures != 0;
}
