/*
 * startup_scan.cpp -- the startup scan (startup_scan.h): the
 * postmaster reads pg_wal with xlogreader, before recovery, and marks in the
 * loaded map what every record after the map's covered LSN changed.
 *
 * Completeness.  Any page on disk carries an LSN no later than the WAL that
 * was durable when it was written (WAL before data, XLogFlush() in
 * bufmgr.c), and on a standby no later than pg_control's minRecoveryPoint
 * (UpdateMinRecoveryPoint() in xlog.c).  Reading the WAL of the map's
 * timeline from the covered LSN to its end therefore sees every record whose
 * change may be on disk without a mark; the records after that end are
 * replayed or written after this point, through the hooks.  The proof fails,
 * and the caller refuses the map, when the WAL ends before pg_control's
 * checkpoint record or minimum recovery point (a standby restoring from an
 * archive: its WAL is not in pg_wal), when a later segment of the timeline
 * holds valid WAL the reader could not reach, or when a newer timeline
 * exists (its WAL is not read here).
 *
 * Records are decoded by wal_records.cpp, as for the WAL follower.  Files a
 * record creates or truncates are marked from their size now, at the end of
 * the WAL (an upper bound on when anything before this startup changed
 * them): blocks added to them without WAL (bulk extension) may be on disk
 * with no record and no mark.  Database directories need nothing here:
 * replay copies or removes them again, and the copy is marked through the
 * copydir hook.
 *
 * Runs once, in the postmaster, before any other process exists: it raises
 * no ERROR (every failure is a reason to refuse the map) and frees what it
 * allocates.
 */
extern "C" {
#include "postgres.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "access/xlog_internal.h"
#include "access/xlogreader.h"
#include "common/relpath.h"
#include "storage/fd.h"
}

#include "core/shared_state.h"
#include "capture/startup_scan.h"
#include "capture/wal_archive.h"
#include "capture/wal_records.h"
#include "compat/compat.h"

namespace ptrack::pg {

namespace {

/* What the page reader needs: one open segment of one timeline in pg_wal (or from the archive). */
struct PageSource {
    TimeLineID timeline;
    int segment_bytes;
    int fd;
    XLogSegNo segno;   /* of fd */
    bool from_archive; /* a segment pg_wal lacks is restored through restore_command */
    char why[MAXPGPATH + 128]; /* why the last segment could not be had from the archive, if it could not */
};
PTRACK_FRAME_SAFE(PageSource);

int read_page(XLogReaderState* reader, XLogRecPtr page_lsn, int, XLogRecPtr, char* buffer)
{
    auto* source = static_cast<PageSource*>(reader->private_data);
    XLogSegNo segno;
    XLByteToSeg(page_lsn, segno, source->segment_bytes);
    if (source->fd < 0 || source->segno != segno) {
        if (source->fd >= 0)
            close(source->fd);
        char name[MAXFNAMELEN];
        char path[MAXPGPATH];
        XLogFileName(name, source->timeline, segno, source->segment_bytes);
        snprintf(path, sizeof(path), XLOGDIR "/%s", name);
        source->fd = open(path, O_RDONLY | PG_BINARY, 0);
        source->segno = segno;
        if (source->fd < 0 && errno == ENOENT && source->from_archive) {
            source->fd = restore_segment(name, source->segment_bytes, source->why, sizeof(source->why));
            if (source->fd >= 0)
                ereport(LOG, (errmsg("ptrack restored WAL segment \"%s\" from the archive", name)));
        }
        if (source->fd < 0)
            return -1;
    }
    const off_t offset = XLogSegmentOffset(page_lsn, source->segment_bytes);
    if (pread(source->fd, buffer, XLOG_BLCKSZ, offset) != XLOG_BLCKSZ)
        return -1;
    reader->seg.ws_tli = source->timeline;
    return XLOG_BLCKSZ;
}

/* A file a record created (limit 0) or truncated (limit: its new length in blocks). */
struct FileLimit {
    RelFork rel;
    BlockNumber limit;
};
PTRACK_FRAME_SAFE(FileLimit);

/* Marks named blocks at once; keeps the files with a limit for after the scan. */
class ScanSink final : public WalChangeSink {
public:
    explicit ScanSink(Map* map) : map_(map) {}

