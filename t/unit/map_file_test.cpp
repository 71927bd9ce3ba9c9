/*
 * t/unit/map_file_test.cpp -- proves the map file format and the startup
 * trust rules (ptrack/map_file.h), and the incremental flush batches
 * (ptrack/map_delta.h):
 *
 * - a header round-trips field by field; any flipped byte is caught (magic,
 *   CRC), a wrong version and an impossible geometry are refused;
 * - file arithmetic: chunk count, 4 KB-aligned data offset, short last chunk;
 * - every trust rule of docs/design.md section 5.2 rejects with its own reason, and
 *   a clean or crash-with-full-page-writes case is trusted;
 * - delta batches: the header round-trips and detects corruption; collecting
 *   words >= threshold finds exactly the slots marked since, and applying
 *   them to a copy of the older map reproduces the newer one;
 * - a conservative chunk makes every block placed there read as changed.
 *
 * The CRC-32C used here is a bitwise implementation written for the test, an
 * oracle independent of PostgreSQL's table-driven/SSE one used in the server.
 */
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "crc32c_oracle.h"
#include "map_fixture.h"
#include "ptrack/map_delta.h"
#include "ptrack/map_file.h"

using namespace ptrack;
using ptrack_test::bitwise_crc32c;
using ptrack_test::OwnedMap;

namespace {

MapFileHeader sample_header()
{
    MapFileHeader h{};
    h.version = kMapFileVersion;
    h.system_identifier = 7291234567890123456ULL;
    h.data_checksum_version = 1;
    h.geometry = MapGeometry::for_bytes(64 * ptrack_test::kMB, ptrack_test::kRelSegSize);
    h.chunk_bytes = kMapFileChunkBytes;
    h.flags = kFlagFullPageWrites | kFlagWalLevelReplica;
    h.init_lsn = 0x1000028;
    h.covered_lsn = 0x3000060;
    h.source = CaptureSourceId::kHooks;
    h.timeline = 2;
    h.base_id = 0xfeedface12345678ULL;
    h.placement = placement_fingerprint(h.geometry);
    h.server_major = 18;
    return h;
}

StartupFacts facts_for(const MapFileHeader& h)
{
    StartupFacts f{};
    f.system_identifier = h.system_identifier;
    f.server_major = h.server_major;
    f.data_checksum_version = h.data_checksum_version;
    f.geometry = h.geometry;
    f.source = h.source;
    f.checkpoint_redo = h.covered_lsn;
    f.backup_label = false;
    f.crashed = false;
    f.checkpoint_wal_level_replica = true;
    f.wal_level_replica = true;
    f.file_bytes = map_file_bytes(h.geometry, h.chunk_bytes);
    return f;
}

}  // namespace

TEST(Crc32cOracle, KnownCheckValue)
{
    EXPECT_EQ(bitwise_crc32c("123456789", 9), 0xE3069283u);
}

TEST(MapFileHeader, RoundTripsEveryField)
{
    const MapFileHeader h = sample_header();
    uint8_t raw[kMapFileHeaderBytes];
    map_file_encode_header(h, bitwise_crc32c, raw);
    MapFileHeader back{};
    ASSERT_EQ(map_file_decode_header(raw, bitwise_crc32c, &back), HeaderStatus::kOk);
    EXPECT_EQ(back.version, h.version);
    EXPECT_EQ(back.system_identifier, h.system_identifier);
    EXPECT_EQ(back.data_checksum_version, h.data_checksum_version);
    EXPECT_TRUE(back.geometry == h.geometry);
    EXPECT_EQ(back.chunk_bytes, h.chunk_bytes);
    EXPECT_EQ(back.flags, h.flags);
    EXPECT_EQ(back.init_lsn, h.init_lsn);
    EXPECT_EQ(back.covered_lsn, h.covered_lsn);
    EXPECT_EQ(back.source, h.source);
    EXPECT_EQ(back.timeline, h.timeline);
    EXPECT_EQ(back.base_id, h.base_id);
    EXPECT_EQ(back.placement, h.placement);
    EXPECT_EQ(back.server_major, h.server_major);
}

TEST(MapFileHeader, AFileWithoutServerMajorWasWrittenUnder15)
{
    MapFileHeader h = sample_header();
    h.server_major = 0; /* encoded as a build before the field wrote it */
    uint8_t raw[kMapFileHeaderBytes];
    map_file_encode_header(h, bitwise_crc32c, raw);
    MapFileHeader out{};
    ASSERT_EQ(map_file_decode_header(raw, bitwise_crc32c, &out), HeaderStatus::kOk);
    EXPECT_EQ(out.server_major, kUnrecordedServerMajor);
}

