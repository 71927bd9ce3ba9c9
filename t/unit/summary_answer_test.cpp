/*
 * t/unit/summary_answer_test.cpp -- proves the answers from summaries
 * (ptrack/summary_answer.h):
 *
 * (which summaries answer L: t/unit/summary_chain_test.cpp)
 * - the union of three summaries and an in-memory set through MergeCursor
 *   is exactly the union of the models; per segment file, SegmentPagemaps
 *   gives exactly the union's blocks of that segment, for 1 GB segments
 *   and for a segment size that does not divide the chunk;
 * - combining three adjacent summaries gives one file of their whole range
 *   that reads as their union, flagged as the last one (kSummaryEndsAtRedo
 *   kept when the last ends at a redo LSN, not taken from an earlier one);
 *   non-adjacent ones are refused;
 * - count_changes() counts the union.
 */
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "change_model.h"
#include "crc32c_oracle.h"
#include "memory_sink.h"
#include "summary_fixture.h"
#include "ptrack/change_set.h"
#include "ptrack/pagemap.h"
#include "ptrack/summary_answer.h"

using namespace ptrack;
using ptrack_test::bitwise_crc32c;
using ptrack_test::difference;
using ptrack_test::key_of;
using ptrack_test::MemorySink;
using ptrack_test::Model;
using ptrack_test::oracle_update;
using ptrack_test::random_changes;
using ptrack_test::read_cursor;

namespace {

constexpr uint64_t kSystem = 42;
constexpr uint32_t kPg = 15;

SummaryHeader range(Lsn start, Lsn end)
{
    return ptrack_test::summary_header(kSystem, kPg, 1, start, end);
}

using Buffers = ptrack_test::SummaryBuffers;

/*
 * Three summaries of [100, 200), [200, 300), [300, 400) and an in-memory set
 * from 400, with their models; the first and the last end at a redo LSN.
 */
struct History {
    std::vector<std::vector<uint8_t>> files;
    std::vector<SummaryView> views;
    std::vector<Model> models;
    ChangeSet live{size_t{64} << 20};
    Model live_model;

    History()
    {
        const Lsn bounds[] = {100, 200, 300, 400};
        const uint32_t flags[] = {kSummaryEndsAtRedo, 0, kSummaryEndsAtRedo};
        for (int i = 0; i < 3; ++i) {
            ChangeSet set(size_t{64} << 20);
            Model m;
            random_changes(100 + static_cast<uint64_t>(i), 600, set, m);
            Buffers b;
            MemorySink sink;
            ChangeCursor* c = set.open_cursor();
            SummaryHeader h = range(bounds[i], bounds[i + 1]);
            h.flags = flags[i];
            EXPECT_EQ(summary_write(h, *c, bitwise_crc32c, oracle_update, b.get(), sink, nullptr),
                      SummaryStatus::kOk);
            set.close_cursor(c);
            set.reset();
            files.push_back(sink.bytes);
            models.push_back(m.normalized());
        }
        for (const auto& f : files) {
            SummaryView v{};
            EXPECT_EQ(summary_open(f.data(), f.size(), kSystem, kPg, bitwise_crc32c, &v), SummaryStatus::kOk);
            views.push_back(v);
        }
        random_changes(200, 600, live, live_model);
        live_model = live_model.normalized();
    }
    ~History() { live.reset(); }
};

/* The union's blocks of segment `segno` of a fork, from the model (bits set below the limit only). */
std::vector<uint32_t> model_segment(const ptrack_test::ForkModel& f, uint32_t segno, uint32_t bps)
{
    std::vector<uint32_t> out;
    for (uint32_t b : f.blocks)
        if (b < f.limit && b / bps == segno)
            out.push_back(b % bps);
    return out;
}

}  // namespace

TEST(SummaryAnswer, UnionOfSummariesAndTheLiveSet)
{
    History history;
    Model expected = history.live_model;
    for (const Model& m : history.models)
        expected.merge(m);
    expected = expected.normalized();

    SummaryCursor cursors[3] = {SummaryCursor(history.views[0]), SummaryCursor(history.views[1]),
                                SummaryCursor(history.views[2])};
    ChangeCursor* live = history.live.open_cursor();
    ASSERT_NE(live, nullptr);
    MergeCursor::State states[4];
    for (int i = 0; i < 3; ++i)
        states[i].source = &cursors[i];
    states[3].source = live;
    MergeCursor merged(states, 4);
    EXPECT_EQ(difference(expected, read_cursor(merged).normalized()), "");
    history.live.close_cursor(live);
}

