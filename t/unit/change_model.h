/*
 * t/unit/change_model.h -- the obvious model of an exact change set
 * (std::map of std::set) that the change set, summary and answer tests
 * compare the engine with, and the reading of any ChangeCursor into it,
 * checking the cursor's order on the way (ptrack/change_cursor.h).
 *
 * Not a test file itself: it is included by the *_test.cpp files next to it.
 */
#ifndef PTRACK_T_UNIT_CHANGE_MODEL_H
#define PTRACK_T_UNIT_CHANGE_MODEL_H

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>

#include "ptrack/change_cursor.h"
#include "ptrack/change_set.h"

namespace ptrack_test {

using Key = std::tuple<uint32_t, uint32_t, uint32_t, uint8_t>;

inline Key key_of(const ptrack::RelFork& r)
{
    return Key{r.spc_oid, r.db_oid, r.relfilenode, r.fork};
}

inline ptrack::RelFork rel_of(const Key& k)
{
    return ptrack::RelFork{std::get<0>(k), std::get<1>(k), std::get<2>(k), std::get<3>(k)};
}

inline std::string describe(const Key& k)
{
    std::ostringstream s;
    s << std::get<0>(k) << "/" << std::get<1>(k) << "/" << std::get<2>(k) << " fork " << int(std::get<3>(k));
    return s.str();
}

struct ForkModel {
    uint32_t limit = ptrack::kNoLimit;
    std::set<uint32_t> blocks;
};

struct Model {
    std::map<Key, ForkModel> forks;
    std::set<std::pair<uint32_t, uint32_t>> dbs;

    void block(const ptrack::RelFork& r, uint32_t b) { forks[key_of(r)].blocks.insert(b); }
    void limit(const ptrack::RelFork& r, uint32_t l)
    {
        ForkModel& f = forks[key_of(r)];
        f.limit = std::min(f.limit, l);
    }
    void database(uint32_t spc, uint32_t db) { dbs.insert({spc, db}); }

    /* What the set means: blocks at or past the limit are said by the limit; empty forks say nothing. */
    Model normalized() const
    {
        Model m;
        m.dbs = dbs;
        for (const auto& [k, f] : forks) {
            ForkModel g;
            g.limit = f.limit;
            for (uint32_t b : f.blocks)
                if (b < f.limit)
                    g.blocks.insert(b);
            if (!g.blocks.empty() || g.limit != ptrack::kNoLimit)
                m.forks[k] = g;
        }
        return m;
    }

