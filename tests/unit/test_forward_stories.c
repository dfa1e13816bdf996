/* stories260K through the whole loader + op program against the llama2.c and
 * transformers references in ../shared/data/models/stories260K/refs. */
#include <jansson.h>
#include <math.h>

#include "backend/backend.h"
#include "check.h"
#include "graph/forward.h"

typedef struct runner {
  di_model *m;
  di_forward_ctx *f;
  di_kv_pool *kv;
  int32_t blocks[64];
} runner;

static void runner_open(runner *r, const char *path, int chunk, di_kv_dtype kvt) {
  di_status st = {0};
  memset(r, 0, sizeof *r);
  CHECKF(di_backend_load_model(di_backend_cpu(), path, NULL, &r->m, &st) == DI_OK, "%s", st.msg);
  if (!r->m) return;
  const di_hparams *hp = &r->m->hp;
  CHECK(di_kv_pool_create(&r->kv, 64 * di_kv_block_bytes(16, hp->n_layer, hp->n_head_kv * hp->head_dim, kvt), 16,
                          hp->n_layer, hp->n_head_kv * hp->head_dim, kvt, &st) == DI_OK);
  for (int i = 0; i < 32; i++) r->blocks[i] = di_kv_alloc(r->kv);
  CHECKF(di_forward_ctx_create(r->m, chunk, 1, &r->f, &st) == DI_OK, "%s", st.msg);
}

static void runner_close(runner *r) {
  di_forward_ctx_free(r->f);
  di_kv_pool_destroy(r->kv);
  di_model_free(r->m);
}

/* All-position logits for ids, fed in chunks of `chunk`. */
static void run_all(runner *r, const int32_t *ids, int n, int chunk, float *out) {
  int V = r->m->hp.n_vocab;
  int32_t pos[512], seq[512] = {0};
  bool want[512];
  di_batch_seq s = {.blocks = r->blocks, .n_blocks = 32};
  for (int i = 0; i < n; i += chunk) {
    int c = n - i < chunk ? n - i : chunk;
    for (int j = 0; j < c; j++) pos[j] = i + j, want[j] = true;
    di_batch b = {.n_tokens = c, .tokens = ids + i, .pos = pos, .seq = seq, .want_logits = want, .n_seqs = 1, .seqs = &s};
    di_status st = {0};
    CHECKF(di_forward(r->f, r->kv, &b, out + (size_t)i * V, &st) == DI_OK, "%s", st.msg);
  }
}

static void check_logits(const char *model_path, const char *name, int chunk) {
  char p[512], q[600];
  di_test_data("models/stories260K/refs/logits_", p, sizeof p);
  snprintf(q, sizeof q, "%s%s.ids.json", p, name);
  json_t *j = json_load_file(q, 0, NULL);
  CHECK(j != NULL);
  if (!j) return;
  json_t *ja = json_object_get(j, "ids");
  int n = (int)json_array_size(ja);
  int32_t *ids = malloc(n * sizeof *ids);
  for (int i = 0; i < n; i++) ids[i] = (int32_t)json_integer_value(json_array_get(ja, i));
  json_decref(j);
  snprintf(q, sizeof q, "%s%s.f32", p, name);
  size_t nref;
  float *ref = di_test_read_f32(q, &nref);
  CHECK(ref && nref == (size_t)n * 512);
  runner r;
  runner_open(&r, model_path, chunk, DI_KV_DTYPE_F32);
  float *out = malloc((size_t)n * 512 * sizeof(float));
  run_all(&r, ids, n, chunk, out);
  double maxd = 0;
  for (size_t i = 0; i < (size_t)n * 512; i++) maxd = fmax(maxd, fabs(out[i] - ref[i]));
  CHECKF(maxd < 1e-4, "%s on %s (chunk %d): max |diff| %.3g", name, model_path, chunk, maxd);
  printf("logits %-10s chunk %3d %s: max |diff| = %.3g\n", name, chunk, strstr(model_path, "hf") ? "hf  " : "gguf",
         maxd);
  runner_close(&r);
  free(out);
  free(ref);
  free(ids);
}

static int argmax(const float *x, int n) {
  int b = 0;
  for (int i = 1; i < n; i++)
    if (x[i] > x[b]) b = i;
  return b;
}

/* Greedy decode one token at a time, as llama2.c run.c does. */
static void check_greedy(const char *model_path) {
  char p[512];
  json_t *j = json_load_file(di_test_data("models/stories260K/refs/greedy_llama2c.json", p, sizeof p), 0, NULL);
  CHECK(j != NULL);
  if (!j) return;
  runner r;
  runner_open(&r, model_path, 64, DI_KV_DTYPE_F32);
  json_t *runs = json_object_get(j, "runs");
  int ok = 0, total = (int)json_array_size(runs);
  for (int k = 0; k < total; k++) {
    json_t *run = json_array_get(runs, k);
    json_t *pj = json_object_get(run, "prompt_ids"), *gj = json_object_get(run, "generated_ids");
    int np = (int)json_array_size(pj), ng = (int)json_array_size(gj);
    int32_t ids[512];
    for (int i = 0; i < np; i++) ids[i] = (int32_t)json_integer_value(json_array_get(pj, i));
    float *logits = malloc((size_t)np * 512 * sizeof(float));
    run_all(&r, ids, np, 64, logits);
    int next = argmax(logits + (size_t)(np - 1) * 512, 512);
    int n = np, match = 1;
    for (int g = 0; g < ng; g++) {
      if (next != json_integer_value(json_array_get(gj, g))) {
        match = 0;
        break;
      }
      ids[n] = next;
      int32_t pos = n, seq = 0;
      bool want = true;
      di_batch_seq s = {.blocks = r.blocks, .n_blocks = 32};
      di_batch b = {.n_tokens = 1, .tokens = &ids[n], .pos = &pos, .seq = &seq, .want_logits = &want, .n_seqs = 1, .seqs = &s};
      di_status st = {0};
      if (g + 1 < ng || json_is_true(json_object_get(run, "stopped_on_bos"))) {
        CHECK(di_forward(r.f, r.kv, &b, logits, &st) == DI_OK);
        next = argmax(logits, 512);
      }
      n++;
    }
    if (match && json_is_true(json_object_get(run, "stopped_on_bos"))) match = next == 1;
    CHECKF(match, "greedy run %d (%s) differs from llama2.c", k, json_string_value(json_object_get(run, "prompt")));
    ok += match;
    free(logits);
  }
  printf("greedy %s: %d/%d runs identical to llama2.c\n", strstr(model_path, "hf") ? "hf  " : "gguf", ok, total);
  runner_close(&r);
  json_decref(j);
}

int main(void) {
  char gguf[512], hf[512];
  di_test_data("models/stories260K/stories260K.gguf", gguf, sizeof gguf);
  di_test_data("models/stories260K/hf", hf, sizeof hf);
  const char *names[] = {"story", "docsample", "random96", "greedy512"};
  for (int i = 0; i < 4; i++) check_logits(gguf, names[i], 64);
  check_logits(hf, "story", 7);
  check_logits(hf, "greedy512", 512);
  check_greedy(gguf);
  check_greedy(hf);
  return di_test_finish("test_forward_stories");
}
