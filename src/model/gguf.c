#include "model/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/mem.h"
#include "util/progress.h"
#include "util/readall.h"

#define GGUF_MAGIC 0x46554747u /* "GGUF" little-endian */
#define GGUF_MAX_PARTS 64
#define GGUF_MAX_DIMS 4

typedef struct gguf_part {
  const uint8_t *base;
  size_t size;
  bool mapped;  /* munmap on close */
  bool owned;   /* di_free_aligned on close */
} gguf_part;

struct di_gguf {
  char *path;
  uint32_t version;
  di_gguf_kv *kvs;
  size_t n_kv;
  di_gguf_tensor *tensors;
  size_t n_tensors;
  gguf_part parts[GGUF_MAX_PARTS];
  int n_parts;
};

static const struct {
  int block;
  size_t bytes;
  const char *name;
} dtype_info[DI_DTYPE_COUNT] = {
    [DI_F32] = {1, 4, "F32"},       [DI_F16] = {1, 2, "F16"},
    [DI_Q4_0] = {32, 18, "Q4_0"},   [DI_Q4_1] = {32, 20, "Q4_1"},
    [DI_Q5_0] = {32, 22, "Q5_0"},   [DI_Q5_1] = {32, 24, "Q5_1"},
    [DI_Q8_0] = {32, 34, "Q8_0"},   [DI_Q8_1] = {32, 36, "Q8_1"},
    [DI_Q2_K] = {256, 84, "Q2_K"},  [DI_Q3_K] = {256, 110, "Q3_K"},
    [DI_Q4_K] = {256, 144, "Q4_K"}, [DI_Q5_K] = {256, 176, "Q5_K"},
    [DI_Q6_K] = {256, 210, "Q6_K"}, [DI_Q8_K] = {256, 292, "Q8_K"},
    [DI_I8] = {1, 1, "I8"},         [DI_I16] = {1, 2, "I16"},
    [DI_I32] = {1, 4, "I32"},       [DI_I64] = {1, 8, "I64"},
    [DI_F64] = {1, 8, "F64"},       [DI_BF16] = {1, 2, "BF16"},
    [DI_MXFP4] = {32, 17, "MXFP4"},
};

bool di_dtype_known(di_dtype t) { return (unsigned)t < DI_DTYPE_COUNT && dtype_info[t].block; }
int di_dtype_block(di_dtype t) { return di_dtype_known(t) ? dtype_info[t].block : 0; }
size_t di_dtype_block_bytes(di_dtype t) { return di_dtype_known(t) ? dtype_info[t].bytes : 0; }
const char *di_dtype_name(di_dtype t) { return di_dtype_known(t) ? dtype_info[t].name : "?"; }
size_t di_dtype_row_bytes(di_dtype t, int64_t n) {
  return (size_t)(n / di_dtype_block(t)) * di_dtype_block_bytes(t);
}

/* ---- bounded cursor over one file image ---- */

typedef struct cursor {
  const uint8_t *p, *end, *base;
  const char *file;
  di_status *st;
} cursor;

static bool need(cursor *c, uint64_t n, const char *what) {
  if ((uint64_t)(c->end - c->p) < n) {
    di_errorf(c->st, DI_ERR_FORMAT, "%s: truncated at byte %zu reading %s (need %llu bytes, %zu left)",
              c->file, (size_t)(c->p - c->base), what, (unsigned long long)n, (size_t)(c->end - c->p));
    return false;
  }
  return true;
}

#define RD(T, NAME)                                             \
  static bool rd_##NAME(cursor *c, T *out, const char *what) { \
    if (!need(c, sizeof(T), what)) return false;               \
    memcpy(out, c->p, sizeof(T));                              \
    c->p += sizeof(T);                                         \
    return true;                                               \
  }
RD(uint32_t, u32)
RD(uint64_t, u64)

static bool rd_str(cursor *c, uint32_t version, di_gguf_str *s, const char *what) {
  uint64_t len;
  if (version == 1) {
    uint32_t l32;
    if (!rd_u32(c, &l32, what)) return false;
    len = l32;
  } else if (!rd_u64(c, &len, what)) {
    return false;
  }
  if (!need(c, len, what)) return false;
  s->len = len;
  s->ptr = (const char *)c->p;
  c->p += len;
  return true;
}

