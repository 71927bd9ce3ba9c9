/*
 * t/unit/map_segment_test.cpp -- proves Map::segment_pagemap and the segment
 * summary (docs/design.md sections 3.3 and 6):
 *
 * - an unmarked segment, with use_summary, returns 0 and an all-zero bitmap
 *   (even over a buffer full of garbage), and is answered from the summary:
 *   slots set by hand without a summary entry are not even probed;
 * - a marked segment gets exactly the marked bits (a 16 MB map, so that no
 *   collision is expected, and we assert exact bitmaps), counted right;
 * - block numbers are relative to the segment: marking block
 *   blocks_per_segment * 2 + 5 sets bit 5 of segment 2 and nothing in
 *   segments 0, 1 and 3;
 * - nblocks not a multiple of 8: no bit at or past nblocks is set, and no
 *   byte past pagemap_bytes(nblocks) is written;
 * - use_summary = false gives the same bitmap and count as use_summary = true
 *   (exactly the marked blocks on a big map; on a small, colliding map the
 *   summary only ever skips segments with no block really marked since);
 * - `since` is honoured: blocks marked before it are not listed;
 * - within a 1 GB segment, the summary skips each unchanged 8 MB range, and
 *   never hides a marked block, also where every window overlaps (64 KB map).
 */
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "map_fixture.h"
#include "ptrack/map.h"
#include "ptrack/pagemap.h"

using ptrack::BlockNumber;
using ptrack::Lsn;
using ptrack::Map;
using ptrack::pagemap_bytes;
using ptrack::RelFork;
using ptrack_test::heap_rel;
using ptrack_test::kMB;
using ptrack_test::kRelSegSize;
using ptrack_test::OwnedMap;

namespace {

/* 16 MB: 258048 lines for a few hundred marks, so no collision is expected. */
constexpr uint64_t kBigMap = 16 * kMB;
constexpr uint8_t kGuard = 0xA5;
constexpr size_t kGuardBytes = 16;

/* A bitmap buffer for nblocks, pre-filled with garbage, followed by guard bytes. */
struct Bitmap {
    explicit Bitmap(uint32_t nblocks)
        : length(pagemap_bytes(nblocks)), bytes(length + kGuardBytes, kGuard)
    {
    }
    uint8_t* data() { return bytes.data(); }
    bool guard_intact() const
    {
        for (size_t i = length; i < bytes.size(); ++i)
            if (bytes[i] != kGuard)
                return false;
        return true;
    }
    std::vector<uint8_t> content() const { return std::vector<uint8_t>(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(length)); }
    std::set<uint32_t> bits() const
    {
        std::set<uint32_t> out;
        for (size_t i = 0; i < length; ++i)
            for (uint32_t j = 0; j < 8; ++j)
                if ((bytes[i] >> j) & 1u)
                    out.insert(static_cast<uint32_t>(i * 8 + j));
        return out;
    }
    size_t length;
    std::vector<uint8_t> bytes;
};

}  // namespace

TEST(SegmentPagemap, UnmarkedSegmentIsEmpty)
{
    OwnedMap owned(OwnedMap::geometry(kBigMap, kRelSegSize, 0));
    Map& map = owned.map();
    const RelFork rel = heap_rel();
    /* Mark another relation so the map is not entirely empty. */
    map.mark(heap_rel(99999), 5, 1000);

    for (uint32_t nblocks : {1u, 7u, 8u, 13u, 1000u, kRelSegSize}) {
        Bitmap bm(nblocks);
        EXPECT_EQ(map.segment_pagemap(rel, 0, nblocks, 1, bm.data(), true), 0u) << nblocks;
        EXPECT_EQ(bm.content(), std::vector<uint8_t>(bm.length, 0)) << nblocks;
        EXPECT_TRUE(bm.guard_intact()) << nblocks;
        EXPECT_FALSE(map.segment_may_have_changed(rel, 0, 1));
    }
    /* nblocks == 0 writes nothing at all. */
    Bitmap empty(0);
    EXPECT_EQ(map.segment_pagemap(rel, 0, 0, 1, empty.data(), true), 0u);
    EXPECT_EQ(map.segment_pagemap(rel, 0, 0, 1, empty.data(), false), 0u);
    EXPECT_TRUE(empty.guard_intact());
}