    void merge(const Model& other)
    {
        for (const auto& [k, f] : other.forks) {
            ForkModel& g = forks[k];
            g.limit = std::min(g.limit, f.limit);
            g.blocks.insert(f.blocks.begin(), f.blocks.end());
        }
        dbs.insert(other.dbs.begin(), other.dbs.end());
    }
};

/* Reads a cursor whole, failing the test on any break of its order. */
inline Model read_cursor(ptrack::ChangeCursor& c)
{
    Model m;
    auto bits = std::make_unique<ptrack::ChunkBits>();
    ptrack::RelFork rel{};
    ptrack::BlockNumber limit = 0;
    bool first = true;
    ptrack::RelFork previous{};
    while (c.next_fork(&rel, &limit)) {
        if (!first) {
            EXPECT_TRUE(ptrack::relfork_less(previous, rel))
                << "fork " << describe(key_of(rel)) << " after " << describe(key_of(previous));
        }
        first = false;
        previous = rel;
        ForkModel& f = m.forks[key_of(rel)];
        f.limit = limit;
        uint32_t chunk = 0;
        int64_t previous_chunk = -1;
        while (c.next_chunk(&chunk)) {
            EXPECT_GT(int64_t{chunk}, previous_chunk) << "chunk order in " << describe(key_of(rel));
            previous_chunk = chunk;
            std::memset(bits.get(), 0, sizeof(ptrack::ChunkBits));
            c.or_chunk(bits.get());
            for (uint32_t w = 0; w < ptrack::kChunkWords; ++w)
                for (uint64_t word = bits->words[w]; word != 0; word &= word - 1)
                    f.blocks.insert((chunk << ptrack::kChunkShift) + w * 64 +
                                    static_cast<uint32_t>(__builtin_ctzll(word)));
        }
    }
    ptrack::DatabaseKey db{};
    bool first_db = true;
    ptrack::DatabaseKey previous_db{};
    while (c.next_database(&db)) {
        if (!first_db) {
            EXPECT_TRUE(ptrack::database_less(previous_db, db)) << "database order";
        }
        first_db = false;
        previous_db = db;
        m.dbs.insert({db.spc_oid, db.db_oid});
    }
    return m;
}

/* First difference between two models, or "" if equal. */
inline std::string difference(const Model& expected, const Model& got)
{
    std::ostringstream s;
    for (const auto& [k, f] : expected.forks) {
        auto it = got.forks.find(k);
        if (it == got.forks.end()) {
            s << "fork " << describe(k) << " missing";
            return s.str();
        }
        if (it->second.limit != f.limit) {
            s << "fork " << describe(k) << " limit " << it->second.limit << ", expected " << f.limit;
            return s.str();
        }
        for (uint32_t b : f.blocks)
            if (!it->second.blocks.count(b)) {
                s << "fork " << describe(k) << " block " << b << " missing";
                return s.str();
            }
        for (uint32_t b : it->second.blocks)
            if (!f.blocks.count(b)) {
                s << "fork " << describe(k) << " block " << b << " extra";
                return s.str();
            }
    }
    for (const auto& [k, f] : got.forks)
        if (!expected.forks.count(k)) {
            s << "fork " << describe(k) << " extra";
            return s.str();
        }
    if (expected.dbs != got.dbs)
        return "database lists differ";
    return "";
}

/*
 * Adds a random mix of changes to `set` and `model`: single blocks over a
 * few dozen forks (some in chunks far apart, offset 0xFFFF included),
 * dense chunks that turn into bitmaps, runs (bulk loads), limits and
 * databases.  Every add must be accepted (the set's budget is large).
 */
inline void random_changes(uint64_t seed, uint32_t count, ptrack::ChangeSet& set, Model& model)
{
    uint64_t state = seed;
    auto next = [&state]() {
        uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        return z ^ (z >> 31);
    };
    auto rel = [&](uint64_t i) {
        return ptrack::RelFork{1663 + static_cast<uint32_t>(i % 2), 5 + static_cast<uint32_t>(i % 3),
                               16384 + static_cast<uint32_t>(i * 7 % 41), static_cast<uint8_t>(i % 4 == 3 ? 2 : 0)};
    };
    for (uint32_t i = 0; i < count; ++i) {
        const uint64_t kind = next() % 100;
        const ptrack::RelFork r = rel(next() % 40);
        if (kind < 60) {
            const uint32_t chunk = static_cast<uint32_t>(next() % 4 == 0 ? next() % 70000 : next() % 3);
            const uint32_t offset = next() % 8 == 0 ? 0xFFFF : static_cast<uint32_t>(next() % 65536);
            const uint32_t b = (chunk << ptrack::kChunkShift) | offset;
            ASSERT_NE(set.add_block(r, b), ptrack::AddResult::kRefused);
            model.block(r, b);
        } else if (kind < 75) {
            /* A dense burst in one chunk: past kSparseMaxBlocks it becomes a bitmap. */
            const uint32_t base = static_cast<uint32_t>(next() % 5) << ptrack::kChunkShift;
            for (uint32_t k = 0; k < 200; ++k) {
                const uint32_t b = base + static_cast<uint32_t>(next() % 65536);
                ASSERT_NE(set.add_block(r, b), ptrack::AddResult::kRefused);
                model.block(r, b);
            }
        } else if (kind < 90) {
            const uint32_t start = static_cast<uint32_t>(next() % 300000);
            const uint32_t length = static_cast<uint32_t>(next() % 3000);
            for (uint32_t b = start; b < start + length; ++b) {
                ASSERT_NE(set.add_block(r, b), ptrack::AddResult::kRefused);
                model.block(r, b);
            }
        } else if (kind < 97) {
            const uint32_t l = next() % 3 == 0 ? 0 : static_cast<uint32_t>(next() % 400000);
            ASSERT_NE(set.add_limit(r, l), ptrack::AddResult::kRefused);
            model.limit(r, l);
        } else {
            const uint32_t spc = 1663 + static_cast<uint32_t>(next() % 2), db = static_cast<uint32_t>(next() % 9);
            ASSERT_NE(set.add_database(spc, db), ptrack::AddResult::kRefused);
            model.database(spc, db);
        }
    }
}

}  // namespace ptrack_test

#endif
