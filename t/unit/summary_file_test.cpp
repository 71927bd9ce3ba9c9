/*
 * t/unit/summary_file_test.cpp -- proves the summary file
 * (ptrack/summary_file.h):
 *
 * - a round trip: a random change set written and validated reads back
 *   exactly (all three chunk encodings used), with the header's range,
 *   cluster, timeline and counts; blocks at or past a limit are left out;
 *   an empty set makes a valid file; the header is the last write, and a
 *   failed write is reported;
 * - every way a file can be wrong gives its own status: bad magic,
 *   version, header CRC, range, another cluster, another server version,
 *   truncation and extension at every length, body CRC, forks or databases
 *   out of order, undecodable records, counts that do not add up, a flag
 *   this build does not know;
 * - the flags: kSummaryEndsAtRedo round-trips (header and summary_open());
 *   the writer refuses an unknown flag and writes nothing;
 * - fuzzing: random byte changes, with the CRCs recomputed so that the
 *   structure checks are what stands between the damage and the reader,
 *   never crash the validator, and a file it accepts reads without
 *   crashing, within its bounds.
 */
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "change_model.h"
#include "crc32c_oracle.h"
#include "memory_sink.h"
#include "summary_fixture.h"
#include "ptrack/change_set.h"
#include "ptrack/summary_file.h"

using namespace ptrack;
using ptrack_test::bitwise_crc32c;
using ptrack_test::difference;
using ptrack_test::MemorySink;
using ptrack_test::Model;
using ptrack_test::oracle_update;
using ptrack_test::random_changes;
using ptrack_test::read_cursor;

namespace {

constexpr uint64_t kSystem = 7291234567890123456ULL;
constexpr uint32_t kPg = 17;

SummaryHeader header_for(Lsn start, Lsn end)
{
    return ptrack_test::summary_header(kSystem, kPg, 3, start, end);
}

using Buffers = ptrack_test::SummaryBuffers;

/* Writes `set` as a summary of [start, end). */
std::vector<uint8_t> write_set(ChangeSet& set, Lsn start = 0x1000000, Lsn end = 0x2000000,
                               SummaryHeader* written = nullptr)
{
    Buffers b;
    MemorySink sink;
    ChangeCursor* c = set.open_cursor();
    EXPECT_NE(c, nullptr);
    SummaryHeader w{};
    EXPECT_EQ(summary_write(header_for(start, end), *c, bitwise_crc32c, oracle_update, b.get(), sink, &w),
              SummaryStatus::kOk);
    set.close_cursor(c);
    EXPECT_EQ(sink.last_offset, 0u) << "the header must be the last write";
    if (written != nullptr)
        *written = w;
    return sink.bytes;
}

SummaryStatus open(const std::vector<uint8_t>& file, SummaryView* view = nullptr)
{
    SummaryView v{};
    const SummaryStatus s = summary_open(file.data(), file.size(), kSystem, kPg, bitwise_crc32c, &v);
    if (view != nullptr)
        *view = v;
    return s;
}

/* Recomputes both CRCs after a change of the body (so that the structure checks are tested). */
void reseal(std::vector<uint8_t>& file)
{
    const uint32_t body = bitwise_crc32c(file.data() + kSummaryHeaderBytes, file.size() - kSummaryHeaderBytes);
    std::memcpy(file.data() + 80, &body, 4);
    const uint32_t head = bitwise_crc32c(file.data(), kSummaryHeaderBytes - 4);
    std::memcpy(file.data() + kSummaryHeaderBytes - 4, &head, 4);
}

/* A small set with one chunk of each encoding, a limit and two databases. */
void small_set(ChangeSet& set, Model& model)
{
    const RelFork a{1663, 5, 16384, kMainFork}, b{1663, 5, 16390, kMainFork}, c{1663, 5, 16390, kFsmFork};
    for (uint32_t x : {3u, 70u, 900u, 65535u}) { /* array */
        set.add_block(a, x);
        model.block(a, x);
    }
    for (uint32_t x = 65536 + 100; x < 65536 + 5000; ++x) { /* runs */
        set.add_block(a, x);
        model.block(a, x);
    }
    for (uint32_t x = 0; x < 65536; x += 3) { /* bitmap */
        set.add_block(b, 3 * 65536 + x);
        model.block(b, 3 * 65536 + x);
    }
    set.add_limit(c, 7);
    model.limit(c, 7);
    set.add_database(1663, 16500);
    set.add_database(1664, 1);
    model.database(1663, 16500);
    model.database(1664, 1);
}

}  // namespace

