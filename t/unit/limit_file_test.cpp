/*
 * t/unit/limit_file_test.cpp -- proves the on-disk form of the limit table
 * (ptrack/limit_file.h):
 *
 * - a table round-trips: every bucket's steps, the covered LSN, and so every
 *   answer; an empty table is a bare header; a table with every bucket full
 *   encodes to exactly limit_file_max_bytes();
 * - every corruption is refused with its own status, and leaves the
 *   destination table untouched: short file, bad magic, any flipped header
 *   byte, any flipped body byte, a truncated or extended file, another
 *   version, another bucket count, another placement, another cluster, and
 *   bodies with valid checksums but broken content (bucket out of range or
 *   out of order, step count 0 or too big, steps not increasing, a record
 *   cut short);
 * - every status has a reason text.
 *
 * The CRC-32C is a bitwise implementation written for the test, independent
 * of the server's (as in map_file_test.cpp).
 */
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "crc32c_oracle.h"
#include "limit_fixture.h"
#include "ptrack/limit_file.h"
#include "ptrack/limit_table.h"

using namespace ptrack;
using ptrack_test::bitwise_crc32c;
using ptrack_test::OwnedTable;

namespace {

constexpr uint64_t kSystem = 7291234567890123456ULL;
constexpr uint32_t kMajor = 18;
constexpr Lsn kCovered = 0x5000028;
constexpr uint32_t kBuckets = 256;

/* The documented layout (ptrack/limit_file.h), restated by the test. */
constexpr size_t kOffVersion = 8, kOffBuckets = 12, kOffSystem = 16, kOffPlacement = 32, kOffBodyBytes = 40,
                 kOffBodyCrc = 44, kOffHeaderCrc = 60;

template <typename T>
void put(std::vector<uint8_t>& f, size_t off, T v)
{
    std::memcpy(f.data() + off, &v, sizeof(T));
}

/* Recomputes body length, body CRC and header CRC, so that only the content is wrong. */
void reseal(std::vector<uint8_t>& f)
{
    put<uint32_t>(f, kOffBodyBytes, static_cast<uint32_t>(f.size() - kLimitFileHeaderBytes));
    put<uint32_t>(f, kOffBodyCrc, bitwise_crc32c(f.data() + kLimitFileHeaderBytes, f.size() - kLimitFileHeaderBytes));
    put<uint32_t>(f, kOffHeaderCrc, bitwise_crc32c(f.data(), kOffHeaderCrc));
}

void fill(LimitTable& table, uint64_t seed)
{
    std::mt19937_64 rng(seed);
    Lsn lsn = 1000;
    for (int i = 0; i < 300; ++i) {
        const RelFork rel{1663, 16384 + static_cast<uint32_t>(rng() % 4), 20000 + static_cast<uint32_t>(rng() % 200),
                          static_cast<uint8_t>(rng() % 4)};
        lsn += 1 + rng() % 500;
        if (rng() % 15 == 0)
            table.set_database_limit(rel.spc_oid, rel.db_oid, lsn);
        else
            table.set_relation_limit(rel, static_cast<uint32_t>(rng() % 3 == 0 ? 0 : rng() % 100000), lsn);
    }
}

std::vector<uint8_t> encode(const LimitTable& table)
{
    std::vector<uint8_t> f(limit_file_max_bytes(table.bucket_count()));
    const size_t n = limit_file_encode(table, kSystem, kMajor, kCovered, bitwise_crc32c, f.data());
    f.resize(n);
    return f;
}

std::string bucket_text(const LimitTable& t, uint32_t b)
{
    LimitSteps s{};
    if (!t.read_bucket(b, &s))
        return "unreadable";
    std::string out = std::to_string(s.count) + ":";
    for (uint32_t j = 0; j < s.count; ++j)
        out += " (" + std::to_string(s.lsn[j]) + "," + std::to_string(s.limit[j]) + ")";
    return out;
}

/* Decodes `f` into a table filled with a sentinel; the status, and whether the table was left alone. */
LimitFileStatus decode_expect_untouched_on_error(const std::vector<uint8_t>& f, uint32_t buckets = kBuckets,
                                                 uint64_t system = kSystem, uint32_t major = kMajor)
{
    OwnedTable dest(buckets);
    dest.table.set_relation_limit(RelFork{1, 2, 3, 0}, 77, 999);
    std::vector<std::string> before;
    for (uint32_t b = 0; b < buckets; ++b)
        before.push_back(bucket_text(dest.table, b));
    Lsn covered = 12345;
    const LimitFileStatus s = limit_file_decode(f.data(), f.size(), system, major, bitwise_crc32c, &dest.table, &covered);
    if (s != LimitFileStatus::kOk) {
        EXPECT_EQ(covered, 12345u) << "covered LSN set by a failed decode";
        for (uint32_t b = 0; b < buckets; ++b)
            EXPECT_EQ(bucket_text(dest.table, b), before[b]) << "bucket " << b << " changed by a failed decode";
    }
    return s;
}

}  // namespace

