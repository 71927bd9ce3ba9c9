/*
 * t/unit/map_probe_test.cpp -- proves the read side of the two-probe map
 * (docs/design.md sections 1 and 3.3):
 *
 * - a block reads as changed since L only if BOTH of its slots are >= L:
 *   one slot alone (set by hand) is not enough;
 * - a block marked with LSN X reads as changed for every L <= X, and with
 *   granule shift 0 not for any L > X; with a granule, exactly up to X
 *   rounded up to the granule;
 * - no false negative: after 100000 random marks into a small, heavily
 *   shared map, every block marked with an LSN >= L reads as changed since L,
 *   for many random L (with and without a granule), while the map still
 *   answers "unchanged" for L above everything marked;
 * - the false-positive rate of a 1 MB map after N random marks matches the
 *   two-probe estimate p^2 (p = fraction of slots set), which is far below
 *   the one-probe rate p;
 * - clear() forgets every mark.
 */
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <unordered_set>
#include <vector>

#include "map_fixture.h"
#include "ptrack/map.h"

using ptrack::BlockNumber;
using ptrack::Lsn;
using ptrack::Map;
using ptrack::RelFork;
using ptrack::SlotPair;
using ptrack_test::heap_rel;
using ptrack_test::kMB;
using ptrack_test::kRelSegSize;
using ptrack_test::OwnedMap;

TEST(MapProbe, BothSlotsMustBeSet)
{
    OwnedMap owned(OwnedMap::geometry(1 * kMB, kRelSegSize, 0));
    Map& map = owned.map();
    const RelFork rel = heap_rel();
    const BlockNumber b = 12345;
    const SlotPair s = map.slots_of(rel, b);

    EXPECT_FALSE(map.block_changed(rel, b, 50));

    /* First slot only. */
    map.slots()[s.first] = 100;
    EXPECT_FALSE(map.block_changed(rel, b, 50));
    EXPECT_FALSE(map.block_changed(rel, b, 100));

    /* Second slot only. */
    map.slots()[s.first] = 0;
    map.slots()[s.second] = 100;
    EXPECT_FALSE(map.block_changed(rel, b, 50));

    /* Both slots. */
    map.slots()[s.first] = 100;
    EXPECT_TRUE(map.block_changed(rel, b, 50));
    EXPECT_TRUE(map.block_changed(rel, b, 100));
    EXPECT_FALSE(map.block_changed(rel, b, 101));

    /* The smaller of the two slots decides. */
    map.slots()[s.first] = 70;
    EXPECT_TRUE(map.block_changed(rel, b, 70));
    EXPECT_FALSE(map.block_changed(rel, b, 71));

    /* Neighbours in the same lines are not affected (their own slot index is 0). */
    const BlockNumber neighbour = b % 8 == 0 ? b + 1 : b - 1;
    EXPECT_FALSE(map.block_changed(rel, neighbour, 1));
}

TEST(MapProbe, MarkedReadsChangedUpToItsLsn)
{
    OwnedMap owned(OwnedMap::geometry(1 * kMB, kRelSegSize, 0));
    Map& map = owned.map();
    const RelFork rel = heap_rel();
    const Lsn x = 0x1000000ULL + 12345;
    map.mark(rel, 42, x);
    for (Lsn l : {Lsn{1}, Lsn{2}, Lsn{1000}, x / 2, x - 1, x})
        EXPECT_TRUE(map.block_changed(rel, 42, l)) << l;
    for (Lsn l : {x + 1, x + 2, 2 * x, Lsn{UINT64_MAX}})
        EXPECT_FALSE(map.block_changed(rel, 42, l)) << l;
    /* Other blocks, forks and relations are not marked. */
    EXPECT_FALSE(map.block_changed(rel, 43, 1));
    EXPECT_FALSE(map.block_changed(rel, 42 + 8, 1));
    EXPECT_FALSE(map.block_changed(heap_rel(16385, ptrack::kFsmFork), 42, 1));
    EXPECT_FALSE(map.block_changed(heap_rel(16386), 42, 1));

    /* A later, larger mark raises the horizon; a smaller one does not lower it. */
    map.mark(rel, 42, x + 10);
    EXPECT_TRUE(map.block_changed(rel, 42, x + 10));
    EXPECT_FALSE(map.block_changed(rel, 42, x + 11));
    map.mark(rel, 42, 3);
    EXPECT_TRUE(map.block_changed(rel, 42, x + 10));
}

