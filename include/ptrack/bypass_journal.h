/*
 * ptrack/bypass_journal.h -- the on-disk entry of ptrack.bypass, the
 * journal of writes that bypassed shared buffers (docs/design.md section
 * 3.6).  A writer that bypasses shared buffers (an index build, ALTER TABLE
 * ... SET TABLESPACE, a table rewrite) calls smgrimmedsync() before it
 * commits; the hooks source then appends one entry naming the fork, its
 * length and the LSN of that moment, and fsyncs it, so that a crash before
 * the next map save cannot lose the marks of those blocks (src/pg/capture/hooks/bypass_journal_io.cpp).
 *
 * An entry is 40 bytes at fixed offsets, host byte order, with its own
 * CRC-32C:
 *    0  magic "PTBY" (u32)
 *    4  tablespace OID, database OID, relfilenode (3 x u32)
 *   16  fork number (u32)
 *   20  fork length in blocks when it was synced (u32)
 *   24  LSN (u64): every block of the fork was written before it
 *   32  CRC-32C of bytes 0..31 (u32), 4 zero bytes
 * A torn append (a crash in the middle of it) fails its CRC; reading stops
 * at the first entry that does.
 */
#ifndef PTRACK_BYPASS_JOURNAL_H
#define PTRACK_BYPASS_JOURNAL_H

#include "ptrack/engine_guard.h"

#include <cstddef>
#include <cstdint>

#include "ptrack/map_file.h" /* Crc32cFn */
#include "ptrack/relfork.h"

namespace ptrack {

/* The journal appended to now, and the one a map save in progress is about to make redundant. */
constexpr const char* kBypassJournalFileName = "ptrack.bypass";
constexpr const char* kBypassJournalOldFileName = "ptrack.bypass.old";

constexpr size_t kBypassEntryBytes = 40;

struct BypassEntry {
    RelFork rel;
    BlockNumber nblocks; /* blocks 0 .. nblocks-1 were written before lsn */
    Lsn lsn;
};

/* Writes `entry` into out[0 .. kBypassEntryBytes). */
void bypass_encode_entry(const BypassEntry& entry, Crc32cFn crc32c, uint8_t* out) noexcept;

/* Reads in[0 .. kBypassEntryBytes) into *out; false if it is not a valid entry (magic, CRC, fork). */
bool bypass_decode_entry(const uint8_t* in, Crc32cFn crc32c, BypassEntry* out) noexcept;

}  // namespace ptrack

#endif
