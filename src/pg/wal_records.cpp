/*
 * wal_records.cpp -- see wal_records.h.  First cut: block references and the
 * visibility-map page of every heap block a heap record references.
 */
extern "C" {
#include "postgres.h"

#include "access/rmgr.h"
#include "access/xlogreader.h"
#include "common/relpath.h"
#include "storage/bufpage.h"
}

#include "capture.h"

namespace ptrack::pg {

namespace {

/* Heap blocks whose visibility bits one VM page holds: 2 bits per heap block (visibilitymap.c). */
constexpr BlockNumber kHeapBlocksPerVmPage = (BLCKSZ - MAXALIGN(SizeOfPageHeaderData)) * 4;

}  // namespace

const char* capture_wal_record(XLogReaderState* record)
{
    const Lsn lsn = record->EndRecPtr;
    const RmgrId rmid = XLogRecGetRmid(record);
    const bool heap = rmid == RM_HEAP_ID || rmid == RM_HEAP2_ID;
    for (int block_id = 0; block_id <= XLogRecMaxBlockId(record); ++block_id) {
        RelFileNode rnode;
        ForkNumber fork;
        BlockNumber block;
        if (!XLogRecGetBlockTagExtended(record, static_cast<uint8>(block_id), &rnode, &fork, &block, NULL))
            continue;
        const RelFork rel{rnode.spcNode, rnode.dbNode, rnode.relNode, static_cast<uint8_t>(fork)};
        capture_block_at(rel, block, lsn);
        if (heap && fork == MAIN_FORKNUM) {
            const RelFork vm{rnode.spcNode, rnode.dbNode, rnode.relNode, static_cast<uint8_t>(VISIBILITYMAP_FORKNUM)};
            capture_block_at(vm, block / kHeapBlocksPerVmPage, lsn);
        }
    }
    return nullptr;
}

}  // namespace ptrack::pg