TEST(LimitFile, RoundTripsEveryBucketAndTheCoveredLsn)
{
    OwnedTable src(kBuckets);
    fill(src.table, 1);
    const std::vector<uint8_t> f = encode(src.table);
    ASSERT_GT(f.size(), kLimitFileHeaderBytes);

    OwnedTable dst(kBuckets);
    dst.table.set_relation_limit(RelFork{9, 9, 9, 0}, 1, 5); /* must be overwritten */
    Lsn covered = 0;
    ASSERT_EQ(limit_file_decode(f.data(), f.size(), kSystem, kMajor, bitwise_crc32c, &dst.table, &covered),
              LimitFileStatus::kOk);
    EXPECT_EQ(covered, kCovered);
    for (uint32_t b = 0; b < kBuckets; ++b)
        ASSERT_EQ(bucket_text(dst.table, b), bucket_text(src.table, b)) << "bucket " << b;
    for (uint32_t rel = 20000; rel < 20200; ++rel)
        for (Lsn since : {Lsn{0}, Lsn{50000}, Lsn{100000}, Lsn{UINT64_MAX}}) {
            const RelFork r{1663, 16385, rel, kMainFork};
            ASSERT_EQ(dst.table.first_changed_block(r, since), src.table.first_changed_block(r, since))
                << "rel " << rel << " since " << since;
        }
}

TEST(LimitFile, EmptyTableIsABareHeader)
{
    OwnedTable src(kBuckets);
    const std::vector<uint8_t> f = encode(src.table);
    EXPECT_EQ(f.size(), kLimitFileHeaderBytes);
    OwnedTable dst(kBuckets);
    dst.table.set_relation_limit(RelFork{9, 9, 9, 0}, 1, 5);
    Lsn covered = 0;
    ASSERT_EQ(limit_file_decode(f.data(), f.size(), kSystem, kMajor, bitwise_crc32c, &dst.table, &covered),
              LimitFileStatus::kOk);
    for (uint32_t b = 0; b < kBuckets; ++b)
        ASSERT_EQ(bucket_text(dst.table, b), "0:") << "bucket " << b << " not emptied";
}

TEST(LimitFile, FullTableFillsTheMaximumSize)
{
    OwnedTable src(kBuckets);
    for (uint32_t b = 0; b < kBuckets; ++b)
        for (uint32_t j = 0; j < kLimitSteps; ++j)
            src.table.add(b, 100 + j, 10 + j);
    const std::vector<uint8_t> f = encode(src.table);
    EXPECT_EQ(f.size(), limit_file_max_bytes(kBuckets));
    EXPECT_EQ(decode_expect_untouched_on_error(f), LimitFileStatus::kOk);
}

TEST(LimitFile, RefusesShortFiles)
{
    OwnedTable src(kBuckets);
    const std::vector<uint8_t> f = encode(src.table);
    for (size_t len = 0; len < kLimitFileHeaderBytes; ++len)
        EXPECT_EQ(decode_expect_untouched_on_error(std::vector<uint8_t>(f.begin(), f.begin() + len)),
                  LimitFileStatus::kTooShort)
            << "length " << len;
}

