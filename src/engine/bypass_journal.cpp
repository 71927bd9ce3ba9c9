/*
 * bypass_journal.cpp -- encoding of ptrack.bypass entries; see
 * ptrack/bypass_journal.h for the format.
 */
#include "ptrack/bypass_journal.h"

#include "field_codec.h"

namespace ptrack {

using codec::get;
using codec::put;

namespace {

constexpr uint32_t kMagic = 0x59425450; /* "PTBY" read as a little-endian u32 */
constexpr size_t kOffMagic = 0;
constexpr size_t kOffSpc = 4;
constexpr size_t kOffDb = 8;
constexpr size_t kOffRel = 12;
constexpr size_t kOffFork = 16;
constexpr size_t kOffNblocks = 20;
constexpr size_t kOffLsn = 24;
constexpr size_t kOffCrc = 32;

}  // namespace

void bypass_encode_entry(const BypassEntry& entry, Crc32cFn crc32c, uint8_t* out) noexcept
{
    for (size_t i = 0; i < kBypassEntryBytes; ++i)
        out[i] = 0;
    put<uint32_t>(out, kOffMagic, kMagic);
    put<uint32_t>(out, kOffSpc, entry.rel.spc_oid);
    put<uint32_t>(out, kOffDb, entry.rel.db_oid);
    put<uint32_t>(out, kOffRel, entry.rel.relfilenode);
    put<uint32_t>(out, kOffFork, entry.rel.fork);
    put<uint32_t>(out, kOffNblocks, entry.nblocks);
    put<uint64_t>(out, kOffLsn, entry.lsn);
    put<uint32_t>(out, kOffCrc, crc32c(out, kOffCrc));
}

bool bypass_decode_entry(const uint8_t* in, Crc32cFn crc32c, BypassEntry* out) noexcept
{
    if (get<uint32_t>(in, kOffMagic) != kMagic || get<uint32_t>(in, kOffCrc) != crc32c(in, kOffCrc))
        return false;
    const uint32_t fork = get<uint32_t>(in, kOffFork);
    if (fork > kMaxFork)
        return false;
    out->rel = RelFork{get<uint32_t>(in, kOffSpc), get<uint32_t>(in, kOffDb), get<uint32_t>(in, kOffRel),
                       static_cast<uint8_t>(fork)};
    out->nblocks = get<uint32_t>(in, kOffNblocks);
    out->lsn = get<uint64_t>(in, kOffLsn);
    return true;
}

}  // namespace ptrack
