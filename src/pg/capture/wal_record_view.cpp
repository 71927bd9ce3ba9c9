/*
 * wal_record_view.cpp -- the view of a record decoded by xlogreader, and
 * the comparison of two views (wal_record_view.h).  xlogreader serves the
 * startup scan, the follower's reads outside its steady state and its
 * re-reads of a record; the comparison checks the follower's in-place
 * reader against it record by record (ptrack.wal_reader = compare).
 */
extern "C" {
#include "postgres.h"

#include "access/xlogreader.h"
}

#include "capture/wal_record_view.h"
#include "compat/compat.h"
#include "core/shared_state.h"

namespace ptrack::pg {

void view_of_reader(XLogReaderState* reader, WalRecordView* view)
{
    view->start = reader->ReadRecPtr;
    view->end = reader->EndRecPtr;
    view->prev = XLogRecGetPrev(reader);
    view->rmid = XLogRecGetRmid(reader);
    view->info = XLogRecGetInfo(reader);
    view->main_data_len = XLogRecGetDataLen(reader);
    view->main_data = view->main_data_len > 0 ? XLogRecGetData(reader) : nullptr;
    view->block_count = 0;
    for (int id = 0; id <= XLogRecMaxBlockId(reader); ++id) {
        WalBlockRef& ref = view->blocks[view->block_count];
        if (!record_block_tag(reader, static_cast<uint8>(id), &ref.rel, &ref.block))
            continue;
        ref.id = static_cast<uint8_t>(id);
        view->block_count++;
    }
}

bool describe_view_difference(const WalRecordView& a, const WalRecordView& b, char* out, size_t size)
{
    if (a.start != b.start || a.end != b.end || a.prev != b.prev) {
        snprintf(out, size, "start %X/%X end %X/%X prev %X/%X against start %X/%X end %X/%X prev %X/%X",
                 PTRACK_LSN_ARGS(a.start), PTRACK_LSN_ARGS(a.end), PTRACK_LSN_ARGS(a.prev), PTRACK_LSN_ARGS(b.start),
                 PTRACK_LSN_ARGS(b.end), PTRACK_LSN_ARGS(b.prev));
        return true;
    }
    if (a.rmid != b.rmid || a.info != b.info) {
        snprintf(out, size, "resource manager %u info 0x%02X against %u info 0x%02X", a.rmid, a.info, b.rmid,
                 b.info);
        return true;
    }
    if (a.main_data_len != b.main_data_len) {
        snprintf(out, size, "main data of %u bytes against %u", a.main_data_len, b.main_data_len);
        return true;
    }
    if (a.main_data_len > 0 && memcmp(a.main_data, b.main_data, a.main_data_len) != 0) {
        uint32_t at = 0;
        while (a.main_data[at] == b.main_data[at])
            ++at;
        snprintf(out, size, "main data differs at byte %u of %u", at, a.main_data_len);
        return true;
    }
    if (a.main_data_len > 0 && (reinterpret_cast<uintptr_t>(a.main_data) % MAXIMUM_ALIGNOF != 0 ||
                                reinterpret_cast<uintptr_t>(b.main_data) % MAXIMUM_ALIGNOF != 0)) {
        snprintf(out, size, "main data not MAXALIGNed");
        return true;
    }
    const uint32_t n = Min(a.block_count, b.block_count);
    for (uint32_t i = 0; i < n; ++i) {
        const WalBlockRef& x = a.blocks[i];
        const WalBlockRef& y = b.blocks[i];
        if (x.id != y.id || !(x.rel == y.rel) || x.block != y.block) {
            snprintf(out, size, "block reference #%u: id %u rel %u/%u/%u fork %u blk %u against id %u rel %u/%u/%u "
                     "fork %u blk %u",
                     i, x.id, x.rel.spc_oid, x.rel.db_oid, x.rel.relfilenode, x.rel.fork, x.block, y.id,
                     y.rel.spc_oid, y.rel.db_oid, y.rel.relfilenode, y.rel.fork, y.block);
            return true;
        }
    }
    if (a.block_count != b.block_count) {
        snprintf(out, size, "%u block references against %u", a.block_count, b.block_count);
        return true;
    }
    return false;
}

}  // namespace ptrack::pg
