/*
 * bench/engine/mark_bench.cpp -- nanoseconds per Map::mark, the only engine
 * call on PostgreSQL's block write path (docs/design.md section 3.3).
 *
 * What is measured, on a 64 MB and a 1 GB map (the region allocated as
 * PostgreSQL allocates shared memory: MAP_SHARED anonymous, 4 KB pages):
 *   - seq:        one relation, blocks 0, 1, 2, ... (a bulk load or a
 *                 sequential scan that dirties every page);
 *   - random:     random blocks over 10,000 relations of up to 8 GB
 *                 (every mark misses the cache: summary line + two slot lines);
 *   - same_line:  two threads marking blocks 0 and 1 of one relation, which
 *                 share both slot lines and the segment summary slot;
 *   - diff_lines: two threads, each on its own relation;
 *   - remark:     re-marking a block whose slots already hold the rounded LSN
 *                 (the load-only path: no atomic write);
 *   - slots_of:   hash placement alone.
 * Marks go through Map::mark(), which hashes the relation on every call (the
 * capture layer may cache that hash across consecutive writes to one
 * relation and call mark_hashed(); the figures here are the uncached cost).
 * Every mark uses a WAL position that grows by kLsnStep bytes per mark, so
 * with the default 64 KB granule a hot slot is written once per 64 marks;
 * the granule_shift argument (0 or 16) shows what the granule saves.
 *
 * A third map (1 GB on transparent huge pages) and a prototype of mark that
 * prefetches its three lines before the atomic writes (random_prefetched)
 * test where the random-mark cost goes.
 *
 * The machine is shared and noisy, so the figures to quote are CPU time
 * (not wall time), repeated, minimum over repetitions.  With Threads(2),
 * Google Benchmark's CPU column is the summed thread CPU time over the
 * summed iterations: the CPU a backend spends per mark.
 */
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <vector>

#include "common.h"

using ptrack::BlockNumber;
using ptrack::Lsn;
using ptrack::RelFork;

