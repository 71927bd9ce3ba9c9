/*
 * ptrack/limit_file.h -- the on-disk form of the limit table
 * (ptrack/limit_table.h), saved as $PGDATA/ptrack.limits next to the map.
 *
 * The table is complete up to a WAL position, its "covered LSN": every limit
 * event of a record ending at or before it was folded in.  A follower that
 * resumes from the covered LSN therefore loses no event; one that resumes
 * later would (the caller's rule, src/pg/persist/limit_file_io.h).
 *
 * Layout (host byte order, like PostgreSQL's own data files; the system
 * identifier rejects another cluster's file):
 *
 *   [0, 64)   header: magic "PTRKLIMT", version, bucket count, system
 *             identifier, covered LSN, placement fingerprint, body length,
 *             body CRC-32C, PostgreSQL major version (0: written before the
 *             field, under 15), and the CRC-32C of the header's first 60
 *             bytes in its last 4
 *   [64, ..)  body: one record per non-empty bucket, in increasing bucket
 *             order: uint32 bucket, uint32 step count (1..kLimitSteps), then
 *             per step uint64 LSN, uint32 limit block
 *
 * Sparse, because most buckets stay empty: a table with few events is a few
 * hundred bytes; the worst case is limit_file_max_bytes().
 *
 * A file is used only if everything checks: magic, header CRC, version, the
 * bucket count and placement fingerprint of this build (a build that hashes
 * keys to other buckets would silently lose every limit), the system
 * identifier and PostgreSQL major version, the exact length, the body CRC, and the content itself (bucket
 * numbers increasing and in range, step counts in range, steps strictly
 * increasing in LSN and limit).  Decoding validates the whole file before it
 * writes a single bucket, so a bad file leaves the table untouched.
 *
 * No PostgreSQL dependency: the CRC-32C function is passed in, as for the map
 * file (ptrack/map_file.h).  Nothing here allocates or throws.
 */
#ifndef PTRACK_LIMIT_FILE_H
#define PTRACK_LIMIT_FILE_H

#include <cstddef>
#include <cstdint>

#include "ptrack/limit_table.h"
#include "ptrack/map_file.h" /* Crc32cFn */

namespace ptrack {

constexpr const char* kLimitFileName = "ptrack.limits";
constexpr const char* kLimitTempFileName = "ptrack.limits.tmp";
constexpr uint32_t kLimitFileVersion = 1;
constexpr size_t kLimitFileHeaderBytes = 64;

/* Bytes of the largest file a table of `buckets` buckets can encode to. */
constexpr size_t limit_file_max_bytes(uint32_t buckets) noexcept
{
    return kLimitFileHeaderBytes + size_t{buckets} * (8 + kLimitSteps * 12);
}

/* Where this build places keys in a table of `buckets` buckets, hashed over a fixed set of keys. */
uint64_t limit_placement_fingerprint(uint32_t buckets) noexcept;

/*
 * Encodes `table` into `out` (limit_file_max_bytes() bytes); returns the
 * file's length, or 0 if some bucket could not be read consistently (the
 * writer stalled in the middle of an update; only possible when called from
 * another process than the writer).
 */
size_t limit_file_encode(const LimitTable& table, uint64_t system_identifier, uint32_t server_major, Lsn covered_lsn,
                         Crc32cFn crc32c, uint8_t* out) noexcept;

enum class LimitFileStatus {
    kOk,
    kTooShort,
    kBadMagic,
    kBadHeaderCrc,
    kBadVersion,
    kBadBucketCount,
    kBadPlacement,
    kOtherSystem,
    kOtherMajor,
    kBadLength,
    kBadBodyCrc,
    kBadContent
};

/*
 * Decodes a file of `len` bytes into `table` (same bucket count) and sets
 * *covered_lsn.  Only on kOk is the table changed: every bucket is
 * rewritten (through the sequence lock, as by the writer).
 */
LimitFileStatus limit_file_decode(const uint8_t* in, size_t len, uint64_t system_identifier, uint32_t server_major,
                                  Crc32cFn crc32c, LimitTable* table, Lsn* covered_lsn) noexcept;

/* A reason completing "the limits file is not usable because ...". */
const char* describe_limit_file_status(LimitFileStatus status) noexcept;

}  // namespace ptrack

#endif
