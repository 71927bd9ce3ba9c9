/*
 * bench/engine/summary_bench.cpp -- exact change summaries (ptrack/change_set.h,
 * ptrack/summary_file.h, ptrack/summary_answer.h) against the map on a
 * simulated 10 TiB cluster: one day of changes between two backups.
 *
 * Cluster: 31,200 relations (scan_bench's catalogue times 8: 24,000 small
 * ones of 1..1,000 blocks, log-uniform, and 7,200 large ones, log-normal,
 * sigma 1.5) scaled to 10 TiB = 1,342,177,280 blocks of 8 KB, cut into 1 GB
 * segment files; fixed seed.
 *
 * A day: changes until a fraction f (1%, 5%, 20%) of the blocks has
 * changed, as the WAL follower sees them (one add per block reference):
 *   uniform       single blocks anywhere in the cluster (the worst case
 *                 for both the map and the summaries);
 *   concentrated  as scan_bench: 70% of the blocks in runs of 2..256, 30%
 *                 single, inside relations holding 4 x f of the cluster.
 * Blocks are referenced again as the draw repeats them.
 *
 * Summaries: the stream goes into a ChangeSet with a 64 MB budget; when it
 * says kCutSoon a summary is written (to memory) and the set cleared; the
 * rest of the day stays in memory.  The backup's L is the start of the day
 * (a summary boundary, as the follower cuts at checkpoint redo LSNs).
 * Reported: ns per add (CPU, writes excluded), the same stream's ns per
 * reference through add_blocks() in batches of 4 (about one WAL record's
 * references) and of 16 (consecutive records), into sets of their own that
 * are cleared, not written, when they say kCutSoon; the set's peak bytes, the
 * summaries written in the day and their bytes, the bytes after combining
 * them into one day file, what PostgreSQL 17's roaring-like chunk encoding
 * would take for the same blocks (2 bytes per block up to 4,096 a chunk,
 * else an 8 KB bitmap; its real format differs a little), and the time to
 * answer ptrack_get_pagemapset(L): CPU to validate every summary (CRC-32C
 * with SSE4.2 and every record) and to build the page bitmap of every
 * changed segment file from their union with the in-memory set.  Every
 * answer is checked against the truth: a missed block aborts, extra blocks
 * are counted (false positives).
 *
 * Map (the same stream, ptrack.map_size = 1024: a 1 GB map), after 5% of
 * history marked before L as scan_bench does: CPU per mark, pagemapset's
 * CPU and false positives.  To keep the run short on a shared machine, the
 * map is simulated at scale 1/N (--map-sample N, default 8): only the
 * blocks of every N-th segment file are marked, into a map of 1/N GB (the
 * same load per slot, so the same false positives), and pagemapset's CPU
 * on those files is multiplied by N.  A smaller map sits better in the
 * caches and TLB, so its mark and scan figures are if anything optimistic
 * for the map.
 *
 * The stream is drawn in batches of 1M references ahead of the adds (or
 * marks), so that only the adds are timed, not the drawing.
 *
 * Options: --quick (1 TiB, 1% only, for development), --no-map,
 * --map-sample N.
 */
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "../crc32c_sse42.h"
#include "common.h"
#include "ptrack/change_set.h"
#include "ptrack/pagemap.h"
#include "ptrack/summary_answer.h"
#include "ptrack/summary_file.h"

using ptrack::BlockNumber;
using ptrack::Lsn;
using ptrack::RelFork;

