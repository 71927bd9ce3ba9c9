/*
 * sql_functions.cpp -- the SQL API of docs/design.md section 5, compatible with
 * pg_probackup's ptrack mode:
 *
 *   ptrack_version()                 text, "major.minor"
 *   ptrack_init_lsn()                pg_lsn from which tracking is complete
 *   ptrack_get_pagemapset(start_lsn) (path, pagecount, pagemap) per changed segment file
 *   ptrack_get_change_stat(start_lsn) (files, pages, "size, MB")
 *
 * Each function checks its arguments and the tracking state first and raises
 * a clear ERROR with a hint, before reading anything.
 *
 * The boundary with C++ (boundary.h): everything called from here into the
 * engine is noexcept, and these frames own no objects with destructors, so
 * neither a C++ exception nor a PostgreSQL longjmp can cross the other's
 * frames; both asserted at compile time below.
 */
extern "C" {
#include "postgres.h"

#include "access/htup_details.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/numeric.h"
#include "utils/pg_lsn.h"
#include "utils/tuplestore.h"

PG_FUNCTION_INFO_V1(ptrack_version);
PG_FUNCTION_INFO_V1(ptrack_init_lsn);
PG_FUNCTION_INFO_V1(ptrack_get_pagemapset);
PG_FUNCTION_INFO_V1(ptrack_get_change_stat);
}

#include "boundary.h"
#include "capture_wal.h"
#include "datadir_walk.h"
#include "ptrack/pagemap.h"
#include "shared_state.h"

#define PTRACK_VERSION "2.2"

namespace ptrack::pg {

namespace {

PTRACK_ENGINE_NOEXCEPT(&Map::segment_pagemap, &Map::segment_may_have_changed, &pagemap_set_all,
                       &pagemap_trimmed_length, &pagemap_bytes, &pagemap_set_from, &LimitTable::first_changed_block);

/* The start_lsn argument: not NULL, not older than ptrack_init_lsn(), not ahead of the WAL. */
Lsn checked_start_lsn(FunctionCallInfo fcinfo)
{
    require_tracking();
    if (PG_ARGISNULL(0))
        ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("start_lsn must not be NULL"),
                        errhint("Pass the start LSN of the previous backup.")));
    const Lsn start = PG_GETARG_LSN(0);
    /* WAL capture: answer only once the follower has applied the WAL written before this call. */
    wait_for_follower();
    const Lsn init = init_lsn();
    if (start < init)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("start_lsn %X/%X is older than ptrack_init_lsn() %X/%X", PTRACK_LSN_ARGS(start),
                               PTRACK_LSN_ARGS(init)),
                        errdetail("Changes made before %X/%X were not tracked.", PTRACK_LSN_ARGS(init)),
                        errhint("Take a full backup.")));
    /*
     * An LSN this server has not reached cannot be the start of a backup of
     * this cluster as it is (another cluster, another timeline, a standby
     * behind the primary the backup was taken from): answering would list
     * next to nothing, and the incremental backup would silently miss
     * changes.
     */
    const Lsn now = current_mark_lsn();
    if (start > now)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("start_lsn %X/%X is ahead of this server's WAL position", PTRACK_LSN_ARGS(start)),
                        errdetail("The WAL position is %X/%X.", PTRACK_LSN_ARGS(now)),
                        errhint("Pass the start LSN of a backup of this cluster; on a standby, wait until it has "
                                "replayed past it.")));
    return start;
}

/* Shared by both set-returning walks: what changed in one file. */
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
};
PTRACK_FRAME_SAFE(PagemapScan);

/*
 * The first block of segment file `segment` that the limit table lists
 * (every block from it on changed at or after `since`), counted from the
 * segment's first block; RELSEG_SIZE if none.  Segment s holds the relation
 * fork's blocks [s * RELSEG_SIZE, (s + 1) * RELSEG_SIZE).
 */
uint32_t limit_in_segment(const RelSegment& segment, Lsn since)
{
    const uint32_t limit = limits.first_changed_block(segment.rel, since);
    const uint64_t start = uint64_t{segment.segno} * RELSEG_SIZE;
    if (limit == kNoLimit || limit >= start + RELSEG_SIZE)
        return RELSEG_SIZE;
    return limit <= start ? 0 : static_cast<uint32_t>(limit - start);
}

/*
 * Fills state->pagemap for one file that file_may_have_changed() let
 * through; returns the number of changed blocks: the map's, and every block
 * from a limit on (truncations, created or dropped relations and databases,
 * ptrack/limit_table.h).  FSM forks are not WAL-logged, so every FSM block
 * is listed (docs/design.md section 1).
 */
uint32_t file_changes(const RelationFile* file, PagemapScan* state)
{
    uint64_t nblocks = (file->size_bytes + BLCKSZ - 1) / BLCKSZ;
    if (nblocks > RELSEG_SIZE)
        nblocks = RELSEG_SIZE; /* a segment file never holds more; be safe on odd sizes */
    const auto n = static_cast<uint32_t>(nblocks);
    state->nblocks = n;
    if (file->segment.rel.fork == kFsmFork)
        return pagemap_set_all(state->pagemap, n);
    uint32_t count = map.segment_pagemap(file->segment.rel, file->segment.segno, n, state->since, state->pagemap,
                                         use_segment_summary);
    /* The walk calls the filter just before, for the same file: reuse its lookup. */
    const bool same = file->segment.rel == state->limited.rel && file->segment.segno == state->limited.segno;
    const uint32_t first = same ? state->limit_first : limit_in_segment(file->segment, state->since);
    if (first < n)
        count += pagemap_set_from(state->pagemap, first, n);
    return count;
}

