/*
 * t/unit/map_placement_test.cpp -- proves where Map::slots_of and
 * Map::summary_slot_index put a block (docs/design.md section 3.3):
 *
 * - a block's two slots are in two different cache lines whenever the map has
 *   more than one line, and both are slot block % 8 of their line;
 * - the 8 blocks of an aligned group share both lines (one hash per group);
 * - every index is inside the slot array / the summary;
 * - the hash really depends on the tablespace, database, relfilenode, fork
 *   and group: changing any one of them moves the first line to a line that
 *   equals the old one only about 1/line_count of the time (no systematic
 *   collision such as fork 0 and fork 1 of a relation sharing lines);
 * - realistic neighbouring keys (consecutive relfilenodes, all forks, a few
 *   tablespaces and databases) each get their own pair of lines on a big map;
 * - lines are used about uniformly, and the two probes are independent, also
 *   at the line counts of 64 MB to 64 GB maps (both come from one hash);
 * - the write path's pre-hashed variants (hash_rel + mark_hashed /
 *   slots_of_hashed / segment_ref) place blocks exactly like the
 *   read path's slots_of / summary_slot_index / mark.
 */
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "map_fixture.h"
#include "ptrack/map.h"

using ptrack::BlockNumber;
using ptrack::Lsn;
using ptrack::Map;
using ptrack::MapGeometry;
using ptrack::RelFork;
using ptrack::SlotPair;
using ptrack_test::kMB;
using ptrack_test::kRelSegSize;
using ptrack_test::OwnedMap;

namespace {

constexpr uint64_t kPerLine = ptrack::kSlotsPerLine;

RelFork random_rel(std::mt19937_64& rng)
{
    std::uniform_int_distribution<uint32_t> oid(1, UINT32_MAX);
    std::uniform_int_distribution<int> fork(0, ptrack::kMaxFork);
    return RelFork{oid(rng), oid(rng), oid(rng), static_cast<uint8_t>(fork(rng))};
}

/* A hand-made geometry with a given number of lines (for_bytes never gives fewer than 1008). */
MapGeometry lines_geometry(uint64_t lines)
{
    return MapGeometry{8, lines, kRelSegSize, 0};
}

/*
 * Fraction of random keys whose first line stays the same when `change`
 * is applied to the key.  `change` alters one field of (rel, block).
 */
template <typename Change>
double same_first_line_fraction(const Map& map, int samples, Change change)
{
    std::mt19937_64 rng(7);
    std::uniform_int_distribution<BlockNumber> block(0, UINT32_MAX - 1);
    int same = 0;
    for (int i = 0; i < samples; ++i) {
        RelFork rel = random_rel(rng);
        BlockNumber b = block(rng);
        const uint64_t before = map.slots_of(rel, b).first / kPerLine;
        change(&rel, &b, rng);
        const uint64_t after = map.slots_of(rel, b).first / kPerLine;
        same += before == after;
    }
    return static_cast<double>(same) / samples;
}

}  // namespace

TEST(MapPlacement, TwoDifferentLinesSameSlot)
{
    OwnedMap owned(OwnedMap::geometry(1 * kMB));
    const Map& map = owned.map();
    std::mt19937_64 rng(1);
    std::uniform_int_distribution<BlockNumber> block(0, UINT32_MAX - 1);
    for (int i = 0; i < 200000; ++i) {
        const RelFork rel = random_rel(rng);
        const BlockNumber b = block(rng);
        const SlotPair s = map.slots_of(rel, b);
        ASSERT_LT(s.first, owned.slot_count());
        ASSERT_LT(s.second, owned.slot_count());
        ASSERT_NE(s.first / kPerLine, s.second / kPerLine) << "both probes in one line";
        ASSERT_EQ(s.first % kPerLine, b % kPerLine);
        ASSERT_EQ(s.second % kPerLine, b % kPerLine);
    }
}

TEST(MapPlacement, TwoLinesAlwaysDistinctEvenWhenTiny)
{
    /* With 2 lines the second probe must be the other line, every time. */
    OwnedMap owned(lines_geometry(2));
    const Map& map = owned.map();
    std::mt19937_64 rng(2);
    int first_in_line0 = 0;
    for (int i = 0; i < 10000; ++i) {
        const RelFork rel = random_rel(rng);
        const BlockNumber b = static_cast<BlockNumber>(rng());
        const SlotPair s = map.slots_of(rel, b);
        ASSERT_LT(s.first, 16u);
        ASSERT_LT(s.second, 16u);
        ASSERT_EQ(s.first / kPerLine + s.second / kPerLine, 1u);
        first_in_line0 += s.first / kPerLine == 0;
    }
    /* And the first line is not always the same one. */
    EXPECT_GT(first_in_line0, 4000);
    EXPECT_LT(first_in_line0, 6000);
}