    void block(const RelFork& rel, BlockNumber block, Lsn lsn, bool) noexcept override { map_->mark(rel, block, lsn); }

    void relation_limit(const RelFork& rel, BlockNumber limit, Lsn) noexcept override
    {
        truncations_ += limit > 0 ? 1 : 0;
        if (count_ == capacity_ && !grow())
            return;
        limits_[count_++] = FileLimit{rel, limit};
    }

    void database(uint32_t, uint32_t, Lsn) noexcept override {}

    /* Marks [limit, size now) of every file kept, at `lsn`; the number of files that exist. */
    uint64_t mark_files(Lsn lsn) noexcept;

    bool out_of_memory() const noexcept { return out_of_memory_; }

    uint64_t truncations() const noexcept { return truncations_; }

    void release() noexcept
    {
        if (limits_ != nullptr)
            pfree(limits_);
        limits_ = nullptr;
        count_ = capacity_ = 0;
    }

private:
    bool grow() noexcept
    {
        const size_t capacity = capacity_ == 0 ? 1024 : capacity_ * 2;
        auto* bigger = static_cast<FileLimit*>(palloc_extended(capacity * sizeof(FileLimit), MCXT_ALLOC_NO_OOM));
        if (bigger == nullptr) {
            out_of_memory_ = true;
            return false;
        }
        if (count_ > 0)
            memcpy(bigger, limits_, count_ * sizeof(FileLimit));
        if (limits_ != nullptr)
            pfree(limits_);
        limits_ = bigger;
        capacity_ = capacity;
        return true;
    }