static size_t scalar_size(di_gguf_type t) {
  switch (t) {
    case DI_GGUF_UINT8: case DI_GGUF_INT8: case DI_GGUF_BOOL: return 1;
    case DI_GGUF_UINT16: case DI_GGUF_INT16: return 2;
    case DI_GGUF_UINT32: case DI_GGUF_INT32: case DI_GGUF_FLOAT32: return 4;
    case DI_GGUF_UINT64: case DI_GGUF_INT64: case DI_GGUF_FLOAT64: return 8;
    default: return 0;
  }
}

static void set_scalar(di_gguf_kv *kv, const uint8_t *p) {
  switch (kv->type) {
    case DI_GGUF_UINT8: kv->v.u64 = p[0]; break;
    case DI_GGUF_INT8: kv->v.i64 = (int8_t)p[0]; break;
    case DI_GGUF_BOOL: kv->v.b = p[0] != 0; break;
    case DI_GGUF_UINT16: { uint16_t x; memcpy(&x, p, 2); kv->v.u64 = x; break; }
    case DI_GGUF_INT16: { int16_t x; memcpy(&x, p, 2); kv->v.i64 = x; break; }
    case DI_GGUF_UINT32: { uint32_t x; memcpy(&x, p, 4); kv->v.u64 = x; break; }
    case DI_GGUF_INT32: { int32_t x; memcpy(&x, p, 4); kv->v.i64 = x; break; }
    case DI_GGUF_FLOAT32: { float x; memcpy(&x, p, 4); kv->v.f64 = x; break; }
    case DI_GGUF_UINT64: memcpy(&kv->v.u64, p, 8); break;
    case DI_GGUF_INT64: memcpy(&kv->v.i64, p, 8); break;
    case DI_GGUF_FLOAT64: memcpy(&kv->v.f64, p, 8); break;
    default: break;
  }
}

static char *dup_str(di_gguf_str s) {
  char *r = malloc(s.len + 1);
  if (!r) return NULL;
  memcpy(r, s.ptr, s.len);
  r[s.len] = 0;
  return r;
}

