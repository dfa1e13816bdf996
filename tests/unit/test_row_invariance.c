/* DESIGN principle 2: a token's logits are bit-identical alone, in any prefill
 * chunking, next to other sequences in a batch, and at any thread count.
 * Checked on stories260K with its weights as stored (F32) and re-quantized in
 * place to Q8_0 / Q4_0 / Q4_1 / Q5_0 (packed, as the loader packs them) / F16 (the
 * matmul kernels are where invariance is easiest to lose), with the batch split
 * by output columns and by whole sequences per thread; then the scalar path is
 * compared with the SIMD one. */
#include <math.h>

#include "backend/cpu/isa.h"
#include "backend/cpu/matmul.h"
#include "check.h"
#include "graph/forward.h"
#include "model/hf.h"

/* Ten sequences, eight past one 64-position attention tile: a decode-like batch
 * (one token of each) has enough tokens for attention to share them between
 * threads by whole tokens (graph/attention.c). */
#define NSEQ 10
static const int seq_len[NSEQ] = {41, 23, 100, 81, 90, 96, 120, 85, 88, 110};
static int32_t seq_ids[NSEQ][128];
#define MAXT (NSEQ * 64) /* the largest batch: every sequence's 64-token chunk */

typedef struct ctx {
  di_model *m;
  di_kv_pool *kv;
  int32_t blocks[NSEQ][8];
} ctx;

static void requantize(di_model *m, di_dtype t) {
  for (int il = 0; il < m->hp.n_layer; il++) {
    di_layer_weights *L = &m->layers[il];
    di_tensor *lw[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up};
    for (int i = 0; i < 6; i++) {
      di_tensor *w = lw[i];
      size_t rb = di_dtype_row_bytes(t, w->ne[0]);
      float *dst = di_model_alloc_f32(m, (rb * (size_t)w->ne[1] + 3) / 4);
      for (int64_t r = 0; r < w->ne[1]; r++)
        di_cpu_quantize_row(t, (const float *)w->data + r * w->ne[0], (uint8_t *)dst + r * rb, w->ne[0]);
      w->type = t;
      w->data = dst;
      w->row_bytes = rb;
      /* as the loader does: Q4_0/Q4_1/Q8_0 run packed (n_ff = 172 leaves a tail group of 4) */
      w->packed = di_cpu_packable(t) && di_cpu_pack(t, dst, w->ne[1], w->ne[0]);
    }
  }
}

/* Runs all sequences; `mode` 0: each alone in chunks of `chunk`; 1: all
 * sequences' chunks interleaved in the same batches. out[s] gets all logits. */
static void run(ctx *c, int threads, int chunk, int mode, bool split, float *out[NSEQ]) {
  di_forward_ctx *f = NULL;
  di_status st = {0};
  /* split: whole sequences per thread where the batch allows (graph/forward.c) */
  setenv("DI_FORWARD_SPLIT", split ? "1" : "-1", 1);
  CHECKF(di_forward_ctx_create(c->m, MAXT, threads, &f, &st) == DI_OK, "%s", st.msg);
  int V = c->m->hp.n_vocab;
  di_batch_seq seqs[NSEQ];
  for (int s = 0; s < NSEQ; s++) seqs[s] = (di_batch_seq){.blocks = c->blocks[s], .n_blocks = 8};
  int done[NSEQ] = {0};
  int32_t tok[MAXT], pos[MAXT], sq[MAXT];
  bool want[MAXT];
  float *lg = malloc(MAXT * (size_t)V * sizeof(float));
  for (;;) {
    int n = 0;
    for (int s = 0; s < NSEQ; s++) {
      if (mode == 0 && n) break;
      int take = seq_len[s] - done[s] < chunk ? seq_len[s] - done[s] : chunk;
      for (int j = 0; j < take; j++) {
        tok[n] = seq_ids[s][done[s] + j];
        pos[n] = done[s] + j;
        sq[n] = s;
        want[n] = true;
        n++;
      }
    }
    if (!n) break;
    di_batch b = {.n_tokens = n, .tokens = tok, .pos = pos, .seq = sq, .want_logits = want, .n_seqs = NSEQ, .seqs = seqs};
    CHECKF(di_forward(f, c->kv, &b, lg, &st) == DI_OK, "%s", st.msg);
    for (int i = 0; i < n; i++) memcpy(out[sq[i]] + (size_t)pos[i] * V, lg + (size_t)i * V, (size_t)V * 4);
    for (int i = 0; i < n; i++) done[sq[i]] = done[sq[i]] > pos[i] + 1 ? done[sq[i]] : pos[i] + 1;
  }
  free(lg);
  di_forward_ctx_free(f);
}

