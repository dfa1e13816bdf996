#include "model/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/mem.h"
#include "util/progress.h"
#include "util/readall.h"

static di_code parse_dtype(const char *s, di_dtype *t, size_t *es) {
  if (!strcmp(s, "F32")) { *t = DI_F32; *es = 4; }
  else if (!strcmp(s, "F16")) { *t = DI_F16; *es = 2; }
  else if (!strcmp(s, "BF16")) { *t = DI_BF16; *es = 2; }
  else if (!strcmp(s, "I64")) { *t = DI_I64; *es = 8; } /* index tables (DeepSeek-V4's tid2eid) */
  else if (!strcmp(s, "I32")) { *t = DI_I32; *es = 4; }
  else return DI_ERR_UNSUPPORTED;
  return DI_OK;
}

di_code di_st_parse(di_st_file *f, di_status *st) {
  const char *p = f->path;
  if (f->size < 8) return di_errorf(st, DI_ERR_FORMAT, "%s: too small for a safetensors header", p);
  uint64_t hlen;
  memcpy(&hlen, f->base, 8);
  if (hlen > f->size - 8 || hlen > (100u << 20))
    return di_errorf(st, DI_ERR_FORMAT, "%s: header length %llu exceeds the file (%zu bytes)", p,
                     (unsigned long long)hlen, f->size);
  json_error_t jerr;
  json_t *root = json_loadb((const char *)f->base + 8, hlen, 0, &jerr);
  if (!root || !json_is_object(root)) {
    json_decref(root);
    return di_errorf(st, DI_ERR_FORMAT, "%s: header is not a JSON object: %s (byte %d)", p, jerr.text,
                     jerr.position);
  }
  size_t data_size = f->size - 8 - hlen;
  const uint8_t *data = f->base + 8 + hlen;
  f->tensors = calloc(json_object_size(root) + 1, sizeof *f->tensors);
  if (!f->tensors) {
    json_decref(root);
    return di_errorf(st, DI_ERR_NOMEM, "%s: out of memory", p);
  }
  const char *key;
  json_t *val;
  di_code rc = DI_OK;
  json_object_foreach(root, key, val) {
    if (!strcmp(key, "__metadata__")) continue;
    di_st_tensor *t = &f->tensors[f->n_tensors];
    t->name = strdup(key);
    f->n_tensors++;
    json_t *dt = json_object_get(val, "dtype"), *sh = json_object_get(val, "shape"),
           *off = json_object_get(val, "data_offsets");
    size_t es;
    if (!json_is_string(dt) || !json_is_array(sh) || !json_is_array(off) || json_array_size(off) != 2) {
      rc = di_errorf(st, DI_ERR_FORMAT, "%s: tensor %s: entry needs dtype, shape and data_offsets[2]", p, key);
      break;
    }
    if (parse_dtype(json_string_value(dt), &t->type, &es)) {
      rc = di_errorf(st, DI_ERR_UNSUPPORTED, "%s: tensor %s: dtype %s not supported (F32, F16, BF16)", p, key,
                     json_string_value(dt));
      break;
    }
    size_t nd = json_array_size(sh);
    if (nd > 4) {
      rc = di_errorf(st, DI_ERR_FORMAT, "%s: tensor %s: %zu dimensions (max 4)", p, key, nd);
      break;
    }
    t->n_dims = (int)nd;
    uint64_t nel = 1;
    for (size_t d = 0; d < nd; d++) {
      json_t *x = json_array_get(sh, d);
      json_int_t v = json_is_integer(x) ? json_integer_value(x) : -1;
      if (v < 0 || v > ((json_int_t)1 << 40) || (v && nel > (((uint64_t)1 << 50) / (uint64_t)v))) {
        rc = di_errorf(st, DI_ERR_FORMAT, "%s: tensor %s: bad dimension %zu", p, key, d);
        break;
      }
      t->shape[d] = v;
      nel *= (uint64_t)v;
    }
    if (rc) break;
    json_t *o0 = json_array_get(off, 0), *o1 = json_array_get(off, 1);
    json_int_t b = json_is_integer(o0) ? json_integer_value(o0) : -1;
    json_int_t e = json_is_integer(o1) ? json_integer_value(o1) : -1;
    if (b < 0 || e < b || (uint64_t)e > data_size) {
      rc = di_errorf(st, DI_ERR_FORMAT, "%s: tensor %s: data_offsets [%lld, %lld] outside the %zu data bytes", p,
                     key, (long long)b, (long long)e, data_size);
      break;
    }
    if ((uint64_t)(e - b) != nel * es) {
      rc = di_errorf(st, DI_ERR_FORMAT, "%s: tensor %s: %lld bytes of data for %llu elements of %s", p, key,
                     (long long)(e - b), (unsigned long long)nel, json_string_value(dt));
      break;
    }
    t->data = data + b;
    t->nbytes = (size_t)(e - b);
  }
  json_decref(root);
  return rc;
}

di_code di_st_open(const char *path, bool use_mmap, di_st_file *f, di_status *st) {
  memset(f, 0, sizeof *f);
  f->path = strdup(path);
  int fd;
  di_code orc = di_open_regular(path, &fd, &f->size, st);
  if (orc) return orc;
  if (f->size == 0) {
    close(fd);
    return di_errorf(st, DI_ERR_IO, "%s: empty file", path);
  }
  if (use_mmap) {
    void *p = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return di_errorf(st, DI_ERR_IO, "%s: mmap failed", path);
    f->base = p;
    f->mapped = true;
  } else {
    f->base = di_alloc_aligned(f->size, true);
    if (!f->base) {
      close(fd);
      return di_errorf(st, DI_ERR_NOMEM, "%s: cannot allocate %zu bytes", path, f->size);
    }
    di_code rc = di_read_all(fd, f->base, f->size, path, st);
    if (rc) {
      close(fd);
      return rc;
    }
    close(fd);
  }
  return di_st_parse(f, st);
}

void di_st_close(di_st_file *f) {
  for (size_t i = 0; i < f->n_tensors; i++) free(f->tensors[i].name);
  free(f->tensors);
  if (f->base) {
    if (f->mapped) munmap(f->base, f->size);
    else di_free_aligned(f->base, f->size);
  }
  free(f->path);
  memset(f, 0, sizeof *f);
}