TEST(MapPlacement, SingleLineUsesItTwice)
{
    /* Documented degenerate case: with one line both probes are that line. */
    OwnedMap owned(lines_geometry(1));
    const Map& map = owned.map();
    for (BlockNumber b = 0; b < 64; ++b) {
        const SlotPair s = map.slots_of(ptrack_test::heap_rel(), b);
        EXPECT_EQ(s.first, uint64_t{b % 8});
        EXPECT_EQ(s.second, uint64_t{b % 8});
    }
}

TEST(MapPlacement, GroupOfEightSharesBothLines)
{
    OwnedMap owned(OwnedMap::geometry(1 * kMB));
    const Map& map = owned.map();
    std::mt19937_64 rng(3);
    int group_changes = 0;
    for (int i = 0; i < 20000; ++i) {
        const RelFork rel = random_rel(rng);
        const BlockNumber base = static_cast<BlockNumber>(rng() % (UINT32_MAX / 8)) * 8;
        const SlotPair s0 = map.slots_of(rel, base);
        for (BlockNumber j = 1; j < 8; ++j) {
            const SlotPair s = map.slots_of(rel, base + j);
            ASSERT_EQ(s.first, s0.first + j);
            ASSERT_EQ(s.second, s0.second + j);
        }
        /* The next group is hashed on its own. */
        const SlotPair next = map.slots_of(rel, base + 8);
        group_changes += next.first / kPerLine != s0.first / kPerLine;
    }
    EXPECT_GT(group_changes, 19900);
}

TEST(MapPlacement, SummaryIndexInRange)
{
    OwnedMap owned(OwnedMap::geometry(1 * kMB));
    const Map& map = owned.map();
    const uint64_t n = map.geometry().summary_count;
    const uint32_t window = map.geometry().summary_window();
    ASSERT_EQ(window, kRelSegSize / ptrack::kSummaryRangeBlocks);
    std::mt19937_64 rng(4);
    std::vector<int> hits(n, 0);
    const int samples = 400000;
    for (int i = 0; i < samples; ++i) {
        const RelFork rel = random_rel(rng);
        const BlockNumber block = static_cast<BlockNumber>(rng());
        const uint64_t idx = map.summary_slot_index(rel, block);
        ASSERT_LT(idx, n);
        /* The slot is the block's 8 MB range within its segment's window, which lies inside the summary. */
        const uint64_t first = map.summary_window_hashed(ptrack::hash_rel(rel), block / kRelSegSize);
        ASSERT_LE(first + window, n);
        ASSERT_EQ(idx, first + (block % kRelSegSize) / ptrack::kSummaryRangeBlocks);
        ++hits[idx];
    }
    /*
     * Roughly uniform away from the ends (a slot within one window of an end
     * is covered by fewer window positions): every one of the 2048 slots is
     * used, none grossly overloaded.
     */
    const double mean = static_cast<double>(samples) / static_cast<double>(n - window + 1);
    for (uint64_t i = 0; i < n; ++i) {
        if (i >= 8 && i + 8 < n) {
            EXPECT_GT(hits[i], 0) << "summary slot " << i << " never used";
        }
        EXPECT_LT(hits[i], mean * 2) << "summary slot " << i;
        if (i >= window && i + window < n) {
            EXPECT_GT(hits[i], mean / 2) << "summary slot " << i;
        }
    }
}

TEST(MapPlacement, LinesUsedUniformly)
{
    /* 64 lines, 640000 groups: each line expects 10000 first probes (sd 100). */
    const uint64_t lines = 64;
    OwnedMap owned(lines_geometry(lines));
    const Map& map = owned.map();
    std::vector<int> first(lines, 0);
    std::vector<int> second(lines, 0);
    const RelFork rel = ptrack_test::heap_rel();
    for (BlockNumber g = 0; g < 640000; ++g) {
        const SlotPair s = map.slots_of(rel, g * 8);
        ++first[s.first / kPerLine];
        ++second[s.second / kPerLine];
    }
    for (uint64_t l = 0; l < lines; ++l) {
        EXPECT_NEAR(first[l], 10000, 600) << "line " << l;
        EXPECT_NEAR(second[l], 10000, 600) << "line " << l;
    }
}

