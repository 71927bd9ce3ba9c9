/*
 * verify.cpp -- ptrack_verify(start_lsn): the self-check a DBA runs to prove
 * that ptrack misses nothing on this cluster (docs/design.md section 6.2).
 *
 * It reads the page header of every block of every permanent relation
 * segment file (the files and rules of ptrack_get_pagemapset(), shared
 * through core/map_answer.h) and returns every block whose page LSN is at or
 * after start_lsn but that ptrack_get_pagemapset(start_lsn) does not list:
 * a block a backup from start_lsn would not copy although it changed.  The
 * page LSN is the end of the last WAL record that changed the page, so it is
 * an oracle independent of ptrack.
 *
 * Files are read with the server's own buffer-free file access
 * (OpenTransientFile + pg_pread), throttled by ptrack.verify_max_rate,
 * cancellable, with a NOTICE every ~10 s and a summary NOTICE at the end.
 *
 * The race with concurrent writes (a false "miss" would scare a DBA; a
 * hidden one is worse): a block found with a page LSN >= start_lsn and not
 * listed is only a candidate.  Its write may have completed just before the
 * read while its mark is still to come (hooks: the mark follows the write in
 * mdwrite(); wal: the follower marks when it reads the record, and a bulk
 * writer's page may even precede the WAL flush).  A read may also be torn.
 * So, once per file with candidates, after the marks that could still come
 * have come (wal: the WAL up to the candidates' LSNs is flushed and the
 * follower has applied it; hooks: the marks in progress have ended, after a
 * pause), the file's list is computed again, from its current length, and
 * each candidate page is read again, in up to three rounds (pauses of 0.2,
 * 1 and 2 s): only a block still at or after start_lsn and still not listed
 * after the last round is reported.  A real miss stays unlisted, so
 * the re-check hides none; a block written again meanwhile is listed by the
 * map as it now stands, which is what a backup taken now would get.
 *
 * Not judged: new (all-zero) pages, which carry no LSN (their extension is
 * what ptrack_get_pagemapset() covers by marking extensions; t/001 checks
 * it with file lengths), pages whose header is invalid after a re-read, and
 * FSM forks, which are always listed whole.
 *
 * Judged against what answers (CaptureSourceOps::summaries, the path of
 * the SQL functions): the map (hooks), file by file as above; or, when the
 * change summaries answer (wal capture, docs/design.md section 4.8), their
 * answer itself:
 * summary_scan() is run once, after the cut the SQL functions ask for, and
 * its rows are kept by segment file (a hash table, bitmaps trimmed to their
 * last listed block), so that a block a summary misses (a file rewritten
 * short, a follower that recorded less than it applied) is reported like a
 * block the map misses.  A candidate whose page LSN is at or after the end
 * of the summaries that answer (written after their cut) is judged again
 * against a new answer, taken after the follower has applied the WAL up to
 * it; one before that end is only read again.
 *
 * C-style frames only (boundary.h): errors longjmp out of the walk.
 */
extern "C" {
#include "postgres.h"

#include <fcntl.h>
#include <sys/stat.h>

#include "access/xlog.h"
#include "common/relpath.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/bufpage.h"
#include "storage/fd.h"
#include "storage/latch.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/pg_lsn.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"
#include "utils/wait_event.h"

PG_FUNCTION_INFO_V1(ptrack_verify);
}

#include "core/boundary.h"
#include "capture/capture.h"
#include "capture/capture_source.h"
#include "core/datadir_walk.h"
#include "sql/answer_start.h"
#include "sql/schema_check.h"
#include "sql/summary_scan.h"
#include "core/shared_state.h"
#include "sql/verify.h"

