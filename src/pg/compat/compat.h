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
 *   smgr_create_rel(), smgr_truncate_rel(), xact_dropped_rels()
 *                           the relation fields of the smgr and xact records
 *   slot_create(), slot_acquire()
 *                           ReplicationSlotCreate/Acquire (compat.cpp)
 *   bgworker_is_registered()  a walk of BackgroundWorkerList (slist; 18: dlist)
 *   guc_variables()         every configuration variable (get_guc_variables)
 *
 * Page headers are read field by field (sql/verify.cpp), so that the Page
 * type, char * (15, 17) or PageData * (18), never matters.
 */
#ifndef PTRACK_PG_COMPAT_H
#define PTRACK_PG_COMPAT_H

extern "C" {
#include "postgres.h"

#include "access/xact.h"
#include "access/xlogreader.h"
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

#if PG_MAJORVERSION_NUM >= 16

using PgRelId = RelFileLocator;
using PgRelIdBackend = RelFileLocatorBackend;

inline RelFork rel_fork(const RelFileLocator& r, int fork)
{
    return RelFork{r.spcOid, r.dbOid, r.relNumber, static_cast<uint8_t>(fork)};
}

inline RelFork rel_fork(const RelFileLocatorBackend& r, int fork)
{
    return rel_fork(r.locator, fork);
}

inline bool rel_is_temp(const RelFileLocatorBackend& r)
{
    return RelFileLocatorBackendIsTemp(r);
}

inline RelFileLocator pg_rel_id(const RelFork& rel)
{
    RelFileLocator r;
    r.spcOid = rel.spc_oid;
    r.dbOid = rel.db_oid;
    r.relNumber = rel.relfilenode;
    return r;
}

inline const RelFileLocator& smgr_create_rel(const xl_smgr_create& xlrec)
{
    return xlrec.rlocator;
}

inline const RelFileLocator& smgr_truncate_rel(const xl_smgr_truncate& xlrec)
{
    return xlrec.rlocator;
}

template <typename Parsed>
inline const RelFileLocator* xact_dropped_rels(const Parsed& parsed)
{
    return parsed.xlocators;
}

#else

using PgRelId = RelFileNode;
using PgRelIdBackend = RelFileNodeBackend;

inline RelFork rel_fork(const RelFileNode& r, int fork)
{
    return RelFork{r.spcNode, r.dbNode, r.relNode, static_cast<uint8_t>(fork)};
}

inline RelFork rel_fork(const RelFileNodeBackend& r, int fork)
{
    return rel_fork(r.node, fork);
}

inline bool rel_is_temp(const RelFileNodeBackend& r)
{
    return RelFileNodeBackendIsTemp(r);
}

inline RelFileNode pg_rel_id(const RelFork& rel)
{
    RelFileNode r;
    r.spcNode = rel.spc_oid;
    r.dbNode = rel.db_oid;
    r.relNode = rel.relfilenode;
    return r;
}

inline const RelFileNode& smgr_create_rel(const xl_smgr_create& xlrec)
{
    return xlrec.rnode;
}

inline const RelFileNode& smgr_truncate_rel(const xl_smgr_truncate& xlrec)
{
    return xlrec.rnode;
}

template <typename Parsed>
inline const RelFileNode* xact_dropped_rels(const Parsed& parsed)
{
    return parsed.xnodes;
}

#endif

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

/* The path of fork `rel` of a permanent relation, relative to the data directory, into out[MAXPGPATH]. */
void relation_path(const RelFork& rel, char* out);

/* Creates the persistent physical replication slot `name` and acquires it (no failover, not synced). */
void slot_create(const char* name);

/* Acquires the existing slot `name`, waiting for no one, also when its WAL was invalidated. */
void slot_acquire(const char* name);

/* True if a background worker running `function` of `library` is registered in the postmaster. */
bool bgworker_is_registered(const char* library, const char* function);

/* Every configuration variable, *count of them (PostgreSQL's own array: do not change it). */
config_generic** guc_variables(int* count);

}  // namespace ptrack::pg

#endif
