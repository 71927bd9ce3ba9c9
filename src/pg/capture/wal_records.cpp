/*
 * wal_records.cpp -- what one WAL record changed, for the WAL follower
 * (follower_read.cpp) and the hooks source's startup scan (startup_scan.cpp):
 * every block it references, and the changes it makes without a block
 * reference (relation limits, database directories), go to the caller's
 * sink (wal_records.h), or restart tracking (docs/design.md section 4.2).
 * The record comes as a view (wal_record_view.h), from xlogreader or from
 * the follower's in-place reader: both feed this same decoding.
 * Everything counts at the record's end LSN (WalRecordView::end, xlogreader's
 * EndRecPtr): a record that ends at or after
 * L is listed by pagemapset(L), and no record ending before L changes
 * anything a backup starting at L has not already seen.
 *
 * Written from the PostgreSQL 15 sources (redo routines in
 * src/backend/access/heap/heapam.c, catalog/storage.c, access/transam/xact.c,
 * commands/dbcommands.c, access/transam/xlog.c) and re-derived from 17.11 and
 * 18.6 (heap redo moved to access/heap/heapam_xlog.c in 18); what differs
 * between them is listed in docs/design.md section 8.1, and the record shapes
 * (the relation fields) are read through compat/compat.h.  Per record kind,
 * the rule and why it is complete:
 *
 * Block references (every record).  Every block id in use, 0 ..
 * XLR_MAX_BLOCK_ID (the view lists each), on whatever fork it names.  Nothing is skipped: the WAL only carries blocks of permanent
 * relations and init forks, which are exactly what backups copy.  Redo
 * changes a page only through a block reference of its record, except for
 * the kinds below; that is the contract pg_rewind (parsexlog.c) relies on,
 * and XLR_SPECIAL_REL_UPDATE marks the records that break it.
 *
 * Visibility map bits (RM_HEAP_ID, RM_HEAP2_ID).  Heap insert, multi-insert,
 * delete, update (old and new page), lock and lock-updated clear the
 * all-visible/all-frozen bits of a heap page in the VM (visibilitymap_clear,
 * during the operation and in redo) without referencing the VM page.  (17.11
 * and 18.6 register the VM page with these records, but their redo still
 * clears the bits without one for WAL written before that fix, and when the
 * heap page's PD_ALL_VISIBLE was set with the VM bits already clear.)  Each
 * such record references the heap page whose bits it clears, on the main
 * fork.  Rule, conservative and simpler than reading each record's flags:
 * for every heap/heap2 record, every main-fork block it references also
 * marks the VM block holding that heap block's bits, heap block /
 * kHeapBlocksPerVmPage.  Setting bits (XLOG_HEAP2_VISIBLE) references the VM
 * page itself.  Pruning and freezing change the heap page only, through its
 * block reference: 15's XLOG_HEAP2_PRUNE, XLOG_HEAP2_VACUUM and
 * XLOG_HEAP2_FREEZE_PAGE, 17's and 18's combined XLOG_HEAP2_PRUNE_ON_ACCESS,
 * XLOG_HEAP2_PRUNE_VACUUM_SCAN and XLOG_HEAP2_PRUNE_VACUUM_CLEANUP (and the
 * FSM, listed whole); the rule marks their VM block all the same.  Cost: one extra mark per heap record, and at most one VM
 * block (8 KB for 255 MB of heap) listed in excess per changed heap range.
 *
 * XLOG_SMGR_CREATE (flagged).  smgrcreate() of one fork of a relfilenode:
 * a relation limit 0 on that fork, so a reused relfilenode inherits none
 * of the old file's blocks.  The file growth watch's remembered size drops
 * to 0 with it, so every block the file gets again is dated when it is
 * added (file_growth.h).
 *
 * XLOG_SMGR_TRUNCATE (flagged; also written by contrib/pg_visibility's
 * pg_truncate_visibility_map()).  Per its flags: SMGR_TRUNCATE_HEAP cuts the
 * main fork to blkno blocks: limit blkno, so every block at or beyond the new
 * length counts as changed from now on, including blocks later re-added by
 * an extension that is never WAL-logged.  SMGR_TRUNCATE_VM: the VM block
 * that holds heap block blkno's bits keeps only the bits before it, cleared
 * in place without a block reference (visibilitymap_prepare_truncate), and
 * the blocks after it are removed: limit blkno / kHeapBlocksPerVmPage.
 * SMGR_TRUNCATE_FSM: FreeSpaceMapPrepareTruncateRel() rewrites FSM pages in
 * place: limit 0 (FSM forks are listed whole anyway).  A fork that does not
 * exist gets a limit nobody asks about; harmless.
 *
 * Relations dropped by XLOG_XACT_COMMIT, XLOG_XACT_ABORT,
 * XLOG_XACT_COMMIT_PREPARED, XLOG_XACT_ABORT_PREPARED (flagged when they
 * drop any).  xact_redo_commit/abort unlink every fork of each relfilenode
 * listed (ParseCommitRecord/ParseAbortRecord): limit 0 on all four forks of
 * each (the growth watch, as for XLOG_SMGR_CREATE).  The two-phase variants carry the list of the prepared transaction.
 * XLOG_XACT_PREPARE drops nothing: the files it will drop are listed again
 * by the COMMIT PREPARED or ABORT PREPARED that drops them.  Subtransaction
 * aborts write their own XLOG_XACT_ABORT.  Temporary relations never appear.
 *
 * XLOG_DBASE_CREATE_FILE_COPY (flagged; CREATE DATABASE ... STRATEGY
 * FILE_COPY and ALTER DATABASE SET TABLESPACE): copydir() of a whole
 * database directory, no block references: a database limit on the new
 * directory (tablespace_id, db_id), every block of every file in it.
 * XLOG_DBASE_CREATE_WAL_LOG (not flagged): creates the directory and its
 * PG_VERSION; every relation is then created with XLOG_SMGR_CREATE and
 * written with block references, but the database limit costs nothing more
 * and covers the directory whatever it held before.  XLOG_DBASE_DROP
 * (flagged; DROP DATABASE, and the old directory after ALTER DATABASE SET
 * TABLESPACE): removes the directory in each tablespace listed: a database
 * limit on each, so a database OID reused later inherits nothing.
 *
 * wal_level below replica (XLOG_PARAMETER_CHANGE).  Under wal_level =
 * minimal, new relations are written without WAL (WAL skipping, pending
 * syncs in storage.c), so the WAL cannot tell their blocks: tracking
 * restarts.  The server logs XLOG_PARAMETER_CHANGE at startup whenever
 * wal_level differs from pg_control's (XLogReportParameters), so a run under
 * minimal always begins with one.  17 and 18 also state wal_level in their
 * checkpoint records and in XLOG_CHECKPOINT_REDO (new in 17, the marker at
 * an online checkpoint's redo point, which changes nothing); they are not
 * read: a run under minimal begins with the parameter change, the wal source
 * never follows one (a server with its physical slot refuses to start under
 * minimal), and the hooks source's startup scan must not refuse a map after
 * a clean shutdown of a server that runs minimal throughout (section 4.6).
 *
 * Any other record with XLR_SPECIAL_REL_UPDATE: tracking restarts, naming the
 * resource manager and the record.  In PostgreSQL 15, 17 and 18 exactly these
 * records set the flag, all handled above:
 *   XLOG_SMGR_CREATE        storage.c log_smgrcreate(): a fork file created
 *   XLOG_SMGR_TRUNCATE      storage.c RelationTruncate(), pg_visibility.c
 *                           pg_truncate_visibility_map(): forks truncated
 *   XLOG_XACT_COMMIT[_PREPARED], XLOG_XACT_ABORT[_PREPARED]
 *                           xact.c XactLogCommitRecord()/XactLogAbortRecord()
 *                           when nrels > 0: relation files unlinked
 *   XLOG_DBASE_CREATE_FILE_COPY  dbcommands.c CreateDatabaseUsingFileCopy(),
 *                           movedb(): a database directory copied
 *   XLOG_DBASE_DROP         dbcommands.c dropdb(), movedb(),
 *                           remove_dbtablespaces(): database directories removed
 * so the rule only fires for a custom resource manager or a later server
 * that adds one: never guessed.  A custom resource manager's block
 * references are marked like any other.
 *
 * What this file cannot see: relation extension that is never WAL-logged
 * (bulk extension, hash bucket allocation, the VM and FSM growing); the
 * follower watches the files' lengths for it (file_growth.h), and every block
 * reference here also tells that watch the file had that block.
 *
 * Called once per record, in the follower only; allocates nothing, raises
 * no ERROR, owns no C++ object with a destructor.
 */
