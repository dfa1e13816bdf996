/* DeepInfer public C API. See docs/API.md. */
#ifndef DEEPINFER_H
#define DEEPINFER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum di_code {
  DI_OK = 0,
  DI_ERR_INVALID,     /* a caller-supplied value is wrong */
  DI_ERR_IO,          /* open/read/write failed */
  DI_ERR_FORMAT,      /* a file or request body is malformed */
  DI_ERR_NOMEM,       /* allocation or budget exhausted */
  DI_ERR_UNSUPPORTED, /* well-formed but not implemented (dtype, architecture) */
  DI_ERR_RANGE,       /* a length or index exceeds a limit (context, vocab) */
  DI_ERR_CANCELLED,
  DI_ERR_FULL,        /* a queue or pool is full; retry later */
  DI_ERR_INTERNAL,
} di_code;

#define DI_VERSION "0.1.0"

#ifdef __cplusplus
}
#endif
#endif
