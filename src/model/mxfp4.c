/* MXFP4 matrices (GGUF type 39; llama.cpp's DeepSeek-V4 files hold every
 * routed expert in it). A block is one E8M0 byte e and 16 bytes of E2M1 codes
 * (byte j: value j in the low nibble, value j + 16 in the high one); value =
 * kv[code] * 2^(e - 128) with kv the small integers below (ggml's
 * kvalues_mxfp4). Quantized files keep them as stored where the backend has
 * kernels (the CPU's on x86: MXFP4 x Q8_0 activations, matmul_pack_*.c), so
 * decode reads 17 bytes per 32 weights. Elsewhere they are rewritten at load,
 * losslessly: a block is a Q8_0 block with q = kv and d = 2^(e - 128), exact
 * wherever f16 holds that power of two (e in [104, 143]: every real weight),
 * which gives the native kernel's bits too (the same integer sums times the
 * same d_w * d_a). Files whose other matrices are float (F32/F16/BF16
 * conversions, the reference) get F32, so they compute without activation
 * quantization, as the Hugging Face checkpoint of the same weights does. */
#include "model/mxfp4.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/hf.h"
#include "model/tensors.h"
#include "util/fp16.h"

static const int8_t kv[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* Does the file hold block-quantized matrices besides MXFP4 ones? */
static bool file_quantized(const di_gguf *g) {
  for (size_t i = 0; i < di_gguf_n_tensors(g); i++) {
    const di_gguf_tensor *t = di_gguf_tensor_at(g, i);
    if (t->type != DI_MXFP4 && di_dtype_block(t->type) > 1) return true;
  }
  return false;
}

/* Every block's scale exactly an f16 (normal or subnormal) power of two? */
static bool q8_exact(const di_tensor *t) {
  const uint8_t *b = t->data;
  const int64_t nb = t->ne[0] / 32 * t->ne[1];
  for (int64_t i = 0; i < nb; i++)
    if (b[17 * i] < 104 || b[17 * i] > 143) return false;
  return true;
}

typedef struct conv {
  di_model *m;
  di_status *st;
  bool to_q8;
  di_code rc;
} conv;

static void convert(di_tensor *t, void *u) {
  conv *c = u;
  if (c->rc || !t->data || t->type != DI_MXFP4) return;
  const bool q8 = c->to_q8 && q8_exact(t);
  const di_dtype type = q8 ? DI_Q8_0 : DI_F32;
  const size_t row_bytes = di_dtype_row_bytes(type, t->ne[0]), n = row_bytes * (size_t)t->ne[1];
  uint8_t *dst = (uint8_t *)di_model_alloc_f32(c->m, (n + 3) / 4);
  if (!dst) {
    c->rc = di_errorf(c->st, DI_ERR_NOMEM, "%s: out of memory converting %s", c->m->path, t->name);
    return;
  }
  const uint8_t *src = t->data;
  const int64_t nb = t->ne[0] / 32 * t->ne[1];
  for (int64_t i = 0; i < nb; i++) {
    const uint8_t *b = src + 17 * i;
    int8_t q[32];
    for (int j = 0; j < 16; j++) q[j] = kv[b[1 + j] & 15], q[j + 16] = kv[b[1 + j] >> 4];
    if (q8) {
      uint8_t *o = dst + 34 * i;
      uint16_t d = di_f32_to_f16(ldexpf(1.0f, (int)b[0] - 128));
      memcpy(o, &d, 2);
      memcpy(o + 2, q, 32);
    } else {
      const float d = ldexpf(1.0f, (int)b[0] - 128); /* exact, subnormal below 2^-126 */
      float *o = (float *)dst + 32 * i;
      for (int j = 0; j < 32; j++) o[j] = (float)q[j] * d;
    }
  }
  c->m->weight_bytes += n - (size_t)nb * 17;
  t->type = type;
  t->data = dst;
  t->row_bytes = row_bytes;
}

di_code di_model_convert_mxfp4(di_model *m, bool keep_quantized, di_status *st) {
  if (!m->gguf) return DI_OK;
  bool any = false;
  for (size_t i = 0; i < di_gguf_n_tensors(m->gguf); i++) any |= di_gguf_tensor_at(m->gguf, i)->type == DI_MXFP4;
  if (!any) return DI_OK;
  conv c = {.m = m, .st = st, .to_q8 = file_quantized(m->gguf)};
  if (c.to_q8 && keep_quantized) return DI_OK; /* the backend multiplies MXFP4 as stored */
  convert(&m->tok_embd, &c);
  convert(&m->output, &c);
  convert(&m->hc_head_fn, &c);
  for (int il = 0; il < m->hp.n_layer; il++) di_layer_each_matrix(&m->hp, &m->layers[il], convert, &c);
  if (m->mtp) {
    convert(&m->mtp->eh_proj, &c);
    convert(&m->mtp->head, &c);
    di_layer_each_matrix(&m->hp, &m->mtp->layer, convert, &c);
  }
  return c.rc;
}
