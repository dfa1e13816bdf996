/* DESIGN principle 2: a token's logits are bit-identical alone, in any prefill
 * chunking, next to other sequences in a batch, and at any thread count.
 * Checked on stories260K with its weights as stored (F32) and with every
 * matrix whose rows are whole blocks (all but w_down, n_ff = 172) and the
 * classifier re-quantized in place to F16 / Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q5_1
 * (packed, as the loader packs them); then on a synthetic model of the same
 * architecture with every dimension a multiple of 256 (synth_model), where
 * every weight matrix, w_down and the classifier included, is Q4_0 / Q4_K /
 * Q5_K / Q6_K (the matmul kernels are where invariance is easiest to
 * lose), with the batch split by output columns and by whole sequences per
 * thread; then the scalar path is compared with the SIMD one. */
#include <math.h>

#include "backend/backend.h"
#include "backend/cpu/isa.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/quant.h"
#include "check.h"
#include "graph/forward.h"
#include "model/hf.h"

/* Ten sequences, eight past one 64-position attention tile: a decode-like batch
 * (one token of each) has enough tokens for attention to share them between
 * threads by whole tokens (backend/cpu/attention.c). */
#define NSEQ 10
static const int seq_len[NSEQ] = {41, 23, 100, 81, 90, 96, 120, 85, 88, 110};
static int32_t seq_ids[NSEQ][128];
#define MAXT (NSEQ * 64) /* the largest batch: every sequence's 64-token chunk */

typedef struct ctx {
  di_model *m;
  di_kv_pool *kv;
  int32_t blocks[NSEQ][8];
} ctx;

/* Ready a matrix of type t already in w->data: packed where the loader would pack it. */
static void finish_tensor(di_tensor *w, di_dtype t, void *data, size_t rb) {
  w->type = t;
  w->data = data;
  w->row_bytes = rb;
  w->packed = di_cpu_packable(t) && di_cpu_pack(t, data, w->ne[1], w->ne[0]);
}

static void quantize_tensor(di_model *m, di_tensor *w, di_dtype t) {
  size_t rb = di_dtype_row_bytes(t, w->ne[0]);
  float *dst = di_model_alloc_f32(m, (rb * (size_t)w->ne[1] + 3) / 4);
  for (int64_t r = 0; r < w->ne[1]; r++)
    di_cpu_quantize_row(t, (const float *)w->data + r * w->ne[0], (uint8_t *)dst + r * rb, w->ne[0]);
  finish_tensor(w, t, dst, rb);
}

/* Every matrix of whole blocks of t, and the classifier, untied from the F32
 * embedding (which stays F32 for the lookup). Q4_0/Q4_1/Q8_0 etc. run packed
 * (n_ff = 172 leaves w_gate / w_up a tail group of 4). */
