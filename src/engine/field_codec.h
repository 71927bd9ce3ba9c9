/*
 * field_codec.h -- fixed-offset field access for the engine's on-disk
 * headers (map_file.cpp, map_delta.cpp).  Fields are copied with memcpy at
 * explicit offsets, never by casting a struct, so padding and field order
 * cannot leak into a file format.  Host byte order, as PostgreSQL's own data
 * files.  Private to src/engine/.
 */
#ifndef PTRACK_ENGINE_FIELD_CODEC_H
#define PTRACK_ENGINE_FIELD_CODEC_H

#include "ptrack/engine_guard.h"

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace ptrack::codec {

template <typename T>
inline void put(uint8_t* out, size_t offset, T value) noexcept
{
    std::memcpy(out + offset, &value, sizeof(T));
}

template <typename T>
inline T get(const uint8_t* in, size_t offset) noexcept
{
    T value;
    std::memcpy(&value, in + offset, sizeof(T));
    return value;
}

}  // namespace ptrack::codec

#endif
