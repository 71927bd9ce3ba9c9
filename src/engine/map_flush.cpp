/*
 * map_flush.cpp -- the writes of a map save, in order; see ptrack/map_flush.h.
 */
#include "ptrack/map_flush.h"

namespace ptrack {

uint64_t map_file_write(const Map& map, const MapFileHeader& header, Crc32cFn crc32c, uint8_t* chunk_buffer,
                        uint32_t* crcs, FlushSink& sink) noexcept
{
    const MapGeometry& geometry = header.geometry;
    const uint32_t chunk_bytes = header.chunk_bytes;
    const uint64_t chunks = map_file_chunk_count(geometry, chunk_bytes);
    const uint64_t data_offset = map_file_data_offset(chunks);
    for (uint64_t c = 0; c < chunks; ++c) {
        const uint64_t len = map_file_chunk_length(geometry, chunk_bytes, c);
        const auto* src = reinterpret_cast<const uint64_t*>(map.region() + c * chunk_bytes);
        auto* dst = reinterpret_cast<uint64_t*>(chunk_buffer);
        for (uint64_t i = 0; i < len / sizeof(uint64_t); ++i)
            dst[i] = load_lsn(&src[i]);
        crcs[c] = crc32c(chunk_buffer, len);
        if (!sink.write(chunk_buffer, len, data_offset + c * chunk_bytes))
            return 0;
    }
    uint8_t header_bytes[kMapFileHeaderBytes];
    map_file_encode_header(header, crc32c, header_bytes);
    if (!sink.write(crcs, data_offset - kMapFileHeaderBytes, kMapFileHeaderBytes) ||
        !sink.write(header_bytes, sizeof(header_bytes), 0))
        return 0;
    return map_file_bytes(geometry, chunk_bytes);
}

uint64_t delta_write_batch(const Map& map, const MapFileHeader& header, const DeltaBatchPlan& plan,
                           Crc32cFn crc32c, Crc32cUpdateFn crc32c_update, FlushSink& sink, bool* too_big) noexcept
{
    *too_big = false;
    const uint64_t entries_offset = plan.batch_offset + kDeltaBatchHeaderBytes;
    const uint64_t words = region_words(header.geometry);
    uint64_t next_word = 0;
    uint64_t count = 0;
    uint32_t crc = 0xFFFFFFFFu;
    while (next_word < words) {
        const size_t n = delta_collect(map, plan.threshold, &next_word, plan.buffer, plan.capacity);
        if (count + n > plan.max_entries) {
            *too_big = true;
            return 0;
        }
        crc = crc32c_update(crc, plan.buffer, n * sizeof(DeltaEntry));
        if (!sink.write(plan.buffer, n * sizeof(DeltaEntry), entries_offset + count * sizeof(DeltaEntry)))
            return 0;
        count += n;
    }

    DeltaBatchHeader batch{};
    batch.base_id = plan.base_id;
    batch.sequence = plan.sequence;
    batch.flags = header.flags;
    batch.entry_count = count;
    batch.covered_lsn = header.covered_lsn;
    batch.init_lsn = header.init_lsn;
    batch.timeline = header.timeline;
    batch.entries_crc = crc ^ 0xFFFFFFFFu;
    uint8_t raw[kDeltaBatchHeaderBytes];
    delta_encode_batch_header(batch, crc32c, raw);
    if (!sink.write(raw, sizeof(raw), plan.batch_offset))
        return 0;
    return kDeltaBatchHeaderBytes + count * sizeof(DeltaEntry);
}

}  // namespace ptrack
