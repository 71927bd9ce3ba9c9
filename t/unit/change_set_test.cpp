/*
 * t/unit/change_set_test.cpp -- proves the follower's exact change set
 * (ptrack/change_set.h):
 *
 * - what goes in comes out: after a random mix of blocks (sparse sets,
 *   bitmaps, offset 0xFFFF, runs), limits and databases, the cursor gives
 *   exactly the model's set, in the cursor order of ptrack/change_cursor.h;
 * - a block at or past its fork's limit is not stored; a lower limit wins;
 * - the budget: a set near it answers kCutSoon before it ever refuses; a
 *   refused add (budget or a failing allocator, at every allocation in
 *   turn) leaves the contents as they were and says why; nothing is lost
 *   silently: every accepted block is read back;
 * - clear() empties and keeps the tables, reset() frees every byte the
 *   allocator gave.
 */
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>

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

TEST(ChangeSet, AllocationFailureLeavesTheSetAsItWas)
{
    /* Count the allocations of a run, then fail each of them in turn. */
    TestAllocator counting;
    {
        ChangeSet set(size_t{64} << 20, counting);
        uint64_t state = 11;
        for (uint32_t i = 0; i < 1500; ++i) {
            state = state * 6364136223846793005ULL + 1442695040888963407ULL;
            const RelFork r{1663, 5, 16384 + static_cast<uint32_t>((state >> 40) % 37), kMainFork};
            if (i % 50 == 49)
                set.add_database(1663, i);
            else
                set.add_block(r, static_cast<uint32_t>((state >> 20) % 400000));
        }
        set.reset();
    }
    const uint64_t total = counting.calls;
    ASSERT_GT(total, 20u);
    uint64_t refusals = 0;
    for (uint64_t fail_at = 0; fail_at < total; fail_at += 1 + fail_at / 8) {
        TestAllocator allocator;
        allocator.fail_at = fail_at;
        ChangeSet set(size_t{64} << 20, allocator);
        Model accepted;
        uint64_t state = 11;
        bool refused = false;
        /* The same kind of load, one add at a time, recording only what was accepted. */
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
                ++refusals;
                allocator.fail_at = ~uint64_t{0}; /* the cursor below may allocate */
                EXPECT_EQ(set.last_refusal(), Refusal::kAllocation);
                EXPECT_EQ(difference(before.normalized(), contents(set)), "")
                    << "allocation " << fail_at << " failed and the set changed";
            }
        }
        allocator.fail_at = ~uint64_t{0};
        EXPECT_EQ(difference(accepted.normalized(), contents(set)), "") << "allocation " << fail_at;
        /* After a clear() the set works again. */
        set.clear();
        EXPECT_NE(set.add_block(kRel, 1), AddResult::kRefused);
        set.reset();
        EXPECT_EQ(allocator.live_bytes, 0u);
    }
    EXPECT_GT(refusals, 10u) << "the failing allocations were never reached";
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
