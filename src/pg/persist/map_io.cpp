/*
 * map_io.cpp -- see map_io.h.
 */
extern "C" {
#include "postgres.h"

#include <fcntl.h>
#include <unistd.h>

#include "port/pg_crc32c.h"
#include "storage/fd.h"
#include "utils/timestamp.h"
}

#include "core/shared_state.h"
#include "persist/map_io.h"
#include "persist/map_persistence.h"

namespace ptrack::pg {

/* Here, at the bottom of persist/, since every file of it may need it (map_persistence.h). */
const SourcePersistence* persist_source = nullptr;

void use_source_persistence(const SourcePersistence* source)
{
    persist_source = source;
}

uint32_t crc32c(const void* data, size_t len)
{
    pg_crc32c crc;
    INIT_CRC32C(crc);
    COMP_CRC32C(crc, data, len);
    FIN_CRC32C(crc);
    return crc;
}

uint32_t crc32c_update(uint32_t crc, const void* data, size_t len)
{
    pg_crc32c value = crc;
    COMP_CRC32C(value, data, len);
    return value;
}

bool read_at(int fd, void* buf, size_t len, uint64_t offset)
{
    auto* p = static_cast<char*>(buf);
    while (len > 0) {
        const ssize_t n = pg_pread(fd, p, len, static_cast<off_t>(offset));
        if (n <= 0) {
            if (n == 0)
                errno = EIO;
            return false;
        }
        p += n;
        len -= static_cast<size_t>(n);
        offset += static_cast<uint64_t>(n);
    }
    return true;
}

bool write_at(int fd, const void* buf, size_t len, uint64_t offset)
{
    const auto* p = static_cast<const char*>(buf);
    while (len > 0) {
        errno = 0;
        const ssize_t n = pg_pwrite(fd, p, len, static_cast<off_t>(offset));
        if (n <= 0) {
            if (errno == 0)
                errno = ENOSPC;
            return false;
        }
        p += n;
        len -= static_cast<size_t>(n);
        offset += static_cast<uint64_t>(n);
    }
    return true;
}

bool crc_of_range(int fd, uint64_t offset, uint64_t len, uint8_t* buffer, size_t buffer_bytes, uint32_t* out)
{
    pg_crc32c crc;
    INIT_CRC32C(crc);
    while (len > 0) {
        const size_t n = len < buffer_bytes ? len : buffer_bytes;
        if (!read_at(fd, buffer, n, offset))
            return false;
        COMP_CRC32C(crc, buffer, n);
        offset += n;
        len -= n;
    }
    FIN_CRC32C(crc);
    *out = crc;
    return true;
}

namespace {

/* One WARNING per minute at most for failed saves (map_io.h). */
constexpr long kSaveWarningIntervalMs = 60 * 1000;
TimestampTz save_warning_quiet_until = 0;
/* warn_save_failed()'s last failure, for last_save_failure(). */
char last_failure[256];
uint64_t save_warnings_suppressed = 0;

}  // namespace

void warn_save_failed(const char* what, const char* action, const char* path)
{
    const int saved_errno = errno;
    snprintf(last_failure, sizeof(last_failure), "could not %s \"%s\": %s", action, path, strerror(saved_errno));
    const TimestampTz now = GetCurrentTimestamp();
    if (now < save_warning_quiet_until) {
        save_warnings_suppressed++;
        errno = saved_errno;
        ereport(DEBUG1, (errcode_for_file_access(),
                         errmsg("ptrack could not save %s: could not %s \"%s\": %m", what, action, path)));
        return;
    }
    char repeated[128] = "";
    if (save_warnings_suppressed > 0)
        snprintf(repeated, sizeof(repeated), " %llu more failures since the last such warning were not reported.",
                 static_cast<unsigned long long>(save_warnings_suppressed));
    save_warnings_suppressed = 0;
    save_warning_quiet_until = TimestampTzPlusMilliseconds(now, kSaveWarningIntervalMs);
    errno = saved_errno;
    /* What the failure means depends on the source (its detail and hint: map_persistence.h). */
    ereport(WARNING, (errcode_for_file_access(),
                      errmsg("ptrack could not save %s: could not %s \"%s\": %m", what, action, path),
                      errdetail("%s%s", persist_source->save_failure_detail, repeated),
                      errhint("%s", persist_source->save_failure_hint)));
}

const char* last_save_failure()
{
    return last_failure;
}

bool rename_for_save(const char* from, const char* to, const char* what)
{
    /* DEBUG1: the one message that counts is ptrack's, rate-limited. */
    if (durable_rename(from, to, DEBUG1) == 0)
        return true;
    /* durable_rename() fsyncs both names and the directory too: any of these steps failed. */
    warn_save_failed(what, "rename (and fsync) file", from);
    return false;
}

bool write_file_fsynced(const char* name, const void* data, size_t len, const char* what)
{
    const int fd = OpenTransientFile(name, O_WRONLY | O_CREAT | O_TRUNC | PG_BINARY);
    if (fd < 0) {
        warn_save_failed(what, "create file", name);
        return false;
    }
    bool ok = write_at(fd, data, len, 0);
    if (!ok)
        warn_save_failed(what, "write file", name);
    else if (pg_fsync(fd) != 0) {
        warn_save_failed(what, "fsync file", name);
        ok = false;
    }
    if (CloseTransientFile(fd) != 0 && ok) {
        warn_save_failed(what, "close file", name);
        ok = false;
    }
    if (!ok)
        discard_temp_file(name);
    return ok;
}

void discard_temp_file(const char* name)
{
    const int saved_errno = errno;
    if (unlink(name) != 0 && errno != ENOENT)
        ereport(WARNING, (errcode_for_file_access(),
                          errmsg("ptrack could not remove file \"%s\" after a failed save: %m", name)));
    errno = saved_errno;
}

void remove_file_if_exists(const char* name, int elevel_removed)
{
    if (unlink(name) == 0)
        ereport(elevel_removed, (errmsg("ptrack removed file \"%s\"", name)));
    else if (errno != ENOENT && errno != ENOTDIR) /* ENOTDIR: its folder is not there either */
        ereport(WARNING, (errcode_for_file_access(), errmsg("could not remove file \"%s\": %m", name)));
}

}  // namespace ptrack::pg
