/*
 * map_persistence.cpp -- see map_persistence.h.
 *
 * Why the flush at the end of the sync phase is enough: every page changed
 * before the checkpoint's redo LSN was written (and marked) by BufferSync
 * before ProcessSyncRequests() ran, so the flushed map covers them; every
 * page changed after the redo LSN gets a full-page image in the WAL on its
 * first change (full_page_writes), which recovery restores and writes again,
 * so it is marked again by replay.  Hence the trust rules on the redo LSN and
 * on full_page_writes / wal_level after a crash.
 *
 * Error handling: the postmaster must start whatever the file holds, and a
 * checkpoint must not fail because of ptrack, so failures are WARNINGs and
 * the fallback is always the conservative one (a fresh map, or a stale file
 * that the next startup rejects).
 */
extern "C" {
#include "postgres.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "access/xlog.h"
#include "access/xlogrecovery.h"
#include "catalog/pg_control.h"
#include "common/controldata_utils.h"
#include "miscadmin.h"
#include "port/pg_crc32c.h"
#include "storage/bufpage.h"
#include "storage/fd.h"
#include "utils/memutils.h"
}

#include "map_persistence.h"
#include "ptrack/map_file.h"

namespace ptrack::pg {

namespace {

uint32_t crc32c(const void* data, size_t len)
{
    pg_crc32c crc;
    INIT_CRC32C(crc);
    COMP_CRC32C(crc, data, len);
    FIN_CRC32C(crc);
    return crc;
}

/* Reads exactly `len` bytes at `offset`; false on error or short read (errno set). */
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

void warn_not_trusted(const char* reason)
{
    ereport(WARNING, (errmsg("ptrack map file \"%s\" is not trusted because %s", kMapFileName, reason),
                      errdetail("Change tracking starts afresh with a new ptrack_init_lsn()."),
                      errhint("The next backup must be a full backup.")));
}

/* Gathers the startup facts; false (with *problem set) if pg_control is unreadable. */
bool gather_startup_facts(const MapGeometry& geometry, uint64_t file_bytes, StartupFacts* facts,
                          const char** problem)
{
    bool crc_ok = false;
    ControlFileData* control = get_controlfile(DataDir, &crc_ok);
    if (!crc_ok) {
        *problem = "pg_control could not be verified";
        pfree(control);
        return false;
    }
    struct stat st;
    facts->system_identifier = control->system_identifier;
    facts->data_checksum_version = control->data_checksum_version;
    facts->geometry = geometry;
    facts->checkpoint_redo = control->checkPointCopy.redo;
    facts->backup_label = stat(BACKUP_LABEL_FILE, &st) == 0;
    facts->crashed = control->state != DB_SHUTDOWNED && control->state != DB_SHUTDOWNED_IN_RECOVERY;
    facts->checkpoint_full_page_writes = control->checkPointCopy.fullPageWrites;
    facts->checkpoint_wal_level_replica = control->wal_level >= WAL_LEVEL_REPLICA;
    facts->full_page_writes = fullPageWrites;
    facts->wal_level_replica = wal_level >= WAL_LEVEL_REPLICA;
    facts->file_bytes = file_bytes;
    pfree(control);
    return true;
}

/* Reads and checks the file into the map; nullptr on success, else the reason. */
const char* read_trusted_map(int fd, const MapGeometry& geometry, Map* map, Lsn* init_lsn)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return "it could not be read";
    uint8_t header_bytes[kMapFileHeaderBytes];
    if (static_cast<uint64_t>(st.st_size) < kMapFileHeaderBytes ||
        !read_at(fd, header_bytes, sizeof(header_bytes), 0))
        return "it is too short to hold a header";
    MapFileHeader header;
    const HeaderStatus status = map_file_decode_header(header_bytes, crc32c, &header);
    if (status != HeaderStatus::kOk)
        return describe_header_status(status);

    StartupFacts facts;
    const char* problem = nullptr;
    if (!gather_startup_facts(geometry, static_cast<uint64_t>(st.st_size), &facts, &problem))
        return problem;
    if (const char* reason = map_file_distrust_reason(header, facts))
        return reason;

    const uint64_t chunks = map_file_chunk_count(geometry, header.chunk_bytes);
    const uint64_t data_offset = map_file_data_offset(chunks);
    uint32_t* crcs = static_cast<uint32_t*>(palloc(chunks * sizeof(uint32_t)));
    const char* result = nullptr;
    if (!read_at(fd, crcs, chunks * sizeof(uint32_t), kMapFileHeaderBytes)) {
        result = "its chunk checksum table could not be read";
    } else {
        for (uint64_t c = 0; c < chunks && result == nullptr; ++c) {
            uint8_t* dest = map->region() + c * header.chunk_bytes;
            const uint64_t len = map_file_chunk_length(geometry, header.chunk_bytes, c);
            if (!read_at(fd, dest, len, data_offset + c * header.chunk_bytes))
                result = "a chunk could not be read";
            else if (crc32c(dest, len) != crcs[c])
                result = "a chunk checksum does not match (the file is corrupted)";
        }
    }
    pfree(crcs);
    if (result == nullptr)
        *init_lsn = header.init_lsn;
    return result;
}

}  // namespace

