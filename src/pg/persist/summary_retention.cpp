/*
 * summary_retention.cpp -- how long wal capture's summary files are kept,
 * and how they are combined so that an answer never opens thousands of them
 * (docs/design.md section 4.9; declarations in summary_io.h).  The policy,
 * which file to remove or combine next, is the engine's
 * (ptrack/retention_plan.h, unit-tested); this file lists the files, does
 * each step it proposes, and asks again.
 *
 * Run by the WAL follower only, between two batches of WAL it applies: it is
 * the only process that writes, renames and removes summaries, so a pass
 * sees no file appear or change under it.  Backends read without a lock; the
 * order of every change keeps what they read whole (summary_io.h): a
 * combined file is durable before its inputs go, files inside a valid
 * combined file are the ones removed after a crash, and removals take a
 * prefix of the chain only.
 *
 * A combined file is the union of its inputs (MergeCursor, as
 * summary_combine() does), written by the writer of every summary
 * (summary_write_durably(): "<name>.tmp", fsync, durable_rename() to the
 * combined range's name, which fsyncs the directory); only then are its
 * inputs removed.  It carries the newest modification time of its inputs,
 * so it expires when everything it holds has expired, never earlier.  A .tmp left by a crash is removed when
 * the follower starts (summary_io.h).  A file that cannot be read, or fails
 * its checks, is never combined: it is remembered, one WARNING says so, the
 * answers refuse the LSNs it covers, and expiry removes it in time.
 *
 * Strays.  A file whose range overlaps the chain the follower wrote without
 * fitting it (ptrack/summary_chain.h: a stray file with a summary-like
 * name, say) blocks nothing the answers need (they ignore it), but it would
 * block expiry and combining next to it: once it ends at or before the
 * follower's resume point it is removed, with a WARNING naming it, after the
 * files of the chain it overlaps were read whole and found good.
 *
 * Errors are WARNINGs (rate-limited by warn_save_failed()) and end the pass:
 * a half-done pass leaves a valid state.  The inputs are read through mmap()
 * and closed at once; nothing here raises an ERROR while a mapping is held.
 */
extern "C" {
#include "postgres.h"

#include <fcntl.h>
#include <math.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "access/xlog.h"
#include "storage/fd.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
}

#include "core/boundary.h"
#include "compat/compat.h"
#include "persist/map_io.h"
#include "persist/summary_io.h"
#include "ptrack/retention_plan.h"
#include "ptrack/summary_chain.h"
#include "ptrack/change_cursor.h"

