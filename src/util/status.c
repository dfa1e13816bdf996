#include "util/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

di_code di_errorf(di_status *st, di_code code, const char *fmt, ...) {
  if (!st || st->code != DI_OK) return code;
  st->code = code;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(st->msg, sizeof st->msg, fmt, ap);
  va_end(ap);
  return code;
}

di_code di_error_wrap(di_status *st, const char *fmt, ...) {
  if (!st) return DI_ERR_INTERNAL;
  char prefix[256], old[sizeof st->msg];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  memcpy(old, st->msg, sizeof old);
  size_t pl = strnlen(prefix, sizeof prefix - 1);
  memcpy(st->msg, prefix, pl);
  size_t rest = sizeof st->msg - 1 - pl;
  size_t ol = strnlen(old, rest);
  memcpy(st->msg + pl, old, ol);
  st->msg[pl + ol] = 0;
  return st->code;
}

const char *di_code_name(di_code code) {
  switch (code) {
    case DI_OK: return "ok";
    case DI_ERR_INVALID: return "invalid argument";
    case DI_ERR_IO: return "i/o error";
    case DI_ERR_FORMAT: return "format error";
    case DI_ERR_NOMEM: return "out of memory";
    case DI_ERR_UNSUPPORTED: return "unsupported";
    case DI_ERR_RANGE: return "out of range";
    case DI_ERR_CANCELLED: return "cancelled";
    case DI_ERR_FULL: return "full";
    case DI_ERR_INTERNAL: return "internal error";
  }
  return "unknown";
}
