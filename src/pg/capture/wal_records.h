/*
 * wal_records.h -- what one WAL record changed, sent to the caller's sink:
 * every block reference, and the changes a record makes without one
 * (docs/design.md section 4.2).  Called once per record by the WAL follower (follower_read.cpp)
 * and by the hooks source's startup scan (startup_scan.cpp).
 */
#ifndef PTRACK_PG_WAL_RECORDS_H
#define PTRACK_PG_WAL_RECORDS_H

extern "C" {
#include "postgres.h"

}

#include "capture/wal_record_view.h"
#include "core/boundary.h"
#include "ptrack/relfork.h"

namespace ptrack::pg {

/*
 * Where the changes of a record go.  The WAL follower records them in its
 * change set and the file growth watch (follower_read.cpp); the startup
 * scan marks the map and looks at the files afterwards
 * (startup_scan.cpp).  Implementations allocate nothing and raise no ERROR.
 */
class WalChangeSink {
public:
    /*
     * `block` of `rel` changed at `lsn`.  `referenced`: the record names the
     * block (so the file had it); false for a block derived from one (the VM
     * block of a heap block), which may not exist.
     */
    virtual void block(const RelFork& rel, BlockNumber block, Lsn lsn, bool referenced) noexcept = 0;
    /* Every block >= `limit` of `rel` changed at `lsn`: a truncation, or limit 0 for a created or dropped fork. */
    virtual void relation_limit(const RelFork& rel, BlockNumber limit, Lsn lsn) noexcept = 0;
    /* Every file of database directory (spc, db) changed at `lsn`: created, copied or dropped. */
    virtual void database(uint32_t spc, uint32_t db, Lsn lsn) noexcept = 0;

protected:
    ~WalChangeSink() = default;
};

/*
 * Sends everything `record` changed to `sink`, at LSN record.end.  Returns
 * nullptr, or the reason tracking must restart because the record changed
 * something that cannot be attributed to blocks.
 */
const char* capture_wal_record(const WalRecordView& record, WalChangeSink& sink);

/*
 * True if no WAL record can end at `lsn` (segments of `segment_bytes`): it
 * is the first byte after a page header.  A record that fills its page up
 * ends at the page boundary (its end pointer is the boundary), and the next
 * record starts after the header (xlog.c, XLogBytePosToRecPtr); a
 * checkpoint's redo LSN is often such a position.  Whoever starts reading
 * the WAL at `lsn` reads every record that ends at or after it iff so.
 */
bool no_record_ends_at(Lsn lsn, uint32_t segment_bytes) noexcept;

/*
 * printf into a buffer of this process, for the reasons the WAL readers
 * (this file, the follower, the startup scan) return: valid until the next
 * call.
 */
const char* reason(const char* format, ...) pg_attribute_printf(1, 2);

}  // namespace ptrack::pg

#endif
