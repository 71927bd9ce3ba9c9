/*
 * t/unit/pagemap_test.cpp -- proves the page bitmap encoding of the
 * `pagemap` column (docs/design.md section 6, as read by pg_probackup's
 * datapagemap): bit for block b is byte b / 8, mask 1 << (b % 8).
 *
 * - pagemap_bytes is (nblocks + 7) / 8, without 32-bit overflow;
 * - pagemap_set writes exactly that bit (raw bytes asserted) and nothing
 *   else; pagemap_test reads it back and reads blocks past `length` as unset;
 * - pagemap_set_all sets exactly [0, nblocks), including a partial last
 *   byte, and never writes past pagemap_bytes(nblocks);
 * - pagemap_set_from sets exactly [first, nblocks) on top of what is set,
 *   counts only the bits it added, and never writes past
 *   pagemap_bytes(nblocks) (every first/nblocks pair up to 40 blocks, against
 *   a per-bit reference);
 * - pagemap_trimmed_length stops after the last non-zero byte;
 * - pagemap_count counts set bits within `length` only.
 */
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "ptrack/pagemap.h"

using ptrack::pagemap_bytes;
using ptrack::pagemap_count;
using ptrack::pagemap_set;
using ptrack::pagemap_set_all;
using ptrack::pagemap_set_from;
using ptrack::pagemap_test;
using ptrack::pagemap_trimmed_length;

TEST(Pagemap, Bytes)
{
    EXPECT_EQ(pagemap_bytes(0), 0u);
    EXPECT_EQ(pagemap_bytes(1), 1u);
    EXPECT_EQ(pagemap_bytes(7), 1u);
    EXPECT_EQ(pagemap_bytes(8), 1u);
    EXPECT_EQ(pagemap_bytes(9), 2u);
    EXPECT_EQ(pagemap_bytes(16), 2u);
    EXPECT_EQ(pagemap_bytes(17), 3u);
    EXPECT_EQ(pagemap_bytes(131072), 16384u);
    /* (UINT32_MAX + 7) would wrap in 32 bits. */
    EXPECT_EQ(pagemap_bytes(UINT32_MAX), size_t{1} << 29);
    static_assert(pagemap_bytes(13) == 2, "usable in constant expressions");
}

TEST(Pagemap, SetRawBytes)
{
    std::vector<uint8_t> pm(4, 0);
    pagemap_set(pm.data(), 0);
    EXPECT_EQ(pm, (std::vector<uint8_t>{0x01, 0x00, 0x00, 0x00}));
    pagemap_set(pm.data(), 7);
    EXPECT_EQ(pm, (std::vector<uint8_t>{0x81, 0x00, 0x00, 0x00}));
    pagemap_set(pm.data(), 8);
    EXPECT_EQ(pm, (std::vector<uint8_t>{0x81, 0x01, 0x00, 0x00}));
    pagemap_set(pm.data(), 13);
    EXPECT_EQ(pm, (std::vector<uint8_t>{0x81, 0x21, 0x00, 0x00}));
    pagemap_set(pm.data(), 26);
    EXPECT_EQ(pm, (std::vector<uint8_t>{0x81, 0x21, 0x00, 0x04}));
    /* Setting again is idempotent. */
    pagemap_set(pm.data(), 13);
    EXPECT_EQ(pm, (std::vector<uint8_t>{0x81, 0x21, 0x00, 0x04}));

    /* Every single bit of a byte. */
    for (uint32_t b = 0; b < 32; ++b) {
        std::vector<uint8_t> one(4, 0);
        pagemap_set(one.data(), b);
        for (uint32_t i = 0; i < 4; ++i)
            EXPECT_EQ(one[i], i == b / 8 ? (1u << (b % 8)) : 0u) << "block " << b << " byte " << i;
    }
}

TEST(Pagemap, TestReadsBack)
{
    std::vector<uint8_t> pm = {0x81, 0x21, 0x00, 0x04};
    const std::set<uint32_t> set_bits = {0, 7, 8, 13, 26};
    for (uint32_t b = 0; b < 32; ++b)
        EXPECT_EQ(pagemap_test(pm.data(), pm.size(), b), set_bits.count(b) == 1) << b;
    /* Past `length`, blocks read as unset even if memory behind says otherwise. */
    EXPECT_FALSE(pagemap_test(pm.data(), 3, 26));
    EXPECT_TRUE(pagemap_test(pm.data(), 2, 13));
    EXPECT_FALSE(pagemap_test(pm.data(), 0, 0));
    EXPECT_FALSE(pagemap_test(pm.data(), 4, 32));
    EXPECT_FALSE(pagemap_test(pm.data(), 4, UINT32_MAX));

    /* Round trip over random sets. */
    std::mt19937 rng(61);
    for (int round = 0; round < 100; ++round) {
        const uint32_t nblocks = 1 + rng() % 2000;
        std::vector<uint8_t> bm(pagemap_bytes(nblocks), 0);
        std::set<uint32_t> want;
        for (int i = 0; i < 50; ++i) {
            const uint32_t b = rng() % nblocks;
            want.insert(b);
            pagemap_set(bm.data(), b);
        }
        for (uint32_t b = 0; b < nblocks; ++b)
            ASSERT_EQ(pagemap_test(bm.data(), bm.size(), b), want.count(b) == 1);
        ASSERT_EQ(pagemap_count(bm.data(), bm.size()), want.size());
    }
}

