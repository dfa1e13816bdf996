/* deepinfer info: what a model file is and what it needs. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/tp.h"
#include "graph/forward.h"
#include "kv/pool.h"
#include "kv/table.h"
#include "model/model.h"
#include "model/tensors.h"

static const char *usage =
    "usage: deepinfer info -m MODEL [--ctx N] [--kv-type T] [--tp N]\n"
    "\n"
    "Prints the architecture, hyperparameters, weight dtypes, parameter count and\n"
    "the memory the model needs (weights + KV cache for one context).\n"
    "\n"
    "  -m, --model PATH   GGUF file or Hugging Face directory (required)\n"
    "      --ctx N        context for the KV estimate (default: the model's)\n"
    "      --kv-type T    the KV cache's element type for the estimate: f16 (default, as the engine), bf16, f32\n"
    "      --tp N         also what each of N tensor-parallel ranks holds (under mpirun -np N)\n"
    "  -h, --help         this help\n";

static void count_dtype(int counts[DI_DTYPE_COUNT], const di_tensor *t) {
  if (t->data && (unsigned)t->type < DI_DTYPE_COUNT) counts[t->type]++;
}

static void count_each(di_tensor *t, void *u) { count_dtype(u, t); }

/* DeepSeek-V4: what each layer kind keeps per position, and the KV at 8K /
 * 128K / 1M tokens of one sequence in the engine's grouped cache (graph/dsv4.h:
 * compressed rows in the main table, the window tables' ring; 16-position
 * blocks, no checkpoints) beside the one-row-per-position layout (--swa-full). */
/* Prints V4's cache plan; returns the grouped KV of a ctx-token sequence. */
static double info_v4(const di_model *m, const di_kv_spec *spec, long ctx) {
  const di_hparams *hp = &m->hp;
  int n[3] = {0, 0, 0};
  for (int il = 0; il < hp->n_layer; il++) n[hp->v4.attn[il]]++;
  const char *names[3] = {"sliding", "CSA", "HCA"};
  printf("DeepSeek-V4:    window %d, CSA rate %d (top-%d of %d indexer heads x %d), HCA rate %d, hc_mult %d\n",
         hp->v4.window, hp->v4.csa_rate, hp->v4.idx_topk, hp->v4.idx_heads, hp->v4.idx_dim, hp->v4.hca_rate,
         hp->v4.hc_mult);
  for (int k = 0; k < 3; k++)
    if (n[k]) printf("KV row %-7s  %d layers x %d values\n", names[k], n[k], di_forward_v4_row_values(hp, (di_v4_attn)k));
  const int bs = 16;
  const double eb = spec->type == DI_KV_DTYPE_F32 ? 4.0 : 2.0;
  di_v4_geometry g;
  di_forward_v4_geometry(hp, bs, &g);
  const double block = eb * bs * g.unit, main_tok = block / bs;
  /* the compressed rows alone: a block's unit is its need per position, more where the windows need it */
  const double csa = eb * n[1] * (double)hp->head_dim / hp->v4.csa_rate,
               idx = eb * n[1] * (double)hp->v4.idx_dim / hp->v4.csa_rate,
               hca = eb * n[2] * (double)hp->head_dim / hp->v4.hca_rate;
  /* blocks a table keeps between steps (the window, not block-aligned) and
   * while a prefill chunk of 512 runs (the window it reads and the one it leaves) */
  double win = 0, win_step = 0;
  for (int k = 0; k < g.n_tables; k++) {
    const int w = k < g.n_tables - g.n_short ? g.window : g.short_window;
    win += block * ((w - 1 + bs - 1) / bs + 1);
    win_step += block * ((di_kv_window_span(w, 512, true) + bs - 1) / bs + 1);
  }
  printf("KV groups (%s): compressed %.0f B/token (rows %.1f B/token: CSA %.1f + indexer %.1f + HCA %.1f); window %d "
         "tables x %d values = %.0f B/position, %d positions kept",
         spec->type == DI_KV_DTYPE_F32 ? "f32" : spec->type == DI_KV_DTYPE_F16 ? "f16" : "bf16", main_tok,
         csa + idx + hca, csa, idx, hca, g.n_tables, g.unit, eb * g.n_tables * g.unit, g.window);
  if (g.n_short) printf(" (%d of the tables: %d, the CSA compressors' series)", g.n_short, g.short_window);
  printf(": %.1f KiB per sequence (%.1f KiB while a prefill chunk of 512 runs)\n", win / 1024.0, win_step / 1024.0);
  const long ctxs[3] = {8192, 131072, 1048576};
  for (int i = 0; i < 3; i++) {
    double pool = (double)di_kv_spec_block_bytes(spec, 1) * ctxs[i];
    double cmp = block * (double)((ctxs[i] + bs - 1) / bs);
    printf("KV at %-8ld  grouped %.1f MiB (compressed %.1f + window %.2f) = %.0f B/token; one row per position %.1f "
           "MiB\n",
           ctxs[i], (cmp + win) / 1048576.0, cmp / 1048576.0, win / 1048576.0, (cmp + win) / (double)ctxs[i],
           pool / 1048576.0);
  }
  return block * (double)((ctx + bs - 1) / bs) + win;
}