TEST(MapProbe, MarkedWithGranuleReadsChangedUpToRoundedLsn)
{
    OwnedMap owned(OwnedMap::geometry(1 * kMB, kRelSegSize, 16));
    Map& map = owned.map();
    const RelFork rel = heap_rel();
    const Lsn x = 0x5000123ULL;
    const Lsn rounded = 0x500FFFFULL; /* the last LSN of x's 64 KB granule */
    map.mark(rel, 9, x);
    EXPECT_TRUE(map.block_changed(rel, 9, 1));
    EXPECT_TRUE(map.block_changed(rel, 9, x));
    /* Above X but within the granule: an allowed false positive. */
    EXPECT_TRUE(map.block_changed(rel, 9, rounded));
    EXPECT_FALSE(map.block_changed(rel, 9, rounded + 1));
}

TEST(MapProbe, ClearForgetsEverything)
{
    OwnedMap owned(OwnedMap::geometry(64 * 1024, kRelSegSize, 0));
    Map& map = owned.map();
    std::mt19937_64 rng(21);
    for (int i = 0; i < 10000; ++i)
        map.mark(heap_rel(static_cast<uint32_t>(16384 + rng() % 10)), static_cast<BlockNumber>(rng() % 100000),
                 1 + rng() % 1000000);
    EXPECT_TRUE(map.block_changed(heap_rel(16384), 0, 1)); /* a 64 KB map this full is saturated */
    map.clear();
    for (uint64_t i = 0; i < owned.slot_count(); ++i)
        ASSERT_EQ(map.slots()[i], 0u);
    for (uint64_t i = 0; i < map.geometry().summary_count; ++i)
        ASSERT_EQ(map.summary()[i], 0u);
    EXPECT_FALSE(map.block_changed(heap_rel(16384), 0, 1));
}

/*
 * No false negative, the promise of docs/design.md section 1.  A 256 KB map
 * (4032 lines) receives 100000 marks on 200 relation forks, so lines are
 * shared by many blocks and slots hold the max of many LSNs.  The LSNs
 * are random, so after the run slots hold a spread of values and the map
 * does answer "unchanged" for many (block, L): the test below checks that.
 */
class NoFalseNegativeTest : public ::testing::TestWithParam<uint32_t> {};

TEST_P(NoFalseNegativeTest, EveryMarkedBlockReadsChanged)
{
    const uint32_t shift = GetParam();
    OwnedMap owned(OwnedMap::geometry(256 * 1024, kRelSegSize, shift));
    Map& map = owned.map();
    struct Mark {
        RelFork rel;
        BlockNumber block;
        Lsn lsn;
    };
    std::mt19937_64 rng(31 + shift);
    const Lsn max_lsn = Lsn{1} << 36;
    std::vector<Mark> marks;
    marks.reserve(100000);
    for (int i = 0; i < 100000; ++i) {
        const RelFork rel{1663, 16384 + static_cast<uint32_t>(rng() % 2),
                          16384 + static_cast<uint32_t>(rng() % 50), static_cast<uint8_t>(rng() % 2)};
        /* Blocks across several segments, with some hot blocks marked many times. */
        const BlockNumber block = rng() % 4 == 0 ? static_cast<BlockNumber>(rng() % 64)
                                                 : static_cast<BlockNumber>(rng() % (4 * kRelSegSize));
        const Lsn lsn = 1 + rng() % max_lsn;
        marks.push_back(Mark{rel, block, lsn});
        map.mark(rel, block, lsn);
    }

    /* 1. For each mark, an L at, just below, and well below its own LSN. */
    for (const Mark& m : marks) {
        ASSERT_TRUE(map.block_changed(m.rel, m.block, m.lsn));
        ASSERT_TRUE(map.block_changed(m.rel, m.block, m.lsn - rng() % std::min<Lsn>(m.lsn, 1000)));
        ASSERT_TRUE(map.block_changed(m.rel, m.block, 1 + rng() % m.lsn));
        ASSERT_TRUE(map.segment_may_have_changed(m.rel, m.block / kRelSegSize, m.lsn));
    }

    /* 2. For random L, every mark with lsn >= L reads changed; count how many with lsn < L do not. */
    uint64_t checked = 0;
    uint64_t unchanged_seen = 0;
    for (int round = 0; round < 30; ++round) {
        const Lsn since = 1 + rng() % max_lsn;
        for (const Mark& m : marks) {
            const bool changed = map.block_changed(m.rel, m.block, since);
            if (m.lsn >= since) {
                ASSERT_TRUE(changed) << "false negative: block " << m.block << " lsn " << m.lsn << " since "
                                     << since;
                ++checked;
            } else if (!changed) {
                ++unchanged_seen;
            }
        }
    }
    EXPECT_GT(checked, 100000u);
    /* The map is not trivially saturated: it can say "unchanged". */
    EXPECT_GT(unchanged_seen, 10000u);

    /* 3. Above every marked LSN (rounded), nothing reads changed. */
    const Lsn above = map.stored_lsn(max_lsn + 1) + 1;
    for (const Mark& m : marks)
        ASSERT_FALSE(map.block_changed(m.rel, m.block, above));
}

