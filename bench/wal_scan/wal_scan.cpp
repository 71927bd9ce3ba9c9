/*
 * wal_scan.cpp -- the cost floor of a WAL reader that parses records where
 * they lie, against the cost of reading the same WAL through xlogreader.
 *
 * Why it exists: the WAL follower and PostgreSQL's WAL summarizer both read
 * through xlogreader, which copies every page out of the file (pread), then
 * every record into its decode buffer, and checks each record's CRC-32C.
 * Those steps touch every byte of the WAL two or three times and cost the
 * two processes the same; on bulk loads they are most of what either
 * spends (bench/RESULTS.md, "The follower against PostgreSQL's WAL
 * summarizer").  This program measures what reading costs when the record
 * headers and block references are parsed in the page they lie in and only
 * the CRC touches the payload: the floor of a follower that had a reader of
 * its own.  It is a measuring tool, not part of ptrack.
 *
 * What it does: reads the segment files of one timeline in a pg_wal
 * directory, from the first record that begins in the first file to the end
 * of valid WAL, and for every record
 *   - checks each page header (magic, flags, page address, a continuation's
 *     remaining length) as xlogreader's XLogReaderValidatePageHeader() does,
 *   - checks xl_prev and the record's CRC-32C (over the body, then the
 *     header up to xl_crc, as access/xlogrecord.h says),
 *   - parses the block headers (access/xlogrecord.h: block reference ids,
 *     image headers, the relation locator or BKPBLOCK_SAME_REL, the block
 *     number, the data headers) and checks that their lengths add up to the
 *     record's total length,
 *   - after an XLOG_SWITCH record, goes on at the next segment.
 * Only the first 1 KB of a record's body (the longest block-header area is
 * under 1 KB: 33 references of at most 27 bytes, plus the data headers) is
 * copied, and only when it crosses a page.  Every block reference found is
 * counted and hashed into a digest that does not depend on their order, so
 * that the result can be compared with pg_waldump's list of the same WAL
 * (run.sh does): the two must agree exactly.
 *
 * Usage: wal_scan [--read pread|mmap] [--chunk KB] [--passes N] PG_WAL_DIR
 *        wal_scan --follow START_LSN STOP_FILE PG_WAL_DIR
 *        wal_scan --waldump-digest FILE   (FILE: pg_waldump's output)
 *   --read    pread: each segment in --chunk KB reads (default 128) into
 *             one buffer; mmap: each segment mapped, read in place
 *   --passes  scans of the whole WAL (default 5); the CPU time reported is
 *             their median (user + system, getrusage), per MB of WAL
 *   --follow  reads the WAL while a server writes it, mapped, from
 *             START_LSN (a record boundary), sleeping 200 ms at its end as
 *             the follower does, until it has read up to the LSN that
 *             another process writes into STOP_FILE; its whole CPU time per
 *             MB read is reported (bench/vs_summarizer.sh --wal-scan)
 * Output: one line "records R blockrefs B digest D bytes N" and one line
 * "cpu_ms_per_mb X (median of P passes; all: ...)".  Exit 1 on a malformed
 * record before the end of valid WAL, with its LSN.
 *
 * Built against one server's headers (run.sh): the layouts and
 * XLOG_PAGE_MAGIC are that version's.
 */
extern "C" {
#include "postgres_fe.h"

#include "access/rmgr.h"
#include "access/xlog_internal.h"
#include "access/xlogrecord.h"
#include "catalog/pg_control.h"
#include "port/pg_crc32c.h"
}

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ptrack/hash.h"

/* PostgreSQL 16's limit on a record's length (access/xlogrecord.h); 15 has no such constant. */
#ifndef XLogRecordMaxSize
#define XLogRecordMaxSize (1020 * 1024 * 1024)
#endif