TEST(SegmentPagemap, SummarySkipsProbing)
{
    /*
     * Set both slots of block 3 by hand, without touching the summary: with
     * use_summary the segment is skipped (its summary slot says unchanged),
     * without it the probes find the block.  This proves the summary is what
     * answers for an unchanged segment.
     */
    OwnedMap owned(OwnedMap::geometry(kBigMap, kRelSegSize, 0));
    Map& map = owned.map();
    const RelFork rel = heap_rel();
    const auto s = map.slots_of(rel, 3);
    map.slots()[s.first] = 500;
    map.slots()[s.second] = 500;

    Bitmap with(64);
    EXPECT_EQ(map.segment_pagemap(rel, 0, 64, 100, with.data(), true), 0u);
    EXPECT_EQ(with.bits(), std::set<uint32_t>{});

    Bitmap without(64);
    EXPECT_EQ(map.segment_pagemap(rel, 0, 64, 100, without.data(), false), 1u);
    EXPECT_EQ(without.bits(), std::set<uint32_t>{3});

    /* Once the summary slot covers `since`, the probes run. */
    map.summary()[map.summary_slot_index(rel, 3)] = 100;
    Bitmap after(64);
    EXPECT_EQ(map.segment_pagemap(rel, 0, 64, 100, after.data(), true), 1u);
    EXPECT_EQ(after.bits(), std::set<uint32_t>{3});
    /* ... but a summary slot below `since` still skips. */
    Bitmap later(64);
    EXPECT_EQ(map.segment_pagemap(rel, 0, 64, 101, later.data(), true), 0u);
}

TEST(SegmentPagemap, ExactlyTheMarkedBits)
{
    OwnedMap owned(OwnedMap::geometry(kBigMap, kRelSegSize, 0));
    Map& map = owned.map();
    const RelFork rel = heap_rel();
    const std::set<uint32_t> marked = {0, 1, 7, 8, 9, 63, 64, 1000, 4095, 65536, kRelSegSize - 1};
    for (uint32_t b : marked)
        map.mark(rel, b, 2000);

    Bitmap bm(kRelSegSize);
    EXPECT_EQ(map.segment_pagemap(rel, 0, kRelSegSize, 2000, bm.data(), true), marked.size());
    EXPECT_EQ(bm.bits(), marked);
    EXPECT_TRUE(bm.guard_intact());
    /* Raw bytes of the first two groups: blocks 0, 1, 7 -> 0x83; blocks 8, 9 -> 0x03. */
    EXPECT_EQ(bm.bytes[0], 0x83);
    EXPECT_EQ(bm.bytes[1], 0x03);
    EXPECT_EQ(bm.bytes[kRelSegSize / 8 - 1], 0x80);

    /* Since a later LSN, nothing. */
    Bitmap none(kRelSegSize);
    EXPECT_EQ(map.segment_pagemap(rel, 0, kRelSegSize, 2001, none.data(), true), 0u);
    EXPECT_EQ(none.bits(), std::set<uint32_t>{});

    /* The other forks of the relation are unaffected. */
    for (uint8_t fork = 1; fork <= ptrack::kMaxFork; ++fork) {
        Bitmap other(kRelSegSize);
        EXPECT_EQ(map.segment_pagemap(heap_rel(16385, fork), 0, kRelSegSize, 1, other.data(), false), 0u)
            << "fork " << int{fork};
    }
}