TEST(SummaryFile, RoundTrip)
{
    for (uint64_t seed = 1; seed <= 3; ++seed) {
        ChangeSet set(size_t{256} << 20);
        Model model;
        random_changes(seed, 1500, set, model);
        SummaryHeader written{};
        const std::vector<uint8_t> file = write_set(set, 0x5000028, 0x7000000, &written);
        SummaryView view{};
        ASSERT_EQ(open(file, &view), SummaryStatus::kOk) << describe_summary_status(open(file));
        EXPECT_EQ(view.header.start_lsn, 0x5000028u);
        EXPECT_EQ(view.header.end_lsn, 0x7000000u);
        EXPECT_EQ(view.header.timeline, 3u);
        EXPECT_EQ(view.header.fork_count, written.fork_count);
        EXPECT_EQ(view.header.block_count, written.block_count);
        EXPECT_EQ(file.size(), kSummaryHeaderBytes + written.body_bytes);
        SummaryCursor cursor(view);
        const Model got = read_cursor(cursor);
        EXPECT_EQ(difference(model.normalized(), got), "") << "seed " << seed;
        set.reset();
    }
}

TEST(SummaryFile, FlagsRoundTripAndUnknownOnesAreRefused)
{
    ChangeSet set(ChangeSet::kMinBudget);
    Model model;
    small_set(set, model);
    for (const uint32_t flags : {0u, kSummaryEndsAtRedo}) {
        Buffers b;
        MemorySink sink;
        SummaryHeader h = header_for(0x1000000, 0x2000000);
        h.flags = flags;
        ChangeCursor* c = set.open_cursor();
        SummaryHeader written{};
        ASSERT_EQ(summary_write(h, *c, bitwise_crc32c, oracle_update, b.get(), sink, &written), SummaryStatus::kOk);
        set.close_cursor(c);
        EXPECT_EQ(written.flags, flags);
        SummaryView view{};
        ASSERT_EQ(open(sink.bytes, &view), SummaryStatus::kOk);
        EXPECT_EQ(view.header.flags, flags);
        SummaryHeader read{};
        ASSERT_EQ(summary_read_header(sink.bytes.data(), sink.bytes.size(), bitwise_crc32c, &read),
                  SummaryStatus::kOk);
        EXPECT_EQ(read.flags, flags);
    }
    Buffers b;
    MemorySink sink;
    SummaryHeader h = header_for(0x1000000, 0x2000000);
    h.flags = kSummaryEndsAtRedo | 4u;
    ChangeCursor* c = set.open_cursor();
    EXPECT_EQ(summary_write(h, *c, bitwise_crc32c, oracle_update, b.get(), sink, nullptr), SummaryStatus::kBadVersion);
    set.close_cursor(c);
    EXPECT_TRUE(sink.bytes.empty()) << "nothing written for an unknown flag";
    set.reset();
}

TEST(SummaryFile, EveryEncodingAndLimitsLeaveBlocksOut)
{
    ChangeSet set(ChangeSet::kMinBudget);
    Model model;
    small_set(set, model);
    /* Blocks added before a lower limit: the file leaves them out. */
    const RelFork d{1663, 5, 17000, kMainFork};
    for (uint32_t x = 0; x < 200000; x += 1000)
        set.add_block(d, x);
    set.add_limit(d, 64000);
    for (uint32_t x = 0; x < 64000; x += 1000)
        model.block(d, x);
    model.limit(d, 64000);
    SummaryHeader written{};
    const std::vector<uint8_t> file = write_set(set, 1, 2, &written);
    SummaryView view{};
    ASSERT_EQ(open(file, &view), SummaryStatus::kOk);
    SummaryCursor cursor(view);
    EXPECT_EQ(difference(model.normalized(), read_cursor(cursor)), "");
    /* The three kinds are in the file (kind bytes follow the fork head or a chunk). */
    EXPECT_EQ(written.block_count, 4u + 4900u + 21846u + 64u);
    /* Sizes: the array's 4 offsets and the runs take a few bytes, the bitmap 8 KB. */
    EXPECT_LT(file.size(), kSummaryHeaderBytes + 8192 + 200 + 4 * 17 + 16 + 64 * 2 + 30);
    set.reset();
}

