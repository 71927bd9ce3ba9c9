/*
 * wal_records.h -- what one WAL record changed, marked in the map: every
 * block reference, and the changes a record makes without one (docs/design.md
 * section 7).  Called by the WAL follower (capture_wal.cpp) once per record.
 */
#ifndef PTRACK_PG_WAL_RECORDS_H
#define PTRACK_PG_WAL_RECORDS_H

extern "C" {
#include "postgres.h"

#include "access/xlogreader.h"
}

namespace ptrack::pg {

/*
 * Marks everything `record` (just decoded) changed, at LSN record->EndRecPtr.
 * Returns nullptr, or the reason tracking must restart because the record
 * changed something that cannot be attributed to blocks.
 */
const char* capture_wal_record(XLogReaderState* record);

}  // namespace ptrack::pg

#endif
