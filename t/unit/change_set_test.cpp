/*
 * t/unit/change_set_test.cpp -- proves the follower's exact change set
 * (ptrack/change_set.h):
 *
 * - what goes in comes out: after a random mix of blocks (sparse sets,
 *   bitmaps, offset 0xFFFF, runs), limits and databases, the cursor gives
 *   exactly the model's set, in the cursor order of ptrack/change_cursor.h;
 * - a block at or past its fork's limit is not stored; a lower limit wins,
 *   also for the chunks that were there before it (the cached one, far ones);
 * - the budget: a set near it answers kCutSoon before it ever refuses; a
 *   refused add (budget or a failing allocator, at every allocation in
 *   turn) leaves the contents as they were and says why; nothing is lost
 *   silently: every accepted block is read back;
 * - clear() empties and keeps the tables, reset() frees every byte the
 *   allocator gave;
 * - the cached (fork, chunk)s follow the chunk table when it grows or a
 *   refused batch takes chunks back; every accepted add answers kCutSoon
 *   exactly when needs_cut() says so after it;
 * - add_blocks() adds what add_block() on each reference adds, and a
 *   refused batch (a failing allocator at every allocation in turn, the
 *   budget, too many references) leaves no block, chunk or fork of itself.
 */
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "change_model.h"
#include "ptrack/change_set.h"

using namespace ptrack;
using ptrack_test::difference;
using ptrack_test::Model;
using ptrack_test::random_changes;
using ptrack_test::read_cursor;

namespace {

/* Counts bytes, fails the allocation numbered `fail_at` (0-based) and, with `fail_all`, every later one. */
class TestAllocator final : public Allocator {
public:
    void* allocate(size_t bytes) noexcept override
    {
        const uint64_t n = calls++;
        if (n == fail_at || (fail_all && n > fail_at))
            return nullptr;
        void* p = std::malloc(bytes);
        live_bytes += bytes;
        sizes[p] = bytes;
        return p;
    }
    void release(void* p, size_t bytes) noexcept override
    {
        EXPECT_EQ(sizes[p], bytes) << "release with another size than allocated";
        sizes.erase(p);
        live_bytes -= bytes;
        std::free(p);
    }
    uint64_t calls = 0;
    uint64_t fail_at = ~uint64_t{0};
    bool fail_all = false;
    size_t live_bytes = 0;
    std::map<void*, size_t> sizes;
};

Model contents(ChangeSet& set)
{
    ChangeCursor* c = set.open_cursor();
    EXPECT_NE(c, nullptr);
    if (c == nullptr)
        return Model{};
    Model m = read_cursor(*c).normalized();
    set.close_cursor(c);
    return m;
}

const RelFork kRel{1663, 5, 16384, kMainFork};

}  // namespace

TEST(ChangeSet, WhatGoesInComesOutInOrder)
{
    for (uint64_t seed = 1; seed <= 3; ++seed) {
        ChangeSet set(size_t{256} << 20);
        Model model;
        random_changes(seed, 3000, set, model);
        EXPECT_EQ(difference(model.normalized(), contents(set)), "") << "seed " << seed;
        set.reset();
    }
}

TEST(ChangeSet, SparseSetsBecomeBitmapsAndKeepEveryOffset)
{
    ChangeSet set(size_t{64} << 20);
    Model model;
    /* Chunk 0: every offset in a scrambled order, crossing every size of the sparse set; 0xFFFF first. */
    for (uint32_t i = 0; i < kChunkBlocks; ++i) {
        const uint32_t b = (kChunkBlocks - 1 - i * 40503u) & (kChunkBlocks - 1);
        ASSERT_NE(set.add_block(kRel, b), AddResult::kRefused);
        model.block(kRel, b);
        if (i == kSparseMaxBlocks - 1 || i == kSparseMaxBlocks || i == 100) {
            EXPECT_EQ(difference(model.normalized(), contents(set)), "") << "after " << i + 1 << " blocks";
        }
    }
    EXPECT_EQ(set.block_count(), uint64_t{kChunkBlocks});
    EXPECT_EQ(set.chunk_count(), 1u);
    EXPECT_EQ(difference(model.normalized(), contents(set)), "");
    /* Repeats add nothing. */
    for (uint32_t b = 0; b < 100; ++b)
        set.add_block(kRel, b);
    EXPECT_EQ(set.block_count(), uint64_t{kChunkBlocks});
    set.reset();
}

