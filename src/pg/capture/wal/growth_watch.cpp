/*
 * growth_watch.cpp -- see growth_watch.h (why it is sound, and when it
 * falls back to a full walk).
 *
 * Two dynahash tables in the follower's TopMemoryContext: `dirs`, the
 * watched directories by watch descriptor (a handful to a few hundred:
 * global, base and its databases, pg_tblspc and per tablespace its link,
 * its version directory and its databases), and `touched`, the relation
 * segment files named by events since the last walk, bounded by the number
 * of files the size table knows (growth_known_files()).  The descriptor is
 * a raw inotify descriptor, counted as PostgreSQL's external descriptors
 * (AcquireExternalFD()), non-blocking and close-on-exec.  No C++ object with
 * a destructor lives in these frames; events are read into a buffer on the
 * stack.
 */
extern "C" {
#include "postgres.h"

#include <errno.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/relpath.h"
#include "pgstat.h"
#include "storage/fd.h"
#include "utils/backend_status.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
}

#include "core/boundary.h"
#include "capture/file_growth.h"
#include "core/datadir_walk.h"
#include "capture/wal/growth_watch.h"
#include "compat/compat.h"
#include "ptrack/relpath.h"

namespace ptrack::pg {

namespace {

/* ptrack.wal_file_watch (developer option): off makes every walk full. */
bool watch_enabled = true;
/* ptrack.wal_file_watch_min_files: below it (below half of it once on) there is no watch (growth_watch.h). */
int watch_min_files = 10000;

/*
 * What every watch reports, a relation directory's and a parent's (where new
 * directories appear) alike: inotify_add_watch() on a directory already
 * watched returns its watch and replaces its mask, so one mask for all means
 * that a directory reached by a second path never loses IN_MODIFY.
 */
constexpr uint32_t kDirMask = IN_MODIFY | IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_ONLYDIR;

enum class DirKind : uint8_t {
    kRelations, /* global, base/<db>, pg_tblspc/<spc>/<version>/<db> */
    kParent,    /* base, pg_tblspc, pg_tblspc/<spc>, pg_tblspc/<spc>/<version> */
};

struct WatchedDir {
    int wd; /* the key */
    DirKind kind;
    bool walk_pending; /* a relation directory watched since the last walk, or replaced by the WAL */
    uint32_t spc_oid;
    uint32_t db_oid;
    char path[MAXPGPATH];
};

/* A segment file named by an event, or, with `following`, that and every later segment of the fork. */
struct TouchedKey {
    uint32_t spc_oid;
    uint32_t db_oid;
    uint32_t relfilenode;
    uint32_t fork;
    uint32_t segno;
};
struct TouchedEntry {
    TouchedKey key;
    bool following;
};

/* Why the next walk is full; each LOGged once per follower process. */
enum Cause : uint32_t {
    kOverflow = 1u << 0,
    kAddWatch = 1u << 1,
    kUnknownWatch = 1u << 2,
    kTooManyFiles = 1u << 3,
    kUnmounted = 1u << 4,
    kInterrupted = 1u << 5,
    kReadFailed = 1u << 6,
    kCannotSetUp = 1u << 7,
    kTwoPaths = 1u << 8,
};

enum class State : uint8_t {
    kNotSetUp,   /* not yet, or turned off and on again: set up at the next full walk */
    kOn,         /* the descriptor is open */
    kOff,        /* ptrack.wal_file_watch = off */
    kFewFiles,   /* fewer relation files than ptrack.wal_file_watch_min_files: set up when there are more */
    kUnavailable /* inotify_init1() failed: retried at each full walk */
};

PTRACK_FRAME_SAFE(WatchedDir, TouchedKey, TouchedEntry, RelFileName, RelSegment);
PTRACK_ENGINE_NOEXCEPT(&parse_relation_file_name, &parse_relation_dir);

struct Watch {
    State state;
    int fd;
    HTAB* dirs;
    HTAB* touched;
    bool full_needed;   /* the next walk must be full (growth_watch.h: when the watch cannot vouch) */
    bool rescan_needed; /* directories may have appeared: look for them before the next watched walk */
    bool draining;      /* set while events are read: still set after an ERROR, whose events are lost */
    bool walking;       /* set during a watched walk: still set after an ERROR half way */
    uint32_t logged;    /* Causes LOGged already */
    const char* last_full_reason;
    uint64_t watched_walks;
    uint64_t full_walks;
};
Watch watch = {State::kNotSetUp, -1, nullptr, nullptr, true, true, false, false, 0, "not armed yet", 0, 0};

/* The next walk is full because of `cause`: LOGged the first time, with `detail` (may be nullptr). */
void need_full(Cause cause, const char* reason, const char* detail)
{
    watch.full_needed = true;
    watch.last_full_reason = reason;
    if ((watch.logged & cause) != 0)
        return;
    watch.logged |= cause;
    if (detail != nullptr)
        ereport(LOG, (errmsg("ptrack's WAL follower walks every relation file at the next call: %s", reason),
                      errdetail_internal("%s", detail),
                      errhint("This is logged once per cause; later occurrences fall back the same way.")));
    else
        ereport(LOG, (errmsg("ptrack's WAL follower walks every relation file at the next call: %s", reason),
                      errhint("This is logged once per cause; later occurrences fall back the same way.")));
}

void clear_table(HTAB* table)
{
    HASH_SEQ_STATUS status;
    hash_seq_init(&status, table);
    while (void* entry = hash_seq_search(&status))
        (void) hash_search(table, entry, HASH_REMOVE, NULL);
}

/* The watch's state in the follower's status line. */
const char* state_text(State state)
{
    switch (state) {
    case State::kOn:
        return "on";
    case State::kOff:
        return "off (ptrack.wal_file_watch)";
    case State::kFewFiles:
        return "off (fewer relation files than ptrack.wal_file_watch_min_files)";
    case State::kUnavailable:
        return "unavailable (inotify could not be set up)";
    case State::kNotSetUp:
        break;
    }
    return "not set up yet";
}

/* The follower's row in pg_stat_activity (query): whether calls use the watch, and its walks so far. */
void report_status()
{
    char text[256];
    const char* state = state_text(watch.state);
    const long dirs = watch.state == State::kOn ? hash_get_num_entries(watch.dirs) : 0;
    snprintf(text, sizeof(text),
             "ptrack file watch: %s, %ld directories; walks: " UINT64_FORMAT " watched, " UINT64_FORMAT
             " full (last full: %s)",
             state, dirs, watch.watched_walks, watch.full_walks, watch.last_full_reason);
    pgstat_report_activity(STATE_IDLE, text);
}

void close_watch(State next)
{
    if (watch.fd >= 0) {
        close(watch.fd);
        ReleaseExternalFD();
    }
    watch.fd = -1;
    watch.state = next;
    clear_table(watch.dirs);
    clear_table(watch.touched);
    watch.full_needed = true;
    watch.rescan_needed = true;
}

/* The descriptor, opened if the option is on; false if there is none (every walk is full then). */
bool set_up()
{
    if (!watch_enabled) {
        if (watch.state != State::kOff) {
            close_watch(State::kOff);
            watch.last_full_reason = "the watch is off";
        }
        return false;
    }
    /* Hysteresis: a count around the threshold does not set the watch up and close it again at each walk. */
    const uint32_t min_files = static_cast<uint32_t>(watch_min_files);
    if (growth_known_files() < (watch.state == State::kOn ? min_files / 2 : min_files)) {
        if (watch.state != State::kFewFiles) {
            close_watch(State::kFewFiles);
            watch.last_full_reason = "few relation files";
        }
        return false;
    }
    if (watch.state == State::kOn)
        return true;
    if (!AcquireExternalFD()) {
        need_full(kCannotSetUp, "inotify cannot be set up",
                  "No file descriptor is left for it (max_files_per_process).");
        watch.state = State::kUnavailable;
        return false;
    }
    const int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (fd < 0) {
        char detail[160];
        snprintf(detail, sizeof(detail), "inotify_init1() failed: %s (fs.inotify.max_user_instances?).",
                 strerror(errno));
        ReleaseExternalFD();
        need_full(kCannotSetUp, "inotify cannot be set up", detail);
        watch.state = State::kUnavailable;
        return false;
    }
    watch.fd = fd;
    watch.state = State::kOn;
    watch.full_needed = true;
    watch.rescan_needed = true;
    watch.last_full_reason = "the watch was just set up";
    return true;
}

/*
 * Watches `path` (a directory of `kind`); a directory that is new to the
 * watch is walked by the next watched walk.  False if it exists and could
 * not be watched, or is already watched under another path or kind (a
 * tablespace created inside another tablespace's database directory, a
 * link in base/ to a database directory: one watch, whose events could name
 * either, so the next walks are full while the layout lasts).
 */
bool add_watch(const char* path, DirKind kind)
{
    const int wd = inotify_add_watch(watch.fd, path, kDirMask);
    if (wd < 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return true; /* gone meanwhile (its parent's watch saw that), or not a directory */
        char detail[MAXPGPATH + 160];
        snprintf(detail, sizeof(detail), "inotify_add_watch(\"%s\") failed: %s%s", path, strerror(errno),
                 errno == ENOSPC ? " (fs.inotify.max_user_watches)" : "");
        need_full(kAddWatch, "a directory could not be watched", detail);
        return false;
    }
    bool found = false;
    auto* dir = static_cast<WatchedDir*>(hash_search(watch.dirs, &wd, HASH_ENTER, &found));
    if (found && dir->kind == kind && strcmp(dir->path, path) == 0)
        return true;
    if (found) {
        /* Never replaced nor removed: the first path's files stay watched. */
        char detail[2 * MAXPGPATH + 64];
        snprintf(detail, sizeof(detail), "\"%s\" is the directory \"%s\"", path, dir->path);
        need_full(kTwoPaths, "a directory is reached by two paths", detail);
        return false;
    }
    dir->wd = wd;
    dir->kind = kind;
    dir->spc_oid = 0;
    dir->db_oid = 0;
    strlcpy(dir->path, path, sizeof(dir->path));
    dir->walk_pending = false;
    if (kind == DirKind::kRelations) {
        if (!parse_relation_dir(path, TABLESPACE_VERSION_DIRECTORY, &dir->spc_oid, &dir->db_oid)) {
            (void) inotify_rm_watch(watch.fd, wd);
            (void) hash_search(watch.dirs, &wd, HASH_REMOVE, NULL);
            return true;
        }
        dir->walk_pending = true; /* watched first, then walked: growth_watch.h */
    }
    return true;
}

/* for_each_oid_dir()'s callbacks: watch a database directory, a tablespace; *arg (a bool) goes false on a failure. */
void watch_database_dir(const char* path, void* ok)
{
    if (!add_watch(path, DirKind::kRelations))
        *static_cast<bool*>(ok) = false;
}

/* pg_tblspc/<spc>: the link (the version directory may appear in it later), the version directory, its databases. */
void watch_tablespace(const char* link, void* ok)
{
    if (!add_watch(link, DirKind::kParent))
        *static_cast<bool*>(ok) = false;
    char version_dir[MAXPGPATH];
    snprintf(version_dir, sizeof(version_dir), "%s/%s", link, TABLESPACE_VERSION_DIRECTORY);
    if (!add_watch(version_dir, DirKind::kParent))
        *static_cast<bool*>(ok) = false;
    for_each_oid_dir(version_dir, "", watch_database_dir, ok);
}

/*
 * Every directory that holds relation files, and every one where such a
 * directory can appear, watched: each parent before it is read, so a
 * directory created after the read queues an event (growth_watch.h).
 * Cheap: a few directories are read, none holding relation files.
 */
void rescan()
{
    watch.rescan_needed = true; /* until it completes: an ERROR half way leaves it to do again */
    bool ok = add_watch("global", DirKind::kRelations);
    ok = add_watch("base", DirKind::kParent) && ok;
    for_each_oid_dir("base", "", watch_database_dir, &ok);
    ok = add_watch("pg_tblspc", DirKind::kParent) && ok;
    for_each_oid_dir("pg_tblspc", "", watch_tablespace, &ok);
    watch.rescan_needed = !ok;
}

/* A relation file an event names: the next watched walk looks at it. */
void note_touched(const RelSegment& segment, bool following)
{
    const uint32_t bound = Max(growth_known_files(), 16384u);
    if (static_cast<uint32_t>(hash_get_num_entries(watch.touched)) >= bound) {
        need_full(kTooManyFiles, "more files changed than a full walk looks at", nullptr);
        clear_table(watch.touched);
        return;
    }
    TouchedKey key;
    memset(&key, 0, sizeof(key));
    key.spc_oid = segment.rel.spc_oid;
    key.db_oid = segment.rel.db_oid;
    key.relfilenode = segment.rel.relfilenode;
    key.fork = segment.rel.fork;
    key.segno = segment.segno;
    bool found = false;
    /* No ERROR here: this runs while a WAL record is applied (watch_note_lowered()). */
    auto* entry = static_cast<TouchedEntry*>(hash_search(watch.touched, &key, HASH_ENTER_NULL, &found));
    if (entry == nullptr) {
        need_full(kTooManyFiles, "no memory was left to remember the changed files", nullptr);
        return;
    }
    entry->following = (found && entry->following) || following;
}

void handle_event(const struct inotify_event* ev)
{
    if ((ev->mask & IN_Q_OVERFLOW) != 0) {
        need_full(kOverflow, "the kernel's event queue overflowed",
                  "Events were dropped (fs.inotify.max_queued_events); raise it if this recurs.");
        return;
    }
    auto* dir = static_cast<WatchedDir*>(hash_search(watch.dirs, &ev->wd, HASH_FIND, NULL));
    if (dir == nullptr) {
        if ((ev->mask & IN_IGNORED) == 0)
            need_full(kUnknownWatch, "an event came for a watch it does not know", nullptr);
        return;
    }
    if ((ev->mask & IN_IGNORED) != 0) {
        /* Its directory is gone (a dropped database: its files' IN_DELETE came first). */
        (void) hash_search(watch.dirs, &ev->wd, HASH_REMOVE, NULL);
        watch.rescan_needed = true;
        return;
    }
    if ((ev->mask & IN_UNMOUNT) != 0) {
        need_full(kUnmounted, "a watched file system was unmounted", dir->path);
        watch.rescan_needed = true;
        return;
    }
    if (dir->kind == DirKind::kParent || (ev->mask & IN_ISDIR) != 0) {
        watch.rescan_needed = true;
        return;
    }
    if (watch.full_needed || ev->len == 0)
        return; /* the next walk looks at every file anyway */
    RelFileName name;
    if (!parse_relation_file_name(ev->name, &name) || name.temp)
        return;
    const RelSegment segment{RelFork{dir->spc_oid, dir->db_oid, name.relfilenode, name.fork}, name.segno, false};
    note_touched(segment, false);
}

/* Makes sure a walk begun and cut short by an ERROR is followed by a full one. */
void check_interrupted()
{
    if (watch.draining || watch.walking) {
        watch.draining = false;
        watch.walking = false;
        need_full(kInterrupted, "an error interrupted the reading of events or a walk", nullptr);
    }
}

/* Whether segment file `segment` exists (for a fork whose sizes the WAL lowered: md.c's rule, no holes). */
bool segment_exists(const RelSegment& segment)
{
    char path[MAXPGPATH];
    segment_file_path(segment.rel, segment.segno, path);
    struct stat st;
    return stat(path, &st) == 0;
}

/* The touched files (a lowered fork's later segments up to its first missing one) and the directories to walk. */
Lsn walk_touched()
{
    uint32_t capacity = static_cast<uint32_t>(hash_get_num_entries(watch.touched)) + 16;
    uint32_t count = 0;
    auto* segments = static_cast<RelSegment*>(palloc(capacity * sizeof(RelSegment)));
    HASH_SEQ_STATUS status;
    hash_seq_init(&status, watch.touched);
    while (auto* entry = static_cast<TouchedEntry*>(hash_seq_search(&status))) {
        const TouchedKey& k = entry->key;
        RelSegment segment{RelFork{k.spc_oid, k.db_oid, k.relfilenode, static_cast<uint8_t>(k.fork)}, k.segno, false};
        for (;;) {
            if (count == capacity) {
                capacity *= 2;
                segments = static_cast<RelSegment*>(repalloc(segments, capacity * sizeof(RelSegment)));
            }
            segments[count++] = segment;
            /* The first missing segment goes too: growth_walk_some() forgets its remembered size. */
            if (!entry->following || !segment_exists(segment))
                break;
            ++segment.segno;
        }
    }
    const long dir_total = hash_get_num_entries(watch.dirs);
    auto** dirs = static_cast<const char**>(palloc((dir_total + 1) * sizeof(const char*)));
    uint32_t dir_count = 0;
    hash_seq_init(&status, watch.dirs);
    while (auto* dir = static_cast<WatchedDir*>(hash_seq_search(&status)))
        if (dir->walk_pending)
            dirs[dir_count++] = dir->path;
    /* Forgotten before the stat()s: an event queued from now on is read by the next drain. */
    clear_table(watch.touched);
    const Lsn lsn = growth_walk_some(segments, count, dirs, dir_count);
    hash_seq_init(&status, watch.dirs);
    while (auto* dir = static_cast<WatchedDir*>(hash_seq_search(&status)))
        dir->walk_pending = false;
    pfree(dirs);
    pfree(segments);
    return lsn;
}

}  // namespace

void watch_create()
{
    HASHCTL ctl;
    memset(&ctl, 0, sizeof(ctl));
    ctl.keysize = sizeof(int);
    ctl.entrysize = sizeof(WatchedDir);
    ctl.hcxt = TopMemoryContext;
    watch.dirs = hash_create("ptrack watched directories", 64, &ctl, HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
    memset(&ctl, 0, sizeof(ctl));
    ctl.keysize = sizeof(TouchedKey);
    ctl.entrysize = sizeof(TouchedEntry);
    ctl.hcxt = TopMemoryContext;
    watch.touched = hash_create("ptrack changed relation files", 1024, &ctl, HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
}

void watch_drain()
{
    if (watch.state != State::kOn)
        return;
    check_interrupted();
    watch.draining = true;
    /* Aligned for struct inotify_event; a read returns whole events only. */
    alignas(struct inotify_event) char buf[16384];
    for (;;) {
        const ssize_t n = read(watch.fd, buf, sizeof(buf));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            char detail[160];
            snprintf(detail, sizeof(detail), "read() of the inotify descriptor failed: %s", strerror(errno));
            need_full(kReadFailed, "the events could not be read", detail);
            close_watch(State::kNotSetUp);
            break;
        }
        if (n == 0)
            break;
        for (ssize_t at = 0; at < n;) {
            const auto* ev = reinterpret_cast<const struct inotify_event*>(buf + at);
            handle_event(ev);
            at += static_cast<ssize_t>(sizeof(struct inotify_event) + ev->len);
        }
    }
    watch.draining = false;
}

Lsn watch_full_walk(bool baseline, const char* why)
{
    check_interrupted();
    bool armed = false;
    if (set_up()) {
        /* Everything queued so far happened before the stat()s below: the walk sees it. */
        watch_drain();
        if (watch.state == State::kOn) {
            rescan();
            clear_table(watch.touched);
            armed = !watch.rescan_needed;
        }
    }
    const Lsn lsn = growth_walk(baseline);
    if (armed) {
        HASH_SEQ_STATUS status;
        hash_seq_init(&status, watch.dirs);
        while (auto* dir = static_cast<WatchedDir*>(hash_seq_search(&status)))
            dir->walk_pending = false;
        watch.full_needed = false;
    }
    ++watch.full_walks;
    watch.last_full_reason = why;
    report_status();
    return lsn;
}

Lsn watch_walk_for_call()
{
    check_interrupted();
    const bool on = set_up();
    if (!on || watch.full_needed)
        return watch_full_walk(false, on ? watch.last_full_reason : "the watch is not on");
    watch_drain();
    if (watch.state == State::kOn && watch.rescan_needed)
        rescan();
    if (watch.state != State::kOn || watch.full_needed || watch.rescan_needed)
        return watch_full_walk(false, watch.last_full_reason);
    watch.walking = true;
    const Lsn lsn = walk_touched();
    watch.walking = false;
    ++watch.watched_walks;
    report_status();
    return lsn;
}

void watch_sizes_replaced()
{
    watch.full_needed = true;
    watch.last_full_reason = "the size table was replaced";
}

void watch_note_lowered(const RelFork& rel, BlockNumber nblocks)
{
    if (watch.state != State::kOn || watch.full_needed)
        return;
    note_touched(RelSegment{rel, nblocks / RELSEG_SIZE, false}, true);
}

void watch_note_database(uint32_t spc, uint32_t db)
{
    if (watch.state != State::kOn || watch.full_needed)
        return;
    bool found = false;
    HASH_SEQ_STATUS status;
    hash_seq_init(&status, watch.dirs);
    while (auto* dir = static_cast<WatchedDir*>(hash_seq_search(&status)))
        if (dir->kind == DirKind::kRelations && dir->spc_oid == spc && dir->db_oid == db) {
            dir->walk_pending = true;
            found = true;
        }
    if (!found)
        watch.rescan_needed = true; /* not watched yet: the rescan watches and walks it */
}

void define_growth_watch_guc()
{
    DefineCustomBoolVariable("ptrack.wal_file_watch",
                             "Lets ptrack's WAL follower watch the relation directories (developer option).",
                             "On: a call stat()s only the relation files changed since the previous walk "
                             "(Linux inotify). Off: every call walks every relation file, and relation writes "
                             "queue no events; for tests and benchmarks.",
                             &watch_enabled, true, PGC_SIGHUP, GUC_NO_SHOW_ALL | GUC_NOT_IN_SAMPLE, NULL, NULL, NULL);
    DefineCustomIntVariable("ptrack.wal_file_watch_min_files",
                            "The number of relation files from which ptrack's WAL follower watches the relation "
                            "directories.",
                            "With fewer, a call walks every relation file (3-4 microseconds each) and relation "
                            "writes queue no events; once on, the watch stays until the files fall below half "
                            "of this.",
                            &watch_min_files, 10000, 0, INT_MAX, PGC_SIGHUP, GUC_NO_SHOW_ALL | GUC_NOT_IN_SAMPLE, NULL,
                            NULL, NULL);
}

}  // namespace ptrack::pg