    Map* map_;
    FileLimit* limits_ = nullptr;
    size_t count_ = 0;
    size_t capacity_ = 0;
    bool out_of_memory_ = false;
    uint64_t truncations_ = 0;
};
PTRACK_FRAME_SAFE(ScanSink);

uint64_t ScanSink::mark_files(Lsn lsn) noexcept
{
    uint64_t existing = 0;
    for (size_t i = 0; i < count_; ++i) {
        const FileLimit& f = limits_[i];
        char base[MAXPGPATH];
        relation_path(f.rel, base);
        bool any = false;
        for (uint32_t segno = 0;; ++segno) {
            char path[MAXPGPATH];
            if (segno == 0)
                snprintf(path, sizeof(path), "%s", base);
            else
                snprintf(path, sizeof(path), "%s.%u", base, segno);
            struct stat st;
            if (stat(path, &st) != 0)
                break;
            any = true;
            const BlockNumber first = segno * static_cast<BlockNumber>(RELSEG_SIZE);
            const uint64_t nblocks = (static_cast<uint64_t>(st.st_size) + BLCKSZ - 1) / BLCKSZ;
            for (uint64_t b = 0; b < nblocks; ++b)
                if (first + b >= f.limit)
                    map_->mark(f.rel, static_cast<BlockNumber>(first + b), lsn);
            if (nblocks < static_cast<uint64_t>(RELSEG_SIZE))
                break;
        }
        existing += any ? 1 : 0;
    }
    return existing;
}

/*
 * True if pg_wal holds a segment or history file of a timeline after
 * `timeline` (its WAL is not read by the scan).
 */
bool newer_timeline_exists(TimeLineID timeline, TimeLineID* found)
{
    DIR* dir = opendir(XLOGDIR);
    if (dir == nullptr)
        return true; /* cannot tell: assume the worst */
    bool newer = false;
    struct dirent* de;
    while (!newer && (de = readdir(dir)) != nullptr) {
        const size_t len = strlen(de->d_name);
        if (len < 8 || strspn(de->d_name, "0123456789ABCDEF") < 8)
            continue;
        if (!IsXLogFileName(de->d_name) && !IsPartialXLogFileName(de->d_name) && !IsTLHistoryFileName(de->d_name))
            continue;
        unsigned int tli = 0;
        if (sscanf(de->d_name, "%08X", &tli) == 1 && tli > timeline) {
            newer = true;
            *found = tli;
        }
    }
    closedir(dir);
    return newer;
}

/* True if segment `segno` of `timeline` begins with a valid long page header for its own address. */
bool segment_holds_wal(TimeLineID timeline, XLogSegNo segno, int segment_bytes)
{
    char name[MAXFNAMELEN];
    char path[MAXPGPATH];
    XLogFileName(name, timeline, segno, segment_bytes);
    snprintf(path, sizeof(path), XLOGDIR "/%s", name);
    const int fd = open(path, O_RDONLY | PG_BINARY, 0);
    if (fd < 0)
        return false;
    XLogLongPageHeaderData header;
    const bool read_ok = pread(fd, &header, sizeof(header), 0) == static_cast<ssize_t>(sizeof(header));
    close(fd);
    XLogRecPtr start;
    XLogSegNoOffsetToRecPtr(segno, 0, segment_bytes, start);
    return read_ok && header.std.xlp_magic == XLOG_PAGE_MAGIC && (header.std.xlp_info & XLP_LONG_HEADER) &&
           header.std.xlp_pageaddr == start && header.std.xlp_tli == timeline;
}

}  // namespace

const char* scan_wal_at_startup(const ControlFileData& control, Lsn from, TimeLineID timeline, Map* map,
                                StartupScan* scan, ScanRecorder* recorder)
{
    *scan = StartupScan{};
    const int segment_bytes = static_cast<int>(control.xlog_seg_size);
    if (!IsValidWalSegSize(segment_bytes))
        return "pg_control gives an invalid WAL segment size";
    TimeLineID newer = 0;
    if (newer_timeline_exists(timeline, &newer))
        return reason("the WAL has moved to timeline %u since it was saved on timeline %u", newer, timeline);

    PageSource source{timeline, segment_bytes, -1, 0, false, ""};
    XLogReaderRoutine routine{};
    routine.page_read = read_page; /* whole pages from pg_wal; no segment_open: WALRead() is never called */
    XLogReaderState* reader = XLogReaderAllocate(segment_bytes, NULL, &routine, &source);
    if (reader == NULL)
        return "the WAL reader could not be allocated (out of memory)";
    reader->system_identifier = control.system_identifier; /* never read another cluster's WAL */

    ScanSink sink(map);
    const char* why = nullptr;
    const Lsn first = XLogFindNextRecord(reader, from);
    if (first == InvalidXLogRecPtr) {
        why = reason("pg_wal holds no valid WAL record at or after %X/%X, where it is complete",
                     PTRACK_LSN_ARGS(from));
    } else {
        /* Begin with the record that ends at `first`, if pg_wal still has it (StartupScan::start). */
        Lsn begin = first;
        char* errormsg = NULL;
        XLogBeginRead(reader, first);
        if (XLogReadRecord(reader, &errormsg) != NULL) {
            const Lsn prev = XLogRecGetPrev(reader);
            XLogBeginRead(reader, prev);
            if (prev != InvalidXLogRecPtr && prev < first && XLogReadRecord(reader, &errormsg) != NULL &&
                reader->EndRecPtr <= first)
                begin = prev;
        }
        scan->start = begin;
        scan->end = begin;
        if (recorder != nullptr)
            recorder->begin(scanned_from(*scan, from, static_cast<uint32_t>(segment_bytes)));
        XLogBeginRead(reader, begin);
        while (why == nullptr && XLogReadRecord(reader, &errormsg) != NULL) {
            WalRecordView view;
            view_of_reader(reader, &view);
            why = capture_wal_record(view, sink);
            /* At most twice: a recorder that made room for the record takes it, or gives up. */
            for (int attempt = 0; why == nullptr && recorder != nullptr && attempt < 2; ++attempt) {
                why = capture_wal_record(view, *recorder);
                if (why == nullptr && recorder->record_done(reader->EndRecPtr))
                    break;
            }
            scan->end = reader->EndRecPtr;
            scan->records++;
        }
    }
    XLogReaderFree(reader);
    if (source.fd >= 0)
        close(source.fd);

    if (why == nullptr && sink.out_of_memory())
        why = "the files created or truncated in its WAL could not be listed (out of memory)";
    if (why == nullptr && scan->end <= control.checkPoint)
        why = reason("the WAL in pg_wal ends at %X/%X, before the latest checkpoint record at %X/%X",
                     PTRACK_LSN_ARGS(scan->end), PTRACK_LSN_ARGS(control.checkPoint));
    if (why == nullptr && scan->end < control.minRecoveryPoint)
        why = reason("the WAL in pg_wal ends at %X/%X, before the minimum recovery point %X/%X (is the WAL "
                     "restored from an archive?)",
                     PTRACK_LSN_ARGS(scan->end), PTRACK_LSN_ARGS(control.minRecoveryPoint));
    if (why == nullptr) {
        XLogSegNo last;
        XLByteToSeg(scan->end, last, segment_bytes);
        if (segment_holds_wal(timeline, last + 1, segment_bytes))
            why = reason("the WAL in pg_wal could not be read after %X/%X, but continues in a later segment",
                         PTRACK_LSN_ARGS(scan->end));
    }
    if (why == nullptr) {
        scan->files = sink.mark_files(scan->end);
        scan->truncations = sink.truncations();
    }
    sink.release();
    return why;
}

const char* mark_record_ending_at(const ControlFileData& control, Lsn lsn, TimeLineID timeline, Map* map)
{
    const int segment_bytes = static_cast<int>(control.xlog_seg_size);
    if (!IsValidWalSegSize(segment_bytes))
        return "pg_control gives an invalid WAL segment size";
    if (!restore_command_set())
        return "restore_command is not set";
    PageSource source{timeline, segment_bytes, -1, 0, true, ""};
    XLogReaderRoutine routine{};
    routine.page_read = read_page;
    XLogReaderState* reader = XLogReaderAllocate(segment_bytes, NULL, &routine, &source);
    if (reader == NULL)
        return "the WAL reader could not be allocated (out of memory)";
    reader->system_identifier = control.system_identifier; /* never another cluster's WAL */

    ScanSink sink(map);
    const char* why = nullptr;
    char* errormsg = NULL;
    const Lsn first = XLogFindNextRecord(reader, lsn);
    if (first == InvalidXLogRecPtr) {
        why = "no valid WAL record was found after it";
    } else {
        XLogBeginRead(reader, first);
        if (XLogReadRecord(reader, &errormsg) == NULL) {
            why = "the WAL record after it could not be read";
        } else {
            const Lsn prev = XLogRecGetPrev(reader);
            if (prev != InvalidXLogRecPtr && prev < first) {
                XLogBeginRead(reader, prev);
                if (XLogReadRecord(reader, &errormsg) == NULL)
                    why = "the WAL record before it could not be read";
                else if (reader->EndRecPtr <= first) {
                    WalRecordView view;
                    view_of_reader(reader, &view);
                    why = capture_wal_record(view, sink);
                }
            }
        }
    }
    if (why == nullptr && source.why[0] != '\0')
        why = reason("%s", source.why);
    else if (why != nullptr && source.why[0] != '\0')
        why = reason("%s (%s)", why, source.why);
    if (why == nullptr && sink.out_of_memory())
        why = "the files created or truncated by the record could not be listed (out of memory)";
    if (why == nullptr)
        (void) sink.mark_files(lsn);
    sink.release();
    XLogReaderFree(reader);
    if (source.fd >= 0)
        close(source.fd);
    return why;
}

Lsn scanned_from(const StartupScan& scan, Lsn redo, uint32_t segment_bytes)
{
    return scan.start < redo || no_record_ends_at(redo, segment_bytes) ? redo : redo + 1;
}

void log_startup_scan(const StartupScan& scan, const char* what)
{
    ereport(LOG, (errmsg("ptrack marked the changes of %llu WAL records from %X/%X to %X/%X %s",
                         static_cast<unsigned long long>(scan.records), PTRACK_LSN_ARGS(scan.start),
                         PTRACK_LSN_ARGS(scan.end), what),
                  errdetail("%llu relation files created or truncated there were marked from their size.",
                            static_cast<unsigned long long>(scan.files))));
}

}  // namespace ptrack::pg