namespace ptrack::pg {

namespace {

/* ptrack.verify_max_rate, in kB/s; 0: no limit. */
int verify_max_rate_kb = 100 * 1024;

constexpr uint32_t kReadChunkBlocks = 16;      /* 128 kB per read */
constexpr long kProgressIntervalMs = 10 * 1000; /* NOTICE every ~10 s */
/* Pauses before each round of re-checks (hooks: time for a write's mark to follow it). */
constexpr long kRecheckPausesMs[] = {200, 1000, 2000};

struct Candidate {
    uint32_t block; /* in the segment file */
    Lsn lsn;
};
PTRACK_FRAME_SAFE(Candidate);

/* A segment file of the summaries' answer (the key of VerifyState::answer). */
struct AnswerKey {
    uint32_t spc;
    uint32_t db;
    uint32_t relfilenode;
    uint32_t fork;
    uint32_t segno;
};
struct AnswerEntry {
    AnswerKey key;
    uint8_t* bitmap; /* in VerifyState::answer_cxt */
    size_t bytes;
};
PTRACK_FRAME_SAFE(AnswerKey, AnswerEntry);

struct VerifyState {
    PagemapScan scan;
    bool from_summaries;      /* the summaries answer: judged against `answer` */
    Lsn summarized;           /* the end of the summaries that gave `answer` */
    MemoryContext answer_cxt; /* `answer` and its bitmaps */
    HTAB* answer;
    Tuplestorestate* tuplestore;
    TupleDesc tupdesc;
    char* buffer; /* kReadChunkBlocks * BLCKSZ */
    Candidate* candidates;
    uint32_t candidate_count;
    uint32_t candidate_capacity;
    int64 files;
    int64 bytes;
    int64 pages;         /* pages with a valid header, judged */
    int64 changed;       /* of them, page LSN >= start_lsn */
    int64 misses;
    int64 new_pages;     /* all-zero: no LSN */
    int64 invalid_pages; /* header invalid even when read again */
    int64 rechecked;     /* candidates read again (written while the file was read, or misses) */
    int64 rate_bytes;    /* bytes per second, 0 = unlimited */
    TimestampTz started;
    TimestampTz last_progress;
};
PTRACK_FRAME_SAFE(VerifyState);

/* The page header checks of PageIsVerifiedExtended(), without the checksum. */
bool header_valid(const char* page)
{
    const auto* p = reinterpret_cast<const PageHeaderData*>(page);
    return (p->pd_flags & ~PD_VALID_FLAG_BITS) == 0 && p->pd_lower >= SizeOfPageHeaderData &&
           p->pd_lower <= p->pd_upper && p->pd_upper <= p->pd_special && p->pd_special <= BLCKSZ &&
           p->pd_special == MAXALIGN(p->pd_special) && (p->pd_pagesize_version & 0xFF00) == BLCKSZ &&
           (p->pd_pagesize_version & 0x00FF) == PG_PAGE_LAYOUT_VERSION; /* PageGetPageSize(), PageGetPageLayoutVersion() */
}

bool page_new(const char* page)
{
    return reinterpret_cast<const PageHeaderData*>(page)->pd_upper == 0;
}

Lsn page_lsn(const char* page)
{
    return PageXLogRecPtrGet(reinterpret_cast<const PageHeaderData*>(page)->pd_lsn);
}

/* Reads up to `len` bytes at `offset`; the bytes read (0 at the end of the file); ERROR on failure. */
size_t read_some(int fd, const char* path, char* buf, size_t len, off_t offset)
{
    for (;;) {
        const ssize_t n = pg_pread(fd, buf, len, offset);
        if (n >= 0)
            return static_cast<size_t>(n);
        if (errno != EINTR)
            ereport(ERROR, (errcode_for_file_access(), errmsg("could not read file \"%s\": %m", path)));
    }
}

/* A cancellable sleep (latch, so that a signal ends it early). */
void pause_ms(long ms)
{
    (void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, ms, PG_WAIT_EXTENSION);
    ResetLatch(MyLatch);
    CHECK_FOR_INTERRUPTS();
}

void progress_notice(VerifyState* st, bool final)
{
    const TimestampTz now = GetCurrentTimestamp();
    const double seconds = static_cast<double>(now - st->started) / USECS_PER_SEC;
    const double mb = static_cast<double>(st->bytes) / (1024.0 * 1024.0);
    if (!final) {
        ereport(NOTICE, (errmsg("ptrack_verify: %lld files, %.0f MB, %lld pages checked in %.0f s; %lld blocks "
                                "not listed so far",
                                static_cast<long long>(st->files), mb, static_cast<long long>(st->pages), seconds,
                                static_cast<long long>(st->misses))));
        return;
    }
    ereport(NOTICE,
            (errmsg("ptrack_verify: %lld files, %.1f MB, %lld pages checked in %.1f s: %lld changed at or after "
                    "%X/%X, %lld of them not listed by ptrack_get_pagemapset() (%s)",
                    static_cast<long long>(st->files), mb, static_cast<long long>(st->pages), seconds,
                    static_cast<long long>(st->changed), PTRACK_LSN_ARGS(st->scan.since),
                    static_cast<long long>(st->misses),
                    st->from_summaries ? "answered from the change summaries" : "answered from the map"),
             errdetail("Not listed when first read, and read again once their marks could arrive: %lld. Not "
                       "judged: %lld new (all-zero) pages, which carry no LSN, and %lld pages with an invalid "
                       "header; free space map forks are always listed whole and were not read.",
                       static_cast<long long>(st->rechecked), static_cast<long long>(st->new_pages),
                       static_cast<long long>(st->invalid_pages))));
}

/* After `n` more bytes read: sleeps to keep to ptrack.verify_max_rate; a progress NOTICE every ~10 s. */
void throttle(VerifyState* st, size_t n)
{
    st->bytes += static_cast<int64>(n);
    CHECK_FOR_INTERRUPTS();
    if (st->rate_bytes > 0) {
        /* Ahead of the allowed rate by this much: sleep it off, one second at a time. */
        const int64 due_us = static_cast<int64>(static_cast<double>(st->bytes) * USECS_PER_SEC /
                                                static_cast<double>(st->rate_bytes));
        const int64 ahead_ms = (due_us - (GetCurrentTimestamp() - st->started)) / 1000;
        if (ahead_ms > 0)
            pause_ms(ahead_ms < 1000 ? ahead_ms : 1000);
    }
    const TimestampTz now = GetCurrentTimestamp();
    if (TimestampDifferenceExceeds(st->last_progress, now, kProgressIntervalMs)) {
        st->last_progress = now;
        progress_notice(st, false);
    }
}

AnswerKey answer_key(const RelSegment& segment)
{
    AnswerKey key;
    memset(static_cast<void*>(&key), 0, sizeof(key));
    key.spc = segment.rel.spc_oid;
    key.db = segment.rel.db_oid;
    key.relfilenode = segment.rel.relfilenode;
    key.fork = static_cast<uint32_t>(segment.rel.fork);
    key.segno = segment.segno;
    return key;
}

/* A row of the summaries' answer (SegmentRowFn), kept by segment file. */
void keep_answer_row(const char* path, uint32_t, const uint8_t* bitmap, size_t bytes, void* arg)
{
    auto* st = static_cast<VerifyState*>(arg);
    CHECK_FOR_INTERRUPTS();
    RelSegment segment;
    if (!parse_relation_path(path, TABLESPACE_VERSION_DIRECTORY, &segment))
        return;
    const AnswerKey key = answer_key(segment);
    bool found = false;
    auto* entry = static_cast<AnswerEntry*>(hash_search(st->answer, &key, HASH_ENTER, &found));
    if (!found) {
        entry->bitmap = nullptr;
        entry->bytes = 0;
    }
    if (bytes > entry->bytes) {
        auto* wider = static_cast<uint8_t*>(MemoryContextAllocZero(st->answer_cxt, bytes));
        if (entry->bytes > 0)
            memcpy(wider, entry->bitmap, entry->bytes);
        entry->bitmap = wider;
        entry->bytes = bytes;
    }
    for (size_t i = 0; i < bytes; ++i)
        entry->bitmap[i] |= bitmap[i];
}

/*
 * The summaries' answer for scan.since, as ptrack_get_pagemapset() gets it:
 * the follower cuts first, so that it holds every change made before now.
 */
void take_summaries_answer(VerifyState* st)
{
    Lsn summarized = 0;
    if (!running_source().summaries(true, &summarized))
        ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                        errmsg("ptrack's answers stopped coming from the change summaries during ptrack_verify()"),
                        errhint("Call ptrack_verify() again.")));
    MemoryContextReset(st->answer_cxt);
    HASHCTL ctl;
    memset(&ctl, 0, sizeof(ctl));
    ctl.keysize = sizeof(AnswerKey);
    ctl.entrysize = sizeof(AnswerEntry);
    ctl.hcxt = st->answer_cxt;
    st->answer = hash_create("ptrack_verify summaries' answer", 1024, &ctl, HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
    st->summarized = summarized;
    summary_scan(st->scan.since, summarized, keep_answer_row, st);
}

/* What ptrack_get_pagemapset() lists for `file`, in st->scan.pagemap and st->scan.nblocks. */
void listed_blocks(VerifyState* st, const RelationFile* file)
{
    if (!st->from_summaries) {
        st->scan.limited = RelSegment{RelFork{0, 0, 0, kDatabaseKeyFork}, 0, false}; /* look the limit up afresh */
        (void) file_changes(file, &st->scan);
        return;
    }
    const AnswerKey key = answer_key(file->segment);
    const auto* entry = static_cast<const AnswerEntry*>(hash_search(st->answer, &key, HASH_FIND, nullptr));
    const size_t room = RELSEG_SIZE / 8;
    const size_t bytes = entry != nullptr ? Min(entry->bytes, room) : 0;
    if (bytes > 0)
        memcpy(st->scan.pagemap, entry->bitmap, bytes);
    memset(st->scan.pagemap + bytes, 0, room - bytes);
    st->scan.nblocks = static_cast<uint32_t>(bytes * 8);
}

void add_candidate(VerifyState* st, uint32_t block, Lsn lsn)
{
    if (st->candidate_count == st->candidate_capacity) {
        st->candidate_capacity *= 2;
        st->candidates =
            static_cast<Candidate*>(repalloc(st->candidates, st->candidate_capacity * sizeof(Candidate)));
    }
    st->candidates[st->candidate_count++] = Candidate{block, lsn};
}

void emit_miss(VerifyState* st, const char* path, uint32_t block, Lsn lsn)
{
    Datum values[3];
    bool nulls[3] = {false, false, false};
    values[0] = CStringGetTextDatum(path);
    values[1] = Int64GetDatum(static_cast<int64>(block));
    values[2] = LSNGetDatum(lsn);
    tuplestore_putvalues(st->tuplestore, st->tupdesc, values, nulls);
    pfree(DatumGetPointer(values[0]));
    st->misses++;
}

/*
 * Lets every mark of the candidates' writes arrive (see the header comment):
 * wal, the WAL up to the newest candidate LSN flushed and applied by the
 * follower; hooks, a pause and the marks in progress ended.  `pause_ms`
 * grows with each round of re-checks (wal: no pause in the first).
 */
void wait_for_candidate_marks(VerifyState* st, long pause)
{
    /*
     * wal: a bulk writer's page may be on disk before its WAL is flushed:
     * the wait flushes up to the insert position (primary), which is past
     * every candidate's LSN, and waits until the follower has applied it, so
     * the first round needs no pause.  hooks: the marks in progress end.
     */
    const CaptureSourceOps& source = running_source();
    if (source.verify_pauses_first || pause > kRecheckPausesMs[0])
        pause_ms(pause);
    source.wait_for_marks();
}

/*
 * Re-judges the file's candidates against the answer as it stands now, in up
 * to three rounds with growing pauses (a writer descheduled between its
 * write and its mark on a loaded machine); reports what is still not listed
 * after the last.  A real miss costs about 3 s per file that has one.
 */
void recheck_candidates(VerifyState* st, const RelationFile* file, int fd)
{
    st->rechecked += st->candidate_count;
    for (uint32_t round = 0; round < lengthof(kRecheckPausesMs) && st->candidate_count > 0; ++round) {
        wait_for_candidate_marks(st, kRecheckPausesMs[round]);
        struct stat stat_buf;
        if (fstat(fd, &stat_buf) != 0)
            ereport(ERROR, (errcode_for_file_access(), errmsg("could not stat file \"%s\": %m", file->path)));
        RelationFile now = *file;
        now.size_bytes = static_cast<uint64_t>(stat_buf.st_size);
        /* Summaries: a new answer if a candidate was written after the cut of the one held. */
        if (st->from_summaries)
            for (uint32_t i = 0; i < st->candidate_count; ++i)
                if (st->candidates[i].lsn >= st->summarized) {
                    take_summaries_answer(st);
                    break;
                }
        listed_blocks(st, &now);
        uint32_t kept = 0;
        for (uint32_t i = 0; i < st->candidate_count; ++i) {
            const uint32_t block = st->candidates[i].block;
            char* page = st->buffer;
            if (read_some(fd, file->path, page, BLCKSZ, static_cast<off_t>(block) * BLCKSZ) < BLCKSZ)
                continue; /* truncated meanwhile */
            if (page_new(page) || !header_valid(page) || page_lsn(page) < st->scan.since)
                continue;
            if (block < st->scan.nblocks && pagemap_has(st->scan.pagemap, block))
                continue;
            st->candidates[kept++] = Candidate{block, page_lsn(page)};
        }
        st->candidate_count = kept;
    }
    for (uint32_t i = 0; i < st->candidate_count; ++i)
        emit_miss(st, file->path, st->candidates[i].block, st->candidates[i].lsn);
}

/* Judges one page (block `block` of the file): counts it, and notes it if it changed but is not listed. */
void judge_page(VerifyState* st, int fd, const char* path, char* page, uint32_t block)
{
    if (page_new(page)) {
        st->new_pages++;
        return;
    }
    if (!header_valid(page)) {
        /* Perhaps torn by a concurrent write: read it once more. */
        if (read_some(fd, path, page, BLCKSZ, static_cast<off_t>(block) * BLCKSZ) < BLCKSZ || page_new(page) ||
            !header_valid(page)) {
            st->invalid_pages++;
            return;
        }
    }
    st->pages++;
    const Lsn lsn = page_lsn(page);
    if (lsn < st->scan.since)
        return;
    st->changed++;
    if (block >= st->scan.nblocks || !pagemap_has(st->scan.pagemap, block))
        add_candidate(st, block, lsn);
}

void verify_file(const RelationFile* file, void* arg)
{
    auto* st = static_cast<VerifyState*>(arg);
    CHECK_FOR_INTERRUPTS();
    const int fd = OpenTransientFile(file->path, O_RDONLY | PG_BINARY);
    if (fd < 0) {
        if (errno == ENOENT)
            return; /* dropped meanwhile */
        ereport(ERROR, (errcode_for_file_access(), errmsg("could not open file \"%s\": %m", file->path)));
    }
    st->files++;
    /* What ptrack_get_pagemapset() lists for this file now. */
    listed_blocks(st, file);
    st->candidate_count = 0;
    /* Up to the end of the file as it is now (it may have grown since the walk looked at it). */
    for (uint32_t first = 0; first < RELSEG_SIZE; first += kReadChunkBlocks) {
        const uint32_t want = Min(kReadChunkBlocks, static_cast<uint32_t>(RELSEG_SIZE) - first);
        const size_t n = read_some(fd, file->path, st->buffer, static_cast<size_t>(want) * BLCKSZ,
                                   static_cast<off_t>(first) * BLCKSZ);
        const uint32_t blocks = static_cast<uint32_t>(n / BLCKSZ); /* a partial last page is being extended */
        for (uint32_t i = 0; i < blocks; ++i)
            judge_page(st, fd, file->path, st->buffer + static_cast<size_t>(i) * BLCKSZ, first + i);
        throttle(st, n);
        if (blocks < want)
            break;
    }
    if (st->candidate_count > 0)
        recheck_candidates(st, file, fd);
    CloseTransientFile(fd);
}

PTRACK_ENGINE_NOEXCEPT(&parse_relation_path);

/* Unlogged relations are not backed up; FSM forks are always listed whole: nothing to check. */
bool verify_wants(const RelSegment& segment, bool unlogged, void*)
{
    return !unlogged && segment.rel.fork != kFsmFork;
}

}  // namespace