TEST(MapFileHeader, EveryFlippedByteIsDetected)
{
    uint8_t raw[kMapFileHeaderBytes];
    map_file_encode_header(sample_header(), bitwise_crc32c, raw);
    for (size_t i = 0; i < kMapFileHeaderBytes; ++i) {
        uint8_t copy[kMapFileHeaderBytes];
        std::memcpy(copy, raw, sizeof(raw));
        copy[i] ^= 0x10;
        MapFileHeader out{};
        const HeaderStatus s = map_file_decode_header(copy, bitwise_crc32c, &out);
        EXPECT_TRUE(s == HeaderStatus::kBadMagic || s == HeaderStatus::kBadCrc) << "byte " << i;
    }
}

TEST(MapFileHeader, RefusesOtherVersionAndImpossibleGeometry)
{
    MapFileHeader h = sample_header();
    h.version = kMapFileVersion + 1;
    uint8_t raw[kMapFileHeaderBytes];
    map_file_encode_header(h, bitwise_crc32c, raw);
    MapFileHeader out{};
    EXPECT_EQ(map_file_decode_header(raw, bitwise_crc32c, &out), HeaderStatus::kBadVersion);

    h = sample_header();
    h.geometry.line_count = 0;
    map_file_encode_header(h, bitwise_crc32c, raw);
    EXPECT_EQ(map_file_decode_header(raw, bitwise_crc32c, &out), HeaderStatus::kBadGeometry);

    std::memset(raw, 0xAB, sizeof(raw));
    EXPECT_EQ(map_file_decode_header(raw, bitwise_crc32c, &out), HeaderStatus::kBadMagic);
    EXPECT_STRNE(describe_header_status(HeaderStatus::kBadCrc), describe_header_status(HeaderStatus::kBadMagic));
}

TEST(MapFileLayout, ChunksOffsetsAndSizes)
{
    const MapGeometry g = MapGeometry::for_bytes(64 * ptrack_test::kMB, ptrack_test::kRelSegSize);
    const uint64_t chunks = map_file_chunk_count(g, kMapFileChunkBytes);
    EXPECT_EQ(chunks, (g.region_bytes() + kMapFileChunkBytes - 1) / kMapFileChunkBytes);
    const uint64_t offset = map_file_data_offset(chunks);
    EXPECT_EQ(offset % 4096, 0u);
    EXPECT_GE(offset, kMapFileHeaderBytes + chunks * 4);
    EXPECT_EQ(map_file_bytes(g, kMapFileChunkBytes), offset + g.region_bytes());
    uint64_t sum = 0;
    for (uint64_t c = 0; c < chunks; ++c) {
        const uint64_t len = map_file_chunk_length(g, kMapFileChunkBytes, c);
        EXPECT_GT(len, 0u);
        EXPECT_LE(len, kMapFileChunkBytes);
        sum += len;
    }
    EXPECT_EQ(sum, g.region_bytes());
    EXPECT_EQ(map_file_chunk_length(g, kMapFileChunkBytes, chunks), 0u);
}

TEST(MapFileTrust, CleanAndCrashWithFullPageWritesAreTrusted)
{
    const MapFileHeader h = sample_header();
    StartupFacts f = facts_for(h);
    EXPECT_EQ(map_file_distrust_reason(h, f), nullptr);
    f.crashed = true;
    EXPECT_EQ(map_file_distrust_reason(h, f), nullptr);
    f.checkpoint_redo = h.covered_lsn - 1; /* flushed for a checkpoint whose control update was lost */
    EXPECT_EQ(map_file_distrust_reason(h, f), nullptr);
}