/* Parses one file image, appending its kvs (first part only) and tensors. */
static di_code parse_part(di_gguf *g, int part, const char *file, di_status *st, bool keep_kv) {
  const gguf_part *pp = &g->parts[part];
  cursor c = {pp->base, pp->base + pp->size, pp->base, file, st};
  uint32_t magic, version;
  uint64_t n_tensors, n_kv;
  if (!rd_u32(&c, &magic, "magic")) return st->code;
  if (magic != GGUF_MAGIC)
    return di_errorf(st, DI_ERR_FORMAT, "%s: not a GGUF file (bad magic 0x%08x)", file, magic);
  if (!rd_u32(&c, &version, "version")) return st->code;
  if (version < 2 || version > 3)
    return di_errorf(st, DI_ERR_UNSUPPORTED, "%s: GGUF version %u not supported (need 2 or 3)", file, version);
  if (!rd_u64(&c, &n_tensors, "tensor count") || !rd_u64(&c, &n_kv, "metadata count")) return st->code;
  /* Every kv needs at least 12 bytes and every tensor info 24: reject absurd
   * counts before allocating anything. */
  if (n_kv > pp->size / 12 || n_tensors > pp->size / 24)
    return di_errorf(st, DI_ERR_FORMAT, "%s: absurd counts (%llu tensors, %llu metadata keys) for a %zu-byte file",
                     file, (unsigned long long)n_tensors, (unsigned long long)n_kv, pp->size);
  if (part == 0) g->version = version;

  uint64_t alignment = 32;
  di_gguf_kv *kvs = NULL;
  if (keep_kv) {
    kvs = calloc(n_kv ? n_kv : 1, sizeof *kvs);
    if (!kvs) return di_errorf(st, DI_ERR_NOMEM, "%s: out of memory for metadata", file);
    g->kvs = kvs;
  }
  for (uint64_t i = 0; i < n_kv; i++) {
    di_gguf_kv tmp = {0}, *kv = keep_kv ? &kvs[i] : &tmp;
    di_gguf_str key;
    uint32_t type;
    if (!rd_str(&c, version, &key, "metadata key")) return st->code;
    if (keep_kv) {
      kv->key = dup_str(key);
      g->n_kv = i + 1;
      if (!kv->key) return di_errorf(st, DI_ERR_NOMEM, "%s: out of memory", file);
    }
    char keyname[128];
    snprintf(keyname, sizeof keyname, "%.*s", (int)(key.len < 100 ? key.len : 100), key.ptr);
    if (!rd_u32(&c, &type, keyname)) return st->code;
    kv->type = (di_gguf_type)type;
    if (type == DI_GGUF_STRING) {
      if (!rd_str(&c, version, &kv->v.str, keyname)) return st->code;
    } else if (type == DI_GGUF_ARRAY) {
      uint32_t at;
      uint64_t n;
      if (!rd_u32(&c, &at, keyname) || !rd_u64(&c, &n, keyname)) return st->code;
      kv->arr_type = (di_gguf_type)at;
      kv->arr_n = n;
      kv->arr_data = c.p;
      if (at == DI_GGUF_STRING) {
        if (n > (uint64_t)(c.end - c.p) / 8)
          return di_errorf(st, DI_ERR_FORMAT, "%s: key %s: string array of %llu entries exceeds the file",
                           file, keyname, (unsigned long long)n);
        if (keep_kv) {
          kv->strs = malloc((n ? n : 1) * sizeof *kv->strs);
          if (!kv->strs) return di_errorf(st, DI_ERR_NOMEM, "%s: out of memory", file);
        }
        for (uint64_t j = 0; j < n; j++) {
          di_gguf_str s;
          if (!rd_str(&c, version, &s, keyname)) return st->code;
          if (keep_kv) kv->strs[j] = s;
        }
      } else {
        size_t es = scalar_size((di_gguf_type)at);
        if (!es)
          return di_errorf(st, DI_ERR_FORMAT, "%s: key %s: unsupported array element type %u", file, keyname, at);
        if (n > UINT64_MAX / es || !need(&c, n * es, keyname)) {
          if (st->code == DI_OK) di_errorf(st, DI_ERR_FORMAT, "%s: key %s: array too large", file, keyname);
          return st->code;
        }
        c.p += n * es;
      }
    } else {
      size_t es = scalar_size((di_gguf_type)type);
      if (!es) return di_errorf(st, DI_ERR_FORMAT, "%s: key %s: unknown value type %u", file, keyname, type);
      if (!need(&c, es, keyname)) return st->code;
      set_scalar(kv, c.p);
      c.p += es;
    }
    if (!strcmp(keyname, "general.alignment")) {
      if (type != DI_GGUF_UINT32 && type != DI_GGUF_UINT64 && type != DI_GGUF_INT32)
        return di_errorf(st, DI_ERR_FORMAT, "%s: general.alignment has type %u, want an integer", file, type);
      alignment = kv->v.u64;
      if (alignment == 0 || (alignment & (alignment - 1)) || alignment > 65536)
        return di_errorf(st, DI_ERR_FORMAT, "%s: general.alignment %llu is not a power of two <= 65536",
                         file, (unsigned long long)alignment);
    }
    if (!keep_kv && kv->strs) free(kv->strs);
  }

  size_t first = g->n_tensors;
  di_gguf_tensor *nt = realloc(g->tensors, (first + n_tensors + 1) * sizeof *nt);
  if (!nt) return di_errorf(st, DI_ERR_NOMEM, "%s: out of memory for tensor infos", file);
  g->tensors = nt;
  uint64_t *offsets = malloc((n_tensors + 1) * sizeof *offsets);
  if (!offsets) return di_errorf(st, DI_ERR_NOMEM, "%s: out of memory", file);
  di_code rc = DI_OK;
  for (uint64_t i = 0; i < n_tensors; i++) {
    di_gguf_tensor *t = &g->tensors[first + i];
    memset(t, 0, sizeof *t);
    di_gguf_str name;
    uint32_t nd, type;
    if (!rd_str(&c, version, &name, "tensor name")) { rc = st->code; goto out; }
    t->name = dup_str(name);
    g->n_tensors = first + i + 1;
    if (!t->name) { rc = di_errorf(st, DI_ERR_NOMEM, "%s: out of memory", file); goto out; }
    if (!rd_u32(&c, &nd, t->name)) { rc = st->code; goto out; }
    if (nd < 1 || nd > GGUF_MAX_DIMS) {
      rc = di_errorf(st, DI_ERR_FORMAT, "%s: tensor %s has %u dimensions (1..4 allowed)", file, t->name, nd);
      goto out;
    }
    t->n_dims = (int)nd;
    uint64_t nel = 1;
    for (int d = 0; d < 4; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < nd; d++) {
      uint64_t ne;
      if (!rd_u64(&c, &ne, t->name)) { rc = st->code; goto out; }
      if (ne == 0 || ne > ((uint64_t)1 << 40) || nel > (((uint64_t)1 << 50) / ne)) {
        rc = di_errorf(st, DI_ERR_FORMAT, "%s: tensor %s: dimension %u = %llu is absurd", file, t->name, d,
                       (unsigned long long)ne);
        goto out;
      }
      t->ne[d] = (int64_t)ne;
      nel *= ne;
    }
    if (!rd_u32(&c, &type, t->name) || !rd_u64(&c, &offsets[i], t->name)) { rc = st->code; goto out; }
    t->type = (di_dtype)type;
    if (!di_dtype_known(t->type)) {
      rc = di_errorf(st, DI_ERR_UNSUPPORTED, "%s: tensor %s has unknown dtype %u", file, t->name, type);
      goto out;
    }
    if (t->ne[0] % di_dtype_block(t->type)) {
      rc = di_errorf(st, DI_ERR_FORMAT, "%s: tensor %s: row length %lld is not a multiple of the %s block size %d",
                     file, t->name, (long long)t->ne[0], di_dtype_name(t->type), di_dtype_block(t->type));
      goto out;
    }
    t->nbytes = (nel / (uint64_t)di_dtype_block(t->type)) * di_dtype_block_bytes(t->type);
  }
  {
    size_t pos = (size_t)(c.p - c.base);
    size_t data_start = (size_t)((pos + alignment - 1) / alignment * alignment);
    if (data_start > pp->size && n_tensors) {
      rc = di_errorf(st, DI_ERR_FORMAT, "%s: tensor data section starts past end of file", file);
      goto out;
    }
    for (uint64_t i = 0; i < n_tensors; i++) {
      di_gguf_tensor *t = &g->tensors[first + i];
      uint64_t off = offsets[i];
      if (off % alignment) {
        rc = di_errorf(st, DI_ERR_FORMAT, "%s: tensor %s: offset %llu not aligned to %llu", file, t->name,
                       (unsigned long long)off, (unsigned long long)alignment);
        goto out;
      }
      if (off > pp->size - data_start || t->nbytes > pp->size - data_start - off) {
        rc = di_errorf(st, DI_ERR_FORMAT,
                       "%s: tensor %s: data [%llu, +%llu) runs past end of file (%zu bytes of data)", file,
                       t->name, (unsigned long long)off, (unsigned long long)t->nbytes, pp->size - data_start);
        goto out;
      }
      /* Tensor data is packed in declaration order, each start aligned
       * (what writers produce and ggml requires): a type edited to another
       * of a different size shows up as an overlap or a gap here. */
      if (i) {
        const di_gguf_tensor *pt = &g->tensors[first + i - 1];
        uint64_t end = offsets[i - 1] + pt->nbytes, expect = (end + alignment - 1) / alignment * alignment;
        if (off != expect) {
          rc = di_errorf(st, DI_ERR_FORMAT,
                         "%s: tensor %s (%s) ends at %llu but the next tensor %s starts at %llu: its type or "
                         "shape does not match the data",
                         file, pt->name, di_dtype_name(pt->type), (unsigned long long)end, t->name,
                         (unsigned long long)off);
          goto out;
        }
      } else if (off != 0) {
        rc = di_errorf(st, DI_ERR_FORMAT, "%s: tensor %s: data starts at offset %llu, not 0", file, t->name,
                       (unsigned long long)off);
        goto out;
      }
      if (i + 1 == n_tensors) {
        uint64_t end = off + t->nbytes, room = pp->size - data_start;
        if (room - end >= alignment) {
          rc = di_errorf(st, DI_ERR_FORMAT,
                         "%s: tensor %s (%s), the last, ends %llu bytes before the end of the file: its type "
                         "or shape does not match the data",
                         file, t->name, di_dtype_name(t->type), (unsigned long long)(room - end));
          goto out;
        }
      }
      t->data = c.base + data_start + off;
    }
  }
  for (size_t i = first; i < g->n_tensors; i++)
    for (size_t j = 0; j < i; j++)
      if (!strcmp(g->tensors[i].name, g->tensors[j].name)) {
        rc = di_errorf(st, DI_ERR_FORMAT, "%s: duplicate tensor name %s", file, g->tensors[i].name);
        goto out;
      }
out:
  free(offsets);
  return rc;
}

