/*
 * map_save.cpp -- saving the map: called by whichever process the capture
 * source makes responsible (capture_source.h): the checkpointer at the end of
 * every sync phase (hooks), or the WAL follower (wal).  Always the same
 * process within a server run, so what is remembered between saves lives in
 * that process (SaveState).
 *
 * The first save of a process writes the whole map (ptrack.map.tmp, fsync,
 * durable rename to ptrack.map, with a new base_id); the following ones
 * append only the slots changed since the previous save to ptrack.map.delta
 * (ptrack/map_delta.h), until the delta file outgrows a quarter of the map,
 * when the next save writes the whole map again.
 *
 * A save must never fail the checkpoint or stop the follower: I/O failures
 * are WARNINGs naming ptrack and the consequence, and the next save writes
 * the whole map.  A failed full save removes its partial ptrack.map.tmp at
 * once.  A file left stale is judged at startup like any other.
 */
extern "C" {
#include "postgres.h"

#include <fcntl.h>

#include "access/xlog.h"
#include "access/xlogrecovery.h"
#include "catalog/pg_control.h"
#include "miscadmin.h"
#include "portability/instr_time.h"
#include "port/pg_crc32c.h"
#include "storage/bufpage.h"
#include "storage/fd.h"
#include "port/atomics.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
}

#include "boundary.h"
#include "capture_source.h"
#include "map_io.h"
#include "map_persistence.h"
#include "ptrack/map_delta.h"
#include "ptrack/map_file.h"