TEST(ChangeSet, LimitsCoverBlocks)
{
    ChangeSet set(ChangeSet::kMinBudget);
    Model model;
    set.add_block(kRel, 10);
    model.block(kRel, 10);
    set.add_limit(kRel, 100);
    model.limit(kRel, 100);
    set.add_limit(kRel, 500); /* a higher limit changes nothing */
    model.limit(kRel, 500);
    const uint64_t before = set.block_count();
    set.add_block(kRel, 100); /* covered: not stored */
    set.add_block(kRel, 70000);
    EXPECT_EQ(set.block_count(), before);
    EXPECT_EQ(set.chunk_count(), 1u);
    set.add_block(kRel, 99);
    model.block(kRel, 99);
    EXPECT_EQ(difference(model.normalized(), contents(set)), "");
    /* A limit alone makes a fork; databases are kept once each, in order. */
    const RelFork other{1663, 5, 20000, kVisibilityMapFork};
    set.add_limit(other, 0);
    model.limit(other, 0);
    set.add_database(1663, 9);
    set.add_database(1663, 7);
    set.add_database(1663, 9);
    model.database(1663, 9);
    model.database(1663, 7);
    EXPECT_EQ(set.database_count(), 2u);
    EXPECT_EQ(difference(model.normalized(), contents(set)), "");
    set.reset();
}

TEST(ChangeSet, LoweredLimitReachesEveryChunkOfTheFork)
{
    /* Chunks 0..9 and one far chunk: lowering the limit visits them one by one, or (far) scans the table. */
    for (const uint32_t far : {10u, 5000u}) {
        ChangeSet set(size_t{64} << 20);
        Model model;
        const RelFork other{1663, 5, 16385, kMainFork};
        auto add = [&](const RelFork& r, BlockNumber b) {
            ASSERT_NE(set.add_block(r, b), AddResult::kRefused);
            model.block(r, b);
        };
        for (uint32_t n = 0; n < 10; ++n)
            for (uint32_t k = 0; k < 3; ++k) {
                add(kRel, (n << kChunkShift) + k * 1000);
                add(other, (n << kChunkShift) + k * 1000);
            }
        add(kRel, (far << kChunkShift) + 7);
        add(kRel, (3u << kChunkShift) + 5); /* the cached chunk is the one the limit cuts */
        const BlockNumber limit = (3u << kChunkShift) + 1500;
        ASSERT_NE(set.add_limit(kRel, limit), AddResult::kRefused);
        model.limit(kRel, limit);
        const uint64_t before = set.block_count();
        const uint64_t chunks = set.chunk_count();
        /* At or past the limit: nothing stored, in the cached chunk, the next ones, the far one, a new one. */
        set.add_block(kRel, limit);
        set.add_block(kRel, (3u << kChunkShift) + 60000);
        for (uint32_t n = 4; n < 10; ++n)
            set.add_block(kRel, (n << kChunkShift) + 1600);
        set.add_block(kRel, (far << kChunkShift) + 8);
        set.add_block(kRel, (far + 1) << kChunkShift);
        set.add_block(kRel, 0xFFFFFFFEu);
        EXPECT_EQ(set.block_count(), before) << "a block past the limit was stored (far chunk " << far << ")";
        EXPECT_EQ(set.chunk_count(), chunks);
        /* Below it, and in the other fork, blocks are still stored. */
        add(kRel, limit - 1);
        add(kRel, (2u << kChunkShift) + 60000);
        add(other, (5u << kChunkShift) + 1600);
        EXPECT_EQ(set.block_count(), before + 3);
        EXPECT_EQ(difference(model.normalized(), contents(set)), "") << "far chunk " << far;
        /* A lower limit again, to 0: the fork keeps no chunk open to new blocks. */
        ASSERT_NE(set.add_limit(kRel, 0), AddResult::kRefused);
        model.limit(kRel, 0);
        set.add_block(kRel, 1);
        set.add_block(kRel, (far << kChunkShift) + 9);
        EXPECT_EQ(set.block_count(), before + 3);
        EXPECT_EQ(difference(model.normalized(), contents(set)), "") << "far chunk " << far;
        set.reset();
    }
}