namespace {

constexpr uint32_t kSegBlocks = 131072;
constexpr size_t kBudget = size_t{64} << 20;

/* The engine's CRC-32C callbacks (bench/crc32c_sse42.h). */
constexpr auto crc_update = crc32c_sse42_update;
constexpr auto crc_final = crc32c_sse42;

struct Relation {
    RelFork rel;
    uint64_t first;      /* global index of block 0 (truth bitsets) */
    uint32_t nblocks;
    uint64_t first_file; /* index of its segment 0 among the cluster's segment files */
};

struct Cluster {
    std::vector<Relation> relations;
    uint64_t total = 0;
    uint64_t files = 0;
};

Cluster make_cluster(uint64_t blocks, int small, int large)
{
    bench::Rng rng(1);
    std::vector<uint64_t> sizes;
    uint64_t small_total = 0;
    for (int i = 0; i < small; ++i) {
        sizes.push_back(rng.log_uniform(1, 1000));
        small_total += sizes.back();
    }
    std::vector<double> big;
    double sum = 0;
    for (int i = 0; i < large; ++i) {
        const double u1 = rng.unit() + 1e-12, u2 = rng.unit();
        big.push_back(std::exp(1.5 * std::sqrt(-2.0 * std::log(u1)) * std::cos(2 * M_PI * u2)));
        sum += big.back();
    }
    const double scale = static_cast<double>(blocks - small_total) / sum;
    for (double x : big)
        sizes.push_back(std::min<uint64_t>(UINT32_MAX / 2, std::max<uint64_t>(1001, static_cast<uint64_t>(x * scale))));
    for (size_t i = sizes.size() - 1; i > 0; --i)
        std::swap(sizes[i], sizes[rng.below(i + 1)]);
    Cluster c;
    for (size_t i = 0; i < sizes.size(); ++i) {
        c.relations.push_back(Relation{RelFork{1663, 16384, static_cast<uint32_t>(16384 + i), ptrack::kMainFork},
                                       c.total, static_cast<uint32_t>(sizes[i]), c.files});
        c.total += sizes[i];
        c.files += (sizes[i] + kSegBlocks - 1) / kSegBlocks;
    }
    return c;
}

/*
 * Replays one day's block references: calls sink(relation index, block)
 * until `target` distinct blocks are set in `seen` (cleared first).  Same
 * seed, same stream.
 */
template <class Sink>
uint64_t replay_day(const Cluster& c, const std::vector<uint32_t>& active, bool runs, uint64_t target,
                    uint64_t seed, bench::Bits& seen, Sink&& sink)
{
    std::vector<uint64_t> offset(active.size() + 1, 0);
    for (size_t i = 0; i < active.size(); ++i)
        offset[i + 1] = offset[i] + c.relations[active[i]].nblocks;
    const uint64_t active_blocks = offset.back();
    bench::Rng rng(seed);
    seen.clear();
    uint64_t distinct = 0, in_runs = 0, singles = 0, refs = 0;
    while (distinct < target && distinct < active_blocks) {
        const uint64_t pos = rng.below(active_blocks);
        const size_t k = static_cast<size_t>(std::upper_bound(offset.begin(), offset.end(), pos) - offset.begin()) - 1;
        const Relation& r = c.relations[active[k]];
        const auto start = static_cast<BlockNumber>(pos - offset[k]);
        uint64_t len = 1;
        if (runs && static_cast<double>(singles) >= 0.3 * static_cast<double>(singles + in_runs))
            len = rng.log_uniform(2, 256);
        len = std::min<uint64_t>(len, r.nblocks - start);
        (len == 1 ? singles : in_runs) += len;
        for (BlockNumber b = start; b < start + len; ++b) {
            sink(active[k], b);
            ++refs;
            const uint64_t g = r.first + b;
            if (!seen.test(g)) {
                seen.set(g);
                ++distinct;
            }
        }
    }
    return refs;
}

/* Block references drawn ahead, so that only the adds (or marks) are timed. */
struct Ref {
    uint32_t rel;
    BlockNumber block;
};
struct Batch {
    static constexpr size_t kRefs = size_t{1} << 20;
    std::vector<Ref> refs;
    Batch() { refs.reserve(kRefs); }
};

/* A summary file in memory. */
class VectorSink final : public ptrack::FlushSink {
public:
    bool write(const void* data, size_t len, uint64_t offset) noexcept override
    {
        if (bytes.size() < offset + len)
            bytes.resize(offset + len);
        std::memcpy(bytes.data() + offset, data, len);
        return true;
    }
    std::vector<uint8_t> bytes;
};

struct Writer {
    std::vector<uint8_t> buffer = std::vector<uint8_t>(1 << 20);
    std::unique_ptr<ptrack::ChunkBits> scratch = std::make_unique<ptrack::ChunkBits>();
    ptrack::SummaryWriteBuffers get() { return {buffer.data(), buffer.size(), scratch.get()}; }
};

constexpr uint64_t kSystem = 7400000000000000001ULL;
constexpr uint32_t kPg = 17;

ptrack::SummaryHeader header(Lsn start, Lsn end)
{
    ptrack::SummaryHeader h{};
    h.pg_major = kPg;
    h.timeline = 1;
    h.system_identifier = kSystem;
    h.start_lsn = start;
    h.end_lsn = end;
    return h;
}

std::vector<uint8_t> write_summary(ptrack::ChangeCursor& cursor, Lsn start, Lsn end, Writer& w)
{
    VectorSink sink;
    if (ptrack::summary_write(header(start, end), cursor, crc_final, crc_update, w.get(), sink, nullptr) !=
        ptrack::SummaryStatus::kOk) {
        std::fprintf(stderr, "FATAL: summary_write failed\n");
        std::exit(1);
    }
    return std::move(sink.bytes);
}

/* PostgreSQL 17's encoding of the same blocks, as its blkreftable chunks: 2 bytes a block up to 4,096, else 8 KB. */
uint64_t roaring_like_bytes(ptrack::ChangeCursor& cursor, ptrack::ChunkBits* bits)
{
    uint64_t bytes = 0;
    RelFork rel{};
    BlockNumber limit = 0;
    uint32_t chunk = 0;
    while (cursor.next_fork(&rel, &limit)) {
        bytes += 24; /* relation, fork, limit, chunk count */
        while (cursor.next_chunk(&chunk)) {
            std::memset(bits, 0, sizeof(*bits));
            cursor.or_chunk(bits);
            uint64_t n = 0;
            for (uint32_t w = 0; w < ptrack::kChunkWords; ++w)
                n += static_cast<uint64_t>(__builtin_popcountll(bits->words[w]));
            bytes += 4 + std::min<uint64_t>(2 * n, 8192);
        }
    }
    return bytes;
}

struct Answer {
    double cpu = 0;
    uint64_t listed = 0;
    uint64_t segments = 0;
};

/*
 * ptrack_get_pagemapset(L) from `files` (all needed: L is the first one's
 * start) and the live set: validate each file, then one bitmap per changed
 * segment file.  With `truth`, checks every bitmap and counts false positives.
 */
Answer answer(const std::vector<std::vector<uint8_t>>& files, ptrack::ChangeSet* live, const Cluster& c,
              const bench::Bits* truth, uint64_t* false_positives)
{
    Answer a;
    const double t0 = bench::cpu_seconds();
    std::vector<ptrack::SummaryView> views(files.size());
    for (size_t i = 0; i < files.size(); ++i)
        if (ptrack::summary_open(files[i].data(), files[i].size(), kSystem, kPg, crc_final, &views[i]) !=
            ptrack::SummaryStatus::kOk) {
            std::fprintf(stderr, "FATAL: summary %zu does not validate\n", i);
            std::exit(1);
        }
    std::vector<ptrack::SummaryCursor> cursors;
    for (const auto& v : views)
        cursors.emplace_back(v);
    std::vector<ptrack::MergeCursor::State> states(files.size() + 1);
    for (size_t i = 0; i < files.size(); ++i)
        states[i].source = &cursors[i];
    ptrack::ChangeCursor* live_cursor = live != nullptr ? live->open_cursor() : nullptr;
    size_t n = files.size();
    if (live_cursor != nullptr)
        states[n++].source = live_cursor;
    ptrack::MergeCursor merged(states.data(), n);
    auto scratch = std::make_unique<ptrack::ChunkBits>();
    std::vector<uint8_t> pagemap(ptrack::pagemap_bytes(kSegBlocks), 0);
    ptrack::SegmentPagemaps segments(kSegBlocks, scratch.get(), pagemap.data());
    RelFork rel{};
    BlockNumber limit = 0;
    uint64_t fp = 0, tp = 0;
    double verify_cpu = 0;
    while (merged.next_fork(&rel, &limit)) {
        segments.start_fork();
        uint32_t segno = 0, count = 0;
        size_t length = 0;
        while (segments.next(merged, &segno, &length, &count)) {
            ++a.segments;
            a.listed += count;
            if (truth == nullptr)
                continue;
            const double v0 = bench::cpu_seconds();
            const Relation& r = c.relations[rel.relfilenode - 16384];
            const uint64_t base = r.first + uint64_t{segno} * kSegBlocks;
            for (size_t byte = 0; byte < length; ++byte)
                for (uint32_t bit = 0; bit < 8; ++bit)
                    if ((pagemap[byte] >> bit) & 1) {
                        const uint64_t block = byte * 8 + bit;
                        if (uint64_t{segno} * kSegBlocks + block < r.nblocks && truth->test(base + block))
                            ++tp;
                        else
                            ++fp;
                    }
            verify_cpu += bench::cpu_seconds() - v0;
        }
    }
    if (live_cursor != nullptr)
        live->close_cursor(live_cursor);
    a.cpu = bench::cpu_seconds() - t0 - verify_cpu;
    if (truth != nullptr) {
        const uint64_t changed = truth->count();
        if (tp != changed) {
            std::fprintf(stderr, "FATAL: false negatives: %" PRIu64 " changed blocks, %" PRIu64 " listed\n", changed,
                         tp);
            std::exit(1);
        }
        *false_positives = fp;
    }
    return a;
}

}  // namespace

