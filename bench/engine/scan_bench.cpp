/*
 * bench/engine/scan_bench.cpp -- the cost of ptrack_get_pagemapset() on a
 * simulated 1 TB cluster, with and without the segment summary.
 *
 * ptrack_get_pagemapset(L) walks every relation segment file of the data
 * directory and calls Map::segment_pagemap() for each (src/pg/sql/sql_functions.cpp),
 * which probes only the 8 MB ranges whose summary slot is >= L.
 * This benchmark times exactly that loop of engine calls over a synthetic
 * catalogue (directory walking and tuple building are not included):
 *
 *   - cluster: 3,000 small relations (1..1,000 blocks, log-uniform) and 900
 *     large ones (log-normal sizes, scaled so the cluster totals 2^27 blocks
 *     = 1 TB), cut into 1 GB segment files, all drawn from a fixed seed;
 *   - map: 1 GB (ptrack.map_size = 1024), default granule, 4 KB pages;
 *   - history: 5% of the blocks marked at LSNs before L (runs and singles
 *     anywhere in the cluster);
 *   - change since L: a fraction f of the blocks, 70% of them in runs of
 *     2..256 consecutive blocks and 30% single blocks, at random places
 *     inside an "active set" of relations holding `locality` x f of the
 *     cluster (locality 10: what changed lies in tables holding 10x as many
 *     blocks, e.g. current partitions, hot tables and their indexes; locality
 *     "uniform": anywhere, the worst case for the summary).  WAL positions
 *     advance by 200..8,000 bytes per mark.
 *
 * Every scan is verified against the ground truth: a truly changed block
 * missing from a bitmap aborts the run (the product's one promise); bits
 * set for unchanged blocks are counted as false positives.
 *
 * The machine is shared and noisy: each scan is repeated and the minimum
 * wall time and the minimum CPU time over the repeats are reported.
 *
 * Options: --quick runs only the f = 1% scenarios; --hugepages puts the map
 * on transparent 2 MB pages (PostgreSQL with huge_pages = on) and implies
 * --quick.
 */
#include <time.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <string>
#include <vector>

#include "common.h"
#include "ptrack/pagemap.h"

using ptrack::BlockNumber;
using ptrack::Lsn;
using ptrack::RelFork;

namespace {

constexpr uint32_t kSegBlocks = 131072;           /* RELSEG_SIZE: 1 GB of 8 KB blocks */
constexpr uint64_t kClusterBlocks = 1ull << 27;   /* 1 TB */
constexpr uint64_t kMapBytes = 1024ull << 20;     /* ptrack.map_size = 1024 */
constexpr int kRepeats = 3;

struct Relation {
    RelFork rel;
    uint64_t first;   /* global index of block 0 (ground-truth bitset) */
    uint32_t nblocks; /* size of the relation fork */
};

struct SegmentFile {
    uint32_t relation; /* index into the relation table */
    uint32_t segno;
    uint32_t nblocks;
};

struct Cluster {
    std::vector<Relation> relations;
    std::vector<SegmentFile> files;
    uint64_t total = 0;
};

Cluster make_cluster()
{
    bench::Rng rng(1);
    Cluster c;
    std::vector<uint64_t> sizes;
    uint64_t small_total = 0;
    for (int i = 0; i < 3000; ++i) {
        sizes.push_back(rng.log_uniform(1, 1000));
        small_total += sizes.back();
    }
    /* Large relations: log-normal (sigma 1.5, Box-Muller), scaled to fill the cluster. */
    std::vector<double> large;
    double sum = 0;
    for (int i = 0; i < 900; ++i) {
        const double u1 = rng.unit() + 1e-12, u2 = rng.unit();
        const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2 * M_PI * u2);
        large.push_back(std::exp(1.5 * z));
        sum += large.back();
    }
    const double scale = static_cast<double>(kClusterBlocks - small_total) / sum;
    for (double x : large)
        sizes.push_back(std::max<uint64_t>(1001, static_cast<uint64_t>(x * scale)));
    /* Shuffle so that small and large relations are interleaved in the catalogue. */
    for (size_t i = sizes.size() - 1; i > 0; --i)
        std::swap(sizes[i], sizes[rng.below(i + 1)]);
    for (size_t i = 0; i < sizes.size(); ++i) {
        Relation r{RelFork{1663, 16384, static_cast<uint32_t>(16384 + i), ptrack::kMainFork}, c.total,
                   static_cast<uint32_t>(sizes[i])};
        c.relations.push_back(r);
        c.total += sizes[i];
        for (uint32_t seg = 0; uint64_t{seg} * kSegBlocks < sizes[i]; ++seg) {
            const uint64_t left = sizes[i] - uint64_t{seg} * kSegBlocks;
            c.files.push_back(SegmentFile{static_cast<uint32_t>(i), seg,
                                          static_cast<uint32_t>(std::min<uint64_t>(left, kSegBlocks))});
        }
    }
    return c;
}

