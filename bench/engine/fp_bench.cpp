/*
 * bench/engine/fp_bench.cpp -- false positives of the map layout against two
 * simpler layouts at equal memory, and the effect of the LSN granule.
 *
 * One stream of block writes, with WAL positions, is replayed into each
 * layout; then "changed since L" is asked, for L the WAL position of the
 * middle write, of every block of the simulated database that was NOT
 * written after L.  Every yes is a false positive; the rate is
 * fp / unchanged blocks.  (A block written after L must always read as
 * changed: checked too, a miss aborts.)
 *
 * Layouts, all given the same number of bytes (the engine's whole region,
 * segment summary included):
 *   (a) ours: ptrack::Map from the engine: two probes, each one 64-byte line
 *       of 8 slots shared by 8 consecutive blocks, read as
 *       ptrack_get_pagemapset() lists blocks (Map::segment_pagemap): both
 *       probes >= L and the summary slot of the block's 8 MB range >= L;
 *   (a') the same map, probes only (Map::block_changed), which shows what
 *       the range summary removes;
 *   (b) two independently hashed slots per block, no line grouping;
 *   (c) one hashed slot per block;
 *   (d) prototype: as (a) but three probes (three lines) per block group,
 *       to test whether a third probe would pay at these loads;
 *   (b') as (b), but given only the bytes of ours' block slots (the region
 *       less the segment summary), to test whether what separates (a) from
 *       (b) is the summary's share of the memory rather than the grouping.
 * All store LSNs rounded up to the same granule (Map::stored_lsn).
 *
 * The stream (fixed seed) is pgbench-like on a 32 GB database:
 *   - 45% random single-block writes to a hot 2.4M-block table (accounts),
 *   - 15% random writes to its 400K-block index,
 *   - 10% to two tiny hot tables (branches, tellers: 1 and 10 blocks),
 *   - 15% appends to 3 growing relations (history heap and two append-only
 *     log tables): the tail block is rewritten until it fills (1 in 8
 *     writes moves to a new block),
 *   - 15% bulk loads: runs of 1,000..20,000 consecutive blocks into new
 *     relations (COPY, CREATE INDEX);
 *   - 1.1M blocks in 40 relations are never written (cold data).
 * WAL advances by 200..8,000 bytes per write.  Three stream lengths give
 * about 1%, 4% and 12% of the database changed since L, the range of a
 * daily incremental backup.
 *
 * Beside the measured rates, the textbook estimate for uniform hashing:
 * with n blocks changed since L and m slots, two probes give
 * (1 - e^(-2n/m))^2 and one probe 1 - e^(-n/m); for ours m counts only the
 * block slots (the segment summary takes 1/64 of the bytes); it models (a').  Map sizes are 1/10000, 1/1000 and 1/100 of the
 * database (final) size.
 */
#include <algorithm>
#include <cinttypes>
#include <memory>
#include <vector>

#include "common.h"

using ptrack::BlockNumber;
using ptrack::Lsn;
using ptrack::RelFork;

