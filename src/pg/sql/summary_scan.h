/*
 * summary_scan.h -- ptrack_get_pagemapset(), ptrack_get_change_stat() and
 * ptrack_init_lsn() answered from the summary files of wal capture
 * (persist/summary_io.h, docs/design.md section 4.8), instead of the map.
 *
 * The capture source decides which (CaptureSourceOps::summaries,
 * capture/capture_source.h): sql_functions.cpp calls these only when it
 * says the summaries answer, after the source's freshness wait and cut.
 *
 * Rows are the same as the map path's (core/map_answer.h): one per existing
 * segment file with a listed block, its path relative to the data
 * directory, its page bitmap clipped to the file's size.  What needs file
 * sizes is resolved with one stat() per file the union names, never a walk
 * of the whole data directory: a fork's limit lists every block from it to
 * the end of the fork's last segment; a database entry lists every file of
 * that database directory (one directory read); unlogged relations (an
 * init fork exists) are left out; the FSM fork of a relation with a listed
 * main fork is listed whole.
 *
 * C-style code (boundary.h): callable only from frames that own no C++
 * objects with destructors.
 *
 * INTERFACE: SegmentRowFn, summary_scan(), summaries_init_lsn().
 */
#ifndef PTRACK_PG_SUMMARY_SCAN_H
#define PTRACK_PG_SUMMARY_SCAN_H

#include <cstddef>
#include <cstdint>

#include "core/shared_state.h"

namespace ptrack::pg {

/* One row: a segment file (path relative to the data directory), its listed blocks, its bitmap of `bytes` bytes. */
using SegmentRowFn = void (*)(const char* path, uint32_t count, const uint8_t* pagemap, size_t bytes, void* arg);

/*
 * Calls `row` for every segment file with a block changed at or after
 * `since`, from the summaries that cover [since, summarized) (summarized: the
 * end of the newest summary, after a cut that made the files hold every
 * change made before the call).  Never answers short: a summary missing,
 * damaged, or older ones removed raise an ERROR with the LSN and the file
 * named and the hint to take a full backup.
 */
void summary_scan(Lsn since, Lsn summarized, SegmentRowFn row, void* arg);

/*
 * The oldest start LSN the summaries answer from: the start of the oldest
 * summary of the unbroken chain that ends at `summarized` (or `summarized`
 * itself if no summary ends there); 0 if `summarized` is 0 (no summary yet).
 * From the file names only.
 */
Lsn summaries_init_lsn(Lsn summarized);

}  // namespace ptrack::pg

#endif
