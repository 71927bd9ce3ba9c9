/*
 * t/unit/hash_test.cpp -- proves the hashing primitives that place blocks and
 * segments in the map (ptrack/hash.h):
 *
 * - mix64 avalanches: flipping any one input bit flips about half of the 64
 *   output bits, and it has no collision over a million consecutive inputs;
 * - hash_rel_unit depends on every bit of every key field (tablespace,
 *   database, relfilenode, fork, unit) and on the seed, with full avalanche,
 *   so the two probes and the summary are independent hashes;
 * - hash_unit(hash_rel(rel), ...) -- the write path's cached form -- equals
 *   hash_rel_unit(rel, ...) and avalanches on the unit and on the relation
 *   hash;
 * - fastrange maps onto [0, n) for every n up to 2^64 - 1, hits both ends,
 *   and is uniform also for the line counts of big maps (64 GB: 2^30 lines),
 *   where a reduction using only some hash bits would leave lines unused.
 */
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <unordered_set>
#include <vector>

#include "ptrack/hash.h"
#include "ptrack/relfork.h"

using ptrack::fastrange;
using ptrack::hash_rel_unit;
using ptrack::mix64;
using ptrack::RelFork;

namespace {

/* Average number of output bits flipped by flipping input bit `bit`, over `samples` random inputs. */
template <typename F>
double avalanche(F f, int bit, int samples, std::mt19937_64& rng)
{
    uint64_t flipped = 0;
    for (int i = 0; i < samples; ++i) {
        const uint64_t x = rng();
        flipped += static_cast<uint64_t>(__builtin_popcountll(f(x) ^ f(x ^ (uint64_t{1} << bit))));
    }
    return static_cast<double>(flipped) / samples;
}

}  // namespace

TEST(Hash, Mix64Avalanche)
{
    std::mt19937_64 rng(71);
    for (int bit = 0; bit < 64; ++bit)
        EXPECT_NEAR(avalanche(mix64, bit, 2000, rng), 32.0, 1.5) << "input bit " << bit;
}

TEST(Hash, Mix64NoCollisionOnConsecutiveInputs)
{
    std::unordered_set<uint64_t> seen;
    seen.reserve(1 << 20);
    for (uint64_t x = 0; x < (1 << 20); ++x)
        ASSERT_TRUE(seen.insert(mix64(x)).second) << x;
}

TEST(Hash, EveryKeyFieldBitAvalanches)
{
    /* Random keys; one bit of one field flipped at a time. */
    std::mt19937_64 rng(72);
    struct Field {
        const char* name;
        int bits;
    };
    for (const Field field : {Field{"spc", 32}, Field{"db", 32}, Field{"relfilenode", 32}, Field{"fork", 8},
                              Field{"unit", 64}}) {
        for (int bit = 0; bit < field.bits; ++bit) {
            uint64_t flipped = 0;
            const int samples = 500;
            for (int i = 0; i < samples; ++i) {
                RelFork a{static_cast<uint32_t>(rng()), static_cast<uint32_t>(rng()), static_cast<uint32_t>(rng()),
                          static_cast<uint8_t>(rng())};
                uint64_t unit_a = rng();
                RelFork b = a;
                uint64_t unit_b = unit_a;
                const std::string name = field.name;
                if (name == "spc")
                    b.spc_oid ^= 1u << bit;
                else if (name == "db")
                    b.db_oid ^= 1u << bit;
                else if (name == "relfilenode")
                    b.relfilenode ^= 1u << bit;
                else if (name == "fork")
                    b.fork = static_cast<uint8_t>(b.fork ^ (1u << bit));
                else
                    unit_b ^= uint64_t{1} << bit;
                flipped += static_cast<uint64_t>(__builtin_popcountll(
                    hash_rel_unit(a, unit_a, ptrack::kSeedFirstProbe) ^ hash_rel_unit(b, unit_b, ptrack::kSeedFirstProbe)));
            }
            EXPECT_NEAR(static_cast<double>(flipped) / samples, 32.0, 2.0) << field.name << " bit " << bit;
        }
    }
}