namespace {

struct Write {
    uint32_t relation;
    BlockNumber block;
    Lsn lsn;
};

struct Database {
    std::vector<RelFork> rels;
    std::vector<uint32_t> nblocks; /* final size */
    std::vector<uint64_t> first;   /* global index of block 0 */
    uint64_t total = 0;
};

struct Stream {
    Database db;
    std::vector<Write> writes;
    Lsn since = 0;      /* L: WAL position of the middle write */
    size_t middle = 0;  /* writes[middle..] are after L */
};

Stream make_stream(uint64_t nwrites, uint64_t seed)
{
    bench::Rng rng(seed);
    Stream s;
    Database& db = s.db;
    auto add_rel = [&](uint32_t nblocks) {
        db.rels.push_back(RelFork{1663, 16384, static_cast<uint32_t>(16384 + db.rels.size()), ptrack::kMainFork});
        db.nblocks.push_back(nblocks);
        return static_cast<uint32_t>(db.rels.size() - 1);
    };
    const uint32_t accounts = add_rel(2400000);
    const uint32_t accounts_pkey = add_rel(400000);
    const uint32_t branches = add_rel(1);
    const uint32_t tellers = add_rel(10);
    uint32_t appended[3];
    for (uint32_t& a : appended)
        a = add_rel(static_cast<uint32_t>(rng.between(10000, 100000)));
    for (int i = 0; i < 40; ++i) /* cold relations, ~1.1M blocks in all */
        add_rel(static_cast<uint32_t>(rng.log_uniform(1000, 120000)));
    int64_t bulk_rel = -1;
    uint32_t bulk_left = 0;

    Lsn lsn = Lsn{1} << 32;
    s.writes.reserve(nwrites);
    for (uint64_t i = 0; i < nwrites; ++i) {
        lsn += rng.between(200, 8000);
        const uint64_t kind = rng.below(100);
        Write w{0, 0, lsn};
        if (kind < 45) {
            w.relation = accounts;
            w.block = static_cast<BlockNumber>(rng.below(db.nblocks[accounts]));
        } else if (kind < 60) {
            w.relation = accounts_pkey;
            w.block = static_cast<BlockNumber>(rng.below(db.nblocks[accounts_pkey]));
        } else if (kind < 70) {
            w.relation = rng.below(11) == 0 ? branches : tellers;
            w.block = static_cast<BlockNumber>(rng.below(db.nblocks[w.relation]));
        } else if (kind < 85) {
            w.relation = appended[rng.below(3)];
            if (rng.below(8) == 0)
                ++db.nblocks[w.relation];
            w.block = db.nblocks[w.relation] - 1;
        } else {
            if (bulk_left == 0) {
                bulk_rel = add_rel(0);
                bulk_left = static_cast<uint32_t>(rng.log_uniform(1000, 20000));
            }
            w.relation = static_cast<uint32_t>(bulk_rel);
            w.block = db.nblocks[w.relation]++;
            --bulk_left;
        }
        s.writes.push_back(w);
    }
    s.middle = s.writes.size() / 2;
    s.since = s.writes[s.middle].lsn;
    db.first.resize(db.rels.size());
    for (size_t r = 0; r < db.rels.size(); ++r) {
        db.first[r] = db.total;
        db.total += db.nblocks[r];
    }
    return s;
}

/* Rounding of the stored LSN, as Map::stored_lsn. */
inline Lsn round_up(Lsn lsn, uint32_t shift)
{
    return lsn | ((Lsn{1} << shift) - 1);
}

/* (b): two independently hashed slots per block, no grouping; second != first. */
class TwoSlots {
public:
    TwoSlots(uint64_t bytes, uint32_t shift) : n_(bytes / 8), shift_(shift), slots_(n_, 0) {}
    void mark(const RelFork& rel, BlockNumber block, Lsn lsn)
    {
        const auto [a, b] = where(rel, block);
        const Lsn v = round_up(lsn, shift_);
        slots_[a] = std::max(slots_[a], v);
        slots_[b] = std::max(slots_[b], v);
    }
    bool changed(const RelFork& rel, BlockNumber block, Lsn since) const
    {
        const auto [a, b] = where(rel, block);
        return slots_[a] >= since && slots_[b] >= since;
    }

private:
    std::pair<uint64_t, uint64_t> where(const RelFork& rel, BlockNumber block) const
    {
        const uint64_t a = ptrack::fastrange(ptrack::hash_rel_unit(rel, block, ptrack::kSeedFirstProbe), n_);
        uint64_t b = a + 1 + ptrack::fastrange(ptrack::hash_rel_unit(rel, block, ptrack::kSeedSecondProbe), n_ - 1);
        if (b >= n_)
            b -= n_;
        return {a, b};
    }
    uint64_t n_;
    uint32_t shift_;
    std::vector<Lsn> slots_;
};

/* (c): one hashed slot per block. */
class OneSlot {
public:
    OneSlot(uint64_t bytes, uint32_t shift) : n_(bytes / 8), shift_(shift), slots_(n_, 0) {}
    void mark(const RelFork& rel, BlockNumber block, Lsn lsn)
    {
        Lsn& s = slots_[where(rel, block)];
        s = std::max(s, round_up(lsn, shift_));
    }
    bool changed(const RelFork& rel, BlockNumber block, Lsn since) const { return slots_[where(rel, block)] >= since; }

private:
    uint64_t where(const RelFork& rel, BlockNumber block) const
    {
        return ptrack::fastrange(ptrack::hash_rel_unit(rel, block, ptrack::kSeedFirstProbe), n_);
    }
    uint64_t n_;
    uint32_t shift_;
    std::vector<Lsn> slots_;
};

/* (d) prototype: line-grouped like the engine, with three probe lines (the same bytes, no summary). */
class ThreeLines {
public:
    ThreeLines(uint64_t bytes, uint32_t shift) : lines_(bytes / 64), shift_(shift), slots_(lines_ * 8, 0) {}
    void mark(const RelFork& rel, BlockNumber block, Lsn lsn)
    {
        uint64_t at[3];
        where(rel, block, at);
        const Lsn v = round_up(lsn, shift_);
        for (uint64_t i : at)
            slots_[i] = std::max(slots_[i], v);
    }
    bool changed(const RelFork& rel, BlockNumber block, Lsn since) const
    {
        uint64_t at[3];
        where(rel, block, at);
        return slots_[at[0]] >= since && slots_[at[1]] >= since && slots_[at[2]] >= since;
    }

private:
    void where(const RelFork& rel, BlockNumber block, uint64_t* at) const
    {
        const uint64_t seeds[3] = {ptrack::kSeedFirstProbe, ptrack::kSeedSecondProbe, 0x27d4eb2f165667c5ULL};
        for (int i = 0; i < 3; ++i)
            at[i] = ptrack::fastrange(ptrack::hash_rel_unit(rel, block / 8, seeds[i]), lines_) * 8 + block % 8;
    }
    uint64_t lines_;
    uint32_t shift_;
    std::vector<Lsn> slots_;
};

/* (a) the engine's map, through the same interface; counts the atomic writes a mark makes. */
class Ours {
public:
    Ours(uint64_t bytes, uint32_t shift) : owned_(bytes, shift) {}
    void mark(const RelFork& rel, BlockNumber block, Lsn lsn)
    {
        const ptrack::Map& m = owned_.map;
        const Lsn v = m.stored_lsn(lsn);
        const ptrack::SlotPair s = m.slots_of(rel, block);
        slot_writes_ += (m.slots()[s.first] < v) + (m.slots()[s.second] < v);
        summary_writes_ += m.summary()[m.summary_slot_index(rel, block)] < v;
        ++marks_;
        owned_.map.mark(rel, block, lsn);
    }
    /*
     * What ptrack_get_pagemapset() lists (Map::segment_pagemap): both probes
     * >= since, and the block's 8 MB range summary slot >= since.  With
     * set_probes_only(true): the probes alone (Map::block_changed).
     */
    bool changed(const RelFork& rel, BlockNumber block, Lsn since) const
    {
        const ptrack::Map& m = owned_.map;
        if (!m.block_changed(rel, block, since))
            return false;
        return probes_only_ || ptrack::load_lsn(&m.summary()[m.summary_slot_index(rel, block)]) >= since;
    }
    void set_probes_only(bool probes_only) { probes_only_ = probes_only; }
    uint64_t region_bytes() const { return owned_.geometry.region_bytes(); }
    uint64_t slot_count() const { return owned_.geometry.line_count * ptrack::kSlotsPerLine; }
    double slot_write_rate() const { return static_cast<double>(slot_writes_) / (2.0 * static_cast<double>(marks_)); }
    double summary_write_rate() const { return static_cast<double>(summary_writes_) / static_cast<double>(marks_); }

private:
    bench::OwnedMap owned_;
    uint64_t marks_ = 0, slot_writes_ = 0, summary_writes_ = 0;
    bool probes_only_ = false;
};

struct Outcome {
    uint64_t fp = 0;
    uint64_t unchanged = 0;
    double rate() const { return static_cast<double>(fp) / static_cast<double>(unchanged); }
};

/* Asks the layout "changed since L?" for every block: counts false positives, aborts on a false negative. */
template <class Layout>
Outcome evaluate(const Layout& layout, const Stream& s, const bench::Bits& after_l)
{
    Outcome o;
    for (size_t r = 0; r < s.db.rels.size(); ++r)
        for (BlockNumber b = 0; b < s.db.nblocks[r]; ++b) {
            const bool truly = after_l.test(s.db.first[r] + b);
            const bool says = layout.changed(s.db.rels[r], b, s.since);
            if (truly && !says) {
                std::fprintf(stderr, "FATAL: false negative: relation %u block %u\n", s.db.rels[r].relfilenode, b);
                std::exit(1);
            }
            if (!truly) {
                ++o.unchanged;
                o.fp += says;
            }
        }
    return o;
}

/* Writes the whole stream into the layout, then evaluate(). */
template <class Layout>
Outcome replay(Layout& layout, const Stream& s, const bench::Bits& after_l)
{
    for (const Write& w : s.writes)
        layout.mark(s.db.rels[w.relation], w.block, w.lsn);
    return evaluate(layout, s, after_l);
}

}  // namespace

