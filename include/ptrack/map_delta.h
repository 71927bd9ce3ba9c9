/*
 * ptrack/map_delta.h -- incremental flushes: only the slots that changed since
 * the previous flush are written, as a batch appended to ptrack.map.delta.
 *
 * Why not rewrite changed chunks of ptrack.map in place: blocks are placed by
 * hashing, so the slots changed between two checkpoints are scattered
 * uniformly over the map; with 1% of the slots changed, every 64 KB chunk of
 * the map holds a changed slot, and chunk rewriting writes the whole map.  A
 * batch of (word index, value) pairs writes 16 bytes per changed slot: 2% of
 * the map's bytes when 1% of its slots changed.
 *
 * Which slots changed: slots only grow.  The previous flush read `threshold`
 * (the current mark LSN), then waited for the marks in progress to store
 * their values, then copied the map; every mark that could still store
 * after that reads its LSN after the threshold was read, so it stores a
 * value >= threshold (the announcement protocol in src/pg/capture/capture.h).  So
 * every slot changed since the previous copy now holds a value >= threshold;
 * the batch is all words >= threshold (a few may repeat the previous batch:
 * harmless, values are applied with max).
 *
 * Layout of ptrack.map.delta: batches back to back, each
 *   [ 64-byte batch header, CRC-32C of its first 60 bytes in the last 4 ]
 *   [ entry_count x { uint64 word index into the region, uint64 value } ]
 * The header carries the CRC of the entries, the base file's base_id (a
 * delta only applies to the ptrack.map it was written against), a sequence
 * number, and the covered LSN / init_lsn / flags of that flush.  Reading
 * stops at the first batch that is short, has a bad CRC, another base_id or
 * an unexpected sequence number: a torn append only loses the flush it
 * belonged to, which the startup trust rule on the redo LSN then judges.
 */
#ifndef PTRACK_MAP_DELTA_H
#define PTRACK_MAP_DELTA_H

#include "ptrack/engine_guard.h"

#include <cstddef>
#include <cstdint>

#include "ptrack/map.h"
#include "ptrack/map_file.h"

namespace ptrack {

constexpr const char* kMapDeltaFileName = "ptrack.map.delta";
constexpr size_t kDeltaBatchHeaderBytes = 64;

struct DeltaEntry {
    uint64_t word;  /* index of the 8-byte word in the map region (summary first, then slots) */
    uint64_t value; /* the word's value */
};
static_assert(sizeof(DeltaEntry) == 16, "delta entries are written as they are in memory");

struct DeltaBatchHeader {
    uint64_t base_id;        /* MapFileHeader::base_id of the ptrack.map this applies to */
    uint32_t sequence;       /* 1 for the first batch after the base, then 2, 3, ... */
    uint32_t flags;          /* MapFileFlags of this flush */
    uint64_t entry_count;
    Lsn covered_lsn;         /* as in MapFileHeader, for this flush */
    Lsn init_lsn;
    uint32_t timeline;
    uint32_t entries_crc;    /* CRC-32C of the entries */
};

/* Encodes `header` into kDeltaBatchHeaderBytes bytes at `out`. */
void delta_encode_batch_header(const DeltaBatchHeader& header, Crc32cFn crc32c, uint8_t* out) noexcept;

/* Decodes a batch header; false if its magic or CRC is wrong. */
bool delta_decode_batch_header(const uint8_t* in, Crc32cFn crc32c, DeltaBatchHeader* out) noexcept;

/*
 * Collects, from word `*next_word` on, the words of `map`'s region whose
 * value is >= `threshold`, into `out` (at most `capacity` entries).  Returns
 * the number collected and advances `*next_word`; the scan is complete when
 * *next_word == the region's word count.  Reads with atomic loads (backends
 * keep marking).
 */
size_t delta_collect(const Map& map, Lsn threshold, uint64_t* next_word, DeltaEntry* out, size_t capacity) noexcept;

/* Applies entries to `map` with atomic max; false if an entry's word is out of range. */
bool delta_apply(const Map& map, const DeltaEntry* entries, size_t count) noexcept;

/* Number of 8-byte words of a map region. */
inline uint64_t region_words(const MapGeometry& geometry) noexcept
{
    return geometry.region_bytes() / sizeof(uint64_t);
}

/*
 * Makes chunk `chunk` of the region conservative: every word in it is raised
 * to at least `lsn`, an LSN no smaller than any change the damaged chunk could
 * have recorded.  Every block with a slot there then reads as changed since
 * any L <= lsn (false positives, never a false negative).
 */
void make_chunk_conservative(const Map& map, uint32_t chunk_bytes, uint64_t chunk, Lsn lsn) noexcept;

}  // namespace ptrack

#endif
