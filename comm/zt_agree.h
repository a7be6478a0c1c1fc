/* Agreement among the ranks of a job, over MPI, at the two points where a
 * disagreement would otherwise hang a collective or train silently wrong:
 *
 *   zt_agree_settings  before the first collective of a run: every rank
 *                      compares the settings that shape a collective or the
 *                      arithmetic; on a mismatch every rank gets the same
 *                      ZT_ERR_INVALID and rank 0's message names each setting
 *                      that differs, with every rank's value.
 *   zt_agree_outcome   at the end of a run (or of start-up): every rank
 *                      reports its exit code and error. When they all arrive,
 *                      rank 0 learns every failing rank's error and the job
 *                      exits with one code through MPI_Finalize. A failing
 *                      rank whose peers do not arrive within the deadline is
 *                      failing alone (the others wait in some collective for
 *                      it), and only MPI_Abort can stop them.
 *
 * docs/failure.md says what each failure prints and how fast ranks stop.
 * Both calls are collective over `comm` and use it for nothing else, so they
 * never match a collective of the training. */
#ifndef ZT_AGREE_H
#define ZT_AGREE_H

#include <mpi.h>

#include "zt_error.h"

#define ZT_SETTING_NAME 48
#define ZT_SETTING_VALUE 208
#define ZT_MAX_SETTINGS 160

/* One setting as every rank must see it: a name ("lr", "build") and its
 * resolved value as text (what a flag, a config file or a default gave). */
typedef struct {
    char name[ZT_SETTING_NAME];
    char value[ZT_SETTING_VALUE];
} zt_setting;

/* ZT_OK when every rank has the same rows; else ZT_ERR_INVALID on every rank,
 * err->msg listing each differing setting with each rank's value (ranks
 * with equal values grouped). At most ZT_MAX_SETTINGS rows. */
zt_status zt_agree_settings(MPI_Comm comm, const zt_setting *rows, int nrows, zt_error *err);

/* One rank's outcome as rank 0 receives it. */
typedef struct {
    int exit_code; /* 0: success */
    zt_status status;
    char where[160];
    char msg[1024];
} zt_rank_outcome;

typedef struct {
    int agreed;    /* every rank reported before the deadline */
    int nfailed;   /* ranks whose exit code is not 0 */
    int exit_code; /* the job's: the largest code reported */
    /* Rank 0, when agreed and nfailed > 0: every rank's outcome, [world]
     * (malloc'd: zt_outcome_free). NULL elsewhere. */
    zt_rank_outcome *ranks;
} zt_outcome;

/* Every rank calls it with its exit code (0: success) and, when failing,
 * its error. A rank whose code is 0 waits for every rank; a failing rank
 * waits at most timeout_s, then returns with agreed = 0. */
void zt_agree_outcome(MPI_Comm comm, int exit_code, const zt_error *err, double timeout_s, zt_outcome *out);
void zt_outcome_free(zt_outcome *out);

#endif