TEST(SegmentPagemap, SinceSelectsNewerMarks)
{
    OwnedMap owned(OwnedMap::geometry(kBigMap, kRelSegSize, 0));
    Map& map = owned.map();
    const RelFork rel = heap_rel();
    map.mark(rel, 10, 100);
    map.mark(rel, 20, 200);
    map.mark(rel, 30, 300);
    Bitmap bm(64);
    EXPECT_EQ(map.segment_pagemap(rel, 0, 64, 100, bm.data()), 3u);
    EXPECT_EQ(bm.bits(), (std::set<uint32_t>{10, 20, 30}));
    EXPECT_EQ(map.segment_pagemap(rel, 0, 64, 101, bm.data()), 2u);
    EXPECT_EQ(bm.bits(), (std::set<uint32_t>{20, 30}));
    EXPECT_EQ(map.segment_pagemap(rel, 0, 64, 300, bm.data()), 1u);
    EXPECT_EQ(bm.bits(), (std::set<uint32_t>{30}));
    EXPECT_EQ(map.segment_pagemap(rel, 0, 64, 301, bm.data()), 0u);
    EXPECT_EQ(bm.bits(), (std::set<uint32_t>{}));
    EXPECT_TRUE(bm.guard_intact());
}

TEST(SegmentPagemap, BlocksAreRelativeToSegment)
{
    OwnedMap owned(OwnedMap::geometry(kBigMap, kRelSegSize, 0));
    Map& map = owned.map();
    const RelFork rel = heap_rel();
    map.mark(rel, kRelSegSize * 2 + 5, 777);

    EXPECT_TRUE(map.segment_may_have_changed(rel, 2, 777));
    for (uint32_t segno : {0u, 1u, 3u}) {
        EXPECT_FALSE(map.segment_may_have_changed(rel, segno, 1)) << segno;
        Bitmap bm(kRelSegSize);
        EXPECT_EQ(map.segment_pagemap(rel, segno, kRelSegSize, 1, bm.data(), true), 0u) << segno;
        EXPECT_EQ(bm.bits(), std::set<uint32_t>{}) << segno;
        Bitmap probed(kRelSegSize);
        EXPECT_EQ(map.segment_pagemap(rel, segno, kRelSegSize, 1, probed.data(), false), 0u) << segno;
    }
    Bitmap bm(kRelSegSize);
    EXPECT_EQ(map.segment_pagemap(rel, 2, kRelSegSize, 777, bm.data(), true), 1u);
    EXPECT_EQ(bm.bits(), std::set<uint32_t>{5});
    EXPECT_EQ(bm.bytes[0], 0x20);

    /* Last block of segment 1 and first of segment 3, on a small segment size too. */
    OwnedMap small(OwnedMap::geometry(kBigMap, 64, 0));
    Map& sm = small.map();
    sm.mark(rel, 64 * 2 - 1, 5);
    sm.mark(rel, 64 * 3, 5);
    Bitmap b1(64);
    EXPECT_EQ(sm.segment_pagemap(rel, 1, 64, 5, b1.data()), 1u);
    EXPECT_EQ(b1.bits(), std::set<uint32_t>{63});
    Bitmap b2(64);
    EXPECT_EQ(sm.segment_pagemap(rel, 2, 64, 5, b2.data()), 0u);
    Bitmap b3(64);
    EXPECT_EQ(sm.segment_pagemap(rel, 3, 64, 5, b3.data()), 1u);
    EXPECT_EQ(b3.bits(), std::set<uint32_t>{0});
}

TEST(SegmentPagemap, PartialLastGroup)
{
    /*
     * The file has 13 blocks (the last group is partial); blocks 0..15 are all
     * marked (say the relation was truncated after).  Only bits 0..12 may be
     * set, and only pagemap_bytes(13) = 2 bytes written.
     */
    OwnedMap owned(OwnedMap::geometry(kBigMap, kRelSegSize, 0));
    Map& map = owned.map();
    const RelFork rel = heap_rel();
    for (BlockNumber b = 0; b < 16; ++b)
        map.mark(rel, b, 50);
    for (uint32_t nblocks = 1; nblocks <= 16; ++nblocks) {
        for (bool use_summary : {true, false}) {
            Bitmap bm(nblocks);
            EXPECT_EQ(map.segment_pagemap(rel, 0, nblocks, 50, bm.data(), use_summary), nblocks);
            std::set<uint32_t> want;
            for (uint32_t b = 0; b < nblocks; ++b)
                want.insert(b);
            EXPECT_EQ(bm.bits(), want) << "nblocks " << nblocks;
            EXPECT_TRUE(bm.guard_intact()) << "nblocks " << nblocks;
        }
    }
    Bitmap bm(13);
    map.segment_pagemap(rel, 0, 13, 50, bm.data());
    EXPECT_EQ(bm.length, 2u);
    EXPECT_EQ(bm.bytes[0], 0xFF);
    EXPECT_EQ(bm.bytes[1], 0x1F);
    EXPECT_EQ(bm.bytes[2], kGuard);

    /* Same on a segment > 0, with a partial group and a marked block past nblocks. */
    map.mark(rel, kRelSegSize + 21, 60);
    map.mark(rel, kRelSegSize + 18, 60);
    Bitmap seg1(21);
    EXPECT_EQ(map.segment_pagemap(rel, 1, 21, 60, seg1.data()), 1u);
    EXPECT_EQ(seg1.bits(), std::set<uint32_t>{18});
    EXPECT_TRUE(seg1.guard_intact());
}

