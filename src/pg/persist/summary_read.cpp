/*
 * summary_read.cpp -- a backend reads one summary file of wal capture whole
 * and validates it before anything is taken from it (summary_io.h).
 *
 * Why whole, and why validated first: a summary is immutable and carries a
 * CRC-32C of its body, so it is either right or damaged as a whole; reading
 * it in pieces would let a damaged tail be found only after part of the
 * answer was produced.  The sizes are small (a day of a 10 TiB cluster at 5%
 * change is about 100 MB, bench/RESULTS.md), and the memory goes with the
 * calling function's memory context.
 *
 * A file that vanishes between the listing and the open (the follower
 * combined or removed it) is not an error here: the caller lists again.  A
 * name whose file says another range is damage like any other: the name is
 * only a claim.  summary_header_problem() checks that claim from the
 * header alone (96 bytes), for every file of a listing, so that a file
 * whose header says something else never shapes the chain an answer or
 * retention goes by (ptrack/summary_chain.h).
 *
 * C-style frames (boundary.h): errors longjmp out.
 */
extern "C" {
#include "postgres.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "access/xlog.h"
#include "storage/fd.h"
#include "utils/memutils.h"
}

#include "compat/compat.h"
#include "core/boundary.h"
#include "persist/map_io.h"
#include "persist/summary_io.h"

namespace ptrack::pg {

PTRACK_FRAME_SAFE(SummaryView, SummaryHeader, SummaryFileRef);

namespace {
constexpr char kOtherRange[] = "its header covers another LSN range than its name says";
}
PTRACK_ENGINE_NOEXCEPT(&summary_open, &summary_read_header, &describe_summary_status);

SummaryReadResult summary_read(const SummaryFileRef& ref, SummaryView* view, const char** damage, char* path)
{
    char name[kSummaryNameLength + 1];
    summary_file_name(ref.start_lsn, ref.end_lsn, name, sizeof(name));
    snprintf(path, MAXPGPATH, "%s/%s", kSummaryDir, name);

    const int fd = OpenTransientFile(path, O_RDONLY | PG_BINARY);
    if (fd < 0) {
        if (errno == ENOENT)
            return SummaryReadResult::kGone;
        ereport(ERROR, (errcode_for_file_access(), errmsg("could not open ptrack summary file \"%s\": %m", path)));
    }
    struct stat st;
    if (fstat(fd, &st) != 0)
        ereport(ERROR, (errcode_for_file_access(), errmsg("could not stat ptrack summary file \"%s\": %m", path)));
    const auto length = static_cast<size_t>(st.st_size);
    /* At least one byte, so that an empty file reads as too short rather than as a failed allocation. */
    auto* data = static_cast<uint8_t*>(MemoryContextAllocHuge(CurrentMemoryContext, length + 1));
    if (!read_at(fd, data, length, 0))
        ereport(ERROR, (errcode_for_file_access(), errmsg("could not read ptrack summary file \"%s\": %m", path)));
    CloseTransientFile(fd);

    const SummaryStatus status =
        summary_open(data, length, GetSystemIdentifier(), kServerMajor, crc32c, view);
    if (status != SummaryStatus::kOk) {
        pfree(data);
        *damage = describe_summary_status(status);
        return SummaryReadResult::kDamaged;
    }
    if (view->header.start_lsn != ref.start_lsn || view->header.end_lsn != ref.end_lsn) {
        pfree(data);
        *damage = kOtherRange;
        return SummaryReadResult::kDamaged;
    }
    *damage = nullptr;
    return SummaryReadResult::kOk;
}

const char* summary_header_problem(const SummaryFileRef& ref, SummaryHeader* header, bool* gone)
{
    char name[kSummaryNameLength + 1];
    char path[MAXPGPATH];
    summary_file_name(ref.start_lsn, ref.end_lsn, name, sizeof(name));
    snprintf(path, MAXPGPATH, "%s/%s", kSummaryDir, name);
    const int fd = OpenTransientFile(path, O_RDONLY | PG_BINARY);
    if (fd < 0) {
        if (errno == ENOENT)
            *gone = true;
        return "it cannot be opened";
    }
    uint8_t raw[kSummaryHeaderBytes];
    const bool read_ok = read_at(fd, raw, sizeof(raw), 0);
    CloseTransientFile(fd);
    if (!read_ok)
        return describe_summary_status(SummaryStatus::kTooShort);
    SummaryHeader& h = *header;
    const SummaryStatus status = summary_read_header(raw, sizeof(raw), crc32c, &h);
    if (status != SummaryStatus::kOk)
        return describe_summary_status(status);
    if (h.start_lsn != ref.start_lsn || h.end_lsn != ref.end_lsn)
        return kOtherRange;
    if (h.system_identifier != GetSystemIdentifier())
        return describe_summary_status(SummaryStatus::kOtherSystem);
    if (h.pg_major != kServerMajor)
        return describe_summary_status(SummaryStatus::kOtherServer);
    return nullptr;
}

}  // namespace ptrack::pg
