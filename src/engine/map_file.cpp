/*
 * map_file.cpp -- encoding, decoding and trust rules of the map file; the
 * format and the reasons behind it are in ptrack/map_file.h.
 *
 * The header is encoded field by field at fixed offsets (not by copying a
 * struct) so that padding and field order can never leak into the format.
 */
#include "ptrack/map_file.h"

#include <cstring>

#include "field_codec.h"

namespace ptrack {

using codec::get;
using codec::put;

namespace {

constexpr char kMagic[8] = {'P', 'T', 'R', 'A', 'C', 'K', 'M', 'P'};
constexpr size_t kCrcTableAlign = 4096;

/* Field offsets in the header. */
enum : size_t {
    kOffMagic = 0,
    kOffVersion = 8,
    kOffSystemIdentifier = 16,
    kOffChecksumVersion = 24,
    kOffSummaryCount = 32,
    kOffLineCount = 40,
    kOffBlocksPerSegment = 48,
    kOffGranuleShift = 52,
    kOffChunkBytes = 56,
    kOffFlags = 60,
    kOffInitLsn = 64,
    kOffCoveredLsn = 72,
    kOffTimeline = 80,
    kOffBaseId = 88,
    kOffPlacement = 96,
    kOffSource = 104,
    kOffServerMajor = 108,
    kOffCrc = kMapFileHeaderBytes - 4
};

}  // namespace

uint64_t placement_fingerprint(const MapGeometry& geometry) noexcept
{
    Map probe(nullptr, geometry); /* placement only: no slot is touched */
    uint64_t fingerprint = mix64(geometry.line_count ^ (geometry.summary_count << 1) ^
                                 (uint64_t{kSummaryRangeShift} << 56));
    for (uint32_t i = 0; i < 64; ++i) {
        const RelFork rel{1663 + i % 3, 5 + i, 16384 + 7 * i, static_cast<uint8_t>(i % 4)};
        const SlotPair slots = probe.slots_of(rel, i * 1009u);
        fingerprint = mix64(fingerprint ^ slots.first);
        fingerprint = mix64(fingerprint ^ slots.second);
        fingerprint = mix64(fingerprint ^ probe.summary_slot_index(rel, i * 1009u));
    }
    return fingerprint;
}

uint64_t map_file_chunk_count(const MapGeometry& geometry, uint32_t chunk_bytes) noexcept
{
    return (geometry.region_bytes() + chunk_bytes - 1) / chunk_bytes;
}

uint64_t map_file_data_offset(uint64_t chunk_count) noexcept
{
    const uint64_t end = kMapFileHeaderBytes + chunk_count * sizeof(uint32_t);
    return (end + kCrcTableAlign - 1) / kCrcTableAlign * kCrcTableAlign;
}

uint64_t map_file_bytes(const MapGeometry& geometry, uint32_t chunk_bytes) noexcept
{
    return map_file_data_offset(map_file_chunk_count(geometry, chunk_bytes)) + geometry.region_bytes();
}

uint64_t map_file_chunk_length(const MapGeometry& geometry, uint32_t chunk_bytes, uint64_t chunk) noexcept
{
    const uint64_t start = chunk * chunk_bytes;
    const uint64_t total = geometry.region_bytes();
    if (start >= total)
        return 0;
    return total - start < chunk_bytes ? total - start : chunk_bytes;
}

void map_file_encode_header(const MapFileHeader& header, Crc32cFn crc32c, uint8_t* out) noexcept
{
    std::memset(out, 0, kMapFileHeaderBytes);
    std::memcpy(out + kOffMagic, kMagic, sizeof(kMagic));
    put<uint32_t>(out, kOffVersion, header.version);
    put<uint64_t>(out, kOffSystemIdentifier, header.system_identifier);
    put<uint32_t>(out, kOffChecksumVersion, header.data_checksum_version);
    put<uint64_t>(out, kOffSummaryCount, header.geometry.summary_count);
    put<uint64_t>(out, kOffLineCount, header.geometry.line_count);
    put<uint32_t>(out, kOffBlocksPerSegment, header.geometry.blocks_per_segment);
    put<uint32_t>(out, kOffGranuleShift, header.geometry.lsn_granule_shift);
    put<uint32_t>(out, kOffChunkBytes, header.chunk_bytes);
    put<uint32_t>(out, kOffFlags, header.flags);
    put<uint64_t>(out, kOffInitLsn, header.init_lsn);
    put<uint64_t>(out, kOffCoveredLsn, header.covered_lsn);
    put<uint32_t>(out, kOffTimeline, header.timeline);
    put<uint64_t>(out, kOffBaseId, header.base_id);
    put<uint64_t>(out, kOffPlacement, header.placement);
    put<uint32_t>(out, kOffSource, static_cast<uint32_t>(header.source));
    put<uint32_t>(out, kOffServerMajor, header.server_major);
    put<uint32_t>(out, kOffCrc, crc32c(out, kOffCrc));
}

HeaderStatus map_file_decode_header(const uint8_t* in, Crc32cFn crc32c, MapFileHeader* out) noexcept
{
    if (std::memcmp(in + kOffMagic, kMagic, sizeof(kMagic)) != 0)
        return HeaderStatus::kBadMagic;
    if (get<uint32_t>(in, kOffCrc) != crc32c(in, kOffCrc))
        return HeaderStatus::kBadCrc;
    MapFileHeader h{};
    h.version = get<uint32_t>(in, kOffVersion);
    if (h.version != kMapFileVersion)
        return HeaderStatus::kBadVersion;
    h.system_identifier = get<uint64_t>(in, kOffSystemIdentifier);
    h.data_checksum_version = get<uint32_t>(in, kOffChecksumVersion);
    h.geometry.summary_count = get<uint64_t>(in, kOffSummaryCount);
    h.geometry.line_count = get<uint64_t>(in, kOffLineCount);
    h.geometry.blocks_per_segment = get<uint32_t>(in, kOffBlocksPerSegment);
    h.geometry.lsn_granule_shift = get<uint32_t>(in, kOffGranuleShift);
    h.chunk_bytes = get<uint32_t>(in, kOffChunkBytes);
    h.flags = get<uint32_t>(in, kOffFlags);
    h.init_lsn = get<uint64_t>(in, kOffInitLsn);
    h.covered_lsn = get<uint64_t>(in, kOffCoveredLsn);
    h.timeline = get<uint32_t>(in, kOffTimeline);
    h.base_id = get<uint64_t>(in, kOffBaseId);
    h.placement = get<uint64_t>(in, kOffPlacement);
    h.source = static_cast<CaptureSourceId>(get<uint32_t>(in, kOffSource));
    h.server_major = get<uint32_t>(in, kOffServerMajor);
    if (h.server_major == 0)
        h.server_major = kUnrecordedServerMajor;
    if (!h.geometry.valid() || h.chunk_bytes == 0 || h.chunk_bytes % kLineBytes != 0)
        return HeaderStatus::kBadGeometry;
    *out = h;
    return HeaderStatus::kOk;
}

const char* describe_header_status(HeaderStatus status) noexcept
{
    switch (status) {
    case HeaderStatus::kOk: return "its header is valid";
    case HeaderStatus::kBadMagic: return "it is not a ptrack map file (bad magic number)";
    case HeaderStatus::kBadVersion: return "it was written in an unsupported format version";
    case HeaderStatus::kBadCrc: return "its header checksum does not match";
    case HeaderStatus::kBadGeometry: return "its header describes an impossible map";
    }
    return "its header is unreadable";
}

const char* capture_source_name(CaptureSourceId source) noexcept
{
    switch (source) {
    case CaptureSourceId::kHooks: return "hooks";
    case CaptureSourceId::kWal: return "wal";
    case CaptureSourceId::kNone: break;
    }
    return "unknown";
}

const char* map_file_distrust_reason(const MapFileHeader& header, const StartupFacts& facts) noexcept
{
    if (header.system_identifier != facts.system_identifier)
        return "it belongs to another database cluster (system identifier differs)";
    if (header.server_major != facts.server_major)
        return "it was written under another PostgreSQL major version";
    /* Before the geometry: wal capture's map has the smallest one (docs/design.md section 4.6). */
    if (header.source != facts.source)
        return header.source == CaptureSourceId::kHooks
                   ? "it was written by the hooks capture source and this server captures from the WAL"
                   : "it was written by another capture source than this server's (ptrack.capture changed)";
    if (!(header.geometry == facts.geometry))
        return "ptrack.map_size changed since it was written";
    if (header.placement != placement_fingerprint(header.geometry))
        return "it was written by a ptrack build that places blocks differently";
    if (facts.file_bytes != map_file_bytes(header.geometry, header.chunk_bytes))
        return "its size does not match its header";
    if (facts.backup_label)
        return "a backup_label file is present (the data directory was restored from a backup or rewound)";
    if (header.data_checksum_version != facts.data_checksum_version)
        return "data checksums were enabled or disabled since it was written";
    if (header.init_lsn == 0)
        return "its init_lsn is missing";
    if (header.covered_lsn < header.init_lsn && header.source == CaptureSourceId::kWal)
        return "its covered LSN lies before its init_lsn";
    if (header.source == CaptureSourceId::kWal)
        return nullptr; /* the follower re-reads the WAL from covered_lsn (src/pg/capture/wal/capture_wal.cpp) */
    if (header.covered_lsn < facts.checkpoint_redo)
        return "it is older than the latest checkpoint (a flush was missed, or the WAL was reset)";
    /*
     * Whatever recovery does or does not write again, the startup scan marks
     * every record after covered_lsn (src/pg/capture/startup_scan.h), so
     * full_page_writes does not matter.  Under wal_level = minimal new
     * relations are written without WAL, which no scan can see.
     */
    if (facts.crashed &&
        (!(header.flags & kFlagWalLevelReplica) || !facts.checkpoint_wal_level_replica || !facts.wal_level_replica))
        return "the server crashed while wal_level was minimal, so the WAL cannot show what was lost";
    return nullptr;
}

}  // namespace ptrack
