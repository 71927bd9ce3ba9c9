/*
 * t/unit/map_geometry_test.cpp -- proves that MapGeometry::for_bytes sizes the
 * map correctly (docs/design.md section 3.3):
 *
 * - exact line and summary counts for 1 MB, 64 MB, 1 GB and 64 GB (and 1 TB),
 *   computed in 64-bit arithmetic without overflow;
 * - sizes below 64 KB, a blocks_per_segment that is 0 or not a whole number of
 *   8-block groups, and a granule shift above 32 give an invalid geometry;
 * - the region never exceeds the bytes asked for, and wastes less than one
 *   cache line of them;
 * - the segment summary takes about 1/64 of the bytes, in whole cache lines;
 * - two geometries compare equal exactly when all four fields match.
 */
#include <gtest/gtest.h>

#include <cstdint>
#include <random>

#include "map_fixture.h"
#include "ptrack/map.h"

using ptrack::MapGeometry;
using ptrack_test::kMB;
using ptrack_test::kRelSegSize;

namespace {

constexpr uint64_t kGB = uint64_t{1} << 30;

/* The invariants every valid geometry must satisfy for the `bytes` it was made from. */
void expect_sane(const MapGeometry& g, uint64_t bytes)
{
    ASSERT_TRUE(g.valid()) << "bytes=" << bytes;
    EXPECT_LE(g.region_bytes(), bytes) << "bytes=" << bytes;
    EXPECT_LT(bytes - g.region_bytes(), uint64_t{ptrack::kLineBytes}) << "bytes=" << bytes;
    /* The summary is whole cache lines (a multiple of 8 slots) ... */
    EXPECT_EQ(g.summary_count % 8, 0u) << "bytes=" << bytes;
    /* ... and about 1/64 of the bytes: bytes/64 rounded down to a whole line. */
    const uint64_t summary_bytes = g.summary_count * sizeof(uint64_t);
    EXPECT_LE(summary_bytes, bytes / 64) << "bytes=" << bytes;
    EXPECT_GT(summary_bytes + ptrack::kLineBytes, bytes / 64) << "bytes=" << bytes;
    EXPECT_GE(g.line_count, 1u);
}

}  // namespace

TEST(MapGeometry, OneMegabyte)
{
    const MapGeometry g = MapGeometry::for_bytes(1 * kMB, kRelSegSize);
    expect_sane(g, 1 * kMB);
    /* 16 KB of summary = 2048 slots; the remaining 1008 KB are 16128 lines. */
    EXPECT_EQ(g.summary_count, 2048u);
    EXPECT_EQ(g.line_count, 16128u);
    EXPECT_EQ(g.region_bytes(), 1 * kMB);
    EXPECT_EQ(g.blocks_per_segment, kRelSegSize);
    EXPECT_EQ(g.lsn_granule_shift, MapGeometry::kDefaultGranuleShift);
}

TEST(MapGeometry, SixtyFourMegabytes)
{
    const MapGeometry g = MapGeometry::for_bytes(64 * kMB, kRelSegSize);
    expect_sane(g, 64 * kMB);
    EXPECT_EQ(g.summary_count, uint64_t{1} << 17); /* 1 MB of summary */
    EXPECT_EQ(g.line_count, uint64_t{63} << 14);   /* 63 MB of lines */
    EXPECT_EQ(g.region_bytes(), 64 * kMB);
}

TEST(MapGeometry, OneGigabyte)
{
    const MapGeometry g = MapGeometry::for_bytes(kGB, kRelSegSize);
    expect_sane(g, kGB);
    EXPECT_EQ(g.summary_count, uint64_t{1} << 21); /* 16 MB of summary */
    EXPECT_EQ(g.line_count, uint64_t{1008} << 14); /* 1008 MB of lines */
    EXPECT_EQ(g.region_bytes(), kGB);
}

TEST(MapGeometry, SixtyFourGigabytesNoOverflow)
{
    /* Above 4 GB: any 32-bit intermediate would wrap. */
    const uint64_t bytes = 64 * kGB;
    const MapGeometry g = MapGeometry::for_bytes(bytes, kRelSegSize);
    expect_sane(g, bytes);
    EXPECT_EQ(g.summary_count, uint64_t{1} << 27); /* 1 GB of summary */
    EXPECT_EQ(g.line_count, uint64_t{63} << 24);   /* 63 GB of lines */
    EXPECT_EQ(g.region_bytes(), bytes);
    EXPECT_GT(g.line_count, uint64_t{UINT32_MAX} / 8);
}