TEST(LimitFile, EveryFlippedHeaderByteIsDetected)
{
    OwnedTable src(kBuckets);
    fill(src.table, 2);
    const std::vector<uint8_t> f = encode(src.table);
    for (size_t i = 0; i < kLimitFileHeaderBytes; ++i) {
        std::vector<uint8_t> g = f;
        g[i] ^= 0x04;
        const LimitFileStatus s = decode_expect_untouched_on_error(g);
        if (i < 8)
            EXPECT_EQ(s, LimitFileStatus::kBadMagic) << "byte " << i;
        else
            EXPECT_EQ(s, LimitFileStatus::kBadHeaderCrc) << "byte " << i;
    }
}

TEST(LimitFile, EveryFlippedBodyByteIsDetected)
{
    OwnedTable src(kBuckets);
    fill(src.table, 3);
    const std::vector<uint8_t> f = encode(src.table);
    for (size_t i = kLimitFileHeaderBytes; i < f.size(); ++i) {
        std::vector<uint8_t> g = f;
        g[i] ^= 0x40;
        EXPECT_EQ(decode_expect_untouched_on_error(g), LimitFileStatus::kBadBodyCrc) << "byte " << i;
    }
}

TEST(LimitFile, RefusesTruncatedOrExtendedFiles)
{
    OwnedTable src(kBuckets);
    fill(src.table, 4);
    const std::vector<uint8_t> f = encode(src.table);
    EXPECT_EQ(decode_expect_untouched_on_error(std::vector<uint8_t>(f.begin(), f.end() - 1)),
              LimitFileStatus::kBadLength);
    EXPECT_EQ(decode_expect_untouched_on_error(std::vector<uint8_t>(f.begin(), f.begin() + kLimitFileHeaderBytes)),
              LimitFileStatus::kBadLength);
    std::vector<uint8_t> longer = f;
    longer.push_back(0);
    EXPECT_EQ(decode_expect_untouched_on_error(longer), LimitFileStatus::kBadLength);
}

TEST(LimitFile, RefusesOtherVersionSizePlacementAndCluster)
{
    OwnedTable src(kBuckets);
    fill(src.table, 5);
    const std::vector<uint8_t> f = encode(src.table);

    std::vector<uint8_t> g = f;
    put<uint32_t>(g, kOffVersion, kLimitFileVersion + 1);
    reseal(g);
    EXPECT_EQ(decode_expect_untouched_on_error(g), LimitFileStatus::kBadVersion);

    EXPECT_EQ(decode_expect_untouched_on_error(f, kBuckets * 2), LimitFileStatus::kBadBucketCount);
    g = f;
    put<uint32_t>(g, kOffBuckets, kBuckets * 2);
    reseal(g);
    EXPECT_EQ(decode_expect_untouched_on_error(g, kBuckets * 2), LimitFileStatus::kBadPlacement)
        << "the bucket count changed without the placement: keys would land elsewhere";

    g = f;
    put<uint64_t>(g, kOffPlacement, limit_placement_fingerprint(kBuckets) ^ 1);
    reseal(g);
    EXPECT_EQ(decode_expect_untouched_on_error(g), LimitFileStatus::kBadPlacement);

    EXPECT_EQ(decode_expect_untouched_on_error(f, kBuckets, kSystem + 1), LimitFileStatus::kOtherSystem);
    g = f;
    put<uint64_t>(g, kOffSystem, kSystem + 1);
    reseal(g);
    EXPECT_EQ(decode_expect_untouched_on_error(g), LimitFileStatus::kOtherSystem);

    /* Another PostgreSQL major version; a file from before the field (0) was written under 15. */
    EXPECT_EQ(decode_expect_untouched_on_error(f, kBuckets, kSystem, 17), LimitFileStatus::kOtherMajor);
    g = f;
    put<uint32_t>(g, 48, 0);
    reseal(g);
    EXPECT_EQ(decode_expect_untouched_on_error(g), LimitFileStatus::kOtherMajor);
    EXPECT_EQ(decode_expect_untouched_on_error(g, kBuckets, kSystem, kUnrecordedServerMajor), LimitFileStatus::kOk);
}

TEST(LimitFile, PlacementDependsOnTheBucketCount)
{
    EXPECT_NE(limit_placement_fingerprint(kBuckets), limit_placement_fingerprint(kBuckets + 1));
    EXPECT_EQ(limit_placement_fingerprint(kBuckets), limit_placement_fingerprint(kBuckets));
}