/*
 * Before a file's size is looked up: false if it has nothing to list, so
 * that unchanged files cost no stat().  Unlogged relations are not backed up
 * (only their init fork); FSM forks are always listed whole; a file that a
 * limit covers is listed whatever the map says.  One limit lookup per file
 * (relation and database bucket), kept for file_changes().
 */
bool file_may_have_changed(const RelSegment& segment, bool unlogged, void* arg)
{
    auto* state = static_cast<PagemapScan*>(arg);
    if (unlogged)
        return false;
    if (segment.rel.fork == kFsmFork)
        return true;
    state->limited = segment;
    state->limit_first = limit_in_segment(segment, state->since);
    if (state->limit_first < RELSEG_SIZE || !use_segment_summary)
        return true;
    return map.segment_may_have_changed(segment.rel, segment.segno, state->since);
}

void emit_pagemap_row(const RelationFile* file, void* arg)
{
    auto* state = static_cast<PagemapScan*>(arg);
    const uint32_t count = file_changes(file, state);
    if (count == 0)
        return;
    const size_t bytes = pagemap_trimmed_length(state->pagemap, pagemap_bytes(state->nblocks));
    bytea* pagemap = static_cast<bytea*>(palloc(VARHDRSZ + bytes));
    SET_VARSIZE(pagemap, VARHDRSZ + bytes);
    memcpy(VARDATA(pagemap), state->pagemap, bytes);

    Datum values[3];
    bool nulls[3] = {false, false, false};
    values[0] = CStringGetTextDatum(file->path);
    values[1] = Int64GetDatum(static_cast<int64>(count));
    values[2] = PointerGetDatum(pagemap);
    tuplestore_putvalues(state->tuplestore, state->tupdesc, values, nulls);
    pfree(DatumGetPointer(values[0]));
    pfree(pagemap);
}

void count_changes(const RelationFile* file, void* arg)
{
    auto* state = static_cast<PagemapScan*>(arg);
    const uint32_t count = file_changes(file, state);
    if (count == 0)
        return;
    state->files++;
    state->pages += count;
}

void init_scan(PagemapScan* state, Lsn since)
{
    state->since = since;
    state->pagemap = static_cast<uint8_t*>(palloc(pagemap_bytes(RELSEG_SIZE)));
    state->nblocks = 0;
    state->tuplestore = NULL;
    state->tupdesc = NULL;
    state->files = 0;
    state->pages = 0;
    state->limited = RelSegment{RelFork{0, 0, 0, kDatabaseKeyFork}, 0, false}; /* matches no file */
    state->limit_first = RELSEG_SIZE;
}

}  // namespace

}  // namespace ptrack::pg

using namespace ptrack::pg;

extern "C" PGDLLEXPORT Datum ptrack_version(PG_FUNCTION_ARGS)
{
    PG_RETURN_TEXT_P(cstring_to_text(PTRACK_VERSION));
}

extern "C" PGDLLEXPORT Datum ptrack_init_lsn(PG_FUNCTION_ARGS)
{
    require_tracking();
    wait_for_follower();
    PG_RETURN_LSN(init_lsn());
}

extern "C" PGDLLEXPORT Datum ptrack_get_pagemapset(PG_FUNCTION_ARGS)
{
    const ptrack::Lsn since = checked_start_lsn(fcinfo);
    InitMaterializedSRF(fcinfo, 0);
    ReturnSetInfo* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);

    PagemapScan state;
    init_scan(&state, since);
    state.tuplestore = rsinfo->setResult;
    state.tupdesc = rsinfo->setDesc;
    walk_data_directory(emit_pagemap_row, &state, file_may_have_changed);
    pfree(state.pagemap);
    return (Datum) 0;
}

extern "C" PGDLLEXPORT Datum ptrack_get_change_stat(PG_FUNCTION_ARGS)
{
    const ptrack::Lsn since = checked_start_lsn(fcinfo);
    TupleDesc tupdesc;
    if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
        ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                        errmsg("function returning record called in context that cannot accept type record")));
    tupdesc = BlessTupleDesc(tupdesc);

    PagemapScan state;
    init_scan(&state, since);
    walk_data_directory(count_changes, &state, file_may_have_changed);
    pfree(state.pagemap);

    /* size in MB = pages * BLCKSZ / 2^20, as an exact numeric */
    Numeric bytes = int64_to_numeric(state.pages * BLCKSZ);
    Numeric size_mb = numeric_div_opt_error(bytes, int64_to_numeric(1024 * 1024), NULL);

    Datum values[3];
    bool nulls[3] = {false, false, false};
    values[0] = Int64GetDatum(state.files);
    values[1] = NumericGetDatum(int64_to_numeric(state.pages));
    values[2] = NumericGetDatum(size_mb);
    PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}
