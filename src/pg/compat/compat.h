/*
 * compat.h -- everything that differs between the PostgreSQL major versions
 * ptrack builds for (15, 17, 18), in one place (docs/design.md section 8):
 * the capture, persistence and SQL code call these names and read the same
 * on every version.  This header and compat.cpp are the only files of the
 * tree that test PG_MAJORVERSION_NUM.
 *
 * INTERFACE
 *   kServerMajor            the major version built for (recorded in ptrack.map,
 *                           ptrack.limits, ptrack.sizes: another major's file
 *                           is refused)
 *   PgRelId, PgRelIdBackend RelFileNode[Backend] (15), RelFileLocator[Backend]
 *                           (16+): the relation a WAL record, a hook or a
 *                           path names
 *   rel_fork(), rel_is_temp(), pg_rel_id()
 *                           conversions to and from the engine's RelFork
 *   relation_path()         a fork's path under the data directory
 *   my_proc_number()        this process's PGPROC index (pgprocno, 17+: MyProcNumber)
 *   record_block_tag()      XLogRecGetBlockTagExtended() into a RelFork
 *   checkpoint_redo_record()  the record marking a checkpoint's redo LSN
 *                           (XLOG_CHECKPOINT_REDO, 17+; none on 15)
 *   smgr_create_rel(), smgr_truncate_rel(), xact_dropped_rels()
 *                           the relation fields of the smgr and xact records
 *   slot_create(), slot_acquire()
 *                           ReplicationSlotCreate/Acquire (compat.cpp)
 *   bgworker_is_registered()  a walk of BackgroundWorkerList (slist; 18: dlist)
 *   guc_variables()         every configuration variable (get_guc_variables)
 *   wal_read_from_buffers() WALReadFromBuffers() (17+; on 15 it reads
 *                           nothing, and the files serve every page)
 *
 * Page headers are read field by field (sql/verify.cpp), so that the Page
 * type, char * (15, 17) or PageData * (18), never matters.
 */
#ifndef PTRACK_PG_COMPAT_H
#define PTRACK_PG_COMPAT_H

extern "C" {
#include "postgres.h"

#include "access/rmgr.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "access/xlogreader.h"
#include "catalog/pg_control.h"
#include "catalog/storage_xlog.h"
#include "common/relpath.h"
#include "storage/proc.h"
#if PG_MAJORVERSION_NUM >= 16
#include "storage/relfilelocator.h"
#else
#include "storage/relfilenode.h"
#endif
}

#include "ptrack/relfork.h"

#if PG_MAJORVERSION_NUM != 15 && PG_MAJORVERSION_NUM != 17 && PG_MAJORVERSION_NUM != 18
#error "ptrack builds for PostgreSQL 15, 17 and 18 (src/pg/compat/compat.h)"
#endif

struct config_generic;

