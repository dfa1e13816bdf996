/* di_read_all: a file over the parallel threshold comes back byte for byte
 * (slices meet at 2 MiB boundaries, the last one short), a small one too, and
 * a read that fails names the file and the byte. */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "util/readall.h"

static uint8_t pattern(size_t i) { return (uint8_t)(i % 251); } /* never 0xff, the fill below */

static void roundtrip(size_t size) {
  char path[] = "/tmp/di_readall_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  uint8_t *src = malloc(size), *dst = malloc(size);
  CHECK(src && dst);
  for (size_t i = 0; i < size; i++) src[i] = pattern(i);
  CHECK(write(fd, src, size) == (ssize_t)size);
  memset(dst, 0xff, size);
  di_status st = {0};
  CHECKF(di_read_all(fd, dst, size, path, &st) == DI_OK, "%zu bytes: %s", size, st.msg);
  CHECKF(memcmp(src, dst, size) == 0, "%zu bytes differ", size);
  /* asking for more than the file holds: an error naming the file and the first missing byte */
  uint8_t *big = malloc(size + 4096);
  CHECK(big != NULL);
  CHECK(di_read_all(fd, big, size + 4096, path, &st) == DI_ERR_IO);
  char want[64];
  snprintf(want, sizeof want, "at byte %zu", size);
  CHECKF(strstr(st.msg, path) && strstr(st.msg, want), "message: %s", st.msg);
  close(fd);
  unlink(path);
  free(src), free(dst), free(big);
}

int main(void) {
  roundtrip(4099);
  roundtrip(((size_t)67 << 20) + 12345); /* over 64 MiB: read by several threads */
  return di_test_finish("test_readall");
}
