/* Small helpers shared by the subcommands' option parsing. */
#ifndef DI_CLI_ARGS_H
#define DI_CLI_ARGS_H

#include <stdbool.h>
#include <stdint.h>

/* Parses an integer/float with range checks; false on junk or out of range. */
bool di_arg_int(const char *s, long long lo, long long hi, long long *out);
bool di_arg_float(const char *s, double lo, double hi, double *out);
/* "1,2,3" or "[1, 2, 3]" -> malloc'ed ids. */
bool di_arg_ids(const char *s, int32_t **ids, int *n);
/* Bytes with optional K/M/G suffix (binary). */
bool di_arg_bytes(const char *s, uint64_t *out);

#endif