extern "C" {
#include "postgres.h"

#include <stdarg.h>

#include "access/rmgr.h"
#include "access/visibilitymapdefs.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "access/xlogreader.h"
#include "access/xlogrecord.h"
#include "catalog/pg_control.h"
#include "catalog/storage_xlog.h"
#include "commands/dbcommands_xlog.h"
#include "common/relpath.h"
#include "storage/bufpage.h"
}

#include "compat/compat.h"
#include "core/shared_state.h"
#include "capture/wal_records.h"

namespace ptrack::pg {

namespace {

/*
 * Heap blocks whose bits one VM page holds, as HEAPBLOCKS_PER_PAGE in
 * visibilitymap.c (private there): the page's contents after its
 * MAXALIGN'ed header, BITS_PER_HEAPBLOCK bits per heap block.  32672 for
 * 8 KB blocks.
 */
constexpr BlockNumber kHeapBlocksPerVmPage =
    static_cast<BlockNumber>((BLCKSZ - MAXALIGN(SizeOfPageHeaderData)) * (BITS_PER_BYTE / BITS_PER_HEAPBLOCK));
static_assert(BLCKSZ != 8192 || kHeapBlocksPerVmPage == 32672, "HEAPBLOCKS_PER_PAGE of visibilitymap.c");

/* "heap2/VISIBLE (info 0x40)" for a reason text. */
const char* record_kind(const WalRecordView& record, char* out, size_t size)
{
    const RmgrId rmid = record.rmid;
    const uint8 info = record.info;
    const char* rmgr = RmgrIdExists(rmid) ? RmgrTable[rmid].rm_name : nullptr;
    const char* id = rmgr != nullptr && RmgrTable[rmid].rm_identify != nullptr
                         ? RmgrTable[rmid].rm_identify(info)
                         : nullptr;
    if (rmgr == nullptr)
        snprintf(out, size, "resource manager %d, info 0x%02X", static_cast<int>(rmid), info);
    else
        snprintf(out, size, "%s/%s (info 0x%02X)", rmgr, id != nullptr ? id : "UNKNOWN", info);
    return out;
}

const char* malformed(const WalRecordView& record)
{
    char kind[96];
    return reason("WAL record %s at %X/%X is shorter than its kind requires", record_kind(record, kind, sizeof(kind)),
                  PTRACK_LSN_ARGS(record.start));
}

/* Copies the record's fixed-size main data into *out; false if the record is shorter. */
template <typename T>
bool main_data(const WalRecordView& record, T* out)
{
    if (record.main_data_len < sizeof(T))
        return false;
    memcpy(out, record.main_data, sizeof(T));
    return true;
}

void mark_block_references(const WalRecordView& record, Lsn lsn, bool heap, WalChangeSink& sink)
{
    for (uint32_t i = 0; i < record.block_count; ++i) {
        RelFork rel = record.blocks[i].rel;
        const BlockNumber block = record.blocks[i].block;
        sink.block(rel, block, lsn, true);
        if (heap && rel.fork == MAIN_FORKNUM) {
            rel.fork = VISIBILITYMAP_FORKNUM;
            sink.block(rel, block / kHeapBlocksPerVmPage, lsn, false);
        }
    }
}

void drop_relations(const PgRelId* nodes, int count, Lsn lsn, WalChangeSink& sink)
{
    for (int i = 0; i < count; ++i)
        for (int fork = 0; fork <= MAX_FORKNUM; ++fork)
            sink.relation_limit(rel_fork(nodes[i], fork), 0, lsn);
}

/*
 * Each apply_* handles one resource manager's records that change files
 * without block references.  Returns true if it knows the record (it may set
 * *why to restart tracking), false if the record is not one it handles.
 */

bool apply_smgr(const WalRecordView& record, Lsn lsn, WalChangeSink& sink, const char** why)
{
    const uint8 info = record.info & XLR_RMGR_INFO_MASK;
    if (info == XLOG_SMGR_CREATE) {
        xl_smgr_create xlrec;
        if (!main_data(record, &xlrec) || xlrec.forkNum < 0 || xlrec.forkNum > MAX_FORKNUM)
            *why = malformed(record);
        else
            sink.relation_limit(rel_fork(smgr_create_rel(xlrec), xlrec.forkNum), 0, lsn);
        return true;
    }
    if (info == XLOG_SMGR_TRUNCATE) {
        xl_smgr_truncate xlrec;
        if (!main_data(record, &xlrec)) {
            *why = malformed(record);
            return true;
        }
        if (xlrec.flags & SMGR_TRUNCATE_HEAP)
            sink.relation_limit(rel_fork(smgr_truncate_rel(xlrec), MAIN_FORKNUM), xlrec.blkno, lsn);
        if (xlrec.flags & SMGR_TRUNCATE_VM)
            sink.relation_limit(rel_fork(smgr_truncate_rel(xlrec), VISIBILITYMAP_FORKNUM), xlrec.blkno / kHeapBlocksPerVmPage, lsn);
        if (xlrec.flags & SMGR_TRUNCATE_FSM)
            sink.relation_limit(rel_fork(smgr_truncate_rel(xlrec), FSM_FORKNUM), 0, lsn);
        if (xlrec.flags & ~SMGR_TRUNCATE_ALL) {
            char kind[96];
            *why = reason("WAL record %s at %X/%X has unknown truncation flags 0x%X",
                          record_kind(record, kind, sizeof(kind)), PTRACK_LSN_ARGS(record.start),
                          static_cast<unsigned>(xlrec.flags));
        }
        return true;
    }
    return false;
}

bool apply_xact(const WalRecordView& record, Lsn lsn, WalChangeSink& sink, const char** why)
{
    const uint8 info = record.info & XLOG_XACT_OPMASK;
    if (info == XLOG_XACT_COMMIT || info == XLOG_XACT_COMMIT_PREPARED) {
        if (record.main_data_len < sizeof(xl_xact_commit)) {
            *why = malformed(record);
            return true;
        }
        xl_xact_parsed_commit parsed;
        ParseCommitRecord(record.info, reinterpret_cast<xl_xact_commit*>(const_cast<char*>(record.main_data)),
                          &parsed);
        drop_relations(xact_dropped_rels(parsed), parsed.nrels, lsn, sink);
        return true;
    }
    if (info == XLOG_XACT_ABORT || info == XLOG_XACT_ABORT_PREPARED) {
        if (record.main_data_len < sizeof(xl_xact_abort)) {
            *why = malformed(record);
            return true;
        }
        xl_xact_parsed_abort parsed;
        ParseAbortRecord(record.info, reinterpret_cast<xl_xact_abort*>(const_cast<char*>(record.main_data)), &parsed);
        drop_relations(xact_dropped_rels(parsed), parsed.nrels, lsn, sink);
        return true;
    }
    return false;
}

/* Both CREATE DATABASE records begin with the new directory's database and tablespace. */
static_assert(offsetof(xl_dbase_create_file_copy_rec, db_id) == offsetof(xl_dbase_create_wal_log_rec, db_id) &&
                  offsetof(xl_dbase_create_file_copy_rec, tablespace_id) ==
                      offsetof(xl_dbase_create_wal_log_rec, tablespace_id),
              "xl_dbase_create_wal_log_rec is a prefix of xl_dbase_create_file_copy_rec");

bool apply_dbase(const WalRecordView& record, Lsn lsn, WalChangeSink& sink, const char** why)
{
    const uint8 info = record.info & XLR_RMGR_INFO_MASK;
    if (info == XLOG_DBASE_CREATE_FILE_COPY || info == XLOG_DBASE_CREATE_WAL_LOG) {
        xl_dbase_create_wal_log_rec created;
        if (!main_data(record, &created))
            *why = malformed(record);
        else
            sink.database(created.tablespace_id, created.db_id, lsn);
        return true;
    }
    if (info == XLOG_DBASE_DROP) {
        const uint32 length = record.main_data_len;
        xl_dbase_drop_rec head;
        if (length < MinSizeOfDbaseDropRec) {
            *why = malformed(record);
            return true;
        }
        memcpy(&head, record.main_data, MinSizeOfDbaseDropRec);
        if (head.ntablespaces < 0 ||
            length < MinSizeOfDbaseDropRec + static_cast<uint64>(head.ntablespaces) * sizeof(Oid)) {
            *why = malformed(record);
            return true;
        }
        const char* ids = record.main_data + MinSizeOfDbaseDropRec;
        for (int i = 0; i < head.ntablespaces; ++i) {
            Oid spc;
            memcpy(&spc, ids + i * sizeof(Oid), sizeof(Oid));
            sink.database(spc, head.db_id, lsn);
        }
        return true;
    }
    return false;
}

bool apply_xlog(const WalRecordView& record, const char** why)
{
    const uint8 info = record.info & XLR_RMGR_INFO_MASK;
    if (info != XLOG_PARAMETER_CHANGE)
        return false;
    xl_parameter_change xlrec;
    if (!main_data(record, &xlrec))
        *why = malformed(record);
    else if (xlrec.wal_level < WAL_LEVEL_REPLICA)
        *why = reason("the server ran with wal_level = minimal (parameter change at %X/%X), which writes new "
                      "relations without WAL",
                      PTRACK_LSN_ARGS(record.start));
    return true;
}

}  // namespace

bool no_record_ends_at(Lsn lsn, uint32_t segment_bytes) noexcept
{
    const uint64_t in_segment = segment_bytes > 0 ? lsn % segment_bytes : UINT64_MAX;
    return in_segment == SizeOfXLogLongPHD || (in_segment >= XLOG_BLCKSZ && lsn % XLOG_BLCKSZ == SizeOfXLogShortPHD);
}

/* One buffer per process: the follower and the startup scan each keep only their latest reason. */
const char* reason(const char* format, ...)
{
    static char text[256];
    va_list args;
    va_start(args, format);
    vsnprintf(text, sizeof(text), format, args);
    va_end(args);
    return text;
}

const char* capture_wal_record(const WalRecordView& record, WalChangeSink& sink)
{
    const Lsn lsn = record.end;
    const RmgrId rmid = record.rmid;
    mark_block_references(record, lsn, rmid == RM_HEAP_ID || rmid == RM_HEAP2_ID, sink);

    const char* why = nullptr;
    bool known = false;
    switch (rmid) {
    case RM_SMGR_ID: known = apply_smgr(record, lsn, sink, &why); break;
    case RM_XACT_ID: known = apply_xact(record, lsn, sink, &why); break;
    case RM_DBASE_ID: known = apply_dbase(record, lsn, sink, &why); break;
    case RM_XLOG_ID: known = apply_xlog(record, &why); break;
    default: break;
    }
    if (why != nullptr)
        return why;
    if (!known && (record.info & XLR_SPECIAL_REL_UPDATE)) {
        char kind[96];
        return reason("WAL record %s at %X/%X changes relation files in a way ptrack does not know",
                      record_kind(record, kind, sizeof(kind)), PTRACK_LSN_ARGS(record.start));
    }
    return nullptr;
}

}  // namespace ptrack::pg
