/*
 * summary_write.cpp -- the summary files on disk (summary_io.h): their
 * names, the listing every reader starts from, and the WAL follower's side,
 * which alone writes and removes them.
 *
 * Why a file of its own: a summary is written at every cut of the follower
 * (docs/design.md section 4.5), durably and never in place: the engine's
 * summary_write() fills "<name>.tmp", which is fsynced and renamed
 * (durable_rename() fsyncs the directory too), so that after a crash a
 * summary exists whole or not at all.  A failed write is one rate-limited
 * WARNING (map_io.h) and leaves nothing behind: the caller keeps its set
 * and tries again.  Removal (a fresh start, a resume that drops what lies
 * past the resume point) fsyncs the directory once at the end; a directory
 * it cannot read, or a file it cannot remove, makes it return false after a
 * WARNING, never an ERROR: the follower then holds everything until it can
 * (follower_summaries.cpp), instead of running with summaries it cannot vouch for.
 *
 * The writer's buffers are static: only the follower writes, one summary
 * at a time, and nothing here allocates on the write itself.
 */
extern "C" {
#include "postgres.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "access/xlog.h"
#include "storage/fd.h"
}

#include "core/boundary.h"
#include "compat/compat.h"
#include "persist/map_io.h"
#include "persist/state_files.h"
#include "persist/summary_io.h"

