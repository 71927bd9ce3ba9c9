/*
 * map_persistence.cpp -- see map_persistence.h.
 *
 * Why the flush at the end of the sync phase is enough: every page changed
 * before the checkpoint's redo LSN was written (and marked) by BufferSync
 * before ProcessSyncRequests() ran, so the flushed map covers them; every
 * page changed after the redo LSN gets a full-page image in the WAL on its
 * first change (full_page_writes), which recovery restores and writes again,
 * so it is marked again by replay.  Hence the trust rules on the redo LSN and
 * on full_page_writes / wal_level after a crash.
 *
 * Flushes: the first flush of a checkpointer writes the whole map
 * (ptrack.map.tmp, fsync, durable rename to ptrack.map, with a new base_id);
 * the following ones append only the slots changed since the previous flush
 * to ptrack.map.delta (ptrack/map_delta.h), until the delta file outgrows a
 * quarter of the map, when the next flush writes the whole map again.
 *
 * A chunk of ptrack.map that fails its CRC at startup is made conservative
 * (every word raised to an LSN bound no smaller than any change made before
 * startup, conservative_lsn_bound()) rather than discarding the whole map.
 *
 * Error handling: the postmaster must start whatever the file holds, and a
 * checkpoint must not fail because of ptrack, so failures are WARNINGs and
 * the fallback is always the conservative one (a fresh map, or a stale file
 * that the next startup rejects).
 */
extern "C" {
#include "postgres.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "access/xlogrecovery.h"
#include "catalog/pg_control.h"
#include "common/controldata_utils.h"
#include "miscadmin.h"
#include "portability/instr_time.h"
#include "port/pg_crc32c.h"
#include "storage/bufpage.h"
#include "storage/fd.h"
#include "utils/memutils.h"
}

#include "boundary.h"
#include "capture.h"
#include "map_persistence.h"
#include "ptrack/map_delta.h"
#include "ptrack/map_file.h"

