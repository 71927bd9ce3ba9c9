/*
 * sql_functions.cpp -- the SQL API of docs/design.md section 6, compatible with
 * pg_probackup's ptrack mode:
 *
 *   ptrack_version()                 text, "major.minor"
 *   ptrack_init_lsn()                pg_lsn from which tracking is complete
 *   ptrack_get_pagemapset(start_lsn) (path, pagecount, pagemap) per changed segment file
 *   ptrack_get_change_stat(start_lsn) (files, pages, "size, MB")
 *
 * Each function that answers about changes first refuses an unsafe schema
 * (schema_check.h), then checks its arguments and the tracking state, and
 * raises a clear ERROR with a hint before reading anything.
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

#include "core/boundary.h"
#include "capture/capture_source.h"
#include "core/datadir_walk.h"
#include "sql/answer_start.h"
#include "sql/schema_check.h"
#include "sql/summary_scan.h"
#include "ptrack/pagemap.h"
#include "core/shared_state.h"

#define PTRACK_VERSION "2.4"

namespace ptrack::pg {

namespace {

PTRACK_ENGINE_NOEXCEPT(&pagemap_trimmed_length, &pagemap_bytes);

/*
 * One answer row, whichever source computed it: into the tuplestore of
 * ptrack_get_pagemapset(), or counted for ptrack_get_change_stat() (no
 * tuplestore).  The row callback of summary_scan() too.
 */
void put_row(const char* path, uint32_t count, const uint8_t* bitmap, size_t bytes, void* arg)
{
    auto* state = static_cast<PagemapScan*>(arg);
    state->files++;
    state->pages += count;
    if (state->tuplestore == NULL)
        return;
    bytea* pagemap = static_cast<bytea*>(palloc(VARHDRSZ + bytes));
    SET_VARSIZE(pagemap, VARHDRSZ + bytes);
    memcpy(VARDATA(pagemap), bitmap, bytes);

    Datum values[3];
    bool nulls[3] = {false, false, false};
    values[0] = CStringGetTextDatum(path);
    values[1] = Int64GetDatum(static_cast<int64>(count));
    values[2] = PointerGetDatum(pagemap);
    tuplestore_putvalues(state->tuplestore, state->tupdesc, values, nulls);
    pfree(DatumGetPointer(values[0]));
    pfree(pagemap);
}

/* The map path: one walk callback per relation file the filter let through. */
void map_file_row(const RelationFile* file, void* arg)
{
    auto* state = static_cast<PagemapScan*>(arg);
    const uint32_t count = file_changes(file, state);
    if (count == 0)
        return;
    put_row(file->path, count, state->pagemap, pagemap_trimmed_length(state->pagemap, pagemap_bytes(state->nblocks)),
            state);
}

/*
 * The rows since state->since, from where the running source answers: the
 * summary files (wal capture), after a cut that puts every change made
 * before the call into them; else (hooks) the map.
 */
void answer(PagemapScan* state)
{
    ptrack::Lsn summarized = 0;
    if (running_source().summaries(true, &summarized))
        summary_scan(state->since, summarized, put_row, state);
    else
        walk_data_directory(map_file_row, state, file_may_have_changed);
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
    /* A backup tool asks this first: the impostor is looked for here (schema_check.h). */
    require_safe_schema(fcinfo, true);
    require_tracking();
    running_source().wait_until_fresh();
    PG_RETURN_LSN(answer_init_lsn());
}

extern "C" PGDLLEXPORT Datum ptrack_get_pagemapset(PG_FUNCTION_ARGS)
{
    require_safe_schema(fcinfo, false);
    const ptrack::Lsn since = checked_start_lsn(fcinfo);
    InitMaterializedSRF(fcinfo, 0);
    ReturnSetInfo* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);

    PagemapScan state;
    init_scan(&state, since);
    state.tuplestore = rsinfo->setResult;
    state.tupdesc = rsinfo->setDesc;
    answer(&state);
    pfree(state.pagemap);
    return (Datum) 0;
}

extern "C" PGDLLEXPORT Datum ptrack_get_change_stat(PG_FUNCTION_ARGS)
{
    require_safe_schema(fcinfo, false);
    const ptrack::Lsn since = checked_start_lsn(fcinfo);
    TupleDesc tupdesc;
    if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
        ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                        errmsg("function returning record called in context that cannot accept type record")));
    tupdesc = BlessTupleDesc(tupdesc);

    PagemapScan state;
    init_scan(&state, since);
    answer(&state);
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