namespace ptrack::pg {

namespace {

/* What the saving process remembers between saves. */
struct SaveState {
    bool have_threshold;  /* a save succeeded in this process */
    Lsn threshold;        /* SavePoint::next_threshold of that save */
    uint64_t base_id;     /* of the ptrack.map last written */
    uint32_t sequence;    /* batches appended to ptrack.map.delta since */
    uint64_t delta_bytes; /* size of ptrack.map.delta */
    bool force_full;      /* the last save failed: write the whole map next time */
    uint8_t* chunk_buffer;
    uint32_t* crcs;
    DeltaEntry* entries;
};
PTRACK_FRAME_SAFE(SaveState, MapFileHeader, DeltaBatchHeader, DeltaEntry);
PTRACK_ENGINE_NOEXCEPT(&Map::region, &MapGeometry::region_bytes, &load_lsn, &region_words, &placement_fingerprint,
                       &map_file_chunk_count, &map_file_data_offset, &map_file_chunk_length, &map_file_bytes,
                       &map_file_encode_header, &delta_encode_batch_header, &delta_collect);
SaveState save_state;
constexpr size_t kDeltaBufferEntries = 64 * 1024;

void fill_header(const SavePoint& point, MapFileHeader* header)
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
    header->covered_lsn = point.covered_lsn;
    header->source = capture_source;
    TimeLineID tli = 0;
    if (RecoveryInProgress())
        (void) GetXLogReplayRecPtr(&tli);
    else
        tli = GetWALInsertionTimeLine();
    header->timeline = tli;
    if (!pg_strong_random(&header->base_id, sizeof(header->base_id)))
        header->base_id = static_cast<uint64_t>(GetCurrentTimestamp()) ^ header->covered_lsn;
}

/* Writes the whole map to ptrack.map; returns bytes written, 0 on failure (WARNING logged). */
uint64_t write_full_map(const MapFileHeader& header)
{
    SaveState& ss = save_state;
    const MapGeometry& geometry = header.geometry;
    const uint64_t chunks = map_file_chunk_count(geometry, kMapFileChunkBytes);
    const uint64_t data_offset = map_file_data_offset(chunks);

    const int fd = OpenTransientFile(kMapTempFileName, O_RDWR | O_CREAT | O_TRUNC | PG_BINARY);
    if (fd < 0) {
        warn_save_failed("its map", "create", kMapTempFileName);
        return 0;
    }
    bool ok = true;
    for (uint64_t c = 0; c < chunks && ok; ++c) {
        /* Copy slot by slot with atomic loads: others may keep marking meanwhile. */
        const uint64_t len = map_file_chunk_length(geometry, kMapFileChunkBytes, c);
        const auto* src = reinterpret_cast<const uint64_t*>(map.region() + c * kMapFileChunkBytes);
        auto* dst = reinterpret_cast<uint64_t*>(ss.chunk_buffer);
        for (uint64_t i = 0; i < len / sizeof(uint64_t); ++i)
            dst[i] = load_lsn(&src[i]);
        ss.crcs[c] = crc32c(ss.chunk_buffer, len);
        ok = write_at(fd, ss.chunk_buffer, len, data_offset + c * kMapFileChunkBytes);
    }
    uint8_t header_bytes[kMapFileHeaderBytes];
    map_file_encode_header(header, crc32c, header_bytes);
    ok = ok && write_at(fd, ss.crcs, data_offset - kMapFileHeaderBytes, kMapFileHeaderBytes) &&
         write_at(fd, header_bytes, sizeof(header_bytes), 0) && pg_fsync(fd) == 0;
    if (!ok)
        warn_save_failed("its map", "write", kMapTempFileName);
    if (CloseTransientFile(fd) != 0 && ok) {
        warn_save_failed("its map", "close", kMapTempFileName);
        ok = false;
    }
    if (!ok || !rename_for_save(kMapTempFileName, kMapFileName, "its map")) {
        /* A partial map must not wait for the next successful save (a backup would copy it). */
        discard_temp_file(kMapTempFileName);
        return 0;
    }
    return map_file_bytes(geometry, kMapFileChunkBytes);
}

/*
 * Appends the words changed since `threshold` to ptrack.map.delta; bytes
 * written, 0 on failure.  Gives up with *too_big set when the batch would
 * outgrow half the map (a full save is then cheaper); the entries written so
 * far lie past the last valid batch and are never read.
 */
uint64_t append_delta(const MapFileHeader& header, Lsn threshold, bool* too_big)
{
    *too_big = false;
    SaveState& ss = save_state;
    const bool first = ss.sequence == 0;
    const int fd = OpenTransientFile(kMapDeltaFileName, O_WRONLY | O_CREAT | (first ? O_TRUNC : 0) | PG_BINARY);
    if (fd < 0) {
        warn_save_failed("its map", "open", kMapDeltaFileName);
        return 0;
    }
    const uint64_t batch_offset = ss.delta_bytes;
    const uint64_t entries_offset = batch_offset + kDeltaBatchHeaderBytes;
    uint64_t next_word = 0;
    uint64_t count = 0;
    pg_crc32c crc;
    INIT_CRC32C(crc);
    bool ok = true;
    const uint64_t max_entries = header.geometry.region_bytes() / 2 / sizeof(DeltaEntry);
    while (ok && next_word < region_words(header.geometry)) {
        const size_t n = delta_collect(map, threshold, &next_word, ss.entries, kDeltaBufferEntries);
        if (count + n > max_entries) {
            *too_big = true;
            CloseTransientFile(fd);
            return 0;
        }
        COMP_CRC32C(crc, ss.entries, n * sizeof(DeltaEntry));
        ok = write_at(fd, ss.entries, n * sizeof(DeltaEntry), entries_offset + count * sizeof(DeltaEntry));
        count += n;
    }
    FIN_CRC32C(crc);

    DeltaBatchHeader batch{};
    batch.base_id = ss.base_id;
    batch.sequence = ss.sequence + 1;
    batch.flags = header.flags;
    batch.entry_count = count;
    batch.covered_lsn = header.covered_lsn;
    batch.init_lsn = header.init_lsn;
    batch.timeline = header.timeline;
    batch.entries_crc = crc;
    uint8_t raw[kDeltaBatchHeaderBytes];
    delta_encode_batch_header(batch, crc32c, raw);
    ok = ok && write_at(fd, raw, sizeof(raw), batch_offset) && pg_fsync(fd) == 0;
    if (!ok)
        warn_save_failed("its map", "write", kMapDeltaFileName);
    if (CloseTransientFile(fd) != 0 && ok) {
        warn_save_failed("its map", "close", kMapDeltaFileName);
        ok = false;
    }
    /* A new file's directory entry must be durable too. */
    if (ok && first && !fsync_data_directory_for_save("its map"))
        ok = false;
    if (!ok)
        return 0;
    ss.sequence++;
    const uint64_t written = kDeltaBatchHeaderBytes + count * sizeof(DeltaEntry);
    ss.delta_bytes += written;
    return written;
}

void allocate_buffers()
{
    SaveState& ss = save_state;
    if (ss.chunk_buffer != nullptr)
        return;
    const uint64_t chunks = map_file_chunk_count(shared->geometry, kMapFileChunkBytes);
    ss.chunk_buffer = static_cast<uint8_t*>(MemoryContextAlloc(TopMemoryContext, kMapFileChunkBytes));
    ss.crcs = static_cast<uint32_t*>(
        MemoryContextAllocZero(TopMemoryContext, map_file_data_offset(chunks) - kMapFileHeaderBytes));
    ss.entries =
        static_cast<DeltaEntry*>(MemoryContextAlloc(TopMemoryContext, kDeltaBufferEntries * sizeof(DeltaEntry)));
}

/* The sequence lock's writer side (shared_state.h): one saving process. */
void save_stats_begin(SaveStats* stats) noexcept
{
    __atomic_add_fetch(&stats->sequence, 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE); /* the odd sequence is visible before any field changes */
}

void save_stats_end(SaveStats* stats) noexcept
{
    __atomic_add_fetch(&stats->sequence, 1, __ATOMIC_RELEASE);
}

}  // namespace