TEST(ChangeSet, ClearEmptiesAndResetFreesEverything)
{
    TestAllocator allocator;
    {
        ChangeSet set(size_t{64} << 20, allocator);
        Model model;
        random_changes(7, 2000, set, model);
        EXPECT_FALSE(set.empty());
        EXPECT_EQ(set.used_bytes(), allocator.live_bytes);
        set.clear();
        EXPECT_TRUE(set.empty());
        EXPECT_EQ(difference(Model{}, contents(set)), "");
        EXPECT_EQ(set.used_bytes(), allocator.live_bytes);
        Model again;
        random_changes(8, 500, set, again);
        EXPECT_EQ(difference(again.normalized(), contents(set)), "");
        EXPECT_GE(set.peak_bytes(), set.used_bytes());
        set.reset();
        EXPECT_EQ(set.used_bytes(), 0u);
    }
    EXPECT_EQ(allocator.live_bytes, 0u) << "memory left allocated after reset()";
}

TEST(ChangeSet, BudgetSaysCutSoonBeforeItRefuses)
{
    ChangeSet set(ChangeSet::kMinBudget);
    Model model;
    bool cut_soon = false;
    uint32_t refused_at = 0;
    /* Random blocks over many chunks: every new chunk costs memory. */
    for (uint32_t i = 0; i < 2000000; ++i) {
        const RelFork r{1663, 5, 16384 + i % 97, kMainFork};
        const uint32_t b = (i * 2654435761u) % (1u << 30);
        const AddResult result = set.add_block(r, b);
        if (result == AddResult::kRefused) {
            refused_at = i;
            break;
        }
        model.block(r, b);
        if (result == AddResult::kCutSoon)
            cut_soon = true;
        if (!cut_soon) {
            EXPECT_FALSE(set.needs_cut());
        }
        /* Every accepted add answers what needs_cut() says after it (kept between adds that allocate nothing). */
        ASSERT_EQ(result == AddResult::kCutSoon, set.needs_cut()) << "add " << i << " of block " << b;
    }
    ASSERT_NE(refused_at, 0u) << "the budget never stopped the set";
    EXPECT_TRUE(cut_soon) << "refused at add " << refused_at << " without a kCutSoon before";
    EXPECT_EQ(set.last_refusal(), Refusal::kBudget);
    EXPECT_LE(set.used_bytes(), set.budget_bytes());
    EXPECT_LE(set.peak_bytes(), set.budget_bytes());
    /* Nothing accepted was lost, nothing refused was kept. */
    EXPECT_EQ(difference(model.normalized(), contents(set)), "");
    set.reset();
}

TEST(ChangeSet, CutSoonFollowsContainersGrowing)
{
    /*
     * Dense blocks, chunk after chunk of a few forks: most of the memory
     * comes from a chunk's container growing (a bigger sparse set, then a
     * bitmap) on an add to a chunk the set has, and the add that takes the
     * set near its budget must say so.
     */
    ChangeSet set(ChangeSet::kMinBudget);
    bool cut_soon = false;
    constexpr uint32_t kPerChunk = kSparseMaxBlocks + 64; /* every chunk ends as a bitmap */
    for (uint32_t i = 0; i < 4000000 && !cut_soon; ++i) {
        const uint32_t n = i / kPerChunk;
        const RelFork r{1663, 5, 16384 + n % 3, kMainFork};
        const BlockNumber b = n / 3 * kChunkBlocks + (((i % kPerChunk) * 40503u) & (kChunkBlocks - 1));
        const size_t used = set.used_bytes();
        const AddResult result = set.add_block(r, b);
        ASSERT_NE(result, AddResult::kRefused) << "refused without a kCutSoon before, add " << i;
        ASSERT_EQ(result == AddResult::kCutSoon, set.needs_cut())
            << "add " << i << " of block " << b << ", " << used << " -> " << set.used_bytes() << " bytes";
        cut_soon = result == AddResult::kCutSoon;
    }
    EXPECT_TRUE(cut_soon) << "the set never came near its budget";
    set.reset();
}