TEST(MapPlacement, ProbesAreIndependent)
{
    /*
     * With 16 lines, if the second line were a function of the first, a
     * given first line would always pair with the same second line.  Count
     * how many (first, second) pairs occur: independent probes fill all
     * 16 * 15 = 240 pairs about evenly.
     */
    const uint64_t lines = 16;
    OwnedMap owned(lines_geometry(lines));
    const Map& map = owned.map();
    std::vector<int> pairs(lines * lines, 0);
    std::mt19937_64 rng(5);
    const int samples = 240000;
    for (int i = 0; i < samples; ++i) {
        const SlotPair s = map.slots_of(random_rel(rng), static_cast<BlockNumber>(rng()));
        ++pairs[(s.first / kPerLine) * lines + s.second / kPerLine];
    }
    for (uint64_t f = 0; f < lines; ++f) {
        for (uint64_t sec = 0; sec < lines; ++sec) {
            if (f == sec) {
                EXPECT_EQ(pairs[f * lines + sec], 0);
            } else {
                EXPECT_NEAR(pairs[f * lines + sec], 1000, 200) << f << "," << sec;
            }
        }
    }
}

/*
 * Changing one field of the key: with 16 lines the first line should stay
 * the same about 1/16 of the time (6.25%, sd over 100000 samples ~0.08%),
 * never systematically.  The same on a realistic 1 MB map (16128 lines).
 */
class KeyFieldTest : public ::testing::TestWithParam<uint64_t> {};

TEST_P(KeyFieldTest, EachKeyFieldMovesTheLine)
{
    const uint64_t lines = GetParam();
    OwnedMap owned(lines_geometry(lines));
    const Map& map = owned.map();
    const int samples = 100000;
    const double expected = 1.0 / static_cast<double>(lines);
    /* Tolerance: 5 standard deviations plus a little slack. */
    const double tol = 5 * std::sqrt(expected * (1 - expected) / samples) + 0.0005;

    auto other = [](uint32_t v, std::mt19937_64& rng) {
        uint32_t w;
        do
            w = static_cast<uint32_t>(rng());
        while (w == v);
        return w;
    };

    EXPECT_NEAR(same_first_line_fraction(map, samples,
                                         [&](RelFork* r, BlockNumber*, std::mt19937_64& rng) {
                                             r->spc_oid = other(r->spc_oid, rng);
                                         }),
                expected, tol)
        << "tablespace";
    EXPECT_NEAR(same_first_line_fraction(map, samples,
                                         [&](RelFork* r, BlockNumber*, std::mt19937_64& rng) {
                                             r->db_oid = other(r->db_oid, rng);
                                         }),
                expected, tol)
        << "database";
    EXPECT_NEAR(same_first_line_fraction(map, samples,
                                         [&](RelFork* r, BlockNumber*, std::mt19937_64& rng) {
                                             r->relfilenode = other(r->relfilenode, rng);
                                         }),
                expected, tol)
        << "relfilenode";
    EXPECT_NEAR(same_first_line_fraction(map, samples,
                                         [&](RelFork* r, BlockNumber*, std::mt19937_64&) {
                                             r->fork = static_cast<uint8_t>((r->fork + 1) % 4);
                                         }),
                expected, tol)
        << "fork";
    EXPECT_NEAR(same_first_line_fraction(map, samples,
                                         [&](RelFork*, BlockNumber* b, std::mt19937_64& rng) {
                                             /* another 8-block group */
                                             BlockNumber nb;
                                             do
                                                 nb = static_cast<BlockNumber>(rng());
                                             while (nb / 8 == *b / 8);
                                             *b = nb;
                                         }),
                expected, tol)
        << "block group";
    /* Swapping spc and db, or relfilenode and db, must not be a symmetry of the hash. */
    EXPECT_NEAR(same_first_line_fraction(map, samples,
                                         [&](RelFork* r, BlockNumber*, std::mt19937_64&) {
                                             std::swap(r->spc_oid, r->db_oid);
                                         }),
                expected, tol)
        << "spc <-> db";
    EXPECT_NEAR(same_first_line_fraction(map, samples,
                                         [&](RelFork* r, BlockNumber*, std::mt19937_64&) {
                                             std::swap(r->relfilenode, r->db_oid);
                                         }),
                expected, tol)
        << "relfilenode <-> db";
}

INSTANTIATE_TEST_SUITE_P(Lines, KeyFieldTest, ::testing::Values(uint64_t{16}, uint64_t{16128}));

