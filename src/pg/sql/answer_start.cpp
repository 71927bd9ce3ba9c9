/*
 * answer_start.cpp -- see answer_start.h.
 */
extern "C" {
#include "postgres.h"

#include "utils/pg_lsn.h"
}

#include "core/boundary.h"
#include "capture/capture_source.h"
#include "persist/summary_io.h"
#include "sql/answer_start.h"
#include "sql/summary_scan.h"
#include "core/shared_state.h"

namespace ptrack::pg {

Lsn answer_init_lsn()
{
    const Lsn tracked = init_lsn();
    Lsn summarized = 0;
    if (!running_source().summaries(false, &summarized))
        return tracked;
    /* No answer goes further back than the summaries kept, nor than where tracking (re)started. */
    return Max(tracked, summaries_init_lsn(summarized));
}

/* The start_lsn argument: not NULL, not older than ptrack_init_lsn(), not ahead of the WAL. */
Lsn checked_start_lsn(FunctionCallInfo fcinfo)
{
    require_tracking();
    if (PG_ARGISNULL(0))
        ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("start_lsn must not be NULL"),
                        errhint("Pass the start LSN of the previous backup.")));
    const Lsn start = PG_GETARG_LSN(0);
    /* WAL capture: answer only once the follower has applied the WAL written before this call. */
    running_source().wait_until_fresh();
    /*
     * Before tracking (re)started.  The message names what ptrack_init_lsn()
     * returns (with summaries it may be later); an L between the two is the
     * summaries' to refuse, with the reason (a missing or removed summary:
     * summary_scan()).
     */
    const Lsn init = init_lsn();
    if (start < init) {
        /* The detail names the same LSN: with the summaries, what they hold starts there. */
        const Lsn answer = answer_init_lsn();
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("start_lsn %X/%X is older than ptrack_init_lsn() %X/%X", PTRACK_LSN_ARGS(start),
                               PTRACK_LSN_ARGS(answer)),
                        answer > init ? errdetail("Changes made before %X/%X are not in the change summaries kept "
                                                  "in %s.",
                                                  PTRACK_LSN_ARGS(answer), kSummaryDir)
                                      : errdetail("Changes made before %X/%X were not tracked.",
                                                  PTRACK_LSN_ARGS(init)),
                        errhint("Take a full backup.")));
    }
    /*
     * An LSN this server has not reached cannot be the start of a backup of
     * this cluster as it is (another cluster, another timeline, a standby
     * behind the primary the backup was taken from): answering would list
     * next to nothing, and the incremental backup would silently miss
     * changes.
     */
    const Lsn now = current_mark_lsn();
    if (start > now)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("start_lsn %X/%X is ahead of this server's WAL position", PTRACK_LSN_ARGS(start)),
                        errdetail("The WAL position is %X/%X.", PTRACK_LSN_ARGS(now)),
                        errhint("Pass the start LSN of a backup of this cluster; on a standby, wait until it has "
                                "replayed past it.")));
    return start;
}

}  // namespace ptrack::pg