TEST(Pagemap, SetAll)
{
    for (uint32_t nblocks = 0; nblocks <= 40; ++nblocks) {
        std::vector<uint8_t> pm(8, 0);
        pm[pagemap_bytes(nblocks)] = 0x5A; /* guard just past the bitmap */
        EXPECT_EQ(pagemap_set_all(pm.data(), nblocks), nblocks);
        for (uint32_t b = 0; b < 8 * 8; ++b) {
            if (b / 8 == pagemap_bytes(nblocks))
                continue;
            EXPECT_EQ(pagemap_test(pm.data(), pm.size(), b), b < nblocks) << "nblocks " << nblocks << " b " << b;
        }
        EXPECT_EQ(pm[pagemap_bytes(nblocks)], 0x5A) << "wrote past the bitmap, nblocks " << nblocks;
        EXPECT_EQ(pagemap_count(pm.data(), pagemap_bytes(nblocks)), nblocks);
    }
    /* Raw bytes for 13 blocks: 0xFF then the low 5 bits. */
    std::vector<uint8_t> pm(3, 0);
    pagemap_set_all(pm.data(), 13);
    EXPECT_EQ(pm, (std::vector<uint8_t>{0xFF, 0x1F, 0x00}));
    /* A partial last byte is exactly the low bits even over garbage. */
    std::vector<uint8_t> dirty(3, 0xEE);
    pagemap_set_all(dirty.data(), 10);
    EXPECT_EQ(dirty, (std::vector<uint8_t>{0xFF, 0x03, 0xEE}));
    /* A whole FSM segment. */
    std::vector<uint8_t> full(16384 + 1, 0);
    EXPECT_EQ(pagemap_set_all(full.data(), 131072), 131072u);
    EXPECT_EQ(pagemap_count(full.data(), 16384), 131072u);
    EXPECT_EQ(full[16384], 0);
}

TEST(Pagemap, SetFrom)
{
    std::mt19937 rng(5);
    for (uint32_t nblocks = 0; nblocks <= 40; ++nblocks)
        for (uint32_t first = 0; first <= nblocks + 9; ++first)
            for (int pattern = 0; pattern < 4; ++pattern) {
                /* Some bits set beforehand, and a guard byte past the bitmap. */
                const size_t bytes = pagemap_bytes(nblocks);
                std::vector<uint8_t> pm(bytes + 1, 0);
                std::set<uint32_t> before;
                for (uint32_t b = 0; b < nblocks; ++b)
                    if (pattern != 0 && rng() % (pattern + 1) == 0) {
                        pagemap_set(pm.data(), b);
                        before.insert(b);
                    }
                pm[bytes] = 0x5A;
                uint32_t expected_added = 0;
                for (uint32_t b = first; b < nblocks; ++b)
                    expected_added += before.count(b) == 0;
                EXPECT_EQ(pagemap_set_from(pm.data(), first, nblocks), expected_added)
                    << "first " << first << " nblocks " << nblocks << " pattern " << pattern;
                for (uint32_t b = 0; b < 8 * bytes; ++b) {
                    const bool want = b < nblocks && (b >= first || before.count(b) != 0);
                    ASSERT_EQ(pagemap_test(pm.data(), bytes, b), want)
                        << "block " << b << " first " << first << " nblocks " << nblocks << " pattern " << pattern;
                }
                ASSERT_EQ(pm[bytes], 0x5A) << "wrote past the bitmap: first " << first << " nblocks " << nblocks;
            }
    /* A whole segment from block 5: 131067 bits. */
    std::vector<uint8_t> full(pagemap_bytes(131072), 0);
    EXPECT_EQ(pagemap_set_from(full.data(), 5, 131072), 131067u);
    EXPECT_EQ(full[0], 0xE0);
    EXPECT_EQ(full.back(), 0xFF);
}

TEST(Pagemap, TrimmedLength)
{
    const std::vector<uint8_t> zeros(10, 0);
    EXPECT_EQ(pagemap_trimmed_length(zeros.data(), zeros.size()), 0u);
    EXPECT_EQ(pagemap_trimmed_length(zeros.data(), 0), 0u);
    const std::vector<uint8_t> a = {0x01, 0x00, 0x00};
    EXPECT_EQ(pagemap_trimmed_length(a.data(), a.size()), 1u);
    const std::vector<uint8_t> b = {0x00, 0x00, 0x04, 0x00};
    EXPECT_EQ(pagemap_trimmed_length(b.data(), b.size()), 3u);
    const std::vector<uint8_t> c = {0x00, 0x80};
    EXPECT_EQ(pagemap_trimmed_length(c.data(), c.size()), 2u);
    /* Zero bytes in the middle are kept. */
    const std::vector<uint8_t> d = {0x10, 0x00, 0x00, 0x01, 0x00, 0x00};
    EXPECT_EQ(pagemap_trimmed_length(d.data(), d.size()), 4u);
    /* Only the first `length` bytes are looked at. */
    EXPECT_EQ(pagemap_trimmed_length(d.data(), 3), 1u);
    /* Trimming loses no set bit. */
    EXPECT_EQ(pagemap_count(d.data(), pagemap_trimmed_length(d.data(), d.size())), pagemap_count(d.data(), d.size()));
}

TEST(Pagemap, Count)
{
    const std::vector<uint8_t> pm = {0xFF, 0x00, 0x81, 0x10, 0xFF};
    EXPECT_EQ(pagemap_count(pm.data(), 0), 0u);
    EXPECT_EQ(pagemap_count(pm.data(), 1), 8u);
    EXPECT_EQ(pagemap_count(pm.data(), 3), 10u);
    EXPECT_EQ(pagemap_count(pm.data(), 4), 11u);
    EXPECT_EQ(pagemap_count(pm.data(), 5), 19u);
    /* Large bitmaps count past 32 bits' worth of bytes without trouble. */
    std::vector<uint8_t> big(1 << 20, 0xFF);
    EXPECT_EQ(pagemap_count(big.data(), big.size()), uint64_t{8} << 20);
}