TEST(MapPlacement, MainAndFsmForkDoNotCollide)
{
    /*
     * The case that matters most in practice: block b of fork 0 and block b
     * of fork 1 of the same relation, over consecutive realistic keys (small
     * OIDs, consecutive blocks), must not share lines more than chance does.
     */
    OwnedMap owned(OwnedMap::geometry(1 * kMB));
    const Map& map = owned.map();
    const double lines = static_cast<double>(map.geometry().line_count);
    int same_first = 0;
    int same_both = 0;
    int same_summary = 0;
    int total = 0;
    for (uint32_t relfilenode = 16384; relfilenode < 16384 + 100; ++relfilenode) {
        for (BlockNumber b = 0; b < 8000; b += 8) {
            const RelFork main_fork = RelFork{1663, 16384, relfilenode, ptrack::kMainFork};
            const RelFork fsm_fork = RelFork{1663, 16384, relfilenode, ptrack::kFsmFork};
            const SlotPair m = map.slots_of(main_fork, b);
            const SlotPair f = map.slots_of(fsm_fork, b);
            same_first += m.first == f.first;
            same_both += m.first == f.first && m.second == f.second;
            ++total;
        }
        same_summary += map.summary_slot_index(RelFork{1663, 16384, relfilenode, ptrack::kMainFork}, 0) ==
                        map.summary_slot_index(RelFork{1663, 16384, relfilenode, ptrack::kFsmFork}, 0);
    }
    /* Expected total/lines = 6.2 identical first lines out of 100000; allow up to 25. */
    EXPECT_LE(same_first, static_cast<int>(4 * total / lines + 1));
    EXPECT_EQ(same_both, 0);
    EXPECT_LE(same_summary, 2);
}

TEST(MapPlacement, RealisticNeighbouringKeysDoNotShareBothLines)
{
    /*
     * Real keys are small, close numbers: a few tablespaces and databases,
     * consecutive relfilenodes, all forks, the first groups.  A hash that
     * folds fields carelessly (e.g. relfilenode ^ fork, spc + db) maps
     * distinct keys like these onto the same pair of lines.  On a 16 MB map
     * (258048 lines) the ~21500 keys below are expected to share both lines
     * in 0.004 pairs: require every key to have its own pair of lines.
     */
    OwnedMap owned(OwnedMap::geometry(16 * kMB));
    const Map& map = owned.map();
    std::set<std::pair<uint64_t, uint64_t>> pairs;
    std::set<uint64_t> summary_slots;
    size_t keys = 0;
    for (uint32_t spc : {1663u, 1664u, 16390u}) {
        for (uint32_t db : {0u, 1u, 5u, 16384u, 16385u, 16386u, 16387u}) {
            for (uint32_t relfilenode = 16384; relfilenode < 16384 + 64; ++relfilenode) {
                for (uint8_t fork = 0; fork <= ptrack::kMaxFork; ++fork) {
                    const RelFork rel{spc, db, relfilenode, fork};
                    for (BlockNumber group = 0; group < 4; ++group) {
                        const SlotPair s = map.slots_of(rel, group * 8);
                        pairs.insert({s.first / kPerLine, s.second / kPerLine});
                        ++keys;
                    }
                    summary_slots.insert(map.summary_slot_index(rel, 0));
                }
            }
        }
    }
    EXPECT_EQ(pairs.size(), keys);
    /* 5376 relation forks into 32641 window positions: about 420 collisions expected by chance. */
    const uint64_t summary_count = map.geometry().summary_count;
    ASSERT_EQ(summary_count, 32768u);
    EXPECT_GT(summary_slots.size(), 4700u);
}