TEST(MapGeometry, OneTerabyteNoOverflow)
{
    const uint64_t bytes = 1024 * kGB;
    const MapGeometry g = MapGeometry::for_bytes(bytes, kRelSegSize);
    expect_sane(g, bytes);
    EXPECT_EQ(g.summary_count, uint64_t{1} << 31);
    EXPECT_EQ(g.line_count, uint64_t{63} << 28);
    EXPECT_EQ(g.region_bytes(), bytes);
}

TEST(MapGeometry, ExtremeSizesNoOverflow)
{
    /* The arithmetic must not wrap even at the top of the 64-bit range. */
    for (uint64_t bytes : {uint64_t{1} << 62, UINT64_MAX / 2, UINT64_MAX - 1, UINT64_MAX})
        expect_sane(MapGeometry::for_bytes(bytes, kRelSegSize), bytes);
}

TEST(MapGeometry, TooSmallIsInvalid)
{
    for (uint64_t bytes : {uint64_t{0}, uint64_t{1}, uint64_t{64}, uint64_t{4096}, uint64_t{65535}}) {
        const MapGeometry g = MapGeometry::for_bytes(bytes, kRelSegSize);
        EXPECT_FALSE(g.valid()) << "bytes=" << bytes;
        EXPECT_EQ(g.line_count, 0u) << "bytes=" << bytes;
    }
    /* 64 KB is the smallest accepted size. */
    const MapGeometry g = MapGeometry::for_bytes(64 * 1024, kRelSegSize);
    expect_sane(g, 64 * 1024);
    EXPECT_EQ(g.summary_count, 128u);
    EXPECT_EQ(g.line_count, 1008u);
}

TEST(MapGeometry, BadBlocksPerSegmentIsInvalid)
{
    /* 0, and anything that is not a whole number of 8-block groups. */
    for (uint32_t bps : {0u, 1u, 7u, 12u, 131071u, 131073u}) {
        const MapGeometry g = MapGeometry::for_bytes(1 * kMB, bps);
        EXPECT_FALSE(g.valid()) << "blocks_per_segment=" << bps;
    }
    for (uint32_t bps : {8u, 16u, 1000u, 1024u, kRelSegSize}) {
        const MapGeometry g = MapGeometry::for_bytes(1 * kMB, bps);
        EXPECT_TRUE(g.valid()) << "blocks_per_segment=" << bps;
        EXPECT_EQ(g.blocks_per_segment, bps);
    }
}

TEST(MapGeometry, SummaryWindowMustFit)
{
    /* One summary slot per 1024 blocks of a segment, rounded up. */
    EXPECT_EQ(MapGeometry::for_bytes(1 * kMB, 8).summary_window(), 1u);
    EXPECT_EQ(MapGeometry::for_bytes(1 * kMB, 1000).summary_window(), 1u);
    EXPECT_EQ(MapGeometry::for_bytes(1 * kMB, 1032).summary_window(), 2u);
    EXPECT_EQ(MapGeometry::for_bytes(1 * kMB, kRelSegSize).summary_window(), 128u);
    /* The smallest map (64 KB, 128 summary slots) still holds a 1 GB segment's window. */
    EXPECT_TRUE(MapGeometry::for_bytes(64 * 1024, kRelSegSize).valid());
    /* 8M-block segments need 7813 slots: too many for 1 MB (2048 slots), fine for 64 MB. */
    EXPECT_FALSE(MapGeometry::for_bytes(1 * kMB, 8u * 1000000u).valid());
    EXPECT_TRUE(MapGeometry::for_bytes(64 * kMB, 8u * 1000000u).valid());
}

