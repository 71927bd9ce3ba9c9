/*
 * map_load.cpp -- startup: read ptrack.map (and ptrack.map.delta), decide
 * whether it can be trusted, and either use it or start a fresh map
 * (docs/design.md section 4).  Runs once, in the postmaster, before any
 * process can write a block.
 *
 * The trust rules themselves are in the engine (map_file_distrust_reason());
 * this file gathers the facts they judge, from one read of pg_control, the
 * data directory and the configuration.
 *
 * A chunk of ptrack.map that fails its CRC is made conservative (every word
 * raised to an LSN no smaller than any change made before this startup,
 * conservative_lsn_bound()) rather than discarding the whole map.
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

#include "capture/hooks/bypass_journal_io.h"
#include "capture/capture_source.h"
#include "capture/file_growth.h"
#include "persist/limit_file_io.h"
#include "persist/map_io.h"
#include "persist/map_persistence.h"
#include "ptrack/limit_file.h"
#include "ptrack/map_delta.h"
#include "ptrack/map_file.h"
#include "capture/hooks/startup_scan.h"
#include "capture/wal_archive.h"
#include "capture/wal_records.h"
#include "compat/compat.h"

namespace ptrack::pg {

PTRACK_FRAME_SAFE(MapFileHeader, StartupFacts, DeltaBatchHeader, DeltaEntry);
PTRACK_ENGINE_NOEXCEPT(&Map::clear, &Map::region, &map_file_chunk_count, &map_file_data_offset,
                       &map_file_chunk_length, &map_file_decode_header, &describe_header_status,
                       &map_file_distrust_reason, &delta_decode_batch_header, &delta_apply,
                       &make_chunk_conservative);

namespace {

void warn_not_trusted(const char* reason)
{
    ereport(WARNING, (errmsg("ptrack map file \"%s\" is not trusted because %s", kMapFileName, reason),
                      errdetail("Change tracking starts afresh with a new ptrack_init_lsn()."),
                      errhint("The next backup must be a full backup.")));
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

bool backup_label_present()
{
    struct stat st;
    return stat(BACKUP_LABEL_FILE, &st) == 0;
}

StartupFacts gather_startup_facts(const ControlFileData& control, const MapGeometry& geometry, uint64_t file_bytes)
{
    StartupFacts facts{};
    facts.system_identifier = control.system_identifier;
    facts.server_major = kServerMajor;
    facts.data_checksum_version = control.data_checksum_version;
    facts.geometry = geometry;
    facts.source = capture_source;
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
    const int fd = OpenTransientFile(kMapDeltaFileName, O_RDONLY | PG_BINARY);
    if (fd < 0) {
        if (errno != ENOENT)
            ereport(LOG, (errcode_for_file_access(),
                          errmsg("ptrack could not open \"%s\": %m; the map is taken as of its last full save",
                                 kMapDeltaFileName)));
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
        ereport(LOG, (errmsg("ptrack applied %d incremental flushes from \"%s\"", applied, kMapDeltaFileName)));
    /* A torn last batch is what a crash during an append leaves; say so, since the map's trust may hang on it. */
    if (offset < file_bytes)
        ereport(LOG, (errmsg("ptrack ignored the last %llu bytes of \"%s\": they do not hold a valid flush of "
                             "this map",
                             static_cast<unsigned long long>(file_bytes - offset), kMapDeltaFileName)));
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
    ereport(WARNING, (errmsg("ptrack map file \"%s\": %llu of %llu chunks failed their checksum", kMapFileName,
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

/*
 * The first LSN from which a scan that read the WAL from its start proves
 * every change: `redo`, unless a record ending exactly there may have been
 * left unread (pagemapset(redo) must list it), then one byte past it.
 */
Lsn scanned_from(const StartupScan& scan, Lsn redo, uint32_t segment_bytes)
{
    return scan.start < redo || no_record_ends_at(redo, segment_bytes) ? redo : redo + 1;
}

/* Logs what a startup scan did. */
void log_startup_scan(const StartupScan& scan, const char* what)
{
    ereport(LOG, (errmsg("ptrack marked the changes of %llu WAL records from %X/%X to %X/%X %s",
                         static_cast<unsigned long long>(scan.records), PTRACK_LSN_ARGS(scan.start),
                         PTRACK_LSN_ARGS(scan.end), what),
                  errdetail("%llu relation files created or truncated there were marked from their size.",
                            static_cast<unsigned long long>(scan.files))));
}

/*
 * Hooks, a base backup: its redo LSN, or one byte past it.  Replay writes,
 * hence marks, every page changed after the redo LSN (see below), but no one
 * replays the record that ends exactly there, if any: the startup scan marks
 * it when pg_wal holds it (the backup's WAL starts with the segment of the
 * redo LSN), and everything after it while at it; when pg_wal does not (the
 * WAL comes through restore_command: pg_probackup's ARCHIVE mode,
 * pg_basebackup -X none), that one record is read through restore_command
 * (mark_record_ending_at()).  0 for pg_rewind's label.
 */
Lsn base_backup_init_lsn(const ControlFileData& control, Map* map)
{
    const Lsn redo = base_backup_redo_lsn();
    if (redo == 0)
        return 0;
    StartupScan scan;
    if (scan_wal_at_startup(control, redo, control.checkPointCopy.ThisTimeLineID, map, &scan) == nullptr) {
        log_startup_scan(scan, "since the base backup's redo LSN");
        return scanned_from(scan, redo, control.xlog_seg_size);
    }
    if (no_record_ends_at(redo, control.xlog_seg_size))
        return redo;
    if (const char* why = mark_record_ending_at(control, redo, control.checkPointCopy.ThisTimeLineID, map)) {
        ereport(LOG, (errmsg("ptrack cannot mark the WAL record that ends at the base backup's redo LSN %X/%X: %s",
                             PTRACK_LSN_ARGS(redo), why),
                      errdetail("ptrack_init_lsn() is one byte past it, %X/%X.", PTRACK_LSN_ARGS(redo + 1))));
        return redo + 1;
    }
    ereport(LOG, (errmsg("ptrack marked the WAL record that ends at the base backup's redo LSN %X/%X",
                         PTRACK_LSN_ARGS(redo))));
    return redo;
}

/*
 * ptrack_init_lsn() of a fresh map, when it can be known at startup, for the
 * hooks source (the wal source: always 0 here; the follower establishes it
 * where it starts reading, capture_wal.cpp).  Fills `map` with what the
 * startup scan marks.  0 when nothing can be proven: established on first
 * use instead (init_lsn()).
 *
 *   A base backup (backup_label of pg_backup_start()): its redo LSN.  Every
 *   page changed after it is written again by replay, hence marked: the
 *   first change of each page after the backup's checkpoint carries a
 *   full-page image (pg_backup_start() forces them on a primary; on a
 *   standby pg_backup_stop() fails if the replayed WAL lacked them), and
 *   replay restores an image whatever the page on disk holds.
 *
 *   After a clean shutdown of a primary (pg_control "shut down"): one byte
 *   past the shutdown checkpoint's start (its redo LSN).  Every change before
 *   it is on disk, and every WAL record after it is written in this run,
 *   after the map exists.  The byte past it excludes the record itself and
 *   whatever was done to the stopped cluster without WAL (pg_checksums),
 *   while the start LSN of any backup taken in this run lies after it.
 *
 *   After a crash or a standby's shutdown (wal_level >= replica): one byte
 *   past the end of the valid WAL, if the startup scan reads the WAL to its
 *   end (startup_scan.h).  Not the redo LSN: the WAL names every block a
 *   record changed, but not the zero pages relation extension added after
 *   the redo LSN (a heap extended by several pages, the pages replay fills
 *   up to a block a record names), whose marks the lost map held, and no
 *   record of the files' sizes at the redo LSN exists (the sizes saved with
 *   a map are taken after it, docs/design.md section 4.8).  Every backup
 *   taken before the crash started at or before the WAL's end, so the next
 *   one must be full; every change after the end is made in this run.
 */
Lsn fresh_map_init_lsn(const ControlFileData* control, Map* map)
{
    if (capture_source != CaptureSourceId::kHooks || control == nullptr)
        return 0;
    if (backup_label_present())
        return base_backup_init_lsn(*control, map);
    const Lsn redo = control->checkPointCopy.redo;
    if (control->state == DB_SHUTDOWNED)
        return redo + 1;
    if (control->wal_level < WAL_LEVEL_REPLICA || wal_level < WAL_LEVEL_REPLICA)
        return 0;
    StartupScan scan;
    const char* why = scan_wal_at_startup(*control, redo, control->checkPointCopy.ThisTimeLineID, map, &scan);
    if (why != nullptr) {
        map->clear();
        ereport(LOG, (errmsg("ptrack cannot find the end of the WAL after the redo LSN %X/%X: %s",
                             PTRACK_LSN_ARGS(redo), why),
                      errdetail("ptrack_init_lsn() is established when tracking is first used.")));
        return 0;
    }
    log_startup_scan(scan, "since the redo LSN recovery starts from");
    return scan.end + 1;
}

/*
 * The hooks source's loaded map, complete up to its covered LSN: marks what
 * the WAL after it changed (startup_scan.h) and, after a crash, the blocks
 * relation files gained since the save without WAL (file_growth.h: relation
 * extension writes zero pages that get a WAL record only when first used,
 * and their marks were in memory).  nullptr, or why the map cannot be
 * trusted.
 */
const char* rescan_loaded_map(const ControlFileData* control, const MapFileHeader& header, Map* map)
{
    if (capture_source != CaptureSourceId::kHooks)
        return nullptr;
    static char text[512];
    StartupScan scan;
    const char* why = scan_wal_at_startup(*control, header.covered_lsn, header.timeline, map, &scan);
    if (why != nullptr) {
        snprintf(text, sizeof(text), "the WAL after it cannot be proven complete: %s", why);
        return text;
    }
    log_startup_scan(scan, "after the map's covered LSN");
    /*
     * After a primary's clean shutdown the map was saved once every backend
     * had exited: no block was added since.  Not so on a standby: its
     * shutdown restartpoint is skipped when no checkpoint record was replayed
     * since the last one, and nothing is saved then, while replay may have
     * added blocks (found by the new-user tryout).
     */
    if (control->state == DB_SHUTDOWNED)
        return nullptr;
    /*
     * The end of the valid WAL bounds every change a backup taken before the
     * crash may need listed: its start LSN is at most the WAL flushed then.
     */
    uint64_t blocks = 0;
    if (const char* why_not = growth_mark_since_save(header.covered_lsn, scan.end, map, &blocks)) {
        snprintf(text, sizeof(text), "%s, so the blocks relation files gained without WAL since it was saved "
                 "cannot be found", why_not);
        return text;
    }
    ereport(LOG, (errmsg("ptrack marked %llu blocks that relation files gained since the map was saved",
                         static_cast<unsigned long long>(blocks)),
                  errdetail("Relation extension writes pages with no WAL record until they are used; a "
                            "crash lost their marks.")));
    return nullptr;
}

/*
 * The wal source's fresh map starts where the follower starts reading (a
 * retained slot position, or the redo LSN it reserves), but never before
 * something done to the stopped cluster without WAL: after a clean shutdown
 * (of a primary or a standby) an offline tool such as pg_checksums may have
 * rewritten blocks, so the floor is one byte past that checkpoint's start,
 * as for the hooks source.  After a crash no such tool runs (they refuse a
 * cluster that was not shut down cleanly), and the floor is 0.
 */
Lsn fresh_wal_init_floor(const ControlFileData* control)
{
    if (control == nullptr)
        return UINT64_MAX; /* unknown: the follower then starts at its own position, later */
    if (control->state == DB_SHUTDOWNED || control->state == DB_SHUTDOWNED_IN_RECOVERY)
        return control->checkPointCopy.redo + 1;
    return 0;
}

/*
 * The wal source resumes reading at the map's covered LSN, so it needs the
 * limit events of every record before it: ptrack.limits, loaded into the
 * limit table, complete up to at least that LSN (limit_file_io.h).  nullptr if
 * so, else why the map cannot be continued (the caller starts afresh, which
 * also empties the table).
 */
const char* limits_distrust_reason(const ControlFileData* control, Lsn map_covered)
{
    static char text[256];
    Lsn covered = 0;
    const char* why = control == nullptr ? "pg_control could not be verified"
                                         : load_limits(control->system_identifier, &covered);
    if (why == nullptr && covered >= map_covered)
        return nullptr;
    if (why == nullptr)
        snprintf(text, sizeof(text), "\"%s\" is complete only up to %X/%X, before the map's %X/%X", kLimitFileName,
                 PTRACK_LSN_ARGS(covered), PTRACK_LSN_ARGS(map_covered));
    else
        snprintf(text, sizeof(text), "\"%s\", which the WAL follower needs with it, is not usable: %s", kLimitFileName,
                 why);
    return text;
}

/*
 * The wal source's fresh map in a data directory restored from a base
 * backup: the relation file sizes before recovery, saved for the follower
 * (file_growth.h); returns the redo LSN they are saved for, or 0.
 *
 * Why: the follower starts once the server is consistent (on a standby) or
 * recovery is over, and marks the blocks files gain after its baseline of
 * sizes, while the WAL it reads from the backup's redo LSN on shows every
 * other change.  A baseline taken when it starts would hide the zero pages
 * replay added before it (XLogReadBufferExtended() fills a file up to the
 * block a record names), and a FULL backup on a fresh standby may copy a
 * file before them.  Sizes taken here, before the startup process exists,
 * are the files as the backup left them; every block added after is seen,
 * so the fresh map is complete from the backup's redo LSN, which is where a
 * FULL backup taken on the new standby right away starts (the redo LSN of
 * its latest restartpoint).  Blocks a primary added without WAL before the
 * backup copied the file are in the backup's copy and in every backup of
 * this server.  After a crash the files may hold blocks added without WAL
 * after the redo LSN and before a backup's start, so this proof does not
 * apply: the follower's own baseline stands, and ptrack_init_lsn() with it.
 */
Lsn presize_before_recovery()
{
    if (capture_source != CaptureSourceId::kWal || !backup_label_present())
        return 0;
    const Lsn redo = base_backup_redo_lsn();
    if (redo == 0 || !growth_save_before_recovery(redo))
        return 0;
    ereport(LOG, (errmsg("ptrack recorded the relation file sizes before recovery from the base backup's "
                         "redo LSN %X/%X", PTRACK_LSN_ARGS(redo))));
    return redo;
}

/*
 * The wal source's fresh map in a data directory restored from a base
 * backup: marks what the WAL in pg_wal changed from the backup's redo LSN
 * on (the WAL recovery is about to replay, beginning with the record that
 * ends at the redo LSN if pg_wal holds it), and records the range in
 * `state` for the follower (capture_wal.cpp).
 *
 * A standby's follower starts at consistency and reads from the redo LSN
 * itself; the scan adds the record ending exactly there, which reading from
 * the redo LSN skips.  A restored primary (neither standby.signal nor
 * recovery.signal) replays only what pg_wal holds and then writes its
 * end-of-recovery checkpoint; its follower starts after that and reserves
 * the WAL from that checkpoint on, so without the scan the fresh map would
 * start there, and the restored backup could not be the parent of the next
 * incremental one.  Recovery replays nothing beyond the end of the valid WAL
 * in pg_wal (with neither signal file there is no restore_command and no
 * streaming), and no backend writes WAL before the end-of-recovery
 * checkpoint, so the scan's range, then the follower reading on from the
 * scan's end, see every change after the redo LSN.
 */
void scan_restored_backup(const ControlFileData& control, Lsn redo, Map* map, SharedState* state)
{
    StartupScan scan;
    const char* why = scan_wal_at_startup(control, redo, control.checkPointCopy.ThisTimeLineID, map, &scan);
    if (why != nullptr) {
        map->clear();
        ereport(LOG, (errmsg("ptrack cannot prove the WAL since the base backup's redo LSN %X/%X complete: %s",
                             PTRACK_LSN_ARGS(redo), why),
                      errdetail("ptrack_init_lsn() is established where the WAL follower starts reading.")));
        return;
    }
    log_startup_scan(scan, "since the base backup's redo LSN");
    state->restored_scan_from = scanned_from(scan, redo, control.xlog_seg_size);
    state->restored_scan_end = scan.end;
    /*
     * The follower may skip to the scan's end only on a restored primary.
     * And not when the scanned WAL truncates relations: the sizes saved
     * before recovery predate those truncations, which the follower, starting
     * after them, never applies, so a file cut there and grown again without
     * WAL, up to its old length, before the follower's first walk, would
     * show no growth.
     */
    struct stat st;
    const bool signalled = stat(STANDBY_SIGNAL_FILE, &st) == 0 || stat(RECOVERY_SIGNAL_FILE, &st) == 0;
    state->resume_at_scan_end = !signalled && scan.truncations == 0;
    if (!signalled && scan.truncations > 0)
        ereport(LOG, (errmsg("ptrack WAL follower cannot go on from the end of the WAL read before recovery: "
                             "%llu records there truncate relations",
                             static_cast<unsigned long long>(scan.truncations)),
                      errdetail("ptrack_init_lsn() is established where the WAL follower starts reading.")));
}

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
    limits.clear();
    state->init_lsn = fresh_map_init_lsn(control, map);
    state->presized_redo_lsn = presize_before_recovery();
    if (state->presized_redo_lsn != 0 && control != nullptr)
        scan_restored_backup(*control, state->presized_redo_lsn, map, state);
    state->loaded_covered_lsn = 0;
    state->loaded_timeline = 0;
    /* A map refused is a restart of tracking: ptrack_status() counts it and says why. */
    if (reason != nullptr) {
        state->restart_count = 1;
        state->last_restart.time = GetCurrentTimestamp();
        state->last_restart.lsn = state->init_lsn;
        snprintf(state->last_restart.reason, sizeof(state->last_restart.reason),
                 "the map file was not trusted at startup because %s", reason);
    }
    /* Never let a rejected file be read again, e.g. after a crash before the next flush. */
    remove_file_if_exists(kMapDeltaFileName, DEBUG1);
    if (remove_rejected)
        remove_file_if_exists(kMapFileName, DEBUG1);
}

}  // namespace

void remove_map_files()
{
    remove_file_if_exists(kMapTempFileName, LOG);
    remove_file_if_exists(kMapDeltaFileName, LOG);
    remove_file_if_exists(kMapFileName, LOG);
}

void load_map(SharedState* state, Map* map)
{
    /*
     * A temporary file is a save that never completed: the file it was to
     * replace, if any, is the last good one.  (ptrack.sizes.new is judged
     * once the map is: growth_settle_files() below.)
     */
    const char* const temporaries[] = {kMapTempFileName, kLimitTempFileName};
    for (const char* temp : temporaries)
        if (unlink(temp) == 0)
            ereport(LOG, (errmsg("ptrack removed leftover temporary file \"%s\"", temp)));
    /* A segment the WAL follower restored from the archive when the server stopped (wal_archive.h). */
    remove_archive_leftover();

    ControlFileData* control = read_control_file();
    state->fresh_init_floor = fresh_wal_init_floor(control);
    state->presized_redo_lsn = 0;
    state->restored_scan_from = 0;
    state->restored_scan_end = 0;
    state->resume_at_scan_end = false;
    const int fd = OpenTransientFile(kMapFileName, O_RDONLY | PG_BINARY);
    if (fd < 0) {
        const int open_errno = errno;
        struct stat st;
        const char* reason = nullptr;
        char reason_text[160];
        if (open_errno != ENOENT) {
            snprintf(reason_text, sizeof(reason_text), "it could not be opened: %s", strerror(open_errno));
            reason = reason_text;
        }
        else if (stat(kMapDeltaFileName, &st) == 0)
            reason = "it is missing while \"ptrack.map.delta\" exists (was it deleted?)";
        start_fresh(state, map, control, reason, false);
        if (reason == nullptr && state->init_lsn != 0)
            ereport(LOG, (errmsg("ptrack map file \"%s\" not found: change tracking starts afresh, "
                                 "ptrack_init_lsn() is %X/%X",
                                 kMapFileName, PTRACK_LSN_ARGS(state->init_lsn))));
        else if (reason == nullptr)
            ereport(LOG, (errmsg("ptrack map file \"%s\" not found: change tracking starts afresh", kMapFileName),
                          errdetail(capture_source == CaptureSourceId::kWal
                                        ? "ptrack_init_lsn() is set where the WAL follower starts reading."
                                        : "ptrack_init_lsn() is set when tracking is first used.")));
    } else {
        MapFileHeader header{};
        const char* reason = read_trusted_map(fd, control, state->geometry, map, &header);
        CloseTransientFile(fd);
        if (reason == nullptr && capture_source == CaptureSourceId::kWal)
            reason = limits_distrust_reason(control, header.covered_lsn);
        if (reason == nullptr)
            reason = rescan_loaded_map(control, header, map);
        if (reason == nullptr) {
            state->init_lsn = header.init_lsn;
            state->loaded_covered_lsn = header.covered_lsn;
            state->loaded_timeline = header.timeline;
            ereport(LOG, (errmsg("ptrack loaded map file \"%s\", ptrack_init_lsn() is %X/%X", kMapFileName,
                                 PTRACK_LSN_ARGS(header.init_lsn)),
                          errdetail("Saved by the %s capture source, complete up to %X/%X.",
                                    capture_source_name(header.source), PTRACK_LSN_ARGS(header.covered_lsn))));
        } else {
            start_fresh(state, map, control, reason, true);
        }
    }
    /* Marks a crash lost with nothing else to restore them (bypass_journal_io.h); whatever map is in use. */
    bypass_journal_apply(map);
    /* The sizes that go with the map in use: a trusted one's, or those recorded before recovery. */
    growth_settle_files(state->loaded_covered_lsn != 0 ? state->loaded_covered_lsn : state->presized_redo_lsn);
    if (control != nullptr)
        pfree(control);
}

}  // namespace ptrack::pg
