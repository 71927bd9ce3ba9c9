/*
 * t/unit/crc32c_oracle.h -- a bitwise CRC-32C (Castagnoli) written for the
 * tests: an oracle independent of PostgreSQL's table-driven/SSE one that the
 * server passes to the engine's file formats.
 *
 * Not a test file itself: it is included by the *_test.cpp files next to it.
 */
#ifndef PTRACK_T_UNIT_CRC32C_ORACLE_H
#define PTRACK_T_UNIT_CRC32C_ORACLE_H

#include <cstddef>
#include <cstdint>

namespace ptrack_test {

inline uint32_t bitwise_crc32c(const void* data, size_t len)
{
    const auto* p = static_cast<const uint8_t*>(data);
    uint32_t crc = 0xFFFFFFFFu;
    for (size_t i = 0; i < len; ++i) {
        crc ^= p[i];
        for (int k = 0; k < 8; ++k)
            crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
    }
    return ~crc;
}

}  // namespace ptrack_test

#endif
