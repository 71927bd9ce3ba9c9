/*
 * bypass_journal_test.cpp -- ptrack.bypass entries: a round trip, and every
 * damaged entry refused (a torn append must never be applied as another
 * fork or length).
 */
#include <gtest/gtest.h>

#include <cstring>

#include "crc32c_oracle.h"
#include "ptrack/bypass_journal.h"

using ptrack::BypassEntry;
using ptrack::kBypassEntryBytes;
using ptrack::RelFork;
using ptrack_test::bitwise_crc32c;

namespace {

BypassEntry sample()
{
    return BypassEntry{RelFork{1663, 16384, 24601, 0}, 1234567, 0x00000001DEADBEEFull};
}

}  // namespace

TEST(BypassJournal, RoundTrip)
{
    uint8_t raw[kBypassEntryBytes];
    ptrack::bypass_encode_entry(sample(), bitwise_crc32c, raw);
    EXPECT_EQ(std::memcmp(raw, "PTBY", 4), 0) << "the magic reads PTBY in a hex dump";
    BypassEntry back{};
    ASSERT_TRUE(ptrack::bypass_decode_entry(raw, bitwise_crc32c, &back));
    EXPECT_TRUE(back.rel == sample().rel);
    EXPECT_EQ(back.nblocks, sample().nblocks);
    EXPECT_EQ(back.lsn, sample().lsn);
}

TEST(BypassJournal, EveryFlippedBitOfTheCheckedBytesIsRefused)
{
    uint8_t raw[kBypassEntryBytes];
    ptrack::bypass_encode_entry(sample(), bitwise_crc32c, raw);
    for (size_t byte = 0; byte < 36; ++byte)
        for (int bit = 0; bit < 8; ++bit) {
            uint8_t damaged[kBypassEntryBytes];
            std::memcpy(damaged, raw, sizeof(raw));
            damaged[byte] ^= static_cast<uint8_t>(1u << bit);
            BypassEntry out{};
            EXPECT_FALSE(ptrack::bypass_decode_entry(damaged, bitwise_crc32c, &out)) << byte << ":" << bit;
        }
}

TEST(BypassJournal, ZeroesAndForeignForksAreRefused)
{
    uint8_t zeroes[kBypassEntryBytes] = {};
    BypassEntry out{};
    EXPECT_FALSE(ptrack::bypass_decode_entry(zeroes, bitwise_crc32c, &out));
    BypassEntry bad = sample();
    bad.rel.fork = 7;
    uint8_t raw[kBypassEntryBytes];
    ptrack::bypass_encode_entry(bad, bitwise_crc32c, raw);
    EXPECT_FALSE(ptrack::bypass_decode_entry(raw, bitwise_crc32c, &out));
}
