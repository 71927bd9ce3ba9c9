/*
 * summary_scan.cpp -- see summary_scan.h.
 *
 * Which files answer.  The listing (summary_list()) leaves out the files
 * starting at or after `summarized` (written after the cut this call waited
 * for); the header of each other file is read (96 bytes) and must repeat its
 * name's range, this cluster's system identifier and this server's major
 * version.  find_chain() (ptrack/summary_chain.h) then says which files form
 * the chain the follower wrote, ending at `summarized`: a combined file and
 * the files it replaced are both on it; a file whose range overlaps the
 * chain's without fitting it (a stray with a summary-like name, say) is
 * not, is named in a WARNING and never read, so it cannot block an answer
 * the chain can give.  chain_cover() picks the files answering `since`;
 * each is read whole and validated (summary_read()).  One found damaged is
 * taken out of the chain and the cover chosen again (a combined file's
 * inputs may still be there); a file that vanished meanwhile (combined or
 * removed by the follower) makes the call list again, up to kListAttempts
 * times.  When no cover is left the call refuses, naming what breaks it (a
 * file not usable, a hole and the file expected there, or a start older
 * than every file kept): never a short answer.
 *
 * The union.  MergeCursor costs O(sources) per step, so the summaries are
 * merged in a tree of MergeCursors of at most kMergeFanout sources each
 * (a MergeCursor is a ChangeCursor too): a call over 1,000 files costs two
 * levels of 32, with no temporary file.  Retention combines old summaries
 * so that a call rarely has more than a few dozen.
 *
 * Rows.  Per relation fork of the union, the segment files with a block in
 * it (SegmentPagemaps) and, with a limit, every segment file from the
 * limit's on, each looked up with one stat(): a file that does not exist
 * has no row (a dropped relation), and the bitmap is clipped to the file's
 * size, as the map path does.  A relation with an init fork on disk is
 * unlogged: only its init fork is listed.  The FSM is not WAL-logged, so
 * the FSM fork of every relation with a listed main fork is listed whole
 * (backup tools copy FSM files whole anyway: pg_probackup does not read
 * their pagemap, PostgreSQL 17's incremental backup sends them whole);
 * docs/design.md section 4.8 says why this is enough.  Forks of a database
 * that a database entry lists are skipped, and that database directory is
 * read once at the end with every file listed whole.
 *
 * C-style frames (boundary.h): ereport longjmps out; memory is palloc'd in
 * a context of the call, deleted at the end.
 */
extern "C" {
#include "postgres.h"

#include <sys/stat.h>

#include "common/relpath.h"
#include "miscadmin.h"
#include "utils/memutils.h"
}

#include <new>

#include "compat/compat.h"
#include "core/boundary.h"
#include "core/datadir_walk.h"
#include "persist/summary_io.h"
#include "ptrack/change_cursor.h"
#include "ptrack/pagemap.h"
#include "ptrack/summary_answer.h"
#include "ptrack/summary_chain.h"
#include "ptrack/summary_file.h"
#include "sql/summary_scan.h"