TEST(MapGeometry, GranuleShiftAbove32IsInvalid)
{
    EXPECT_TRUE(MapGeometry::for_bytes(1 * kMB, kRelSegSize, 0).valid());
    EXPECT_TRUE(MapGeometry::for_bytes(1 * kMB, kRelSegSize, 32).valid());
    EXPECT_FALSE(MapGeometry::for_bytes(1 * kMB, kRelSegSize, 33).valid());
    EXPECT_FALSE(MapGeometry::for_bytes(1 * kMB, kRelSegSize, 63).valid());
    EXPECT_EQ(MapGeometry::for_bytes(1 * kMB, kRelSegSize, 5).lsn_granule_shift, 5u);
}

TEST(MapGeometry, RegionFitsInRequestedBytes)
{
    /* Odd sizes too: the region must never overrun what the caller allocated. */
    std::mt19937_64 rng(42);
    std::uniform_int_distribution<uint64_t> size(64 * 1024, 8 * kGB);
    for (int i = 0; i < 20000; ++i) {
        const uint64_t bytes = size(rng);
        expect_sane(MapGeometry::for_bytes(bytes, kRelSegSize), bytes);
    }
    for (uint64_t bytes = 64 * 1024; bytes < 64 * 1024 + 200; ++bytes)
        expect_sane(MapGeometry::for_bytes(bytes, kRelSegSize), bytes);
}

TEST(MapGeometry, SummaryIsAboutOneSixtyFourth)
{
    for (uint64_t mb : {uint64_t{1}, uint64_t{3}, uint64_t{100}, uint64_t{4096}}) {
        const MapGeometry g = MapGeometry::for_bytes(mb * kMB, kRelSegSize);
        const double ratio = static_cast<double>(g.summary_count * sizeof(uint64_t)) /
                             static_cast<double>(g.region_bytes());
        EXPECT_NEAR(ratio, 1.0 / 64, 0.001) << mb << " MB";
    }
}

TEST(MapGeometry, Equality)
{
    const MapGeometry a = MapGeometry::for_bytes(64 * kMB, kRelSegSize, 16);
    const MapGeometry b = MapGeometry::for_bytes(64 * kMB, kRelSegSize, 16);
    EXPECT_TRUE(a == b);

    /* Each field on its own makes geometries differ. */
    EXPECT_FALSE(a == MapGeometry::for_bytes(65 * kMB, kRelSegSize, 16));
    EXPECT_FALSE(a == MapGeometry::for_bytes(64 * kMB, kRelSegSize / 2, 16));
    EXPECT_FALSE(a == MapGeometry::for_bytes(64 * kMB, kRelSegSize, 15));

    MapGeometry c = a;
    c.summary_count += 8;
    EXPECT_FALSE(a == c);
    c = a;
    c.line_count -= 1;
    EXPECT_FALSE(a == c);
    c = a;
    c.blocks_per_segment = 8;
    EXPECT_FALSE(a == c);
    c = a;
    c.lsn_granule_shift = 0;
    EXPECT_FALSE(a == c);
    c = a;
    EXPECT_TRUE(a == c);
}

/* The map wal capture keeps (docs/design.md section 4.6): one segment's summary window and one line, about 1 KB. */
TEST(MapGeometry, SmallestIsValidAndTiny)
{
    const MapGeometry g = MapGeometry::smallest(kRelSegSize);
    ASSERT_TRUE(g.valid());
    EXPECT_EQ(g.summary_count, 128u); /* 131072 blocks / 1024 per slot */
    EXPECT_EQ(g.summary_count % 8, 0u);
    EXPECT_EQ(g.line_count, 1u);
    EXPECT_EQ(g.region_bytes(), 128u * 8 + ptrack::kLineBytes);
    EXPECT_EQ(g.lsn_granule_shift, MapGeometry::kDefaultGranuleShift);
    /* Not the geometry of any ptrack.map_size, so a map of one is never taken for the other. */
    EXPECT_FALSE(g == MapGeometry::for_bytes(64 * 1024, kRelSegSize));
    /* A window that is not a whole line rounds up; bad inputs stay invalid. */
    EXPECT_EQ(MapGeometry::smallest(8 * 1024 + 8).summary_count, 16u);
    EXPECT_FALSE(MapGeometry::smallest(0).valid());
    EXPECT_FALSE(MapGeometry::smallest(12).valid());
    EXPECT_FALSE(MapGeometry::smallest(kRelSegSize, 33).valid());
}