namespace {

/* A body record: bucket, count, steps. */
void append_record(std::vector<uint8_t>& f, uint32_t bucket, uint32_t count,
                   const std::vector<std::pair<uint64_t, uint32_t>>& steps)
{
    const size_t off = f.size();
    f.resize(off + 8 + steps.size() * 12);
    put<uint32_t>(f, off, bucket);
    put<uint32_t>(f, off + 4, count);
    for (size_t j = 0; j < steps.size(); ++j) {
        put<uint64_t>(f, off + 8 + j * 12, steps[j].first);
        put<uint32_t>(f, off + 8 + j * 12 + 8, steps[j].second);
    }
}

std::vector<uint8_t> with_body(void (*build)(std::vector<uint8_t>&))
{
    OwnedTable src(kBuckets);
    std::vector<uint8_t> f = encode(src.table); /* a valid header */
    build(f);
    reseal(f);
    return f;
}

}  // namespace

TEST(LimitFile, AHandWrittenValidBodyDecodes)
{
    /* The content checks below must not reject a well-formed body: this one passes them. */
    const auto f = with_body([](std::vector<uint8_t>& g) {
        append_record(g, 3, 2, {{100, 0}, {200, 50}});
        append_record(g, 7, 1, {{300, 9}});
    });
    OwnedTable dst(kBuckets);
    Lsn covered = 0;
    ASSERT_EQ(limit_file_decode(f.data(), f.size(), kSystem, kMajor, bitwise_crc32c, &dst.table, &covered),
              LimitFileStatus::kOk);
    EXPECT_EQ(bucket_text(dst.table, 3), "2: (100,0) (200,50)");
    EXPECT_EQ(bucket_text(dst.table, 7), "1: (300,9)");
}

TEST(LimitFile, RefusesInconsistentContentWithValidChecksums)
{
    struct Case {
        const char* what;
        void (*build)(std::vector<uint8_t>&);
    };
    const Case cases[] = {
        {"bucket out of range", [](std::vector<uint8_t>& g) { append_record(g, kBuckets, 1, {{100, 0}}); }},
        {"buckets out of order",
         [](std::vector<uint8_t>& g) {
             append_record(g, 9, 1, {{100, 0}});
             append_record(g, 4, 1, {{100, 0}});
         }},
        {"bucket repeated",
         [](std::vector<uint8_t>& g) {
             append_record(g, 9, 1, {{100, 0}});
             append_record(g, 9, 1, {{200, 0}});
         }},
        {"step count 0", [](std::vector<uint8_t>& g) { append_record(g, 1, 0, {}); }},
        {"step count too big",
         [](std::vector<uint8_t>& g) {
             append_record(g, 1, kLimitSteps + 1, {{1, 1}, {2, 2}, {3, 3}, {4, 4}, {5, 5}});
         }},
        {"LSNs not increasing", [](std::vector<uint8_t>& g) { append_record(g, 1, 2, {{100, 1}, {100, 2}}); }},
        {"limits not increasing", [](std::vector<uint8_t>& g) { append_record(g, 1, 2, {{100, 2}, {200, 2}}); }},
        {"record cut inside its steps", [](std::vector<uint8_t>& g) { append_record(g, 1, 2, {{100, 1}}); }},
        {"record cut inside its header",
         [](std::vector<uint8_t>& g) {
             append_record(g, 1, 1, {{100, 1}});
             g.push_back(2);
             g.push_back(0);
             g.push_back(0);
         }},
    };
    for (const Case& c : cases)
        EXPECT_EQ(decode_expect_untouched_on_error(with_body(c.build)), LimitFileStatus::kBadContent) << c.what;
}

TEST(LimitFile, EveryStatusHasAReason)
{
    for (int s = static_cast<int>(LimitFileStatus::kOk); s <= static_cast<int>(LimitFileStatus::kBadContent); ++s) {
        const char* text = describe_limit_file_status(static_cast<LimitFileStatus>(s));
        ASSERT_NE(text, nullptr);
        EXPECT_GT(std::strlen(text), 5u) << "status " << s;
    }
}
