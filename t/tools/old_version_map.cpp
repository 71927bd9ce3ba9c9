/*
 * t/tools/old_version_map.cpp -- turns a stopped wal-capture data directory
 * into what an earlier version of ptrack leaves there: a full-size
 * ptrack.map whose marks the WAL follower made, and the ptrack.limits it
 * saved with it.  t/035_map_migration.pl starts the server on that to test
 * the upgrade (src/pg/capture/wal/map_migration.h): this version's follower
 * marks no map, so only a file written this way can play the earlier one.
 *
 * Usage: old_version_map PGDATA MAP_MB < marks
 *   marks: one line per block, "spc db relfilenode fork block lsn" (decimal),
 *   as the earlier follower would have marked them; lsn 0 stands for the
 *   covered LSN (a block found by a walk of file sizes).
 * Prints the covered LSN (hex).
 *
 * What it keeps from the small map in PGDATA (ptrack.map, and the batches of
 * ptrack.map.delta written against it): the cluster's identity, the
 * capture source, ptrack_init_lsn(), the timeline, and the covered LSN of
 * the last save, which ptrack.sizes belongs to.  It writes ptrack.map in
 * the geometry of MAP_MB (as ptrack.map_size gave it to the earlier
 * version), an empty ptrack.limits complete up to that covered LSN, and
 * removes ptrack.map.delta.  Built with the engine (include/ptrack), no
 * PostgreSQL header; the CRC-32C is the unit tests' bitwise one.
 */
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include "../unit/crc32c_oracle.h"
#include "ptrack/limit_file.h"
#include "ptrack/limit_table.h"
#include "ptrack/map.h"
#include "ptrack/map_delta.h"
#include "ptrack/map_file.h"
#include "ptrack/map_flush.h"

using namespace ptrack;

namespace {

constexpr uint32_t kRelsegSize = 131072; /* RELSEG_SIZE of a default build: 1 GB of 8 KB blocks */

[[noreturn]] void fail(const char* what, const std::string& path)
{
    std::fprintf(stderr, "old_version_map: %s \"%s\": %s\n", what, path.c_str(), errno != 0 ? std::strerror(errno) : "");
    std::exit(1);
}

std::vector<uint8_t> read_file(const std::string& path, bool missing_ok)
{
    std::vector<uint8_t> bytes;
    FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) {
        if (missing_ok && errno == ENOENT)
            return bytes;
        fail("cannot open", path);
    }
    uint8_t buf[65536];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0)
        bytes.insert(bytes.end(), buf, buf + n);
    std::fclose(f);
    return bytes;
}

class FileSink final : public FlushSink {
public:
    explicit FileSink(int fd) : fd_(fd) {}
    bool write(const void* data, size_t len, uint64_t offset) noexcept override
    {
        return pwrite(fd_, data, len, static_cast<off_t>(offset)) == static_cast<ssize_t>(len);
    }

private:
    int fd_;
};

/* The small map's header, moved on to its last save by the delta batches written against it. */
MapFileHeader last_save(const std::string& pgdata)
{
    const std::vector<uint8_t> file = read_file(pgdata + "/" + kMapFileName, false);
    MapFileHeader header{};
    if (file.size() < kMapFileHeaderBytes ||
        map_file_decode_header(file.data(), ptrack_test::bitwise_crc32c, &header) != HeaderStatus::kOk)
        fail("no valid map header in", pgdata + "/" + kMapFileName);
    const std::vector<uint8_t> delta = read_file(pgdata + "/" + kMapDeltaFileName, true);
    uint32_t sequence = 1;
    for (size_t at = 0; at + kDeltaBatchHeaderBytes <= delta.size(); ++sequence) {
        DeltaBatchHeader batch{};
        if (!delta_decode_batch_header(delta.data() + at, ptrack_test::bitwise_crc32c, &batch) ||
            batch.base_id != header.base_id || batch.sequence != sequence)
            break;
        const size_t end = at + kDeltaBatchHeaderBytes + batch.entry_count * sizeof(DeltaEntry);
        if (end > delta.size())
            break;
        header.covered_lsn = batch.covered_lsn;
        header.init_lsn = batch.init_lsn;
        header.timeline = batch.timeline;
        header.flags = batch.flags;
        at = end;
    }
    return header;
}