TEST(MapFileTrust, EveryRuleRejectsWithItsOwnReason)
{
    const MapFileHeader h = sample_header();
    std::vector<const char*> reasons;
    auto expect_rejected = [&](const MapFileHeader& header, const StartupFacts& facts) {
        const char* r = map_file_distrust_reason(header, facts);
        ASSERT_NE(r, nullptr);
        for (const char* seen : reasons)
            EXPECT_STRNE(seen, r);
        reasons.push_back(r);
    };
    StartupFacts f = facts_for(h);
    f.system_identifier++;
    expect_rejected(h, f);
    f = facts_for(h);
    f.server_major = 17;
    expect_rejected(h, f);
    f = facts_for(h);
    f.geometry = MapGeometry::for_bytes(32 * ptrack_test::kMB, ptrack_test::kRelSegSize);
    expect_rejected(h, f);
    f = facts_for(h);
    f.file_bytes--;
    expect_rejected(h, f);
    f = facts_for(h);
    f.backup_label = true;
    expect_rejected(h, f);
    f = facts_for(h);
    f.checkpoint_redo = h.covered_lsn + 1; /* pg_resetwal, or a missed flush */
    expect_rejected(h, f);
    f = facts_for(h);
    f.data_checksum_version = 0;
    expect_rejected(h, f);
    MapFileHeader other_build = h;
    other_build.placement ^= 1; /* a build that hashes blocks elsewhere */
    expect_rejected(other_build, facts_for(h));
    MapFileHeader no_init = h;
    no_init.init_lsn = 0;
    expect_rejected(no_init, facts_for(h));
    f = facts_for(h);
    f.crashed = true;
    f.wal_level_replica = false;
    expect_rejected(h, f);
    f = facts_for(h);
    f.source = CaptureSourceId::kWal; /* a hooks map on a server that now captures from the WAL */
    expect_rejected(h, f);
}

TEST(MapFileTrust, ASwitchOfCaptureSourceIsNamedBeforeTheGeometry)
{
    /* wal capture saves the smallest geometry: a switch changes both, and the reason must name the source. */
    const MapFileHeader hooks_map = sample_header();
    StartupFacts f = facts_for(hooks_map);
    f.source = CaptureSourceId::kWal;
    f.geometry = MapGeometry::smallest(ptrack_test::kRelSegSize);
    EXPECT_STREQ(map_file_distrust_reason(hooks_map, f),
                 "it was written by the hooks capture source and this server captures from the WAL");
    MapFileHeader wal_map = hooks_map;
    wal_map.source = CaptureSourceId::kWal;
    wal_map.geometry = MapGeometry::smallest(ptrack_test::kRelSegSize);
    EXPECT_STREQ(map_file_distrust_reason(wal_map, facts_for(hooks_map)),
                 "it was written by another capture source than this server's (ptrack.capture changed)");
}

TEST(MapFileTrust, CrashAfterAnyWalLevelLapse)
{
    const MapFileHeader h = sample_header();
    for (int which = 0; which < 3; ++which) {
        MapFileHeader hh = h;
        StartupFacts f = facts_for(h);
        f.crashed = true;
        if (which == 0) hh.flags &= ~kFlagWalLevelReplica;
        if (which == 1) f.checkpoint_wal_level_replica = false;
        if (which == 2) f.wal_level_replica = false;
        EXPECT_NE(map_file_distrust_reason(hh, f), nullptr) << which;
        f.crashed = false; /* a clean shutdown wrote everything through the hooks */
        EXPECT_EQ(map_file_distrust_reason(hh, f), nullptr) << which;
    }
}

TEST(MapFileTrust, CrashWithoutFullPageWritesIsLeftToTheStartupScan)
{
    /* The hooks' startup scan re-marks the WAL after covered_lsn: full_page_writes is not judged here. */
    MapFileHeader h = sample_header();
    h.flags &= ~kFlagFullPageWrites;
    StartupFacts f = facts_for(h);
    f.crashed = true;
    EXPECT_EQ(map_file_distrust_reason(h, f), nullptr);
}

TEST(MapFileTrust, WalSourceNeedsNoCheckpointOrFullPageWritesRule)
{
    /* The follower re-reads the WAL from covered_lsn: crash, redo LSN and full_page_writes do not matter. */
    MapFileHeader h = sample_header();
    h.source = CaptureSourceId::kWal;
    h.flags = 0;
    StartupFacts f = facts_for(h);
    f.checkpoint_redo = h.covered_lsn + 0x100000;
    f.crashed = true;
    EXPECT_EQ(map_file_distrust_reason(h, f), nullptr);
    /* The rules that hold for every source still hold. */
    f.backup_label = true;
    EXPECT_NE(map_file_distrust_reason(h, f), nullptr);
    f = facts_for(h);
    f.source = CaptureSourceId::kHooks;
    EXPECT_NE(map_file_distrust_reason(h, f), nullptr);
    MapFileHeader before_init = h;
    before_init.covered_lsn = h.init_lsn - 1;
    EXPECT_NE(map_file_distrust_reason(before_init, facts_for(before_init)), nullptr);
}

