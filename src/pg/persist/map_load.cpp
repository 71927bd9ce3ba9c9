/*
 * map_load.cpp -- startup: read ptrack.map (and ptrack.map.delta) from the
 * running source's folder (state_files.h), decide whether it can be
 * trusted, and either use it or start a fresh map (docs/design.md sections
 * 3.4 and 5).  Runs in the postmaster each time it makes shared memory
 * (at start and after each crash), before any process can write a block.
 *
 * The trust rules themselves are in the engine (map_file_distrust_reason());
 * this file gathers the facts they judge, from one read of pg_control, the
 * data directory and the configuration.
 *
 * A chunk of ptrack.map that fails its CRC is made conservative (every word
 * raised to an LSN no smaller than any change made before this startup,
 * conservative_lsn_bound()) rather than discarding the whole map.
 *
 * What the capture source that runs adds (a WAL scan of the hooks source,
 * the limit table and the sizes before recovery of the wal source) comes in
 * through its SourcePersistence steps (map_persistence.h), which live with
 * the source under capture/: this file never asks which source runs.
 *
 * Never raises an ERROR: the postmaster must start whatever the files hold,
 * and the fallback is always the conservative one (a fresh map).
 */
extern "C" {
#include "postgres.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "catalog/pg_control.h"
#include "common/controldata_utils.h"
#include "miscadmin.h"
#include "storage/bufpage.h"
#include "storage/fd.h"
#include "utils/timestamp.h"
}

#include "persist/limit_file_io.h"
#include "persist/map_io.h"
#include "persist/map_persistence.h"
#include "persist/state_files.h"
#include "compat/compat.h"
#include "ptrack/limit_file.h"
#include "ptrack/map_delta.h"
#include "ptrack/map_file.h"

