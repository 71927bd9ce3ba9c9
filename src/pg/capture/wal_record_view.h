/*
 * wal_record_view.h -- one decoded WAL record as the decoding of its
 * changes (wal_records.h) reads it, whichever reader produced it:
 * xlogreader (view_of_reader(), below) or the WAL follower's in-place
 * reader (capture/wal/inplace_reader.h).  The view holds what the decoding
 * and the follower's loop use and nothing more: where the record lies, its
 * resource manager and info bits, its main data, and its block references.
 *
 * INTERFACE
 *   WalBlockRef, WalRecordView   the view
 *   view_of_reader()             the view of xlogreader's current record
 *   describe_view_difference()   the first field where two views differ
 */
#ifndef PTRACK_PG_WAL_RECORD_VIEW_H
#define PTRACK_PG_WAL_RECORD_VIEW_H

extern "C" {
#include "postgres.h"

#include "access/xlogreader.h"
#include "access/xlogrecord.h"
}

#include "ptrack/relfork.h"

namespace ptrack::pg {

/* One block reference of a record: the block `block` of fork `rel`, under block id `id`. */
struct WalBlockRef {
    RelFork rel;
    ptrack::BlockNumber block;
    uint8_t id; /* 0 .. XLR_MAX_BLOCK_ID, increasing along blocks[] */
};

/*
 * A record read and checked (page headers, xl_prev, CRC, the lengths of its
 * block headers).  Valid until its reader reads the next record.
 */
struct WalRecordView {
    Lsn start;             /* where the record begins (xlogreader's ReadRecPtr) */
    Lsn end;               /* where the next record may begin (EndRecPtr): the record's end MAXALIGNed, or the
                              next segment's start after XLOG_SWITCH; the record's changes count at this LSN */
    Lsn prev;              /* xl_prev: where the record before it begins */
    uint8_t rmid;          /* xl_rmid */
    uint8_t info;          /* xl_info, with XLR_SPECIAL_REL_UPDATE and the other XLR_INFO_MASK bits */
    const char* main_data; /* the record's main data, contiguous and MAXALIGNed; nullptr when main_data_len is 0 */
    uint32_t main_data_len;
    uint32_t block_count;  /* entries of blocks[] in use */
    WalBlockRef blocks[XLR_MAX_BLOCK_ID + 1];
};

/* Fills `view` with the record `reader` decoded last (XLogReadRecord() returned it). */
void view_of_reader(XLogReaderState* reader, WalRecordView* view);

/*
 * False if `a` and `b` hold the same record (every field, the main data's
 * bytes, each block reference); else true, with the first difference
 * described in `out` (`size` bytes).
 */
bool describe_view_difference(const WalRecordView& a, const WalRecordView& b, char* out, size_t size);

}  // namespace ptrack::pg

#endif