TEST(SummaryAnswer, SegmentPagemapsAreTheUnionPerSegment)
{
    History history;
    Model expected = history.live_model;
    for (const Model& m : history.models)
        expected.merge(m);
    expected = expected.normalized();

    for (uint32_t bps : {131072u, 1000u, 65536u * 3}) {
        SummaryCursor cursors[3] = {SummaryCursor(history.views[0]), SummaryCursor(history.views[1]),
                                    SummaryCursor(history.views[2])};
        ChangeCursor* live = history.live.open_cursor();
        MergeCursor::State states[4];
        for (int i = 0; i < 3; ++i)
            states[i].source = &cursors[i];
        states[3].source = live;
        MergeCursor merged(states, 4);
        auto scratch = std::make_unique<ChunkBits>();
        std::vector<uint8_t> pagemap(pagemap_bytes(bps), 0);
        SegmentPagemaps segments(bps, scratch.get(), pagemap.data());
        RelFork rel{};
        BlockNumber limit = 0;
        size_t forks = 0;
        while (merged.next_fork(&rel, &limit)) {
            ++forks;
            segments.start_fork();
            const ptrack_test::ForkModel& f = expected.forks[key_of(rel)];
            /* Segments the model has blocks in (below the limit), in order. */
            std::map<uint32_t, std::vector<uint32_t>> want;
            for (uint32_t b : f.blocks)
                if (b < f.limit)
                    want[b / bps];
            uint32_t segno = 0, count = 0;
            size_t length = 0;
            while (segments.next(merged, &segno, &length, &count)) {
                /* Blocks at or past the limit may be listed too (the caller lists them anyway). */
                std::vector<uint32_t> got;
                for (uint32_t b = 0; b < bps; ++b)
                    if (pagemap_test(segments.pagemap(), length, b) && uint64_t{segno} * bps + b < f.limit)
                        got.push_back(b);
                const std::vector<uint32_t> expect = model_segment(f, segno, bps);
                if (!expect.empty() || !got.empty()) {
                    EXPECT_EQ(got, expect) << "segment " << segno << " of " << ptrack_test::describe(key_of(rel))
                                           << ", " << bps << " blocks per segment";
                }
                EXPECT_EQ(pagemap_count(segments.pagemap(), pagemap.size()), count);
                EXPECT_TRUE(length == 0 || segments.pagemap()[length - 1] != 0);
                want.erase(segno);
            }
            EXPECT_TRUE(want.empty()) << want.size() << " segments of " << ptrack_test::describe(key_of(rel))
                                      << " missing, the first " << want.begin()->first;
        }
        EXPECT_EQ(forks, expected.forks.size());
        history.live.close_cursor(live);
    }
}

TEST(SummaryAnswer, CombineAdjacentSummaries)
{
    History history;
    Model expected;
    for (const Model& m : history.models)
        expected.merge(m);
    expected = expected.normalized();

    SummaryCursor cursors[3];
    MergeCursor::State states[3];
    Buffers b;
    MemorySink sink;
    SummaryHeader written{};
    ASSERT_EQ(summary_combine(history.views.data(), 3, cursors, states, bitwise_crc32c, oracle_update, b.get(), sink,
                              &written),
              SummaryStatus::kOk);
    EXPECT_EQ(written.start_lsn, 100u);
    EXPECT_EQ(written.end_lsn, 400u);
    EXPECT_EQ(written.flags, kSummaryEndsAtRedo);
    SummaryView view{};
    ASSERT_EQ(summary_open(sink.bytes.data(), sink.bytes.size(), kSystem, kPg, bitwise_crc32c, &view),
              SummaryStatus::kOk);
    EXPECT_EQ(view.header.flags, kSummaryEndsAtRedo) << "the last input ends at a redo LSN";
    SummaryCursor combined(view);
    EXPECT_EQ(difference(expected, read_cursor(combined)), "");
    /* One file is smaller than the three: shared blocks are stored once. */
    EXPECT_LT(sink.bytes.size(),
              history.files[0].size() + history.files[1].size() + history.files[2].size());

    SummaryCursor c2[2];
    MergeCursor::State s2[2];
    const SummaryView apart[] = {history.views[0], history.views[2]};
    MemorySink other;
    EXPECT_EQ(summary_combine(apart, 2, c2, s2, bitwise_crc32c, oracle_update, b.get(), other, nullptr),
              SummaryStatus::kBadRange);
    EXPECT_TRUE(other.bytes.empty());

    /* The first two: the first's flag is a boundary inside, lost; the second ends at no redo LSN. */
    MemorySink front;
    ASSERT_EQ(summary_combine(history.views.data(), 2, c2, s2, bitwise_crc32c, oracle_update, b.get(), front,
                              &written),
              SummaryStatus::kOk);
    EXPECT_EQ(written.end_lsn, 300u);
    ASSERT_EQ(summary_open(front.bytes.data(), front.bytes.size(), kSystem, kPg, bitwise_crc32c, &view),
              SummaryStatus::kOk);
    EXPECT_EQ(view.header.flags, 0u) << "the flag comes from the last input only";
}

TEST(SummaryAnswer, CountChanges)
{
    History history;
    SummaryCursor cursor(history.views[0]);
    auto scratch = std::make_unique<ChunkBits>();
    const ChangeCounts counts = count_changes(cursor, scratch.get());
    const Model& m = history.models[0];
    uint64_t blocks = 0, limited = 0;
    for (const auto& [k, f] : m.forks) {
        blocks += f.blocks.size();
        limited += f.limit != kNoLimit;
    }
    EXPECT_EQ(counts.forks, m.forks.size());
    EXPECT_EQ(counts.blocks, blocks);
    EXPECT_EQ(counts.blocks, history.views[0].header.block_count);
    EXPECT_EQ(counts.limited_forks, limited);
    EXPECT_EQ(counts.databases, m.dbs.size());
}
