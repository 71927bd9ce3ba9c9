/*
 * bypass_journal_io.cpp -- the journal of writes that bypassed shared buffers
 * (bypass_journal_io.h; the entry format is ptrack/bypass_journal.h).
 *
 * Appends come from any backend, concurrently: each opens the file with
 * O_APPEND, writes one 40-byte entry in one write() (the kernel positions
 * and writes it as a unit on a local file system), fsyncs and closes it.
 * The checkpointer renames the file aside before a hooks save and removes
 * it after the save succeeded: a backend that opened the file before the
 * rename appends to the old file, whose entries the save covers (their
 * blocks were marked before the open); one that opens it after creates a
 * new file, and fsyncs the data directory so the new name survives a crash.
 */
extern "C" {
#include "postgres.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "storage/fd.h"
}

#include "capture/hooks/bypass_journal_io.h"
#include "capture/capture.h"
#include "persist/map_io.h"
#include "ptrack/bypass_journal.h"
#include "core/shared_state.h"

namespace ptrack::pg {

PTRACK_FRAME_SAFE(BypassEntry);
PTRACK_ENGINE_NOEXCEPT(&bypass_encode_entry, &bypass_decode_entry, &Map::mark);

namespace {

/* Opens ptrack.bypass for appending; *created when this call made the file. */
int open_journal(bool* created)
{
    *created = false;
    int fd = OpenTransientFile(kBypassJournalFileName, O_WRONLY | O_APPEND | PG_BINARY);
    if (fd < 0 && errno == ENOENT) {
        fd = OpenTransientFile(kBypassJournalFileName, O_WRONLY | O_APPEND | O_CREAT | O_EXCL | PG_BINARY);
        if (fd >= 0)
            *created = true;
        else if (errno == EEXIST) /* another backend made it meanwhile */
            fd = OpenTransientFile(kBypassJournalFileName, O_WRONLY | O_APPEND | PG_BINARY);
    }
    return fd;
}

uint64_t apply_file(const char* name, Map* map)
{
    const int fd = open(name, O_RDONLY | PG_BINARY, 0);
    if (fd < 0)
        return 0;
    uint64_t applied = 0;
    uint8_t raw[kBypassEntryBytes];
    for (;;) {
        if (read(fd, raw, sizeof(raw)) != static_cast<ssize_t>(sizeof(raw)))
            break;
        BypassEntry entry;
        if (!bypass_decode_entry(raw, crc32c, &entry))
            break;
        for (BlockNumber b = 0; b < entry.nblocks; ++b)
            map->mark(entry.rel, b, entry.lsn);
        ++applied;
    }
    close(fd);
    return applied;
}

}  // namespace

void bypass_journal_append(const RelFork& rel, BlockNumber nblocks) noexcept
{
    if (!map.attached() || nblocks == 0)
        return;
    /* Every block of the fork was written (and marked) before this LSN. */
    const BypassEntry entry{rel, nblocks, current_mark_lsn()};
    uint8_t raw[kBypassEntryBytes];
    bypass_encode_entry(entry, crc32c, raw);

    bool created = false;
    const int fd = open_journal(&created);
    const char* failed = nullptr;
    if (fd < 0)
        failed = "open";
    else if (write(fd, raw, sizeof(raw)) != static_cast<ssize_t>(sizeof(raw)))
        failed = "write";
    else if (pg_fsync(fd) != 0)
        failed = "fsync";
    if (fd >= 0 && CloseTransientFile(fd) != 0 && failed == nullptr)
        failed = "close";
    if (failed == nullptr && created && fsync_fname_ext(".", true, false, WARNING) != 0)
        failed = "fsync the data directory for";
    if (failed != nullptr) {
        char reason[MAXPGPATH + 128];
        snprintf(reason, sizeof(reason),
                 "could not %s \"%s\" (%m), so the blocks of relation %u/%u/%u fork %u written outside shared "
                 "buffers would not survive a crash",
                 failed, kBypassJournalFileName, rel.spc_oid, rel.db_oid, rel.relfilenode,
                 static_cast<unsigned>(rel.fork));
        restart_tracking(reason);
    }
}

void bypass_journal_rotate() noexcept
{
    struct stat st;
    if (stat(kBypassJournalOldFileName, &st) == 0)
        return; /* the last save failed: its old journal stays until a save succeeds */
    if (rename(kBypassJournalFileName, kBypassJournalOldFileName) != 0 && errno != ENOENT)
        ereport(WARNING, (errcode_for_file_access(),
                          errmsg("ptrack could not rename \"%s\" to \"%s\": %m", kBypassJournalFileName,
                                 kBypassJournalOldFileName),
                          errdetail("Its entries are kept and applied again after a crash; nothing is lost.")));
}

void bypass_journal_retire() noexcept
{
    if (unlink(kBypassJournalOldFileName) != 0 && errno != ENOENT)
        ereport(WARNING, (errcode_for_file_access(),
                          errmsg("ptrack could not remove \"%s\": %m", kBypassJournalOldFileName),
                          errdetail("Its entries are applied again after a crash; nothing is lost.")));
}

uint64_t bypass_journal_apply(Map* map) noexcept
{
    const uint64_t applied = apply_file(kBypassJournalOldFileName, map) + apply_file(kBypassJournalFileName, map);
    if (applied > 0)
        ereport(LOG, (errmsg("ptrack marked the blocks of %llu relation forks written outside shared buffers "
                             "(\"%s\")",
                             static_cast<unsigned long long>(applied), kBypassJournalFileName)));
    return applied;
}

void remove_bypass_journals()
{
    remove_file_if_exists(kBypassJournalOldFileName, LOG);
    remove_file_if_exists(kBypassJournalFileName, LOG);
}

}  // namespace ptrack::pg