TEST(SegmentPagemap, SummaryOnAndOffAgreeOnBigMap)
{
    /*
     * Random marks over 8 relation forks x 4 segments (64 blocks each) on a
     * 16 MB map, where no collision is expected: with and without the
     * summary, the bitmap is exactly the set of blocks marked at or after
     * `since`.
     */
    OwnedMap owned(OwnedMap::geometry(kBigMap, 64, 0));
    Map& map = owned.map();
    std::mt19937_64 rng(51);
    std::vector<RelFork> rels;
    for (uint32_t r = 0; r < 4; ++r)
        for (uint8_t f = 0; f < 2; ++f)
            rels.push_back(RelFork{1663, 16384, 20000 + r, f});
    std::map<std::pair<size_t, BlockNumber>, Lsn> latest;
    for (int i = 0; i < 300; ++i) {
        const size_t r = rng() % rels.size();
        const BlockNumber b = static_cast<BlockNumber>(rng() % (64 * 4 - 5)); /* segment 3 partly unused */
        const Lsn lsn = 1 + rng() % 10000;
        map.mark(rels[r], b, lsn);
        Lsn& l = latest[{r, b}];
        l = std::max(l, lsn);
    }
    int segments_with_bits = 0;
    int segments_empty = 0;
    for (Lsn since : {Lsn{1}, Lsn{2000}, Lsn{5000}, Lsn{9000}, Lsn{9990}, Lsn{10001}}) {
        for (size_t r = 0; r < rels.size(); ++r) {
            for (uint32_t segno = 0; segno < 5; ++segno) {
                for (uint32_t nblocks : {64u, 59u, 3u}) {
                    std::set<uint32_t> want;
                    for (uint32_t b = 0; b < nblocks; ++b) {
                        auto it = latest.find({r, segno * 64 + b});
                        if (it != latest.end() && it->second >= since)
                            want.insert(b);
                    }
                    Bitmap on(nblocks);
                    Bitmap off(nblocks);
                    const uint32_t c_on = map.segment_pagemap(rels[r], segno, nblocks, since, on.data(), true);
                    const uint32_t c_off = map.segment_pagemap(rels[r], segno, nblocks, since, off.data(), false);
                    ASSERT_EQ(on.bits(), want) << "rel " << r << " seg " << segno << " since " << since;
                    ASSERT_EQ(on.content(), off.content()) << "rel " << r << " seg " << segno << " since " << since;
                    ASSERT_EQ(c_on, want.size());
                    ASSERT_EQ(c_off, want.size());
                    ASSERT_TRUE(on.guard_intact());
                    ASSERT_TRUE(off.guard_intact());
                    segments_with_bits += !want.empty();
                    segments_empty += want.empty();
                }
            }
        }
    }
    /* Both cases occur, so the comparison is meaningful. */
    EXPECT_GT(segments_with_bits, 50);
    EXPECT_GT(segments_empty, 50);
}

