/*
 * map_io.h -- the small file primitives the map's load and save share:
 * positioned reads and writes that finish or fail, PostgreSQL's CRC-32C, and
 * removal with a log line.  Plain C-style functions that never raise an
 * ERROR: the postmaster must start and a checkpoint must not fail because of
 * ptrack (docs/design.md section 5.3).
 */
#ifndef PTRACK_PG_MAP_IO_H
#define PTRACK_PG_MAP_IO_H

#include <cstddef>
#include <cstdint>

#include "ptrack/file_sink.h"

namespace ptrack::pg {

/* Finalised CRC-32C of `len` bytes (port/pg_crc32c.h), in the engine's Crc32cFn shape. */
uint32_t crc32c(const void* data, size_t len);

/* PostgreSQL's CRC-32C continued, unfinalised (the engine's Crc32cUpdateFn). */
uint32_t crc32c_update(uint32_t crc, const void* data, size_t len);

/* Reads exactly `len` bytes at byte `offset`; false on error or short read (errno set). */
bool read_at(int fd, void* buf, size_t len, uint64_t offset);

/* Writes exactly `len` bytes at byte `offset`; false on error (errno set, ENOSPC for a short write). */
bool write_at(int fd, const void* buf, size_t len, uint64_t offset);

/* The engine's file writers (ptrack/file_sink.h) write into an open file through write_at(). */
class FdSink final : public FlushSink {
public:
    explicit FdSink(int fd) : fd_(fd) {}
    bool write(const void* data, size_t len, uint64_t offset) noexcept override { return write_at(fd_, data, len, offset); }

private:
    int fd_;
};

/* CRC-32C of `len` bytes at `offset` of `fd`, read through `buffer`; false on a read error. */
bool crc_of_range(int fd, uint64_t offset, uint64_t len, uint8_t* buffer, size_t buffer_bytes, uint32_t* out);

/*
 * The WARNING of a failed save of one of ptrack's files: names ptrack, what
 * it was saving (`what`, e.g. "its map"), the failed step with its object
 * (`action`, e.g. "write file" or "create directory") and the path, then
 * what it means for the next backup (which depends on the capture source)
 * and what to check.  Call right after the failing call: reports errno.
 *
 * Rate-limited per process: a persistent failure (the WAL follower retries
 * its save) logs one WARNING per minute; the failures in between are logged
 * at DEBUG1 and counted in the next WARNING.
 */
void warn_save_failed(const char* what, const char* action, const char* path);

/*
 * The last failure warn_save_failed() was told of in this process, as
 * "could not <action> "<path>": <strerror>" (reported or not); valid
 * until the next call.
 */
const char* last_save_failure();

/*
 * durable_rename(from, to) for a save: on failure, one warn_save_failed()
 * (rate-limited) instead of PostgreSQL's own WARNING.  True on success.
 */
bool rename_for_save(const char* from, const char* to, const char* what);

/*
 * Writes `len` bytes into `name` (created or truncated), fsyncs and closes
 * it: a temporary file that the caller then renames with durable_rename().
 * False after warn_save_failed(what, ...), with the file removed.
 */
bool write_file_fsynced(const char* name, const void* data, size_t len, const char* what);

/*
 * After a failed save: unlinks the temporary file `name` the save was
 * writing, so that a partial file does not stay in the data directory (a
 * backup would copy it) until the next successful save.  Keeps errno.
 * Never raises an ERROR; a failed unlink is a WARNING.
 */
void discard_temp_file(const char* name);

/* Unlinks `name` (relative to the data directory); logs at `elevel_removed` if it existed, WARNING on error. */
void remove_file_if_exists(const char* name, int elevel_removed);

}  // namespace ptrack::pg

#endif