namespace {

constexpr uint32_t kPage = XLOG_BLCKSZ;
constexpr uint32_t kAreaCap = 1024; /* bytes of a body parsed for block headers, at most */

[[noreturn]] void fail(const char* what, uint64_t lsn)
{
    std::fprintf(stderr, "wal_scan: %s at %X/%08X\n", what, static_cast<unsigned>(lsn >> 32),
                 static_cast<unsigned>(lsn));
    std::exit(1);
}

template <typename T>
T load(const unsigned char* p)
{
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

/* One block reference's identity hashed with the engine's hashes (ptrack/hash.h). */
uint64_t blockref_hash(uint32_t spc, uint32_t db, uint32_t rel, uint32_t fork, uint32_t blk)
{
    return ptrack::mix64(ptrack::hash_rel(ptrack::RelFork{spc, db, rel, static_cast<uint8_t>(fork)}) ^ blk);
}

struct Result {
    uint64_t records = 0;
    uint64_t blockrefs = 0;
    uint64_t digest = 0;
    uint64_t bytes = 0; /* WAL bytes from the first record to the end of the last */
};

/*
 * The record reader: fed the data part of each page in LSN order, it
 * assembles nothing but a record's 24-byte header and the start of its body.
 */
class Scanner {
public:
    explicit Scanner(Result* out, uint64_t start_lsn = 0) : out_(out), start_lsn_(start_lsn) {}

    /*
     * One page at `page_lsn`, its bytes up to `end` (a record's end when less
     * than the page); returns false at the end of valid WAL.
     */
    bool page(const unsigned char* p, uint64_t page_lsn, uint32_t seg_size, uint32_t end = kPage)
    {
        if (skip_to_segment_ > page_lsn)
            return true; /* the rest of a segment after XLOG_SWITCH */
        const uint16_t magic = load<uint16_t>(p + offsetof(XLogPageHeaderData, xlp_magic));
        const uint16_t info = load<uint16_t>(p + offsetof(XLogPageHeaderData, xlp_info));
        const uint64_t addr = load<uint64_t>(p + offsetof(XLogPageHeaderData, xlp_pageaddr));
        const uint32_t rem = load<uint32_t>(p + offsetof(XLogPageHeaderData, xlp_rem_len));
        if (magic != XLOG_PAGE_MAGIC || addr != page_lsn || (info & ~XLP_ALL_FLAGS) != 0)
            return false; /* a recycled or never written page: the end of valid WAL */
        const bool seg_start = page_lsn % seg_size == 0;
        if (seg_start != ((info & XLP_LONG_HEADER) != 0))
            fail("long page header where none belongs, or none at a segment's start", page_lsn);
        uint32_t off = seg_start ? SizeOfXLogLongPHD : SizeOfXLogShortPHD;

        if (!started_ && start_lsn_ != 0) {
            /* --follow: the first record begins at start_lsn_, a record boundary on this page. */
            if (start_lsn_ % kPage != 0)
                off = static_cast<uint32_t>(start_lsn_ % kPage);
            started_ = true;
        } else if (!started_) {
            /* The first record that begins here: skip a continuation first. */
            if (info & XLP_FIRST_IS_CONTRECORD) {
                if (rem >= kPage - off)
                    return true; /* the continued record covers this page */
                off = MAXALIGN(off + rem);
            }
            started_ = true;
        } else if (phase_ == Phase::kBody || header_got_ != 0) {
            /* A record crosses into this page: xlp_rem_len counts what is left of it. */
            if (!(info & XLP_FIRST_IS_CONTRECORD))
                fail("record continues on a page without XLP_FIRST_IS_CONTRECORD", page_lsn);
            const uint32_t left = phase_ == Phase::kBody ? body_left_ : header_tot_len() - header_got_;
            if (rem != left)
                fail("xlp_rem_len disagrees with the record's remaining length", page_lsn);
        } else if (info & XLP_FIRST_IS_CONTRECORD) {
            fail("XLP_FIRST_IS_CONTRECORD on a page where a record begins", page_lsn);
        }

        while (off < end) {
            if (phase_ == Phase::kHeader) {
                if (header_got_ == 0) {
                    off = MAXALIGN(off);
                    if (off >= end)
                        break;
                    rec_lsn_ = page_lsn + off;
                }
                /* Records begin MAXALIGNed and pages end so: a split header has 8 or 16 bytes here. */
                const uint32_t n = std::min<uint32_t>(SizeOfXLogRecord - header_got_, kPage - off);
                std::memcpy(header_ + header_got_, p + off, n);
                header_got_ += n;
                off += n;
                if (header_got_ < SizeOfXLogRecord)
                    break;
                if (!begin_record())
                    return false;
            } else {
                const uint32_t n = std::min<uint32_t>(body_left_, kPage - off);
                body(p + off, n);
                off += n;
            }
            if (phase_ == Phase::kBody && body_left_ == 0 && !end_record(page_lsn + off, seg_size))
                return true; /* XLOG_SWITCH: the rest of this segment holds no record */
        }
        return true;
    }

private:
    enum class Phase { kHeader, kBody };

    uint32_t header_tot_len() const { return load<uint32_t>(header_ + offsetof(XLogRecord, xl_tot_len)); }

    bool begin_record()
    {
        const uint32_t tot_len = header_tot_len();
        if (tot_len == 0)
            return false; /* zeroes: the end of WAL */
        if (tot_len < SizeOfXLogRecord || tot_len > XLogRecordMaxSize)
            fail("invalid record length", rec_lsn_);
        const uint64_t prev = load<uint64_t>(header_ + offsetof(XLogRecord, xl_prev));
        if (prev_lsn_ != 0 && prev != prev_lsn_)
            fail("xl_prev does not point to the previous record", rec_lsn_);
        body_len_ = tot_len - SizeOfXLogRecord;
        body_left_ = body_len_;
        area_len_ = 0;
        INIT_CRC32C(crc_);
        phase_ = Phase::kBody;
        if (body_len_ == 0)
            parse_headers(area_, 0);
        return true;
    }

    void body(const unsigned char* p, uint32_t n)
    {
        COMP_CRC32C(crc_, p, n);
        const uint32_t want = std::min(body_len_, kAreaCap);
        if (area_len_ < want) {
            if (area_len_ == 0 && n >= want) {
                parse_headers(p, want); /* in place: the common case */
                area_len_ = want;
            } else {
                const uint32_t take = std::min(want - area_len_, n);
                std::memcpy(area_ + area_len_, p, take);
                area_len_ += take;
                if (area_len_ == want)
                    parse_headers(area_, want);
            }
        }
        body_left_ -= n;
    }

    /* The record that ends at `end` is read: its CRC checked, its references counted.  False after XLOG_SWITCH. */
    bool end_record(uint64_t end, uint32_t seg_size)
    {
        COMP_CRC32C(crc_, header_, offsetof(XLogRecord, xl_crc));
        FIN_CRC32C(crc_);
        if (!EQ_CRC32C(crc_, load<uint32_t>(header_ + offsetof(XLogRecord, xl_crc))))
            fail("incorrect resource manager data checksum", rec_lsn_);
        for (uint32_t i = 0; i < nrefs_; ++i)
            out_->digest += refs_[i];
        out_->blockrefs += nrefs_;
        if (out_->records++ == 0)
            first_lsn_ = rec_lsn_;
        out_->bytes = end - first_lsn_;
        prev_lsn_ = rec_lsn_;
        phase_ = Phase::kHeader;
        header_got_ = 0;
        const uint8_t rmid = header_[offsetof(XLogRecord, xl_rmid)];
        const uint8_t info = header_[offsetof(XLogRecord, xl_info)];
        if (rmid == RM_XLOG_ID && (info & ~XLR_INFO_MASK) == XLOG_SWITCH) {
            skip_to_segment_ = ((end - 1) / seg_size + 1) * static_cast<uint64_t>(seg_size);
            return false;
        }
        return true;
    }

    /* The block headers of a body's first `len` bytes (access/xlogrecord.h's layout). */
    void parse_headers(const unsigned char* a, uint32_t len)
    {
        nrefs_ = 0;
        uint32_t at = 0;
        uint64_t data_total = 0;
        uint32_t spc = 0, db = 0, rel = 0;
        bool have_rel = false;
        auto need = [&](uint32_t n) {
            if (at + n > len)
                fail("block headers longer than the record", rec_lsn_);
        };
        while (body_len_ - at > data_total) {
            need(1);
            const uint8_t id = a[at];
            if (id == XLR_BLOCK_ID_DATA_SHORT) {
                need(2);
                data_total += a[at + 1];
                at += 2;
                break; /* the main data's header is the last */
            }
            if (id == XLR_BLOCK_ID_DATA_LONG) {
                need(5);
                data_total += load<uint32_t>(a + at + 1);
                at += 5;
                break;
            }
            if (id == XLR_BLOCK_ID_ORIGIN) {
                need(3);
                at += 3;
                continue;
            }
            if (id == XLR_BLOCK_ID_TOPLEVEL_XID) {
                need(5);
                at += 5;
                continue;
            }
            if (id > XLR_MAX_BLOCK_ID)
                fail("invalid block_id", rec_lsn_);
            need(SizeOfXLogRecordBlockHeader);
            const uint8_t fork_flags = a[at + 1];
            const uint16_t data_length = load<uint16_t>(a + at + 2);
            at += SizeOfXLogRecordBlockHeader;
            if (fork_flags & BKPBLOCK_HAS_DATA)
                data_total += data_length;
            else if (data_length != 0)
                fail("BKPBLOCK_HAS_DATA not set, but data length is not 0", rec_lsn_);
            if (fork_flags & BKPBLOCK_HAS_IMAGE) {
                need(SizeOfXLogRecordBlockImageHeader);
                const uint16_t bimg_len = load<uint16_t>(a + at);
                const uint8_t bimg_info = a[at + 4];
                at += SizeOfXLogRecordBlockImageHeader;
                if ((bimg_info & BKPIMAGE_HAS_HOLE) && BKPIMAGE_COMPRESSED(bimg_info)) {
                    need(SizeOfXLogRecordBlockCompressHeader);
                    at += SizeOfXLogRecordBlockCompressHeader;
                }
                data_total += bimg_len;
            }
            if (!(fork_flags & BKPBLOCK_SAME_REL)) {
                need(12);
                spc = load<uint32_t>(a + at);
                db = load<uint32_t>(a + at + 4);
                rel = load<uint32_t>(a + at + 8);
                at += 12;
                have_rel = true;
            } else if (!have_rel) {
                fail("BKPBLOCK_SAME_REL set but no previous rel", rec_lsn_);
            }
            need(4);
            const uint32_t blk = load<uint32_t>(a + at);
            at += 4;
            refs_[nrefs_++] = blockref_hash(spc, db, rel, fork_flags & BKPBLOCK_FORK_MASK, blk);
        }
        if (at + data_total != body_len_)
            fail("block header and data lengths do not add up to the record's length", rec_lsn_);
    }

    Result* out_;
    uint64_t start_lsn_;
    bool started_ = false;
    Phase phase_ = Phase::kHeader;
    unsigned char header_[SizeOfXLogRecord];
    uint32_t header_got_ = 0;
    unsigned char area_[kAreaCap];
    uint32_t area_len_ = 0;
    uint32_t body_len_ = 0, body_left_ = 0;
    pg_crc32c crc_ = 0;
    uint64_t refs_[XLR_MAX_BLOCK_ID + 1];
    uint32_t nrefs_ = 0;
    uint64_t rec_lsn_ = 0, prev_lsn_ = 0, first_lsn_ = 0;
    uint64_t skip_to_segment_ = 0;
};

double cpu_seconds()
{
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

struct Options {
    bool use_mmap = false;
    uint32_t chunk = 128 * 1024;
    int passes = 5;
    std::string dir;
    uint64_t follow_from = 0; /* --follow LSN */
    std::string stop_file;
};

/* One scan of every segment file of the first file's timeline, in name order. */
Result scan(const Options& o, const std::vector<std::string>& files, uint32_t seg_size)
{
    Result r;
    Scanner s(&r);
    std::vector<unsigned char> buf(o.use_mmap ? 0 : o.chunk);
    for (const std::string& name : files) {
        unsigned tli, log, seg;
        if (std::sscanf(name.c_str(), "%08X%08X%08X", &tli, &log, &seg) != 3)
            continue;
        const uint64_t seg_lsn = (static_cast<uint64_t>(log) << 32) + static_cast<uint64_t>(seg) * seg_size;
        const std::string path = o.dir + "/" + name;
        const int fd = open(path.c_str(), O_RDONLY);
        if (fd < 0)
            fail(("cannot open " + path).c_str(), seg_lsn);
        bool more = true;
        if (o.use_mmap) {
            void* m = mmap(nullptr, seg_size, PROT_READ, MAP_SHARED, fd, 0);
            if (m == MAP_FAILED)
                fail(("cannot map " + path).c_str(), seg_lsn);
            const auto* base = static_cast<const unsigned char*>(m);
            for (uint32_t off = 0; more && off < seg_size; off += kPage)
                more = s.page(base + off, seg_lsn + off, seg_size);
            munmap(m, seg_size);
        } else {
            for (uint32_t off = 0; more && off < seg_size; off += o.chunk) {
                const ssize_t got = pread(fd, buf.data(), o.chunk, off);
                if (got != static_cast<ssize_t>(o.chunk))
                    fail(("short read of " + path).c_str(), seg_lsn + off);
                for (uint32_t p = 0; more && p < o.chunk; p += kPage)
                    more = s.page(buf.data() + p, seg_lsn + off + p, seg_size);
            }
        }
        close(fd);
        if (!more)
            break;
    }
    return r;
}

/* True if the page at `p` is a written WAL page of `page_lsn` (its header says so). */
bool page_written(const unsigned char* p, uint64_t page_lsn)
{
    return load<uint16_t>(p + offsetof(XLogPageHeaderData, xlp_magic)) == XLOG_PAGE_MAGIC &&
           load<uint64_t>(p + offsetof(XLogPageHeaderData, xlp_pageaddr)) == page_lsn;
}

std::string segment_path(const std::string& dir, unsigned tli, uint64_t lsn, uint32_t seg_size)
{
    char name[32];
    const uint64_t segno = lsn / seg_size;
    const uint64_t per_id = UINT64CONST(0x100000000) / seg_size;
    std::snprintf(name, sizeof name, "%08X%08X%08X", tli, static_cast<unsigned>(segno / per_id),
                  static_cast<unsigned>(segno % per_id));
    return dir + "/" + name;
}

/* The stop LSN an outside process wrote into `path` ("X/Y"), or 0 while there is none. */
uint64_t read_stop_lsn(const std::string& path)
{
    FILE* f = std::fopen(path.c_str(), "r");
    if (f == nullptr)
        return 0;
    unsigned hi = 0, lo = 0;
    const int n = std::fscanf(f, "%X/%X", &hi, &lo);
    std::fclose(f);
    return n == 2 ? (static_cast<uint64_t>(hi) << 32) | lo : 0;
}

/*
 * --follow: reads the WAL as it is written, the way a follower does, from
 * `start` (a record boundary, such as pg_current_wal_lsn()), sleeping 200 ms
 * whenever it is at the end; stops once it has read the records up to the LSN
 * written into `stop_file` (a record's end that the server has flushed).  A
 * page is read once the page after it is written: the server writes WAL in
 * order, so that page is complete.
 */
Result follow(const std::string& dir, unsigned tli, uint32_t seg_size, uint64_t start, const std::string& stop_file)
{
    Result r;
    Scanner s(&r, start);
    uint64_t page_lsn = start - start % kPage;
    uint64_t stop = 0;
    const unsigned char* map = nullptr;
    uint64_t map_seg = UINT64_MAX;
    auto map_segment = [&](uint64_t lsn) -> const unsigned char* {
        const std::string path = segment_path(dir, tli, lsn, seg_size);
        const int fd = open(path.c_str(), O_RDONLY);
        if (fd < 0)
            return nullptr;
        void* m = mmap(nullptr, seg_size, PROT_READ, MAP_SHARED, fd, 0);
        close(fd);
        return m == MAP_FAILED ? nullptr : static_cast<const unsigned char*>(m);
    };
    for (;;) {
        if (page_lsn / seg_size != map_seg) {
            const unsigned char* m = map_segment(page_lsn);
            if (m == nullptr) {
                usleep(200 * 1000);
                continue;
            }
            if (map != nullptr)
                munmap(const_cast<unsigned char*>(map), seg_size);
            map = m;
            map_seg = page_lsn / seg_size;
        }
        const uint64_t next = page_lsn + kPage;
        bool next_written;
        if (next % seg_size != 0) {
            next_written = page_written(map + next % seg_size, next);
        } else {
            unsigned char header[SizeOfXLogLongPHD];
            const int fd = open(segment_path(dir, tli, next, seg_size).c_str(), O_RDONLY);
            next_written = fd >= 0 && pread(fd, header, sizeof header, 0) == static_cast<ssize_t>(sizeof header) &&
                           page_written(header, next);
            if (fd >= 0)
                close(fd);
        }
        if (!next_written) {
            if (stop == 0)
                stop = read_stop_lsn(stop_file);
            if (stop != 0 && stop < next) {
                /* The last page: its records up to the stop LSN, which the server has flushed. */
                if (stop > page_lsn && !s.page(map + page_lsn % seg_size, page_lsn, seg_size,
                                               static_cast<uint32_t>(stop - page_lsn)))
                    fail("the WAL ends before the stop LSN", page_lsn);
                break;
            }
            usleep(200 * 1000);
            continue;
        }
        if (!s.page(map + page_lsn % seg_size, page_lsn, seg_size))
            fail("a written page ends the WAL", page_lsn);
        page_lsn = next;
    }
    if (map != nullptr)
        munmap(const_cast<unsigned char*>(map), seg_size);
    return r;
}

}  // namespace

/*
 * The digest of the block references pg_waldump printed ("blkref #N: rel
 * S/D/R [fork F] blk B" in each record's line), for the comparison.
 */
int waldump_digest(const char* path)
{
    FILE* f = std::fopen(path, "r");
    if (f == nullptr) {
        std::perror(path);
        return 2;
    }
    Result r;
    char line[65536];
    while (std::fgets(line, sizeof line, f) != nullptr) {
        if (std::strncmp(line, "rmgr:", 5) != 0)
            continue;
        ++r.records;
        for (const char* p = std::strstr(line, "blkref #"); p != nullptr; p = std::strstr(p + 1, "blkref #")) {
            unsigned spc, db, rel, blk;
            int used = 0;
            const char* q = std::strstr(p, ": rel ");
            if (q == nullptr || std::sscanf(q, ": rel %u/%u/%u%n", &spc, &db, &rel, &used) != 3) {
                std::fprintf(stderr, "wal_scan: cannot read \"%.60s\"\n", p);
                return 1;
            }
            q += used;
            unsigned fork = MAIN_FORKNUM;
            char name[16];
            if (std::sscanf(q, " fork %15s%n", name, &used) == 1) {
                const char* const names[] = {"main", "fsm", "vm", "init"};
                fork = 99;
                for (unsigned i = 0; i < 4; ++i)
                    if (std::strcmp(name, names[i]) == 0)
                        fork = i;
                q += used;
            }
            if (fork == 99 || std::sscanf(q, " blk %u", &blk) != 1) {
                std::fprintf(stderr, "wal_scan: cannot read \"%.60s\"\n", p);
                return 1;
            }
            r.digest += blockref_hash(spc, db, rel, fork, blk);
            ++r.blockrefs;
        }
    }
    std::fclose(f);
    std::printf("records %llu blockrefs %llu digest %016llx\n", static_cast<unsigned long long>(r.records),
                static_cast<unsigned long long>(r.blockrefs), static_cast<unsigned long long>(r.digest));
    return 0;
}

int main(int argc, char** argv)
{
    if (argc == 3 && std::strcmp(argv[1], "--waldump-digest") == 0)
        return waldump_digest(argv[2]);
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--read" && i + 1 < argc)
            o.use_mmap = std::string(argv[++i]) == "mmap";
        else if (a == "--chunk" && i + 1 < argc)
            o.chunk = static_cast<uint32_t>(std::atoi(argv[++i])) * 1024;
        else if (a == "--passes" && i + 1 < argc)
            o.passes = std::atoi(argv[++i]);
        else if (a == "--follow" && i + 2 < argc) {
            unsigned hi, lo;
            if (std::sscanf(argv[++i], "%X/%X", &hi, &lo) != 2) {
                std::fprintf(stderr, "wal_scan: --follow wants an LSN such as 0/1A000028\n");
                return 2;
            }
            o.follow_from = (static_cast<uint64_t>(hi) << 32) | lo;
            o.stop_file = argv[++i];
        }
        else if (a[0] != '-')
            o.dir = a;
        else {
            std::fprintf(stderr, "usage: wal_scan [--read pread|mmap] [--chunk KB] [--passes N] PG_WAL_DIR\n"
                                 "       wal_scan --follow START_LSN STOP_FILE PG_WAL_DIR\n");
            return 2;
        }
    }
    if (o.dir.empty() || o.chunk == 0 || o.chunk % kPage != 0 || o.passes < 1) {
        std::fprintf(stderr, "wal_scan: a pg_wal directory is needed; --chunk a multiple of %u KB; --passes >= 1\n",
                     kPage / 1024);
        return 2;
    }
    std::vector<std::string> files;
    if (DIR* d = opendir(o.dir.c_str())) {
        while (dirent* e = readdir(d))
            if (std::strlen(e->d_name) == 24 && std::strspn(e->d_name, "0123456789ABCDEF") == 24)
                files.emplace_back(e->d_name);
        closedir(d);
    }
    std::sort(files.begin(), files.end());
    if (files.empty()) {
        std::fprintf(stderr, "wal_scan: no WAL segment files in %s\n", o.dir.c_str());
        return 2;
    }
    /* One timeline: the first file's. */
    const std::string tli = files.front().substr(0, 8);
    files.erase(std::remove_if(files.begin(), files.end(), [&](const std::string& f) { return f.compare(0, 8, tli) != 0; }),
                files.end());
    struct stat st{};
    if (stat((o.dir + "/" + files.front()).c_str(), &st) != 0 || !IsValidWalSegSize(st.st_size)) {
        std::fprintf(stderr, "wal_scan: %s is not a WAL segment file\n", files.front().c_str());
        return 2;
    }
    const auto seg_size = static_cast<uint32_t>(st.st_size);
    if (o.follow_from != 0) {
        const double t0 = cpu_seconds();
        const Result r = follow(o.dir, static_cast<unsigned>(std::stoul(tli, nullptr, 16)), seg_size, o.follow_from,
                                o.stop_file);
        const double t = cpu_seconds() - t0;
        std::printf("records %llu blockrefs %llu digest %016llx bytes %llu\n",
                    static_cast<unsigned long long>(r.records), static_cast<unsigned long long>(r.blockrefs),
                    static_cast<unsigned long long>(r.digest), static_cast<unsigned long long>(r.bytes));
        std::printf("cpu_ms_per_mb %.4f (cpu %.1f ms, following)\n", t * 1000 / (r.bytes / 1048576.0), t * 1000);
        return 0;
    }

    Result r;
    std::vector<double> times;
    for (int pass = 0; pass < o.passes; ++pass) {
        const double t0 = cpu_seconds();
        r = scan(o, files, seg_size);
        times.push_back(cpu_seconds() - t0);
    }
    std::printf("records %llu blockrefs %llu digest %016llx bytes %llu\n", static_cast<unsigned long long>(r.records),
                static_cast<unsigned long long>(r.blockrefs), static_cast<unsigned long long>(r.digest),
                static_cast<unsigned long long>(r.bytes));
    const double mb = r.bytes / 1048576.0;
    std::vector<double> sorted = times;
    std::sort(sorted.begin(), sorted.end());
    std::printf("cpu_ms_per_mb %.4f (median of %d passes; all:", sorted[sorted.size() / 2] * 1000 / mb, o.passes);
    for (double t : times)
        std::printf(" %.4f", t * 1000 / mb);
    std::printf(")\n");
    return 0;
}