namespace ptrack::pg {

constexpr uint32_t kServerMajor = PG_MAJORVERSION_NUM;

/*
 * The relation identifier and where each version keeps its parts: members
 * named here once, so that the functions below are written once.
 */
#if PG_MAJORVERSION_NUM >= 16
using PgRelId = RelFileLocator;
using PgRelIdBackend = RelFileLocatorBackend;
constexpr Oid PgRelId::*kRelSpc = &RelFileLocator::spcOid;
constexpr Oid PgRelId::*kRelDb = &RelFileLocator::dbOid;
constexpr RelFileNumber PgRelId::*kRelNumber = &RelFileLocator::relNumber;
constexpr PgRelId PgRelIdBackend::*kRelOfBackend = &RelFileLocatorBackend::locator;
constexpr PgRelId xl_smgr_create::*kSmgrCreateRel = &xl_smgr_create::rlocator;
constexpr PgRelId xl_smgr_truncate::*kSmgrTruncateRel = &xl_smgr_truncate::rlocator;
constexpr PgRelId* xl_xact_parsed_commit::*kCommitDroppedRels = &xl_xact_parsed_commit::xlocators;
constexpr PgRelId* xl_xact_parsed_abort::*kAbortDroppedRels = &xl_xact_parsed_abort::xlocators;
#else
using PgRelId = RelFileNode;
using PgRelIdBackend = RelFileNodeBackend;
constexpr Oid PgRelId::*kRelSpc = &RelFileNode::spcNode;
constexpr Oid PgRelId::*kRelDb = &RelFileNode::dbNode;
constexpr Oid PgRelId::*kRelNumber = &RelFileNode::relNode;
constexpr PgRelId PgRelIdBackend::*kRelOfBackend = &RelFileNodeBackend::node;
constexpr PgRelId xl_smgr_create::*kSmgrCreateRel = &xl_smgr_create::rnode;
constexpr PgRelId xl_smgr_truncate::*kSmgrTruncateRel = &xl_smgr_truncate::rnode;
constexpr PgRelId* xl_xact_parsed_commit::*kCommitDroppedRels = &xl_xact_parsed_commit::xnodes;
constexpr PgRelId* xl_xact_parsed_abort::*kAbortDroppedRels = &xl_xact_parsed_abort::xnodes;
#endif

inline RelFork rel_fork(const PgRelId& r, int fork)
{
    return RelFork{r.*kRelSpc, r.*kRelDb, r.*kRelNumber, static_cast<uint8_t>(fork)};
}

inline RelFork rel_fork(const PgRelIdBackend& r, int fork)
{
    return rel_fork(r.*kRelOfBackend, fork);
}

/* A temporary relation (a backend's own): never tracked. */
inline bool rel_is_temp(const PgRelIdBackend& r)
{
#if PG_MAJORVERSION_NUM >= 16
    return RelFileLocatorBackendIsTemp(r);
#else
    return RelFileNodeBackendIsTemp(r);
#endif
}

inline PgRelId pg_rel_id(const RelFork& rel)
{
    PgRelId r;
    r.*kRelSpc = rel.spc_oid;
    r.*kRelDb = rel.db_oid;
    r.*kRelNumber = rel.relfilenode;
    return r;
}

/* The relation of an XLOG_SMGR_CREATE or XLOG_SMGR_TRUNCATE record. */
inline const PgRelId& smgr_create_rel(const xl_smgr_create& xlrec)
{
    return xlrec.*kSmgrCreateRel;
}

inline const PgRelId& smgr_truncate_rel(const xl_smgr_truncate& xlrec)
{
    return xlrec.*kSmgrTruncateRel;
}

/* The relations a parsed commit or abort record drops (parsed.nrels of them). */
inline const PgRelId* xact_dropped_rels(const xl_xact_parsed_commit& parsed)
{
    return parsed.*kCommitDroppedRels;
}

inline const PgRelId* xact_dropped_rels(const xl_xact_parsed_abort& parsed)
{
    return parsed.*kAbortDroppedRels;
}

/* This process's index into the PGPROC array (the announcement lines of capture.cpp); -1 without a PGPROC. */
inline int my_proc_number()
{
#if PG_MAJORVERSION_NUM >= 17
    return MyProc != NULL ? MyProcNumber : -1;
#else
    return MyProc != NULL ? MyProc->pgprocno : -1;
#endif
}

/* Block reference `block_id` of the record being decoded; false if the id is unused. */
inline bool record_block_tag(XLogReaderState* record, uint8 block_id, RelFork* rel, BlockNumber* block)
{
    PgRelId id;
    ForkNumber fork;
    ::BlockNumber number;
    if (!XLogRecGetBlockTagExtended(record, block_id, &id, &fork, &number, NULL))
        return false;
    *rel = rel_fork(id, fork);
    *block = number;
    return true;
}

/*
 * True if a record of resource manager `rmid` with info bits `info` is the
 * marker a checkpoint inserts at its redo LSN, which it then starts at
 * (XLOG_CHECKPOINT_REDO, new in 17); always false on 15, where the redo LSN
 * is known only from the checkpoint record or GetRedoRecPtr().
 */
inline bool checkpoint_redo_record(RmgrId rmid, uint8 info)
{
#if PG_MAJORVERSION_NUM >= 17
    return rmid == RM_XLOG_ID && (info & ~XLR_INFO_MASK) == XLOG_CHECKPOINT_REDO;
#else
    (void) rmid, (void) info;
    return false;
#endif
}

/* The path of fork `rel` of a permanent relation, relative to the data directory, into out[MAXPGPATH]. */
void relation_path(const RelFork& rel, char* out);

/* The same for segment `segno` of it: "<path>" for segment 0, "<path>.<segno>" after (md.c's names). */
void segment_file_path(const RelFork& rel, uint32_t segno, char* out);

/* Creates the persistent physical replication slot `name` and acquires it (no failover, not synced). */
void slot_create(const char* name);

/* Acquires the existing slot `name`, waiting for no one, also when its WAL was invalidated. */
void slot_acquire(const char* name);

/* True if a background worker running `function` of `library` is registered in the postmaster. */
bool bgworker_is_registered(const char* library, const char* function);

/* Every configuration variable, *count of them (PostgreSQL's own array: do not change it). */
config_generic** guc_variables(int* count);

/*
 * Copies the WAL [start, start + count) on timeline `tli` from the WAL
 * buffers in shared memory into `dst`, as far as the buffers still hold it
 * (xlog.c, WALReadFromBuffers(): no lock; a page replaced while it was
 * copied ends the copy): returns the number of bytes copied, from `start`
 * on, 0 during recovery, on another timeline, and on PostgreSQL 15, which
 * has no such reader.  The caller reads no further than the WAL flushed;
 * PostgreSQL raises an ERROR for a range past the WAL inserted.
 */
inline Size wal_read_from_buffers(char* dst, XLogRecPtr start, Size count, TimeLineID tli)
{
#if PG_MAJORVERSION_NUM >= 17
    return WALReadFromBuffers(dst, start, count, tli);
#else
    (void) dst, (void) start, (void) count, (void) tli;
    return 0;
#endif
}

}  // namespace ptrack::pg

#endif