namespace ptrack::pg {

PTRACK_FRAME_SAFE(SummaryCursor, MergeCursor, MergeCursor::State, SegmentPagemaps, SummaryView, SummaryHeader,
                  SummaryFileRef, DatabaseKey, RelFork, ChunkBits, ChainLink, ChainRole, SummaryChain);
PTRACK_ENGINE_NOEXCEPT(&find_chain, &chain_cover, &SegmentPagemaps::start_fork,
                       &SegmentPagemaps::next, &pagemap_set_all, &pagemap_set_from, &pagemap_count,
                       &pagemap_trimmed_length, &pagemap_bytes);

namespace {

/* Listings tried when files vanish between a listing and their read (the follower replaced them). */
constexpr int kListAttempts = 5;
/* Sources per MergeCursor (its cost per step is linear in them). */
constexpr size_t kMergeFanout = 32;
/* Segment files a fork can have (BlockNumber range). */
constexpr uint32_t kMaxSegments = static_cast<uint32_t>((uint64_t{1} << 32) / RELSEG_SIZE) + 1;

/*
 * The listing and its chain (ptrack/summary_chain.h): every file starting
 * before `live`, sorted by start then end descending, each with its header
 * checked (usable: it says what its name does, for this cluster and server).
 */
struct Listing {
    SummaryFileRef* refs;
    ChainLink* links;
    ChainRole* roles;
    const char** why; /* why a file is not usable (header, or found damaged when read whole); nullptr if it is */
    size_t count;
    Lsn live;         /* summarized_lsn: where the chain ends */
    SummaryChain chain;
    size_t* scratch_indexes;
    uint8_t* scratch_flags;
};
PTRACK_FRAME_SAFE(Listing);

int compare_refs(const void* a, const void* b)
{
    const auto* x = static_cast<const SummaryFileRef*>(a);
    const auto* y = static_cast<const SummaryFileRef*>(b);
    if (x->start_lsn != y->start_lsn)
        return x->start_lsn < y->start_lsn ? -1 : 1;
    /* Same start: the longer first (a combined file before the files it holds). */
    if (x->end_lsn != y->end_lsn)
        return x->end_lsn > y->end_lsn ? -1 : 1;
    return 0;
}

/* The file name of summary [start, end), for messages. */
void file_path(Lsn start, Lsn end, char* out)
{
    char name[kSummaryNameLength + 1];
    summary_file_name(start, end, name, sizeof(name));
    snprintf(out, MAXPGPATH, "%s/%s", kSummaryDir, name);
}

void find_listing_chain(Listing* l)
{
    for (size_t i = 0; i < l->count; ++i)
        l->links[i].usable = l->why[i] == nullptr;
    l->chain = find_chain(l->links, l->count, l->live, l->scratch_indexes, l->scratch_flags, l->roles);
}

/* Lists the summaries, checks their headers, finds the chain; false if a file vanished meanwhile. */
bool list_chain(Lsn live, Listing* out)
{
    size_t n = 0;
    SummaryFileRef* refs = summary_list(&n);
    if (n > 1)
        qsort(refs, n, sizeof(SummaryFileRef), compare_refs);
    const size_t room = n > 0 ? n : 1;
    out->refs = refs;
    out->links = static_cast<ChainLink*>(palloc0(sizeof(ChainLink) * room));
    out->roles = static_cast<ChainRole*>(palloc0(sizeof(ChainRole) * room));
    out->why = static_cast<const char**>(palloc0(sizeof(const char*) * room));
    out->scratch_indexes = static_cast<size_t*>(palloc(sizeof(size_t) * room));
    out->scratch_flags = static_cast<uint8_t*>(palloc(room));
    out->live = live;
    out->count = 0;
    bool gone = false;
    SummaryHeader header{};
    for (size_t i = 0; i < n; ++i) {
        const SummaryFileRef r = refs[i];
        if (r.start_lsn >= live || r.start_lsn >= r.end_lsn)
            continue; /* written after the cut this call knows of */
        refs[out->count] = r;
        out->links[out->count] = ChainLink{r.start_lsn, r.end_lsn, true};
        out->why[out->count] = summary_header_problem(r, &header, &gone);
        ++out->count;
    }
    find_listing_chain(out);
    return !gone;
}

void free_listing(Listing* l)
{
    pfree(l->refs);
    pfree(l->links);
    pfree(l->roles);
    pfree(l->why);
    pfree(l->scratch_indexes);
    pfree(l->scratch_flags);
}

/* A WARNING for each file off the chain: the answers ignore it (retention removes it). */
void warn_strays(const Listing& l)
{
    for (size_t i = 0; i < l.count; ++i) {
        if (l.roles[i] != ChainRole::kOffChain)
            continue;
        char path[MAXPGPATH];
        file_path(l.refs[i].start_lsn, l.refs[i].end_lsn, path);
        ereport(WARNING,
                (errmsg("ptrack ignores \"%s\": it is not part of the chain of change summaries", path),
                 errdetail("Its range %X/%X to %X/%X overlaps the chain's without fitting it%s%s. The answers come "
                           "from the files of the chain; the WAL follower removes this one.",
                           PTRACK_LSN_ARGS(l.refs[i].start_lsn), PTRACK_LSN_ARGS(l.refs[i].end_lsn),
                           l.why[i] != nullptr ? ", and it is not usable: " : "",
                           l.why[i] != nullptr ? l.why[i] : ""),
                 errhint("Leave nothing but ptrack's own files in %s.", kSummaryDir)));
    }
}

/*
 * No file of the chain holds `since` (it lies before the chain's start b):
 * ERROR, naming what breaks the cover: a file ending at b (or holding b - 1)
 * that is not usable, else a hole before b, else `since` older than every
 * file kept.
 */
void refuse(const Listing& l, Lsn since)
{
    const Lsn b = l.chain.start;
    for (size_t i = 0; i < l.count; ++i) {
        const SummaryFileRef& r = l.refs[i];
        if (l.why[i] == nullptr || !(r.start_lsn < b && b <= r.end_lsn) || r.end_lsn <= since)
            continue;
        char path[MAXPGPATH];
        file_path(r.start_lsn, r.end_lsn, path);
        ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED),
                        errmsg("ptrack change summary file \"%s\" is not usable: %s", path, l.why[i]),
                        errdetail("It holds the changes from %X/%X to %X/%X, needed to list the changes since "
                                  "%X/%X.",
                                  PTRACK_LSN_ARGS(r.start_lsn), PTRACK_LSN_ARGS(r.end_lsn), PTRACK_LSN_ARGS(since)),
                        errhint("Take a full backup: an incremental backup from %X/%X would miss changes.",
                                PTRACK_LSN_ARGS(since))));
    }
    Lsn oldest = b;
    for (size_t i = 0; i < l.count; ++i)
        oldest = Min(oldest, l.refs[i].start_lsn);
    if (since < oldest)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("start_lsn %X/%X is older than ptrack_init_lsn() %X/%X", PTRACK_LSN_ARGS(since),
                               PTRACK_LSN_ARGS(b)),
                        errdetail("Changes made before %X/%X are not in the change summaries kept in %s.",
                                  PTRACK_LSN_ARGS(oldest), kSummaryDir),
                        errhint("Take a full backup.")));
    /* The hole: from the end of the last file before b (`since` if none ends before b) to b. */
    Lsn from = 0;
    for (size_t i = 0; i < l.count; ++i)
        if (l.refs[i].end_lsn < b && l.refs[i].end_lsn > from)
            from = l.refs[i].end_lsn;
    if (from == 0)
        from = since;
    char missing[MAXPGPATH];
    file_path(from, b, missing);
    ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                    errmsg("ptrack cannot list the changes since %X/%X: a change summary is missing",
                           PTRACK_LSN_ARGS(since)),
                    errdetail("No change summary covers %X/%X to %X/%X (expected \"%s\").", PTRACK_LSN_ARGS(from),
                              PTRACK_LSN_ARGS(b), missing),
                    errhint("Take a full backup: an incremental backup from %X/%X would miss changes.",
                            PTRACK_LSN_ARGS(since))));
}

