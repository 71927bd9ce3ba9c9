/*
 * ptrack/map.h -- the change map: which 8 KB blocks changed since an LSN.
 *
 * This is the heart of the product and the only structure on the write path.
 * It is plain C++17 with no PostgreSQL dependency, so that it can be unit
 * tested and benchmarked on its own; src/pg/ places it in shared memory.
 *
 * Layout of the memory region (see docs/design.md section 3.3):
 *
 *   [ segment summary: summary_count x uint64 LSN ][ block slots: line_count x 64-byte line ]
 *
 * - A block (relation fork, block number) owns two LSN slots, one in each of
 *   two cache lines chosen by independent hashes of (relation fork, block / 8).
 *   The 8 consecutive blocks of a group share both lines, one slot each, so
 *   one hash serves 8 blocks and each probe touches one cache line.
 * - Marking is a lock-free atomic max of the LSN into both slots and into the
 *   segment summary slot of the block's 8 MB range.
 * - A block reads as changed since L only if BOTH slots are >= L.  A slot only
 *   ever grows, and every mark stores a value >= the LSN it was given, so a
 *   block marked with an LSN >= L always reads as changed: no false negative
 *   is possible, only false positives from hash collisions.
 * - The segment summary gives each (relation fork, 1 GB segment) a window
 *   of consecutive slots, one per 1024 blocks (8 MB) of the segment, at a
 *   hashed position; a slot holds the max LSN marked in its range (and, by
 *   collision, in other ranges).  A range whose slot is < L has no changed
 *   block and is skipped without probing; a segment whose whole window is
 *   < L is skipped without even looking at its file.  Windows of different
 *   segments may overlap: that only adds false positives.
 * - LSNs are stored rounded up to the last LSN of their granule (a power of
 *   two, in bytes of WAL).  Rounding up keeps the no-false-negative argument
 *   intact and lets a hot slot that already holds the rounded value skip the
 *   atomic write, which keeps cache lines shared between CPUs instead of
 *   bouncing.
 *
 * Nothing here allocates or throws: Map is a view over memory the caller owns.
 */
#ifndef PTRACK_MAP_H
#define PTRACK_MAP_H

#include "ptrack/engine_guard.h"

#include <cstddef>
#include <cstdint>

#include "ptrack/hash.h"
#include "ptrack/relfork.h"

namespace ptrack {

constexpr size_t kLineBytes = 64;    /* one cache line */
constexpr uint32_t kSlotsPerLine = 8; /* 8 LSN slots of 8 bytes per line */
constexpr uint32_t kSummaryRangeShift = 10; /* a summary slot covers 2^10 blocks (8 MB) of a segment */
constexpr uint32_t kSummaryRangeBlocks = uint32_t{1} << kSummaryRangeShift;

/*
 * Geometry of a map: how many lines and summary slots fit in a number of
 * bytes.  Pure arithmetic, shared by the shared-memory setup, the map file
 * (a stored map is only reused with an identical geometry) and the tests.
 */
struct MapGeometry {
    uint64_t summary_count;      /* segment summary slots (multiple of 8, >= summary_window()) */
    uint64_t line_count;         /* 64-byte lines of block slots, >= 1 */
    uint32_t blocks_per_segment; /* RELSEG_SIZE: blocks per 1 GB segment file */
    uint32_t lsn_granule_shift;  /* stored LSNs: the last of their 2^shift-byte granule */

    /*
     * The geometry that fits in `bytes` bytes (the ptrack.map_size GUC times
     * 1 MB).  About 1/64 of the bytes go to the segment summary.  Returns a
     * geometry with line_count == 0 if `bytes` is too small (< 64 KB).
     */
    static MapGeometry for_bytes(uint64_t bytes, uint32_t blocks_per_segment,
                                 uint32_t lsn_granule_shift = kDefaultGranuleShift) noexcept;

    /*
     * The smallest valid geometry: one segment's summary window (rounded up
     * to whole lines) and one line of block slots, about 1 KB.  The map of a
     * source that marks nothing in it (wal capture, whose changes go to the
     * summaries: docs/design.md section 4.6) and keeps only its covered LSN
     * and init_lsn, whatever ptrack.map_size says.
     */
    static MapGeometry smallest(uint32_t blocks_per_segment,
                                uint32_t lsn_granule_shift = kDefaultGranuleShift) noexcept;

    /* Bytes of the region this geometry describes (summary then lines). */
    uint64_t region_bytes() const noexcept
    {
        return summary_count * sizeof(uint64_t) + line_count * kLineBytes;
    }

