/*
 * answer_start.h -- the start LSN every SQL function answering "since
 * start_lsn" takes, and ptrack_init_lsn(): one place for the checks and
 * errors of ptrack_get_pagemapset(), ptrack_get_change_stat()
 * (sql_functions.cpp) and ptrack_verify() (verify.cpp).  The map's answer
 * itself, file by file, is core/map_answer.h (included here for them); the
 * summaries' is summary_scan.h.
 *
 * C-style code (boundary.h): callable only from frames that own no C++
 * objects with destructors.
 */
#ifndef PTRACK_PG_ANSWER_START_H
#define PTRACK_PG_ANSWER_START_H

extern "C" {
#include "postgres.h"

#include "fmgr.h"
#include "funcapi.h"
#include "utils/tuplestore.h"
}

#include "core/boundary.h"
#include "core/map_answer.h"
#include "core/shared_state.h"

namespace ptrack::pg {



/*
 * ptrack_init_lsn(): where tracking (re)started (init_lsn()) or, when the
 * summaries answer (wal capture), the start of the summaries kept if later
 * (summaries_init_lsn()).  After the source's freshness wait.
 */
Lsn answer_init_lsn();

/*
 * The start_lsn argument (argument 0) of a function answering "since
 * start_lsn": tracking on, not NULL, not older than init_lsn(), not
 * ahead of the server's WAL; ERROR with a hint otherwise.  With wal capture,
 * first waits until the follower has applied the WAL written before the call.
 */
Lsn checked_start_lsn(FunctionCallInfo fcinfo);

}  // namespace ptrack::pg

#endif