/* Where a global block index lives: relation and block within it. */
struct Locator {
    const Cluster& c;
    size_t find(uint64_t global) const
    {
        size_t lo = 0, hi = c.relations.size();
        while (hi - lo > 1) {
            const size_t mid = (lo + hi) / 2;
            if (c.relations[mid].first <= global)
                lo = mid;
            else
                hi = mid;
        }
        return lo;
    }
};

/* WAL position that advances by 200..8,000 bytes per mark. */
struct Wal {
    Lsn lsn;
    bench::Rng rng;
    explicit Wal(Lsn start) : lsn(start), rng(7) {}
    Lsn next() { return lsn += rng.between(200, 8000); }
};

/*
 * Marks changes until `target` distinct blocks of the relations in `active`
 * (indexes into the cluster, concatenated) are set in `truth`: 70% of the
 * blocks in runs of 2..256, 30% single blocks, at uniform random positions.
 * `truth` may be null (history: nothing to remember).
 */
void mark_changes(ptrack::Map& map, const Cluster& c, const std::vector<uint32_t>& active, uint64_t target,
                  Wal& wal, bench::Rng& rng, bench::Bits* truth, bench::Bits& seen)
{
    std::vector<uint64_t> offset(active.size() + 1, 0); /* positions within the active set */
    for (size_t i = 0; i < active.size(); ++i)
        offset[i + 1] = offset[i] + c.relations[active[i]].nblocks;
    const uint64_t active_blocks = offset.back();
    seen.clear();
    uint64_t distinct = 0, in_runs = 0, singles = 0;
    while (distinct < target && distinct < active_blocks) {
        const uint64_t pos = rng.below(active_blocks);
        const size_t k = static_cast<size_t>(std::upper_bound(offset.begin(), offset.end(), pos) - offset.begin()) - 1;
        const Relation& r = c.relations[active[k]];
        const auto start = static_cast<BlockNumber>(pos - offset[k]);
        uint64_t len = 1;
        if (static_cast<double>(singles) >= 0.3 * static_cast<double>(singles + in_runs))
            len = rng.log_uniform(2, 256);
        len = std::min<uint64_t>(len, r.nblocks - start);
        (len == 1 ? singles : in_runs) += len;
        for (BlockNumber b = start; b < start + len; ++b) {
            map.mark(r.rel, b, wal.next());
            const uint64_t g = r.first + b;
            if (!seen.test(g)) {
                seen.set(g);
                ++distinct;
            }
            if (truth != nullptr)
                truth->set(g);
        }
    }
}

/* Blocks of a segment file in 8 MB ranges whose summary slot is >= since (those the summary scan probes). */
uint64_t blocks_in_changed_ranges(const ptrack::Map& map, const RelFork& rel, uint32_t segno, uint32_t nblocks,
                                  Lsn since)
{
    const ptrack::Map::SegmentRef seg = map.segment_ref(ptrack::hash_rel(rel), segno);
    uint64_t blocks = 0;
    for (uint32_t start = 0; start < nblocks; start += ptrack::kSummaryRangeBlocks)
        if (ptrack::load_lsn(ptrack::Map::summary_slot(seg, seg.first_block + start)) >= since)
            blocks += std::min(nblocks - start, ptrack::kSummaryRangeBlocks);
    return blocks;
}

enum class Scan { kSummary, kNoSummary };

