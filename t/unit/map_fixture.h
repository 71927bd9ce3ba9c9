/*
 * t/unit/map_fixture.h -- helpers shared by the map unit tests: an owned,
 * 64-byte aligned, zeroed region for a Map (the engine's Map is only a view
 * over memory the caller owns) and a few relation forks to mark.
 *
 * Not a test file itself: it is included by the *_test.cpp files next to it.
 */
#ifndef PTRACK_T_UNIT_MAP_FIXTURE_H
#define PTRACK_T_UNIT_MAP_FIXTURE_H

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

#include "ptrack/map.h"
#include "ptrack/relfork.h"

namespace ptrack_test {

/* PostgreSQL's default RELSEG_SIZE: 1 GB / 8 KB. */
constexpr uint32_t kRelSegSize = 131072;
constexpr uint64_t kMB = uint64_t{1} << 20;

/* A zeroed, 64-byte aligned map region that frees itself. */
class OwnedMap {
public:
    explicit OwnedMap(const ptrack::MapGeometry& g) : geometry_(g)
    {
        size_t bytes = static_cast<size_t>(g.region_bytes());
        /* aligned_alloc wants a multiple of the alignment. */
        bytes = (bytes + ptrack::kLineBytes - 1) / ptrack::kLineBytes * ptrack::kLineBytes;
        if (bytes == 0)
            bytes = ptrack::kLineBytes;
        memory_ = std::aligned_alloc(ptrack::kLineBytes, bytes);
        if (memory_ == nullptr)
            throw std::bad_alloc();
        std::memset(memory_, 0, bytes);
        map_ = ptrack::Map(memory_, g);
    }

    /* A map sized by MapGeometry::for_bytes. */
    static ptrack::MapGeometry geometry(uint64_t bytes, uint32_t blocks_per_segment = kRelSegSize,
                                        uint32_t shift = ptrack::MapGeometry::kDefaultGranuleShift)
    {
        return ptrack::MapGeometry::for_bytes(bytes, blocks_per_segment, shift);
    }

    ~OwnedMap() { std::free(memory_); }
    OwnedMap(const OwnedMap&) = delete;
    OwnedMap& operator=(const OwnedMap&) = delete;

    ptrack::Map& map() { return map_; }
    const ptrack::Map& map() const { return map_; }
    uint64_t slot_count() const { return geometry_.line_count * ptrack::kSlotsPerLine; }

private:
    ptrack::MapGeometry geometry_;
    void* memory_ = nullptr;
    ptrack::Map map_;
};

/* A few relation forks with realistic OIDs. */
inline ptrack::RelFork heap_rel(uint32_t relfilenode = 16385, uint8_t fork = ptrack::kMainFork)
{
    return ptrack::RelFork{1663, 16384, relfilenode, fork};
}

}  // namespace ptrack_test

#endif