static di_code load_file(const char *path, bool use_mmap, gguf_part *part, di_status *st) {
  int fd;
  size_t size;
  di_code orc = di_open_regular(path, &fd, &size, st);
  if (orc) return orc;
  if (size == 0) {
    close(fd);
    return di_errorf(st, DI_ERR_FORMAT, "%s: empty file", path);
  }
  if (use_mmap) {
    void *p = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return di_errorf(st, DI_ERR_IO, "%s: mmap failed: %s", path, strerror(errno));
    *part = (gguf_part){p, size, true, false};
    return DI_OK;
  }
  uint8_t *buf = di_alloc_aligned(size, true);
  if (!buf) {
    close(fd);
    return di_errorf(st, DI_ERR_NOMEM, "%s: cannot allocate %zu bytes", path, size);
  }
  di_code rc = di_read_all(fd, buf, size, path, st);
  if (rc) {
    close(fd);
    di_free_aligned(buf, size);
    return rc;
  }
  close(fd);
  *part = (gguf_part){buf, size, false, true};
  return DI_OK;
}

/* "model-00001-of-00003.gguf" -> prefix "model", count 3. */
static int split_count(const char *path, size_t *prefix_len) {
  size_t n = strlen(path);
  const char *suffix = "-00001-of-00000.gguf";
  size_t sl = strlen(suffix);
  if (n < sl) return 0;
  const char *s = path + n - sl;
  if (strncmp(s, "-00001-of-", 10) != 0 || strcmp(s + 15, ".gguf") != 0) return 0;
  int count = 0;
  for (int i = 10; i < 15; i++) {
    if (s[i] < '0' || s[i] > '9') return 0;
    count = count * 10 + (s[i] - '0');
  }
  *prefix_len = n - sl;
  return count;
}

