/*
 * ptrack/hash.h -- the hashes that place blocks and segments in the map.
 *
 * A key is (relation fork, unit), where the unit is a group of 8 blocks for
 * block slots and a segment number for the segment summary (which places
 * the segment's window of summary slots, one per 8 MB range).  Fields are
 * folded in with the 64-bit finalizer of MurmurHash3 (public domain, written
 * here from its published description): it is cheap (two multiplies per
 * round), and each output bit depends on every input bit.
 *
 * The write path hashes the relation fork once (hash_rel, two rounds; the
 * capture layer caches it while consecutive writes hit the same relation),
 * then spends one round per unit (hash_unit): one for the block group, whose
 * 64-bit result feeds both probes (its high half places the first line, its
 * low half the second), and one for the segment's summary window under its
 * own seed (also cached, while writes stay in one segment).
 *
 * fastrange() maps a 64-bit hash onto [0, n) with a multiply instead of a
 * division (Lemire, "A fast alternative to the modulo reduction", 2016).
 */
#ifndef PTRACK_HASH_H
#define PTRACK_HASH_H

#include "ptrack/engine_guard.h"

#include <cstdint>

#include "ptrack/relfork.h"

namespace ptrack {

constexpr uint64_t kSeedRelation = 0x27d4eb2f165667c5ULL;
constexpr uint64_t kSeedFirstProbe = 0x9e3779b97f4a7c15ULL;
/* A seed for layouts that hash the second probe on its own (benchmarks, tests). */
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

/* Hash of a relation fork alone. */
inline uint64_t hash_rel(const RelFork& rel) noexcept
{
    const uint64_t h = mix64(kSeedRelation ^ ((uint64_t{rel.spc_oid} << 32) | rel.db_oid));
    return mix64(h ^ ((uint64_t{rel.relfilenode} << 32) | rel.fork));
}

/* Hash of (relation, unit) under `seed`, from hash_rel(): one round. */
inline uint64_t hash_unit(uint64_t rel_hash, uint64_t unit, uint64_t seed) noexcept
{
    return mix64(rel_hash ^ seed ^ (unit * 0xd6e8feb86659fd93ULL));
}

/* Hash of (relation fork, unit) under `seed`. */
inline uint64_t hash_rel_unit(const RelFork& rel, uint64_t unit, uint64_t seed) noexcept
{
    return hash_unit(hash_rel(rel), unit, seed);
}

/* Maps a 64-bit hash uniformly onto [0, n). */
inline uint64_t fastrange(uint64_t hash, uint64_t n) noexcept
{
    return static_cast<uint64_t>((static_cast<unsigned __int128>(hash) * n) >> 64);
}

}  // namespace ptrack

#endif
