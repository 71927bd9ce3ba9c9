/*
 * ptrack/relfork.h -- the vocabulary shared by every engine file: LSNs, block
 * numbers, fork numbers and the identity of a relation fork, with the same
 * meaning and numbering as in PostgreSQL (src/include/storage/relfilenode.h,
 * src/include/common/relpath.h), but without PostgreSQL headers.
 */
#ifndef PTRACK_RELFORK_H
#define PTRACK_RELFORK_H

#include "ptrack/engine_guard.h"

#include <cstdint>

namespace ptrack {

using Lsn = uint64_t;         /* a WAL position in bytes, as PostgreSQL's XLogRecPtr */
using BlockNumber = uint32_t; /* block number within a relation fork (not a segment) */

/* Fork numbers, as PostgreSQL's ForkNumber (src/include/common/relpath.h). */
enum Fork : uint8_t { kMainFork = 0, kFsmFork = 1, kVisibilityMapFork = 2, kInitFork = 3 };
constexpr uint8_t kMaxFork = kInitFork;

/* One relation fork: PostgreSQL's RelFileNode plus the fork number. */
struct RelFork {
    uint32_t spc_oid;     /* tablespace OID (1663 pg_default, 1664 pg_global) */
    uint32_t db_oid;      /* database OID, 0 for shared relations */
    uint32_t relfilenode; /* relfilenode, the file name's number */
    uint8_t fork;         /* ForkNumber */
};

inline bool operator==(const RelFork& a, const RelFork& b) noexcept
{
    return a.spc_oid == b.spc_oid && a.db_oid == b.db_oid && a.relfilenode == b.relfilenode &&
           a.fork == b.fork;
}

/*
 * The entry of (rel, n) in a direct-mapped cache of 2^log2 entries (log2 in
 * 1..31), n a chunk or segment number: a multiplicative hash (2^32 / the
 * golden ratio) of the relfilenode, n and the fork.  Neighbouring chunks or
 * segments of one fork, and a heap and its VM, land in different entries.
 */
inline uint32_t recent_entry(const RelFork& rel, uint32_t n, uint32_t log2) noexcept
{
    return ((rel.relfilenode ^ (n << 8) ^ rel.fork) * 0x9E3779B1u) >> (32 - log2);
}

}  // namespace ptrack

#endif
