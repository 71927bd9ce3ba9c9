/*
 * limit_file_io.cpp -- see limit_file_io.h.
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

#include "persist/limit_file_io.h"
#include "persist/map_io.h"
#include "persist/state_files.h"
#include "ptrack/limit_file.h"
#include "core/shared_state.h"
#include "compat/compat.h"

namespace ptrack::pg {

const char* load_limits(uint64_t system_identifier, Lsn* covered_lsn)
{
    if (!limits.attached())
        return "no limit table is attached to read it into";
    (void) unlink(state_file(StateFile::kLimitsTemp)); /* a save that never completed */
    const int fd = OpenTransientFile(state_file(StateFile::kLimits), O_RDONLY | PG_BINARY);
    if (fd < 0) {
        if (errno == ENOENT)
            return "it does not exist";
        static char reason_text[160]; /* valid until the next call; one caller, at startup */
        snprintf(reason_text, sizeof(reason_text), "it could not be opened: %s", strerror(errno));
        return reason_text;
    }
    struct stat st;
    const char* reason = nullptr;
    uint8_t* buffer = nullptr;
    const size_t capacity = limit_file_max_bytes(limits.bucket_count());
    if (fstat(fd, &st) != 0)
        reason = "it could not be read";
    else if (static_cast<uint64_t>(st.st_size) > capacity)
        reason = "it is larger than any limits file of this table size";
    else if ((buffer = static_cast<uint8_t*>(MemoryContextAllocExtended(CurrentMemoryContext, capacity,
                                                                        MCXT_ALLOC_NO_OOM))) == nullptr)
        reason = "there was not enough memory to read it";
    else if (!read_at(fd, buffer, static_cast<size_t>(st.st_size), 0))
        reason = "it could not be read";
    else {
        const LimitFileStatus status = limit_file_decode(buffer, static_cast<size_t>(st.st_size), system_identifier,
                                                         kServerMajor,
                                                         crc32c, &limits, covered_lsn);
        if (status != LimitFileStatus::kOk)
            reason = describe_limit_file_status(status);
    }
    if (buffer != nullptr)
        pfree(buffer);
    CloseTransientFile(fd);
    return reason;
}

void remove_limits_files()
{
    remove_file_if_exists(state_file(StateFile::kLimitsTemp), DEBUG1);
    remove_file_if_exists(state_file(StateFile::kLimits), LOG);
}

}  // namespace ptrack::pg