void define_verify_gucs()
{
    DefineCustomIntVariable("ptrack.verify_max_rate", "Maximum rate at which ptrack_verify() reads relation files.",
                            "Per second; 0 means no limit.", &verify_max_rate_kb, 100 * 1024, 0, INT_MAX,
                            PGC_USERSET, GUC_UNIT_KB, NULL, NULL, NULL);
}

}  // namespace ptrack::pg

using namespace ptrack::pg;

extern "C" PGDLLEXPORT Datum ptrack_verify(PG_FUNCTION_ARGS)
{
    require_safe_schema(fcinfo, false);
    const ptrack::Lsn since = checked_start_lsn(fcinfo);
    InitMaterializedSRF(fcinfo, 0);
    ReturnSetInfo* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);

    VerifyState st;
    memset(static_cast<void*>(&st), 0, sizeof(st));
    init_scan(&st.scan, since);
    st.tuplestore = rsinfo->setResult;
    st.tupdesc = rsinfo->setDesc;
    st.buffer = static_cast<char*>(palloc(static_cast<size_t>(kReadChunkBlocks) * BLCKSZ));
    st.candidate_capacity = 64;
    st.candidates = static_cast<Candidate*>(palloc(st.candidate_capacity * sizeof(Candidate)));
    st.rate_bytes = static_cast<int64>(verify_max_rate_kb) * 1024;
    st.started = st.last_progress = GetCurrentTimestamp();
    ptrack::Lsn summarized = 0;
    st.from_summaries = running_source().summaries(false, &summarized);
    if (st.from_summaries) {
        st.answer_cxt = AllocSetContextCreate(CurrentMemoryContext, "ptrack_verify answer", ALLOCSET_DEFAULT_SIZES);
        take_summaries_answer(&st);
    }

    walk_data_directory(verify_file, &st, verify_wants);
    progress_notice(&st, true);
    if (st.from_summaries)
        MemoryContextDelete(st.answer_cxt);

    pfree(st.candidates);
    pfree(st.buffer);
    pfree(st.scan.pagemap);
    return (Datum) 0;
}
