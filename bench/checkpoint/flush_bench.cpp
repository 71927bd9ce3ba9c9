/*
 * flush_bench.cpp -- the I/O of ptrack's map flush at the end of a
 * checkpoint, outside the server, for map sizes and amounts of change that a
 * test server cannot reach (bench/checkpoint_cost.sh runs it).
 *
 * It links the engine (every .cpp file of src/engine/) and calls the same
 * functions as src/pg/persist/map_save.cpp does in flush_map()
 * (ptrack/map_flush.h), with a sink that times its pwrite() calls; around
 * them, the file handling of map_save.cpp with plain POSIX calls:
 *
 *   full   write_full_map(): ptrack.map.tmp opened O_RDWR|O_CREAT|O_TRUNC;
 *          map_file_write() (per 64 KB chunk, a slot-by-slot copy with
 *          atomic loads into a chunk buffer, its CRC-32C, a pwrite at its
 *          place; then the chunk CRC table, the 512-byte header); fsync,
 *          close; durable_rename() as PostgreSQL does it (fsync the old name,
 *          fsync the existing target, rename, fsync the new name, fsync the
 *          directory); then the delta file is removed.
 *   delta  append_delta(): ptrack.map.delta opened O_WRONLY|O_CREAT (and
 *          O_TRUNC for the first batch after a full flush);
 *          delta_write_batch() (delta_collect() from the threshold into a
 *          64 Ki-entry buffer, CRC-32C of the entries, pwrite, until the
 *          region is scanned; the 64-byte batch header at the batch's
 *          start); fsync; close; for the first batch, fsync of the directory.
 *
 * Not reproduced: flush_map()'s wait for marks in progress before the copy
 * (wait_for_marks_in_progress(), src/pg/capture/capture.h): nothing marks the map
 * here, and in a server the wait lasts as long as the slowest mark in flight.
 *
 * CRC-32C is computed with the SSE4.2 crc32 instruction, 8 bytes at a time,
 * as PostgreSQL's pg_comp_crc32c_sse42() does on this hardware (build with
 * -msse4.2).  The times cover the whole flush, as the server's log line
 * "ptrack map flush: ..." does, and are also split into phases: cpu (copy
 * or collect, and CRC), write (pwrite calls) and sync (fsync, close, rename,
 * directory fsyncs).
 *
 * The map: the region of MapGeometry::for_bytes(size, RELSEG_SIZE), in an
 * anonymous shared mapping like PostgreSQL's main segment, pre-faulted.  A
 * fraction of its 8-byte words, picked at random with a fixed seed, holds an
 * LSN at or above the threshold (changed since the previous flush); the
 * other words hold an older LSN.  Only the count of changed words matters to
 * the delta; the full flush does not depend on the contents.
 *
 * Usage: flush_bench DIR MAP_MB FRACTION REPS [CHUNK_BYTES]
 *   DIR          directory to write ptrack.map* into (emptied of them at the end)
 *   MAP_MB       map size in MB (ptrack.map_size)
 *   FRACTION     fraction of the region's words changed, e.g. 0.01
 *   REPS         repetitions; each makes one full and one delta flush
 *   CHUNK_BYTES  CRC chunk of the full flush (default kMapFileChunkBytes, 64 KB;
 *                another value measures the choice of that constant)
 * Output: one "rep" line per repetition and flush kind, then a "median"
 * line per kind, as key=value pairs.
 */
#include <fcntl.h>
#include "../crc32c_sse42.h"
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ptrack/map.h"
#include "ptrack/map_delta.h"
#include "ptrack/map_file.h"
#include "ptrack/map_flush.h"

