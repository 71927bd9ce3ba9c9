/*
 * t/unit/summary_fixture.h -- what the summary tests need to write a
 * summary (ptrack/summary_file.h): the writer's buffers, and a header for a
 * range of a given cluster and server version.
 *
 * Not a test file itself: it is included by the *_test.cpp files next to it.
 */
#ifndef PTRACK_T_UNIT_SUMMARY_FIXTURE_H
#define PTRACK_T_UNIT_SUMMARY_FIXTURE_H

#include <memory>
#include <vector>

#include "ptrack/summary_file.h"

namespace ptrack_test {

struct SummaryBuffers {
    std::vector<uint8_t> buffer = std::vector<uint8_t>(ptrack::kSummaryMinBuffer);
    std::unique_ptr<ptrack::ChunkBits> scratch = std::make_unique<ptrack::ChunkBits>();
    ptrack::SummaryWriteBuffers get() { return ptrack::SummaryWriteBuffers{buffer.data(), buffer.size(), scratch.get()}; }
};

inline ptrack::SummaryHeader summary_header(uint64_t system, uint32_t pg_major, uint32_t timeline, ptrack::Lsn start,
                                            ptrack::Lsn end)
{
    ptrack::SummaryHeader h{};
    h.pg_major = pg_major;
    h.timeline = timeline;
    h.system_identifier = system;
    h.start_lsn = start;
    h.end_lsn = end;
    return h;
}

}  // namespace ptrack_test

#endif