void remove_map_files()
{
    if (unlink(kMapTempFileName) != 0 && errno != ENOENT)
        ereport(WARNING, (errcode_for_file_access(), errmsg("could not remove file \"%s\": %m", kMapTempFileName)));
    if (unlink(kMapFileName) == 0)
        ereport(LOG, (errmsg("ptrack.map_size is 0: removed ptrack map file \"%s\"", kMapFileName)));
    else if (errno != ENOENT)
        ereport(WARNING, (errcode_for_file_access(), errmsg("could not remove file \"%s\": %m", kMapFileName)));
}

void load_map(SharedState* state, Map* map)
{
    /* A temporary file is a flush that never completed: the map file, if any, is the last good one. */
    if (unlink(kMapTempFileName) == 0)
        ereport(LOG, (errmsg("ptrack removed leftover temporary map file \"%s\"", kMapTempFileName)));

    const int fd = OpenTransientFile(kMapFileName, O_RDONLY | PG_BINARY);
    if (fd < 0) {
        if (errno == ENOENT)
            ereport(LOG, (errmsg("ptrack map file \"%s\" not found: change tracking starts now", kMapFileName)));
        else
            warn_not_trusted("it could not be opened");
        return;
    }
    Lsn init = 0;
    const char* reason = read_trusted_map(fd, state->geometry, map, &init);
    CloseTransientFile(fd);
    if (reason == nullptr) {
        state->init_lsn = init;
        ereport(LOG, (errmsg("ptrack loaded map file \"%s\", ptrack_init_lsn() is %X/%X", kMapFileName,
                             PTRACK_LSN_ARGS(init))));
        return;
    }
    warn_not_trusted(reason);
    map->clear();
    state->init_lsn = 0;
    /* Never let a rejected file be read again, e.g. after a crash before the next flush. */
    if (unlink(kMapFileName) != 0 && errno != ENOENT)
        ereport(WARNING, (errcode_for_file_access(), errmsg("could not remove file \"%s\": %m", kMapFileName)));
}

void flush_map()
{
    static uint8_t* chunk_buffer = nullptr; /* checkpointer-lifetime scratch */
    static uint32_t* crcs = nullptr;

    const MapGeometry& geometry = shared->geometry;
    const uint64_t chunks = map_file_chunk_count(geometry, kMapFileChunkBytes);
    const uint64_t data_offset = map_file_data_offset(chunks);
    if (chunk_buffer == nullptr) {
        chunk_buffer = static_cast<uint8_t*>(MemoryContextAlloc(TopMemoryContext, kMapFileChunkBytes));
        crcs = static_cast<uint32_t*>(MemoryContextAllocZero(TopMemoryContext, data_offset - kMapFileHeaderBytes));
    }

    MapFileHeader header{};
    header.version = kMapFileVersion;
    header.system_identifier = GetSystemIdentifier();
    header.data_checksum_version = DataChecksumsEnabled() ? PG_DATA_CHECKSUM_VERSION : 0;
    header.geometry = geometry;
    header.chunk_bytes = kMapFileChunkBytes;
    header.flags = (fullPageWrites ? kFlagFullPageWrites : 0u) |
                   (wal_level >= WAL_LEVEL_REPLICA ? kFlagWalLevelReplica : 0u);
    header.init_lsn = init_lsn();
    header.flush_redo_lsn = GetRedoRecPtr();
    TimeLineID tli = 0;
    if (RecoveryInProgress())
        (void) GetXLogReplayRecPtr(&tli);
    else
        tli = GetWALInsertionTimeLine();
    header.timeline = tli;

    const int fd = OpenTransientFile(kMapTempFileName, O_RDWR | O_CREAT | O_TRUNC | PG_BINARY);
    if (fd < 0) {
        ereport(WARNING, (errcode_for_file_access(), errmsg("could not create file \"%s\": %m", kMapTempFileName)));
        return;
    }
    bool ok = true;
    for (uint64_t c = 0; c < chunks && ok; ++c) {
        /* Copy slot by slot with atomic loads: backends keep marking meanwhile. */
        const uint64_t len = map_file_chunk_length(geometry, kMapFileChunkBytes, c);
        const auto* src = reinterpret_cast<const uint64_t*>(map.region() + c * kMapFileChunkBytes);
        auto* dst = reinterpret_cast<uint64_t*>(chunk_buffer);
        for (uint64_t i = 0; i < len / sizeof(uint64_t); ++i)
            dst[i] = load_lsn(&src[i]);
        crcs[c] = crc32c(chunk_buffer, len);
        ok = write_at(fd, chunk_buffer, len, data_offset + c * kMapFileChunkBytes);
    }
    uint8_t header_bytes[kMapFileHeaderBytes];
    map_file_encode_header(header, crc32c, header_bytes);
    ok = ok && write_at(fd, crcs, data_offset - kMapFileHeaderBytes, kMapFileHeaderBytes) &&
         write_at(fd, header_bytes, sizeof(header_bytes), 0) && pg_fsync(fd) == 0;
    if (!ok)
        ereport(WARNING, (errcode_for_file_access(), errmsg("could not write file \"%s\": %m", kMapTempFileName)));
    if (CloseTransientFile(fd) != 0 && ok) {
        ereport(WARNING, (errcode_for_file_access(), errmsg("could not close file \"%s\": %m", kMapTempFileName)));
        ok = false;
    }
    if (ok)
        (void) durable_rename(kMapTempFileName, kMapFileName, WARNING);
}

}  // namespace ptrack::pg