int di_cmd_info(int argc, char **argv) {
  const char *path = NULL;
  long ctx = 0;
  di_kv_dtype kv_type = DI_KV_DTYPE_F16;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      fputs(usage, stdout);
      return 0;
    } else if ((!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) && i + 1 < argc) {
      path = argv[++i];
    } else if (!strcmp(argv[i], "--kv-type") && i + 1 < argc) {
      const char *v = argv[++i];
      if (!strcmp(v, "f16")) kv_type = DI_KV_DTYPE_F16;
      else if (!strcmp(v, "bf16")) kv_type = DI_KV_DTYPE_BF16;
      else if (!strcmp(v, "f32")) kv_type = DI_KV_DTYPE_F32;
      else return di_cli_fail("info", "--kv-type: '%s' must be f16, bf16 or f32", v);
    } else if (!strcmp(argv[i], "--ctx") && i + 1 < argc) {
      if (sscanf(argv[++i], "%ld", &ctx) != 1 || ctx <= 0) return di_cli_fail("info", "--ctx must be positive");
    } else {
      return di_cli_fail("info", "unknown or incomplete option '%s' (see --help)", argv[i]);
    }
  }
  if (!path) return di_cli_fail("info", "missing -m MODEL (see --help)");
  di_model *m = NULL;
  di_status st = {0};
  di_model_opts mo = {.use_mmap = true}; /* info reads metadata only */
  if (di_model_load(path, &mo, &m, &st)) return di_cli_fail("info", "%s", st.msg);
  const di_hparams *hp = &m->hp;
  if (ctx <= 0) ctx = hp->n_ctx_train;
  int counts[DI_DTYPE_COUNT] = {0};
  count_dtype(counts, &m->tok_embd);
  if (m->output.data != m->tok_embd.data) count_dtype(counts, &m->output);
  /* parameters a token reads: all but the routed experts it does not choose
   * and, when the classifier has its own matrix, the embedding rows of
   * other tokens (a tied embedding is read whole by the classifier) */
  uint64_t inactive = 0;
  if (m->output.data != m->tok_embd.data) inactive += (uint64_t)(hp->n_vocab - 1) * (uint64_t)hp->n_embd;
  for (int il = 0; il < hp->n_layer; il++) {
    di_layer_weights *L = &m->layers[il];
    di_layer_each_matrix(hp, L, count_each, counts);
    if (L->ffn == DI_FFN_MOE)
      inactive += (uint64_t)(hp->n_expert - hp->n_expert_used) * 3 * (uint64_t)hp->n_ff_exp * (uint64_t)hp->n_embd;
  }
  static const char *rope_names[] = {"normal", "neox"};
  static const char *scale_names[] = {"none", "linear", "yarn", "llama3"};
  printf("model:          %s\n", path);
  printf("architecture:   %s\n", hp->arch);
  printf("parameters:     %.1f M", (double)m->n_params / 1e6);
  if (inactive) printf(" (%.1f M active per token)", (double)(m->n_params - inactive) / 1e6);
  printf("\n");
  printf("vocab:          %d\n", hp->n_vocab);
  printf("embedding:      %d\n", hp->n_embd);
  printf("layers:         %d\n", hp->n_layer);
  if (m->mtp) printf("MTP:            1 multi-token-prediction module (--spec mtp drafts with it)\n");
  printf("heads:          %d query, %d kv, head dim %d\n", hp->n_head, hp->n_head_kv, hp->head_dim);
  printf("ffn:            %d (%s)\n", hp->n_ff, hp->act == DI_ACT_SILU ? "SwiGLU" : "GeGLU");
  if (hp->attn_kind == DI_ATTN_MLA)
    printf("attention:      MLA, q_lora_rank %d, kv_lora_rank %d, qk nope %d + rope %d, v %d\n", hp->q_lora_rank,
           hp->kv_lora_rank, hp->qk_nope_dim, hp->rope_dim, hp->v_head_dim);
  if (hp->n_expert > 0) {
    static const char *score[] = {"softmax", "sigmoid", "sqrtsoftplus"}, *topk[] = {"greedy", "group_limited_greedy", "noaux_tc"};
    printf("experts:        %d routed (%d per token, width %d), %d shared; first %d layers dense; %s, %s",
           hp->n_expert, hp->n_expert_used, hp->n_ff_exp, hp->n_expert_shared, hp->first_k_dense,
           score[hp->moe_score], topk[hp->moe_topk]);
    if (hp->n_group > 0) printf(", groups %d/%d", hp->topk_group, hp->n_group);
    printf("%s, scale %g", hp->moe_norm_topk ? ", normalized" : "", hp->moe_scale);
    if (hp->attn_kind == DI_ATTN_DSV4) {
      int nh = 0;
      for (int il = 0; il < hp->n_layer; il++) nh += hp->v4.hash[il];
      if (nh) printf("; %d layer%s routed by token id (tid2eid)", nh, nh > 1 ? "s" : "");
    }
    printf("\n");
  }
  printf("context:        %d (trained)\n", hp->n_ctx_train);
  printf("rope:           %s, dim %d, base %g", rope_names[hp->rope_type], hp->rope_dim, hp->rope_base);
  if (hp->rope_base_local != hp->rope_base) printf(", local base %g", hp->rope_base_local);
  printf(", scaling %s", scale_names[hp->rope_scaling]);
  if (hp->rope_scaling) printf(" x%g", hp->rope_factor);
  printf("\n");
  if (hp->sliding_window)
    printf("sliding window: %d%s\n", hp->sliding_window,
           hp->swa_pattern ? " (every layer but each global one)" : " (all layers)");
  if (hp->swa_pattern) printf("global layers:  every %d\n", hp->swa_pattern);
  if (hp->attn_softcap > 0 || hp->final_softcap > 0)
    printf("soft-capping:   attention %g, final %g\n", hp->attn_softcap, hp->final_softcap);
  if (hp->qkv_bias || hp->qk_norm || hp->post_norms || hp->embd_scale || hp->tied_output)
    printf("variants:       %s%s%s%s%s\n", hp->qkv_bias ? "qkv-bias " : "", hp->qk_norm ? "qk-norm " : "",
         hp->post_norms ? "post-norms " : "", hp->embd_scale ? "embedding-scale " : "",
         hp->tied_output ? "tied-output" : "");
  printf("weight dtypes:  ");
  for (int t = 0; t < DI_DTYPE_COUNT; t++)
    if (counts[t]) printf("%s x%d  ", di_dtype_name((di_dtype)t), counts[t]);
  printf("\n");
  di_kv_spec spec;
  di_forward_kv_spec(m, &spec);
  spec.type = kv_type;
  size_t kv = di_kv_spec_block_bytes(&spec, 16) * (size_t)((ctx + 15) / 16);
  size_t per_tok = di_kv_spec_block_bytes(&spec, 1);
  const char *tname = spec.type == DI_KV_DTYPE_F32 ? "f32" : spec.type == DI_KV_DTYPE_F16 ? "f16" : "bf16";
  if (hp->attn_kind == DI_ATTN_DSV4) { /* the engine's grouped plan (one row per position is DI_KV_NO_GROUPS's) */
    kv = (size_t)info_v4(m, &spec, ctx);
  } else {
    printf("KV per token:   %zu bytes (%s, %d layers x %d values%s)", per_tok, tname, spec.n_layers, spec.kv_dim,
           spec.v_in_k ? ": one latent row, read as K and V" : " K + the same V");
    if (hp->attn_kind == DI_ATTN_MLA) /* per-head K (nope + rope) and V, as MHA would cache them */
      printf("; MHA would need %zu", (size_t)hp->n_layer * hp->n_head * (hp->head_dim + hp->v_head_dim) * 2);
    printf("\n");
  }
  printf("memory:         weights %.1f MiB + KV (%s, %ld tokens) %.1f MiB\n", (double)m->weight_bytes / 1048576.0,
         tname, ctx, (double)kv / 1048576.0);
  const int N = di_cli_tp_ranks();
  if (N > 1) { /* what each rank of --tp N holds (model/tp_slice.c, graph/forward.c) */
    di_tp_weights w0 = di_model_tp_plan(m, 0, N);
    printf("--tp %d:         weights split per rank (%.1f MiB replicated on each); KV %s\n", N,
           (double)w0.replicated / 1048576.0, di_tp_heads_split(hp, N)   ? "split by KV head"
           : di_tp_kvrep_split(hp, N) ? "one KV head per rank (each on several ranks)"
                                      : "replicated");
    for (int r = 0; r < N; r++) {
      di_kv_spec rs = spec;
      di_kv_spec own;
      di_forward_kv_spec_rank(m, r, N, &own);
      if (di_tp_kv_split(hp, N)) rs.kv_dim = own.kv_dim;
      size_t kvr = di_kv_spec_block_bytes(&rs, 16) * (size_t)((ctx + 15) / 16);
      printf("  rank %d:       weights %.1f MiB + KV %.1f MiB\n", r, (double)di_model_tp_plan(m, r, N).resident / 1048576.0,
             (double)kvr / 1048576.0);
    }
  }
  di_model_free(m);
  return 0;
}
