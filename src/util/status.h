/* Errors are values (DESIGN principle 4): every fallible function returns a
 * di_code and, on failure, fills a di_status with a message that names the
 * file, key, tensor or byte offset at fault. */
#ifndef DI_UTIL_STATUS_H
#define DI_UTIL_STATUS_H

#include "deepinfer.h"

typedef struct di_status {
  di_code code;
  char msg[512];
} di_status;

/* Records the error (first one wins, so a low-level cause is not overwritten
 * by a vaguer caller) and returns code so callers can `return di_errorf(...)`. */
di_code di_errorf(di_status *st, di_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prefixes context ("loading x.gguf: ") onto an existing message. */
di_code di_error_wrap(di_status *st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static inline void di_status_clear(di_status *st) {
  if (st) {
    st->code = DI_OK;
    st->msg[0] = 0;
  }
}

const char *di_code_name(di_code code);

#endif