void write_map(const std::string& pgdata, MapFileHeader header, uint64_t map_mb)
{
    const MapGeometry geometry = MapGeometry::for_bytes(map_mb * 1024 * 1024, kRelsegSize);
    if (!geometry.valid())
        fail("no valid geometry for", std::to_string(map_mb) + " MB");
    void* region = std::aligned_alloc(kLineBytes, (geometry.region_bytes() + kLineBytes - 1) / kLineBytes * kLineBytes);
    if (region == nullptr)
        fail("out of memory for", "the map");
    Map map(region, geometry);
    map.clear();
    unsigned long long spc, db, rel, fork, block, lsn;
    while (std::scanf("%llu %llu %llu %llu %llu %llu", &spc, &db, &rel, &fork, &block, &lsn) == 6)
        map.mark(RelFork{static_cast<uint32_t>(spc), static_cast<uint32_t>(db), static_cast<uint32_t>(rel),
                         static_cast<uint8_t>(fork)},
                 static_cast<BlockNumber>(block), lsn != 0 ? lsn : header.covered_lsn);
    header.geometry = geometry;
    header.chunk_bytes = kMapFileChunkBytes;
    header.placement = placement_fingerprint(geometry);
    header.base_id += 1; /* no delta applies to this file */
    const uint64_t chunks = map_file_chunk_count(geometry, header.chunk_bytes);
    std::vector<uint8_t> chunk(header.chunk_bytes);
    std::vector<uint32_t> crcs((map_file_data_offset(chunks) - kMapFileHeaderBytes) / sizeof(uint32_t));
    const std::string tmp = pgdata + "/" + kMapTempFileName;
    const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        fail("cannot create", tmp);
    FileSink sink(fd);
    if (map_file_write(map, header, ptrack_test::bitwise_crc32c, chunk.data(), crcs.data(), sink) == 0 ||
        fsync(fd) != 0 || close(fd) != 0)
        fail("cannot write", tmp);
    if (rename(tmp.c_str(), (pgdata + "/" + kMapFileName).c_str()) != 0)
        fail("cannot rename", tmp);
    std::free(region);
}

void write_limits(const std::string& pgdata, const MapFileHeader& header)
{
    void* region = std::aligned_alloc(kLineBytes, LimitTable::bytes(kDefaultLimitBuckets));
    LimitTable table(region, kDefaultLimitBuckets);
    table.clear();
    std::vector<uint8_t> out(limit_file_max_bytes(kDefaultLimitBuckets));
    const size_t bytes = limit_file_encode(table, header.system_identifier, header.server_major, header.covered_lsn,
                                           ptrack_test::bitwise_crc32c, out.data());
    const std::string path = pgdata + "/" + kLimitFileName;
    FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr || bytes == 0 || std::fwrite(out.data(), 1, bytes, f) != bytes || std::fclose(f) != 0)
        fail("cannot write", path);
    std::free(region);
}

}  // namespace

int main(int argc, char** argv)
{
    if (argc != 3) {
        std::fprintf(stderr, "usage: old_version_map PGDATA MAP_MB < marks\n");
        return 2;
    }
    const std::string pgdata = argv[1];
    const MapFileHeader header = last_save(pgdata);
    write_map(pgdata, header, std::strtoull(argv[2], nullptr, 10));
    write_limits(pgdata, header);
    if (unlink((pgdata + "/" + kMapDeltaFileName).c_str()) != 0 && errno != ENOENT)
        fail("cannot remove", pgdata + "/" + kMapDeltaFileName);
    std::printf("%llx\n", static_cast<unsigned long long>(header.covered_lsn));
    return 0;
}