/*
 * The summaries answering `since`, read and validated: *views, *count of
 * them.  A file of the cover found damaged when read whole is taken out of
 * the chain and the cover chosen again (a combined file and the files it
 * replaced may both be there); a file that vanished makes the call list
 * again.
 */
void read_summaries(Lsn since, Lsn summarized, SummaryView** views, size_t* count)
{
    for (int attempt = 1;; ++attempt) {
        Listing l;
        bool gone = !list_chain(summarized, &l);
        auto* read = static_cast<SummaryView*>(palloc0(sizeof(SummaryView) * (l.count > 0 ? l.count : 1)));
        auto* cover = static_cast<size_t*>(palloc(sizeof(size_t) * (l.count + 1)));
        size_t needed = 0;
        bool skipped = false; /* a file of a cover was damaged, another cover answered */
        while (!gone) {
            if (!chain_cover(l.links, l.count, l.roles, l.live, since, cover, &needed)) {
                warn_strays(l);
                refuse(l, since);
            }
            bool changed = false;
            for (size_t k = 0; k < needed && !changed && !gone; ++k) {
                const size_t i = cover[k];
                if (read[i].data != nullptr)
                    continue;
                const char* damage = nullptr;
                char path[MAXPGPATH];
                const SummaryReadResult r = summary_read(l.refs[i], &read[i], &damage, path);
                if (r == SummaryReadResult::kGone)
                    gone = true;
                else if (r == SummaryReadResult::kDamaged) {
                    l.why[i] = damage;
                    find_listing_chain(&l);
                    changed = skipped = true;
                }
            }
            if (!changed)
                break;
        }
        SummaryView* out = nullptr;
        if (!gone) {
            warn_strays(l);
            if (skipped)
                for (size_t i = 0; i < l.count; ++i) {
                    if (l.why[i] == nullptr || l.refs[i].end_lsn <= since || l.roles[i] != ChainRole::kInside)
                        continue;
                    char path[MAXPGPATH];
                    file_path(l.refs[i].start_lsn, l.refs[i].end_lsn, path);
                    ereport(WARNING, (errmsg("ptrack change summary file \"%s\" is not usable: %s", path, l.why[i]),
                                      errdetail("The changes it holds were read from the other files of the "
                                                "chain.")));
                }
            out = static_cast<SummaryView*>(palloc0(sizeof(SummaryView) * (needed > 0 ? needed : 1)));
            for (size_t k = 0; k < needed; ++k) {
                out[k] = read[cover[k]];
                read[cover[k]].data = nullptr;
            }
        }
        for (size_t i = 0; i < l.count; ++i)
            if (read[i].data != nullptr)
                pfree(const_cast<uint8_t*>(read[i].data));
        pfree(read);
        pfree(cover);
        free_listing(&l);
        if (out != nullptr) {
            *views = out;
            *count = needed;
            return;
        }
        if (attempt == kListAttempts)
            ereport(ERROR, (errcode(ERRCODE_OBJECT_IN_USE),
                            errmsg("ptrack's change summaries kept changing while they were read"),
                            errdetail("Summary files listed in %s vanished before they could be read, %d times.",
                                      kSummaryDir, kListAttempts),
                            errhint("Call the function again.")));
    }
}

