/*
 * state_files.cpp -- see state_files.h.
 */
extern "C" {
#include "postgres.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "access/xlog_internal.h"
#include "storage/fd.h"
}

#include "persist/map_io.h"
#include "persist/map_persistence.h"
#include "persist/state_files.h"
#include "persist/summary_io.h"
#include "ptrack/bypass_journal.h"
#include "ptrack/limit_file.h"
#include "ptrack/map_delta.h"
#include "ptrack/map_file.h"

namespace ptrack::pg {

namespace {

constexpr int kFileCount = static_cast<int>(StateFile::kSizesNew) + 1;
/* In StateFile's order. */
constexpr const char* kNames[kFileCount] = {kMapFileName,   kMapTempFileName, kMapDeltaFileName, kLimitFileName,
                                            kLimitTempFileName, "ptrack.sizes",   "ptrack.sizes.new"};
/* The files that go with a map, moved before it (the temporary files are never moved: removed). */
constexpr StateFile kCompanions[] = {StateFile::kMapDelta, StateFile::kLimits, StateFile::kSizes,
                                     StateFile::kSizesNew};
/* A copy across file systems, in the folder it goes to, until it is renamed. */
constexpr char kMoveTempName[] = "ptrack.move.tmp";
constexpr size_t kPathBytes = 64;
constexpr size_t kCopyBufferBytes = 64 * 1024;

/* The paths in the running source's folder, filled at the first state_file(). */
char own_paths[kFileCount][kPathBytes];
bool own_paths_filled = false;

/* The running source's folder: "" (the data directory) or kSummaryDir. */
const char* own_folder()
{
    Assert(persist_source != nullptr);
    return persist_source->files_dir;
}

PTRACK_FRAME_SAFE(MapFileHeader);
PTRACK_ENGINE_NOEXCEPT(&map_file_decode_header);

const char* other_folder()
{
    return own_folder()[0] == '\0' ? kSummaryDir : "";
}

/* The folder as a directory to open or fsync. */
const char* as_directory(const char* folder)
{
    return folder[0] == '\0' ? "." : folder;
}

/* The folder in a message. */
const char* folder_name(const char* folder)
{
    return folder[0] == '\0' ? "the data directory" : folder;
}

void path_in(const char* folder, const char* name, char* buf, size_t len)
{
    if (folder[0] == '\0')
        strlcpy(buf, name, len);
    else
        snprintf(buf, len, "%s/%s", folder, name);
}

bool exists(const char* path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* The header of the map file at `path`, if it can be read and decoded. */
bool read_map_header(const char* path, MapFileHeader* header)
{
    const int fd = OpenTransientFile(path, O_RDONLY | PG_BINARY);
    if (fd < 0)
        return false;
    uint8_t bytes[kMapFileHeaderBytes];
    const bool ok =
        read_at(fd, bytes, sizeof(bytes), 0) && map_file_decode_header(bytes, crc32c, header) == HeaderStatus::kOk;
    CloseTransientFile(fd);
    return ok;
}

/* Removes the files named `names` from `folder`, each with a LOG line. */
void remove_in(const char* folder, const char* const* names, size_t count)
{
    char path[kPathBytes];
    for (size_t i = 0; i < count; ++i) {
        path_in(folder, names[i], path, sizeof(path));
        remove_file_if_exists(path, LOG);
    }
}

void remove_all_in(const char* folder)
{
    const char* const extra[] = {kMoveTempName};
    remove_in(folder, kNames, kFileCount);
    remove_in(folder, extra, 1);
}

/*
 * The running source's folder exists, made durably if it did not; false
 * with errno and *action set ("create directory", "fsync directory").
 * No message: the postmaster uses it too, and a WARNING of
 * warn_save_failed() there would silence, by its rate limit, the first
 * failure of every process it starts.
 */
bool make_own_folder(const char** action)
{
    if (own_folder()[0] == '\0')
        return true;
    struct stat st;
    if (stat(own_folder(), &st) == 0 && S_ISDIR(st.st_mode))
        return true;
    *action = "create directory";
    if (MakePGDirectory(own_folder()) != 0) {
        if (errno != EEXIST || stat(own_folder(), &st) != 0 || !S_ISDIR(st.st_mode)) {
            if (errno == EEXIST)
                errno = ENOTDIR; /* a file in its place */
            return false;
        }
    }
    *action = "fsync directory";
    return fsync_fname_ext(own_folder(), true, false, DEBUG1) == 0 && fsync_fname_ext(XLOGDIR, true, false, DEBUG1) == 0;
}

/* Why a move failed, for the WARNING of the map that is then not trusted. */
char move_failure[256];

bool fail_move(const char* action, const char* path)
{
    snprintf(move_failure, sizeof(move_failure), "it could not be moved to %s: could not %s \"%s\": %s",
             as_directory(own_folder()), action, path, strerror(errno));
    return false;
}

bool fsync_folders(const char* to_folder, const char* from_folder)
{
    if (fsync_fname_ext(as_directory(to_folder), true, false, LOG) != 0)
        return fail_move("fsync directory", as_directory(to_folder));
    if (fsync_fname_ext(as_directory(from_folder), true, false, LOG) != 0)
        return fail_move("fsync directory", as_directory(from_folder));
    return true;
}

/* Copies `from` into `to` (created or truncated) and fsyncs it; false with fail_move(). */
bool copy_fsynced(const char* from, const char* to)
{
    const int in = OpenTransientFile(from, O_RDONLY | PG_BINARY);
    if (in < 0)
        return fail_move("open", from);
    const int out = OpenTransientFile(to, O_WRONLY | O_CREAT | O_TRUNC | PG_BINARY);
    if (out < 0) {
        const int saved = errno;
        CloseTransientFile(in);
        errno = saved;
        return fail_move("create", to);
    }
    char* buffer = static_cast<char*>(palloc(kCopyBufferBytes));
    bool ok = true;
    for (uint64_t offset = 0; ok;) {
        const ssize_t n = pg_pread(in, buffer, kCopyBufferBytes, static_cast<off_t>(offset));
        if (n < 0)
            ok = fail_move("read", from);
        else if (n == 0)
            break;
        else if (!write_at(out, buffer, static_cast<size_t>(n), offset))
            ok = fail_move("write", to);
        offset += n > 0 ? static_cast<uint64_t>(n) : 0;
    }
    pfree(buffer);
    if (ok && pg_fsync(out) != 0)
        ok = fail_move("fsync", to);
    const int saved = errno;
    CloseTransientFile(in);
    if (CloseTransientFile(out) != 0 && ok)
        ok = fail_move("close", to);
    errno = saved;
    return ok;
}

/*
 * Moves `name` from the other folder into the source's own, durably: a
 * rename, or across file systems a copy renamed into place and the
 * original unlinked.  A crash at any step leaves the file in the other
 * folder (then moved again) or in both (identical; moved again), never in
 * neither.  False with move_failure set.
 */
bool move_here(const char* name)
{
    char from[kPathBytes], to[kPathBytes];
    path_in(other_folder(), name, from, sizeof(from));
    path_in(own_folder(), name, to, sizeof(to));
    if (rename(from, to) == 0)
        return fsync_folders(own_folder(), other_folder());
    if (errno != EXDEV)
        return fail_move("rename", from);
    char temp[kPathBytes];
    path_in(own_folder(), kMoveTempName, temp, sizeof(temp));
    if (!copy_fsynced(from, temp))
        return false;
    /* durable_rename() fsyncs the file, renames it and fsyncs it and its directory again. */
    if (durable_rename(temp, to, LOG) != 0)
        return fail_move("rename", temp);
    if (unlink(from) != 0)
        return fail_move("remove", from);
    return fsync_folders(own_folder(), other_folder());
}

/* Moves this source's map and its companions from the other folder; false with move_failure set. */
bool move_files_here()
{
    const char* action = nullptr;
    if (!make_own_folder(&action))
        return fail_move(action, own_folder());
    char path[kPathBytes];
    char moved[256] = "";
    for (const StateFile file : kCompanions) {
        const char* name = kNames[static_cast<int>(file)];
        path_in(other_folder(), name, path, sizeof(path));
        if (!exists(path))
            continue; /* never saved, or moved before a crash */
        if (!move_here(name))
            return false;
        strlcat(moved, ", ", sizeof(moved));
        strlcat(moved, name, sizeof(moved));
    }
    /* The commit: from here on the source's own folder holds the newest map. */
    if (!move_here(kMapFileName))
        return false;
    ereport(LOG, (errmsg("ptrack moved its files from %s to %s", folder_name(other_folder()), folder_name(own_folder())),
                  errdetail("Moved: %s%s.", kMapFileName, moved)));
    return true;
}

}  // namespace

const char* state_file(StateFile file)
{
    if (!own_paths_filled) {
        for (int i = 0; i < kFileCount; ++i)
            path_in(own_folder(), kNames[i], own_paths[i], kPathBytes);
        own_paths_filled = true;
    }
    return own_paths[static_cast<int>(file)];
}

bool ensure_state_folder(const char* what)
{
    const char* action = nullptr;
    if (make_own_folder(&action))
        return true;
    warn_save_failed(what, action, own_folder());
    return false;
}

bool fsync_state_folder_for_save(const char* what)
{
    if (fsync_fname_ext(as_directory(own_folder()), true, false, DEBUG1) == 0)
        return true;
    warn_save_failed(what, "fsync directory", as_directory(own_folder()));
    return false;
}

SettledMap settle_state_files()
{
    const char* own_map = state_file(StateFile::kMap);
    char other_map[kPathBytes];
    path_in(other_folder(), kMapFileName, other_map, sizeof(other_map));
    static char judged[kPathBytes]; /* the other folder's map, judged where it is */
    MapFileHeader other{};
    MapFileHeader own{};
    char temp[kPathBytes];
    path_in(own_folder(), kMoveTempName, temp, sizeof(temp));
    remove_file_if_exists(temp, LOG); /* a copy a crash interrupted */
    const char* action = nullptr;
    (void) make_own_folder(&action); /* for the sizes of a restored backup; each save makes sure again */
    if (!exists(other_map))
        return {own_map, nullptr};
    const bool other_is_ours = read_map_header(other_map, &other) && other.source == persist_source->id;
    const bool own_exists = exists(own_map);
    if (!other_is_ours) {
        if (own_exists)
            return {own_map, nullptr};
        strlcpy(judged, other_map, sizeof(judged));
        return {judged, nullptr};
    }
    if (own_exists) {
        /* Both: the other folder's is the newer one only if the source's own is its and older. */
        if (!read_map_header(own_map, &own) || own.source != persist_source->id ||
            other.covered_lsn <= own.covered_lsn)
            return {own_map, nullptr};
        ereport(LOG, (errmsg("ptrack map file \"%s\" (complete up to %X/%X) is newer than \"%s\" (%X/%X): the files "
                             "with it are used",
                             other_map, PTRACK_LSN_ARGS(other.covered_lsn), own_map,
                             PTRACK_LSN_ARGS(own.covered_lsn))));
        remove_all_in(own_folder());
    }
    if (!move_files_here())
        return {own_map, move_failure};
    return {own_map, nullptr};
}

void clear_other_folder()
{
    remove_all_in(other_folder());
    /* The hooks' journals (capture/hooks/bypass_journal_io.h) are of the data directory and the hooks only. */
    if (other_folder()[0] == '\0') {
        const char* const journals[] = {kBypassJournalFileName, kBypassJournalOldFileName};
        remove_in("", journals, 2);
    }
}

void remove_state_files()
{
    remove_all_in("");
    remove_all_in(kSummaryDir);
}

}  // namespace ptrack::pg
