/*
 * map_io.cpp -- see map_io.h.
 */
extern "C" {
#include "postgres.h"

#include <fcntl.h>
#include <unistd.h>

#include "port/pg_crc32c.h"
#include "storage/fd.h"
}

#include "map_io.h"

namespace ptrack::pg {

uint32_t crc32c(const void* data, size_t len)
{
    pg_crc32c crc;
    INIT_CRC32C(crc);
    COMP_CRC32C(crc, data, len);
    FIN_CRC32C(crc);
    return crc;
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

void warn_save_failed(const char* what, const char* action, const char* file)
{
    ereport(WARNING, (errcode_for_file_access(),
                      errmsg("ptrack could not save %s: could not %s file \"%s\": %m", what, action, file),
                      errdetail("What is in memory is intact, and ptrack's previous save stays in force until "
                                "a later save succeeds; if the server stops before that, the next start judges "
                                "the previous save."),
                      errhint("Check the permissions and free space of the data directory.")));
}

bool write_file_fsynced(const char* name, const void* data, size_t len, const char* what)
{
    const int fd = OpenTransientFile(name, O_WRONLY | O_CREAT | O_TRUNC | PG_BINARY);
    if (fd < 0) {
        warn_save_failed(what, "create", name);
        return false;
    }
    bool ok = write_at(fd, data, len, 0);
    if (!ok)
        warn_save_failed(what, "write", name);
    else if (pg_fsync(fd) != 0) {
        warn_save_failed(what, "fsync", name);
        ok = false;
    }
    if (CloseTransientFile(fd) != 0 && ok) {
        warn_save_failed(what, "close", name);
        ok = false;
    }
    return ok;
}

void remove_file_if_exists(const char* name, int elevel_removed)
{
    if (unlink(name) == 0)
        ereport(elevel_removed, (errmsg("ptrack removed file \"%s\"", name)));
    else if (errno != ENOENT)
        ereport(WARNING, (errcode_for_file_access(), errmsg("could not remove file \"%s\": %m", name)));
}

}  // namespace ptrack::pg
