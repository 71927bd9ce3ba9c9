/*
 * pagemap.cpp -- whole-bitmap operations on the page bitmap encoding
 * described in ptrack/pagemap.h.
 */
#include "ptrack/pagemap.h"

#include <cstring>

namespace ptrack {

uint32_t pagemap_set_all(uint8_t* pagemap, uint32_t nblocks) noexcept
{
    const size_t whole = nblocks / 8;
    std::memset(pagemap, 0xFF, whole);
    if (nblocks % 8 != 0)
        pagemap[whole] = static_cast<uint8_t>((1u << (nblocks % 8)) - 1);
    return nblocks;
}

uint32_t pagemap_set_from(uint8_t* pagemap, uint32_t first, uint32_t nblocks) noexcept
{
    uint32_t added = 0;
    for (uint32_t b = first; b < nblocks;) {
        uint8_t& byte = pagemap[b / 8];
        /* The bits of this byte from b on, up to nblocks. */
        const uint32_t end = nblocks - (b & ~7u) >= 8 ? 8 : nblocks % 8;
        const auto mask = static_cast<uint8_t>(((1u << end) - 1) & ~((1u << (b % 8)) - 1));
        added += static_cast<uint32_t>(__builtin_popcount(mask & static_cast<uint8_t>(~byte)));
        byte = static_cast<uint8_t>(byte | mask);
        b = (b & ~7u) + 8;
    }
    return added;
}

size_t pagemap_trimmed_length(const uint8_t* pagemap, size_t length) noexcept
{
    while (length > 0 && pagemap[length - 1] == 0)
        --length;
    return length;
}

uint64_t pagemap_count(const uint8_t* pagemap, size_t length) noexcept
{
    uint64_t count = 0;
    for (size_t i = 0; i < length; ++i)
        count += static_cast<uint64_t>(__builtin_popcount(pagemap[i]));
    return count;
}

}  // namespace ptrack