/* The union of `count` cursors: a tree of MergeCursors of at most kMergeFanout sources each. */
ChangeCursor* merge_tree(ChangeCursor** sources, size_t count)
{
    if (count == 1)
        return sources[0];
    if (count <= kMergeFanout) {
        auto* states = static_cast<MergeCursor::State*>(palloc0(sizeof(MergeCursor::State) * count));
        for (size_t i = 0; i < count; ++i)
            states[i].source = sources[i];
        return new (palloc(sizeof(MergeCursor))) MergeCursor(states, count);
    }
    const size_t groups = (count + kMergeFanout - 1) / kMergeFanout;
    auto** parents = static_cast<ChangeCursor**>(palloc(sizeof(ChangeCursor*) * groups));
    for (size_t g = 0; g < groups; ++g) {
        const size_t from = g * kMergeFanout;
        parents[g] = merge_tree(sources + from, Min(kMergeFanout, count - from));
    }
    return merge_tree(parents, groups);
}

/* The state of one pass over the union. */
struct RowScan {
    SegmentRowFn row;
    void* arg;
    uint8_t* pagemap;  /* RELSEG_SIZE / 8 bytes: the row being built */
    size_t dirty;      /* bytes of it that may be non-zero */
    char path[MAXPGPATH];
};
PTRACK_FRAME_SAFE(RowScan);

