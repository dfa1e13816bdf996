/* The op program: one builder turns the model's descriptor and a batch into
 * ops (matmul, rms_norm, rope, attention, glu, ...) that the CPU backend runs.
 * No architecture has its own forward function. */
#ifndef DI_GRAPH_FORWARD_H
#define DI_GRAPH_FORWARD_H

#include "graph/batch.h"
#include "kv/pool.h"
#include "model/model.h"

typedef struct di_forward_ctx di_forward_ctx;

/* Scratch for batches of up to max_tokens tokens; threads = 0 means all cores. */
di_code di_forward_ctx_create(const di_model *m, int max_tokens, int threads, di_forward_ctx **out,
                              di_status *st);
void di_forward_ctx_free(di_forward_ctx *f);

/* The KV pool geometry the model's layers need (per-head K/V, or MLA's latent row). */
void di_forward_kv_spec(const di_model *m, di_kv_spec *s);
/* The same for rank `rank` of a `size`-rank job (tensor parallel attention
 * split by heads holds only the rank's KV heads); di_forward_kv_spec is this
 * process's own (m->tp_rank, m->tp_size). */
void di_forward_kv_spec_rank(const di_model *m, int rank, int size, di_kv_spec *s);
/* DeepSeek-V4: the values a layer of this kind keeps per position (graph/dsv4.h). */
int di_forward_v4_row_values(const di_hparams *hp, di_v4_attn kind);

/* DeepSeek-V4's grouped cache (graph/dsv4.h) for pool blocks of block_size
 * positions: a pool of one layer of `unit` floats per position
 * (di_kv_spec kv_dim, v_in_k; f32, f16 or bf16: --kv-type), whose sequences have a main FULL table of
 * compressed rows (`main_floats` of each block used) and `n_tables` WINDOW
 * tables keeping `window` positions of raw rows and compressor projections
 * (`window_floats` per position, of n_tables * unit), of which the last
 * `n_short` keep only `short_window` positions (2 x the CSA rate: the CSA
 * compressors' and indexers' series, which no row reads further back). */
typedef struct di_v4_geometry {
  int unit, n_tables, window;
  int n_short, short_window;
  int main_floats, window_floats;
  int align; /* positions: prefix hits and commits of the main table stop at multiples of it (dsv4.h) */
} di_v4_geometry;
void di_forward_v4_geometry(const di_hparams *hp, int block_size, di_v4_geometry *g);

/* Runs one batch: writes K/V of every token into kv, and the logits of the
 * tokens with want_logits (in batch order) into logits[n_out][n_vocab].
 * Row invariant: a token's logits do not depend on the rest of the batch. */
di_code di_forward(di_forward_ctx *f, di_kv_pool *kv, const di_batch *b, float *logits, di_status *st);

/* From now on, di_forward also writes every token's last hidden state (the
 * final norm's input, [n_tokens][n_embd]) to rows (NULL: stop). */
void di_forward_capture_hidden(di_forward_ctx *f, float *rows);

/* The model's MTP module (m->mtp) over a batch: token t of the batch is the
 * token at pos + 1 and hidden[t] the main model's hidden state at pos (both
 * as in training: the embedding of the next token beside the state before
 * it); its K/V go to the pool's layer n_layer (a pool of n_layer + 1 layers)
 * at pos. Writes the logits of the tokens with want_logits (the token at
 * pos + 2) and, if hidden_out, each token's output state (to chain it). */
di_code di_forward_mtp(di_forward_ctx *f, di_kv_pool *kv, const di_batch *b, const float *hidden, float *logits,
                       float *hidden_out, di_status *st);

#endif
