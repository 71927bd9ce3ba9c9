/*
 * t/unit/memory_sink.h -- a file in memory for the engine's writers
 * (ptrack/file_sink.h), and the unfinalised CRC-32C update they take,
 * from the bitwise oracle of crc32c_oracle.h.  `fail_after` writes
 * succeed, the next one fails.
 *
 * Not a test file itself: it is included by the *_test.cpp files next to it.
 */
#ifndef PTRACK_T_UNIT_MEMORY_SINK_H
#define PTRACK_T_UNIT_MEMORY_SINK_H

#include <cstring>
#include <vector>

#include "ptrack/file_sink.h"

namespace ptrack_test {

class MemorySink final : public ptrack::FlushSink {
public:
    bool write(const void* data, size_t len, uint64_t offset) noexcept override
    {
        if (writes == fail_after)
            return false;
        ++writes;
        last_offset = offset;
        if (bytes.size() < offset + len)
            bytes.resize(offset + len);
        std::memcpy(bytes.data() + offset, data, len);
        return true;
    }
    std::vector<uint8_t> bytes;
    uint64_t writes = 0;
    uint64_t fail_after = ~uint64_t{0};
    uint64_t last_offset = 0;
};

inline uint32_t oracle_update(uint32_t crc, const void* data, size_t len)
{
    const auto* p = static_cast<const uint8_t*>(data);
    for (size_t i = 0; i < len; ++i) {
        crc ^= p[i];
        for (int k = 0; k < 8; ++k)
            crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
    }
    return crc;
}

}  // namespace ptrack_test

#endif