di_code di_gguf_open(const char *path, bool use_mmap, di_gguf **out, di_status *st) {
  *out = NULL;
  di_gguf *g = calloc(1, sizeof *g);
  if (!g) return di_errorf(st, DI_ERR_NOMEM, "out of memory");
  g->path = strdup(path);
  di_code rc = load_file(path, use_mmap, &g->parts[0], st);
  if (rc) goto fail;
  g->n_parts = 1;
  rc = parse_part(g, 0, path, st, true);
  if (rc) goto fail;
  size_t plen;
  int count = split_count(path, &plen);
  if (count > GGUF_MAX_PARTS) {
    rc = di_errorf(st, DI_ERR_UNSUPPORTED, "%s: %d split parts (max %d)", path, count, GGUF_MAX_PARTS);
    goto fail;
  }
  for (int i = 2; i <= count; i++) {
    char part_path[4096];
    snprintf(part_path, sizeof part_path, "%.*s-%05d-of-%05d.gguf", (int)plen, path, i, count);
    rc = load_file(part_path, use_mmap, &g->parts[g->n_parts], st);
    if (rc) goto fail;
    g->n_parts++;
    rc = parse_part(g, g->n_parts - 1, part_path, st, false);
    if (rc) goto fail;
  }
  *out = g;
  return DI_OK;
fail:
  di_gguf_close(g);
  return rc;
}

di_code di_gguf_open_memory(const void *data, size_t size, const char *name, di_gguf **out, di_status *st) {
  *out = NULL;
  di_gguf *g = calloc(1, sizeof *g);
  if (!g) return di_errorf(st, DI_ERR_NOMEM, "out of memory");
  g->path = strdup(name);
  g->parts[0] = (gguf_part){data, size, false, false};
  g->n_parts = 1;
  di_code rc = parse_part(g, 0, name, st, true);
  if (rc) {
    di_gguf_close(g);
    return rc;
  }
  *out = g;
  return DI_OK;
}