TEST(MapPlacement, HashedVariantsAgree)
{
    /*
     * The write path hashes the relation once and keeps a segment handle
     * per cached relation (segment_ref, cached per process) and calls
     * mark_in_segment; other callers use mark_hashed / slots_of_hashed; the
     * read path calls slots_of / summary_slot_index / mark.  All must place every
     * block identically, or a block marked on the write path would be probed
     * elsewhere on the read path (a false negative).
     */
    const MapGeometry g = OwnedMap::geometry(1 * kMB, kRelSegSize, 0);
    OwnedMap by_rel(g);
    OwnedMap by_hash(g);
    OwnedMap by_segment(g);
    std::mt19937_64 rng(8);
    for (int i = 0; i < 20000; ++i) {
        const RelFork rel = random_rel(rng);
        const BlockNumber b = static_cast<BlockNumber>(rng());
        const uint64_t h = ptrack::hash_rel(rel);
        const SlotPair a = by_rel.map().slots_of(rel, b);
        const SlotPair c = by_rel.map().slots_of_hashed(h, b);
        ASSERT_EQ(a.first, c.first);
        ASSERT_EQ(a.second, c.second);
        ASSERT_EQ(by_rel.map().summary_slot_index(rel, b),
                  by_rel.map().summary_window_hashed(h, b / kRelSegSize) + (b % kRelSegSize) / ptrack::kSummaryRangeBlocks);
        const Lsn lsn = 1 + rng() % 1000000;
        by_rel.map().mark(rel, b, lsn);
        by_hash.map().mark_hashed(h, b, lsn);
        const Map::SegmentRef seg = by_segment.map().segment_ref(h, b / kRelSegSize);
        ASSERT_EQ(seg.summary_window - by_segment.map().summary(),
                  static_cast<ptrdiff_t>(by_rel.map().summary_window_hashed(h, b / kRelSegSize)));
        ASSERT_EQ(seg.first_block, b / kRelSegSize * kRelSegSize);
        by_segment.map().mark_in_segment(seg, b, lsn);
        ASSERT_TRUE(by_hash.map().block_changed(rel, b, lsn));
        ASSERT_TRUE(by_hash.map().segment_may_have_changed(rel, b / kRelSegSize, lsn));
        ASSERT_TRUE(by_segment.map().block_changed(rel, b, lsn));
        ASSERT_TRUE(by_segment.map().segment_may_have_changed(rel, b / kRelSegSize, lsn));
    }
    /* The three regions are byte for byte the same. */
    EXPECT_EQ(std::memcmp(by_rel.map().region(), by_hash.map().region(), g.region_bytes()), 0);
    EXPECT_EQ(std::memcmp(by_rel.map().region(), by_segment.map().region(), g.region_bytes()), 0);
}

TEST(MapPlacement, ProbesIndependentOnBigMaps)
{
    /*
     * Line counts of 1 MB, 64 MB, 1 GB and 64 GB maps.  Only the placement is
     * computed, so the view is built over a small buffer with a hand-made
     * geometry (slots_of never touches the memory).  Split the lines into 16
     * equal ranges: over 1M random keys, each of the 16 x 15 + 16 (first
     * range, second range) cells expects about 1/256 of the keys; a second
     * probe derived from the first (or from the same hash bits) would
     * concentrate them.
     */
    alignas(64) static uint64_t buffer[16] = {};
    for (uint64_t n : {uint64_t{16128}, uint64_t{63} << 14, uint64_t{1008} << 14, uint64_t{63} << 24}) {
        const Map map(buffer, MapGeometry{8, n, kRelSegSize, 0});
        std::vector<int> cells(256, 0);
        std::mt19937_64 rng(9);
        const int samples = 1 << 20;
        for (int i = 0; i < samples; ++i) {
            const SlotPair s = map.slots_of(random_rel(rng), static_cast<BlockNumber>(rng()));
            const uint64_t f = s.first / kPerLine;
            const uint64_t sec = s.second / kPerLine;
            ASSERT_LT(f, n);
            ASSERT_LT(sec, n);
            ASSERT_NE(f, sec);
            ++cells[static_cast<size_t>((f * 16 / n) * 16 + sec * 16 / n)];
        }
        /* 4096 expected per cell (sd 64); allow 8 sd. */
        for (size_t c = 0; c < 256; ++c)
            EXPECT_NEAR(cells[c], 4096, 512) << "n=" << n << " first range " << c / 16 << " second range " << c % 16;
    }
}

TEST(MapPlacement, DeterministicAcrossMapViews)
{
    /* Two maps with the same geometry place a block identically (the map file relies on it). */
    const MapGeometry g = OwnedMap::geometry(1 * kMB);
    OwnedMap a(g);
    OwnedMap b(g);
    std::mt19937_64 rng(6);
    for (int i = 0; i < 1000; ++i) {
        const RelFork rel = random_rel(rng);
        const BlockNumber blk = static_cast<BlockNumber>(rng());
        EXPECT_EQ(a.map().slots_of(rel, blk).first, b.map().slots_of(rel, blk).first);
        EXPECT_EQ(a.map().slots_of(rel, blk).second, b.map().slots_of(rel, blk).second);
        EXPECT_EQ(a.map().summary_slot_index(rel, blk), b.map().summary_slot_index(rel, blk));
    }
}
