/* Reading a whole file into a buffer, the slices in parallel. */
#ifndef DI_UTIL_READALL_H
#define DI_UTIL_READALL_H

#include <stddef.h>
#include <stdint.h>

#include "util/status.h"

/* Reads bytes [0, size) of fd into buf; path names the file in errors and
 * progress (reported for files over 256 MiB). */
di_code di_read_all(int fd, uint8_t *buf, size_t size, const char *path, di_status *st);

#endif
