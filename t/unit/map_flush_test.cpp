/*
 * t/unit/map_flush_test.cpp -- proves the writes of a map save
 * (ptrack/map_flush.h), into memory:
 *
 * - the whole map: the file decodes (header CRC, geometry), each chunk holds
 *   the region's bytes and the CRC the table gives it, and its size is
 *   map_file_bytes(); the header is the last write, so a save torn anywhere
 *   leaves no valid header over new data;
 * - a delta batch: its header decodes with the base, sequence and LSNs of
 *   the save, its entries are exactly the words >= threshold with the CRC the
 *   header gives, and applying them to the older map reproduces the newer;
 *   it starts at the given offset; beyond max_entries it gives up with
 *   too_big; a failed write ends either flush with 0;
 * - the full-or-delta rule.
 *
 * CRC-32C is the bitwise oracle of crc32c_oracle.h.
 */
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "crc32c_oracle.h"
#include "map_fixture.h"
#include "memory_sink.h"
#include "ptrack/map_flush.h"

using namespace ptrack;
using ptrack_test::bitwise_crc32c;
using ptrack_test::MemorySink;
using ptrack_test::oracle_update;
using ptrack_test::OwnedMap;

namespace {

MapFileHeader header_for(const MapGeometry& g, uint32_t chunk_bytes)
{
    MapFileHeader h{};
    h.version = kMapFileVersion;
    h.system_identifier = 7291234567890123456ULL;
    h.geometry = g;
    h.chunk_bytes = chunk_bytes;
    h.flags = kFlagFullPageWrites | kFlagWalLevelReplica;
    h.init_lsn = 0x1000028;
    h.covered_lsn = 0x3000060;
    h.source = CaptureSourceId::kWal;
    h.timeline = 3;
    h.base_id = 0xfeedface12345678ULL;
    h.placement = placement_fingerprint(g);
    return h;
}

const RelFork kRel{1663, 5, 16384, kMainFork};

}  // namespace

TEST(MapFlush, WholeMapFileDecodesWithEveryChunkAndItsCrc)
{
    const MapGeometry g = MapGeometry::for_bytes(1 * ptrack_test::kMB, ptrack_test::kRelSegSize, 0);
    OwnedMap owned(g);
    for (BlockNumber b = 0; b < 30000; b += 5)
        owned.map().mark(kRel, b, 5000 + b);
    const uint32_t chunk_bytes = 4096; /* several chunks and a short last one for this region */
    const MapFileHeader header = header_for(g, chunk_bytes);
    const uint64_t chunks = map_file_chunk_count(g, chunk_bytes);
    ASSERT_GT(chunks, 2u);
    std::vector<uint8_t> chunk(chunk_bytes);
    std::vector<uint32_t> crcs((map_file_data_offset(chunks) - kMapFileHeaderBytes) / sizeof(uint32_t));
    MemorySink sink;

    const uint64_t bytes = map_file_write(owned.map(), header, bitwise_crc32c, chunk.data(), crcs.data(), sink);
    ASSERT_EQ(bytes, map_file_bytes(g, chunk_bytes));
    ASSERT_EQ(sink.bytes.size(), bytes);
    EXPECT_EQ(sink.last_offset, 0u) << "the header must be written last";

    MapFileHeader decoded{};
    ASSERT_EQ(map_file_decode_header(sink.bytes.data(), bitwise_crc32c, &decoded), HeaderStatus::kOk);
    EXPECT_EQ(decoded.covered_lsn, header.covered_lsn);
    EXPECT_EQ(decoded.base_id, header.base_id);
    const uint64_t data_offset = map_file_data_offset(chunks);
    for (uint64_t c = 0; c < chunks; ++c) {
        const uint64_t len = map_file_chunk_length(g, chunk_bytes, c);
        const uint8_t* on_disk = sink.bytes.data() + data_offset + c * chunk_bytes;
        EXPECT_EQ(std::memcmp(on_disk, owned.map().region() + c * chunk_bytes, len), 0) << "chunk " << c;
        uint32_t table_crc;
        std::memcpy(&table_crc, sink.bytes.data() + kMapFileHeaderBytes + c * sizeof(uint32_t), sizeof(table_crc));
        EXPECT_EQ(table_crc, bitwise_crc32c(on_disk, len)) << "chunk " << c;
    }

    MemorySink failing;
    failing.fail_after = 1;
    EXPECT_EQ(map_file_write(owned.map(), header, bitwise_crc32c, chunk.data(), crcs.data(), failing), 0u);
    EXPECT_TRUE(failing.bytes.size() < kMapFileHeaderBytes || failing.bytes[0] == 0)
        << "a failed save must not have written the header";
}