namespace {

using Clock = std::chrono::steady_clock;
using ptrack::DeltaEntry;
using ptrack::Lsn;
using ptrack::Map;
using ptrack::MapGeometry;

constexpr uint32_t kRelsegSize = 131072; /* RELSEG_SIZE with 8 KB blocks, 1 GB segments */
constexpr size_t kDeltaBufferEntries = 64 * 1024; /* as src/pg/persist/map_save.cpp */

/* The engine's CRC-32C callbacks (bench/crc32c_sse42.h). */
constexpr auto crc32c = crc32c_sse42;
constexpr auto crc32c_continue = crc32c_sse42_update;

[[noreturn]] void fail(const char* what, const std::string& path)
{
    std::fprintf(stderr, "flush_bench: %s \"%s\": %s\n", what, path.c_str(), std::strerror(errno));
    std::exit(1);
}

void write_at(int fd, const void* buf, size_t len, uint64_t offset, const std::string& path)
{
    const auto* p = static_cast<const char*>(buf);
    while (len > 0) {
        const ssize_t n = pwrite(fd, p, len, static_cast<off_t>(offset));
        if (n <= 0)
            fail("cannot write", path);
        p += n;
        len -= static_cast<size_t>(n);
        offset += static_cast<uint64_t>(n);
    }
}

/* PostgreSQL's fsync_fname(): open read-only (directories) or read-write, fsync, close. */
void fsync_name(const std::string& path, bool is_dir)
{
    const int fd = open(path.c_str(), is_dir ? O_RDONLY : O_RDWR);
    if (fd < 0)
        fail("cannot open", path);
    if (fsync(fd) != 0)
        fail("cannot fsync", path);
    close(fd);
}

/* PostgreSQL's durable_rename(). */
void durable_rename(const std::string& from, const std::string& to, const std::string& dir)
{
    fsync_name(from, false);
    const int fd = open(to.c_str(), O_RDWR);
    if (fd >= 0) {
        if (fsync(fd) != 0)
            fail("cannot fsync", to);
        close(fd);
    } else if (errno != ENOENT) {
        fail("cannot open", to);
    }
    if (rename(from.c_str(), to.c_str()) != 0)
        fail("cannot rename", from);
    fsync_name(to, false);
    fsync_name(dir, true);
}

struct Phases {
    double cpu_ms = 0, write_ms = 0, sync_ms = 0, total_ms = 0;
    uint64_t bytes = 0;
    uint64_t entries = 0;
};

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

/* The engine's writes: pwrite() into one file, timed; a failed write ends the bench. */
class TimedSink final : public ptrack::FlushSink {
public:
    TimedSink(int fd, const std::string& path) : fd_(fd), path_(path) {}
    bool write(const void* data, size_t len, uint64_t offset) noexcept override
    {
        const auto t = Clock::now();
        write_at(fd_, data, len, offset, path_);
        write_ms += ms_since(t);
        return true;
    }
    double write_ms = 0;

private:
    int fd_;
    const std::string& path_;
};

ptrack::MapFileHeader flush_header(const MapGeometry& geometry, Lsn redo)
{
    ptrack::MapFileHeader h{};
    h.version = ptrack::kMapFileVersion;
    h.system_identifier = 0x70747261636b;
    h.data_checksum_version = 0;
    h.geometry = geometry;
    h.chunk_bytes = ptrack::kMapFileChunkBytes;
    h.flags = ptrack::kFlagFullPageWrites | ptrack::kFlagWalLevelReplica;
    h.init_lsn = 1;
    h.covered_lsn = redo;
    h.timeline = 1;
    h.base_id = static_cast<uint64_t>(Clock::now().time_since_epoch().count());
    return h;
}

/* write_full_map() + the delta file removal of flush_map(). */
Phases full_flush(const Map& map, const std::string& dir, uint32_t chunk_bytes, uint8_t* chunk_buffer, uint32_t* crcs)
{
    Phases ph;
    const auto start = Clock::now();
    const std::string tmp = dir + "/" + ptrack::kMapTempFileName;
    const std::string target = dir + "/" + ptrack::kMapFileName;
    ptrack::MapFileHeader header = flush_header(map.geometry(), 2);
    header.chunk_bytes = chunk_bytes;

    const int fd = open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        fail("cannot create", tmp);
    TimedSink sink(fd, tmp);
    auto t = Clock::now();
    ph.bytes = ptrack::map_file_write(map, header, crc32c, chunk_buffer, crcs, sink);
    ph.write_ms = sink.write_ms;
    ph.cpu_ms = ms_since(t) - sink.write_ms;
    t = Clock::now();
    if (fsync(fd) != 0)
        fail("cannot fsync", tmp);
    if (close(fd) != 0)
        fail("cannot close", tmp);
    durable_rename(tmp, target, dir);
    const std::string delta = dir + "/" + ptrack::kMapDeltaFileName;
    if (unlink(delta.c_str()) != 0 && errno != ENOENT)
        fail("cannot remove", delta);
    ph.sync_ms += ms_since(t);
    ph.total_ms = ms_since(start);
    return ph;
}

/* append_delta(), first batch after a full flush (O_TRUNC, directory fsync). */
Phases delta_flush(const Map& map, Lsn threshold, const std::string& dir, DeltaEntry* entries)
{
    Phases ph;
    const auto start = Clock::now();
    const std::string path = dir + "/" + ptrack::kMapDeltaFileName;
    const ptrack::MapFileHeader header = flush_header(map.geometry(), 3);
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        fail("cannot open", path);
    ptrack::DeltaBatchPlan plan{};
    plan.threshold = threshold;
    plan.base_id = header.base_id;
    plan.sequence = 1;
    plan.batch_offset = 0;
    /* Measured whatever its size; beyond delta_max_entries() the server writes the whole map instead. */
    plan.max_entries = ~uint64_t{0};
    plan.buffer = entries;
    plan.capacity = kDeltaBufferEntries;
    TimedSink sink(fd, path);
    bool too_big = false;
    auto t = Clock::now();
    ph.bytes = ptrack::delta_write_batch(map, header, plan, crc32c, crc32c_continue, sink, &too_big);
    ph.write_ms = sink.write_ms;
    ph.cpu_ms = ms_since(t) - sink.write_ms;
    t = Clock::now();
    if (fsync(fd) != 0)
        fail("cannot fsync", path);
    if (close(fd) != 0)
        fail("cannot close", path);
    fsync_name(dir, true);
    ph.sync_ms += ms_since(t);
    ph.total_ms = ms_since(start);
    ph.entries = (ph.bytes - ptrack::kDeltaBatchHeaderBytes) / sizeof(DeltaEntry);
    return ph;
}

double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void print_median(const char* kind, const std::vector<Phases>& runs, uint64_t map_mb, double fraction)
{
    std::vector<double> cpu, wr, sy, tot;
    for (const Phases& p : runs) {
        cpu.push_back(p.cpu_ms);
        wr.push_back(p.write_ms);
        sy.push_back(p.sync_ms);
        tot.push_back(p.total_ms);
    }
    std::printf("median kind=%s map_mb=%llu fraction=%g bytes=%llu entries=%llu ms=%.1f cpu_ms=%.1f write_ms=%.1f "
                "sync_ms=%.1f min_ms=%.1f max_ms=%.1f\n",
                kind, static_cast<unsigned long long>(map_mb), fraction,
                static_cast<unsigned long long>(runs[0].bytes), static_cast<unsigned long long>(runs[0].entries),
                median(tot), median(cpu), median(wr), median(sy), *std::min_element(tot.begin(), tot.end()),
                *std::max_element(tot.begin(), tot.end()));
}

}  // namespace

