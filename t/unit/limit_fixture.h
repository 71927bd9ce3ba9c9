/*
 * t/unit/limit_fixture.h -- helpers shared by the limit table's unit tests:
 * an owned, 64-byte aligned, zeroed region for a LimitTable (the engine's
 * table is only a view over memory the caller owns).
 *
 * Not a test file itself: it is included by the *_test.cpp files next to it.
 */
#ifndef PTRACK_T_UNIT_LIMIT_FIXTURE_H
#define PTRACK_T_UNIT_LIMIT_FIXTURE_H

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

#include "ptrack/limit_table.h"

namespace ptrack_test {

/* A zeroed, 64-byte aligned region for a table of `buckets` buckets, freed at the end. */
class OwnedTable {
public:
    explicit OwnedTable(uint32_t buckets)
    {
        memory_ = std::aligned_alloc(64, ptrack::LimitTable::bytes(buckets));
        if (memory_ == nullptr)
            throw std::bad_alloc();
        std::memset(memory_, 0, ptrack::LimitTable::bytes(buckets));
        table = ptrack::LimitTable(memory_, buckets);
    }
    ~OwnedTable() { std::free(memory_); }
    OwnedTable(const OwnedTable&) = delete;
    OwnedTable& operator=(const OwnedTable&) = delete;

    void* memory_ = nullptr;
    ptrack::LimitTable table;
};

}  // namespace ptrack_test

#endif