TEST(SummaryFile, EmptySetAndFailedWrites)
{
    ChangeSet set(ChangeSet::kMinBudget);
    std::vector<uint8_t> file = write_set(set);
    EXPECT_EQ(file.size(), kSummaryHeaderBytes);
    SummaryView view{};
    ASSERT_EQ(open(file, &view), SummaryStatus::kOk);
    SummaryCursor cursor(view);
    EXPECT_EQ(difference(Model{}, read_cursor(cursor)), "");

    Model model;
    small_set(set, model);
    Buffers b;
    for (uint64_t fail_after = 0; fail_after < 3; ++fail_after) {
        MemorySink sink;
        sink.fail_after = fail_after;
        ChangeCursor* c = set.open_cursor();
        EXPECT_EQ(summary_write(header_for(1, 2), *c, bitwise_crc32c, oracle_update, b.get(), sink, nullptr),
                  SummaryStatus::kWriteFailed);
        set.close_cursor(c);
    }
    MemorySink sink;
    ChangeCursor* c = set.open_cursor();
    EXPECT_EQ(summary_write(header_for(2, 2), *c, bitwise_crc32c, oracle_update, b.get(), sink, nullptr),
              SummaryStatus::kBadRange);
    SummaryWriteBuffers small = b.get();
    small.buffer_bytes = kSummaryMinBuffer - 1;
    EXPECT_EQ(summary_write(header_for(1, 2), *c, bitwise_crc32c, oracle_update, small, sink, nullptr),
              SummaryStatus::kBadBuffer);
    set.close_cursor(c);
    set.reset();
}

TEST(SummaryFile, EachDamageHasItsStatus)
{
    ChangeSet set(ChangeSet::kMinBudget);
    Model model;
    small_set(set, model);
    const std::vector<uint8_t> good = write_set(set);
    set.reset();
    ASSERT_EQ(open(good), SummaryStatus::kOk);

    auto damaged = [&](auto change) {
        std::vector<uint8_t> f = good;
        change(f);
        return open(f);
    };
    EXPECT_EQ(damaged([](auto& f) { f[0] ^= 1; }), SummaryStatus::kBadMagic);
    EXPECT_EQ(damaged([](auto& f) { f[8] = 2; }), SummaryStatus::kBadVersion);
    EXPECT_EQ(damaged([](auto& f) { f[30] ^= 1; }), SummaryStatus::kBadHeaderCrc);
    EXPECT_EQ(damaged([](auto& f) { f[68] = 2; reseal(f); }), SummaryStatus::kBadVersion); /* unknown flag */
    EXPECT_EQ(damaged([](auto& f) { f[71] = 0x80; reseal(f); }), SummaryStatus::kBadVersion);
    EXPECT_EQ(damaged([](auto& f) { f[68] = 1; reseal(f); }), SummaryStatus::kOk); /* kSummaryEndsAtRedo */
    EXPECT_EQ(damaged([](auto& f) { std::memcpy(f.data() + 40, f.data() + 32, 8); reseal(f); }),
              SummaryStatus::kBadRange);
    EXPECT_EQ(damaged([](auto& f) { f[24] ^= 1; reseal(f); }), SummaryStatus::kOtherSystem);
    EXPECT_EQ(damaged([](auto& f) { f[16] = 15; reseal(f); }), SummaryStatus::kOtherServer);
    EXPECT_EQ(damaged([](auto& f) { f.push_back(0); }), SummaryStatus::kBadLength);
    EXPECT_EQ(damaged([](auto& f) { f[kSummaryHeaderBytes + 20] ^= 1; }), SummaryStatus::kBadBodyCrc);
    /* The fork count one too high, one too low; the block count off by one. */
    EXPECT_EQ(damaged([](auto& f) { f[48] += 1; reseal(f); }), SummaryStatus::kBadCounts);
    EXPECT_EQ(damaged([](auto& f) { f[48] -= 1; reseal(f); }), SummaryStatus::kBadCounts);
    EXPECT_EQ(damaged([](auto& f) { f[56] += 1; reseal(f); }), SummaryStatus::kBadCounts);
    /* The first fork's relfilenode above the second's; the two databases swapped. */
    EXPECT_EQ(damaged([](auto& f) { f[kSummaryHeaderBytes + 8] = 0xFF; f[kSummaryHeaderBytes + 11] = 0x7F; reseal(f); }),
              SummaryStatus::kBadOrder);
    EXPECT_EQ(damaged([](auto& f) {
                  std::vector<uint8_t> last(f.end() - 8, f.end());
                  std::copy(f.end() - 16, f.end() - 8, f.end() - 8);
                  std::copy(last.begin(), last.end(), f.end() - 16);
                  reseal(f);
              }),
              SummaryStatus::kBadOrder);
    /* A fork number no fork has; a chunk kind that does not exist. */
    EXPECT_EQ(damaged([](auto& f) { f[kSummaryHeaderBytes + 12] = 9; reseal(f); }), SummaryStatus::kBadContent);
    EXPECT_EQ(damaged([](auto& f) { f[kSummaryHeaderBytes + 17] = 7; reseal(f); }), SummaryStatus::kBadContent);
    /* Truncated at every length: never kOk, never a crash. */
    for (size_t n = 0; n < good.size(); ++n) {
        std::vector<uint8_t> f(good.begin(), good.begin() + static_cast<long>(n));
        const SummaryStatus s = open(f);
        EXPECT_NE(s, SummaryStatus::kOk) << "truncated to " << n;
        if (n < kSummaryHeaderBytes) {
            EXPECT_EQ(s, SummaryStatus::kTooShort) << n;
        } else {
            EXPECT_EQ(s, SummaryStatus::kBadLength) << n;
        }
    }
    for (int s = 0; s <= static_cast<int>(SummaryStatus::kBadBuffer); ++s)
        EXPECT_STRNE(describe_summary_status(static_cast<SummaryStatus>(s)), "it is unreadable");
}