TEST(SegmentPagemap, SummarySkipsUnchangedRangesOfASegment)
{
    /*
     * A 1 GB segment has a summary slot per 1024 blocks (8 MB).  Block 3 of
     * range 5 is marked; block 1 of range 7 gets its two slots set by hand,
     * with no summary entry.  With the summary, range 7 is not probed and
     * only the marked block is listed; without it, both are.
     */
    OwnedMap owned(OwnedMap::geometry(kBigMap, kRelSegSize, 0));
    Map& map = owned.map();
    const RelFork rel = heap_rel();
    const BlockNumber first = kRelSegSize; /* segment 1 */
    const BlockNumber marked = 5 * ptrack::kSummaryRangeBlocks + 3;
    const BlockNumber planted = 7 * ptrack::kSummaryRangeBlocks + 1;
    map.mark(rel, first + marked, 1000);
    const auto s = map.slots_of(rel, first + planted);
    map.slots()[s.first] = 2000;
    map.slots()[s.second] = 2000;

    Bitmap with(kRelSegSize);
    EXPECT_EQ(map.segment_pagemap(rel, 1, kRelSegSize, 1000, with.data(), true), 1u);
    EXPECT_EQ(with.bits(), std::set<uint32_t>{marked});
    Bitmap without(kRelSegSize);
    EXPECT_EQ(map.segment_pagemap(rel, 1, kRelSegSize, 1000, without.data(), false), 2u);
    EXPECT_EQ(without.bits(), (std::set<uint32_t>{marked, planted}));

    EXPECT_TRUE(map.segment_may_have_changed(rel, 1, 1000));
    EXPECT_FALSE(map.segment_may_have_changed(rel, 1, 1001));
    EXPECT_FALSE(map.segment_may_have_changed(rel, 0, 1));
    EXPECT_FALSE(map.segment_may_have_changed(rel, 2, 1));

    /* The last block of a segment uses the window's last slot, and is seen. */
    map.mark(rel, 2 * kRelSegSize + kRelSegSize - 1, 3000);
    EXPECT_TRUE(map.segment_may_have_changed(rel, 2, 3000));
    Bitmap last(kRelSegSize);
    EXPECT_EQ(map.segment_pagemap(rel, 2, kRelSegSize, 3000, last.data(), true), 1u);
    EXPECT_EQ(last.bits(), std::set<uint32_t>{kRelSegSize - 1});
}

TEST(SegmentPagemap, RangeSummaryNeverHidesAMark)
{
    /*
     * Random marks over 3 relation forks x 2 full 1 GB segments, on a 16 MB
     * map (exact bitmaps expected) and on a 64 KB map (whose 128 summary
     * slots are all shared by every segment's window, and whose lines
     * collide): every block marked at or after `since` is listed, with and
     * without the summary, and a segment holding one is never reported
     * unchanged.  On the big map the summary path is exact.
     */
    for (uint64_t bytes : {kBigMap, uint64_t{64 * 1024}}) {
        OwnedMap owned(OwnedMap::geometry(bytes, kRelSegSize, 0));
        Map& map = owned.map();
        std::mt19937_64 rng(53);
        std::vector<RelFork> rels{heap_rel(30000), heap_rel(30001), RelFork{1663, 16384, 30000, ptrack::kVisibilityMapFork}};
        std::map<std::pair<size_t, BlockNumber>, Lsn> latest;
        for (int i = 0; i < 400; ++i) {
            const size_t r = rng() % rels.size();
            const BlockNumber b = static_cast<BlockNumber>(rng() % (2 * kRelSegSize));
            const Lsn lsn = 1 + rng() % 10000;
            map.mark(rels[r], b, lsn);
            Lsn& l = latest[{r, b}];
            l = std::max(l, lsn);
        }
        for (Lsn since : {Lsn{1}, Lsn{5000}, Lsn{9900}}) {
            for (size_t r = 0; r < rels.size(); ++r) {
                for (uint32_t segno = 0; segno < 2; ++segno) {
                    std::set<uint32_t> want;
                    for (const auto& [key, lsn] : latest)
                        if (key.first == r && key.second / kRelSegSize == segno && lsn >= since)
                            want.insert(key.second % kRelSegSize);
                    Bitmap on(kRelSegSize);
                    Bitmap off(kRelSegSize);
                    map.segment_pagemap(rels[r], segno, kRelSegSize, since, on.data(), true);
                    map.segment_pagemap(rels[r], segno, kRelSegSize, since, off.data(), false);
                    const std::set<uint32_t> got_on = on.bits();
                    const std::set<uint32_t> got_off = off.bits();
                    for (uint32_t b : want) {
                        ASSERT_TRUE(got_on.count(b)) << bytes << " rel " << r << " seg " << segno << " block " << b;
                        ASSERT_TRUE(got_off.count(b)) << bytes << " rel " << r << " seg " << segno << " block " << b;
                    }
                    if (!want.empty()) {
                        ASSERT_TRUE(map.segment_may_have_changed(rels[r], segno, since));
                    }
                    /* The summary only removes bits, never adds them. */
                    ASSERT_TRUE(std::includes(got_off.begin(), got_off.end(), got_on.begin(), got_on.end()));
                    if (bytes == kBigMap) {
                        ASSERT_EQ(got_on, want) << "rel " << r << " seg " << segno << " since " << since;
                    }
                }
            }
        }
    }
}