namespace ptrack::pg {

namespace {

/* ptrack.wal_summary_keep_time, minutes (0: forever), from keep_time_setting (keep_time_assign()). */
int keep_time_min = 14400;
/*
 * The parameter itself, minutes as a real: an int in minutes would take
 * "1s" as 0, "forever" (as PostgreSQL 17's wal_summary_keep_time does).
 * keep_time_check() rounds it up to whole minutes instead, at least one.
 */
double keep_time_setting = 14400;

bool keep_time_check(double* newval, void**, GucSource)
{
    /* The tolerance absorbs the unit conversion's rounding ("120s" may arrive as 2.0000000000000004). */
    if (*newval > 0)
        *newval = Max(ceil(*newval - 1e-6), 1.0);
    return true;
}

void keep_time_assign(double newval, void*)
{
    keep_time_min = static_cast<int>(newval);
}
/* ptrack.wal_summary_max_files. */
int max_files = 256;

/* Combining steps in one pass: the follower goes back to the WAL in between. */
constexpr int kMaxStepsPerPass = 8;
/* A pass with nothing new to look at runs this often (expiry goes by the clock). */
constexpr long kIdlePassMs = 60 * 1000;
/* Files found damaged, remembered so that they are not combined (and one WARNING each). */
constexpr size_t kMaxBadFiles = 64;

/* The inputs of a combining step, mapped. */
struct Mapped {
    void* data;
    size_t length;
};

PTRACK_FRAME_SAFE(RetentionFile, RetentionPolicy, RetentionAction, ChainLink, ChainRole, Mapped, SummaryHeader,
                  SummaryView, SummaryCursor, MergeCursor, MergeCursor::State, SummaryFileRef);
PTRACK_ENGINE_NOEXCEPT(&summary_read_header, &summary_open, &plan_retention, &find_chain);

/* What the follower's process remembers between passes. */
struct RetentionState {
    MemoryContext cxt;           /* the listing and the buffers; reset each pass */
    TimestampTz last_pass;
    Lsn last_summarized;         /* summarized_lsn at the last pass */
    bool more_work;              /* the last pass stopped at kMaxStepsPerPass */
    SummaryFileRef bad[kMaxBadFiles];
    size_t bad_count;
    SummaryCursor cursors[kRetentionMaxInputs];
    MergeCursor::State states[kRetentionMaxInputs];
    SummaryView views[kRetentionMaxInputs];
    Mapped mapped[kRetentionMaxInputs];
};
PTRACK_FRAME_SAFE(RetentionState);
RetentionState state;

void path_of(const RetentionFile& f, char* buf, size_t len)
{
    char name[kSummaryNameLength + 1];
    summary_file_name(f.start, f.end, name, sizeof(name));
    snprintf(buf, len, "%s/%s", kSummaryDir, name);
}

bool known_bad(Lsn start, Lsn end)
{
    for (size_t i = 0; i < state.bad_count; ++i)
        if (state.bad[i].start_lsn == start && state.bad[i].end_lsn == end)
            return true;
    return false;
}

/* Remembers a damaged file and says so once. */
void note_bad(RetentionFile* f, const char* why)
{
    f->usable = false;
    if (known_bad(f->start, f->end))
        return;
    if (state.bad_count < kMaxBadFiles)
        state.bad[state.bad_count++] = SummaryFileRef{f->start, f->end};
    char path[MAXPGPATH];
    path_of(*f, path, sizeof(path));
    ereport(WARNING, (errmsg("ptrack summary file \"%s\" is not usable because %s", path, why),
                      errdetail("ptrack_get_pagemapset() refuses the LSNs it covers until it expires "
                                "(ptrack.wal_summary_keep_time)."),
                      errhint("Take a full backup: the next incremental backups start after it.")));
}

/*
 * The header and modification time of one listed file (usable false if
 * unreadable or not what its name says).  A file whose time cannot be read
 * counts as written now: it never expires early.
 */
void read_entry(const SummaryFileRef& ref, int64_t now, RetentionFile* f)
{
    *f = RetentionFile{ref.start_lsn, ref.end_lsn, 0, false, now};
    char path[MAXPGPATH];
    path_of(*f, path, sizeof(path));
    struct stat st;
    if (stat(path, &st) == 0)
        f->mtime = st.st_mtime;
    bool gone = false;
    SummaryHeader h{};
    if (summary_header_problem(ref, &h, &gone) != nullptr)
        return;
    f->flags = h.flags;
    f->usable = !known_bad(ref.start_lsn, ref.end_lsn);
}

/* The listing as plan_retention() wants it, with each file's header; palloc'd in state.cxt. */
RetentionFile* list_files(int64_t now, size_t* count)
{
    size_t n = 0;
    SummaryFileRef* refs = summary_list(&n);
    RetentionFile* files = static_cast<RetentionFile*>(palloc0(sizeof(RetentionFile) * (n + 1)));
    for (size_t i = 0; i < n; ++i)
        read_entry(refs[i], now, &files[i]);
    /* summary_list() sorts by start; equal starts (only after a crash) put the container first. */
    for (size_t i = 1; i < n; ++i)
        for (size_t j = i; j > 0 && files[j - 1].start == files[j].start && files[j - 1].end < files[j].end; --j) {
            const RetentionFile t = files[j];
            files[j] = files[j - 1];
            files[j - 1] = t;
        }
    *count = n;
    return files;
}

void erase(RetentionFile* files, size_t* count, size_t first, size_t n)
{
    memmove(files + first, files + first + n, sizeof(RetentionFile) * (*count - first - n));
    *count -= n;
}

/* A file gone is forgotten as damaged: a later file of the same range (a new combining) is another file. */
void forget_bad(Lsn start, Lsn end)
{
    for (size_t i = 0; i < state.bad_count;) {
        if (state.bad[i].start_lsn == start && state.bad[i].end_lsn == end)
            state.bad[i] = state.bad[--state.bad_count];
        else
            ++i;
    }
}

/* Unlinks files[first, first + n) in order; how many went (a WARNING for the one that stayed). */
size_t remove_files(const RetentionFile* files, size_t first, size_t n)
{
    size_t removed = 0;
    for (; removed < n; ++removed) {
        const RetentionFile& f = files[first + removed];
        char path[MAXPGPATH];
        path_of(f, path, sizeof(path));
        if (unlink(path) != 0 && errno != ENOENT) {
            warn_save_failed("its summaries", "remove file", path);
            break;
        }
        forget_bad(f.start, f.end);
    }
    if (removed > 0 && fsync_fname_ext(kSummaryDir, true, false, DEBUG1) != 0)
        warn_save_failed("its summaries", "fsync directory", kSummaryDir);
    return removed;
}

void unmap_inputs(size_t count)
{
    for (size_t i = 0; i < count; ++i)
        if (state.mapped[i].data != nullptr)
            munmap(state.mapped[i].data, state.mapped[i].length);
}

/* Maps and validates one file into slot i; false if it cannot serve (noted as bad when damaged). */
bool map_input(RetentionFile* f, size_t i)
{
    state.mapped[i] = Mapped{nullptr, 0};
    char path[MAXPGPATH];
    path_of(*f, path, sizeof(path));
    const int fd = OpenTransientFile(path, O_RDONLY | PG_BINARY);
    if (fd < 0) {
        warn_save_failed("its summaries", "open file", path);
        return false;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(kSummaryHeaderBytes)) {
        CloseTransientFile(fd);
        note_bad(f, describe_summary_status(SummaryStatus::kTooShort));
        return false;
    }
    void* data = mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_SHARED, fd, 0);
    CloseTransientFile(fd);
    if (data == MAP_FAILED) {
        warn_save_failed("its summaries", "map file", path);
        return false;
    }
    state.mapped[i] = Mapped{data, static_cast<size_t>(st.st_size)};
    const SummaryStatus status = summary_open(static_cast<const uint8_t*>(data), state.mapped[i].length,
                                              GetSystemIdentifier(), kServerMajor, crc32c, &state.views[i]);
    if (status != SummaryStatus::kOk) {
        note_bad(f, describe_summary_status(status));
        return false;
    }
    return true;
}

/*
 * Combines files[first, first + n) into one durable file, then removes them;
 * the listing then holds the combined file in their place.  False if the
 * pass should stop: nothing changed (a WARNING, or a damaged input noted),
 * or inputs stayed (inside the combined file: the next pass removes them).
 */
bool combine(RetentionFile* files, size_t* count, size_t first, size_t n)
{
    RetentionFile out = files[first];
    out.end = files[first + n - 1].end;
    out.flags = files[first + n - 1].flags;
    for (size_t i = 0; i < n; ++i)
        out.mtime = Max(out.mtime, files[first + i].mtime);

    /* From here until unmap_inputs(), nothing raises an ERROR. */
    for (size_t i = 0; i < n; ++i) {
        if (!map_input(&files[first + i], i)) {
            unmap_inputs(i + 1);
            return false;
        }
        state.cursors[i] = SummaryCursor(state.views[i]);
        state.states[i].source = &state.cursors[i];
    }
    /* The union, written as every summary is (summary_write_durably(): .tmp, fsync, durable rename). */
    MergeCursor merged(state.states, n);
    const bool written = summary_write_durably(merged, out.start, out.end, state.views[n - 1].header.timeline,
                                               out.flags, nullptr);
    unmap_inputs(n);
    if (!written)
        return false;
    char path[MAXPGPATH];
    path_of(out, path, sizeof(path));
    /*
     * As old as the newest change it holds (expiry).  Should a crash lose this
     * change, the file only looks younger: it expires later, never earlier.
     */
    struct timespec times[2];
    times[0].tv_sec = 0;
    times[0].tv_nsec = UTIME_OMIT;
    times[1].tv_sec = static_cast<time_t>(out.mtime);
    times[1].tv_nsec = 0;
    if (utimensat(AT_FDCWD, path, times, 0) != 0 || fsync_fname_ext(path, false, false, DEBUG1) != 0)
        warn_save_failed("its summaries", "set the modification time of file", path);
    ereport(DEBUG1, (errmsg("ptrack combined %zu summary files into \"%s\"", n, path)));
    /* Only now the inputs go; one that stays lies inside the combined file (the next pass removes it). */
    const bool all_removed = remove_files(files, first, n) == n;
    files[first] = out;
    erase(files, count, first + 1, n - 1);
    return all_removed;
}

/* The roles of the listing in the chain ending at `live` (ptrack/summary_chain.h); palloc'd in state.cxt. */
ChainRole* chain_roles(const RetentionFile* files, size_t count, Lsn live)
{
    auto* links = static_cast<ChainLink*>(palloc(sizeof(ChainLink) * (count + 1)));
    for (size_t i = 0; i < count; ++i)
        links[i] = ChainLink{files[i].start, files[i].end, files[i].usable};
    auto* indexes = static_cast<size_t*>(palloc(sizeof(size_t) * (count + 1)));
    auto* flags = static_cast<uint8_t*>(palloc(count + 1));
    auto* roles = static_cast<ChainRole*>(palloc(sizeof(ChainRole) * (count + 1)));
    (void) find_chain(links, count, live, indexes, flags, roles);
    pfree(links);
    pfree(indexes);
    pfree(flags);
    return roles;
}

/*
 * A stray (off the chain): the files of the chain it overlaps are read
 * whole first, so that a stray is only removed for files that can answer in
 * its place; one found damaged is marked (the chain changes: plan again).
 */
bool remove_stray(RetentionFile* files, size_t* count, const ChainRole* roles, size_t stray)
{
    const RetentionFile s = files[stray];
    for (size_t i = 0; i < *count; ++i) {
        if (roles[i] != ChainRole::kOnChain || files[i].end <= s.start || files[i].start >= s.end)
            continue;
        const bool valid = map_input(&files[i], 0);
        unmap_inputs(1);
        if (!valid)
            return true;
    }
    if (remove_files(files, stray, 1) != 1)
        return false;
    char path[MAXPGPATH];
    path_of(s, path, sizeof(path));
    ereport(WARNING, (errmsg("ptrack removed \"%s\": it is not part of the chain of change summaries its WAL "
                             "follower wrote",
                             path),
                      errdetail("Its range %X/%X to %X/%X overlaps the chain's without fitting it%s; the summaries "
                                "of the chain hold those changes.",
                                PTRACK_LSN_ARGS(s.start), PTRACK_LSN_ARGS(s.end),
                                s.usable ? "" : ", and its header does not say what its name does"),
                      errhint("Leave nothing but ptrack's own files in %s.", kSummaryDir)));
    erase(files, count, stray, 1);
    return true;
}

/* Does one step; false if the pass should stop. */
bool do_step(const RetentionAction& a, RetentionFile* files, size_t* count, const ChainRole* roles, int* steps)
{
    char path[MAXPGPATH];
    switch (a.step) {
    case RetentionStep::kNone:
        return false;
    case RetentionStep::kStray:
        return remove_stray(files, count, roles, a.first);
    case RetentionStep::kOverlap: {
        RetentionFile& container = files[a.container];
        path_of(container, path, sizeof(path));
        if (container.usable) {
            const bool valid = map_input(&container, 0);
            unmap_inputs(1);
            if (!valid)
                return true; /* now not usable: the next plan removes it if the files inside replace it */
            const size_t removed = remove_files(files, a.first, a.count);
            ereport(LOG, (errmsg("ptrack removed %zu summary files that \"%s\" holds (left by an interrupted "
                                 "combining)",
                                 removed, path)));
            erase(files, count, a.first, removed);
            return removed == a.count;
        }
        if (remove_files(files, a.container, 1) != 1)
            return false;
        ereport(LOG, (errmsg("ptrack removed the damaged summary file \"%s\": the %zu files it combined are "
                             "still there",
                             path, a.count)));
        erase(files, count, a.container, 1);
        return true;
    }
    case RetentionStep::kRemove: {
        const size_t removed = remove_files(files, 0, a.count);
        if (removed > 0)
            ereport(LOG, (errmsg("ptrack removed %zu summary files older than ptrack.wal_summary_keep_time (%d min)",
                                 removed, keep_time_min),
                          errdetail("Changes are now known from %X/%X on (ptrack_init_lsn()); an incremental backup "
                                    "from an older start needs a full backup first.",
                                    PTRACK_LSN_ARGS(files[removed].start))));
        erase(files, count, 0, removed);
        return removed == a.count;
    }
    case RetentionStep::kCombine:
        if (*steps >= kMaxStepsPerPass) {
            state.more_work = true;
            return false;
        }
        ++*steps;
        return combine(files, count, a.first, a.count);
    }
    return false;
}

}  // namespace