TEST(MapFlush, DeltaBatchHoldsExactlyTheWordsSinceTheThreshold)
{
    const MapGeometry g = MapGeometry::for_bytes(1 * ptrack_test::kMB, ptrack_test::kRelSegSize, 0);
    OwnedMap newer(g);
    OwnedMap older(g);
    for (BlockNumber b = 0; b < 5000; b += 3) {
        newer.map().mark(kRel, b, 1000 + b);
        older.map().mark(kRel, b, 1000 + b);
    }
    const Lsn threshold = 100000;
    for (BlockNumber b = 0; b < 20000; b += 7)
        newer.map().mark(kRel, b, threshold + b);
    const MapFileHeader header = header_for(g, kMapFileChunkBytes);
    std::vector<DeltaEntry> buffer(50); /* several collects */
    DeltaBatchPlan plan{};
    plan.threshold = threshold;
    plan.base_id = header.base_id;
    plan.sequence = 4;
    plan.batch_offset = 640; /* after earlier batches */
    plan.max_entries = delta_max_entries(g);
    plan.buffer = buffer.data();
    plan.capacity = buffer.size();
    MemorySink sink;
    bool too_big = true;

    const uint64_t written =
        delta_write_batch(newer.map(), header, plan, bitwise_crc32c, oracle_update, sink, &too_big);
    EXPECT_FALSE(too_big);
    ASSERT_GT(written, kDeltaBatchHeaderBytes);
    ASSERT_EQ(sink.bytes.size(), plan.batch_offset + written);
    EXPECT_EQ(sink.last_offset, plan.batch_offset) << "the batch header must be written last";

    DeltaBatchHeader batch{};
    ASSERT_TRUE(delta_decode_batch_header(sink.bytes.data() + plan.batch_offset, bitwise_crc32c, &batch));
    EXPECT_EQ(batch.base_id, header.base_id);
    EXPECT_EQ(batch.sequence, 4u);
    EXPECT_EQ(batch.covered_lsn, header.covered_lsn);
    EXPECT_EQ(batch.init_lsn, header.init_lsn);
    EXPECT_EQ(batch.timeline, header.timeline);
    EXPECT_EQ(batch.flags, header.flags);
    ASSERT_EQ(kDeltaBatchHeaderBytes + batch.entry_count * sizeof(DeltaEntry), written);
    const uint8_t* entries = sink.bytes.data() + plan.batch_offset + kDeltaBatchHeaderBytes;
    EXPECT_EQ(batch.entries_crc, bitwise_crc32c(entries, batch.entry_count * sizeof(DeltaEntry)));
    std::vector<DeltaEntry> all(batch.entry_count);
    std::memcpy(all.data(), entries, all.size() * sizeof(DeltaEntry));
    for (const DeltaEntry& e : all)
        EXPECT_GE(e.value, threshold);
    ASSERT_TRUE(delta_apply(older.map(), all.data(), all.size()));
    EXPECT_EQ(std::memcmp(older.map().region(), newer.map().region(), g.region_bytes()), 0);

    plan.max_entries = batch.entry_count - 1;
    MemorySink small;
    EXPECT_EQ(delta_write_batch(newer.map(), header, plan, bitwise_crc32c, oracle_update, small, &too_big), 0u);
    EXPECT_TRUE(too_big);

    plan.max_entries = delta_max_entries(g);
    MemorySink failing;
    failing.fail_after = 2;
    EXPECT_EQ(delta_write_batch(newer.map(), header, plan, bitwise_crc32c, oracle_update, failing, &too_big), 0u);
    EXPECT_FALSE(too_big);
}

TEST(MapFlush, FullWhenNoThresholdAfterAFailureOrWhenTheDeltaOutgrowsAQuarter)
{
    const MapGeometry g = MapGeometry::for_bytes(4 * ptrack_test::kMB, ptrack_test::kRelSegSize);
    const uint64_t quarter = g.region_bytes() / 4;
    EXPECT_TRUE(flush_wants_full(false, false, 0, g));
    EXPECT_TRUE(flush_wants_full(true, true, 0, g));
    EXPECT_FALSE(flush_wants_full(true, false, quarter, g));
    EXPECT_TRUE(flush_wants_full(true, false, quarter + 1, g));
    EXPECT_EQ(delta_max_entries(g), g.region_bytes() / 2 / sizeof(DeltaEntry));
}