struct ScanResult {
    double wall = 1e30; /* minimum over repeats */
    double cpu = 1e30;  /* minimum over repeats */
    uint64_t reported = 0;
    uint64_t files_probed = 0;  /* segment files whose blocks were probed */
    uint64_t blocks_probed = 0; /* blocks of those files */
};

/* One full pass of pagemapset over every segment file; returns blocks reported. */
uint64_t scan_once(const ptrack::Map& map, const Cluster& c, Lsn since, Scan how, uint8_t* buf, uint64_t* probed,
                   uint64_t* blocks)
{
    uint64_t reported = 0;
    *probed = 0;
    *blocks = 0;
    for (const SegmentFile& f : c.files) {
        const RelFork& rel = c.relations[f.relation].rel;
        reported += map.segment_pagemap(rel, f.segno, f.nblocks, since, buf, how == Scan::kSummary);
        const uint64_t probed_blocks = how == Scan::kNoSummary
                                           ? f.nblocks
                                           : blocks_in_changed_ranges(map, rel, f.segno, f.nblocks, since);
        if (probed_blocks > 0) {
            ++*probed;
            *blocks += probed_blocks;
        }
    }
    return reported;
}

ScanResult time_scan(const ptrack::Map& map, const Cluster& c, Lsn since, Scan how, int repeats = kRepeats)
{
    static uint8_t buf[kSegBlocks / 8];
    ScanResult r;
    for (int i = 0; i < repeats; ++i) {
        const double w0 = bench::now_seconds(), c0 = bench::cpu_seconds();
        uint64_t probed = 0, blocks = 0;
        const uint64_t reported = scan_once(map, c, since, how, buf, &probed, &blocks);
        const double w = bench::now_seconds() - w0, cpu = bench::cpu_seconds() - c0;
        r.wall = std::min(r.wall, w);
        r.cpu = std::min(r.cpu, cpu);
        r.reported = reported;
        r.files_probed = probed;
        r.blocks_probed = blocks;
    }
    return r;
}

/*
 * Checks every bitmap of a scan against the truth: aborts on a false
 * negative; returns the number of false positives.
 */
uint64_t verify(const ptrack::Map& map, const Cluster& c, Lsn since, const bench::Bits& truth, bool use_summary)
{
    static uint8_t buf[kSegBlocks / 8];
    uint64_t fp = 0;
    for (const SegmentFile& f : c.files) {
        const Relation& r = c.relations[f.relation];
        map.segment_pagemap(r.rel, f.segno, f.nblocks, since, buf, use_summary);
        const uint64_t base = r.first + uint64_t{f.segno} * kSegBlocks;
        for (uint32_t b = 0; b < f.nblocks; ++b) {
            const bool listed = ptrack::pagemap_test(buf, (f.nblocks + 7) / 8, b);
            const bool changed = truth.test(base + b);
            if (changed && !listed) {
                std::fprintf(stderr, "FATAL: false negative: rel %u segment %u block %u changed since L but not listed\n",
                             r.rel.relfilenode, f.segno, b);
                std::exit(1);
            }
            if (listed && !changed)
                ++fp;
        }
    }
    return fp;
}

struct Scenario {
    const char* name;
    double fraction; /* changed since L */
    double locality; /* active set = locality x fraction of the cluster; 0 = uniform */
    bool no_summary; /* also time the scan without the summary */
};

}  // namespace