namespace ptrack::pg {

PTRACK_FRAME_SAFE(MapFileHeader, StartupFacts, DeltaBatchHeader, DeltaEntry);
PTRACK_ENGINE_NOEXCEPT(&Map::clear, &Map::region, &MapGeometry::region_bytes, &load_lsn, &region_words,
                       &placement_fingerprint, &map_file_chunk_count, &map_file_data_offset,
                       &map_file_chunk_length, &map_file_bytes, &map_file_encode_header, &map_file_decode_header,
                       &describe_header_status, &map_file_distrust_reason, &delta_encode_batch_header,
                       &delta_decode_batch_header, &delta_collect, &delta_apply, &make_chunk_conservative);

namespace {

uint32_t crc32c(const void* data, size_t len)
{
    pg_crc32c crc;
    INIT_CRC32C(crc);
    COMP_CRC32C(crc, data, len);
    FIN_CRC32C(crc);
    return crc;
}

/* Reads exactly `len` bytes at `offset`; false on error or short read (errno set). */
bool read_at(int fd, void* buf, size_t len, uint64_t offset)
{
    auto* p = static_cast<char*>(buf);
    while (len > 0) {
        const ssize_t n = pg_pread(fd, p, len, static_cast<off_t>(offset));
        if (n <= 0) {
            if (n == 0)
                errno = EIO;
            return false;
        }
        p += n;
        len -= static_cast<size_t>(n);
        offset += static_cast<uint64_t>(n);
    }
    return true;
}

bool write_at(int fd, const void* buf, size_t len, uint64_t offset)
{
    const auto* p = static_cast<const char*>(buf);
    while (len > 0) {
        errno = 0;
        const ssize_t n = pg_pwrite(fd, p, len, static_cast<off_t>(offset));
        if (n <= 0) {
            if (errno == 0)
                errno = ENOSPC;
            return false;
        }
        p += n;
        len -= static_cast<size_t>(n);
        offset += static_cast<uint64_t>(n);
    }
    return true;
}

void warn_not_trusted(const char* reason)
{
    ereport(WARNING, (errmsg("ptrack map file \"%s\" is not trusted because %s", kMapFileName, reason),
                      errdetail("Change tracking starts afresh with a new ptrack_init_lsn()."),
                      errhint("The next backup must be a full backup.")));
}

/* Gathers the startup facts; false (with *problem set) if pg_control is unreadable. */
bool gather_startup_facts(const MapGeometry& geometry, uint64_t file_bytes, StartupFacts* facts,
                          const char** problem)
{
    bool crc_ok = false;
    ControlFileData* control = get_controlfile(DataDir, &crc_ok);
    if (!crc_ok) {
        *problem = "pg_control could not be verified";
        pfree(control);
        return false;
    }
    struct stat st;
    facts->system_identifier = control->system_identifier;
    facts->data_checksum_version = control->data_checksum_version;
    facts->geometry = geometry;
    facts->checkpoint_redo = control->checkPointCopy.redo;
    facts->backup_label = stat(BACKUP_LABEL_FILE, &st) == 0;
    facts->crashed = control->state != DB_SHUTDOWNED && control->state != DB_SHUTDOWNED_IN_RECOVERY;
    facts->checkpoint_full_page_writes = control->checkPointCopy.fullPageWrites;
    facts->checkpoint_wal_level_replica = control->wal_level >= WAL_LEVEL_REPLICA;
    facts->full_page_writes = fullPageWrites;
    facts->wal_level_replica = wal_level >= WAL_LEVEL_REPLICA;
    facts->file_bytes = file_bytes;
    pfree(control);
    return true;
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
    Lsn bound = Max(Max(control->checkPoint, control->checkPointCopy.redo),
                    Max(control->minRecoveryPoint, control->backupEndPoint));
    const int segment_bytes = static_cast<int>(control->xlog_seg_size);
    DIR* dir = AllocateDir(XLOGDIR);
    if (dir == NULL || segment_bytes <= 0) {
        if (dir != NULL)
            FreeDir(dir);
        return UINT64_MAX; /* cannot bound it: the most conservative value */
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

/* The CRC-32C of `len` bytes at `offset` of `fd`, read through `buffer`; false on read error. */
bool crc_of_range(int fd, uint64_t offset, uint64_t len, uint8_t* buffer, size_t buffer_bytes, uint32_t* out)
{
    pg_crc32c crc;
    INIT_CRC32C(crc);
    while (len > 0) {
        const size_t n = len < buffer_bytes ? len : buffer_bytes;
        if (!read_at(fd, buffer, n, offset))
            return false;
        COMP_CRC32C(crc, buffer, n);
        offset += n;
        len -= n;
    }
    FIN_CRC32C(crc);
    *out = crc;
    return true;
}

/*
 * Applies the valid batches of ptrack.map.delta written against `header`'s
 * base; updates `header` to the last applied flush (redo LSN, init_lsn; flags
 * are AND-ed, so a flush without full_page_writes is remembered).
 */
void apply_delta_file(const Map& map, MapFileHeader* header)
{
    const int fd = OpenTransientFile(kMapDeltaFileName, O_RDONLY | PG_BINARY);
    if (fd < 0)
        return;
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
        header->flush_redo_lsn = batch.flush_redo_lsn;
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
}

/*
 * Reads and checks ptrack.map (and its delta) into the map; nullptr on
 * success, else the reason it cannot be trusted.
 */
const char* read_trusted_map(int fd, const MapGeometry& geometry, Map* map, Lsn* init_lsn)
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

    StartupFacts facts;
    const char* problem = nullptr;
    if (!gather_startup_facts(geometry, static_cast<uint64_t>(st.st_size), &facts, &problem))
        return problem;
    /* Reject early what the delta cannot change (the redo LSN is judged after it). */
    MapFileHeader early = header;
    early.flush_redo_lsn = UINT64_MAX;
    if (const char* reason = map_file_distrust_reason(early, facts))
        return reason;

    const uint64_t chunks = map_file_chunk_count(geometry, header.chunk_bytes);
    const uint64_t data_offset = map_file_data_offset(chunks);
    uint32_t* crcs = static_cast<uint32_t*>(palloc(chunks * sizeof(uint32_t)));
    uint64_t* bad_chunks = static_cast<uint64_t*>(palloc(chunks * sizeof(uint64_t)));
    uint64_t bad_count = 0;
    const char* result = nullptr;
    if (!read_at(fd, crcs, chunks * sizeof(uint32_t), kMapFileHeaderBytes)) {
        result = "its chunk checksum table could not be read";
    } else {
        for (uint64_t c = 0; c < chunks && result == nullptr; ++c) {
            uint8_t* dest = map->region() + c * header.chunk_bytes;
            const uint64_t len = map_file_chunk_length(geometry, header.chunk_bytes, c);
            if (!read_at(fd, dest, len, data_offset + c * header.chunk_bytes))
                result = "a chunk could not be read";
            else if (crc32c(dest, len) != crcs[c])
                bad_chunks[bad_count++] = c;
        }
    }
    if (result == nullptr) {
        apply_delta_file(*map, &header);
        result = map_file_distrust_reason(header, facts);
    }
    if (result == nullptr && bad_count > 0) {
        bool crc_ok = false;
        ControlFileData* control = get_controlfile(DataDir, &crc_ok);
        const Lsn bound = crc_ok ? conservative_lsn_bound(control) : UINT64_MAX;
        pfree(control);
        for (uint64_t i = 0; i < bad_count; ++i)
            make_chunk_conservative(*map, header.chunk_bytes, bad_chunks[i], bound);
        ereport(WARNING,
                (errmsg("ptrack map file \"%s\": %llu of %llu chunks failed their checksum", kMapFileName,
                        static_cast<unsigned long long>(bad_count), static_cast<unsigned long long>(chunks)),
                 errdetail("Their slots were raised to %X/%X: the blocks they track are listed as changed "
                           "since any earlier LSN.",
                           PTRACK_LSN_ARGS(bound)),
                 errhint("The next incremental backup is larger than usual; nothing is lost.")));
    }
    pfree(crcs);
    pfree(bad_chunks);
    if (result == nullptr)
        *init_lsn = header.init_lsn;
    return result;
}

void remove_file_if_exists(const char* name, int elevel_removed)
{
    if (unlink(name) == 0)
        ereport(elevel_removed, (errmsg("ptrack removed file \"%s\"", name)));
    else if (errno != ENOENT)
        ereport(WARNING, (errcode_for_file_access(), errmsg("could not remove file \"%s\": %m", name)));
}

/* What the checkpointer remembers between flushes. */
struct FlushState {
    bool have_threshold;  /* a flush succeeded in this process */
    Lsn threshold;        /* current_mark_lsn() read before that flush copied the map */
    uint64_t base_id;     /* of the ptrack.map last written */
    uint32_t sequence;    /* batches appended to ptrack.map.delta since */
    uint64_t delta_bytes; /* size of ptrack.map.delta */
    bool force_full;      /* the last flush failed: write the whole map next time */
    uint8_t* chunk_buffer;
    uint32_t* crcs;
    DeltaEntry* entries;
};
PTRACK_FRAME_SAFE(FlushState);
FlushState flush_state;
constexpr size_t kDeltaBufferEntries = 64 * 1024;

void fill_flush_header(MapFileHeader* header)
{
    header->version = kMapFileVersion;
    header->system_identifier = GetSystemIdentifier();
    header->data_checksum_version = DataChecksumsEnabled() ? PG_DATA_CHECKSUM_VERSION : 0;
    header->geometry = shared->geometry;
    header->placement = placement_fingerprint(shared->geometry);
    header->chunk_bytes = kMapFileChunkBytes;
    header->flags = (fullPageWrites ? kFlagFullPageWrites : 0u) |
                    (wal_level >= WAL_LEVEL_REPLICA ? kFlagWalLevelReplica : 0u);
    header->init_lsn = init_lsn();
    header->flush_redo_lsn = GetRedoRecPtr();
    TimeLineID tli = 0;
    if (RecoveryInProgress())
        (void) GetXLogReplayRecPtr(&tli);
    else
        tli = GetWALInsertionTimeLine();
    header->timeline = tli;
    if (!pg_strong_random(&header->base_id, sizeof(header->base_id)))
        header->base_id = static_cast<uint64_t>(GetCurrentTimestamp()) ^ header->flush_redo_lsn;
}

/* Writes the whole map to ptrack.map; returns bytes written, 0 on failure (WARNING logged). */
uint64_t write_full_map(const MapFileHeader& header)
{
    FlushState& fs = flush_state;
    const MapGeometry& geometry = header.geometry;
    const uint64_t chunks = map_file_chunk_count(geometry, kMapFileChunkBytes);
    const uint64_t data_offset = map_file_data_offset(chunks);

    const int fd = OpenTransientFile(kMapTempFileName, O_RDWR | O_CREAT | O_TRUNC | PG_BINARY);
    if (fd < 0) {
        ereport(WARNING, (errcode_for_file_access(), errmsg("could not create file \"%s\": %m", kMapTempFileName)));
        return 0;
    }
    bool ok = true;
    for (uint64_t c = 0; c < chunks && ok; ++c) {
        /* Copy slot by slot with atomic loads: backends keep marking meanwhile. */
        const uint64_t len = map_file_chunk_length(geometry, kMapFileChunkBytes, c);
        const auto* src = reinterpret_cast<const uint64_t*>(map.region() + c * kMapFileChunkBytes);
        auto* dst = reinterpret_cast<uint64_t*>(fs.chunk_buffer);
        for (uint64_t i = 0; i < len / sizeof(uint64_t); ++i)
            dst[i] = load_lsn(&src[i]);
        fs.crcs[c] = crc32c(fs.chunk_buffer, len);
        ok = write_at(fd, fs.chunk_buffer, len, data_offset + c * kMapFileChunkBytes);
    }
    uint8_t header_bytes[kMapFileHeaderBytes];
    map_file_encode_header(header, crc32c, header_bytes);
    ok = ok && write_at(fd, fs.crcs, data_offset - kMapFileHeaderBytes, kMapFileHeaderBytes) &&
         write_at(fd, header_bytes, sizeof(header_bytes), 0) && pg_fsync(fd) == 0;
    if (!ok)
        ereport(WARNING, (errcode_for_file_access(), errmsg("could not write file \"%s\": %m", kMapTempFileName)));
    if (CloseTransientFile(fd) != 0 && ok) {
        ereport(WARNING, (errcode_for_file_access(), errmsg("could not close file \"%s\": %m", kMapTempFileName)));
        ok = false;
    }
    if (!ok || durable_rename(kMapTempFileName, kMapFileName, WARNING) != 0)
        return 0;
    return map_file_bytes(geometry, kMapFileChunkBytes);
}

/*
 * Appends the words changed since `threshold` to ptrack.map.delta; bytes
 * written, 0 on failure.  Gives up with *too_big set when the batch would
 * outgrow half the map (a full flush is then cheaper); the entries written so
 * far lie past the last valid batch and are never read.
 */
uint64_t append_delta(const MapFileHeader& header, Lsn threshold, bool* too_big)
{
    *too_big = false;
    FlushState& fs = flush_state;
    const bool first = fs.sequence == 0;
    const int fd = OpenTransientFile(kMapDeltaFileName, O_WRONLY | O_CREAT | (first ? O_TRUNC : 0) | PG_BINARY);
    if (fd < 0) {
        ereport(WARNING, (errcode_for_file_access(), errmsg("could not open file \"%s\": %m", kMapDeltaFileName)));
        return 0;
    }
    const uint64_t batch_offset = fs.delta_bytes;
    const uint64_t entries_offset = batch_offset + kDeltaBatchHeaderBytes;
    uint64_t next_word = 0;
    uint64_t count = 0;
    pg_crc32c crc;
    INIT_CRC32C(crc);
    bool ok = true;
    const uint64_t max_entries = header.geometry.region_bytes() / 2 / sizeof(DeltaEntry);
    while (ok && next_word < region_words(header.geometry)) {
        const size_t n = delta_collect(map, threshold, &next_word, fs.entries, kDeltaBufferEntries);
        if (count + n > max_entries) {
            *too_big = true;
            CloseTransientFile(fd);
            return 0;
        }
        COMP_CRC32C(crc, fs.entries, n * sizeof(DeltaEntry));
        ok = write_at(fd, fs.entries, n * sizeof(DeltaEntry), entries_offset + count * sizeof(DeltaEntry));
        count += n;
    }
    FIN_CRC32C(crc);

    DeltaBatchHeader batch{};
    batch.base_id = fs.base_id;
    batch.sequence = fs.sequence + 1;
    batch.flags = header.flags;
    batch.entry_count = count;
    batch.flush_redo_lsn = header.flush_redo_lsn;
    batch.init_lsn = header.init_lsn;
    batch.timeline = header.timeline;
    batch.entries_crc = crc;
    uint8_t raw[kDeltaBatchHeaderBytes];
    delta_encode_batch_header(batch, crc32c, raw);
    ok = ok && write_at(fd, raw, sizeof(raw), batch_offset) && pg_fsync(fd) == 0;
    if (!ok)
        ereport(WARNING, (errcode_for_file_access(), errmsg("could not write file \"%s\": %m", kMapDeltaFileName)));
    if (CloseTransientFile(fd) != 0)
        ok = false;
    /* A new file's directory entry must be durable too. */
    if (ok && first && fsync_fname_ext(".", true, false, WARNING) != 0)
        ok = false;
    if (!ok)
        return 0;
    fs.sequence++;
    const uint64_t written = kDeltaBatchHeaderBytes + count * sizeof(DeltaEntry);
    fs.delta_bytes += written;
    return written;
}

/*
 * ptrack_init_lsn() of a fresh map, when it can be known at startup: after a
 * clean shutdown of a primary (pg_control state "shut down", no backup_label),
 * every change made before the shutdown checkpoint is on disk, and every WAL
 * record after it is written or replayed in this run, after the map exists,
 * so its pages are marked.  The result is one byte past the start of that
 * checkpoint record (its redo LSN): the record itself, and whatever was done
 * to the stopped cluster without WAL (pg_checksums), lie before it, and the
 * start LSN of any backup taken in this run lies after it.  So the first full
 * backup taken after ptrack is enabled (or reset) can be the base of the next
 * incremental, while no earlier backup can.  Otherwise 0:
 * after a crash, or a standby's shutdown (replay restarts at an older
 * restartpoint and skips pages already written), pages changed before this
 * run may be unmarked, and ptrack_init_lsn() is established on first use
 * instead (init_lsn()).
 */
Lsn fresh_map_init_lsn()
{
    bool crc_ok = false;
    ControlFileData* control = get_controlfile(DataDir, &crc_ok);
    struct stat st;
    Lsn lsn = 0;
    if (crc_ok && control->state == DB_SHUTDOWNED && stat(BACKUP_LABEL_FILE, &st) != 0)
        lsn = control->checkPointCopy.redo + 1;
    pfree(control);
    return lsn;
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
    /* A temporary file is a flush that never completed: the map file, if any, is the last good one. */
    if (unlink(kMapTempFileName) == 0)
        ereport(LOG, (errmsg("ptrack removed leftover temporary map file \"%s\"", kMapTempFileName)));

    const int fd = OpenTransientFile(kMapFileName, O_RDONLY | PG_BINARY);
    if (fd < 0) {
        struct stat st;
        if (errno != ENOENT)
            warn_not_trusted("it could not be opened");
        else if (stat(kMapDeltaFileName, &st) == 0)
            warn_not_trusted("it is missing while \"ptrack.map.delta\" exists (was it deleted?)");
        else
            ereport(LOG, (errmsg("ptrack map file \"%s\" not found: change tracking starts now", kMapFileName)));
        map->clear();
        state->init_lsn = fresh_map_init_lsn();
        remove_file_if_exists(kMapDeltaFileName, DEBUG1);
        return;
    }
    Lsn init = 0;
    const char* reason = read_trusted_map(fd, state->geometry, map, &init);
    CloseTransientFile(fd);
    if (reason == nullptr) {
        state->init_lsn = init;
        ereport(LOG, (errmsg("ptrack loaded map file \"%s\", ptrack_init_lsn() is %X/%X", kMapFileName,
                             PTRACK_LSN_ARGS(init))));
        return;
    }
    warn_not_trusted(reason);
    map->clear();
    state->init_lsn = fresh_map_init_lsn();
    /* Never let a rejected file be read again, e.g. after a crash before the next flush. */
    remove_file_if_exists(kMapDeltaFileName, DEBUG1);
    remove_file_if_exists(kMapFileName, DEBUG1);
}

void flush_map()
{
    FlushState& fs = flush_state;
    if (fs.chunk_buffer == nullptr) {
        const uint64_t chunks = map_file_chunk_count(shared->geometry, kMapFileChunkBytes);
        fs.chunk_buffer = static_cast<uint8_t*>(MemoryContextAlloc(TopMemoryContext, kMapFileChunkBytes));
        fs.crcs = static_cast<uint32_t*>(MemoryContextAllocZero(
            TopMemoryContext, map_file_data_offset(chunks) - kMapFileHeaderBytes));
        fs.entries = static_cast<DeltaEntry*>(
            MemoryContextAlloc(TopMemoryContext, kDeltaBufferEntries * sizeof(DeltaEntry)));
    }

    instr_time start_time;
    INSTR_TIME_SET_CURRENT(start_time);
    /*
     * Every mark announced from now on stores a value >= start_lsn; the marks
     * already in progress may hold an older LSN, so let them finish before the
     * map is read.  Then start_lsn is the next delta's threshold.
     */
    const Lsn start_lsn = current_mark_lsn();
    wait_for_marks_in_progress();
    MapFileHeader header{};
    fill_flush_header(&header);

    bool full = !fs.have_threshold || fs.force_full || fs.delta_bytes > shared->geometry.region_bytes() / 4;
    uint64_t written = 0;
    if (!full) {
        bool too_big = false;
        written = append_delta(header, fs.threshold, &too_big);
        full = too_big;
    }
    if (full) {
        written = write_full_map(header);
        if (written > 0) {
            fs.base_id = header.base_id;
            fs.sequence = 0;
            fs.delta_bytes = 0;
            remove_file_if_exists(kMapDeltaFileName, DEBUG1);
        }
    }
    fs.force_full = written == 0;
    if (written > 0) {
        fs.threshold = start_lsn;
        fs.have_threshold = true;
    }

    if (log_checkpoints && written > 0) {
        instr_time elapsed;
        INSTR_TIME_SET_CURRENT(elapsed);
        INSTR_TIME_SUBTRACT(elapsed, start_time);
        ereport(LOG, (errmsg("ptrack map flush: %s, %llu bytes written in %.3f ms", full ? "full" : "delta",
                             static_cast<unsigned long long>(written), INSTR_TIME_GET_MILLISEC(elapsed))));
    }
}

}  // namespace ptrack::pg