void define_summary_retention_gucs()
{
    DefineCustomRealVariable("ptrack.wal_summary_keep_time",
                             "How long ptrack keeps the summary files of WAL capture.",
                             "Summary files older than this are removed, oldest first; ptrack_init_lsn() moves "
                             "forward accordingly. 0 keeps them forever; other values round up to whole minutes "
                             "(1s is 1min).",
                             &keep_time_setting, 14400, 0, INT_MAX / SECS_PER_MINUTE, PGC_SIGHUP, GUC_UNIT_MIN,
                             keep_time_check, keep_time_assign, NULL);
    DefineCustomIntVariable("ptrack.wal_summary_max_files",
                            "How many summary files of WAL capture ptrack keeps at most.",
                            "Above it, the older half of the files are combined, losing checkpoint boundaries "
                            "far in the past: an incremental backup starting at one of them lists more blocks.",
                            &max_files, 256, 8, 100000, PGC_SIGHUP, 0, NULL, NULL, NULL);
}

void summary_retention_pass()
{
    const Lsn summarized = shared->follower.summarized_lsn.load(Order::kAcquire);
    const TimestampTz now = GetCurrentTimestamp();
    /* New summaries are looked at once a second at most (a checkpoint storm writes many). */
    if (!state.more_work && state.last_pass != 0 &&
        !TimestampDifferenceExceeds(state.last_pass, now, summarized == state.last_summarized ? kIdlePassMs : 1000))
        return;
    state.last_pass = now;
    state.last_summarized = summarized;
    state.more_work = false;
    if (state.cxt == nullptr)
        state.cxt = AllocSetContextCreate(TopMemoryContext, "ptrack summary retention", ALLOCSET_DEFAULT_SIZES);
    MemoryContext old = MemoryContextSwitchTo(state.cxt);
    const int64_t wall_now = static_cast<int64_t>(time(nullptr));
    size_t count = 0;
    RetentionFile* files = list_files(wall_now, &count);
    /* After a crash the follower resumes at its last save's covered LSN + 1: that boundary stays. */
    const Lsn resume_at = shared->loaded_covered_lsn != 0 ? shared->loaded_covered_lsn + 1 : 0;
    const RetentionPolicy policy{wall_now, int64_t{keep_time_min} * SECS_PER_MINUTE, static_cast<size_t>(max_files),
                                 resume_at};
    int steps = 0;
    /* Each step changes the listing (a file goes, or a damaged one is marked): this ends. */
    for (;;) {
        ChainRole* roles = chain_roles(files, count, summarized);
        const bool more = do_step(plan_retention(files, count, roles, policy), files, &count, roles, &steps);
        pfree(roles);
        if (!more)
            break;
    }
    MemoryContextSwitchTo(old);
    MemoryContextReset(state.cxt);
}

