/*
 * inplace_reader.h -- the WAL follower's reader for its steady state: the
 * records of the current timeline of a primary, read from the segment
 * files of pg_wal strictly below a limit the caller gives (the flush
 * position) in reads of 128 KB, checked and parsed where they lie in that
 * buffer, without xlogreader's read of every page and copy of every record
 * into its decode buffer.
 *
 * It checks what xlogreader checks: each page header (magic, flags, page
 * address, the long header's system identifier, segment size and page size
 * at a segment's start, the timeline never going back, a continuation's
 * flag and remaining length), each record header (length, resource
 * manager, xl_prev against the record before it), the CRC-32C of each
 * record, and the block headers' exact length accounting.  Anything it
 * does not expect (an unreadable or missing file, a malformed page or
 * record, an overwritten continuation) is "not handled", with the LSN and
 * the reason: the caller reads on from that record with xlogreader, which
 * knows the archive, timeline history and every anomaly.  It never guesses.
 *
 * Nothing is allocated per record: one read buffer, and a buffer for main
 * data that crosses pages (grown, never shrunk, with malloc: a failure is
 * "not handled").  No ERROR is raised, no C++ object with a destructor is
 * used; one reader per process (the follower's).
 *
 * INTERFACE
 *   inplace_begin()   position at a record end, with the record before it
 *   inplace_read()    the next record, if it ends at or below a limit
 *   inplace_close()   the segment file closed, the buffers freed
 */
#ifndef PTRACK_PG_CAPTURE_WAL_INPLACE_READER_H
#define PTRACK_PG_CAPTURE_WAL_INPLACE_READER_H

extern "C" {
#include "postgres.h"

#include "access/xlogdefs.h"
}

#include "capture/wal_record_view.h"

namespace ptrack::pg {

enum class InplaceRead : uint8_t {
    kRecord,     /* a record was read into the view; the reader stands at its end */
    kEnd,        /* the next record does not end at or below the limit yet; nothing moved */
    kNotHandled  /* the next record is not one this reader reads (inplace_why()); nothing moved */
};

/*
 * Positions the reader at `next`, the end LSN of the record that begins at
 * `prev_start` (xl_prev of the next record must equal it), on timeline
 * `tli` of the cluster `system_id`, segments of `segment_bytes`.  Keeps the
 * open file and what its buffer holds (the WAL below a flush position never
 * changes) unless something else differs.
 */
void inplace_begin(Lsn next, Lsn prev_start, TimeLineID tli, uint64 system_id, uint32 segment_bytes);

/*
 * Reads the record at the reader's position into `view` if it ends at or
 * below `limit`, the WAL flushed (every byte below it is in the segment
 * files and never changes).
 */
InplaceRead inplace_read(Lsn limit, WalRecordView* view);

/*
 * After kNotHandled: the reason (valid until the next call; it names the
 * page where the fault lies in a page), and whether that is because a
 * segment file could not be opened or read (not a record it does not
 * expect).
 */
const char* inplace_why();
bool inplace_read_failed();

/* Closes the segment file and frees the buffers (also after an ERROR); inplace_begin() starts again. */
void inplace_close();

}  // namespace ptrack::pg

#endif