TEST(ChangeSet, CachedChunksFollowTheTableWhenItGrowsOrLosesSlots)
{
    /*
     * 40 relations in turn (more than the 16 cached (fork, chunk)s, so
     * entries collide and are replaced), each getting a new chunk now and
     * then (the chunk table grows several times, moving every slot), and
     * refused batches that take back the chunks they made (slots move
     * back): every block added through a cached entry must land in the
     * table as it is now.
     */
    TestAllocator allocator;
    ChangeSet set(size_t{64} << 20, allocator);
    Model model;
    for (uint32_t round = 0; round < 400; ++round) {
        for (uint32_t r = 0; r < 40; ++r) {
            const RelFork rel{1663, 5, 20000 + r, static_cast<uint8_t>(r % 3 == 2 ? kVisibilityMapFork : kMainFork)};
            const BlockNumber block = (round / 8) * kChunkBlocks + (round * 7 + r) % 512;
            ASSERT_NE(set.add_block(rel, block), AddResult::kRefused);
            model.block(rel, block);
        }
        if (round % 50 == 49) {
            /*
             * A batch refused by its last add (a failing allocation) after
             * it made new chunks of forks the set has (so only chunks go).
             */
            const BlockNumber far = (1000 + round) * kChunkBlocks;
            BlockRef refs[3] = {{RelFork{1663, 5, 20000, kMainFork}, far + 1},
                                {RelFork{1663, 5, 20001, kMainFork}, far + 2},
                                {RelFork{1663, 5, 20003, kMainFork}, far + 3}};
            allocator.fail_at = allocator.calls + 2;
            EXPECT_EQ(set.add_blocks(refs, 3), AddResult::kRefused);
            allocator.fail_at = ~uint64_t{0};
            /* Their (fork, chunk)s were cached when made: added again, they must find the table's slots. */
            for (const BlockRef& ref : refs) {
                ASSERT_NE(set.add_block(ref.rel, ref.block), AddResult::kRefused);
                ASSERT_NE(set.add_block(ref.rel, ref.block + 1), AddResult::kRefused);
                model.block(ref.rel, ref.block);
                model.block(ref.rel, ref.block + 1);
            }
        }
    }
    EXPECT_GT(set.chunk_count(), 1000u) << "the chunk table did not grow";
    uint64_t model_blocks = 0;
    for (const auto& fork : model.normalized().forks)
        model_blocks += fork.second.blocks.size();
    EXPECT_EQ(set.block_count(), model_blocks);
    EXPECT_EQ(difference(model.normalized(), contents(set)), "");
    set.reset();
}

/*
 * An allocation-failure sweep: `run(allocator, what)` builds a set on
 * `allocator`, feeds it a fixed load, checks what it must, leaves the set
 * reset and returns whether an add was refused.  It runs once with nothing
 * failing, to count the load's allocations (more than `min_calls`), then
 * with allocation n failing, for n = 0 and then every (1 + n / `step`)th,
 * each time with a fresh allocator that must end with nothing allocated.
 * Returns how many of the failing runs had an add refused.
 */
template <typename Run>
uint64_t sweep_allocation_failures(uint64_t min_calls, uint64_t step, Run run)
{
    TestAllocator counting;
    EXPECT_FALSE(run(counting, std::string("the counting run"))) << "an add was refused with nothing failing";
    const uint64_t total = counting.calls;
    EXPECT_GT(total, min_calls) << "the load made too few allocations to sweep";
    uint64_t refusals = 0;
    for (uint64_t fail_at = 0; fail_at < total; fail_at += 1 + fail_at / step) {
        TestAllocator allocator;
        allocator.fail_at = fail_at;
        if (run(allocator, "allocation " + std::to_string(fail_at) + " failed"))
            ++refusals;
        EXPECT_EQ(allocator.live_bytes, 0u) << "allocation " << fail_at << " failed: memory left allocated";
    }
    return refusals;
}

