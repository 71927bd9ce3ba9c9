/*
 * map_delta.cpp -- incremental flush batches; see ptrack/map_delta.h.
 */
#include "ptrack/map_delta.h"

#include <cstring>

#include "field_codec.h"

namespace ptrack {

using codec::get;
using codec::put;

namespace {

constexpr char kBatchMagic[8] = {'P', 'T', 'R', 'K', 'D', 'L', 'T', 'A'};

enum : size_t {
    kOffMagic = 0,
    kOffBaseId = 8,
    kOffSequence = 16,
    kOffFlags = 20,
    kOffEntryCount = 24,
    kOffCoveredLsn = 32,
    kOffInitLsn = 40,
    kOffTimeline = 48,
    kOffEntriesCrc = 52,
    kOffHeaderCrc = kDeltaBatchHeaderBytes - 4
};

}  // namespace

void delta_encode_batch_header(const DeltaBatchHeader& header, Crc32cFn crc32c, uint8_t* out) noexcept
{
    std::memset(out, 0, kDeltaBatchHeaderBytes);
    std::memcpy(out + kOffMagic, kBatchMagic, sizeof(kBatchMagic));
    put<uint64_t>(out, kOffBaseId, header.base_id);
    put<uint32_t>(out, kOffSequence, header.sequence);
    put<uint32_t>(out, kOffFlags, header.flags);
    put<uint64_t>(out, kOffEntryCount, header.entry_count);
    put<uint64_t>(out, kOffCoveredLsn, header.covered_lsn);
    put<uint64_t>(out, kOffInitLsn, header.init_lsn);
    put<uint32_t>(out, kOffTimeline, header.timeline);
    put<uint32_t>(out, kOffEntriesCrc, header.entries_crc);
    put<uint32_t>(out, kOffHeaderCrc, crc32c(out, kOffHeaderCrc));
}

bool delta_decode_batch_header(const uint8_t* in, Crc32cFn crc32c, DeltaBatchHeader* out) noexcept
{
    if (std::memcmp(in + kOffMagic, kBatchMagic, sizeof(kBatchMagic)) != 0 ||
        get<uint32_t>(in, kOffHeaderCrc) != crc32c(in, kOffHeaderCrc))
        return false;
    out->base_id = get<uint64_t>(in, kOffBaseId);
    out->sequence = get<uint32_t>(in, kOffSequence);
    out->flags = get<uint32_t>(in, kOffFlags);
    out->entry_count = get<uint64_t>(in, kOffEntryCount);
    out->covered_lsn = get<uint64_t>(in, kOffCoveredLsn);
    out->init_lsn = get<uint64_t>(in, kOffInitLsn);
    out->timeline = get<uint32_t>(in, kOffTimeline);
    out->entries_crc = get<uint32_t>(in, kOffEntriesCrc);
    return true;
}

size_t delta_collect(const Map& map, Lsn threshold, uint64_t* next_word, DeltaEntry* out, size_t capacity) noexcept
{
    const auto* words = reinterpret_cast<const uint64_t*>(map.region());
    const uint64_t total = region_words(map.geometry());
    size_t n = 0;
    uint64_t w = *next_word;
    for (; w < total && n < capacity; ++w) {
        const uint64_t value = load_lsn(&words[w]);
        if (value >= threshold && value != 0)
            out[n++] = DeltaEntry{w, value};
    }
    *next_word = w;
    return n;
}

bool delta_apply(const Map& map, const DeltaEntry* entries, size_t count) noexcept
{
    auto* words = reinterpret_cast<uint64_t*>(map.region());
    const uint64_t total = region_words(map.geometry());
    for (size_t i = 0; i < count; ++i) {
        if (entries[i].word >= total)
            return false;
        atomic_max_lsn(&words[entries[i].word], entries[i].value);
    }
    return true;
}

void make_chunk_conservative(const Map& map, uint32_t chunk_bytes, uint64_t chunk, Lsn lsn) noexcept
{
    auto* words = reinterpret_cast<uint64_t*>(map.region() + chunk * chunk_bytes);
    const uint64_t len = map_file_chunk_length(map.geometry(), chunk_bytes, chunk);
    for (uint64_t i = 0; i < len / sizeof(uint64_t); ++i)
        atomic_max_lsn(&words[i], lsn);
}

}  // namespace ptrack
