/*
 * crc32c_sse42.h -- CRC-32C (Castagnoli, PostgreSQL's polynomial) with the
 * SSE4.2 instruction, for the benchmarks that drive the engine's writers
 * outside the server (bench/checkpoint/flush_bench.cpp,
 * bench/engine/summary_bench.cpp).  In the server the engine is given
 * PostgreSQL's own CRC-32C (port/pg_crc32c.h); these two functions have the
 * engine's Crc32cUpdateFn and Crc32cFn shapes (ptrack/map_flush.h,
 * ptrack/map_file.h).  Build with -msse4.2.
 */
#ifndef PTRACK_BENCH_CRC32C_SSE42_H
#define PTRACK_BENCH_CRC32C_SSE42_H

#include <nmmintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

/* CRC-32C continued over `len` more bytes, not finalised (start with 0xFFFFFFFF). */
inline uint32_t crc32c_sse42_update(uint32_t crc, const void* data, size_t len)
{
    const auto* p = static_cast<const unsigned char*>(data);
    uint64_t c = crc;
    for (; len >= 8; p += 8, len -= 8) {
        uint64_t word;
        std::memcpy(&word, p, 8);
        c = _mm_crc32_u64(c, word);
    }
    auto c32 = static_cast<uint32_t>(c);
    for (; len > 0; --len)
        c32 = _mm_crc32_u8(c32, *p++);
    return c32;
}

/* Finalised CRC-32C of `len` bytes. */
inline uint32_t crc32c_sse42(const void* data, size_t len)
{
    return crc32c_sse42_update(0xFFFFFFFFu, data, len) ^ 0xFFFFFFFFu;
}

#endif
