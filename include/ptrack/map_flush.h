/*
 * ptrack/map_flush.h -- the pure part of a map save: which bytes go where in
 * ptrack.map (the whole map) and in a batch of ptrack.map.delta (the slots
 * changed since the previous save), computed from the live map.  The writes
 * themselves go to a FlushSink: PostgreSQL's file API in the server
 * (src/pg/persist/map_save.cpp, which also opens, fsyncs, renames and
 * decides which kind of save to make), plain timed pwrite() calls in
 * bench/checkpoint/flush_bench.cpp, memory in the unit tests.  One copy of
 * the order of the writes, so that what the benchmark measures is what the
 * server does.
 *
 * Order, for both: the data first, the header that makes it valid last (a
 * torn save leaves a header that does not match, judged at startup as any
 * other damage: ptrack/map_file.h, ptrack/map_delta.h).
 *
 * INTERFACE: map_file_write(), delta_write_batch(), delta_max_entries(),
 * flush_wants_full().
 */
#ifndef PTRACK_MAP_FLUSH_H
#define PTRACK_MAP_FLUSH_H

#include "ptrack/engine_guard.h"

#include <cstddef>
#include <cstdint>

#include "ptrack/file_sink.h"
#include "ptrack/map.h"
#include "ptrack/map_delta.h"
#include "ptrack/map_file.h"

namespace ptrack {

/*
 * Writes the whole map as a map file for `header` (whose geometry is the
 * map's and whose chunk_bytes sets the CRC chunks): chunk by chunk, each
 * copied slot by slot with atomic loads into `chunk_buffer` (chunk_bytes
 * bytes; others may keep marking meanwhile), its CRC kept in `crcs`
 * (map_file_data_offset(chunks) - kMapFileHeaderBytes bytes), then the CRC
 * table, then the header.  Returns the file's size in bytes, 0 if a write
 * failed.
 */
uint64_t map_file_write(const Map& map, const MapFileHeader& header, Crc32cFn crc32c, uint8_t* chunk_buffer,
                        uint32_t* crcs, FlushSink& sink) noexcept;

/* What a delta batch is written with, besides the map. */
struct DeltaBatchPlan {
    Lsn threshold;          /* every word >= it is written (ptrack/map_delta.h) */
    uint64_t base_id;       /* of the ptrack.map the batch applies to */
    uint32_t sequence;      /* 1 for the first batch after that map */
    uint64_t batch_offset;  /* where the batch starts: the delta file's size */
    uint64_t max_entries;   /* give up beyond this many entries (delta_max_entries()) */
    DeltaEntry* buffer;     /* room for `capacity` entries */
    size_t capacity;
};

/*
 * Appends one batch of every word changed since plan.threshold
 * (delta_collect()): the entries from plan.batch_offset +
 * kDeltaBatchHeaderBytes on, then the batch header at plan.batch_offset, its
 * flags, covered LSN, init_lsn and timeline from `header`.  Returns the bytes
 * written; 0 if a write failed or, with *too_big set, when the batch would
 * hold more than plan.max_entries (the entries written so far lie past the
 * last valid batch and are never read).
 */
uint64_t delta_write_batch(const Map& map, const MapFileHeader& header, const DeltaBatchPlan& plan,
                           Crc32cFn crc32c, Crc32cUpdateFn crc32c_update, FlushSink& sink, bool* too_big) noexcept;

/* A batch larger than half the map costs more than the whole map: its entry limit. */
inline uint64_t delta_max_entries(const MapGeometry& geometry) noexcept
{
    return geometry.region_bytes() / 2 / sizeof(DeltaEntry);
}

/*
 * Whether the next save writes the whole map: when no save succeeded yet in
 * this process (there is no threshold to collect from), after a failed save
 * (its file may be torn), and when the delta file outgrew a quarter of the
 * map (loading it would cost more than reading the map).
 */
inline bool flush_wants_full(bool have_threshold, bool last_failed, uint64_t delta_bytes,
                             const MapGeometry& geometry) noexcept
{
    return !have_threshold || last_failed || delta_bytes > geometry.region_bytes() / 4;
}

}  // namespace ptrack

#endif