int main(int argc, char** argv)
{
    if (argc != 5 && argc != 6) {
        std::fprintf(stderr, "usage: flush_bench DIR MAP_MB FRACTION REPS [CHUNK_BYTES]\n");
        return 2;
    }
    const std::string dir = argv[1];
    const uint64_t map_mb = std::strtoull(argv[2], nullptr, 10);
    const double fraction = std::strtod(argv[3], nullptr);
    const int reps = std::atoi(argv[4]);
    const auto chunk_bytes =
        static_cast<uint32_t>(argc == 6 ? std::strtoul(argv[5], nullptr, 10) : ptrack::kMapFileChunkBytes);
    if (map_mb == 0 || fraction < 0 || fraction > 1 || reps < 1 || chunk_bytes == 0 ||
        chunk_bytes % ptrack::kLineBytes != 0) {
        std::fprintf(stderr, "flush_bench: bad arguments\n");
        return 2;
    }
    if (crc32c("123456789", 9) != 0xE3069283u) {
        std::fprintf(stderr, "flush_bench: CRC-32C self-test failed\n");
        return 1;
    }

    const MapGeometry geometry = MapGeometry::for_bytes(map_mb << 20, kRelsegSize);
    const uint64_t region_bytes = geometry.region_bytes();
    void* region = mmap(nullptr, region_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (region == MAP_FAILED)
        fail("cannot map", "region");
    const Map map(region, geometry);

    /* Words changed since the previous flush hold an LSN >= threshold; the others an older one. */
    const Lsn threshold = Lsn{0x100} << 32;
    const uint64_t words = ptrack::region_words(geometry);
    auto* w = reinterpret_cast<uint64_t*>(map.region());
    uint64_t state = 0x5eed;
    uint64_t changed = 0;
    const auto limit = static_cast<uint64_t>(fraction * 18446744073709551615.0);
    for (uint64_t i = 0; i < words; ++i) {
        uint64_t z = (state += 0x9e3779b97f4a7c15ULL); /* splitmix64 */
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        z ^= z >> 31;
        const bool is_changed = fraction >= 1.0 || z < limit;
        w[i] = is_changed ? threshold + ((i & 0xff) << 16) : (threshold >> 1) + ((i & 0xff) << 16);
        changed += is_changed;
    }

    const uint64_t chunks = ptrack::map_file_chunk_count(geometry, chunk_bytes);
    std::vector<uint8_t> chunk_buffer(chunk_bytes);
    std::vector<uint32_t> crcs((ptrack::map_file_data_offset(chunks) - ptrack::kMapFileHeaderBytes) / sizeof(uint32_t));
    std::vector<DeltaEntry> entries(kDeltaBufferEntries);

    std::printf("map map_mb=%llu region_bytes=%llu words=%llu changed_words=%llu file_bytes=%llu chunk_bytes=%u "
                "chunks=%llu\n",
                static_cast<unsigned long long>(map_mb), static_cast<unsigned long long>(region_bytes),
                static_cast<unsigned long long>(words), static_cast<unsigned long long>(changed),
                static_cast<unsigned long long>(ptrack::map_file_bytes(geometry, chunk_bytes)), chunk_bytes,
                static_cast<unsigned long long>(chunks));
    std::fflush(stdout);

    std::vector<Phases> fulls, deltas;
    for (int r = 1; r <= reps; ++r) {
        fulls.push_back(full_flush(map, dir, chunk_bytes, chunk_buffer.data(), crcs.data()));
        deltas.push_back(delta_flush(map, threshold, dir, entries.data()));
        for (const auto& [kind, p] : {std::pair<const char*, const Phases&>{"full", fulls.back()},
                                      std::pair<const char*, const Phases&>{"delta", deltas.back()}}) {
            std::printf("rep %d kind=%s bytes=%llu entries=%llu ms=%.1f cpu_ms=%.1f write_ms=%.1f sync_ms=%.1f\n", r,
                        kind, static_cast<unsigned long long>(p.bytes), static_cast<unsigned long long>(p.entries),
                        p.total_ms, p.cpu_ms, p.write_ms, p.sync_ms);
        }
        std::fflush(stdout);
    }
    print_median("full", fulls, map_mb, fraction);
    print_median("delta", deltas, map_mb, fraction);

    for (const char* name : {ptrack::kMapFileName, ptrack::kMapTempFileName, ptrack::kMapDeltaFileName})
        unlink((dir + "/" + name).c_str());
    munmap(region, region_bytes);
    return 0;
}