int main()
{
    struct StreamSpec {
        const char* name;
        uint64_t writes;
    };
    const StreamSpec specs[] = {{"light", 100000}, {"medium", 420000}, {"heavy", 1500000}};
    const uint64_t ratios[] = {10000, 1000, 100};
    const uint32_t shifts[] = {0, 12, 16, 20};

    for (const StreamSpec& spec : specs) {
        const Stream s = make_stream(spec.writes, 2024);
        bench::Bits after_l(s.db.total);
        for (size_t i = s.middle; i < s.writes.size(); ++i)
            after_l.set(s.db.first[s.writes[i].relation] + s.writes[i].block);
        const uint64_t changed = after_l.count();
        std::printf("\nstream %s: %" PRIu64 " writes, database %" PRIu64 " blocks (%.1f GB) in %zu relations, "
                    "L = %" PRIX64 ", changed since L %" PRIu64 " blocks = %.2f%% of the database\n",
                    spec.name, static_cast<uint64_t>(s.writes.size()), s.db.total,
                    static_cast<double>(s.db.total) * 8192 / (1 << 30), s.db.rels.size(), s.since, changed,
                    100.0 * static_cast<double>(changed) / static_cast<double>(s.db.total));
        std::printf("%-9s %10s %11s %11s %11s %11s %11s %11s %11s %11s %11s\n", "map/db", "bytes", "(a) ours",
                    "(a') probes", "theory(a')", "(b) 2 slots", "theory(b)", "(c) 1 slot", "theory(c)", "(d) 3 lines",
                    "(b') 63/64");
        for (uint64_t ratio : ratios) {
            const uint64_t want = s.db.total * 8192 / ratio;
            Ours a(want, 16);
            const uint64_t bytes = a.region_bytes();
            const Outcome oa = replay(a, s, after_l);
            a.set_probes_only(true);
            const Outcome oa_probes = evaluate(a, s, after_l);
            std::unique_ptr<TwoSlots> b(new TwoSlots(bytes, 16));
            const Outcome ob = replay(*b, s, after_l);
            b.reset();
            std::unique_ptr<TwoSlots> b2(new TwoSlots(a.slot_count() * 8, 16));
            const Outcome ob2 = replay(*b2, s, after_l);
            b2.reset();
            std::unique_ptr<OneSlot> c(new OneSlot(bytes, 16));
            const Outcome oc = replay(*c, s, after_l);
            c.reset();
            std::unique_ptr<ThreeLines> d(new ThreeLines(bytes, 16));
            const Outcome od = replay(*d, s, after_l);
            d.reset();
            const double n = static_cast<double>(changed);
            const double fill_a = 1.0 - std::exp(-2.0 * n / static_cast<double>(a.slot_count()));
            const double fill_b = 1.0 - std::exp(-2.0 * n / (static_cast<double>(bytes) / 8));
            const double fill_c = 1.0 - std::exp(-n / (static_cast<double>(bytes) / 8));
            std::printf(
                "1/%-7" PRIu64 " %10" PRIu64 " %10.4f%% %10.4f%% %10.4f%% %10.4f%% %10.4f%% %10.4f%% %10.4f%% %10.4f%% "
                "%10.4f%%\n",
                ratio, bytes, 100 * oa.rate(), 100 * oa_probes.rate(), 100 * fill_a * fill_a, 100 * ob.rate(),
                100 * fill_b * fill_b, 100 * oc.rate(), 100 * fill_c, 100 * od.rate(), 100 * ob2.rate());
            std::fflush(stdout);
        }
        std::printf("granule (ours): fp rate / fp blocks at 1/1000; share of marks that must write (slot lines, summary)\n");
        std::printf("%-10s %13s %10s %14s %14s\n", "shift", "fp rate", "fp", "slot writes", "summary writes");
        for (uint32_t shift : shifts) {
            Ours a(s.db.total * 8192 / 1000, shift);
            const Outcome oa = replay(a, s, after_l);
            std::printf("%-10u %12.4f%% %10" PRIu64 " %13.1f%% %13.1f%%\n", shift, 100 * oa.rate(), oa.fp,
                        100 * a.slot_write_rate(), 100 * a.summary_write_rate());
            std::fflush(stdout);
        }
    }
    std::printf("\nno false negative in any layout\n");
    return 0;
}