/* The path of segment `segno` of fork `rel` in scan->path. */
void segment_path(const RelFork& rel, uint32_t segno, RowScan* scan)
{
    segment_file_path(rel, segno, scan->path);
}

/* The blocks of file scan->path, false if it does not exist; ERROR if it cannot be looked at. */
bool file_blocks(const RowScan* scan, uint32_t* nblocks)
{
    struct stat st;
    if (stat(scan->path, &st) != 0) {
        if (errno == ENOENT)
            return false;
        ereport(ERROR, (errcode_for_file_access(), errmsg("could not stat file \"%s\": %m", scan->path)));
    }
    const uint64_t blocks = (static_cast<uint64_t>(st.st_size) + BLCKSZ - 1) / BLCKSZ;
    *nblocks = static_cast<uint32_t>(Min(blocks, uint64_t{RELSEG_SIZE})); /* a segment never holds more */
    return true;
}

void clear_row(RowScan* scan)
{
    memset(scan->pagemap, 0, scan->dirty);
    scan->dirty = 0;
}

/* Emits scan->pagemap (its first `bytes` bytes, clipped to `nblocks`) as the row of scan->path, if a bit is set. */
void emit_row(RowScan* scan, size_t bytes, uint32_t nblocks)
{
    const size_t limit = pagemap_bytes(nblocks);
    if (bytes > limit)
        bytes = limit;
    if (bytes > 0 && nblocks % 8 != 0 && bytes == limit)
        scan->pagemap[bytes - 1] &= static_cast<uint8_t>((1u << (nblocks % 8)) - 1);
    const size_t length = pagemap_trimmed_length(scan->pagemap, bytes);
    const uint64_t count = pagemap_count(scan->pagemap, length);
    if (count > 0)
        scan->row(scan->path, static_cast<uint32_t>(count), scan->pagemap, length, scan->arg);
}

/* Every segment file of fork `rel`, every block (FSM forks). */
void emit_whole_fork(const RelFork& rel, RowScan* scan)
{
    for (uint32_t segno = 0; segno < kMaxSegments; ++segno) {
        segment_path(rel, segno, scan);
        uint32_t nblocks = 0;
        if (!file_blocks(scan, &nblocks))
            return;
        clear_row(scan);
        pagemap_set_all(scan->pagemap, nblocks);
        scan->dirty = pagemap_bytes(nblocks);
        emit_row(scan, scan->dirty, nblocks);
    }
}

/*
 * The rows of the fork the cursor is on: its segments with a changed block,
 * and with a limit every block from it on, to the end of the fork's last
 * segment file.
 */
