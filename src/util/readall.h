/* Reading a whole file into a buffer, the slices in parallel. */
#ifndef DI_UTIL_READALL_H
#define DI_UTIL_READALL_H

#include <stddef.h>
#include <stdint.h>

#include "util/status.h"

/* Reads bytes [0, size) of fd into buf; path names the file in errors and
 * progress (reported for files over 256 MiB). */
di_code di_read_all(int fd, uint8_t *buf, size_t size, const char *path, di_status *st);

/* Opens path for reading only if it is a regular file, without blocking on
 * a FIFO or a device (O_NONBLOCK until the type is known), and gives its
 * size: loaders read exactly that many bytes, never "until EOF", so
 * /dev/zero or a pipe cannot make them grow without end. */
di_code di_open_regular(const char *path, int *fd, size_t *size, di_status *st);

/* The whole regular file at path into a malloc'd, NUL-terminated buffer of
 * at most max bytes. */
di_code di_read_regular(const char *path, size_t max, char **data, size_t *len, di_status *st);

#endif
