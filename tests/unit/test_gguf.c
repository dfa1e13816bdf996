#include "check.h"
#include "model/gguf.h"

static void test_stories(void) {
  char path[512];
  di_test_data("models/stories260K/stories260K.gguf", path, sizeof path);
  di_gguf *g = NULL;
  di_status st = {0};
  CHECKF(di_gguf_open(path, false, &g, &st) == DI_OK, "%s", st.msg);
  if (!g) return;
  CHECK(di_gguf_version(g) == 3);
  CHECK(di_gguf_n_tensors(g) == 47);
  uint64_t v = 0;
  CHECK(di_gguf_get_u64(g, "llama.block_count", &v) && v == 5);
  char *arch = di_gguf_get_str(g, "general.architecture");
  CHECK(arch && !strcmp(arch, "llama"));
  free(arch);
  const di_gguf_tensor *t = di_gguf_find_tensor(g, "blk.0.attn_k.weight");
  CHECK(t && t->ne[0] == 64 && t->ne[1] == 32 && t->type == DI_F32);
  const di_gguf_kv *tok = di_gguf_find(g, "tokenizer.ggml.tokens");
  CHECK(tok && tok->type == DI_GGUF_ARRAY && tok->arr_type == DI_GGUF_STRING && tok->arr_n == 512);
  CHECK(tok && tok->strs[1].len == 3 && !memcmp(tok->strs[1].ptr, "<s>", 3));
  di_gguf_close(g);
}

/* Every truncation of a valid file must fail cleanly with a message. */
static void test_truncations(void) {
  char path[512];
  di_test_data("models/stories260K/stories260K.gguf", path, sizeof path);
  FILE *f = fopen(path, "rb");
  CHECK(f != NULL);
  if (!f) return;
  static unsigned char buf[2 << 20];
  size_t n = fread(buf, 1, sizeof buf, f);
  fclose(f);
  int failures = 0;
  for (size_t cut = 0; cut < n; cut += (cut < 20000 ? 7 : 4099)) {
    di_gguf *g = NULL;
    di_status st = {0};
    di_code rc = di_gguf_open_memory(buf, cut, "cut.gguf", &g, &st);
    if (rc == DI_OK || st.msg[0] == 0 || !strstr(st.msg, "cut.gguf")) failures++;
    di_gguf_close(g);
  }
  CHECKF(failures == 0, "%d truncations were not rejected with a message", failures);
  /* bad magic */
  unsigned char bad[64] = "GGUX";
  di_gguf *g = NULL;
  di_status st = {0};
  CHECK(di_gguf_open_memory(bad, sizeof bad, "bad.gguf", &g, &st) == DI_ERR_FORMAT);
  CHECK(strstr(st.msg, "magic") != NULL);
  /* absurd tensor count */
  unsigned char absurd[64] = {'G', 'G', 'U', 'F', 3, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f};
  di_status st2 = {0};
  CHECK(di_gguf_open_memory(absurd, sizeof absurd, "absurd.gguf", &g, &st2) == DI_ERR_FORMAT);
  CHECK(strstr(st2.msg, "absurd") != NULL);
  di_status st3 = {0};
  CHECK(di_gguf_open("/nonexistent/x.gguf", false, &g, &st3) == DI_ERR_IO);
}

int main(void) {
  test_stories();
  test_truncations();
  return di_test_finish("test_gguf");
}