INSTANTIATE_TEST_SUITE_P(Granule, NoFalseNegativeTest, ::testing::Values(0u, 16u));

/*
 * False positives on a 1 MB map: 16128 lines, M = 129024 slots.
 *
 * N marks on distinct random blocks (all with the same LSN) set 2N slots.
 * A given slot is in column block % 8 of a line; a mark hits it with
 * probability (1/8) * (2/16128) = 2/M, so the fraction of set slots is
 * p = 1 - (1 - 2/M)^N ~ 1 - exp(-2N/M).  An unmarked block reads changed
 * only if both of its slots, in two different lines, are set: about p^2.
 * With N = M/8 = 16128: p = 0.221, p^2 = 0.049.  Over 400000 probes the
 * sampling error is ~0.0003, so asserting p^2 within +-15% only fails if
 * the probes are correlated (e.g. both derived from one hash) or the
 * hash clusters.  A single probe would give p = 0.22: we also check that
 * the two-probe rate is below half of that.
 */
TEST(MapProbe, FalsePositiveRateOfOneMegabyteMap)
{
    OwnedMap owned(OwnedMap::geometry(1 * kMB, kRelSegSize, 0));
    Map& map = owned.map();
    const uint64_t m_slots = owned.slot_count();
    ASSERT_EQ(m_slots, 129024u);
    const uint64_t n = m_slots / 8;

    std::mt19937_64 rng(41);
    auto random_key = [&rng](RelFork* rel, BlockNumber* block) {
        *rel = RelFork{1663, 16384, 16384 + static_cast<uint32_t>(rng() % 100000), static_cast<uint8_t>(rng() % 3)};
        *block = static_cast<BlockNumber>(rng() % 1000000);
    };
    auto key_of = [](const RelFork& r, BlockNumber b) {
        return (uint64_t{r.relfilenode} << 24) ^ (uint64_t{r.fork} << 22) ^ b;
    };
    std::unordered_set<uint64_t> marked;
    while (marked.size() < n) {
        RelFork rel;
        BlockNumber block;
        random_key(&rel, &block);
        if (marked.insert(key_of(rel, block)).second)
            map.mark(rel, block, 1000);
    }

    uint64_t set = 0;
    for (uint64_t i = 0; i < m_slots; ++i)
        set += map.slots()[i] != 0;
    const double p = static_cast<double>(set) / static_cast<double>(m_slots);
    const double p_expected = 1 - std::exp(-2.0 * static_cast<double>(n) / static_cast<double>(m_slots));
    EXPECT_NEAR(p, p_expected, 0.005);

    uint64_t probes = 0;
    uint64_t false_positives = 0;
    while (probes < 400000) {
        RelFork rel;
        BlockNumber block;
        random_key(&rel, &block);
        if (marked.count(key_of(rel, block)))
            continue;
        ++probes;
        false_positives += map.block_changed(rel, block, 1000);
        /* And never for an L above the marked LSN. */
        if (probes % 1000 == 0) {
            ASSERT_FALSE(map.block_changed(rel, block, 1001));
        }
    }
    const double rate = static_cast<double>(false_positives) / static_cast<double>(probes);
    const double expected = p * p;
    RecordProperty("false_positive_rate", std::to_string(rate));
    EXPECT_GT(rate, expected * 0.85) << "p=" << p;
    EXPECT_LT(rate, expected * 1.15) << "p=" << p;
    EXPECT_LT(rate, p / 2) << "two probes should cut false positives well below one probe";
}
