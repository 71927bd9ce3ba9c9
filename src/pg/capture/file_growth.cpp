/*
 * file_growth.cpp -- see file_growth.h.
 *
 * The table is a dynahash in the follower's memory keyed by relation fork
 * and segment number, holding the segment's size in blocks as last seen.
 *
 * ptrack.sizes layout (host byte order, like the map file):
 *   [0, 64)    header: magic "PTRKSIZE", version, system identifier, covered
 *              LSN, entry count, CRC-32C of the entries, PostgreSQL major
 *              version at 44 (0: written before the field, under 15),
 *              CRC-32C of the header's first 60 bytes in its last 4
 *   [64, ...)  entry count x SizeRecord (24 bytes)
 */
extern "C" {
#include "postgres.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "access/xlog.h"
#include "access/xlogrecovery.h"
#include "miscadmin.h"
#include "storage/fd.h"
#include "utils/elog.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
}

#include "core/boundary.h"
#include "core/datadir_walk.h"
#include "core/shared_state.h"
#include "capture/file_growth.h"
#include "persist/map_io.h"
#include "persist/state_files.h"
#include "compat/compat.h"
#include "ptrack/map_file.h" /* kUnrecordedServerMajor */

namespace ptrack::pg {

namespace {

/* ptrack.sizes and ptrack.sizes.new, in the running source's folder (persist/state_files.h). */
const char* sizes_file() { return state_file(StateFile::kSizes); }
const char* sizes_new_file() { return state_file(StateFile::kSizesNew); }
constexpr char kSizesMagic[8] = {'P', 'T', 'R', 'K', 'S', 'I', 'Z', 'E'};
constexpr uint32_t kSizesVersion = 1;
constexpr size_t kSizesHeaderBytes = 64;

/* A segment file's identity; zero-padded, compared as bytes by dynahash. */
struct SegmentKey {
    uint32_t spc_oid;
    uint32_t db_oid;
    uint32_t relfilenode;
    uint32_t fork;
    uint32_t segno;
};

struct SizeEntry {
    SegmentKey key;
    uint32_t nblocks; /* blocks of the segment file as last seen */
    uint32_t seen_in; /* walk number that last saw the file */
    /*
     * Blocks the WAL dated (<= nblocks): each block below it was recorded
     * by a record that named it or a later block of the segment, after the
     * last truncation below it, or predates tracking (a baseline, a load).
     * Raised by records only (growth_block_referenced()); lowered by
     * truncations, drops and a walk that finds the file shorter.  A walk's
     * growth below it needs no date of its own (growth_settle_pending()).
     */
    uint32_t dated;
};

/* The on-disk form of an entry. */
struct SizeRecord {
    uint32_t spc_oid, db_oid, relfilenode, fork, segno, nblocks;
};
static_assert(sizeof(SizeRecord) == 24, "size records are written as they are in memory");

/* A segment that grew during a walk, marked once the walk's LSN is known. */
struct Growth {
    RelFork rel;
    uint32_t segno;
    uint32_t from;
    uint32_t to;
};

HTAB* sizes = nullptr;
uint32_t walk_number = 0;

/* growth_set_marks_map(): a walk's growth is marked in the map (hooks). */
bool marks_map = true;

/* Growth a walk saw that no summary holds at its date yet (file_growth.h, growth_set_recorder()). */
struct PendingGrowth {
    RelFork rel;
    uint32_t segno;
    uint32_t from; /* the segment's size in blocks before the growth */
    uint32_t to;   /* its size the walk saw */
    Lsn lsn;       /* its date: the walk's LSN, or a later cut's */
    bool recorded; /* in the recorder's current set; else waiting (growth_settle_pending()) */
};
GrowthRecorder recorder = nullptr;
PendingGrowth* pending = nullptr; /* TopMemoryContext, grown by doubling */
uint32_t pending_count = 0;
uint32_t pending_capacity = 0;

/*
 * The entries growth_block_referenced() used last, direct-mapped by a cheap
 * hash of the segment: records name a few segments in turn (a table, its
 * index, the next table), each a dynahash lookup otherwise.  Entries never
 * move in dynahash; every removal forgets them all (forget_recent()).
 */
constexpr uint32_t kRecentLog2 = 4;
SizeEntry* recent[1u << kRecentLog2];

inline uint32_t recent_index(const RelFork& rel, uint32_t segno)
{
    return recent_entry(rel, segno, kRecentLog2);
}

void forget_recent()
{
    for (SizeEntry*& e : recent)
        e = nullptr;
}

SegmentKey key_of(const RelFork& rel, uint32_t segno)
{
    SegmentKey key;
    memset(&key, 0, sizeof(key));
    key.spc_oid = rel.spc_oid;
    key.db_oid = rel.db_oid;
    key.relfilenode = rel.relfilenode;
    key.fork = rel.fork;
    key.segno = segno;
    return key;
}

struct WalkState {
    bool baseline;
    Growth* growth; /* palloc'd, grown by doubling */
    uint32_t count;
    uint32_t capacity;
};
PTRACK_FRAME_SAFE(SegmentKey, SizeEntry, SizeRecord, Growth, WalkState, RelationFile, PendingGrowth);
PTRACK_FRAME_SAFE(Map::SegmentRef);
PTRACK_ENGINE_NOEXCEPT(&Map::segment_ref, &Map::mark_in_segment, &Map::block_changed, &hash_rel);

void note_file(const RelationFile* file, void* arg)
{
    auto* walk = static_cast<WalkState*>(arg);
    /*
     * Room for this file's growth first: once its size is in the table,
     * nothing may fail before it is collected.  A baseline collects none.
     */
    if (!walk->baseline && walk->count == walk->capacity) {
        walk->capacity *= 2;
        walk->growth = static_cast<Growth*>(repalloc(walk->growth, walk->capacity * sizeof(Growth)));
    }
    const SegmentKey key = key_of(file->segment.rel, file->segment.segno);
    bool found = false;
    auto* entry = static_cast<SizeEntry*>(hash_search(sizes, &key, HASH_ENTER, &found));
    const uint64_t blocks = (file->size_bytes + BLCKSZ - 1) / BLCKSZ;
    const uint32_t now = blocks > RELSEG_SIZE ? RELSEG_SIZE : static_cast<uint32_t>(blocks);
    const uint32_t before = found ? entry->nblocks : 0;
    entry->nblocks = now;
    entry->seen_in = walk_number;
    /* A baseline's blocks predate tracking; a shorter file lost blocks the WAL dated (its record may come later). */
    if (walk->baseline)
        entry->dated = now;
    else if (!found || entry->dated > now)
        entry->dated = found ? now : 0;
    if (walk->baseline || now <= before || file->unlogged)
        return;
    walk->growth[walk->count++] = Growth{file->segment.rel, file->segment.segno, before, now};
}

void forget_unseen()
{
    forget_recent();
    HASH_SEQ_STATUS status;
    hash_seq_init(&status, sizes);
    while (auto* entry = static_cast<SizeEntry*>(hash_seq_search(&status)))
        if (entry->seen_in != walk_number)
            (void) hash_search(sizes, &entry->key, HASH_REMOVE, NULL);
}

/*
 * Reads `name` into the table if it is intact, of this cluster, and saved
 * for `covered`; else leaves the table alone and says why in `why` (a
 * phrase such as "not found", `why_len` bytes).
 */
bool load_file(const char* name, Lsn covered, char* why, size_t why_len)
{
    const int fd = OpenTransientFile(name, O_RDONLY | PG_BINARY);
    if (fd < 0) {
        if (errno == ENOENT)
            snprintf(why, why_len, "not found");
        else
            snprintf(why, why_len, "could not be opened: %s", strerror(errno));
        return false;
    }
    uint8_t header[kSizesHeaderBytes];
    const char* problem = nullptr;
    uint32_t stored_crc = 0;
    if (!read_at(fd, header, sizeof(header), 0))
        problem = "too short or unreadable";
    else if (memcmp(header, kSizesMagic, 8) != 0)
        problem = "not a ptrack sizes file";
    else if (memcpy(&stored_crc, header + 60, 4), stored_crc != crc32c(header, 60))
        problem = "its header fails its checksum";
    uint32_t version = 0, entries_crc = 0, server_major = 0;
    uint64_t system_identifier = 0, file_covered = 0, count = 0;
    if (problem == nullptr) {
        memcpy(&version, header + 8, 4);
        memcpy(&system_identifier, header + 16, 8);
        memcpy(&file_covered, header + 24, 8);
        memcpy(&count, header + 32, 8);
        memcpy(&entries_crc, header + 40, 4);
        memcpy(&server_major, header + 44, 4);
        if (version != kSizesVersion)
            problem = "of another format version";
        else if (system_identifier != GetSystemIdentifier())
            problem = "of another cluster";
        else if ((server_major == 0 ? kUnrecordedServerMajor : server_major) != kServerMajor)
            problem = "written under another PostgreSQL major version";
        else if (count >= (uint64_t{1} << 32))
            problem = "damaged (entry count)";
        else if (file_covered != covered) {
            snprintf(why, why_len, "saved with the map complete up to %X/%X, not %X/%X",
                     PTRACK_LSN_ARGS(file_covered), PTRACK_LSN_ARGS(covered));
            CloseTransientFile(fd);
            return false;
        }
    }
    SizeRecord* records = nullptr;
    if (problem == nullptr) {
        records = static_cast<SizeRecord*>(palloc(Max(count, uint64_t{1}) * sizeof(SizeRecord)));
        if (!read_at(fd, records, count * sizeof(SizeRecord), kSizesHeaderBytes))
            problem = "too short for its entries";
        else if (crc32c(records, count * sizeof(SizeRecord)) != entries_crc)
            problem = "its entries fail their checksum";
    }
    CloseTransientFile(fd);
    if (problem == nullptr) {
        growth_reset();
        for (uint64_t i = 0; i < count; ++i) {
            const SizeRecord& r = records[i];
            const RelFork rel{r.spc_oid, r.db_oid, r.relfilenode, static_cast<uint8_t>(r.fork)};
            const SegmentKey key = key_of(rel, r.segno);
            auto* entry = static_cast<SizeEntry*>(hash_search(sizes, &key, HASH_ENTER, NULL));
            entry->nblocks = r.nblocks;
            entry->dated = r.nblocks; /* saved without the growth still waiting (growth_prepare_save()) */
            entry->seen_in = walk_number;
        }
    } else {
        snprintf(why, why_len, "%s", problem);
    }
    if (records != nullptr)
        pfree(records);
    return problem == nullptr;
}

/*
 * One segment file of a watched walk (growth_walk_some()): note_file() as a
 * full walk would call it, or, if the file is gone, its entry forgotten as
 * forget_unseen() forgets a file a full walk does not find.
 */
void look_at_segment(const RelSegment& segment, WalkState* walk)
{
    char path[MAXPGPATH];
    segment_file_path(segment.rel, segment.segno, path);
    struct stat st;
    if (stat(path, &st) != 0) {
        if (errno != ENOENT)
            ereport(ERROR, (errcode_for_file_access(), errmsg("could not stat file \"%s\": %m", path)));
        const SegmentKey key = key_of(segment.rel, segment.segno);
        forget_recent();
        (void) hash_search(sizes, &key, HASH_REMOVE, NULL);
        return;
    }
    if (!S_ISREG(st.st_mode))
        return;
    RelationFile file;
    file.path = path;
    file.segment = segment;
    file.segment.temp = false;
    file.size_bytes = static_cast<uint64_t>(st.st_size);
    /* Unlogged: an init fork next to it (datadir_walk.cpp's rule), looked up for this file alone. */
    file.unlogged = false;
    if (segment.rel.fork != kInitFork) {
        RelFork init = segment.rel;
        init.fork = kInitFork;
        char init_path[MAXPGPATH];
        relation_path(init, init_path);
        struct stat init_st;
        file.unlogged = stat(init_path, &init_st) == 0;
    }
    note_file(&file, walk);
}

/*
 * The walk being collected (growth_walk(), growth_walk_some()); file-level,
 * so that it survives the longjmp of an ERROR that interrupts it.
 */
WalkState collecting;

/*
 * After an ERROR interrupted a walk (a directory that cannot be read, out of
 * memory): the segments whose growth it had collected get their sizes back,
 * so that the next walk finds that growth again; the table is never ahead of
 * what was recorded.  No allocation.
 */
void undo_collected()
{
    forget_recent();
    for (uint32_t i = 0; i < collecting.count; ++i) {
        const Growth& g = collecting.growth[i];
        const SegmentKey key = key_of(g.rel, g.segno);
        if (auto* entry = static_cast<SizeEntry*>(hash_search(sizes, &key, HASH_FIND, NULL)))
            entry->nblocks = Min(entry->nblocks, g.from);
    }
}

/* A walk to collect into `collecting`. */
void start_walk(bool baseline)
{
    collecting = WalkState{baseline, nullptr, 0, 64};
    collecting.growth = static_cast<Growth*>(palloc(collecting.capacity * sizeof(Growth)));
}

/* One stat() per relation file into `collecting`: updates the table, and collects growth unless a baseline. */
void collect_all_files()
{
    ++walk_number;
    walk_data_directory(note_file, &collecting);
    forget_unseen();
}

/* The same as a value (the postmaster's walk, whose table goes whatever happens: growth_mark_since_save()). */
WalkState walk_files(bool baseline)
{
    start_walk(baseline);
    collect_all_files();
    const WalkState walk = collecting;
    collecting = WalkState{};
    return walk;
}

/* The growth of a walk dated `lsn`, kept pending, waiting for the follower to pass `lsn` (file_growth.h). */
void record_growth(const WalkState& walk, Lsn lsn)
{
    if (recorder == nullptr)
        return;
    for (uint32_t i = 0; i < walk.count; ++i) {
        const Growth& g = walk.growth[i];
        if (pending_count == pending_capacity) {
            const uint32_t capacity = pending_capacity == 0 ? 64 : pending_capacity * 2;
            const MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
            pending = static_cast<PendingGrowth*>(pending == nullptr ? palloc(capacity * sizeof(PendingGrowth))
                                                                     : repalloc(pending, capacity * sizeof(PendingGrowth)));
            MemoryContextSwitchTo(old);
            pending_capacity = capacity;
        }
        pending[pending_count++] = PendingGrowth{g.rel, g.segno, g.from, g.to, lsn, false};
    }
}

/*
 * Pending growth `p`, whose date the follower has passed, into the
 * recorder's set from the first block the WAL did not date; false if the
 * WAL dated all of it (nothing to keep).  Else p->recorded says whether the
 * set took it.
 */
bool record_settled(PendingGrowth* p)
{
    const SegmentKey key = key_of(p->rel, p->segno);
    const auto* entry = static_cast<const SizeEntry*>(hash_search(sizes, &key, HASH_FIND, NULL));
    if (entry != nullptr && entry->dated > p->from)
        p->from = Min(entry->dated, p->to);
    if (p->from >= p->to)
        return false;
    const BlockNumber first = p->segno * static_cast<BlockNumber>(RELSEG_SIZE) + p->from;
    p->recorded = recorder != nullptr && recorder(p->rel, first, p->lsn);
    return true;
}

/* Marks the growth `walk` collected in `target` at `lsn` (see growth_walk()); frees it; returns the blocks marked. */
uint64_t mark_growth(WalkState walk, Map* target, Lsn lsn, Lsn skip_marked_since)
{
    uint64_t marked = 0;
    for (uint32_t i = 0; i < walk.count; ++i) {
        const Growth& g = walk.growth[i];
        const BlockNumber first = g.segno * static_cast<BlockNumber>(RELSEG_SIZE);
        /* One hash per grown segment, not per block (the follower marked through its mark cache before). */
        const Map::SegmentRef segment = target->segment_ref(hash_rel(g.rel), g.segno);
        for (uint32_t b = g.from; b < g.to; ++b) {
            if (skip_marked_since != 0 && target->block_changed(g.rel, first + b, skip_marked_since))
                continue;
            target->mark_in_segment(segment, first + b, lsn);
            ++marked;
        }
    }
    pfree(walk.growth);
    return marked;
}

/* Drops the table (the next growth_create() makes a new one). */
void forget_table()
{
    if (sizes != nullptr)
        hash_destroy(sizes);
    sizes = nullptr;
    forget_recent();
}

/*
 * In a PG_CATCH() block: the message of the ERROR caught, copied into this
 * process's buffer (valid until the next call); the error state is flushed
 * and `cxt` made current again.  A C-style frame.
 */
const char* caught_error_message(MemoryContext cxt)
{
    static char text[192];
    MemoryContextSwitchTo(cxt);
    ErrorData* edata = CopyErrorData();
    FlushErrorState();
    strlcpy(text, edata->message != NULL ? edata->message : "no message", sizeof(text));
    FreeErrorData(edata);
    return text;
}

}  // namespace

void growth_create()
{
    HASHCTL ctl;
    memset(&ctl, 0, sizeof(ctl));
    ctl.keysize = sizeof(SegmentKey);
    ctl.entrysize = sizeof(SizeEntry);
    ctl.hcxt = TopMemoryContext;
    sizes = hash_create("ptrack relation file sizes", 1024, &ctl, HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
    forget_recent();
}

void growth_reset()
{
    forget_recent();
    pending_count = 0; /* the sizes they lowered are gone: a baseline or a load follows */
    HASH_SEQ_STATUS status;
    hash_seq_init(&status, sizes);
    while (auto* entry = static_cast<SizeEntry*>(hash_seq_search(&status)))
        (void) hash_search(sizes, &entry->key, HASH_REMOVE, NULL);
}

bool growth_load(Lsn covered, char* why, size_t why_len)
{
    char why_new[128], why_old[128];
    if (load_file(sizes_new_file(), covered, why_new, sizeof(why_new)) ||
        load_file(sizes_file(), covered, why_old, sizeof(why_old)))
        return true;
    if (why != nullptr)
        snprintf(why, why_len, "\"%s\": %s; \"%s\": %s", sizes_file(), why_old, sizes_new_file(), why_new);
    return false;
}

/* The growth `collecting` holds, dated with the LSN read now (returned): recorded, marked if the map is, freed. */
Lsn finish_walk(Lsn skip_marked_since)
{
    const WalkState walk = collecting;
    collecting = WalkState{};
    /*
     * Read after every stat(): no smaller than the WAL position when any
     * growth seen here happened.  The end of the last record inserted, not
     * the insert position: after a WAL switch that lies past the next page's
     * header, which no record ends before, and the follower, standing at
     * the switch's end, would never apply the WAL up to that date (a
     * backend's cut would then take the growth whole, although the WAL
     * dated it: growth_settle_pending()).
     */
    const Lsn lsn = RecoveryInProgress() ? Max(GetXLogReplayRecPtr(NULL), last_inserted_record_end())
                                         : last_inserted_record_end();
    record_growth(walk, lsn);
    if (marks_map)
        (void) mark_growth(walk, &map, lsn, skip_marked_since);
    else
        pfree(walk.growth);
    return lsn;
}

Lsn growth_walk(bool baseline, Lsn skip_marked_since)
{
    start_walk(baseline);
    PG_TRY();
    {
        collect_all_files();
    }
    PG_CATCH();
    {
        undo_collected();
        PG_RE_THROW();
    }
    PG_END_TRY();
    return finish_walk(skip_marked_since);
}

/*
 * The watched walk (growth_watch.h): note_file() for the named segment files
 * and the files of `dirs` only; the LSN read and the growth's fate exactly
 * as in growth_walk().
 */
Lsn growth_walk_some(const RelSegment* segments, uint32_t count, const char* const* dirs, uint32_t dir_count)
{
    start_walk(false);
    PG_TRY();
    {
        for (uint32_t i = 0; i < count; ++i)
            look_at_segment(segments[i], &collecting);
        for (uint32_t i = 0; i < dir_count; ++i)
            (void) walk_relation_dir(dirs[i], note_file, &collecting);
    }
    PG_CATCH();
    {
        undo_collected();
        PG_RE_THROW();
    }
    PG_END_TRY();
    return finish_walk(0);
}

uint32_t growth_known_files()
{
    return sizes == nullptr ? 0 : static_cast<uint32_t>(hash_get_num_entries(sizes));
}

void growth_set_marks_map(bool marks)
{
    marks_map = marks;
}

void growth_set_recorder(GrowthRecorder fn)
{
    recorder = fn;
    pending_count = 0;
}

void growth_settle_pending(Lsn applied_before, bool whole)
{
    uint32_t kept = 0;
    for (uint32_t i = 0; i < pending_count; ++i) {
        PendingGrowth p = pending[i];
        if (!p.recorded) {
            if (p.lsn < applied_before) {
                if (!record_settled(&p))
                    continue; /* the WAL dated every block of it */
            } else if (whole) {
                const BlockNumber first = p.segno * static_cast<BlockNumber>(RELSEG_SIZE) + p.from;
                p.recorded = recorder != nullptr && recorder(p.rel, first, p.lsn);
            }
        }
        pending[kept++] = p;
    }
    pending_count = kept;
}

void growth_replay_pending(Lsn cut_end)
{
    uint32_t kept = 0;
    for (uint32_t i = 0; i < pending_count; ++i) {
        PendingGrowth p = pending[i];
        if (p.recorded && p.lsn < cut_end)
            continue; /* the summary ending at cut_end holds it at its date */
        if (p.recorded) {
            p.recorded = false; /* recorded whole for a backend's cut: it waits for the follower again */
        } else if (p.lsn < cut_end) {
            /* The set refused it: in no summary, dated at the new set's start, later than it happened. */
            p.lsn = cut_end;
            if (!record_settled(&p))
                continue;
        }
        pending[kept++] = p;
    }
    pending_count = kept;
}

uint32_t growth_pending_count()
{
    return pending_count;
}

const char* growth_mark_since_save(Lsn covered, Lsn lsn, Map* target, uint64_t* blocks)
{
    static char text[320];
    const char* volatile result = nullptr;
    *blocks = 0;
    const MemoryContext cxt = CurrentMemoryContext;
    growth_create();
    PG_TRY();
    {
        char why[272];
        if (growth_load(covered, why, sizeof(why))) {
            *blocks = mark_growth(walk_files(false), target, lsn, 0);
        } else {
            snprintf(text, sizeof(text), "no relation file sizes were saved with it (%s)", why);
            result = text;
        }
    }
    PG_CATCH();
    {
        snprintf(text, sizeof(text), "the relation files could not be looked at: %s", caught_error_message(cxt));
        result = text;
    }
    PG_END_TRY();
    forget_table();
    return result;
}

bool growth_prepare_hooks_save(Lsn covered, Lsn loaded_covered)
{
    /* The checkpointer's state, kept between its saves. */
    static bool ready = false;
    static Lsn walk_began_at = 0; /* marks made since the previous walk began are >= it */
    volatile bool ok = false;
    const MemoryContext cxt = CurrentMemoryContext;
    PG_TRY();
    {
        bool baseline = false;
        if (!ready) {
            growth_create();
            ready = true;
            if (loaded_covered != 0 && growth_load(loaded_covered))
                walk_began_at = loaded_covered;
            else
                baseline = true; /* a fresh map: the hooks have marked every extension since it began */
        }
        const Lsn began = current_mark_lsn();
        (void) growth_walk(baseline, walk_began_at);
        walk_began_at = began;
        ok = growth_prepare_save(covered);
    }
    PG_CATCH();
    {
        /* The message first: ereport() must not run while the caught error is still on the stack. */
        const char* message = caught_error_message(cxt);
        ereport(WARNING, (errmsg("ptrack could not record the relation file sizes: %s", message),
                          errdetail("The map is not saved at this checkpoint; the previous save stays in force."),
                          errhint("Make every directory under base/, global/ and pg_tblspc/ readable by the "
                                  "server's user.")));
        /* The walk stopped half way: start over from a baseline at the next save. */
        forget_table();
        ready = false;
    }
    PG_END_TRY();
    return ok;
}

BlockNumber growth_block_referenced(const RelFork& rel, BlockNumber block, Lsn lsn)
{
    const uint32_t segno = block / RELSEG_SIZE;
    const uint32_t offset = block % RELSEG_SIZE;
    SizeEntry*& slot = recent[recent_index(rel, segno)];
    SizeEntry* entry = slot;
    if (entry == nullptr || entry->key.segno != segno || entry->key.relfilenode != rel.relfilenode ||
        entry->key.fork != rel.fork || entry->key.db_oid != rel.db_oid || entry->key.spc_oid != rel.spc_oid) {
        const SegmentKey key = key_of(rel, segno);
        bool found = false;
        entry = static_cast<SizeEntry*>(hash_search(sizes, &key, HASH_ENTER, &found));
        if (!found) {
            entry->nblocks = 0;
            entry->dated = 0;
            entry->seen_in = walk_number;
        }
        slot = entry;
    }
    if (offset < entry->dated)
        return block;
    /* The set's blocks from the size the WAL dated. */
    const BlockNumber gap = segno * static_cast<BlockNumber>(RELSEG_SIZE) + entry->dated;
    entry->nblocks = Max(entry->nblocks, offset + 1);
    entry->dated = offset + 1;
    return gap;
}

void growth_truncated(const RelFork& rel, BlockNumber nblocks)
{
    const uint32_t first_segno = nblocks / RELSEG_SIZE;
    for (uint32_t segno = first_segno;; ++segno) {
        const SegmentKey key = key_of(rel, segno);
        auto* entry = static_cast<SizeEntry*>(hash_search(sizes, &key, HASH_FIND, NULL));
        if (entry == nullptr)
            break;
        const uint32_t keep = segno == first_segno ? nblocks % RELSEG_SIZE : 0;
        if (entry->nblocks > keep)
            entry->nblocks = keep;
        if (entry->dated > keep)
            entry->dated = keep;
    }
}

void growth_database_replaced(uint32_t spc, uint32_t db)
{
    HASH_SEQ_STATUS status;
    hash_seq_init(&status, sizes);
    while (auto* entry = static_cast<SizeEntry*>(hash_seq_search(&status)))
        if (entry->key.spc_oid == spc && entry->key.db_oid == db) {
            entry->nblocks = 0;
            entry->dated = 0;
        }
}

bool growth_prepare_save(Lsn covered)
{
    /* One buffer: the header, then the records. */
    const long count = hash_get_num_entries(sizes);
    const size_t bytes = kSizesHeaderBytes + static_cast<size_t>(count) * sizeof(SizeRecord);
    uint8_t* file = static_cast<uint8_t*>(palloc0(bytes));
    auto* records = reinterpret_cast<SizeRecord*>(file + kSizesHeaderBytes);
    /*
     * Pending growth (growth_set_recorder()) is saved as not seen yet: lowered
     * here for the copy, restored below (in reverse, so a segment pending
     * twice gets its own size back).
     */
    struct Lowered {
        SizeEntry* entry;
        uint32_t nblocks;
    };
    Lowered* lowered = static_cast<Lowered*>(palloc(Max(pending_count, 1u) * sizeof(Lowered)));
    uint32_t lowered_count = 0;
    for (uint32_t i = 0; i < pending_count; ++i) {
        const SegmentKey key = key_of(pending[i].rel, pending[i].segno);
        auto* entry = static_cast<SizeEntry*>(hash_search(sizes, &key, HASH_FIND, NULL));
        if (entry == nullptr || entry->nblocks <= pending[i].from)
            continue;
        lowered[lowered_count++] = Lowered{entry, entry->nblocks};
        entry->nblocks = pending[i].from;
    }
    HASH_SEQ_STATUS status;
    hash_seq_init(&status, sizes);
    long n = 0;
    while (auto* entry = static_cast<SizeEntry*>(hash_seq_search(&status))) {
        const SegmentKey& k = entry->key;
        records[n++] = SizeRecord{k.spc_oid, k.db_oid, k.relfilenode, k.fork, k.segno, entry->nblocks};
    }
    while (lowered_count > 0) {
        --lowered_count;
        lowered[lowered_count].entry->nblocks = lowered[lowered_count].nblocks;
    }
    pfree(lowered);
    uint8_t* header = file;
    memcpy(header, kSizesMagic, 8);
    const uint32_t version = kSizesVersion;
    const uint64_t system_identifier = GetSystemIdentifier();
    const uint64_t count64 = static_cast<uint64_t>(n);
    const uint32_t entries_crc = crc32c(records, n * sizeof(SizeRecord));
    memcpy(header + 8, &version, 4);
    memcpy(header + 16, &system_identifier, 8);
    memcpy(header + 24, &covered, 8);
    memcpy(header + 32, &count64, 8);
    memcpy(header + 40, &entries_crc, 4);
    memcpy(header + 44, &kServerMajor, 4);
    const uint32_t header_crc = crc32c(header, 60);
    memcpy(header + 60, &header_crc, 4);

    /* The new file must survive a crash right after the map save that needs it: fsync its directory too. */
    const bool ok = write_file_fsynced(sizes_new_file(), file, bytes, "relation file sizes") &&
                    fsync_state_folder_for_save("relation file sizes");
    pfree(file);
    return ok;
}

void growth_commit_save()
{
    if (durable_rename(sizes_new_file(), sizes_file(), DEBUG1) == 0)
        return;
    /* The map is saved and ptrack.sizes.new matches it: what is at stake is the next save. */
    save_stats_record_failure();
    ereport(WARNING, (errcode_for_file_access(),
                      errmsg("ptrack could not rename \"%s\" to \"%s\": %m", sizes_new_file(), sizes_file()),
                      errdetail("The map saved now goes with \"%s\". A crash during a later save, before this "
                                "rename succeeds, makes ptrack refuse the map, and the next backup must be full.",
                                sizes_new_file()),
                      errhint("Make \"%s\" a regular file writable by the server's user, "
                              "or remove it; the next save retries.",
                              sizes_file())));
}

bool growth_save_before_recovery(Lsn redo)
{
    growth_create();
    pfree(walk_files(true).growth); /* a baseline records sizes only */
    const bool ok = growth_prepare_save(redo);
    if (ok)
        growth_commit_save();
    forget_table();
    return ok;
}

void growth_settle_files(Lsn covered)
{
    struct stat st;
    if (stat(sizes_new_file(), &st) != 0)
        return;
    char why[160] = "no map needs it";
    bool needed = false;
    if (covered != 0) {
        growth_create();
        needed = load_file(sizes_new_file(), covered, why, sizeof(why));
        forget_table();
    }
    if (needed) {
        /* On failure durable_rename() warns, and the file stays: it is still the one the map needs. */
        if (durable_rename(sizes_new_file(), sizes_file(), WARNING) == 0)
            ereport(LOG, (errmsg("ptrack completed an interrupted save: renamed \"%s\" to \"%s\"", sizes_new_file(),
                                 sizes_file())));
        return;
    }
    if (unlink(sizes_new_file()) == 0)
        ereport(LOG, (errmsg("ptrack removed leftover file \"%s\": %s", sizes_new_file(), why)));
    else if (errno != ENOENT)
        ereport(WARNING, (errcode_for_file_access(), errmsg("could not remove file \"%s\": %m", sizes_new_file())));
}

}  // namespace ptrack::pg