namespace ptrack::pg {

namespace {

constexpr char kSummarySuffix[] = ".summary";
constexpr char kTempSuffix[] = ".tmp";
constexpr size_t kWriteBufferBytes = 64 * 1024;

/* The writer's staging buffer and chunk scratch (summary_write()), the follower's only. */
alignas(8) uint8_t write_buffer[kWriteBufferBytes];
ChunkBits write_scratch;

PTRACK_FRAME_SAFE(SummaryFileRef, SummaryHeader, SummaryWriteBuffers, FdSink);
PTRACK_ENGINE_NOEXCEPT(&summary_write);

/* Parses 16 upper-case hex digits. */
bool parse_hex16(const char* s, uint64_t* out)
{
    uint64_t v = 0;
    for (int i = 0; i < 16; ++i) {
        const char c = s[i];
        uint64_t d;
        if (c >= '0' && c <= '9')
            d = static_cast<uint64_t>(c - '0');
        else if (c >= 'A' && c <= 'F')
            d = static_cast<uint64_t>(c - 'A' + 10);
        else
            return false;
        v = (v << 4) | d;
    }
    *out = v;
    return true;
}

/* A summary's name "<16 hex><16 hex>.summary" with start < end, into *ref. */
bool parse_summary_name(const char* name, SummaryFileRef* ref)
{
    if (strlen(name) != kSummaryNameLength || strcmp(name + 32, kSummarySuffix) != 0)
        return false;
    return parse_hex16(name, &ref->start_lsn) && parse_hex16(name + 16, &ref->end_lsn) &&
           ref->start_lsn < ref->end_lsn;
}

/*
 * "<summary name>.tmp": a summary being written, or one a crash
 * interrupted.  Only these: the folder also holds the map's own files
 * (state_files.h), whose temporary files are theirs to remove.
 */
bool is_temp_name(const char* name)
{
    if (strlen(name) != kSummaryNameLength + strlen(kTempSuffix) || strcmp(name + kSummaryNameLength, kTempSuffix) != 0)
        return false;
    char summary[kSummaryNameLength + 1];
    memcpy(summary, name, kSummaryNameLength);
    summary[kSummaryNameLength] = '\0';
    SummaryFileRef ref;
    return parse_summary_name(summary, &ref);
}

int compare_refs(const void* a, const void* b)
{
    const auto* x = static_cast<const SummaryFileRef*>(a);
    const auto* y = static_cast<const SummaryFileRef*>(b);
    if (x->start_lsn != y->start_lsn)
        return x->start_lsn < y->start_lsn ? -1 : 1;
    return x->end_lsn < y->end_lsn ? -1 : x->end_lsn > y->end_lsn ? 1 : 0;
}

/* Unlinks "<kSummaryDir>/<name>"; false after a WARNING on failure (other than a file already gone). */
bool unlink_in_dir(const char* name)
{
    char path[MAXPGPATH];
    snprintf(path, sizeof(path), "%s/%s", kSummaryDir, name);
    if (unlink(path) == 0 || errno == ENOENT)
        return true;
    ereport(WARNING, (errcode_for_file_access(), errmsg("ptrack could not remove file \"%s\": %m", path),
                      errhint("Make %s writable by the server's user: the WAL follower waits until it can remove "
                              "the summaries it no longer vouches for.",
                              kSummaryDir)));
    return false;
}

/*
 * Removes from kSummaryDir every .tmp file and every summary for which
 * `drop(ref, arg)` is true; *removed: how many summaries were removed.
 * False (after a WARNING) if the directory could not be read or a file not
 * removed: the caller must not go on as if they were gone, and tries again.
 */
bool remove_where(bool (*drop)(const SummaryFileRef&, void*), void* arg, uint32_t* removed)
{
    *removed = 0;
    DIR* dir = AllocateDir(kSummaryDir);
    if (dir == NULL) {
        if (errno == ENOENT)
            return true;
        ereport(WARNING, (errcode_for_file_access(), errmsg("ptrack could not open directory \"%s\": %m", kSummaryDir),
                          errhint("Make %s a directory the server's user can read and write.", kSummaryDir)));
        return false;
    }
    bool ok = true;
    bool any = false;
    struct dirent* de;
    while ((de = ReadDir(dir, kSummaryDir)) != NULL) {
        SummaryFileRef ref;
        if (is_temp_name(de->d_name)) {
            ok = unlink_in_dir(de->d_name) && ok;
            any = true;
        } else if (parse_summary_name(de->d_name, &ref) && drop(ref, arg)) {
            if (unlink_in_dir(de->d_name))
                ++*removed;
            else
                ok = false;
            any = true;
        }
    }
    FreeDir(dir);
    if (any && fsync_fname_ext(kSummaryDir, true, false, WARNING) != 0)
        ok = false;
    return ok;
}

}  // namespace

int wal_summary_memory_mb = 64;

size_t wal_summary_budget_bytes()
{
    return Max(static_cast<size_t>(wal_summary_memory_mb) << 20, ChangeSet::kMinBudget);
}

void summary_file_name(Lsn start_lsn, Lsn end_lsn, char* buf, size_t len)
{
    snprintf(buf, len, "%016llX%016llX%s", static_cast<unsigned long long>(start_lsn),
             static_cast<unsigned long long>(end_lsn), kSummarySuffix);
}

SummaryFileRef* summary_list(size_t* count)
{
    *count = 0;
    size_t capacity = 16;
    auto* refs = static_cast<SummaryFileRef*>(palloc(capacity * sizeof(SummaryFileRef)));
    DIR* dir = AllocateDir(kSummaryDir);
    if (dir == NULL && errno == ENOENT)
        return refs;
    struct dirent* de;
    while ((de = ReadDir(dir, kSummaryDir)) != NULL) {
        SummaryFileRef ref;
        if (!parse_summary_name(de->d_name, &ref))
            continue;
        if (*count == capacity) {
            capacity *= 2;
            refs = static_cast<SummaryFileRef*>(repalloc(refs, capacity * sizeof(SummaryFileRef)));
        }
        refs[(*count)++] = ref;
    }
    FreeDir(dir);
    qsort(refs, *count, sizeof(SummaryFileRef), compare_refs);
    return refs;
}

bool summary_write_durably(ChangeCursor& content, Lsn start_lsn, Lsn end_lsn, uint32_t timeline, uint32_t flags,
                           SummaryHeader* written)
{
    /* kSummaryDir is the wal source's folder, the only one that writes summaries. */
    if (!ensure_state_folder("its change summaries"))
        return false;
    char name[kSummaryNameLength + 1];
    summary_file_name(start_lsn, end_lsn, name, sizeof(name));
    char path[MAXPGPATH], temp[MAXPGPATH];
    snprintf(path, sizeof(path), "%s/%s", kSummaryDir, name);
    snprintf(temp, sizeof(temp), "%s%s", path, kTempSuffix);
    const int fd = OpenTransientFile(temp, O_RDWR | O_CREAT | O_TRUNC | PG_BINARY);
    if (fd < 0) {
        warn_save_failed("its change summary", "create file", temp);
        return false;
    }
    SummaryHeader header{};
    header.pg_major = kServerMajor;
    header.timeline = timeline;
    header.system_identifier = GetSystemIdentifier();
    header.start_lsn = start_lsn;
    header.end_lsn = end_lsn;
    header.flags = flags;
    const SummaryWriteBuffers buffers{write_buffer, sizeof(write_buffer), &write_scratch};
    FdSink sink(fd);
    const SummaryStatus status = summary_write(header, content, crc32c, crc32c_update, buffers, sink, written);
    bool ok = status == SummaryStatus::kOk;
    if (!ok) {
        if (status != SummaryStatus::kWriteFailed)
            errno = EINVAL; /* a caller's mistake (range, buffer): said as a failed write, never a wrong file */
        warn_save_failed("its change summary", "write file", temp);
    } else if (pg_fsync(fd) != 0) {
        warn_save_failed("its change summary", "fsync file", temp);
        ok = false;
    }
    if (CloseTransientFile(fd) != 0 && ok) {
        warn_save_failed("its change summary", "close file", temp);
        ok = false;
    }
    /* durable_rename() fsyncs the file, the new name and the directory. */
    if (!ok || !rename_for_save(temp, path, "its change summary")) {
        discard_temp_file(temp);
        return false;
    }
    return true;
}

const char* summary_dir_problem(char* buf, size_t len)
{
    struct stat st;
    if (stat(kSummaryDir, &st) != 0) {
        if (errno == ENOENT)
            return nullptr; /* the first write creates it */
        snprintf(buf, len, "could not stat directory \"%s\": %s", kSummaryDir, strerror(errno));
        return buf;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(buf, len, "\"%s\" is not a directory", kSummaryDir);
        return buf;
    }
    DIR* dir = opendir(kSummaryDir);
    if (dir == NULL) {
        snprintf(buf, len, "could not open directory \"%s\": %s", kSummaryDir, strerror(errno));
        return buf;
    }
    closedir(dir);
    if (access(kSummaryDir, W_OK | X_OK) != 0) {
        snprintf(buf, len, "could not write in directory \"%s\": %s", kSummaryDir, strerror(errno));
        return buf;
    }
    return nullptr;
}

bool summary_remove_all(const char* why)
{
    uint32_t removed = 0;
    const bool ok = remove_where([](const SummaryFileRef&, void*) { return true; }, nullptr, &removed);
    if (removed > 0)
        ereport(LOG, (errmsg("ptrack removed its %u change summaries: %s", removed, why)));
    return ok;
}

bool summary_keep_chain_to(Lsn resume_end, Lsn* kept)
{
    *kept = 0;
    /* Past the resume point they describe WAL that will be read again (or another timeline's). */
    uint32_t past = 0;
    const bool ok = remove_where(
        [](const SummaryFileRef& ref, void* arg) { return ref.end_lsn > *static_cast<Lsn*>(arg); }, &resume_end,
        &past);
    if (past > 0)
        ereport(LOG, (errmsg("ptrack removed %u change summaries that end after %X/%X, where its WAL follower "
                             "resumes",
                             past, PTRACK_LSN_ARGS(resume_end))));
    if (!ok)
        return false;
    size_t count = 0;
    SummaryFileRef* refs = summary_list(&count);
    Lsn end = count > 0 ? refs[count - 1].end_lsn : 0;
    for (size_t i = 0; i < count; ++i)
        end = Max(end, refs[i].end_lsn);
    pfree(refs);
    if (count == 0)
        return true;
    if (end != resume_end) {
        char why[160];
        snprintf(why, sizeof(why), "they end at %X/%X, not at %X/%X where the WAL follower resumes (the chain is "
                 "broken)", PTRACK_LSN_ARGS(end), PTRACK_LSN_ARGS(resume_end));
        return summary_remove_all(why);
    }
    *kept = end;
    return true;
}

}  // namespace ptrack::pg