void emit_fork(const RelFork& rel, BlockNumber limit, ChangeCursor& cursor, SegmentPagemaps& changed, RowScan* scan)
{
    changed.start_fork();
    uint32_t chunk_seg = 0;
    size_t chunk_len = 0;
    uint32_t chunk_count = 0;
    bool have_chunk = changed.next(cursor, &chunk_seg, &chunk_len, &chunk_count);
    const bool limited = limit != kNoLimit;
    uint32_t limit_seg = limited ? limit / RELSEG_SIZE : 0; /* next segment the limit lists */
    bool limit_open = limited;                               /* segments from limit_seg on may exist */
    for (;;) {
        uint32_t segno = 0;
        if (have_chunk && limit_open)
            segno = Min(chunk_seg, limit_seg);
        else if (have_chunk)
            segno = chunk_seg;
        else if (limit_open)
            segno = limit_seg;
        else
            return;
        const bool from_chunks = have_chunk && chunk_seg == segno;
        const bool from_limit = limit_open && limit_seg == segno;

        clear_row(scan);
        if (from_chunks) {
            memcpy(scan->pagemap, changed.pagemap(), chunk_len);
            scan->dirty = chunk_len;
        }
        segment_path(rel, segno, scan);
        uint32_t nblocks = 0;
        if (file_blocks(scan, &nblocks)) {
            if (from_limit) {
                const uint32_t first = segno == limit / RELSEG_SIZE ? limit % RELSEG_SIZE : 0;
                pagemap_set_from(scan->pagemap, first, nblocks);
                scan->dirty = Max(scan->dirty, pagemap_bytes(nblocks));
            }
            emit_row(scan, scan->dirty, nblocks);
        } else if (from_limit) {
            limit_open = false; /* no segment after the first missing one (md.c's rule too) */
        }

        if (from_chunks)
            have_chunk = changed.next(cursor, &chunk_seg, &chunk_len, &chunk_count);
        if (from_limit && limit_open && ++limit_seg >= kMaxSegments)
            limit_open = false;
    }
}

/* True if relation `rel` (any fork) has an init fork on disk: unlogged, only the init fork is backed up. */
bool relation_unlogged(const RelFork& rel, RowScan* scan)
{
    const RelFork init{rel.spc_oid, rel.db_oid, rel.relfilenode, kInitFork};
    segment_path(init, 0, scan);
    uint32_t nblocks = 0;
    return file_blocks(scan, &nblocks);
}

bool same_relation(const RelFork& a, const RelFork& b)
{
    return a.spc_oid == b.spc_oid && a.db_oid == b.db_oid && a.relfilenode == b.relfilenode;
}

/* Database directories: every file of it, whole (unlogged relations left out). */
bool skip_unlogged(const RelSegment&, bool unlogged, void*)
{
    return !unlogged;
}

void emit_whole_file(const RelationFile* file, void* arg)
{
    auto* scan = static_cast<RowScan*>(arg);
    uint64_t blocks = (file->size_bytes + BLCKSZ - 1) / BLCKSZ;
    const auto nblocks = static_cast<uint32_t>(Min(blocks, uint64_t{RELSEG_SIZE}));
    strlcpy(scan->path, file->path, MAXPGPATH);
    clear_row(scan);
    pagemap_set_all(scan->pagemap, nblocks);
    scan->dirty = pagemap_bytes(nblocks);
    emit_row(scan, scan->dirty, nblocks);
}