TEST(SummaryFile, FuzzNeverCrashesNorReadsOutOfBounds)
{
    ChangeSet set(ChangeSet::kMinBudget);
    Model model;
    small_set(set, model);
    /* A smaller file than small_set's bitmap would make each round cheap: drop the dense fork. */
    set.clear();
    Model small;
    const RelFork a{1663, 5, 16384, kMainFork};
    for (uint32_t x : {3u, 70u, 900u, 65535u, 70000u, 70001u, 70002u, 200000u})
        set.add_block(a, x);
    for (uint32_t x = 300000; x < 300400; ++x)
        set.add_block(RelFork{1663, 5, 16385, kMainFork}, x);
    set.add_limit(RelFork{1663, 5, 16386, kVisibilityMapFork}, 4);
    set.add_database(1663, 1);
    set.add_database(1663, 2);
    const std::vector<uint8_t> good = write_set(set);
    set.reset();
    ASSERT_EQ(open(good), SummaryStatus::kOk);

    uint64_t state = 99;
    auto next = [&state]() {
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        return state >> 33;
    };
    int accepted = 0;
    auto bits = std::make_unique<ChunkBits>();
    for (int round = 0; round < 20000; ++round) {
        std::vector<uint8_t> f = good;
        const int changes = 1 + static_cast<int>(next() % 4);
        for (int k = 0; k < changes; ++k) {
            const size_t at = kSummaryHeaderBytes + next() % (f.size() - kSummaryHeaderBytes);
            switch (next() % 4) {
            case 0: f[at] ^= static_cast<uint8_t>(1u << (next() % 8)); break;
            case 1: f[at] = static_cast<uint8_t>(next()); break;
            case 2: f.erase(f.begin() + static_cast<long>(at)); break;
            default: f.insert(f.begin() + static_cast<long>(at), static_cast<uint8_t>(next())); break;
            }
        }
        /* Keep the length field honest half of the time, so the structure checks are reached. */
        if (round % 2 == 0) {
            const uint64_t body = f.size() - kSummaryHeaderBytes;
            std::memcpy(f.data() + 72, &body, 8);
        }
        reseal(f);
        /* A copy of exactly the file's size on the heap: reads past it are caught by tools like ASan. */
        std::unique_ptr<uint8_t[]> exact(new uint8_t[f.size()]);
        std::memcpy(exact.get(), f.data(), f.size());
        SummaryView view{};
        if (summary_open(exact.get(), f.size(), kSystem, kPg, bitwise_crc32c, &view) != SummaryStatus::kOk)
            continue;
        ++accepted;
        SummaryCursor cursor(view);
        RelFork rel{};
        BlockNumber limit = 0;
        uint32_t chunk = 0;
        while (cursor.next_fork(&rel, &limit))
            while (cursor.next_chunk(&chunk))
                cursor.or_chunk(bits.get());
        DatabaseKey db{};
        while (cursor.next_database(&db)) {
        }
    }
    /* Some changes leave a valid file (e.g. a changed offset): the reader was exercised on them. */
    EXPECT_GT(accepted, 0);
}