TEST(ChangeSet, AllocationFailureLeavesTheSetAsItWas)
{
    const uint64_t refusals = sweep_allocation_failures(20, 8, [](TestAllocator& allocator, const std::string& what) {
        ChangeSet set(size_t{64} << 20, allocator);
        Model accepted;
        uint64_t state = 11;
        bool refused = false;
        /* One add at a time, recording only what was accepted. */
        for (uint32_t i = 0; i < 1500 && !refused; ++i) {
            state = state * 6364136223846793005ULL + 1442695040888963407ULL;
            const RelFork r{1663, 5, 16384 + static_cast<uint32_t>((state >> 40) % 37), kMainFork};
            const uint32_t b = static_cast<uint32_t>((state >> 20) % 400000);
            const Model before = accepted;
            AddResult result;
            if (i % 50 == 49) {
                result = set.add_database(1663, static_cast<uint32_t>(i));
                if (result != AddResult::kRefused)
                    accepted.database(1663, static_cast<uint32_t>(i));
            } else {
                result = set.add_block(r, b);
                if (result != AddResult::kRefused)
                    accepted.block(r, b);
            }
            if (result == AddResult::kRefused) {
                refused = true;
                allocator.fail_at = ~uint64_t{0}; /* the cursor below may allocate */
                EXPECT_EQ(set.last_refusal(), Refusal::kAllocation) << what;
                EXPECT_EQ(difference(before.normalized(), contents(set)), "") << what << " and the set changed";
            }
        }
        allocator.fail_at = ~uint64_t{0};
        EXPECT_EQ(difference(accepted.normalized(), contents(set)), "") << what;
        /* After a clear() the set works again. */
        set.clear();
        EXPECT_NE(set.add_block(kRel, 1), AddResult::kRefused) << what;
        set.reset();
        return refused;
    });
    EXPECT_GT(refusals, 10u) << "the failing allocations were never reached";
}

namespace {

/* A batch of 1..kMaxBatch references: runs, scattered blocks over new forks and chunks, offset 0xFFFF, repeats. */
std::vector<BlockRef> random_batch(uint64_t& state)
{
    auto next = [&state]() {
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        return state >> 20;
    };
    std::vector<BlockRef> refs;
    const uint32_t n = 1 + static_cast<uint32_t>(next() % kMaxBatch);
    while (refs.size() < n) {
        const RelFork r{1663, 5, 16384 + static_cast<uint32_t>(next() % 300), static_cast<uint8_t>(next() % 3)};
        const uint64_t kind = next() % 10;
        if (kind < 3 && !refs.empty()) {
            refs.push_back(refs[next() % refs.size()]); /* a repeat */
        } else if (kind < 5) {
            const uint32_t start = static_cast<uint32_t>(next() % 200000);
            for (uint32_t b = start; b < start + 6 && refs.size() < n; ++b)
                refs.push_back(BlockRef{r, b});
        } else {
            const uint32_t chunk = static_cast<uint32_t>(next() % 8);
            const uint32_t offset = next() % 16 == 0 ? 0xFFFF : static_cast<uint32_t>(next() % kChunkBlocks);
            refs.push_back(BlockRef{r, (chunk << kChunkShift) | offset});
        }
    }
    return refs;
}

struct Counts {
    uint64_t blocks, chunks;
    uint32_t forks;
    bool operator==(const Counts& o) const
    {
        return blocks == o.blocks && chunks == o.chunks && forks == o.forks;
    }
};

Counts counts(const ChangeSet& set)
{
    return Counts{set.block_count(), set.chunk_count(), set.fork_count()};
}

}  // namespace

TEST(ChangeSet, BatchAddsWhatSingleAddsAdd)
{
    ChangeSet batched(size_t{64} << 20), single(size_t{64} << 20);
    Model model;
    uint64_t state = 5;
    for (uint32_t round = 0; round < 3000; ++round) {
        const std::vector<BlockRef> refs = random_batch(state);
        if (round % 97 == 0) {
            /* Limits too: the batch must skip what they cover, as add_block() does. */
            const RelFork r = refs[0].rel;
            const BlockNumber limit = refs[0].block / 2;
            batched.add_limit(r, limit);
            single.add_limit(r, limit);
            model.limit(r, limit);
        }
        ASSERT_NE(batched.add_blocks(refs.data(), static_cast<uint32_t>(refs.size())), AddResult::kRefused);
        for (const BlockRef& ref : refs) {
            ASSERT_NE(single.add_block(ref.rel, ref.block), AddResult::kRefused);
            model.block(ref.rel, ref.block);
        }
        ASSERT_TRUE(counts(batched) == counts(single)) << "round " << round << ": " << batched.block_count()
                                                       << " blocks batched, " << single.block_count() << " single";
    }
    EXPECT_EQ(difference(model.normalized(), contents(batched)), "");
    batched.reset();
    single.reset();
}

