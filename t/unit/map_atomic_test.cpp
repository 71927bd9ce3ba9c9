/*
 * t/unit/map_atomic_test.cpp -- proves the write-side primitives of the map
 * (docs/design.md section 3.3: lock-free atomic max, and LSNs
 * rounded up to a granule):
 *
 * - atomic_max_lsn never lowers a slot, and raises it to exactly the value;
 * - concurrent atomic_max_lsn from 4 threads ends at the global maximum of
 *   everything written (no lost update), both with random values and with
 *   maximally contended increasing values;
 * - concurrent Map::mark from 4 threads loses no mark: afterwards every
 *   marked block reads as changed since its LSN;
 * - Map::stored_lsn rounds up to the last LSN of the granule (never down:
 *   that would be a false negative), and never wraps to a small value near
 *   UINT64_MAX.
 */
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include "map_fixture.h"
#include "ptrack/map.h"

using ptrack::atomic_max_lsn;
using ptrack::BlockNumber;
using ptrack::load_lsn;
using ptrack::Lsn;
using ptrack::Map;
using ptrack::MapGeometry;
using ptrack::RelFork;
using ptrack_test::kMB;
using ptrack_test::OwnedMap;

namespace {

constexpr int kThreads = 4;

/* Starts `kThreads` threads running body(t) at (nearly) the same moment. */
template <typename Body>
void run_together(Body body)
{
    std::atomic<int> ready{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
            ready.fetch_add(1);
            while (ready.load() < kThreads) {
                /* spin so that all threads start together */
            }
            body(t);
        });
    }
    for (std::thread& th : threads)
        th.join();
}

}  // namespace

TEST(AtomicMax, NeverDecreases)
{
    alignas(64) uint64_t slot = 0;
    atomic_max_lsn(&slot, 100);
    EXPECT_EQ(slot, 100u);
    atomic_max_lsn(&slot, 99);
    EXPECT_EQ(slot, 100u);
    atomic_max_lsn(&slot, 0);
    EXPECT_EQ(slot, 100u);
    atomic_max_lsn(&slot, 100);
    EXPECT_EQ(slot, 100u);
    atomic_max_lsn(&slot, 101);
    EXPECT_EQ(slot, 101u);
    atomic_max_lsn(&slot, UINT64_MAX);
    EXPECT_EQ(slot, UINT64_MAX);
    atomic_max_lsn(&slot, 5);
    EXPECT_EQ(load_lsn(&slot), UINT64_MAX);

    /* A random sequence: the slot is always the running maximum. */
    std::mt19937_64 rng(11);
    slot = 0;
    uint64_t running = 0;
    for (int i = 0; i < 100000; ++i) {
        const uint64_t v = rng() >> (rng() % 64);
        atomic_max_lsn(&slot, v);
        running = std::max(running, v);
        ASSERT_EQ(load_lsn(&slot), running);
    }
}

TEST(AtomicMax, ConcurrentRandomValuesEndAtGlobalMax)
{
    for (int round = 0; round < 20; ++round) {
        alignas(64) uint64_t slot = 0;
        std::vector<uint64_t> thread_max(kThreads, 0);
        run_together([&](int t) {
            std::mt19937_64 rng(static_cast<uint64_t>(round * 1000 + t));
            uint64_t m = 0;
            for (int i = 0; i < 200000; ++i) {
                /* Values of all magnitudes, so that threads overtake each other. */
                const uint64_t v = rng() >> (rng() % 64);
                m = std::max(m, v);
                atomic_max_lsn(&slot, v);
            }
            thread_max[static_cast<size_t>(t)] = m;
        });
        const uint64_t global = *std::max_element(thread_max.begin(), thread_max.end());
        ASSERT_EQ(load_lsn(&slot), global) << "round " << round;
    }
}

TEST(AtomicMax, ConcurrentIncreasingValuesEndAtGlobalMax)
{
    /*
     * Every thread writes a rising sequence interleaved with the others
     * (t, t + 4, t + 8, ...), so nearly every compare-and-swap races; the
     * final value must be the largest value written by any thread.
     */
    for (int round = 0; round < 10; ++round) {
        alignas(64) uint64_t slot = 0;
        const uint64_t n = 500000;
        run_together([&](int t) {
            for (uint64_t i = 0; i < n; ++i) {
                const uint64_t v = i * kThreads + static_cast<uint64_t>(t);
                atomic_max_lsn(&slot, v);
                /* A reader never sees the slot go below what this thread wrote. */
                if (load_lsn(&slot) < v) {
                    ADD_FAILURE() << "slot went below a value already stored";
                    return;
                }
            }
        });
        ASSERT_EQ(load_lsn(&slot), (n - 1) * kThreads + (kThreads - 1)) << "round " << round;
    }
}