    /* Summary slots per segment: one per kSummaryRangeBlocks blocks, rounded up. */
    uint32_t summary_window() const noexcept
    {
        return (blocks_per_segment + kSummaryRangeBlocks - 1) >> kSummaryRangeShift;
    }

    bool valid() const noexcept
    {
        return line_count > 0 && blocks_per_segment > 0 && summary_count >= summary_window();
    }

    /* 2^16 bytes of WAL: see bench/RESULTS.md for the measurement behind it. */
    static constexpr uint32_t kDefaultGranuleShift = 16;
};

inline bool operator==(const MapGeometry& a, const MapGeometry& b) noexcept
{
    return a.summary_count == b.summary_count && a.line_count == b.line_count &&
           a.blocks_per_segment == b.blocks_per_segment && a.lsn_granule_shift == b.lsn_granule_shift;
}

/* Lock-free atomic max on a 64-bit slot in (possibly shared) memory. */
inline void atomic_max_lsn(uint64_t* slot, Lsn value) noexcept
{
    uint64_t current = __atomic_load_n(slot, __ATOMIC_RELAXED);
    while (current < value) {
        /* On failure `current` is reloaded; loop until the slot is >= value. */
        if (__atomic_compare_exchange_n(slot, &current, value, true, __ATOMIC_RELEASE, __ATOMIC_RELAXED))
            return;
    }
}

inline Lsn load_lsn(const uint64_t* slot) noexcept { return __atomic_load_n(slot, __ATOMIC_ACQUIRE); }

/* The two slots of a block: indexes into the slot array (line * 8 + block % 8). */
struct SlotPair {
    uint64_t first;
    uint64_t second;
};

/*
 * A view of a map region.  Trivially copyable; does not own the memory.
 * The region must be 64-byte aligned and geometry.region_bytes() long.
 */
class Map {
public:
    Map() noexcept = default;
    Map(void* region, const MapGeometry& geometry) noexcept;

    bool attached() const noexcept { return slots_ != nullptr; }
    const MapGeometry& geometry() const noexcept { return geometry_; }

    /* Raw region, for the map file (persistence). */
    uint8_t* region() const noexcept { return reinterpret_cast<uint8_t*>(summary_); }

    /* Set every slot to 0 (a fresh, empty map). Not concurrent-safe with marks. */
    void clear() noexcept;

    /*
     * Stored form of an LSN: the last LSN of the granule that holds it
     * (lsn | (granule - 1)).  Never smaller than `lsn`, never wraps, one
     * instruction on the write path.
     */
    Lsn stored_lsn(Lsn lsn) const noexcept { return lsn | granule_mask_; }

    /*
     * Record that block `block` of `rel` was written at or before WAL position
     * `lsn`.  The caller passes an LSN never smaller than that of the change
     * being written.  Lock-free, allocation-free, never throws.
     */
    void mark(const RelFork& rel, BlockNumber block, Lsn lsn) noexcept { mark_hashed(hash_rel(rel), block, lsn); }

    /* mark() with the relation's hash_rel() computed (or cached) by the caller. */
    void mark_hashed(uint64_t rel_hash, BlockNumber block, Lsn lsn) noexcept
    {
        mark_in_segment(segment_ref(rel_hash, block / geometry_.blocks_per_segment), block, lsn);
    }

    /*
     * A writer's handle on one segment of one relation fork: the relation's
     * hash_rel() and the segment's summary window.  The write path keeps the
     * handles of the segments it wrote last (src/pg/capture/capture.h), so that a
     * mark in the same segment skips the relation hash and the summary hash.
     * Valid for as long as the map's memory is.
     */
    struct SegmentRef {
        uint64_t rel_hash;
        uint64_t* summary_window; /* the segment's first summary slot */
        BlockNumber first_block;  /* segno * blocks_per_segment */
        uint32_t segno;
    };

    SegmentRef segment_ref(uint64_t rel_hash, uint32_t segno) const noexcept
    {
        return SegmentRef{rel_hash, &summary_[summary_window_hashed(rel_hash, segno)],
                          segno * geometry_.blocks_per_segment, segno};
    }

    /* The summary slot of `block` (counted from the relation fork's first block) of segment `seg`. */
    static uint64_t* summary_slot(const SegmentRef& seg, BlockNumber block) noexcept
    {
        return &seg.summary_window[(block - seg.first_block) >> kSummaryRangeShift];
    }

    /*
     * mark() for a block of the segment `seg` refers to: `block` counts from
     * the relation fork's first block, and block / blocks_per_segment must be
     * seg.segno.
     */
    void mark_in_segment(const SegmentRef& seg, BlockNumber block, Lsn lsn) noexcept
    {
        const Lsn value = stored_lsn(lsn);
        atomic_max_lsn(summary_slot(seg, block), value);
        const SlotPair s = slots_of_hashed(seg.rel_hash, block);
        atomic_max_lsn(&slots_[s.first], value);
        atomic_max_lsn(&slots_[s.second], value);
    }