namespace {

constexpr Lsn kLsnStep = 1024; /* WAL bytes between two marks */

/*
 * Maps built once in main(), before any benchmark thread starts, indexed by
 * the "map" argument: 0 = 64 MB, 1 = 1 GB, 2 = 1 GB on transparent huge
 * pages; and by the granule: [0] = shift 0 (no rounding), [1] = shift 16.
 */
std::unique_ptr<bench::OwnedMap> g_maps[3][2];
constexpr const char* kMapNames[3] = {"64MB", "1GB", "1GB_hugepages"};

/* LSNs only grow across benchmarks, so that every run really writes its slots. */
std::atomic<Lsn> g_lsn{Lsn{1} << 32};

void advance_global_lsn(Lsn last)
{
    Lsn cur = g_lsn.load();
    while (cur <= last && !g_lsn.compare_exchange_weak(cur, last + 1)) {
    }
}

ptrack::Map& map_for(benchmark::State& state)
{
    const auto id = static_cast<int>(state.range(0));
    const int granule = state.range(1) == 0 ? 0 : 1;
    if (state.thread_index() == 0)
        state.SetLabel(kMapNames[id]);
    return g_maps[id][granule]->map;
}

RelFork rel_n(uint32_t n) { return RelFork{1663, 16384, 16384 + n, ptrack::kMainFork}; }

/*
 * In PostgreSQL every mark is a separate call from a hook, so nothing of it
 * can be computed once for many marks.  Where a loop marks with a constant
 * relation (or block), this hides the value from the optimizer, so that the
 * hashes are computed on every iteration as they would be in the server.
 */
template <class T>
inline T opaque(T value)
{
    benchmark::DoNotOptimize(value);
    return value;
}

void BM_mark_seq(benchmark::State& state)
{
    ptrack::Map& map = map_for(state);
    const RelFork rel = rel_n(1);
    constexpr BlockNumber kBlocks = 1u << 20; /* an 8 GB relation, then wrap */
    Lsn lsn = g_lsn.load();
    BlockNumber block = 0;
    for (auto _ : state) {
        map.mark(opaque(rel), block, lsn);
        block = (block + 1) & (kBlocks - 1);
        lsn += kLsnStep;
    }
    advance_global_lsn(lsn);
}

struct Target {
    RelFork rel;
    BlockNumber block;
};

std::vector<Target> g_random_targets; /* filled in main() */

void BM_mark_random(benchmark::State& state)
{
    ptrack::Map& map = map_for(state);
    const size_t n = g_random_targets.size();
    Lsn lsn = g_lsn.load();
    size_t i = 0;
    for (auto _ : state) {
        const Target& t = g_random_targets[i];
        map.mark(t.rel, t.block, lsn);
        if (++i == n)
            i = 0;
        lsn += kLsnStep;
    }
    advance_global_lsn(lsn);
}

/* Two threads: blocks 0 and 1 of one relation (same group, same lines, same summary slot). */
void BM_mark_same_line(benchmark::State& state)
{
    ptrack::Map& map = map_for(state);
    const RelFork rel = rel_n(2);
    const BlockNumber block = static_cast<BlockNumber>(state.thread_index());
    Lsn lsn = g_lsn.load() + static_cast<Lsn>(state.thread_index()) * 8; /* both threads move together */
    for (auto _ : state) {
        map.mark(opaque(rel), opaque(block), lsn);
        lsn += kLsnStep;
    }
    advance_global_lsn(lsn);
}

/* Two threads, each on blocks of its own relation (different lines and summary slots). */
void BM_mark_diff_lines(benchmark::State& state)
{
    ptrack::Map& map = map_for(state);
    const RelFork rel = rel_n(100 + static_cast<uint32_t>(state.thread_index()));
    Lsn lsn = g_lsn.load() + static_cast<Lsn>(state.thread_index()) * 8;
    for (auto _ : state) {
        map.mark(opaque(rel), opaque(BlockNumber{0}), lsn);
        lsn += kLsnStep;
    }
    advance_global_lsn(lsn);
}

/* Re-mark with the value already stored: hashes and three loads, no atomic write. */
void BM_remark_same_value(benchmark::State& state)
{
    ptrack::Map& map = map_for(state);
    const RelFork rel = rel_n(3);
    const Lsn lsn = g_lsn.load();
    map.mark(rel, 42, lsn);
    for (auto _ : state) {
        map.mark(opaque(rel), opaque(BlockNumber{42}), opaque(lsn));
    }
}

/* Re-mark of random hot blocks already marked at the current granule (cache misses, no write). */
void BM_remark_random(benchmark::State& state)
{
    ptrack::Map& map = map_for(state);
    const size_t n = g_random_targets.size();
    const Lsn lsn = g_lsn.load();
    for (const Target& t : g_random_targets)
        map.mark(t.rel, t.block, lsn);
    size_t i = 0;
    for (auto _ : state) {
        const Target& t = g_random_targets[i];
        map.mark(t.rel, t.block, lsn);
        if (++i == n)
            i = 0;
    }
    advance_global_lsn(lsn);
}

/*
 * Prototype (not in the engine): the same three atomic maxes as Map::mark,
 * but the three cache lines are prefetched for writing first.  A locked
 * compare-exchange keeps later loads from passing it, so in Map::mark the
 * three cache misses of a random mark are served one after another; with
 * the prefetches they overlap.
 */
inline void mark_prefetched(const ptrack::Map& map, const RelFork& rel, BlockNumber block, Lsn lsn) noexcept
{
    const Lsn value = map.stored_lsn(lsn);
    const uint64_t rel_hash = ptrack::hash_rel(rel);
    uint64_t* summary =
        ptrack::Map::summary_slot(map.segment_ref(rel_hash, block / map.geometry().blocks_per_segment), block);
    const ptrack::SlotPair s = map.slots_of_hashed(rel_hash, block);
    uint64_t* first = &map.slots()[s.first];
    uint64_t* second = &map.slots()[s.second];
    __builtin_prefetch(summary, 1);
    __builtin_prefetch(first, 1);
    __builtin_prefetch(second, 1);
    ptrack::atomic_max_lsn(summary, value);
    ptrack::atomic_max_lsn(first, value);
    ptrack::atomic_max_lsn(second, value);
}

void BM_mark_random_prefetched(benchmark::State& state)
{
    ptrack::Map& map = map_for(state);
    const size_t n = g_random_targets.size();
    Lsn lsn = g_lsn.load();
    size_t i = 0;
    for (auto _ : state) {
        const Target& t = g_random_targets[i];
        mark_prefetched(map, t.rel, t.block, lsn);
        if (++i == n)
            i = 0;
        lsn += kLsnStep;
    }
    advance_global_lsn(lsn);
}

/* Hash placement alone, as Map::mark does it: the relation hash, then the group and summary hashes. */
void BM_slots_of(benchmark::State& state)
{
    ptrack::Map& map = map_for(state);
    const size_t n = g_random_targets.size();
    size_t i = 0;
    for (auto _ : state) {
        const Target& t = g_random_targets[i];
        const uint64_t rel_hash = ptrack::hash_rel(t.rel);
        benchmark::DoNotOptimize(map.slots_of_hashed(rel_hash, t.block));
        benchmark::DoNotOptimize(map.summary_window_hashed(rel_hash, t.block / 131072));
        if (++i == n)
            i = 0;
    }
}

double min_of(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

void apply_common(benchmark::internal::Benchmark* b)
{
    b->Repetitions(7)->ComputeStatistics("min", min_of)->ReportAggregatesOnly(true);
}

/* map: 0 = 64 MB, 1 = 1 GB, 2 = 1 GB on huge pages; granule_shift: 16 (default) or 0. */
void args_all(benchmark::internal::Benchmark* b)
{
    b->ArgNames({"map", "granule_shift"});
    for (int64_t id : {0, 1})
        for (int64_t g : {16, 0})
            b->Args({id, g});
    apply_common(b);
}

void args_random(benchmark::internal::Benchmark* b)
{
    b->ArgNames({"map", "granule_shift"});
    for (int64_t id : {0, 1, 2})
        b->Args({id, 16});
    b->Args({0, 0});
    b->Args({1, 0});
    apply_common(b);
}

void args_default_granule(benchmark::internal::Benchmark* b)
{
    b->ArgNames({"map", "granule_shift"});
    for (int64_t id : {0, 1, 2})
        b->Args({id, 16});
    apply_common(b);
}

}  // namespace

BENCHMARK(BM_mark_seq)->Apply(args_all);
BENCHMARK(BM_mark_random)->Apply(args_random);
BENCHMARK(BM_mark_random_prefetched)->Apply(args_default_granule);
BENCHMARK(BM_mark_same_line)->Apply(args_all)->Threads(2);
BENCHMARK(BM_mark_diff_lines)->Apply(args_all)->Threads(2);
BENCHMARK(BM_remark_same_value)->Apply(args_default_granule);
BENCHMARK(BM_remark_random)->Apply(args_default_granule);
BENCHMARK(BM_slots_of)->Apply(args_default_granule);

int main(int argc, char** argv)
{
    const uint64_t sizes[3] = {64ull << 20, 1024ull << 20, 1024ull << 20};
    const uint32_t shifts[2] = {0, 16};
    for (int id = 0; id < 3; ++id)
        for (int g = 0; g < 2; ++g)
            g_maps[id][g] = std::make_unique<bench::OwnedMap>(sizes[id], shifts[g], id == 2);
    std::printf("maps: 64 MB and 1 GB on 4 KB pages (MAP_SHARED, like PostgreSQL without huge pages), "
                "1 GB on transparent huge pages; LSN step %llu bytes per mark\n",
                static_cast<unsigned long long>(kLsnStep));
    bench::print_huge_pages();
    std::fflush(stdout);

    /* 4M random targets (64 MB of targets, larger than any cache) over 10,000 relations of 8 GB. */
    bench::Rng rng(20240611);
    g_random_targets.resize(size_t{1} << 22);
    for (Target& t : g_random_targets) {
        t.rel = rel_n(1000 + static_cast<uint32_t>(rng.below(10000)));
        t.block = static_cast<BlockNumber>(rng.below(1u << 20));
    }

    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv))
        return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