TEST(AtomicMax, ConcurrentMarksLoseNothing)
{
    /* Small map so that threads often hit the same lines and summary slots. */
    OwnedMap owned(OwnedMap::geometry(64 * 1024, ptrack_test::kRelSegSize, 0));
    Map& map = owned.map();
    struct Mark {
        RelFork rel;
        BlockNumber block;
        Lsn lsn;
    };
    std::vector<std::vector<Mark>> marks(kThreads);
    for (int t = 0; t < kThreads; ++t) {
        std::mt19937_64 rng(static_cast<uint64_t>(100 + t));
        for (int i = 0; i < 100000; ++i) {
            marks[static_cast<size_t>(t)].push_back(
                Mark{RelFork{1663, 16384, 16384 + static_cast<uint32_t>(rng() % 50), static_cast<uint8_t>(rng() % 3)},
                     static_cast<BlockNumber>(rng() % 400000), 1 + rng() % (uint64_t{1} << 40)});
        }
    }
    run_together([&](int t) {
        for (const Mark& m : marks[static_cast<size_t>(t)])
            map.mark(m.rel, m.block, m.lsn);
    });
    for (const auto& list : marks) {
        for (const Mark& m : list) {
            ASSERT_TRUE(map.block_changed(m.rel, m.block, m.lsn));
            ASSERT_TRUE(map.segment_may_have_changed(m.rel, m.block / ptrack_test::kRelSegSize, m.lsn));
        }
    }
}

TEST(StoredLsn, RoundsUpToLastLsnOfGranule)
{
    OwnedMap owned(OwnedMap::geometry(1 * kMB, ptrack_test::kRelSegSize, 16));
    const Map& map = owned.map();
    const Lsn g = Lsn{1} << 16;
    EXPECT_EQ(map.stored_lsn(0), g - 1);
    EXPECT_EQ(map.stored_lsn(1), g - 1);
    EXPECT_EQ(map.stored_lsn(g - 1), g - 1);
    EXPECT_EQ(map.stored_lsn(g), 2 * g - 1);
    EXPECT_EQ(map.stored_lsn(g + 1), 2 * g - 1);
    EXPECT_EQ(map.stored_lsn(0x16B374D48ULL), 0x16B37FFFFULL);

    /* In general: the last LSN of a granule, >= the LSN, less than one granule above it. */
    std::mt19937_64 rng(12);
    for (int i = 0; i < 100000; ++i) {
        const Lsn lsn = rng();
        const Lsn s = map.stored_lsn(lsn);
        ASSERT_EQ(s % g, g - 1);
        ASSERT_GE(s, lsn);
        ASSERT_LT(s - lsn, g);
    }
}

TEST(StoredLsn, GranuleZeroIsIdentity)
{
    OwnedMap owned(OwnedMap::geometry(1 * kMB, ptrack_test::kRelSegSize, 0));
    const Map& map = owned.map();
    std::mt19937_64 rng(13);
    for (int i = 0; i < 10000; ++i) {
        const Lsn lsn = rng();
        ASSERT_EQ(map.stored_lsn(lsn), lsn);
    }
    EXPECT_EQ(map.stored_lsn(0), 0u);
    EXPECT_EQ(map.stored_lsn(UINT64_MAX), UINT64_MAX);
}

TEST(StoredLsn, NeverWrapsNearMax)
{
    for (uint32_t shift : {1u, 8u, 16u, 32u}) {
        OwnedMap owned(OwnedMap::geometry(1 * kMB, ptrack_test::kRelSegSize, shift));
        const Map& map = owned.map();
        const Lsn g = Lsn{1} << shift;
        const Lsn last_granule = ~(g - 1); /* first LSN of the last granule */
        /* Rounding up by addition would wrap to 0 here. */
        for (Lsn lsn : {last_granule, last_granule + 1, UINT64_MAX - 1, UINT64_MAX})
            EXPECT_EQ(map.stored_lsn(lsn), UINT64_MAX) << "shift " << shift << " lsn " << lsn;
        EXPECT_EQ(map.stored_lsn(last_granule - 1), last_granule - 1) << "shift " << shift;
    }
}

TEST(StoredLsn, MarkStoresRoundedValue)
{
    /* What mark() writes into both slots and the summary is stored_lsn(lsn). */
    OwnedMap owned(OwnedMap::geometry(1 * kMB, ptrack_test::kRelSegSize, 16));
    Map& map = owned.map();
    const RelFork rel = ptrack_test::heap_rel();
    map.mark(rel, 77, 0x10001);
    const auto s = map.slots_of(rel, 77);
    EXPECT_EQ(map.slots()[s.first], 0x1FFFFu);
    EXPECT_EQ(map.slots()[s.second], 0x1FFFFu);
    EXPECT_EQ(map.summary()[map.summary_slot_index(rel, 77)], 0x1FFFFu);

    /* A smaller later mark does not lower anything. */
    map.mark(rel, 77, 5);
    EXPECT_EQ(map.slots()[s.first], 0x1FFFFu);
    EXPECT_EQ(map.slots()[s.second], 0x1FFFFu);
    EXPECT_EQ(map.summary()[map.summary_slot_index(rel, 77)], 0x1FFFFu);

    /* Nothing else in the region was touched. */
    uint64_t nonzero = 0;
    for (uint64_t i = 0; i < owned.slot_count(); ++i)
        nonzero += map.slots()[i] != 0;
    for (uint64_t i = 0; i < map.geometry().summary_count; ++i)
        nonzero += map.summary()[i] != 0;
    EXPECT_EQ(nonzero, 3u);
}