int main(int argc, char** argv)
{
    /*
     * --quick: only the f=1% scenarios; --hugepages: the map on transparent
     * 2 MB pages (PostgreSQL with huge_pages = on), implies --quick.
     */
    bool huge = false, quick = false;
    for (int i = 1; i < argc; ++i) {
        huge |= std::string(argv[i]) == "--hugepages";
        quick |= huge || std::string(argv[i]) == "--quick";
    }
    const Cluster c = make_cluster();
    uint64_t largest = 0, multi = 0;
    for (const Relation& r : c.relations) {
        largest = std::max<uint64_t>(largest, r.nblocks);
        multi += r.nblocks > kSegBlocks;
    }
    std::printf("cluster: %zu relations, %zu segment files, %" PRIu64 " blocks (%.3f TB), largest relation %.1f GB, "
                "%" PRIu64 " relations of more than one segment\n",
                c.relations.size(), c.files.size(), c.total, static_cast<double>(c.total) * 8192 / 1e12 / 1.099511627776,
                static_cast<double>(largest) * 8192 / (1 << 30), multi);

    bench::OwnedMap owned(kMapBytes, ptrack::MapGeometry::kDefaultGranuleShift, huge);
    ptrack::Map& map = owned.map;
    if (huge)
        bench::print_huge_pages();
    std::printf("map: %" PRIu64 " MB region, %" PRIu64 " lines, %" PRIu64 " summary slots, granule 2^%u bytes\n",
                owned.geometry.region_bytes() >> 20, owned.geometry.line_count, owned.geometry.summary_count,
                owned.geometry.lsn_granule_shift);

    bench::Bits truth(c.total), seen(c.total);
    const Scenario scenarios[] = {
        {"f=1%, locality 10", 0.01, 10, true},
        {"f=1%, uniform", 0.01, 0, true},
        {"f=0%", 0.0, 10, false},
        {"f=10%, locality 10", 0.10, 10, false},
        {"f=100%", 1.0, 0, false},
    };
    std::printf("\nprobed: segment files with a block probed, and the share of the cluster's blocks probed, with the summary\n");
    std::printf("seconds: wall (cpu), minimum of %d runs; ratio = no summary / summary, on cpu\n", kRepeats);
    std::printf("%-20s %8s %10s %7s %17s %17s %7s %9s\n", "scenario", "changed", "probed", "blocks", "summary",
                "no summary", "ratio", "fp");
    for (const Scenario& s : scenarios) {
        if (quick && s.fraction != 0.01)
            continue;
        map.clear();
        truth.clear();
        Wal wal(Lsn{1} << 32);
        bench::Rng rng(42);
        /* History: 5% of the blocks, anywhere, before L. */
        const std::vector<uint32_t> all = bench::active_set(c, 1.0, 0);
        mark_changes(map, c, all, c.total / 20, wal, rng, nullptr, seen);
        const Lsn since = wal.lsn + 1;
        uint64_t changed = 0;
        if (s.fraction >= 1.0) {
            for (const Relation& r : c.relations)
                for (BlockNumber b = 0; b < r.nblocks; ++b) {
                    map.mark(r.rel, b, wal.next());
                    truth.set(r.first + b);
                }
            changed = c.total;
        } else if (s.fraction > 0) {
            const double active_fraction = s.locality > 0 ? std::min(1.0, s.locality * s.fraction) : 1.0;
            const std::vector<uint32_t> active = bench::active_set(c, active_fraction, 99);
            mark_changes(map, c, active, static_cast<uint64_t>(s.fraction * static_cast<double>(c.total)), wal, rng,
                         &truth, seen);
            changed = truth.count();
        }
        const uint64_t fp = verify(map, c, since, truth, true);
        const ScanResult with = time_scan(map, c, since, Scan::kSummary);
        ScanResult without;
        if (s.no_summary) {
            verify(map, c, since, truth, false);
            without = time_scan(map, c, since, Scan::kNoSummary);
        }
        if (with.reported != changed + fp) {
            std::fprintf(stderr, "FATAL: reported %" PRIu64 " != changed %" PRIu64 " + fp %" PRIu64 "\n", with.reported,
                         changed, fp);
            return 1;
        }
        char nosumm[40] = "-", ratio[32] = "-", with_s[40];
        if (s.no_summary) {
            std::snprintf(nosumm, sizeof nosumm, "%.3f (%.3f)", without.wall, without.cpu);
            std::snprintf(ratio, sizeof ratio, "%.1fx", without.cpu / with.cpu);
        }
        std::snprintf(with_s, sizeof with_s, "%.3f (%.3f)", with.wall, with.cpu);
        std::printf("%-20s %7.2f%% %4" PRIu64 "/%-5zu %6.1f%% %17s %17s %7s %9" PRIu64 "\n", s.name,
                    100.0 * static_cast<double>(changed) / static_cast<double>(c.total), with.files_probed,
                    c.files.size(), 100.0 * static_cast<double>(with.blocks_probed) / static_cast<double>(c.total),
                    with_s, nosumm, ratio, fp);
        std::fflush(stdout);
    }
    std::printf("\nno false negative in any scan (every truly changed block was listed)\n");
    return 0;
}
