/*
 * ptrack/hash.h -- the hashes that place blocks and segments in the map.
 *
 * A key is (relation fork, unit), where the unit is a group of 8 blocks for
 * block slots and a segment number for the segment summary.  Each field is
 * folded in with the 64-bit finalizer of MurmurHash3 (public domain, written
 * here from its published description): it is cheap (two multiplies per
 * round), and each output bit depends on every input bit, which the two
 * independent probes need.  The seeds keep the two probes and the summary
 * independent of each other.
 *
 * fastrange() maps a 64-bit hash onto [0, n) with a multiply instead of a
 * division (Lemire, "A fast alternative to the modulo reduction", 2016).
 */
#ifndef PTRACK_HASH_H
#define PTRACK_HASH_H

#include <cstdint>

#include "ptrack/relfork.h"

namespace ptrack {

constexpr uint64_t kSeedFirstProbe = 0x9e3779b97f4a7c15ULL;
constexpr uint64_t kSeedSecondProbe = 0xc2b2ae3d27d4eb4fULL;
constexpr uint64_t kSeedSummary = 0x165667b19e3779f9ULL;

inline uint64_t mix64(uint64_t x) noexcept
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

/* Hash of (relation fork, unit) under `seed`. */
inline uint64_t hash_rel_unit(const RelFork& rel, uint64_t unit, uint64_t seed) noexcept
{
    uint64_t h = mix64(seed ^ ((uint64_t{rel.spc_oid} << 32) | rel.db_oid));
    h = mix64(h ^ ((uint64_t{rel.relfilenode} << 32) | rel.fork));
    return mix64(h ^ unit);
}

/* Maps a 64-bit hash uniformly onto [0, n). */
inline uint64_t fastrange(uint64_t hash, uint64_t n) noexcept
{
    return static_cast<uint64_t>((static_cast<unsigned __int128>(hash) * n) >> 64);
}

}  // namespace ptrack

#endif
