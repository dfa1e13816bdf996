/* --tp N (cli/tp.c): joins the MPI job. Returns true when this process is
 * done (a follower rank after rank 0 stopped, `info --tp` alone, or an
 * error), with *code its exit status; false: run the command (rank 0, or no
 * --tp). --tp N is taken out of argv either way. */
#ifndef DI_CLI_TP_H
#define DI_CLI_TP_H

#include <stdbool.h>

bool di_cli_tp_begin(int *argc, char **argv, int *code);
/* Rank 0 after its command: tells the followers to stop, ends MPI; true
 * when the job failed (the exit status must say so). */
bool di_cli_tp_end(void);
/* The N of the command line's --tp N (1 without): `info -m MODEL --tp N`
 * shows what each of N ranks would hold. */
int di_cli_tp_ranks(void);

#endif