void save_stats_record_success(Lsn covered_lsn, uint64_t bytes, uint64_t duration_us, bool full) noexcept
{
    SaveStats* stats = &shared->save_stats;
    const TimestampTz now = GetCurrentTimestamp();
    save_stats_begin(stats);
    __atomic_store_n(&stats->saves, stats->saves + 1, __ATOMIC_RELAXED);
    __atomic_store_n(&stats->lsn, covered_lsn, __ATOMIC_RELAXED);
    __atomic_store_n(&stats->time, now, __ATOMIC_RELAXED);
    __atomic_store_n(&stats->bytes, bytes, __ATOMIC_RELAXED);
    __atomic_store_n(&stats->duration_us, duration_us, __ATOMIC_RELAXED);
    __atomic_store_n(&stats->full, uint64_t{full}, __ATOMIC_RELAXED);
    save_stats_end(stats);
}

void save_stats_record_failure() noexcept
{
    SaveStats* stats = &shared->save_stats;
    save_stats_begin(stats);
    __atomic_store_n(&stats->failures, stats->failures + 1, __ATOMIC_RELAXED);
    save_stats_end(stats);
}

void save_stats_read(SaveStats* out) noexcept
{
    const SaveStats* stats = &shared->save_stats;
    for (;;) {
        const uint64_t before = __atomic_load_n(&stats->sequence, __ATOMIC_ACQUIRE);
        if ((before & 1) != 0) {
            pg_spin_delay();
            continue;
        }
        out->saves = __atomic_load_n(&stats->saves, __ATOMIC_RELAXED);
        out->failures = __atomic_load_n(&stats->failures, __ATOMIC_RELAXED);
        out->lsn = __atomic_load_n(&stats->lsn, __ATOMIC_RELAXED);
        out->time = __atomic_load_n(&stats->time, __ATOMIC_RELAXED);
        out->bytes = __atomic_load_n(&stats->bytes, __ATOMIC_RELAXED);
        out->duration_us = __atomic_load_n(&stats->duration_us, __ATOMIC_RELAXED);
        out->full = __atomic_load_n(&stats->full, __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_ACQUIRE); /* the copies are done before the sequence is read again */
        if (__atomic_load_n(&stats->sequence, __ATOMIC_RELAXED) == before) {
            out->sequence = before;
            return;
        }
    }
}

bool flush_map(const SavePoint& point)
{
    SaveState& ss = save_state;
    allocate_buffers();
    instr_time start_time;
    INSTR_TIME_SET_CURRENT(start_time);
    MapFileHeader header{};
    fill_header(point, &header);

    bool full = !ss.have_threshold || ss.force_full || ss.delta_bytes > shared->geometry.region_bytes() / 4;
    uint64_t written = 0;
    if (!full) {
        bool too_big = false;
        written = append_delta(header, ss.threshold, &too_big);
        full = too_big;
    }
    if (full) {
        written = write_full_map(header);
        if (written > 0) {
            ss.base_id = header.base_id;
            ss.sequence = 0;
            ss.delta_bytes = 0;
            remove_file_if_exists(kMapDeltaFileName, DEBUG1);
        }
    }
    ss.force_full = written == 0;
    if (written > 0) {
        ss.threshold = point.next_threshold;
        ss.have_threshold = true;
    }

    instr_time elapsed;
    INSTR_TIME_SET_CURRENT(elapsed);
    INSTR_TIME_SUBTRACT(elapsed, start_time);
    if (written > 0)
        save_stats_record_success(point.covered_lsn, written, INSTR_TIME_GET_MICROSEC(elapsed), full);
    else
        save_stats_record_failure();
    if (log_checkpoints && written > 0)
        ereport(LOG, (errmsg("ptrack map flush: %s, %llu bytes written in %.3f ms, complete up to %X/%X",
                             full ? "full" : "delta", static_cast<unsigned long long>(written),
                             INSTR_TIME_GET_MILLISEC(elapsed), PTRACK_LSN_ARGS(point.covered_lsn))));
    return written > 0;
}

}  // namespace ptrack::pg