static void requantize(di_model *m, di_dtype t) {
  for (int il = 0; il < m->hp.n_layer; il++) {
    di_layer_weights *L = &m->layers[il];
    di_tensor *lw[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
    for (int i = 0; i < 7; i++)
      if (lw[i]->ne[0] % di_dtype_block(t) == 0) quantize_tensor(m, lw[i], t);
  }
  m->output = m->tok_embd;
  quantize_tensor(m, &m->output, t);
}

static uint32_t g_rng = 2463534242u;
static uint32_t rnd32(void) {
  g_rng ^= g_rng << 13, g_rng ^= g_rng >> 17, g_rng ^= g_rng << 5;
  return g_rng;
}
static float rndf(void) { return (float)((double)rnd32() / 4294967296.0 * 2.0 - 1.0); }

/* A ne0 x ne1 matrix of t with random values: 32-element types quantized from
 * floats; the K-quants (no quantizer here) random bytes with d, dmin set so
 * that weights are ~0.05 in size. */
static void random_tensor(di_model *m, di_tensor *w, int64_t ne0, int64_t ne1, di_dtype t) {
  w->ne[0] = ne0, w->ne[1] = ne1;
  size_t rb = di_dtype_row_bytes(t, ne0);
  uint8_t *dst = (uint8_t *)di_model_alloc_f32(m, (rb * (size_t)ne1 + 3) / 4);
  if (di_dtype_block(t) == 256) {
    size_t bb = di_dtype_block_bytes(t);
    for (size_t j = 0; j < rb * (size_t)ne1; j++) dst[j] = (uint8_t)rnd32();
    for (size_t b = 0; b < rb * (size_t)ne1 / bb; b++) {
      uint8_t *blk = dst + b * bb;
      di_fp16 d = di_cpu_f32_to_fp16(t == DI_Q6_K ? 1e-4f : 3e-4f), dm = di_cpu_f32_to_fp16(2e-4f);
      if (t == DI_Q6_K) {
        memcpy(blk + 208, &d, 2);
      } else {
        memcpy(blk, &d, 2);
        memcpy(blk + 2, &dm, 2);
      }
    }
  } else {
    float *row = malloc((size_t)ne0 * sizeof *row);
    for (int64_t r = 0; r < ne1; r++) {
      for (int64_t k = 0; k < ne0; k++) row[k] = 0.05f * rndf();
      di_cpu_quantize_row(t, row, dst + (size_t)r * rb, ne0);
    }
    free(row);
  }
  finish_tensor(w, t, dst, rb);
}

static void ones(di_model *m, di_tensor *w, int64_t n) {
  float *v = di_model_alloc_f32(m, (size_t)n);
  for (int64_t i = 0; i < n; i++) v[i] = 1.0f;
  *w = (di_tensor){.type = DI_F32, .ne = {n, 1}, .row_bytes = (size_t)n * 4, .data = v};
}

/* stories260K's architecture (llama) at every dimension a multiple of 256: 1
 * layer, dim 256, 4 heads of 64 sharing 2 KV heads, FFN 256, a vocabulary of
 * 500 (the classifier's last group is a tail of 4 rows); every matrix of type t.
 * Small, as it costs a few stories260K runs per composition. */
#define SYNTH_VOCAB 500
static void synth_model(di_model *m, di_dtype t) {
  di_hparams *hp = &m->hp;
  hp->n_layer = 1, hp->n_embd = 256, hp->n_head = 4, hp->n_head_kv = 2, hp->head_dim = 64, hp->rope_dim = 64;
  hp->n_ff = 256, hp->n_vocab = SYNTH_VOCAB, hp->tied_output = false;
  const int D = hp->n_embd, kvd = hp->n_head_kv * hp->head_dim;
  float *e = di_model_alloc_f32(m, (size_t)D * SYNTH_VOCAB);
  for (size_t i = 0; i < (size_t)D * SYNTH_VOCAB; i++) e[i] = rndf();
  m->tok_embd = (di_tensor){.type = DI_F32, .ne = {D, SYNTH_VOCAB}, .row_bytes = (size_t)D * 4, .data = e};
  ones(m, &m->output_norm, D);
  random_tensor(m, &m->output, D, SYNTH_VOCAB, t);
  for (int il = 0; il < hp->n_layer; il++) {
    di_layer_weights *L = &m->layers[il];
    *L = (di_layer_weights){0};
    ones(m, &L->attn_norm, D);
    ones(m, &L->ffn_norm, D);
    random_tensor(m, &L->wq, D, D, t);
    random_tensor(m, &L->wk, D, kvd, t);
    random_tensor(m, &L->wv, D, kvd, t);
    random_tensor(m, &L->wo, D, D, t);
    random_tensor(m, &L->w_gate, D, hp->n_ff, t);
    random_tensor(m, &L->w_up, D, hp->n_ff, t);
    random_tensor(m, &L->w_down, hp->n_ff, D, t);
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

/* mode 0: stories260K as stored; 1: re-quantized to t; 2: synth_model of t. */
static void check_type(const char *path, di_dtype t, int mode) {
  ctx c = {0};
  di_status st = {0};
  CHECKF(di_backend_load_model(di_backend_cpu(), path, NULL, &c.m, &st) == DI_OK, "%s", st.msg);
  if (!c.m) return;
  if (mode == 1) requantize(c.m, t);
  if (mode == 2) synth_model(c.m, t);
  const di_hparams *hp = &c.m->hp;
  int kvd = hp->n_head_kv * hp->head_dim, V = hp->n_vocab;
  CHECK(di_kv_pool_create(&c.kv, NSEQ * 8 * di_kv_block_bytes(16, hp->n_layer, kvd, DI_KV_DTYPE_F16), 16, hp->n_layer,
                          kvd, DI_KV_DTYPE_F16, &st) == DI_OK);
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
  /* the synthetic model: a column split, a sequence split, chunked prefill and a decode batch */
  static const size_t synth_cases[] = {0, 2, 4, 8};
  const size_t n_cases = mode == 2 ? sizeof synth_cases / sizeof synth_cases[0] : sizeof cases / sizeof cases[0];
  int bad = 0;
  for (size_t kk = 0; kk < n_cases; kk++) {
    const size_t k = mode == 2 ? synth_cases[kk] : kk;
    run(&c, cases[k].threads, cases[k].chunk, cases[k].mode, cases[k].split, got);
    for (int s = 0; s < NSEQ; s++)
      if (memcmp(ref[s], got[s], (size_t)seq_len[s] * V * 4)) {
        bad++;
        CHECKF(0, "%s mode %d: seq %d differs with threads %d chunk %d mode %d split %d", di_dtype_name(t), mode, s,
               cases[k].threads, cases[k].chunk, cases[k].mode, cases[k].split);
      }
  }
  const char *model = mode == 2 ? "synthetic" : "stories260K";
  printf("row invariance %-11s %-4s: %s in %zu compositions\n", model, di_dtype_name(t), bad ? "FAILED" : "bit-identical",
         n_cases);
  fflush(stdout);
  /* The scalar reference agrees with the SIMD path within a tolerance. An F32
   * KV cache keeps F16 rounding flips from amplifying the difference. */
  di_cpu_isa_level lvl = di_cpu_isa();
  di_kv_pool_destroy(c.kv);
  CHECK(di_kv_pool_create(&c.kv, NSEQ * 8 * di_kv_block_bytes(16, hp->n_layer, kvd, DI_KV_DTYPE_F32), 16, hp->n_layer,
                          kvd, DI_KV_DTYPE_F32, &st) == DI_OK);
  for (int s = 0; s < NSEQ; s++)
    for (int i = 0; i < 8; i++) c.blocks[s][i] = di_kv_alloc(c.kv);
  /* (the synthetic model's kernels are bit-exact with scalar: test_matmul_packed) */
  if (mode != 2 && lvl != DI_ISA_SCALAR && di_cpu_isa_set(DI_ISA_SCALAR)) {
    run(&c, 2, 16, 1, false, got);
    di_cpu_isa_set(lvl);
    run(&c, 2, 16, 1, false, ref);
    double maxd = 0;
    for (int s = 0; s < NSEQ; s++)
      for (size_t i = 0; i < (size_t)seq_len[s] * V; i++) maxd = fmax(maxd, fabs(ref[s][i] - got[s][i]));
    /* Quantized weights: block sums are added in a different order, and an
     * activation landing on a rounding edge can flip one int8 step, which the
     * quantized classifier carries into the logits; 0.5 on logits of magnitude
     * ~20 (random ids on a 260K model) bounds both. */
    double tol = t == DI_F32 || t == DI_F16 ? 1e-3 : 0.5;
    CHECKF(maxd < tol, "%s: scalar vs %s max |diff| %.3g >= %.3g", di_dtype_name(t), di_cpu_isa_name(lvl), maxd, tol);
    printf("scalar vs %s %-11s %-4s: max |diff| %.3g (tolerance %.2g)\n", di_cpu_isa_name(lvl), model, di_dtype_name(t), maxd, tol);
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
      seq_ids[s][i] = (int32_t)(x >> 8) % SYNTH_VOCAB; /* below both vocabularies */
    }
  char path[512];
  di_test_data("models/stories260K/stories260K.gguf", path, sizeof path);
  check_type(path, DI_F32, 0);
  const di_dtype requant[] = {DI_F16, DI_Q8_0, DI_Q4_0, DI_Q4_1, DI_Q5_0, DI_Q5_1};
  for (size_t i = 0; i < sizeof requant / sizeof requant[0]; i++) check_type(path, requant[i], 1);
  const di_dtype synth[] = {DI_Q4_0, DI_Q4_K, DI_Q5_K, DI_Q6_K};
  for (size_t i = 0; i < sizeof synth / sizeof synth[0]; i++) check_type(path, synth[i], 2);
  return di_test_finish("test_row_invariance");
}