void di_gguf_close(di_gguf *g) {
  if (!g) return;
  for (size_t i = 0; i < g->n_kv; i++) {
    free((char *)g->kvs[i].key);
    free(g->kvs[i].strs);
  }
  free(g->kvs);
  for (size_t i = 0; i < g->n_tensors; i++) free((char *)g->tensors[i].name);
  free(g->tensors);
  for (int i = 0; i < g->n_parts; i++) {
    if (g->parts[i].mapped) munmap((void *)g->parts[i].base, g->parts[i].size);
    if (g->parts[i].owned) di_free_aligned((void *)g->parts[i].base, g->parts[i].size);
  }
  free(g->path);
  free(g);
}

uint32_t di_gguf_version(const di_gguf *g) { return g->version; }
const char *di_gguf_path(const di_gguf *g) { return g->path; }
size_t di_gguf_n_kv(const di_gguf *g) { return g->n_kv; }
const di_gguf_kv *di_gguf_kv_at(const di_gguf *g, size_t i) { return i < g->n_kv ? &g->kvs[i] : NULL; }
size_t di_gguf_n_tensors(const di_gguf *g) { return g->n_tensors; }
const di_gguf_tensor *di_gguf_tensor_at(const di_gguf *g, size_t i) {
  return i < g->n_tensors ? &g->tensors[i] : NULL;
}

const di_gguf_kv *di_gguf_find(const di_gguf *g, const char *key) {
  for (size_t i = 0; i < g->n_kv; i++)
    if (!strcmp(g->kvs[i].key, key)) return &g->kvs[i];
  return NULL;
}

const di_gguf_tensor *di_gguf_find_tensor(const di_gguf *g, const char *name) {
  for (size_t i = 0; i < g->n_tensors; i++)
    if (!strcmp(g->tensors[i].name, name)) return &g->tensors[i];
  return NULL;
}

static bool is_uint(di_gguf_type t) {
  return t == DI_GGUF_UINT8 || t == DI_GGUF_UINT16 || t == DI_GGUF_UINT32 || t == DI_GGUF_UINT64;
}
static bool is_sint(di_gguf_type t) {
  return t == DI_GGUF_INT8 || t == DI_GGUF_INT16 || t == DI_GGUF_INT32 || t == DI_GGUF_INT64;
}

bool di_gguf_get_i64(const di_gguf *g, const char *key, int64_t *out) {
  const di_gguf_kv *kv = di_gguf_find(g, key);
  if (!kv) return false;
  if (is_uint(kv->type) && kv->v.u64 <= INT64_MAX) *out = (int64_t)kv->v.u64;
  else if (is_sint(kv->type)) *out = kv->v.i64;
  else if (kv->type == DI_GGUF_BOOL) *out = kv->v.b;
  else return false;
  return true;
}

bool di_gguf_get_u64(const di_gguf *g, const char *key, uint64_t *out) {
  int64_t v;
  if (!di_gguf_get_i64(g, key, &v) || v < 0) return false;
  *out = (uint64_t)v;
  return true;
}

bool di_gguf_get_f64(const di_gguf *g, const char *key, double *out) {
  const di_gguf_kv *kv = di_gguf_find(g, key);
  if (!kv) return false;
  if (kv->type == DI_GGUF_FLOAT32 || kv->type == DI_GGUF_FLOAT64) *out = kv->v.f64;
  else if (is_uint(kv->type)) *out = (double)kv->v.u64;
  else if (is_sint(kv->type)) *out = (double)kv->v.i64;
  else return false;
  return true;
}

bool di_gguf_get_bool(const di_gguf *g, const char *key, bool *out) {
  const di_gguf_kv *kv = di_gguf_find(g, key);
  if (!kv) return false;
  if (kv->type == DI_GGUF_BOOL) *out = kv->v.b;
  else if (is_uint(kv->type) || is_sint(kv->type)) *out = kv->v.u64 != 0;
  else return false;
  return true;
}

char *di_gguf_get_str(const di_gguf *g, const char *key) {
  const di_gguf_kv *kv = di_gguf_find(g, key);
  if (!kv || kv->type != DI_GGUF_STRING) return NULL;
  return dup_str(kv->v.str);
}
