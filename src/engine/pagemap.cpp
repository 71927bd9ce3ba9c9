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