namespace ptrack::pg {

PTRACK_FRAME_SAFE(MapFileHeader, StartupFacts, DeltaBatchHeader, DeltaEntry);
PTRACK_ENGINE_NOEXCEPT(&Map::clear, &Map::region, &map_file_chunk_count, &map_file_data_offset,
                       &map_file_chunk_length, &map_file_decode_header, &describe_header_status,
                       &map_file_distrust_reason, &delta_decode_batch_header, &delta_apply,
                       &make_chunk_conservative);

namespace {

/* The map file load_map() judges: the source's own, or another source's (state_files.h). */
const char* map_path = nullptr;

void warn_not_trusted(const char* reason)
{
    /*
     * A data directory restored from a backup tracks from the backup's redo
     * LSN where that can be proven (docs/design.md section 4.7), so the
     * backup it was restored from may still parent the next one.
     */
    ereport(WARNING, (errmsg("ptrack map file \"%s\" is not trusted because %s", map_path, reason),
                      errdetail("Change tracking starts afresh with a new ptrack_init_lsn()."),
                      backup_label_present()
                          ? errhint("An incremental backup whose parent is the backup restored here needs "
                                    "ptrack_init_lsn() no later than that backup's start LSN; otherwise, and for "
                                    "any older parent, take a full backup.")
                          : errhint("The next backup must be a full backup.")));
}

/* pg_control, read once per startup; nullptr (freed) if it cannot be verified. */
ControlFileData* read_control_file()
{
    bool crc_ok = false;
    ControlFileData* control = get_controlfile(DataDir, &crc_ok);
    if (!crc_ok) {
        pfree(control);
        return nullptr;
    }
    return control;
}

StartupFacts gather_startup_facts(const ControlFileData& control, const MapGeometry& geometry, uint64_t file_bytes)
{
    StartupFacts facts{};
    facts.system_identifier = control.system_identifier;
    facts.server_major = kServerMajor;
    facts.data_checksum_version = control.data_checksum_version;
    facts.geometry = geometry;
    facts.source = persist_source->id;
    facts.checkpoint_redo = control.checkPointCopy.redo;
    facts.backup_label = backup_label_present();
    facts.crashed = control.state != DB_SHUTDOWNED && control.state != DB_SHUTDOWNED_IN_RECOVERY;
    facts.checkpoint_wal_level_replica = control.wal_level >= WAL_LEVEL_REPLICA;
    facts.wal_level_replica = wal_level >= WAL_LEVEL_REPLICA;
    facts.file_bytes = file_bytes;
    return facts;
}

/*
 * An LSN no smaller than that of any change made before this startup: the
 * end of the newest WAL segment file in pg_wal (WAL is written before the
 * data it describes), and pg_control's positions, which cover WAL restored
 * from an archive and already removed (a page written during recovery has an
 * LSN <= minRecoveryPoint).
 */
Lsn conservative_lsn_bound(const ControlFileData* control)
{
    if (control == nullptr)
        return UINT64_MAX; /* cannot bound it: the most conservative value */
    Lsn bound = Max(Max(control->checkPoint, control->checkPointCopy.redo),
                    Max(control->minRecoveryPoint, control->backupEndPoint));
    const int segment_bytes = static_cast<int>(control->xlog_seg_size);
    DIR* dir = AllocateDir(XLOGDIR);
    if (dir == NULL || segment_bytes <= 0) {
        if (dir != NULL)
            FreeDir(dir);
        return UINT64_MAX;
    }
    struct dirent* de;
    while ((de = ReadDirExtended(dir, XLOGDIR, WARNING)) != NULL) {
        if (!IsXLogFileName(de->d_name) && !IsPartialXLogFileName(de->d_name))
            continue;
        TimeLineID tli;
        XLogSegNo segno;
        XLogFromFileName(de->d_name, &tli, &segno, segment_bytes);
        bound = Max(bound, (segno + 1) * static_cast<uint64_t>(segment_bytes));
    }
    FreeDir(dir);
    return bound;
}

/*
 * Applies the valid batches of ptrack.map.delta written against `header`'s
 * base; updates `header` to the last applied flush (covered LSN, init_lsn;
 * flags are AND-ed, so a flush without full_page_writes is remembered).
 */
void apply_delta_file(const Map& map, MapFileHeader* header)
{
    const char* delta_path = state_file(StateFile::kMapDelta);
    const int fd = OpenTransientFile(delta_path, O_RDONLY | PG_BINARY);
    if (fd < 0) {
        if (errno != ENOENT)
            ereport(LOG, (errcode_for_file_access(),
                          errmsg("ptrack could not open \"%s\": %m; the map is taken as of its last full save",
                                 delta_path)));
        return;
    }
    struct stat st;
    const uint64_t file_bytes = fstat(fd, &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
    const size_t buffer_bytes = 1024 * 1024;
    uint8_t* buffer = static_cast<uint8_t*>(palloc(buffer_bytes));
    uint64_t offset = 0;
    uint32_t expected_sequence = 1;
    int applied = 0;
    for (;;) {
        uint8_t raw[kDeltaBatchHeaderBytes];
        DeltaBatchHeader batch;
        if (offset + kDeltaBatchHeaderBytes > file_bytes || !read_at(fd, raw, sizeof(raw), offset) ||
            !delta_decode_batch_header(raw, crc32c, &batch) || batch.base_id != header->base_id ||
            batch.sequence != expected_sequence)
            break;
        const uint64_t entries_bytes = batch.entry_count * sizeof(DeltaEntry);
        const uint64_t entries_offset = offset + kDeltaBatchHeaderBytes;
        uint32_t crc = 0;
        if (entries_bytes > file_bytes - entries_offset ||
            !crc_of_range(fd, entries_offset, entries_bytes, buffer, buffer_bytes, &crc) || crc != batch.entries_crc)
            break;
        /* Verified: apply it. */
        bool ok = true;
        for (uint64_t done = 0; done < entries_bytes && ok;) {
            const size_t n = Min(static_cast<uint64_t>(buffer_bytes), entries_bytes - done);
            ok = read_at(fd, buffer, n, entries_offset + done) &&
                 delta_apply(map, reinterpret_cast<const DeltaEntry*>(buffer), n / sizeof(DeltaEntry));
            done += n;
        }
        if (!ok)
            break;
        header->covered_lsn = batch.covered_lsn;
        header->init_lsn = batch.init_lsn;
        header->flags &= batch.flags;
        header->timeline = batch.timeline;
        offset = entries_offset + entries_bytes;
        expected_sequence++;
        applied++;
    }
    pfree(buffer);
    CloseTransientFile(fd);
    if (applied > 0)
        ereport(LOG, (errmsg("ptrack applied %d incremental flushes from \"%s\"", applied, delta_path)));
    /* A torn last batch is what a crash during an append leaves; say so, since the map's trust may hang on it. */
    if (offset < file_bytes)
        ereport(LOG, (errmsg("ptrack ignored the last %llu bytes of \"%s\": they do not hold a valid flush of "
                             "this map",
                             static_cast<unsigned long long>(file_bytes - offset), delta_path)));
}

/* Reads every chunk of the region into `map`; collects the chunks whose CRC fails. */
const char* read_chunks(int fd, const MapFileHeader& header, Map* map, uint64_t* bad_chunks, uint64_t* bad_count)
{
    const MapGeometry& geometry = header.geometry;
    const uint64_t chunks = map_file_chunk_count(geometry, header.chunk_bytes);
    const uint64_t data_offset = map_file_data_offset(chunks);
    uint32_t* crcs = static_cast<uint32_t*>(palloc(chunks * sizeof(uint32_t)));
    const char* result = nullptr;
    *bad_count = 0;
    if (!read_at(fd, crcs, chunks * sizeof(uint32_t), kMapFileHeaderBytes)) {
        result = "its chunk checksum table could not be read";
    } else {
        for (uint64_t c = 0; c < chunks && result == nullptr; ++c) {
            uint8_t* dest = map->region() + c * header.chunk_bytes;
            const uint64_t len = map_file_chunk_length(geometry, header.chunk_bytes, c);
            if (!read_at(fd, dest, len, data_offset + c * header.chunk_bytes))
                result = "a chunk could not be read";
            else if (crc32c(dest, len) != crcs[c])
                bad_chunks[(*bad_count)++] = c;
        }
    }
    pfree(crcs);
    return result;
}

void make_chunks_conservative(const Map& map, const MapFileHeader& header, const uint64_t* bad_chunks,
                              uint64_t bad_count, const ControlFileData* control)
{
    const Lsn bound = conservative_lsn_bound(control);
    for (uint64_t i = 0; i < bad_count; ++i)
        make_chunk_conservative(map, header.chunk_bytes, bad_chunks[i], bound);
    const uint64_t chunks = map_file_chunk_count(header.geometry, header.chunk_bytes);
    ereport(WARNING, (errmsg("ptrack map file \"%s\": %llu of %llu chunks failed their checksum", map_path,
                             static_cast<unsigned long long>(bad_count), static_cast<unsigned long long>(chunks)),
                      errdetail("Their slots were raised to %X/%X: the blocks they track are listed as changed "
                                "since any earlier LSN.",
                                PTRACK_LSN_ARGS(bound)),
                      errhint("The next incremental backup is larger than usual; nothing is lost.")));
}

/*
 * Reads and checks ptrack.map (and its delta) into the map; nullptr on
 * success (with *out holding the header as of the last applied delta),
 * else the reason it cannot be trusted.
 */
const char* read_trusted_map(int fd, const ControlFileData* control, const MapGeometry& geometry, Map* map,
                             MapFileHeader* out)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return "it could not be read";
    uint8_t header_bytes[kMapFileHeaderBytes];
    if (static_cast<uint64_t>(st.st_size) < kMapFileHeaderBytes ||
        !read_at(fd, header_bytes, sizeof(header_bytes), 0))
        return "it is too short to hold a header";
    MapFileHeader header;
    const HeaderStatus status = map_file_decode_header(header_bytes, crc32c, &header);
    if (status != HeaderStatus::kOk)
        return describe_header_status(status);
    if (control == nullptr)
        return "pg_control could not be verified";

    const StartupFacts facts = gather_startup_facts(*control, geometry, static_cast<uint64_t>(st.st_size));
    /* Reject early what the delta cannot change (the covered LSN is judged after it). */
    MapFileHeader early = header;
    early.covered_lsn = UINT64_MAX;
    if (const char* reason = map_file_distrust_reason(early, facts))
        return reason;

    const uint64_t chunks = map_file_chunk_count(geometry, header.chunk_bytes);
    uint64_t* bad_chunks = static_cast<uint64_t*>(palloc(chunks * sizeof(uint64_t)));
    uint64_t bad_count = 0;
    const char* result = read_chunks(fd, header, map, bad_chunks, &bad_count);
    if (result == nullptr) {
        apply_delta_file(*map, &header);
        result = map_file_distrust_reason(header, facts);
    }
    if (result == nullptr && bad_count > 0)
        make_chunks_conservative(*map, header, bad_chunks, bad_count, control);
    pfree(bad_chunks);
    if (result == nullptr)
        *out = header;
    return result;
}

/*
 * The source that saved ptrack.map and the geometry it saved it with; false
 * if its header cannot be read or decoded (read_trusted_map() then says
 * why).
 */
bool saved_geometry(int fd, CaptureSourceId* source, MapGeometry* geometry)
{
    uint8_t header_bytes[kMapFileHeaderBytes];
    MapFileHeader header;
    if (!read_at(fd, header_bytes, sizeof(header_bytes), 0) ||
        map_file_decode_header(header_bytes, crc32c, &header) != HeaderStatus::kOk)
        return false;
    *source = header.source;
    *geometry = header.geometry;
    return true;
}

/*
 * A source that marks no map (map_persistence.h: marks_map()) and a
 * ptrack.map of another geometry, saved by the same source when it did
 * (an upgrade): the file is read and judged by the usual rules into
 * private memory of its own geometry, never into the small shared map, and
 * the source takes what it needs from its marks (migrate_loaded()).
 * nullptr, with *out holding its header, or why it cannot be trusted.
 */
const char* read_map_to_migrate(int fd, const ControlFileData* control, const MapGeometry& geometry,
                                uint64_t shared_bytes, MapFileHeader* out)
{
    const uint64_t bytes = geometry.region_bytes();
    if (bytes > SIZE_MAX - kLineBytes)
        return "it is larger than this server's address space";
    void* raw = malloc(static_cast<size_t>(bytes) + kLineBytes);
    if (raw == nullptr)
        return "there is not enough memory to read it once for its migration to a small map";
    const uintptr_t aligned = (reinterpret_cast<uintptr_t>(raw) + kLineBytes - 1) / kLineBytes * kLineBytes;
    Map old_map(reinterpret_cast<void*>(aligned), geometry);
    const char* reason = read_trusted_map(fd, control, geometry, &old_map, out);
    if (reason == nullptr)
        reason = persist_source->continue_loaded(control, *out, &old_map);
    if (reason == nullptr) {
        ereport(LOG, (errmsg("ptrack read map file \"%s\" of %llu kB, saved when its marks were still kept, to "
                             "migrate it",
                             map_path, static_cast<unsigned long long>(bytes / 1024)),
                      errdetail("The map now keeps only where tracking resumes, in %llu kB of shared memory; the "
                                "next save writes it in that size.",
                                static_cast<unsigned long long>((shared_bytes + 1023) / 1024))));
        persist_source->migrate_loaded(control, *out, old_map);
    }
    free(raw);
    return reason;
}

/*
 * The last map this postmaster refused, kept in its own memory, which a
 * crash restart keeps while shared memory is made anew: a crash before any
 * checkpoint saved a new map finds no file, and the fresh start it makes
 * then still comes from that refusal (ptrack_status() says so).  Cleared
 * when a map is loaded.
 */
TimestampTz refused_time = 0;
char refused_reason[sizeof(RestartInfo::reason)];

/*
 * A fresh, empty map: no file to use (`reason` nullptr), or one that is not
 * trusted (removed when `remove_rejected`, i.e. it was read and judged).
 */
void start_fresh(SharedState* state, Map* map, const ControlFileData* control, const char* reason,
                 bool remove_rejected)
{
    if (reason != nullptr)
        warn_not_trusted(reason);
    map->clear();
    state->init_lsn.store(0, Order::kRelaxed);
    persist_source->start_fresh(control, state, map);
    state->loaded_covered_lsn = 0;
    state->loaded_timeline = 0;
    /* A map refused is a restart of tracking: ptrack_status() counts it and says why. */
    if (reason != nullptr) {
        refused_time = GetCurrentTimestamp();
        strlcpy(refused_reason, reason, sizeof(refused_reason));
    }
    if (refused_time != 0) {
        state->restart_count.store(1, Order::kRelaxed);
        state->last_restart.time = GetCurrentTimestamp();
        state->last_restart.lsn = state->init_lsn.load(Order::kRelaxed);
        if (reason != nullptr)
            snprintf(state->last_restart.reason, sizeof(state->last_restart.reason),
                     "the map file was not trusted at startup because %s", reason);
        else
            snprintf(state->last_restart.reason, sizeof(state->last_restart.reason),
                     "the map file was not trusted at the start of %s because %s, and the server crashed before "
                     "a checkpoint saved a new one",
                     timestamptz_to_str(refused_time), refused_reason);
    }
    /*
     * Never let a rejected file be read again, e.g. after a crash before the
     * next flush (another source's map, in the other folder, goes with
     * clear_other_folder()).
     */
    remove_file_if_exists(state_file(StateFile::kMapDelta), DEBUG1);
    if (remove_rejected)
        remove_file_if_exists(state_file(StateFile::kMap), DEBUG1);
}

}  // namespace

bool backup_label_present()
{
    struct stat st;
    return stat(BACKUP_LABEL_FILE, &st) == 0;
}

/*
 * The redo LSN of backup_label, if it names a base backup taken with
 * pg_backup_start() ("BACKUP METHOD: streamed": pg_basebackup, pg_probackup;
 * not pg_rewind's label), else 0.  Reads at most the label's first lines.
 */
Lsn base_backup_redo_lsn()
{
    FILE* file = AllocateFile(BACKUP_LABEL_FILE, "r");
    if (file == NULL)
        return 0;
    char line[MAXPGPATH + 64];
    unsigned hi = 0, lo = 0;
    bool have_start = false, streamed = false;
    for (int n = 0; n < 32 && fgets(line, sizeof(line), file) != NULL; ++n) {
        if (sscanf(line, "START WAL LOCATION: %X/%X ", &hi, &lo) == 2)
            have_start = true;
        else if (strcmp(line, "BACKUP METHOD: streamed\n") == 0)
            streamed = true;
    }
    FreeFile(file);
    return have_start && streamed ? (static_cast<Lsn>(hi) << 32 | lo) : 0;
}

void load_map(SharedState* state, Map* map)
{
    const SettledMap settled = settle_state_files();
    map_path = settled.path;
    /*
     * A temporary file is a save that never completed: the file it was to
     * replace, if any, is the last good one.  (ptrack.sizes.new is judged
     * once the map is: growth_settle_files(), called by ptrack.cpp after this.)
     */
    const char* const temporaries[] = {state_file(StateFile::kMapTemp), state_file(StateFile::kLimitsTemp)};
    for (const char* temp : temporaries)
        if (unlink(temp) == 0)
            ereport(LOG, (errmsg("ptrack removed leftover temporary file \"%s\"", temp)));

    ControlFileData* control = read_control_file();
    state->fresh_init_floor = 0;
    state->presized_redo_lsn = 0;
    state->restored_scan_from = 0;
    state->restored_scan_end = 0;
    state->resume_at_scan_end = false;
    persist_source->before_load(control, state);
    const int fd = settled.move_failure != nullptr ? -1 : OpenTransientFile(map_path, O_RDONLY | PG_BINARY);
    if (settled.move_failure != nullptr) {
        start_fresh(state, map, control, settled.move_failure, true);
    } else if (fd < 0) {
        const int open_errno = errno;
        struct stat st;
        const char* reason = nullptr;
        char reason_text[160];
        if (open_errno != ENOENT && open_errno != ENOTDIR) { /* ENOTDIR: no folder, so no map */
            snprintf(reason_text, sizeof(reason_text), "it could not be opened: %s", strerror(open_errno));
            reason = reason_text;
        }
        else if (stat(state_file(StateFile::kMapDelta), &st) == 0) {
            snprintf(reason_text, sizeof(reason_text), "it is missing while \"%s\" exists (was it deleted?)",
                     state_file(StateFile::kMapDelta));
            reason = reason_text;
        }
        start_fresh(state, map, control, reason, false);
        const Lsn init = state->init_lsn.load(Order::kRelaxed);
        if (reason == nullptr && init != 0)
            ereport(LOG, (errmsg("ptrack map file \"%s\" not found: change tracking starts afresh, "
                                 "ptrack_init_lsn() is %X/%X",
                                 map_path, PTRACK_LSN_ARGS(init))));
        else if (reason == nullptr)
            ereport(LOG, (errmsg("ptrack map file \"%s\" not found: change tracking starts afresh", map_path),
                          errdetail("%s", persist_source->fresh_init_detail)));
    } else {
        MapFileHeader header{};
        CaptureSourceId saved_source{};
        MapGeometry saved{};
        const char* reason = nullptr;
        if (persist_source->migrate_loaded != nullptr && !persist_source->marks_map() &&
            saved_geometry(fd, &saved_source, &saved) &&
            saved_source == persist_source->id && saved.valid() && !(saved == state->geometry)) {
            map->clear(); /* the small map holds no marks; the old one's stay private */
            reason = read_map_to_migrate(fd, control, saved, state->geometry.region_bytes(), &header);
            CloseTransientFile(fd);
        } else {
            reason = read_trusted_map(fd, control, state->geometry, map, &header);
            CloseTransientFile(fd);
            if (reason == nullptr)
                reason = persist_source->continue_loaded(control, header, map);
        }
        if (reason == nullptr) {
            refused_time = 0; /* a map saved since any refusal: tracking goes on from it */
            state->init_lsn.store(header.init_lsn, Order::kRelaxed);
            state->loaded_covered_lsn = header.covered_lsn;
            state->loaded_timeline = header.timeline;
            ereport(LOG, (errmsg("ptrack loaded map file \"%s\", ptrack_init_lsn() is %X/%X", map_path,
                                 PTRACK_LSN_ARGS(header.init_lsn)),
                          errdetail("Saved by the %s capture source, complete up to %X/%X.",
                                    capture_source_name(header.source), PTRACK_LSN_ARGS(header.covered_lsn))));
        } else {
            start_fresh(state, map, control, reason, true);
        }
    }
    clear_other_folder();
    if (control != nullptr)
        pfree(control);
    /* An earlier version's limit table: read only to migrate its map (capture/wal/map_migration.h), above. */
    remove_limits_files();
}

}  // namespace ptrack::pg