TEST(MapDelta, BatchHeaderRoundTripsAndDetectsCorruption)
{
    DeltaBatchHeader b{};
    b.base_id = 42;
    b.sequence = 3;
    b.flags = kFlagFullPageWrites;
    b.entry_count = 1234;
    b.covered_lsn = 0x5000000;
    b.init_lsn = 0x1000000;
    b.timeline = 1;
    b.entries_crc = 0xdeadbeef;
    uint8_t raw[kDeltaBatchHeaderBytes];
    delta_encode_batch_header(b, bitwise_crc32c, raw);
    DeltaBatchHeader back{};
    ASSERT_TRUE(delta_decode_batch_header(raw, bitwise_crc32c, &back));
    EXPECT_EQ(back.base_id, 42u);
    EXPECT_EQ(back.sequence, 3u);
    EXPECT_EQ(back.entry_count, 1234u);
    EXPECT_EQ(back.covered_lsn, 0x5000000u);
    EXPECT_EQ(back.entries_crc, 0xdeadbeefu);
    for (size_t i = 0; i < kDeltaBatchHeaderBytes; ++i) {
        uint8_t copy[kDeltaBatchHeaderBytes];
        std::memcpy(copy, raw, sizeof(raw));
        copy[i] ^= 1;
        EXPECT_FALSE(delta_decode_batch_header(copy, bitwise_crc32c, &back)) << "byte " << i;
    }
    std::vector<uint8_t> zeros(kDeltaBatchHeaderBytes, 0); /* a torn append leaves zeros */
    EXPECT_FALSE(delta_decode_batch_header(zeros.data(), bitwise_crc32c, &back));
}

TEST(MapDelta, CollectingSinceThresholdAndApplyingReproducesTheMap)
{
    const MapGeometry g = MapGeometry::for_bytes(1 * ptrack_test::kMB, ptrack_test::kRelSegSize, 0);
    OwnedMap newer(g);
    OwnedMap older(g);
    const RelFork rel{1663, 5, 16384, kMainFork};
    /* History before the previous flush, present in both. */
    for (BlockNumber b = 0; b < 5000; b += 3) {
        newer.map().mark(rel, b, 1000 + b);
        older.map().mark(rel, b, 1000 + b);
    }
    const Lsn threshold = 100000; /* current_mark_lsn() at the previous flush */
    for (BlockNumber b = 0; b < 20000; b += 7)
        newer.map().mark(rel, b, threshold + b);

    std::vector<DeltaEntry> entries(64);
    std::vector<DeltaEntry> all;
    uint64_t next = 0;
    while (next < region_words(g)) {
        const size_t n = delta_collect(newer.map(), threshold, &next, entries.data(), entries.size());
        all.insert(all.end(), entries.begin(), entries.begin() + static_cast<long>(n));
    }
    /* Exactly the words marked since the threshold: each value is >= threshold. */
    for (const DeltaEntry& e : all)
        EXPECT_GE(e.value, threshold);
    ASSERT_TRUE(delta_apply(older.map(), all.data(), all.size()));
    EXPECT_EQ(std::memcmp(older.map().region(), newer.map().region(), g.region_bytes()), 0);
    /* 2 slots + 1 summary word per mark at most; far fewer than the map's words. */
    EXPECT_LT(all.size(), region_words(g) / 10);

    const DeltaEntry bad{region_words(g), 1};
    EXPECT_FALSE(delta_apply(older.map(), &bad, 1));
}

TEST(MapDelta, ConservativeChunkListsEveryBlockPlacedThere)
{
    const MapGeometry g = MapGeometry::for_bytes(1 * ptrack_test::kMB, ptrack_test::kRelSegSize, 0);
    OwnedMap m(g);
    const uint64_t chunks = map_file_chunk_count(g, kMapFileChunkBytes);
    for (uint64_t c = 0; c < chunks; ++c)
        make_chunk_conservative(m.map(), kMapFileChunkBytes, c, 0x9000000);
    const RelFork rel{1663, 5, 16390, kMainFork};
    for (BlockNumber b = 0; b < 100000; b += 13)
        EXPECT_TRUE(m.map().block_changed(rel, b, 0x9000000)) << b;
    /* Raising never lowers a slot that was already higher. */
    m.map().mark(rel, 1, 0xA000000);
    make_chunk_conservative(m.map(), kMapFileChunkBytes, 0, 0x9000000);
    EXPECT_TRUE(m.map().block_changed(rel, 1, 0xA000000));
}
