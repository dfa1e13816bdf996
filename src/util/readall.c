#include "util/readall.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <unistd.h>

#include "util/progress.h"
#include "util/threadpool.h"

/* Several threads each pread their own slice: filling a fresh buffer is paced
 * by its page faults more than by the copy, and on VMs whose host takes back
 * free guest memory each fault costs a trip to the host. Here 1 GiB of such
 * memory faulted in 12.2 s on one thread and 5.3 s on two; a 1.1B Q4_0 file
 * loaded in 6.5-8.3 s with one reader. */
#define READ_THREADS_MAX 4
#define READ_CHUNK ((size_t)16 << 20)

typedef struct {
  int fd;
  uint8_t *buf;
  size_t off, end;
  atomic_size_t *done;
  size_t failed_at; /* SIZE_MAX: none */
} read_slice;

/* Reads [off, end) in chunks; on the caller's thread, reports progress after each. */
static void read_range(read_slice *s, const char *progress, size_t total) {
  for (size_t o = s->off; o < s->end;) {
    size_t want = s->end - o < READ_CHUNK ? s->end - o : READ_CHUNK;
    ssize_t r = pread(s->fd, s->buf + o, want, (off_t)o);
    if (r <= 0) {
      s->failed_at = o;
      return;
    }
    o += (size_t)r;
    size_t d = atomic_fetch_add(s->done, (size_t)r) + (size_t)r;
    if (progress) di_progress(progress, (double)d / (double)total);
  }
}

static void *read_thread(void *p) {
  read_range(p, NULL, 0);
  return NULL;
}

di_code di_read_all(int fd, uint8_t *buf, size_t size, const char *path, di_status *st) {
  atomic_size_t done = 0;
  int n = size >= ((size_t)64 << 20) ? di_cpu_count() : 1;
  if (n > READ_THREADS_MAX) n = READ_THREADS_MAX;
  /* slices on 2 MiB boundaries, so no huge page is faulted by two threads */
  const size_t align = (size_t)2 << 20, per = (size / (size_t)n + align - 1) / align * align;
  read_slice s[READ_THREADS_MAX];
  pthread_t th[READ_THREADS_MAX];
  bool started[READ_THREADS_MAX] = {false};
  for (int i = 0; i < n; i++) {
    size_t a = per * (size_t)i < size ? per * (size_t)i : size, b = a + per < size ? a + per : size;
    s[i] = (read_slice){fd, buf, a, b, &done, SIZE_MAX};
  }
  for (int i = 1; i < n; i++) started[i] = pthread_create(&th[i], NULL, read_thread, &s[i]) == 0;
  /* the caller reads slice 0 and any slice whose thread did not start */
  for (int i = 0; i < n; i++)
    if (!started[i]) read_range(&s[i], size > ((size_t)256 << 20) ? path : NULL, size);
  size_t failed = SIZE_MAX;
  for (int i = 0; i < n; i++) {
    if (started[i]) pthread_join(th[i], NULL);
    if (s[i].failed_at < failed) failed = s[i].failed_at;
  }
  if (failed != SIZE_MAX) return di_errorf(st, DI_ERR_IO, "%s: read failed at byte %zu", path, failed);
  if (size > ((size_t)256 << 20)) di_progress(path, 1.0);
  return DI_OK;
}

di_code di_open_regular(const char *path, int *fd, size_t *size, di_status *st) {
  *fd = -1;
  *size = 0;
  int f = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (f < 0) return di_errorf(st, DI_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  struct stat sb;
  if (fstat(f, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    close(f);
    return di_errorf(st, DI_ERR_IO, "%s: not a regular file", path);
  }
  int fl = fcntl(f, F_GETFL);
  if (fl >= 0) fcntl(f, F_SETFL, fl & ~O_NONBLOCK);
  *fd = f;
  *size = (size_t)sb.st_size;
  return DI_OK;
}

di_code di_read_regular(const char *path, size_t max, char **data, size_t *len, di_status *st) {
  *data = NULL;
  *len = 0;
  int fd;
  size_t size;
  di_code rc = di_open_regular(path, &fd, &size, st);
  if (rc) return rc;
  if (size > max) {
    close(fd);
    return di_errorf(st, DI_ERR_FORMAT, "%s: %zu bytes, more than the %zu allowed for this file", path, size, max);
  }
  char *p = malloc(size + 1);
  if (!p) {
    close(fd);
    return di_errorf(st, DI_ERR_NOMEM, "%s: out of memory for %zu bytes", path, size);
  }
  size_t got = 0;
  while (got < size) {
    ssize_t r = read(fd, p + got, size - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
  }
  close(fd);
  if (got != size) {
    free(p);
    return di_errorf(st, DI_ERR_IO, "%s: read %zu of %zu bytes", path, got, size);
  }
  p[size] = 0;
  *data = p;
  *len = size;
  return DI_OK;
}