/* The rows of the union `cursor` (a fresh cursor). */
void emit_union(ChangeCursor& cursor, RowScan* scan)
{
    /* The database entries first (a cursor reads them independently of the forks). */
    size_t db_capacity = 8;
    size_t db_count = 0;
    auto* dbs = static_cast<DatabaseKey*>(palloc(sizeof(DatabaseKey) * db_capacity));
    DatabaseKey db{};
    while (cursor.next_database(&db)) {
        if (db_count == db_capacity) {
            db_capacity *= 2;
            dbs = static_cast<DatabaseKey*>(repalloc(dbs, sizeof(DatabaseKey) * db_capacity));
        }
        dbs[db_count++] = db;
    }

    auto* scratch = static_cast<ChunkBits*>(palloc(sizeof(ChunkBits)));
    auto* changed_map = static_cast<uint8_t*>(palloc0(pagemap_bytes(RELSEG_SIZE)));
    SegmentPagemaps changed(RELSEG_SIZE, scratch, changed_map);

    size_t next_db = 0; /* forks and databases come in the same (spc, db) order */
    RelFork rel{};
    BlockNumber limit = kNoLimit;
    bool have_relation = false;
    RelFork current{};         /* the relation of the forks being read (fork field unused) */
    bool unlogged = false;
    bool main_listed = false;  /* its main fork is in the union: its FSM is listed whole */
    bool fsm_done = false;
    while (cursor.next_fork(&rel, &limit)) {
        CHECK_FOR_INTERRUPTS();
        const DatabaseKey key{rel.spc_oid, rel.db_oid};
        while (next_db < db_count && database_less(dbs[next_db], key))
            ++next_db;
        if (next_db < db_count && dbs[next_db] == key)
            continue; /* the whole database directory is listed below */
        if (!have_relation || !same_relation(rel, current)) {
            if (have_relation && main_listed && !fsm_done && !unlogged)
                emit_whole_fork(RelFork{current.spc_oid, current.db_oid, current.relfilenode, kFsmFork}, scan);
            current = rel;
            have_relation = true;
            unlogged = relation_unlogged(rel, scan);
            main_listed = false;
            fsm_done = false;
        }
        if (unlogged && rel.fork != kInitFork)
            continue;
        if (rel.fork > kFsmFork && main_listed && !fsm_done) {
            emit_whole_fork(RelFork{rel.spc_oid, rel.db_oid, rel.relfilenode, kFsmFork}, scan);
            fsm_done = true;
        }
        if (rel.fork == kFsmFork) {
            emit_whole_fork(rel, scan);
            fsm_done = true;
            continue;
        }
        if (rel.fork == kMainFork)
            main_listed = true;
        emit_fork(rel, limit, cursor, changed, scan);
    }
    if (have_relation && main_listed && !fsm_done && !unlogged)
        emit_whole_fork(RelFork{current.spc_oid, current.db_oid, current.relfilenode, kFsmFork}, scan);

    for (size_t i = 0; i < db_count; ++i) {
        CHECK_FOR_INTERRUPTS();
        char* dir = GetDatabasePath(dbs[i].db_oid, dbs[i].spc_oid);
        walk_relation_dir(dir, emit_whole_file, scan, skip_unlogged);
        pfree(dir);
    }
}

}  // namespace

void summary_scan(Lsn since, Lsn summarized, SegmentRowFn row, void* arg)
{
    if (summarized == 0)
        ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                        errmsg("ptrack's WAL follower has written no change summary yet"),
                        errhint("Call the function again; check the server log for errors of the \"ptrack WAL "
                                "follower\" process if this persists.")));
    MemoryContext cxt = AllocSetContextCreate(CurrentMemoryContext, "ptrack summaries", ALLOCSET_DEFAULT_SIZES);
    MemoryContext old = MemoryContextSwitchTo(cxt);

    SummaryView* views = nullptr;
    size_t count = 0;
    read_summaries(since, summarized, &views, &count);
    if (count > 0) {
        auto* cursors = static_cast<SummaryCursor*>(palloc(sizeof(SummaryCursor) * count));
        auto** sources = static_cast<ChangeCursor**>(palloc(sizeof(ChangeCursor*) * count));
        for (size_t i = 0; i < count; ++i) {
            new (&cursors[i]) SummaryCursor(views[i]);
            sources[i] = &cursors[i];
        }
        RowScan* scan = static_cast<RowScan*>(palloc0(sizeof(RowScan)));
        scan->row = row;
        scan->arg = arg;
        scan->pagemap = static_cast<uint8_t*>(palloc0(pagemap_bytes(RELSEG_SIZE)));
        /* `row` pallocs in this context too, and frees (a tuplestore copies what it keeps). */
        emit_union(*merge_tree(sources, count), scan);
    }
    MemoryContextSwitchTo(old);
    MemoryContextDelete(cxt);
}

Lsn summaries_init_lsn(Lsn summarized)
{
    if (summarized == 0)
        return 0;
    /* A file that vanished while its header was read: list again (the last listing answers anyway). */
    for (int attempt = 1;; ++attempt) {
        Listing l;
        const bool whole = list_chain(summarized, &l);
        const Lsn start = l.chain.start;
        free_listing(&l);
        if (whole || attempt == kListAttempts)
            return start;
    }
}

}  // namespace ptrack::pg