    /* True if `block` of `rel` may have changed at or after `since` (both probes >= since). */
    bool block_changed(const RelFork& rel, BlockNumber block, Lsn since) const noexcept
    {
        const SlotPair s = slots_of(rel, block);
        return load_lsn(&slots_[s.first]) >= since && load_lsn(&slots_[s.second]) >= since;
    }

    /*
     * False only if no block of segment `segno` of `rel` changed at or after
     * `since`: every slot of the segment's summary window is < since.
     */
    bool segment_may_have_changed(const RelFork& rel, uint32_t segno, Lsn since) const noexcept;

    /*
     * The changed blocks of one segment file: sets bit b of `pagemap` (byte
     * b / 8, mask 1 << (b % 8)) for every block b in [0, nblocks) of segment
     * `segno` that may have changed at or after `since`, where b counts from
     * the segment's first block.  `pagemap` must hold (nblocks + 7) / 8 bytes;
     * it is fully overwritten.  Returns the number of bits set.  With
     * `use_summary`, each unchanged 8 MB range is answered from its summary
     * slot without probing (false only for benchmarks that measure the
     * probing).
     */
    uint32_t segment_pagemap(const RelFork& rel, uint32_t segno, uint32_t nblocks, Lsn since,
                             uint8_t* pagemap, bool use_summary = true) const noexcept;

    /* The slot indexes of a block (exposed for tests and the false-positive benchmark). */
    SlotPair slots_of(const RelFork& rel, BlockNumber block) const noexcept
    {
        return slots_of_hashed(hash_rel(rel), block);
    }
    /* The summary slot of a block (`block` counts from the relation fork's first block). */
    uint64_t summary_slot_index(const RelFork& rel, BlockNumber block) const noexcept
    {
        const SegmentRef seg = segment_ref(hash_rel(rel), block / geometry_.blocks_per_segment);
        return static_cast<uint64_t>(summary_slot(seg, block) - summary_);
    }
    SlotPair slots_of_hashed(uint64_t rel_hash, BlockNumber block) const noexcept;
    /* The first summary slot of a segment's window. */
    uint64_t summary_window_hashed(uint64_t rel_hash, uint32_t segno) const noexcept;

    /* Direct slot access, for persistence and tests. */
    uint64_t* slots() const noexcept { return slots_; }
    uint64_t* summary() const noexcept { return summary_; }

private:
    /* segment_pagemap() for block groups [g0, g1) of a segment (nblocks long), prefetching ahead. */
    uint32_t probe_groups(uint64_t rel_hash, BlockNumber first_block, uint32_t g0, uint32_t g1, uint32_t nblocks,
                          Lsn since, uint8_t* pagemap) const noexcept;

    MapGeometry geometry_{};
    Lsn granule_mask_ = 0; /* 2^lsn_granule_shift - 1 */
    uint64_t* summary_ = nullptr;
    uint64_t* slots_ = nullptr;
};

/*
 * Placement.  One hash of (relation, block group) places both probes:
 * fastrange() of the hash gives the first line (it depends mostly on the
 * hash's high bits), fastrange() of the hash rotated by 32 bits gives the
 * second (mostly its low bits), offset so that it never lands on the first
 * line when there is more than one.  Both use slot block % 8 of their line.
 */
inline SlotPair Map::slots_of_hashed(uint64_t rel_hash, BlockNumber block) const noexcept
{
    const uint64_t group = block / kSlotsPerLine;
    const uint64_t n = geometry_.line_count;
    const uint64_t h = hash_unit(rel_hash, group, kSeedFirstProbe);
    const uint64_t first = fastrange(h, n);
    uint64_t second = first;
    if (n > 1) {
        second = first + 1 + fastrange((h << 32) | (h >> 32), n - 1);
        if (second >= n)
            second -= n;
    }
    const uint64_t slot = block % kSlotsPerLine;
    return SlotPair{first * kSlotsPerLine + slot, second * kSlotsPerLine + slot};
}

/* A window lies wholly inside the summary: its first slot is in [0, summary_count - window]. */
inline uint64_t Map::summary_window_hashed(uint64_t rel_hash, uint32_t segno) const noexcept
{
    return fastrange(hash_unit(rel_hash, segno, kSeedSummary),
                     geometry_.summary_count - geometry_.summary_window() + 1);
}

}  // namespace ptrack

#endif