int main(int argc, char** argv)
{
    bool quick = false, map_too = true;
    uint32_t sample = 8;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        quick |= a == "--quick";
        map_too &= a != "--no-map";
        if (a == "--map-sample" && i + 1 < argc)
            sample = static_cast<uint32_t>(std::atoi(argv[++i]));
    }
    const uint64_t cluster_blocks = quick ? uint64_t{1} << 27 : uint64_t{10} << 27;
    const Cluster c = quick ? make_cluster(cluster_blocks, 3000, 900) : make_cluster(cluster_blocks, 24000, 7200);
    uint64_t largest = 0;
    for (const Relation& r : c.relations)
        largest = std::max<uint64_t>(largest, r.nblocks);
    std::printf("cluster: %zu relations, %" PRIu64 " segment files, %" PRIu64 " blocks (%.2f TiB), largest %.0f GiB\n",
                c.relations.size(), c.files, c.total, static_cast<double>(c.total) * 8192 / std::pow(2.0, 40),
                static_cast<double>(largest) * 8192 / std::pow(2.0, 30));
    std::printf("summaries: ChangeSet budget %zu MB; map: 1 GB scaled down: 1 segment file in %u, map of 1/%u GB\n",
                kBudget >> 20, sample, sample);

    struct Scenario {
        const char* name;
        double fraction;
        bool concentrated;
    };
    const Scenario all[] = {{"1% uniform", 0.01, false}, {"1% concentrated", 0.01, true},
                            {"5% uniform", 0.05, false}, {"5% concentrated", 0.05, true},
                            {"20% uniform", 0.20, false}, {"20% concentrated", 0.20, true}};

    bench::Bits truth(c.total);
    std::unique_ptr<bench::OwnedMap> owned;
    if (map_too)
        owned.reset(new bench::OwnedMap((uint64_t{1} << 30) / sample));

    std::printf("\n%-17s %9s %8s %7s | %6s %6s %6s %8s %5s %9s %9s %9s %8s %8s %4s | %7s %9s %8s\n", "scenario", "changed",
                "refs", "", "ns/add", "x4 ns", "x16 ns", "peak MB", "files", "day MB", "1 file MB", "PG17-like", "answer s", "1 file s",
                "fp", "ns/mark", "map ans s", "map fp");
    for (const Scenario& s : all) {
        if (quick && s.fraction != 0.01)
            continue;
        const std::vector<uint32_t> active =
            s.concentrated ? bench::active_set(c, std::min(1.0, 4 * s.fraction), 99) : bench::active_set(c, 1.0, 0);
        const auto target = static_cast<uint64_t>(s.fraction * static_cast<double>(c.total));
        const uint64_t seed = 4242 + static_cast<uint64_t>(s.fraction * 1000) + s.concentrated;

        /* Summaries: the day into a budgeted set, cut when it asks; only the adds are timed. */
        ptrack::ChangeSet set(kBudget);
        Writer writer;
        std::vector<std::vector<uint8_t>> files;
        Lsn lsn = Lsn{1} << 40, start = lsn;
        double feed_cpu = 0;
        /* The same stream through add_blocks(), batches of kBatchSizes[k] references. */
        constexpr uint32_t kBatchSizes[2] = {4, 16};
        double batch_cpu[2] = {0, 0};
        std::unique_ptr<ptrack::ChangeSet> batched[2] = {std::make_unique<ptrack::ChangeSet>(kBudget),
                                                         std::make_unique<ptrack::ChangeSet>(kBudget)};
        std::vector<ptrack::BlockRef> refs_of(Batch::kRefs);
        Batch batch;
        auto add_batch = [&]() {
            const double f0 = bench::cpu_seconds();
            for (const Ref& ref : batch.refs) {
                lsn += 1000;
                const ptrack::AddResult r = set.add_block(c.relations[ref.rel].rel, ref.block);
                if (r == ptrack::AddResult::kOk)
                    continue;
                if (r == ptrack::AddResult::kRefused) {
                    std::fprintf(stderr, "FATAL: refused before kCutSoon\n");
                    std::exit(1);
                }
                feed_cpu += bench::cpu_seconds() - f0;
                ptrack::ChangeCursor* cur = set.open_cursor();
                files.push_back(write_summary(*cur, start, lsn + 1, writer));
                set.close_cursor(cur);
                set.clear();
                start = lsn + 1;
                feed_cpu -= bench::cpu_seconds() - f0; /* the rest of the batch is timed from here */
            }
            feed_cpu += bench::cpu_seconds() - f0;
            for (size_t i = 0; i < batch.refs.size(); ++i)
                refs_of[i] = ptrack::BlockRef{c.relations[batch.refs[i].rel].rel, batch.refs[i].block};
            for (int k = 0; k < 2; ++k) {
                ptrack::ChangeSet& b = *batched[k];
                const double b0 = bench::cpu_seconds();
                for (size_t i = 0; i < batch.refs.size(); i += kBatchSizes[k]) {
                    const auto n = static_cast<uint32_t>(std::min<size_t>(kBatchSizes[k], batch.refs.size() - i));
                    const ptrack::AddResult r = b.add_blocks(&refs_of[i], n);
                    if (r == ptrack::AddResult::kRefused) {
                        std::fprintf(stderr, "FATAL: batch refused before kCutSoon\n");
                        std::exit(1);
                    }
                    if (r == ptrack::AddResult::kCutSoon)
                        b.clear();
                }
                batch_cpu[k] += bench::cpu_seconds() - b0;
            }
            batch.refs.clear();
        };
        const uint64_t refs = replay_day(c, active, s.concentrated, target, seed, truth, [&](uint32_t rel, BlockNumber b) {
            batch.refs.push_back(Ref{rel, b});
            if (batch.refs.size() == Batch::kRefs)
                add_batch();
        });
        add_batch();
        const uint64_t changed = truth.count();

        /* The answer from the day's summaries and the in-memory rest. */
        uint64_t fp = 0;
        const Answer live_answer = answer(files, &set, c, &truth, &fp);
        uint64_t day_bytes = 0;
        for (const auto& f : files)
            day_bytes += f.size();
        /* The whole day as one file: the rest written, then everything combined (retention). */
        {
            ptrack::ChangeCursor* cur = set.open_cursor();
            files.push_back(write_summary(*cur, start, lsn + 1, writer));
            set.close_cursor(cur);
        }
        uint64_t all_bytes = 0;
        for (const auto& f : files)
            all_bytes += f.size();
        std::vector<ptrack::SummaryView> views(files.size());
        for (size_t i = 0; i < files.size(); ++i)
            ptrack::summary_open(files[i].data(), files[i].size(), kSystem, kPg, crc_final, &views[i]);
        std::vector<ptrack::SummaryCursor> cursors(files.size());
        std::vector<ptrack::MergeCursor::State> states(files.size());
        VectorSink combined;
        if (ptrack::summary_combine(views.data(), views.size(), cursors.data(), states.data(), crc_final, crc_update,
                                    writer.get(), combined, nullptr) != ptrack::SummaryStatus::kOk) {
            std::fprintf(stderr, "FATAL: combine failed\n");
            return 1;
        }
        ptrack::SummaryView day_view{};
        ptrack::summary_open(combined.bytes.data(), combined.bytes.size(), kSystem, kPg, crc_final, &day_view);
        ptrack::SummaryCursor day_cursor(day_view);
        const uint64_t pg_like = roaring_like_bytes(day_cursor, writer.scratch.get());
        uint64_t fp_one = 0;
        const Answer one = answer({combined.bytes}, nullptr, c, &truth, &fp_one);
        const size_t peak = set.peak_bytes();
        set.reset();
        for (auto& b : batched)
            b->reset();

        /* The map: history, the same day, then pagemapset on a sample of the files. */
        char mark_s[32] = "-", map_ans[32] = "-", map_fp[32] = "-";
        if (map_too) {
            ptrack::Map& map = owned->map;
            map.clear();
            Lsn mlsn = Lsn{1} << 32;
            /* Only the sampled segment files' blocks go to the (1/sample size) map. */
            auto sampled = [&](uint32_t rel, BlockNumber b) {
                return (c.relations[rel].first_file + b / kSegBlocks) % sample == 0;
            };
            bench::Bits history(c.total);
            replay_day(c, bench::active_set(c, 1.0, 0), true, c.total / 20, 777, history, [&](uint32_t rel, BlockNumber b) {
                mlsn += 1000;
                if (sampled(rel, b))
                    map.mark(c.relations[rel].rel, b, mlsn);
            });
            const Lsn since = mlsn + 1;
            uint64_t marks = 0;
            double mark_cpu = 0;
            auto mark_batch = [&]() {
                const double m0 = bench::cpu_seconds();
                for (const Ref& ref : batch.refs)
                    map.mark(c.relations[ref.rel].rel, ref.block, mlsn += 1000);
                mark_cpu += bench::cpu_seconds() - m0;
                marks += batch.refs.size();
                batch.refs.clear();
            };
            bench::Bits again(c.total);
            replay_day(c, active, s.concentrated, target, seed, again, [&](uint32_t rel, BlockNumber b) {
                if (!sampled(rel, b))
                    return;
                batch.refs.push_back(Ref{rel, b});
                if (batch.refs.size() == Batch::kRefs)
                    mark_batch();
            });
            mark_batch();
            std::snprintf(mark_s, sizeof mark_s, "%.0f", mark_cpu * 1e9 / static_cast<double>(marks));
            std::vector<uint8_t> pm(ptrack::pagemap_bytes(kSegBlocks));
            uint64_t listed = 0, unchanged = 0, mfp = 0;
            double scan_cpu = 0;
            for (const Relation& r : c.relations)
                for (uint32_t seg = 0; uint64_t{seg} * kSegBlocks < r.nblocks; ++seg) {
                    if ((r.first_file + seg) % sample != 0)
                        continue;
                    const uint32_t n = static_cast<uint32_t>(
                        std::min<uint64_t>(kSegBlocks, r.nblocks - uint64_t{seg} * kSegBlocks));
                    const double s0 = bench::cpu_seconds();
                    listed += map.segment_pagemap(r.rel, seg, n, since, pm.data(), true);
                    scan_cpu += bench::cpu_seconds() - s0;
                    const uint64_t base = r.first + uint64_t{seg} * kSegBlocks;
                    for (uint32_t b = 0; b < n; ++b) {
                        const bool t = truth.test(base + b);
                        const bool l = ptrack::pagemap_test(pm.data(), pm.size(), b);
                        if (t && !l) {
                            std::fprintf(stderr, "FATAL: map false negative\n");
                            return 1;
                        }
                        unchanged += !t;
                        mfp += l && !t;
                    }
                }
            std::snprintf(map_ans, sizeof map_ans, "%.2f", scan_cpu * sample);
            std::snprintf(map_fp, sizeof map_fp, "%.1f%%", 100.0 * static_cast<double>(mfp) / static_cast<double>(unchanged));
        }

        std::printf("%-17s %8.2f%% %7.1fM %7s | %6.1f %6.1f %6.1f %8.1f %5zu %9.1f %9.1f %9.1f %8.2f %8.2f %4" PRIu64
                    " | %7s %9s %8s\n",
                    s.name, 100.0 * static_cast<double>(changed) / static_cast<double>(c.total),
                    static_cast<double>(refs) / 1e6, "", feed_cpu * 1e9 / static_cast<double>(refs),
                    batch_cpu[0] * 1e9 / static_cast<double>(refs), batch_cpu[1] * 1e9 / static_cast<double>(refs),
                    static_cast<double>(peak) / 1e6, files.size(), static_cast<double>(all_bytes) / 1e6,
                    static_cast<double>(combined.bytes.size()) / 1e6, static_cast<double>(pg_like) / 1e6,
                    live_answer.cpu, one.cpu, fp + fp_one, mark_s, map_ans, map_fp);
        std::fflush(stdout);
        (void) day_bytes;
    }
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    std::printf("\nno false negative (every changed block listed, by the summaries and by the map)\n");
    std::printf("process peak RSS %.1f GB (truth bitsets, the map, the summaries in memory)\n",
                static_cast<double>(ru.ru_maxrss) / 1048576.0);
    return 0;
}