TEST(ChangeSet, BatchTooLongIsRefusedWhole)
{
    ChangeSet set(ChangeSet::kMinBudget);
    std::vector<BlockRef> refs;
    for (uint32_t i = 0; i <= kMaxBatch; ++i)
        refs.push_back(BlockRef{kRel, i * 1000});
    EXPECT_EQ(set.add_blocks(refs.data(), kMaxBatch + 1), AddResult::kRefused);
    EXPECT_EQ(set.last_refusal(), Refusal::kBatchTooLong);
    EXPECT_TRUE(set.empty());
    EXPECT_EQ(set.add_blocks(refs.data(), kMaxBatch), AddResult::kOk);
    EXPECT_EQ(set.block_count(), uint64_t{kMaxBatch});
    set.reset();
}

/* Feeds batches until one is refused; checks that a refused batch left nothing of itself. */
void refused_batch_leaves_nothing(ChangeSet& set, uint64_t seed, uint32_t max_rounds, Refusal why, uint64_t* refusals,
                                  const std::string& what)
{
    Model accepted;
    std::vector<BlockRef> all;
    uint64_t state = seed;
    for (uint32_t round = 0; round < max_rounds; ++round) {
        const std::vector<BlockRef> refs = random_batch(state);
        const Counts before = counts(set);
        const AddResult result = set.add_blocks(refs.data(), static_cast<uint32_t>(refs.size()));
        if (result != AddResult::kRefused) {
            for (const BlockRef& ref : refs)
                accepted.block(ref.rel, ref.block);
            all.insert(all.end(), refs.begin(), refs.end());
            continue;
        }
        ++*refusals;
        EXPECT_EQ(set.last_refusal(), why) << what;
        const Counts after = counts(set);
        EXPECT_TRUE(after == before) << what << ", round " << round << ": refused batch of " << refs.size()
                                     << " left " << after.blocks << " blocks, " << after.chunks << " chunks, "
                                     << after.forks << " forks; before " << before.blocks << ", " << before.chunks
                                     << ", " << before.forks;
        /* Taking the batch back left every table findable: adding the accepted blocks again adds nothing. */
        for (const BlockRef& ref : all)
            set.add_block(ref.rel, ref.block);
        EXPECT_TRUE(counts(set) == before) << what << ": an accepted block was lost from its table by the refusal";
        if (why == Refusal::kAllocation) {
            /* The allocator works again: the same batch goes in whole. */
            EXPECT_NE(set.add_blocks(refs.data(), static_cast<uint32_t>(refs.size())), AddResult::kRefused) << what;
            for (const BlockRef& ref : refs)
                accepted.block(ref.rel, ref.block);
        }
        break;
    }
    /* What was accepted reads back, nothing of a refused batch does; then it works again after clear(). */
    EXPECT_EQ(difference(accepted.normalized(), contents(set)), "") << what;
    set.clear();
    EXPECT_NE(set.add_block(kRel, 1), AddResult::kRefused) << what;
}

TEST(ChangeSet, RefusedBatchLeavesTheSetAsItWas)
{
    /* Allocation failures: each failing allocation refuses exactly one batch, which leaves nothing. */
    (void) sweep_allocation_failures(100, 16, [](TestAllocator& allocator, const std::string& what) {
        ChangeSet set(size_t{64} << 20, allocator);
        const bool failing = allocator.fail_at != ~uint64_t{0};
        uint64_t refusals = 0;
        refused_batch_leaves_nothing(set, 21, 300, Refusal::kAllocation, &refusals, what);
        EXPECT_EQ(refusals, failing ? 1u : 0u) << what << ": refused batches";
        allocator.fail_at = ~uint64_t{0};
        set.reset();
        return refusals != 0;
    });
    uint64_t refusals = 0;
    /* The budget: batches into a small set until one does not fit. */
    ChangeSet small(ChangeSet::kMinBudget);
    refused_batch_leaves_nothing(small, 23, 1000000, Refusal::kBudget, &refusals, "budget");
    EXPECT_EQ(refusals, 1u) << "the budget never refused a batch";
    small.reset();
}

TEST(ChangeSet, CursorAllocationFailureIsReported)
{
    TestAllocator allocator;
    ChangeSet set(ChangeSet::kMinBudget, allocator);
    set.add_block(kRel, 3);
    allocator.fail_at = allocator.calls;
    EXPECT_EQ(set.open_cursor(), nullptr);
    EXPECT_EQ(set.last_refusal(), Refusal::kAllocation);
    set.reset();
}
