/*
 * map_answer.h -- which blocks of one relation segment file the map (and,
 * for an earlier version's map being migrated, its limit table) says changed
 * since a start LSN: the map's answer to
 * ptrack_get_pagemapset(start_lsn), one file at a time, during a walk of
 * the data directory (datadir_walk.h).  Its users: the SQL functions when
 * the map answers (sql/sql_functions.cpp),
 * ptrack_verify() (sql/verify.cpp), and the WAL follower's migration of a
 * map into a change summary (capture/wal/map_migration.cpp), which is why
 * it sits in core/, beneath both.
 *
 * One rule set (docs/design.md sections 1, 3.3, 4.10): unlogged relations
 * are left out (only their init fork is backed up); FSM forks are listed
 * whole; otherwise a block is listed when the map says it changed at or
 * after start_lsn, or when the limit table says every block from some block
 * on did (truncations, created and dropped relations and databases).
 *
 * C-style code (boundary.h): callable only from frames that own no C++
 * objects with destructors.
 */
#ifndef PTRACK_PG_MAP_ANSWER_H
#define PTRACK_PG_MAP_ANSWER_H

extern "C" {
#include "postgres.h"

#include "funcapi.h"
#include "utils/tuplestore.h"
}

#include "core/boundary.h"
#include "core/datadir_walk.h"
#include "core/shared_state.h"

namespace ptrack::pg {

/* State of one walk over the data directory for one start LSN. */
struct PagemapScan {
    Lsn since;
    uint8_t* pagemap; /* RELSEG_SIZE / 8 bytes; only the current file's bytes are valid */
    uint32_t nblocks; /* blocks of the current file */
    Tuplestorestate* tuplestore;
    TupleDesc tupdesc;
    int64 files;
    int64 pages;
    RelSegment limited;   /* the file file_may_have_changed() looked at last */
    uint32_t limit_first; /* its first block changed by a limit, counted in the segment; RELSEG_SIZE if none */
    void* caller;         /* the calling function's own state */
};
PTRACK_FRAME_SAFE(PagemapScan);

/* Prepares `state` for a walk (palloc'd pagemap: pfree(state->pagemap) after). */
void init_scan(PagemapScan* state, Lsn since);

/*
 * Walk filter (datadir_walk.h): false if the file has nothing to list, so
 * that unchanged files cost no stat().
 */
bool file_may_have_changed(const RelSegment& segment, bool unlogged, void* arg);

/*
 * Fills state->pagemap (bit b of byte b / 8: block b of the segment file)
 * and state->nblocks for one file of `size_bytes` bytes that the filter let
 * through; returns the number of listed blocks.
 */
uint32_t file_changes(const RelationFile* file, PagemapScan* state);

/* True if bit `block` of a pagemap is set. */
inline bool pagemap_has(const uint8_t* pagemap, uint32_t block)
{
    return (pagemap[block / 8] & (1u << (block % 8))) != 0;
}

}  // namespace ptrack::pg

#endif