TEST(SegmentPagemap, SummaryNeverHidesAMarkOnSmallMap)
{
    /*
     * The same on a 64 KB map, where lines and summary slots collide.  The
     * summary may only skip probing where probing would find nothing but
     * collisions: wherever the summary says "maybe changed", both paths give
     * the same bitmap; where it says "unchanged", the summary path gives an
     * empty bitmap and no block of that segment was really marked since.
     * Every really marked block is listed by both paths.
     */
    OwnedMap owned(OwnedMap::geometry(64 * 1024, 64, 0));
    Map& map = owned.map();
    std::mt19937_64 rng(52);
    std::vector<RelFork> rels;
    for (uint32_t r = 0; r < 20; ++r)
        for (uint8_t f = 0; f < 3; ++f)
            rels.push_back(RelFork{1663, 16384, 30000 + r, f});
    std::map<std::pair<size_t, BlockNumber>, Lsn> latest;
    for (int i = 0; i < 600; ++i) {
        const size_t r = rng() % rels.size();
        const BlockNumber b = static_cast<BlockNumber>(rng() % (64 * 6));
        const Lsn lsn = 1 + rng() % 10000;
        map.mark(rels[r], b, lsn);
        Lsn& l = latest[{r, b}];
        l = std::max(l, lsn);
    }
    int compared = 0;
    int skipped = 0;
    for (Lsn since : {Lsn{1}, Lsn{3000}, Lsn{7000}, Lsn{9500}, Lsn{9990}}) {
        for (size_t r = 0; r < rels.size(); ++r) {
            for (uint32_t segno = 0; segno < 8; ++segno) {
                const uint32_t nblocks = 61;
                bool really_changed = false;
                Bitmap on(nblocks);
                Bitmap off(nblocks);
                const uint32_t c_on = map.segment_pagemap(rels[r], segno, nblocks, since, on.data(), true);
                const uint32_t c_off = map.segment_pagemap(rels[r], segno, nblocks, since, off.data(), false);
                const std::set<uint32_t> on_bits = on.bits();
                const std::set<uint32_t> off_bits = off.bits();
                ASSERT_EQ(c_on, on_bits.size());
                ASSERT_EQ(c_off, off_bits.size());
                for (uint32_t b = 0; b < nblocks; ++b) {
                    auto it = latest.find({r, segno * 64 + b});
                    if (it != latest.end() && it->second >= since) {
                        really_changed = true;
                        ASSERT_TRUE(on_bits.count(b)) << "false negative with summary";
                        ASSERT_TRUE(off_bits.count(b)) << "false negative without summary";
                    }
                }
                if (map.segment_may_have_changed(rels[r], segno, since)) {
                    ASSERT_EQ(on.content(), off.content());
                    ++compared;
                } else {
                    ASSERT_FALSE(really_changed);
                    ASSERT_EQ(c_on, 0u);
                    ++skipped;
                }
            }
        }
    }
    EXPECT_GT(compared, 100);
    EXPECT_GT(skipped, 100);
}