static void check_type(const char *path, di_dtype t, bool requant) {
  ctx c = {0};
  di_status st = {0};
  CHECKF(di_model_load(path, NULL, &c.m, &st) == DI_OK, "%s", st.msg);
  if (!c.m) return;
  if (requant) requantize(c.m, t);
  const di_hparams *hp = &c.m->hp;
  int kvd = hp->n_head_kv * hp->head_dim, V = hp->n_vocab;
  CHECK(di_kv_pool_create(&c.kv, NSEQ * 8 * di_kv_block_bytes(16, hp->n_layer, kvd, DI_KV_F16), 16, hp->n_layer,
                          kvd, DI_KV_F16, &st) == DI_OK);
  for (int s = 0; s < NSEQ; s++)
    for (int i = 0; i < 8; i++) c.blocks[s][i] = di_kv_alloc(c.kv);
  float *ref[NSEQ], *got[NSEQ];
  for (int s = 0; s < NSEQ; s++) {
    ref[s] = calloc((size_t)seq_len[s] * V, 4);
    got[s] = calloc((size_t)seq_len[s] * V, 4);
  }
  run(&c, 1, 1, 0, false, ref); /* one token at a time, alone, one thread */
  struct {
    int threads, chunk, mode;
    bool split;
  } cases[] = {{2, 5, 1, true},  {2, 5, 1, false}, {2, 64, 0, true},  {2, 1, 0, false}, {1, 7, 0, false},
               {1, 64, 1, false}, {2, 16, 1, true}, {2, 16, 1, false}, {2, 1, 1, false}};
  const size_t n_cases = sizeof cases / sizeof cases[0];
  int bad = 0;
  for (size_t k = 0; k < n_cases; k++) {
    run(&c, cases[k].threads, cases[k].chunk, cases[k].mode, cases[k].split, got);
    for (int s = 0; s < NSEQ; s++)
      if (memcmp(ref[s], got[s], (size_t)seq_len[s] * V * 4)) {
        bad++;
        CHECKF(0, "%s: seq %d differs with threads %d chunk %d mode %d split %d", di_dtype_name(t), s,
               cases[k].threads, cases[k].chunk, cases[k].mode, cases[k].split);
      }
  }
  printf("row invariance %-4s: %s in %zu compositions\n", di_dtype_name(t), bad ? "FAILED" : "bit-identical", n_cases);
  fflush(stdout);
  /* The scalar reference agrees with the SIMD path within a tolerance. An F32
   * KV cache keeps F16 rounding flips from amplifying the difference. */
  di_cpu_isa_level lvl = di_cpu_isa();
  di_kv_pool_destroy(c.kv);
  CHECK(di_kv_pool_create(&c.kv, NSEQ * 8 * di_kv_block_bytes(16, hp->n_layer, kvd, DI_KV_F32), 16, hp->n_layer,
                          kvd, DI_KV_F32, &st) == DI_OK);
  for (int s = 0; s < NSEQ; s++)
    for (int i = 0; i < 8; i++) c.blocks[s][i] = di_kv_alloc(c.kv);
  if (lvl != DI_ISA_SCALAR && di_cpu_isa_set(DI_ISA_SCALAR)) {
    run(&c, 2, 16, 1, false, got);
    di_cpu_isa_set(lvl);
    run(&c, 2, 16, 1, false, ref);
    double maxd = 0;
    for (int s = 0; s < NSEQ; s++)
      for (size_t i = 0; i < (size_t)seq_len[s] * V; i++) maxd = fmax(maxd, fabs(ref[s][i] - got[s][i]));
    /* Quantized weights: block sums are added in a different order, and an
     * activation landing on a rounding edge can flip one int8 step; 0.25 on
     * logits of magnitude ~20 (random ids on a 260K model) bounds both. */
    double tol = t == DI_F32 || t == DI_F16 ? 1e-3 : 0.25;
    CHECKF(maxd < tol, "%s: scalar vs %s max |diff| %.3g >= %.3g", di_dtype_name(t), di_cpu_isa_name(lvl), maxd, tol);
    printf("scalar vs %s %-4s: max |diff| %.3g (tolerance %.2g)\n", di_cpu_isa_name(lvl), di_dtype_name(t), maxd, tol);
  }
  for (int s = 0; s < NSEQ; s++) free(ref[s]), free(got[s]);
  di_kv_pool_destroy(c.kv);
  di_model_free(c.m);
}

int main(void) {
  uint32_t x = 12345;
  for (int s = 0; s < NSEQ; s++)
    for (int i = 0; i < seq_len[s]; i++) {
      x = x * 1664525u + 1013904223u;
      seq_ids[s][i] = (int32_t)(x >> 8) % 512;
    }
  char path[512];
  di_test_data("models/stories260K/stories260K.gguf", path, sizeof path);
  check_type(path, DI_F32, false);
  check_type(path, DI_F16, true);
  check_type(path, DI_Q8_0, true);
  check_type(path, DI_Q4_0, true);
  check_type(path, DI_Q4_1, true);
  check_type(path, DI_Q5_0, true);
  check_type(path, DI_Q5_1, true);
  return di_test_finish("test_row_invariance");
}