TEST(Hash, RelationHashThenUnitHashComposes)
{
    /*
     * The write path caches hash_rel(rel) and calls hash_unit; the read path
     * calls hash_rel_unit.  They must agree exactly.  hash_unit must also
     * avalanche on every bit of the unit and of the relation hash.
     */
    std::mt19937_64 rng(75);
    for (int i = 0; i < 10000; ++i) {
        const RelFork rel{static_cast<uint32_t>(rng()), static_cast<uint32_t>(rng()), static_cast<uint32_t>(rng()),
                          static_cast<uint8_t>(rng() % 4)};
        const uint64_t unit = rng() >> (rng() % 64);
        for (uint64_t seed : {ptrack::kSeedFirstProbe, ptrack::kSeedSecondProbe, ptrack::kSeedSummary})
            ASSERT_EQ(hash_rel_unit(rel, unit, seed), ptrack::hash_unit(ptrack::hash_rel(rel), unit, seed));
    }
    for (uint64_t seed : {ptrack::kSeedFirstProbe, ptrack::kSeedSummary}) {
        const uint64_t rel_hash = ptrack::hash_rel(RelFork{1663, 16384, 16385, 0});
        for (int bit = 0; bit < 64; ++bit) {
            EXPECT_NEAR(avalanche([&](uint64_t u) { return ptrack::hash_unit(rel_hash, u, seed); }, bit, 2000, rng),
                        32.0, 1.5)
                << "unit bit " << bit;
            EXPECT_NEAR(avalanche([&](uint64_t h) { return ptrack::hash_unit(h, 12345, seed); }, bit, 2000, rng), 32.0,
                        1.5)
                << "relation hash bit " << bit;
        }
    }
}

TEST(Hash, SmallUnitsOfOneRelationDoNotCollide)
{
    /* Consecutive groups of one relation (the common case) never share a 64-bit hash. */
    const uint64_t rel_hash = ptrack::hash_rel(RelFork{1663, 16384, 16385, 0});
    std::unordered_set<uint64_t> seen;
    for (uint64_t unit = 0; unit < (1 << 20); ++unit)
        ASSERT_TRUE(seen.insert(ptrack::hash_unit(rel_hash, unit, ptrack::kSeedFirstProbe)).second) << unit;
}

TEST(Hash, SeedsGiveIndependentHashes)
{
    std::mt19937_64 rng(73);
    const uint64_t seeds[] = {ptrack::kSeedFirstProbe, ptrack::kSeedSecondProbe, ptrack::kSeedSummary};
    for (size_t i = 0; i < 3; ++i) {
        for (size_t j = i + 1; j < 3; ++j) {
            ASSERT_NE(seeds[i], seeds[j]);
            uint64_t flipped = 0;
            const int samples = 10000;
            for (int k = 0; k < samples; ++k) {
                const RelFork rel{static_cast<uint32_t>(rng()), static_cast<uint32_t>(rng()),
                                  static_cast<uint32_t>(rng()), static_cast<uint8_t>(rng() % 4)};
                const uint64_t unit = rng() % 1000;
                flipped += static_cast<uint64_t>(
                    __builtin_popcountll(hash_rel_unit(rel, unit, seeds[i]) ^ hash_rel_unit(rel, unit, seeds[j])));
            }
            EXPECT_NEAR(static_cast<double>(flipped) / samples, 32.0, 0.5) << "seeds " << i << " and " << j;
        }
    }
}

TEST(Hash, FastrangeInRangeAndEnds)
{
    std::mt19937_64 rng(74);
    for (uint64_t n : {uint64_t{1}, uint64_t{2}, uint64_t{3}, uint64_t{1008}, uint64_t{16128},
                       uint64_t{63} << 24, uint64_t{1} << 32, (uint64_t{1} << 32) + 1, UINT64_MAX / 3,
                       UINT64_MAX}) {
        EXPECT_EQ(fastrange(0, n), 0u) << n;
        EXPECT_EQ(fastrange(UINT64_MAX, n), n - 1) << n;
        for (int i = 0; i < 10000; ++i)
            ASSERT_LT(fastrange(rng(), n), n) << n;
    }
    /* Monotone in the hash: it is a scaling, not a modulo. */
    EXPECT_EQ(fastrange(uint64_t{1} << 63, 10), 5u);
    EXPECT_EQ(fastrange(uint64_t{1} << 62, 16), 4u);
}

TEST(Hash, FastrangeUniformOnBigMaps)
{
    /*
     * Line counts of 64 MB, 1 GB and 64 GB maps.  Hash 1M consecutive units
     * and count, in 16 equal ranges of lines, where they land: each range
     * expects 65536 (sd ~250).  A reduction that used only the low 16 or
     * 32 bits of the hash would leave the upper ranges empty.
     */
    const RelFork rel{1663, 16384, 16385, 0};
    for (uint64_t n : {uint64_t{63} << 14, uint64_t{1008} << 14, uint64_t{63} << 24}) {
        std::vector<int> ranges(16, 0);
        for (uint64_t unit = 0; unit < (1 << 20); ++unit) {
            const uint64_t line = fastrange(hash_rel_unit(rel, unit, ptrack::kSeedFirstProbe), n);
            ASSERT_LT(line, n);
            ++ranges[static_cast<size_t>(line * 16 / n)];
        }
        for (size_t r = 0; r < 16; ++r)
            EXPECT_NEAR(ranges[r], 65536, 1500) << "n=" << n << " range " << r;
    }
}
