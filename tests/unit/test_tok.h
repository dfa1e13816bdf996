/* Loads a tokenizer from the shared test data (tokenizers/NAME), unpacked once
 * into ~/.cache/deepinfer/tokenizers/NAME. */
#ifndef DI_TEST_TOK_H
#define DI_TEST_TOK_H

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "check.h"
#include "tokenizer/tokenizer.h"

static inline di_tokenizer *di_test_tokenizer(const char *name) {
  const char *home = getenv("HOME");
  char dir[1024], f[1200], rel[256], src[1024], cmd[16384];
  snprintf(dir, sizeof dir, "%s/.cache/deepinfer/tokenizers/%s", home ? home : "/tmp", name);
  snprintf(f, sizeof f, "%s/tokenizer.json", dir);
  struct stat sb;
  if (stat(f, &sb)) {
    snprintf(rel, sizeof rel, "tokenizers/%s", name);
    di_test_data(rel, src, sizeof src);
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s' && cp '%s'/*.json '%s'/ 2>/dev/null; xz -dc '%s/tokenizer.json.xz' > '%s.tmp' && mv '%s.tmp' '%s'",
             dir, src, dir, src, f, f, f);
    if (system(cmd) != 0) return NULL;
  }
  di_tokenizer *t = NULL;
  di_status st = {0};
  if (di_tokenizer_load(dir, &t, &st)) {
    fprintf(stderr, "%s tokenizer: %s\n", name, st.msg);
    return NULL;
  }
  return t;
}

#endif
