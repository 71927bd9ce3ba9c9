/*
 * ptrack/file_sink.h -- where the engine's file writers put their bytes, and
 * the CRC-32C functions they are given.  The engine opens no file: the
 * server passes a sink over PostgreSQL's file API and PostgreSQL's CRC-32C,
 * the benchmarks timed pwrite() calls, the unit tests memory and a bitwise
 * CRC oracle.  Used by the map's save (ptrack/map_flush.h) and by the
 * change summaries (ptrack/summary_file.h).
 */
#ifndef PTRACK_FILE_SINK_H
#define PTRACK_FILE_SINK_H

#include "ptrack/engine_guard.h"

#include <cstddef>
#include <cstdint>

namespace ptrack {

/* Where a writer writes: one file, at byte offsets. */
class FlushSink {
public:
    /* Writes `len` bytes at byte `offset`; false on failure, which ends the write. */
    virtual bool write(const void* data, size_t len, uint64_t offset) noexcept = 0;

protected:
    ~FlushSink() = default;
};

/* Finalised CRC-32C (Castagnoli) of `len` bytes. */
using Crc32cFn = uint32_t (*)(const void* data, size_t len);

/* CRC-32C continued over `len` more bytes, not finalised: start with 0xFFFFFFFF, xor it at the end. */
using Crc32cUpdateFn = uint32_t (*)(uint32_t crc, const void* data, size_t len);

}  // namespace ptrack

#endif
