/*
 * ptrack/pagemap.h -- the page bitmap of one segment file, as returned in the
 * `pagemap` column of ptrack_get_pagemapset() and read by pg_probackup
 * (its datapagemap): bit for block b (counted from the segment's first
 * block) is byte b / 8, mask 1 << (b % 8).  A block past the end of the
 * bitmap is unchanged, so a bitmap may be trimmed after its last set bit.
 */
#ifndef PTRACK_PAGEMAP_H
#define PTRACK_PAGEMAP_H

#include <cstddef>
#include <cstdint>

namespace ptrack {

/* Bytes needed for a bitmap of `nblocks` blocks. */
constexpr size_t pagemap_bytes(uint32_t nblocks) noexcept { return (static_cast<size_t>(nblocks) + 7) / 8; }

inline void pagemap_set(uint8_t* pagemap, uint32_t block) noexcept
{
    pagemap[block / 8] = static_cast<uint8_t>(pagemap[block / 8] | (1u << (block % 8)));
}

/* True if bit `block` is set; blocks beyond `length` bytes read as unset. */
inline bool pagemap_test(const uint8_t* pagemap, size_t length, uint32_t block) noexcept
{
    return block / 8 < length && (pagemap[block / 8] >> (block % 8)) & 1u;
}

/* Sets the bits of blocks [0, nblocks) and returns nblocks (used for FSM forks). */
uint32_t pagemap_set_all(uint8_t* pagemap, uint32_t nblocks) noexcept;

/*
 * Sets the bits of blocks [first, nblocks) (every block from a limit on, see
 * ptrack/limit_table.h) and returns how many of them were not set before.
 * Nothing if first >= nblocks.
 */
uint32_t pagemap_set_from(uint8_t* pagemap, uint32_t first, uint32_t nblocks) noexcept;

/* Length in bytes up to and including the last non-zero byte (0 if none is set). */
size_t pagemap_trimmed_length(const uint8_t* pagemap, size_t length) noexcept;

/* Number of set bits in the first `length` bytes. */
uint64_t pagemap_count(const uint8_t* pagemap, size_t length) noexcept;

}  // namespace ptrack

#endif