bool summary_mark_ends_at_redo(Lsn start, Lsn end)
{
    RetentionFile f{start, end, 0, true, 0};
    char path[MAXPGPATH];
    path_of(f, path, sizeof(path));
    struct stat st;
    if (known_bad(start, end) || stat(path, &st) != 0)
        return false; /* gone (combined, expired) or damaged: the boundary is lost, never an answer */
    /* From here until unmap_inputs(), nothing raises an ERROR. */
    if (!map_input(&f, 0)) {
        unmap_inputs(1);
        return false;
    }
    SummaryHeader& h = state.views[0].header;
    if ((h.flags & kSummaryEndsAtRedo) != 0) {
        unmap_inputs(1);
        return true;
    }
    /* The same content under the same name (summary_write_durably(): .tmp, fsync, durable rename over it). */
    state.cursors[0] = SummaryCursor(state.views[0]);
    const bool written =
        summary_write_durably(state.cursors[0], start, end, h.timeline, h.flags | kSummaryEndsAtRedo, nullptr);
    unmap_inputs(1);
    if (!written)
        return false;
    /* Its age stays what it was (expiry). */
    struct timespec times[2];
    times[0].tv_sec = 0;
    times[0].tv_nsec = UTIME_OMIT;
    times[1] = st.st_mtim;
    if (utimensat(AT_FDCWD, path, times, 0) != 0 || fsync_fname_ext(path, false, false, DEBUG1) != 0)
        warn_save_failed("its summaries", "set the modification time of file", path);
    ereport(DEBUG1, (errmsg("ptrack marked summary \"%s\" as ending at a checkpoint's redo LSN", path)));
    return true;
}

}  // namespace ptrack::pg
