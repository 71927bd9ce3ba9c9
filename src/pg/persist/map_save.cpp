/*
 * map_save.cpp -- saving the map: called by whichever process the capture
 * source makes responsible (capture_source.h): the checkpointer at the end of
 * every sync phase (hooks), or the WAL follower (wal).  Always the same
 * process within a server run, so what is remembered between saves lives in
 * that process (SaveState).
 *
 * The first save of a process writes the whole map (ptrack.map.tmp, fsync,
 * durable rename to ptrack.map, with a new base_id, in the source's folder:
 * state_files.h); the following ones
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

#include "core/boundary.h"
#include "persist/map_io.h"
#include "persist/map_persistence.h"
#include "persist/state_files.h"
#include "compat/compat.h"
#include "ptrack/map_delta.h"
#include "ptrack/map_file.h"
#include "ptrack/map_flush.h"

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
PTRACK_FRAME_SAFE(SaveState, MapFileHeader, DeltaEntry, DeltaBatchPlan, FdSink);
PTRACK_ENGINE_NOEXCEPT(&MapGeometry::region_bytes, &placement_fingerprint, &map_file_chunk_count,
                       &map_file_data_offset, &map_file_write, &delta_write_batch, &delta_max_entries,
                       &flush_wants_full);
SaveState save_state;
constexpr size_t kDeltaBufferEntries = 64 * 1024;

void fill_header(const SavePoint& point, MapFileHeader* header)
{
    header->version = kMapFileVersion;
    header->system_identifier = GetSystemIdentifier();
    header->server_major = kServerMajor;
    header->data_checksum_version = DataChecksumsEnabled() ? PG_DATA_CHECKSUM_VERSION : 0;
    header->geometry = shared->geometry;
    header->placement = placement_fingerprint(shared->geometry);
    header->chunk_bytes = kMapFileChunkBytes;
    header->flags = (fullPageWrites ? kFlagFullPageWrites : 0u) |
                    (wal_level >= WAL_LEVEL_REPLICA ? kFlagWalLevelReplica : 0u);
    header->init_lsn = init_lsn();
    header->covered_lsn = point.covered_lsn;
    header->source = persist_source->id;
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
    const char* temp = state_file(StateFile::kMapTemp);
    const int fd = OpenTransientFile(temp, O_RDWR | O_CREAT | O_TRUNC | PG_BINARY);
    if (fd < 0) {
        warn_save_failed("its map", "create file", temp);
        return 0;
    }
    FdSink sink(fd);
    const uint64_t bytes = map_file_write(map, header, crc32c, ss.chunk_buffer, ss.crcs, sink);
    bool ok = bytes != 0 && pg_fsync(fd) == 0;
    if (!ok)
        warn_save_failed("its map", "write file", temp);
    if (CloseTransientFile(fd) != 0 && ok) {
        warn_save_failed("its map", "close file", temp);
        ok = false;
    }
    if (!ok || !rename_for_save(temp, state_file(StateFile::kMap), "its map")) {
        /* A partial map must not wait for the next successful save (a backup would copy it). */
        discard_temp_file(temp);
        return 0;
    }
    return bytes;
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
    const char* delta = state_file(StateFile::kMapDelta);
    const int fd = OpenTransientFile(delta, O_WRONLY | O_CREAT | (first ? O_TRUNC : 0) | PG_BINARY);
    if (fd < 0) {
        warn_save_failed("its map", "open file", delta);
        return 0;
    }
    DeltaBatchPlan plan{};
    plan.threshold = threshold;
    plan.base_id = ss.base_id;
    plan.sequence = ss.sequence + 1;
    plan.batch_offset = ss.delta_bytes;
    plan.max_entries = delta_max_entries(header.geometry);
    plan.buffer = ss.entries;
    plan.capacity = kDeltaBufferEntries;
    FdSink sink(fd);
    const uint64_t written = delta_write_batch(map, header, plan, crc32c, crc32c_update, sink, too_big);
    if (*too_big) {
        CloseTransientFile(fd);
        return 0;
    }
    bool ok = written != 0 && pg_fsync(fd) == 0;
    if (!ok)
        warn_save_failed("its map", "write file", delta);
    if (CloseTransientFile(fd) != 0 && ok) {
        warn_save_failed("its map", "close file", delta);
        ok = false;
    }
    /* A new file's directory entry must be durable too. */
    if (ok && first && !fsync_state_folder_for_save("its map"))
        ok = false;
    if (!ok)
        return 0;
    ss.sequence++;
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
    (void) stats->sequence.add(1, Order::kRelaxed);
    atomic_fence(Order::kRelease); /* the odd sequence is visible before any field changes */
}

void save_stats_end(SaveStats* stats) noexcept
{
    (void) stats->sequence.add(1, Order::kRelease);
}

}  // namespace

void save_stats_record_success(Lsn covered_lsn, uint64_t bytes, uint64_t duration_us, bool full) noexcept
{
    SaveStats* stats = &shared->save_stats;
    const TimestampTz now = GetCurrentTimestamp();
    save_stats_begin(stats);
    stats->saves.store(stats->saves.load(Order::kRelaxed) + 1, Order::kRelaxed);
    stats->lsn.store(covered_lsn, Order::kRelaxed);
    stats->time.store(now, Order::kRelaxed);
    stats->bytes.store(bytes, Order::kRelaxed);
    stats->duration_us.store(duration_us, Order::kRelaxed);
    stats->full.store(uint64_t{full}, Order::kRelaxed);
    save_stats_end(stats);
}

void save_stats_record_failure() noexcept
{
    SaveStats* stats = &shared->save_stats;
    save_stats_begin(stats);
    stats->failures.store(stats->failures.load(Order::kRelaxed) + 1, Order::kRelaxed);
    save_stats_end(stats);
}

void save_stats_read(SaveRecord* out) noexcept
{
    const SaveStats* stats = &shared->save_stats;
    for (;;) {
        const uint64_t before = stats->sequence.load(Order::kAcquire);
        if ((before & 1) != 0) {
            pg_spin_delay();
            continue;
        }
        out->saves = stats->saves.load(Order::kRelaxed);
        out->failures = stats->failures.load(Order::kRelaxed);
        out->lsn = stats->lsn.load(Order::kRelaxed);
        out->time = stats->time.load(Order::kRelaxed);
        out->bytes = stats->bytes.load(Order::kRelaxed);
        out->duration_us = stats->duration_us.load(Order::kRelaxed);
        out->full = stats->full.load(Order::kRelaxed) != 0;
        atomic_fence(Order::kAcquire); /* the copies are done before the sequence is read again */
        if (stats->sequence.load(Order::kRelaxed) == before)
            return;
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

    bool full = flush_wants_full(ss.have_threshold, ss.force_full, ss.delta_bytes, shared->geometry);
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
            remove_file_if_exists(state_file(StateFile::kMapDelta), DEBUG1);
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
