/*
 * capture_wal.cpp -- the WAL follower: the capture source of servers without
 * the core patch's hooks (docs/design.md section 7).
 *
 * A background worker reads the server's WAL with PostgreSQL's xlogreader
 * (the no-wait page reader of xlogutils.c, which also follows timeline
 * switches through the timeline history files) up to the flush position, or
 * the replay position on a hot standby, and marks what each record changed
 * with the record's end LSN (wal_records.cpp).  A record that ends at or
 * after L marks with an LSN >= L, so pagemapset(L) lists its blocks.
 *
 * Its clock and its saves (capture_source.h): the follower itself saves the
 * map, complete up to the end of the last record it applied (covered LSN),
 * after every checkpoint record it reads and when it stops.  The WAL after
 * that point stays on disk through a physical replication slot of its own
 * (kFollowerSlotName), advanced only after the save that covers it, so after
 * a restart or a crash the follower resumes at the saved covered LSN and
 * nothing is lost.  The slot honours max_slot_wal_keep_size: a stalled
 * follower never fills the disk; if its WAL is removed anyway (the slot was
 * invalidated or dropped, pg_resetwal), reading fails and tracking restarts
 * with a WARNING, never silently.
 *
 * A fresh map starts where the follower starts reading (the slot's position:
 * at worst the latest checkpoint's redo LSN), so ptrack_init_lsn() is that
 * position, no later than the start of any backup taken afterwards
 * (wal_load.cpp adds a floor after a clean shutdown), nor earlier than the
 * baseline of file sizes it marks growth from: a walk when it starts, or,
 * in a data directory restored from a base backup, the sizes wal_load.cpp
 * recorded before recovery, which make the map complete from the backup's
 * redo LSN (a FULL backup on a fresh standby is then a valid parent).
 * There the follower reads the WAL from that redo LSN even when its slot
 * starts later (recovery's restartpoints, or its end-of-recovery checkpoint
 * when the follower starts after recovery, removed the WAL before it):
 * segments pg_wal no longer holds come through restore_command
 * (wal_archive.h), and the record that ends exactly at the redo LSN is read
 * too, so ptrack_init_lsn() is the redo LSN itself, the start LSN a backup
 * tool gives the restored backup.
 *
 * Summaries (docs/design.md section 9.1): every change goes to an exact
 * change set in private memory, written as immutable summary files
 * (persist/summary_io.h) at every save, at checkpoints' redo LSNs, on a
 * backend's request and when the set is full; the rules are at struct
 * Summaries.  The SQL functions answer from them (wal_summaries() below,
 * sql/summary_scan.cpp).  The map is not marked (section 9.5): it keeps
 * only the resume point (its covered LSN, init_lsn) in the smallest
 * geometry, whatever ptrack.map_size says; "marks" above means the change
 * set.  The developer setting ptrack.wal_legacy_map has the follower mark a
 * map of ptrack.map_size too, as before, and ptrack.wal_answer_source = map
 * then answers from it (bench/vs_summarizer.sh --legacy-map).  A restored backup's
 * fresh start goes on from the summaries the postmaster wrote of the WAL it
 * read before recovery (summaries_continue_scan(), scan_summary.h).
 *
 * Errors: the main loop catches a PostgreSQL ERROR (sigsetjmp, as every
 * auxiliary process does), reports it, frees what the attempt allocated and
 * starts over after a pause (1 s, doubling up to 30 s): a persistent error
 * (no free replication slot, max_replication_slots) costs two log lines per
 * pause, never a spin.  An ERROR while reading the WAL restarts tracking,
 * since marks may be missing.  An ERROR before the start is established is
 * published (FollowerStartError, shared_state.h): ptrack_status() shows it
 * as off_reason, and the SQL functions fail at once with it; one raised
 * half-way through establishing it makes the whole start run again.  So is
 * the reason the summaries are held (their directory unusable, struct
 * Summaries): the follower then applies nothing until they can be kept.  SIGTERM
 * (shutdown, or the checkpointer releasing the slot) is obeyed at the top of
 * every loop and after every ERROR, before anything is retried: the
 * follower saves what it applied and exits.  No C++ object with a
 * destructor lives in these frames.
 */
extern "C" {
#include "postgres.h"

#include <unistd.h>

#include <sys/stat.h>

#include "access/rmgr.h"
#include "access/timeline.h"
#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "access/xlogreader.h"
#include "access/xlogrecovery.h"
#include "access/xlogutils.h"
#include "catalog/pg_control.h"
#include "common/file_utils.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "replication/slot.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/condition_variable.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/spin.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"
}

#include <new>

#include "core/boundary.h"
#include "capture/capture.h"
#include "capture/capture_source.h"
#include "capture/wal/capture_wal.h"
#include "capture/wal/map_migration.h"
#include "capture/wal/wal_load.h"
#include "capture/file_growth.h"
#include "capture/wal/growth_watch.h"
#include "persist/limit_file_io.h"
#include "persist/map_io.h"
#include "persist/map_persistence.h"
#include "persist/summary_io.h"
#include "core/shared_state.h"
#include "capture/wal_archive.h"
#include "capture/wal_records.h"
#include "compat/compat.h"

namespace ptrack::pg {

namespace {

/* ptrack.wal_wait_timeout, in ms: how long the SQL functions wait for the follower. */
int wal_wait_timeout_ms = 60000;

/*
 * ptrack.wal_answer_source (developer option): the SQL functions answer from
 * the summary files (the default) or, only with ptrack.wal_legacy_map (below),
 * from the map, for comparisons (docs/design.md section 9.2).
 */
enum AnswerSource { kAnswerFromSummaries, kAnswerFromMap };
/*
 * ptrack.wal_legacy_map (developer option, postmaster only): the follower
 * also marks the map, the limit table and the growth in the map, in the
 * geometry ptrack.map_size gives, as it did before the summaries took over;
 * only then does ptrack.wal_answer_source = map answer from it.  For
 * bench/vs_summarizer.sh's comparison of the follower's cost.  Off: the
 * map keeps only the resume point, in the smallest geometry
 * (docs/design.md section 9).
 */
bool wal_legacy_map = false;
int wal_answer_source = kAnswerFromSummaries;
const struct config_enum_entry answer_source_options[] = {
    {"summaries", kAnswerFromSummaries, false}, {"map", kAnswerFromMap, false}, {NULL, 0, false}};

/*
 * A redo LSN closer in time than kMinRedoCutMs to the last one cut at, with
 * less than kMaxRedoLetGoWal bytes of WAL since the summary being built
 * began, is not cut at (note_redo()).  Both must hold: a follower catching
 * up reads the redo LSNs of minutes of checkpoints within milliseconds, and
 * each of them may be a backup's start.
 */
constexpr int kMinRedoCutMs = 200;
constexpr Lsn kMaxRedoLetGoWal = 1024 * 1024;

/*
 * Redo LSNs learnt ahead of the follower and not reached yet (on 15 only
 * GetRedoRecPtr() tells them, and a follower behind the WAL may learn the
 * next one before it reaches the last): each may be a backup's start.  When
 * more are pending, the one whose loss joins the least WAL goes (never the
 * newest): a backup starting there gets the blocks of one summary more,
 * never fewer.
 */
constexpr uint32_t kMaxRedoTargets = 16;

/*
 * ptrack.wal_batch_delay (developer option, ms): the follower sleeps this
 * long after each batch of WAL it applied, to stay behind the WAL while it
 * polls (t/036_redo_targets.pl); 0 in production.
 */
int wal_batch_delay_ms = 0;

/*
 * A save (after a checkpoint record) comes at most this often, in ms: a
 * storm of checkpoints (t/010 issues hundreds a second) would otherwise
 * cost a walk and a map flush each and leave the follower behind the WAL.
 * A later save only keeps the WAL a little longer (the slot advances at
 * each save) and a restarted follower reads a little more again.
 */
constexpr int kMinSaveIntervalMs = 1000;

/*
 * How long the follower sleeps when it has read all the WAL there is, unless
 * woken (ms).  A backend that needs it caught up sets its latch
 * (wait_for_follower()), so the pause delays no answer; each wake-up costs
 * a context switch and the last page read again, and under a steady load
 * the follower would otherwise wake for every few records.
 */
constexpr long kIdlePollMs = 200;

volatile sig_atomic_t shutdown_requested = false;

/* Seconds the follower waits after an ERROR before it tries again (grows while errors repeat). */
int error_backoff_s = 1;

void follower_sigterm(SIGNAL_ARGS)
{
    const int save_errno = errno;
    shutdown_requested = true;
    SetLatch(MyLatch);
    errno = save_errno;
}

/*
 * The bounds of ptrack.wal_summary_memory (wal_summary_memory_mb, in MB,
 * persist/summary_io.h): the engine's smallest budget, and 1 TB (private memory, taken
 * as the set grows: a sanity cap, well inside a 64-bit address space; a
 * 32-bit size_t holds 1 GB).
 */
constexpr int kMinSummaryMemoryMb = static_cast<int>(ChangeSet::kMinBudget >> 20);
constexpr int kMaxSummaryMemoryMb = sizeof(size_t) >= 8 ? 1024 * 1024 : 1024;

/*
 * The exact change set (ptrack/change_set.h) the follower records besides
 * the map, and how it is cut into summary files (persist/summary_io.h;
 * docs/design.md section 9).  A record's changes count at its end LSN.  A
 * summary [start, end) holds every change at an LSN in that range, so the
 * record ending exactly at a cut's LSN belongs to the later summary.  The
 * in-memory set holds every change at an LSN >= set_start that the follower
 * has applied (records ending before set_start are not recorded: nothing
 * claims them).  A cut writes the set as [set_start, cut_at) and starts a
 * new one at cut_at:
 *   - at follower.next + 1 (saves, requests, a full set): the last record
 *     applied ends at next, so [.., next + 1) holds it and no record ends
 *     inside; the map's covered LSN C goes with a chain ending at C + 1.
 *     Such a cut first cuts at next with that record read again
 *     (cut_at_last_record_end()): a redo LSN learnt later exactly at next
 *     finds a summary starting there, and marks the one ending there
 *     (note_redo(), summary_mark_ends_at_redo());
 *   - at a redo LSN R before the first record ending at or after R is
 *     applied (nothing to move), or, when the follower stands exactly at R,
 *     at R with the last record (ending at R) read again into the new set
 *     (cut_readd); such summaries carry kSummaryEndsAtRedo;
 *   - at next with cut_readd when an add was refused (the set is full): the
 *     written set may hold part of that record (extra), the new one all of it.
 * A cut that cannot be written (disk full) is retried with a pause and no
 * WAL is applied meanwhile: the set is never dropped.
 *
 * Held: a (re)start of the summaries first removes the files it no longer
 * vouches for (summaries_start_fresh(), summaries_resume(),
 * summaries_after_restart()).  If their directory cannot be used for that
 * (unreadable, not a directory: summary_dir_problem()), the step waits in
 * `held` and nothing is applied, cut or saved until it is done (retried
 * with a pause, 1 s doubling up to 30 s; a WARNING at most once a minute;
 * the reason is the follower's start error, so ptrack_status() and the SQL
 * functions show it): the map never gets ahead of the summaries, and the
 * chain a resume keeps stays whole.
 */
enum class HeldStep : uint8_t {
    kNone,
    kRemoveAll,  /* every summary and .tmp file goes (summary_remove_all()) */
    kKeepChain   /* a resume: the chain must end at held_covered + 1 (summary_keep_chain_to()) */
};

struct Summaries {
    ChangeSet* set;            /* in set_storage; nullptr until the follower runs */
    size_t budget_bytes;       /* what `set` was built with */
    Lsn set_start;             /* the set holds every change at an LSN >= it (see above) */
    Lsn cut_at;                /* a cut to write before anything else is applied; 0: none */
    bool cut_readd;            /* after that cut, read the last record again into the new set */
    uint32_t cut_flags;        /* header flags of that summary (kSummaryEndsAtRedo) */
    Lsn redo_targets[kMaxRedoTargets]; /* checkpoints' redo LSNs still ahead of the follower, ascending */
    uint32_t redo_target_count;
    Lsn redo_seen;             /* the last redo LSN learnt (GetRedoRecPtr(), CHECKPOINT_REDO) */
    TimestampTz redo_noted_at; /* when a redo LSN last became a cut target (note_redo()) */
    bool refused;              /* an add of the current record answered kRefused */
    bool cut_soon;             /* an add answered kCutSoon */
    Lsn last_start;            /* start of the last record applied (ending at follower.next); 0: unknown */
    Lsn last_end;              /* where that record ends (cut_at_last_record_end() checks it is follower.next) */
    Lsn plain_start, plain_end; /* the last summary written ending at a record's end without kSummaryEndsAtRedo
                                  (cut_readd); 0: none.  A redo LSN learnt there later marks it (note_redo()). */
    Lsn mark_start, mark_end;  /* such a summary a redo LSN was learnt at the end of, to be marked between
                                  batches (mark_plain_summary()); 0: none */
    TimeLineID scan_tli;       /* while records before set_start are skipped because the startup scan's
                                  summaries hold them (summaries_continue_scan()): the timeline it read;
                                  0 otherwise (guard_scan_chain()) */
    uint32_t gap_count;        /* extension dated by that record (growth_block_referenced()) */
    struct {
        RelFork rel;
        BlockNumber from, to;
    } gaps[XLR_MAX_BLOCK_ID + 1];
    TimestampTz retry_at;      /* after a failed write or step: no new attempt before */
    int backoff_s;
    HeldStep held;             /* a step on the files that could not be done yet (see above); kNone: none */
    const char* held_why;      /* kRemoveAll: why, for the LOG line (a string constant) */
    Lsn held_covered;          /* kKeepChain: the saved map's covered LSN */
    TimestampTz held_warned_at; /* the last WARNING about it; 0: none since it last worked */
    uint64_t written;          /* summaries written by this process (LOG at DEBUG1) */
};
alignas(ChangeSet) unsigned char set_storage[sizeof(ChangeSet)];
Summaries summaries;
PTRACK_FRAME_SAFE(Summaries, SummaryHeader);
PTRACK_ENGINE_NOEXCEPT(&ChangeSet::add_block, &ChangeSet::add_limit, &ChangeSet::add_database, &ChangeSet::clear,
                       &ChangeSet::reset, &ChangeSet::open_cursor, &ChangeSet::close_cursor, &ChangeSet::empty);

inline void note_add(AddResult r)
{
    if (r == AddResult::kOk)
        return;
    if (r == AddResult::kRefused)
        summaries.refused = true;
    else
        summaries.cut_soon = true;
}

/* Blocks [from, to) of `rel` into the set. */
void add_block_range(const RelFork& rel, BlockNumber from, BlockNumber to)
{
    for (BlockNumber b = from; b < to; ++b)
        note_add(summaries.set->add_block(rel, b));
}

/*
 * Growth a walk saw (file_growth.h): every block from the old size on.  Even
 * when dated before set_start (a walk right after a cut at next + 1 on an
 * idle server reads P = next): no summary written holds it, so the set takes
 * it, dated later than it happened, which is always safe.
 */
bool record_walk_growth(const RelFork& rel, BlockNumber first, Lsn)
{
    if (summaries.set == nullptr || summaries.set_start == UINT64_MAX)
        return true; /* before the start: a fresh start walks a baseline anyway */
    const AddResult r = summaries.set->add_limit(rel, first);
    if (r == AddResult::kCutSoon)
        summaries.cut_soon = true;
    return r != AddResult::kRefused;
}

/*
 * The follower's changes go to the file growth watch and, for records
 * ending at or after set_start, to the change set; with the legacy map
 * (wal_legacy_map) to the map and the limit table too.
 */
class FollowerSink final : public WalChangeSink {
public:
    void block(const RelFork& rel, BlockNumber block, Lsn lsn, bool referenced) noexcept override
    {
        if (wal_legacy_map)
            capture_block_at(rel, block, lsn);
        const bool record = lsn >= summaries.set_start;
        /* A named block existed before the record: date the extension of those before it. */
        if (referenced) {
            const BlockNumber gap = growth_block_referenced(rel, block, lsn);
            if (gap < block) {
                if (record && summaries.gap_count < lengthof(summaries.gaps))
                    summaries.gaps[summaries.gap_count++] = {rel, gap, block};
                else if (record)
                    summaries.refused = true; /* never: one per block reference; re-read it whole */
                /*
                 * Before set_start too: a restored standby reads again the
                 * WAL whose summaries the startup scan wrote
                 * (summaries_continue_scan()), which dated no extension; the
                 * growth watch now knows these blocks, so no walk will find
                 * them.  The set holds them, later than they came: safe.
                 */
                add_block_range(rel, gap, block);
            }
        }
        if (record)
            note_add(summaries.set->add_block(rel, block));
    }
    void relation_limit(const RelFork& rel, BlockNumber limit, Lsn lsn) noexcept override
    {
        /*
         * Regrowth past the cut must show as growth (file_growth.h; a lookup,
         * never an allocation).  For a file created or dropped (limit 0) that
         * is enough: every block it gets afterwards is either named by a
         * record or found by a walk as growth from size 0, each marked no
         * earlier than it was added; capture_limit() makes no entry for it.
         */
        growth_truncated(rel, limit);
        watch_note_lowered(rel, limit); /* the next walk looks at the file again, as a full walk would */
        if (wal_legacy_map)
            capture_limit(rel, limit, lsn);
        if (lsn >= summaries.set_start)
            note_add(summaries.set->add_limit(rel, limit));
    }
    void database(uint32_t spc, uint32_t db, Lsn lsn) noexcept override
    {
        if (wal_legacy_map)
            capture_database(spc, db, lsn);
        growth_database_replaced(spc, db);
        watch_note_database(spc, db);
        if (lsn >= summaries.set_start)
            note_add(summaries.set->add_database(spc, db));
    }
};
FollowerSink follower_sink;

/* A record read again after a cut: its changes go to the new set only (the map has them). */
class SetOnlySink final : public WalChangeSink {
public:
    void block(const RelFork& rel, BlockNumber block, Lsn, bool) noexcept override
    {
        note_add(summaries.set->add_block(rel, block));
    }
    void relation_limit(const RelFork& rel, BlockNumber limit, Lsn) noexcept override
    {
        note_add(summaries.set->add_limit(rel, limit));
    }
    void database(uint32_t spc, uint32_t db, Lsn) noexcept override
    {
        note_add(summaries.set->add_database(spc, db));
    }
};
SetOnlySink set_only_sink;

/*
 * The same record again, coarse: every change as "every file of its
 * database" (one entry per database the record touches, a few bytes), for a
 * record whose changes do not fit in an empty set (readd_by_database()).
 */
class DatabaseOnlySink final : public WalChangeSink {
public:
    void block(const RelFork& rel, BlockNumber, Lsn, bool) noexcept override
    {
        note_add(summaries.set->add_database(rel.spc_oid, rel.db_oid));
    }
    void relation_limit(const RelFork& rel, BlockNumber, Lsn) noexcept override
    {
        note_add(summaries.set->add_database(rel.spc_oid, rel.db_oid));
    }
    void database(uint32_t spc, uint32_t db, Lsn) noexcept override
    {
        note_add(summaries.set->add_database(spc, db));
    }
};
DatabaseOnlySink database_only_sink;

/* The follower process's own state. */
struct Follower {
    MemoryContext cxt;                      /* the reader and everything it allocates */
    XLogReaderState* reader;                /* nullptr until positioned */
    ReadLocalXLogPageNoWaitPrivate* page;   /* end_of_wal flag of the no-wait page reader */
    Lsn next;                               /* where reading resumes: every record ending <= next is applied */
    bool started;                           /* the start position and init_lsn are established */
    bool establishing;                      /* in establish_start(): an ERROR now is a start error, and the
                                               start is established again (the summaries with it) */
    bool next_is_record_end;                /* next is the end of a record read: XLogBeginRead() can start there */
    bool read_record_ending_at_next;        /* the record ending exactly at next must be read too (a catch-up from
                                               a base backup's redo LSN); nothing is saved until it is */
    bool reading;                           /* an ERROR now means WAL could not be read */
    bool save_due;                          /* a checkpoint record was applied since the last save */
    Lsn saved;                              /* covered LSN of the last save */
    TimestampTz saved_at;                   /* when it was made (kMinSaveIntervalMs) */
    TimestampTz save_retry_at;              /* after a failed save: no new attempt before this */
    int save_backoff_s;                     /* pause after the last failed save (0 after a success) */
    bool at_end;                            /* the last apply_available() reached the end of the WAL available */
};
PTRACK_FRAME_SAFE(Follower, SavePoint);
Follower follower;

void publish(Atomic<uint64_t>* field, Lsn lsn)
{
    field->store(lsn, Order::kRelease);
}

/* --- the replication slot ---------------------------------------------------- */

Lsn slot_restart_lsn()
{
    ReplicationSlot* slot = MyReplicationSlot;
    SpinLockAcquire(&slot->mutex);
    const Lsn lsn = slot->data.restart_lsn;
    SpinLockRelease(&slot->mutex);
    return lsn;
}

/* Acquires the follower's slot for the life of the process, creating it if missing. */
void acquire_slot()
{
    if (MyReplicationSlot != NULL)
        return;
    if (SearchNamedReplicationSlot(kFollowerSlotName, true) == NULL) {
        slot_create(kFollowerSlotName);
        ereport(LOG, (errmsg("ptrack created replication slot \"%s\" to keep the WAL its follower needs",
                             kFollowerSlotName)));
    } else {
        slot_acquire(kFollowerSlotName);
    }
}

/* Reserves WAL from the latest redo LSN (the slot holds none: new, invalidated or reset). */
Lsn reserve_wal()
{
    ReplicationSlot* slot = MyReplicationSlot;
    SpinLockAcquire(&slot->mutex);
    slot->data.restart_lsn = InvalidXLogRecPtr;
    SpinLockRelease(&slot->mutex);
    ReplicationSlotReserveWal();
    ReplicationSlotMarkDirty();
    ReplicationSlotSave();
    return slot_restart_lsn();
}

/* After a save complete up to `lsn`: the WAL before it may go. */
void advance_slot(Lsn lsn)
{
    ReplicationSlot* slot = MyReplicationSlot;
    SpinLockAcquire(&slot->mutex);
    const bool forward = slot->data.restart_lsn != InvalidXLogRecPtr && lsn > slot->data.restart_lsn;
    if (forward)
        slot->data.restart_lsn = lsn;
    SpinLockRelease(&slot->mutex);
    if (!forward)
        return;
    ReplicationSlotMarkDirty();
    ReplicationSlotSave();
    ReplicationSlotsComputeRequiredLSN();
}

TimeLineID current_timeline()
{
    TimeLineID tli = 0;
    if (RecoveryInProgress())
        (void) GetXLogReplayRecPtr(&tli);
    else
        tli = GetWALInsertionTimeLine();
    return tli;
}

/* --- saves ------------------------------------------------------------------ */

/*
 * The preparation wal_load.cpp made before recovery (shared_state.h) has
 * served: a save now covers the fresh start it made (a restarted follower
 * resumes from the save), or tracking restarted after a read error.
 */
void forget_restored_start()
{
    shared->presized_redo_lsn = 0;
    shared->restored_scan_from = 0;
    shared->restored_scan_end = 0;
    shared->resume_at_scan_end = false;
    shared->restored_summary_from = 0;
    shared->restored_summary_end = 0;
}

/*
 * The follower's steps of save_map() (capture_source.h): the map complete
 * up to follower.next, with the file sizes its marks were made from
 * (file_growth.h): first a walk, so the map holds the marks of every
 * extension seen.  If the sizes or the limits cannot be written, the
 * previous save stays in force (and the slot keeps its WAL).
 */
void wal_save_prepare()
{
    /* Always a full walk: the periodic one that bounds whatever the file watch might not vouch for. */
    (void) watch_full_walk(false, "a save");
}

Lsn wal_save_covered_lsn()
{
    return follower.next;
}

SavePoint wal_save_point(Lsn covered)
{
    /* Every mark from now on carries the end of a record after `covered`. */
    return SavePoint{covered, covered};
}

void wal_save_done(Lsn covered)
{
    follower.save_backoff_s = 0;
    forget_restored_start();
    follower.saved = covered;
    follower.saved_at = GetCurrentTimestamp();
    follower.save_due = false;
    /* A follower that restarts (its process only) resumes from this save. */
    shared->loaded_covered_lsn = follower.saved;
    shared->loaded_timeline = current_timeline();
    publish(&shared->follower.saved_lsn, follower.saved);
    advance_slot(follower.saved);
}

bool cut_for_save(bool* deferred);

void save_now()
{
    /* A save now would claim the record ending at follower.next, not read yet (apply_available()). */
    if (follower.read_record_ending_at_next)
        return;
    /* The summaries first, up to the map's covered LSN: if they cannot be written, no save either. */
    bool deferred = false;
    if (cut_for_save(&deferred) && save_map(kWalSource))
        return;
    if (deferred)
        return; /* save_due stays: the next loop tries again, once the follower has applied more */
    /*
     * Retry, but not on every loop (20 a second when idle): a full disk
     * or a wrong permission does not go away by itself.  1 s, doubling
     * up to a minute; the WARNINGs are rate-limited too (map_io.h).
     */
    follower.save_backoff_s = follower.save_backoff_s == 0 ? 1 : Min(follower.save_backoff_s * 2, 60);
    follower.save_retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), follower.save_backoff_s * 1000L);
}

/* --- where to start ---------------------------------------------------------- */

/*
 * A trusted map is complete up to its covered LSN on the timeline it was
 * saved on.  If this server is now on a later timeline that branched off
 * before that LSN, the WAL after the branch point differs: resume at the
 * branch point instead (re-marking is harmless).  nullptr, or why the map
 * cannot be continued here.
 */
const char* resume_point(Lsn covered, TimeLineID saved_tli, Lsn* out)
{
    *out = covered;
    const TimeLineID tli = current_timeline();
    if (saved_tli == 0 || saved_tli == tli)
        return nullptr;
    List* history = readTimeLineHistory(tli);
    if (!tliInHistory(saved_tli, history)) {
        list_free_deep(history);
        return "the map was saved on a timeline that is not in this server's history";
    }
    const Lsn branch = tliSwitchPoint(saved_tli, history, NULL);
    if (branch < covered)
        *out = branch;
    list_free_deep(history);
    return nullptr;
}

void start_fresh(Lsn start, Lsn floor, bool with_record_ending_at_start = false);
void summaries_resume(Lsn start, Lsn covered);
void summaries_start_fresh(Lsn start);
bool summaries_continue_scan(Lsn claim, Lsn reads_from);
void guard_scan_chain(XLogReaderState* reader);
void summaries_after_restart(Lsn lsn);

/*
 * A data directory restored from a base backup whose WAL pg_wal no longer
 * holds from the backup's redo LSN (recovery restored it through
 * restore_command, then removed it): where the follower reads from instead
 * of its slot's position `restart`, the redo LSN, with the segments before
 * `restart` coming from the archive (wal_archive.h); 0 when the slot's
 * position does (the startup scan covered the redo LSN and reading goes on
 * where it ends, or nothing was recorded before recovery) or when that WAL
 * cannot be had (logged).  *with_previous: the record ending exactly at the
 * redo LSN must be read too (the startup scan did not).
 */
Lsn catch_up_from_redo(Lsn restart, bool* with_previous)
{
    const Lsn presized = shared->presized_redo_lsn;
    const Lsn scan_from = shared->restored_scan_from;
    const Lsn scan_end = shared->restored_scan_end;
    *with_previous = false;
    if (presized == 0 || presized > restart)
        return 0;
    const bool scanned = scan_end != 0 && scan_from <= presized;
    if (scanned && restart <= scan_end)
        return 0; /* reading from the slot's position goes on from the scan (start_fresh()) */
    if (const char* why = archive_catch_up_blocker(presized, restart)) {
        ereport(LOG, (errmsg("ptrack WAL follower cannot read the WAL since the base backup's redo LSN %X/%X: %s",
                             PTRACK_LSN_ARGS(presized), why),
                      errdetail("ptrack_init_lsn() is established where the WAL follower starts reading.")));
        return 0;
    }
    *with_previous = !scanned;
    return presized;
}

/*
 * Establishes where reading starts and ptrack_init_lsn(): at the saved map's
 * covered LSN if the map was trusted, else at the slot's position.
 */
void establish_start()
{
    acquire_slot();
    Lsn restart = slot_restart_lsn();
    const Lsn init = shared->init_lsn.load(Order::kAcquire);
    const Lsn covered = shared->loaded_covered_lsn;
    const char* restart_reason = nullptr;
    if (init != 0 && covered != 0) {
        Lsn start = covered;
        const char* problem = resume_point(covered, shared->loaded_timeline, &start);
        char why[160];
        if (problem == nullptr && !growth_load(covered, why, sizeof(why)))
            problem = reason("no relation file sizes were saved with the map (%s)", why);
        watch_sizes_replaced();
        if (problem == nullptr) {
            if (restart == InvalidXLogRecPtr)
                restart = reserve_wal(); /* keep what is left; reading tells whether the WAL from `start` is there */
            /*
             * Before the slot's position (a catch-up from a base backup's redo
             * LSN that a restart interrupted, a branch point) pg_wal may lack
             * segments that the archive holds (wal_archive.h).
             */
            archive_fallback_until(restart);
            follower.next = start;
            follower.next_is_record_end = false;
            follower.read_record_ending_at_next = false; /* a half-done fresh start before an ERROR may have set it */
            follower.started = true;
            summaries_resume(start, covered);
            ereport(LOG, (errmsg("ptrack WAL follower resumes at %X/%X, where the saved map is complete",
                                 PTRACK_LSN_ARGS(start))));
            return;
        }
        restart_reason = problem; /* said once the fresh map's ptrack_init_lsn() is known */
    }
    if (restart == InvalidXLogRecPtr)
        restart = reserve_wal();
    /*
     * A restored primary's WAL was read before recovery up to the scan's end
     * (wal_load.cpp); read on from there.  That WAL is in the segment of the
     * end-of-recovery checkpoint or just before it: if it is gone after all,
     * reading fails and tracking restarts, never silently.
     */
    const Lsn scan_end = shared->resume_at_scan_end ? shared->restored_scan_end : 0;
    bool with_previous = false;
    const Lsn catch_up = scan_end != 0 && scan_end < restart ? 0 : catch_up_from_redo(restart, &with_previous);
    if (catch_up != 0) {
        archive_fallback_until(restart);
        if (catch_up < restart)
            ereport(LOG, (errmsg("ptrack WAL follower reads the WAL from the base backup's redo LSN %X/%X, before "
                                 "its slot's position %X/%X; what pg_wal no longer holds comes through "
                                 "restore_command",
                                 PTRACK_LSN_ARGS(catch_up), PTRACK_LSN_ARGS(restart))));
        start_fresh(catch_up, shared->fresh_init_floor, with_previous);
    } else {
        start_fresh(scan_end != 0 && scan_end < restart ? scan_end : restart, shared->fresh_init_floor);
    }
    /* The WARNING names the LSN ptrack_init_lsn() now returns, not an earlier one. */
    if (restart_reason != nullptr)
        restart_tracking_at(init_lsn(), restart_reason);
}

/*
 * A fresh map, read from `start` on: extensions are seen from a baseline of
 * sizes on, so ptrack_init_lsn() is no earlier than the LSN of that baseline
 * (the LSN read after a walk, or the redo LSN the sizes recorded before
 * recovery belong to), nor than `floor` (wal_load.cpp; UINT64_MAX: unknown,
 * take the baseline's LSN).  `with_record_ending_at_start`: reading begins
 * with the record that ends exactly at `start`, if any (apply_available()),
 * so `start` itself is proven.
 */
void start_fresh(Lsn start, Lsn floor, bool with_record_ending_at_start)
{
    /*
     * What wal_load.cpp prepared before recovery serves the first fresh
     * start: the sizes, if no WAL between them and `start` goes unread
     * (reading starts before them, or the scan read up to `start`); the
     * scan's range, if reading goes on from its end.  It stays until that
     * start's first save (forget_restored_start()): a follower stopped
     * before it saved anything (a catch-up through the archive takes a
     * while) leaves nothing to resume from, and the next one starts the same
     * way again instead of at its slot's later position.
     */
    const Lsn presized = shared->presized_redo_lsn;
    const Lsn scan_from = shared->restored_scan_from;
    const Lsn scan_end = shared->restored_scan_end;
    /* Reading from `start` skips a record that ends exactly there (wal_records.h). */
    const bool scanned = scan_end != 0 && start <= scan_end;
    const Lsn read_from = with_record_ending_at_start                  ? start
                          : scanned                                    ? Min(start, scan_from)
                          : no_record_ends_at(start, wal_segment_size) ? start
                                                                       : start + 1;
    Lsn walked;
    if (presized != 0 && start <= Max(presized, scanned ? scan_end : 0) && growth_load(presized)) {
        watch_sizes_replaced();
        walked = presized;
        ereport(LOG, (errmsg("ptrack WAL follower takes the relation file sizes recorded before recovery, "
                             "which started at %X/%X", PTRACK_LSN_ARGS(presized))));
    } else {
        growth_reset();
        walked = watch_full_walk(true, "a baseline");
    }
    if (floor == UINT64_MAX)
        floor = walked;
    const Lsn fresh_init = Max(Max(read_from, floor), walked);
    follower.next = start;
    follower.next_is_record_end = false;
    follower.read_record_ending_at_next = with_record_ending_at_start;
    follower.started = true;
    follower.save_due = true; /* a first save makes the fresh map resumable */
    uint64_t expected = 0;
    if (!shared->init_lsn.compare_exchange(&expected, fresh_init))
        shared->init_lsn.store_max(fresh_init); /* a restart already moved it */
    /* Reading from `start` skips a record that ends there, unless it is read first or none can end there. */
    const bool start_claimed = with_record_ending_at_start || no_record_ends_at(start, wal_segment_size);
    const Lsn reads_from = start_claimed ? start : start + 1;
    if (!summaries_continue_scan(Max(fresh_init, init_lsn()), reads_from))
        summaries_start_fresh(Max(Max(fresh_init, init_lsn()), reads_from));
    ereport(LOG, (errmsg("ptrack WAL follower starts a fresh map at %X/%X; ptrack_init_lsn() is %X/%X",
                         PTRACK_LSN_ARGS(start), PTRACK_LSN_ARGS(init_lsn()))));
}

/* --- reading ------------------------------------------------------------------ */

void open_reader()
{
    XLogReaderRoutine routine{};
    routine.page_read = read_local_xlog_page_no_wait;
    routine.segment_open = archive_segment_open; /* pg_wal, else the archive below its limit (wal_archive.h) */
    routine.segment_close = wal_segment_close;
    MemoryContext old = MemoryContextSwitchTo(follower.cxt);
    follower.page = static_cast<ReadLocalXLogPageNoWaitPrivate*>(palloc0(sizeof(ReadLocalXLogPageNoWaitPrivate)));
    follower.reader = XLogReaderAllocate(wal_segment_size, NULL, &routine, follower.page);
    MemoryContextSwitchTo(old);
    if (follower.reader == NULL)
        ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("out of memory"),
                        errdetail("ptrack could not allocate a WAL reading processor.")));
    /* Never another cluster's WAL, e.g. from a misconfigured archive: long page headers must carry ours. */
    follower.reader->system_identifier = GetSystemIdentifier();
}

/* Frees the reader and its open segment (also after an ERROR). */
void close_reader()
{
    if (follower.reader != NULL && follower.reader->seg.ws_file >= 0)
        close(follower.reader->seg.ws_file);
    follower.reader = NULL;
    follower.page = NULL;
    MemoryContextReset(follower.cxt);
}

bool is_checkpoint_record(XLogReaderState* reader)
{
    if (XLogRecGetRmid(reader) != RM_XLOG_ID)
        return false;
    const uint8 info = XLogRecGetInfo(reader) & ~XLR_INFO_MASK;
    return info == XLOG_CHECKPOINT_ONLINE || info == XLOG_CHECKPOINT_SHUTDOWN || info == XLOG_END_OF_RECOVERY;
}

/*
 * For ptrack_status(): the follower has applied all the WAL available when
 * it looked (the lag in seconds counts from the last such moment), on this
 * timeline.
 */
void publish_caught_up(TimeLineID tli)
{
    shared->follower.caught_up_time.store(static_cast<int64_t>(GetCurrentTimestamp()), Order::kRelease);
    if (tli != 0)
        shared->follower.timeline.store(static_cast<uint32_t>(tli), Order::kRelease);
}

/* --- summaries (docs/design.md section 9; the rules at struct Summaries) --------- */

size_t summary_budget()
{
    return wal_summary_budget_bytes();
}

/* (Re)builds the empty set with that budget. */
void build_set()
{
    const size_t budget = summary_budget();
    if (summaries.set != nullptr)
        summaries.set->reset();
    summaries.set = new (set_storage) ChangeSet(budget);
    summaries.budget_bytes = budget;
}

/*
 * The set emptied (rebuilt if ptrack.wal_summary_memory changed: a reload
 * takes effect here), holding what happens from `start` on; no cut waits.
 */
void empty_set_from(Lsn start)
{
    if (summary_budget() != summaries.budget_bytes)
        build_set();
    else
        summaries.set->clear();
    summaries.set_start = start;
    summaries.cut_at = 0;
    summaries.cut_readd = false;
    summaries.cut_flags = 0;
    summaries.backoff_s = 0;
    summaries.refused = false;
    summaries.cut_soon = false;
}

/* Defined with the main loop's errors below: problems published for backends (FollowerStartError). */
void publish_problem(FollowerStartError& e, int sqlerrcode, const char* message, const char* hint);
void clear_problem(FollowerStartError& e);
void record_start_reason(int sqlerrcode, const char* message, const char* hint);
void clear_start_error();

/* A step on the summary files waits (struct Summaries): nothing is applied, cut or saved. */
inline bool summaries_held()
{
    return summaries.held != HeldStep::kNone;
}

/* No summary vouches for anything while a step waits (0: summary_scan() refuses), else from the set's start. */
void publish_summarized_start()
{
    publish(&shared->follower.summarized_lsn, summaries_held() ? 0 : summaries.set_start);
}

/* A new start of the summaries at `start`: also forgets the redo target and the last record. */
void restart_set(Lsn start)
{
    empty_set_from(start);
    summaries.scan_tli = 0;
    summaries.redo_target_count = 0;
    summaries.last_start = 0;
    summaries.last_end = 0;
    summaries.plain_start = summaries.plain_end = 0;
    summaries.mark_start = summaries.mark_end = 0;
    summaries.gap_count = 0;
    publish_summarized_start();
}

/*
 * Does the waiting step (summaries.held) on the files: nullptr once done
 * (held is kNone then; *kept: the end of the chain a kKeepChain step kept,
 * 0 if none), else why it cannot be done now (in `buf`, or a constant).
 */
const char* do_held_step(char* buf, size_t len, Lsn* kept)
{
    *kept = 0;
    if (const char* problem = summary_dir_problem(buf, len))
        return problem;
    const bool done = summaries.held == HeldStep::kKeepChain
                          ? summary_keep_chain_to(summaries.held_covered + 1, kept)
                          : summary_remove_all(summaries.held_why);
    if (!done)
        return "some of the summaries it no longer vouches for could not be removed (see the WARNING before)";
    /*
     * A resume with no chain to go on from.  With the legacy map, the
     * trusted map's answer since init_lsn becomes the first summary.  Else
     * the map holds no marks (a map of an earlier run that did was migrated
     * by the postmaster: wal_migrate_loaded()): nothing proves the changes
     * before covered + 1, and tracking restarts there.
     */
    const Lsn covered = summaries.held_covered;
    const Lsn init = init_lsn();
    if (summaries.held == HeldStep::kKeepChain && *kept == 0 && init != 0 && init <= covered) {
        if (!wal_legacy_map) {
            char why[160];
            snprintf(why, sizeof(why), "no change summaries end where the saved map is complete (%X/%X)",
                     PTRACK_LSN_ARGS(covered + 1));
            restart_tracking_at(covered + 1, why);
        } else if (migrate_map_to_summary(init, covered + 1, current_timeline())) {
            *kept = covered + 1;
        }
    }
    summaries.held = HeldStep::kNone;
    return nullptr;
}

/*
 * The step could not be done (`problem`): nothing vouches meanwhile, the
 * reason is published as the follower's start error, a WARNING says it (at
 * most once a minute) and the next attempt waits 1 s, doubling up to 30 s.
 */
void hold_summaries(const char* problem)
{
    constexpr char kHint[] =
        "Make pg_wal/ptrack a directory that the server's user can read and write in, or move away what is in "
        "its place (the WAL follower creates the directory).";
    publish_summarized_start();
    const TimestampTz now = GetCurrentTimestamp();
    summaries.backoff_s = summaries.backoff_s == 0 ? 1 : Min(summaries.backoff_s * 2, 30);
    summaries.retry_at = TimestampTzPlusMilliseconds(now, summaries.backoff_s * 1000L);
    char message[sizeof(FollowerStartError::message)];
    snprintf(message, sizeof(message), "its change summaries cannot be kept: %s", problem);
    record_start_reason(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE, message, kHint);
    if (summaries.held_warned_at != 0 && !TimestampDifferenceExceeds(summaries.held_warned_at, now, 60000))
        return;
    summaries.held_warned_at = now;
    ereport(WARNING, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                      errmsg("ptrack's WAL follower cannot keep its change summaries: %s", problem),
                      errdetail("It applies no WAL and saves no map until it can (its replication slot \"%s\" keeps "
                                "the WAL meanwhile), so that the map never claims more than the summaries hold; "
                                "it tries again in %d s.",
                                kFollowerSlotName, summaries.backoff_s),
                      errhint("%s", kHint)));
}

/* The step the (re)start of the summaries needed is done: they vouch from the set's start on. */
void summaries_unheld(Lsn kept, bool resume)
{
    clear_start_error();
    if (summaries.held_warned_at != 0)
        ereport(LOG, (errmsg("ptrack's WAL follower can keep its change summaries in %s again", kSummaryDir)));
    summaries.held_warned_at = 0;
    /* A resume's kept chain ends at covered + 1: the set starts there (nothing was applied while held). */
    if (kept != 0)
        restart_set(kept);
    else
        publish_summarized_start();
    if (resume)
        ereport(LOG, (errmsg("ptrack WAL follower records the changes from %X/%X on%s",
                             PTRACK_LSN_ARGS(summaries.set_start),
                             kept != 0 ? ", where its change summaries end" : "")));
}

/* Sets `step` waiting and tries it now; true if done (else held: hold_summaries() said why). */
bool start_held_step(HeldStep step, const char* why, Lsn covered, Lsn* kept)
{
    summaries.held = step;
    summaries.held_why = why;
    summaries.held_covered = covered;
    char buf[256];
    if (const char* problem = do_held_step(buf, sizeof(buf), kept)) {
        hold_summaries(problem);
        return false;
    }
    return true;
}

/* The main loop's retry of a waiting step, once its pause has passed; true once done. */
bool retry_held_step()
{
    if (GetCurrentTimestamp() < summaries.retry_at)
        return false;
    const bool resume = summaries.held == HeldStep::kKeepChain;
    char buf[256];
    Lsn kept = 0;
    if (const char* problem = do_held_step(buf, sizeof(buf), &kept)) {
        hold_summaries(problem);
        return false;
    }
    summaries_unheld(kept, resume);
    return true;
}

/* A fresh start at `start` (where the map's claim and the follower's own reading both begin): no summary is kept. */
void summaries_start_fresh(Lsn start)
{
    Lsn kept = 0;
    const bool done = start_held_step(HeldStep::kRemoveAll, "change tracking starts afresh", 0, &kept);
    const int backoff_s = summaries.backoff_s;
    restart_set(start); /* publishes 0 while held */
    summaries.backoff_s = backoff_s;
    if (done)
        summaries_unheld(0, false);
}

/*
 * A fresh start that may go on from the summaries the postmaster wrote of a
 * restored backup's WAL, [from, end) (scan_summary.h): where the map's
 * fresh start claims the same range (its ptrack_init_lsn() `claim` is no
 * later than `from`) and reading sees every record ending at or after
 * `reads_from` (no later than `end`: no hole after the scan).  Keeps that
 * chain alone (anything a follower that stopped before its first save wrote
 * after it goes) and starts the set at its end; false, with nothing
 * changed, if that cannot be.
 */
bool summaries_continue_scan(Lsn claim, Lsn reads_from)
{
    const Lsn from = shared->restored_summary_from;
    const Lsn end = shared->restored_summary_end;
    if (from == 0 || from < claim || end < reads_from)
        return false;
    Lsn kept = 0;
    if (!summary_keep_chain_to(end, &kept) || kept != end)
        return false; /* removed them all (the chain was broken), or could not */
    size_t count = 0;
    SummaryFileRef* refs = summary_list(&count);
    const bool whole = count > 0 && refs[0].start_lsn == from;
    pfree(refs);
    if (!whole)
        return false;
    restart_set(end);
    summaries.scan_tli = shared->restored_summary_timeline;
    ereport(LOG, (errmsg("ptrack WAL follower records the changes from %X/%X on, where the change summaries of "
                         "the WAL read before recovery end",
                         PTRACK_LSN_ARGS(end))));
    return true;
}

/*
 * Before `reader`'s record is applied, while the follower reads again part
 * of the WAL the postmaster summarized before recovery (records ending
 * before set_start are in those summaries, not in the set).  That holds only
 * while it reads the same history: a record from another timeline's WAL
 * below set_start (recovery ended at a target before the end of what pg_wal
 * held, or a promotion came during that replay) is in none of them.  The
 * summaries then start again here: they are removed, and the set records
 * from this record on (it holds nothing of the records skipped, only what
 * walks found, which is extra).  ptrack_init_lsn() moves forward, and a
 * full backup is needed: never a short answer.  The segment holding the
 * switch is read from the new timeline's file, so this may come a few
 * records early, which costs the same.
 */
void guard_scan_chain(XLogReaderState* reader)
{
    if (reader->EndRecPtr >= summaries.set_start) {
        summaries.scan_tli = 0; /* past the summarized WAL: the set records everything now */
        return;
    }
    if (reader->seg.ws_tli == summaries.scan_tli)
        return;
    ereport(WARNING, (errmsg("ptrack's change summaries of the WAL read before recovery do not hold timeline %u after "
                             "%X/%X",
                             reader->seg.ws_tli, PTRACK_LSN_ARGS(follower.next)),
                      errdetail("Recovery ended on a new timeline before the end of the WAL that pg_wal held; the "
                                "summaries start again at %X/%X.",
                                PTRACK_LSN_ARGS(follower.next + 1)),
                      errhint("Take a full backup: an incremental backup from an earlier start LSN is refused.")));
    summaries.scan_tli = 0;
    summaries.set_start = follower.next + 1;
    summaries_after_restart(follower.next + 1);
}

/*
 * Resuming from a trusted map complete up to `covered`, reading from `start`
 * (covered, or a timeline's branch point before it): the saves cut the
 * summaries at covered + 1 (cut_for_save()), so the chain must end there.
 * Anything else (no chain, a broken one, a branch point) is removed and the
 * set starts at covered + 1 (no later than ptrack_init_lsn()): answers refuse
 * the LSNs before it instead of answering short.  Unless, with no chain on
 * the same timeline, the map itself becomes the summary of [init_lsn,
 * covered + 1) (map_migration.h: an upgrade from a map-only version).
 */
void summaries_resume(Lsn start, Lsn covered)
{
    Lsn kept = 0;
    const bool done =
        start == covered
            ? start_held_step(HeldStep::kKeepChain, nullptr, covered, &kept)
            : start_held_step(HeldStep::kRemoveAll,
                              "the WAL follower resumes on another timeline, before the end of the summaries", covered,
                              &kept);
    const int backoff_s = summaries.backoff_s;
    restart_set(Max(covered + 1, init_lsn())); /* publishes 0 while held */
    summaries.backoff_s = backoff_s;
    if (done)
        summaries_unheld(kept, true);
}

/* Forgets the redo targets at or before `lsn` (passed, or no later than the set's start). */
void drop_redo_targets_through(Lsn lsn)
{
    uint32_t n = 0;
    while (n < summaries.redo_target_count && summaries.redo_targets[n] <= lsn)
        ++n;
    summaries.redo_target_count -= n;
    memmove(summaries.redo_targets, summaries.redo_targets + n, summaries.redo_target_count * sizeof(Lsn));
}

/*
 * Adds `redo` to the targets, in order (once).  Full: the target whose loss
 * joins the two smallest summaries around it goes, never the newest (the
 * likeliest backup start); a backup starting at the one lost takes both.
 */
void add_redo_target(Lsn redo)
{
    Lsn* t = summaries.redo_targets;
    uint32_t n = summaries.redo_target_count;
    uint32_t at = n;
    while (at > 0 && t[at - 1] > redo)
        --at;
    if (at > 0 && t[at - 1] == redo)
        return;
    if (n == kMaxRedoTargets) {
        /* Candidates: the kept ones and `redo`, in order; the newest of them always stays. */
        Lsn all[kMaxRedoTargets + 1];
        memcpy(all, t, at * sizeof(Lsn));
        all[at] = redo;
        memcpy(all + at + 1, t + at, (n - at) * sizeof(Lsn));
        uint32_t drop = 0;
        Lsn best = UINT64_MAX;
        for (uint32_t i = 0; i < n; ++i) {
            const Lsn before = i == 0 ? summaries.set_start : all[i - 1];
            if (all[i + 1] - before < best) {
                best = all[i + 1] - before;
                drop = i;
            }
        }
        memcpy(t, all, drop * sizeof(Lsn));
        memcpy(t + drop, all + drop + 1, (n - drop) * sizeof(Lsn));
        return;
    }
    memmove(t + at + 1, t + at, (n - at) * sizeof(Lsn));
    t[at] = redo;
    summaries.redo_target_count = n + 1;
}

/*
 * Tracking restarted at `lsn` (a record that changed what no block list can
 * say): no summary may answer for an earlier LSN.  The set keeps what it
 * holds (extra) and vouches from `lsn` on.
 */
void summaries_after_restart(Lsn lsn)
{
    summaries.set_start = Max(summaries.set_start, lsn);
    drop_redo_targets_through(summaries.set_start);
    Lsn kept = 0;
    if (start_held_step(HeldStep::kRemoveAll, "change tracking restarted", 0, &kept))
        summaries_unheld(0, false);
}

/*
 * The last record's changes do not fit in an empty set: no summary can hold
 * them, so none vouches for them; the summaries start again after it.
 */
void restart_summaries_after_overflow()
{
    char reason[160];
    snprintf(reason, sizeof(reason),
             "one WAL record's changes do not fit in ptrack.wal_summary_memory (%d MB), even as whole databases",
             wal_summary_memory_mb);
    restart_tracking_at(follower.next + 1, reason); /* counted in ptrack_status() */
    summaries_start_fresh(follower.next + 1);
}

/*
 * In perform_cut(), the set just emptied and the last record read again
 * into it, refused: its changes alone do not fit in the whole budget (one
 * transaction dropping or truncating tens of thousands of relations: a
 * tester's 15,000 tables in 4 MB).  The set holds nothing but that record
 * (no walk's growth is replayed into it yet), so it is cleared and takes the
 * record again as whole databases: an answer across the record lists every
 * file of those databases (extra blocks, never fewer; the dropped files are
 * gone anyway) instead of the summaries restarting.
 */
void readd_by_database()
{
    summaries.set->clear();
    summaries.refused = false;
    summaries.cut_soon = false;
    (void) capture_wal_record(follower.reader, database_only_sink);
    for (uint32_t i = 0; i < summaries.gap_count; ++i)
        note_add(summaries.set->add_database(summaries.gaps[i].rel.spc_oid, summaries.gaps[i].rel.db_oid));
    if (!summaries.refused)
        ereport(LOG, (errmsg("ptrack recorded the WAL record ending at %X/%X as whole databases: its changes do not "
                             "fit in ptrack.wal_summary_memory (%d MB)",
                             PTRACK_LSN_ARGS(follower.next), wal_summary_memory_mb),
                      errdetail("An incremental backup whose start LSN lies before it copies every file of those "
                                "databases."),
                      errhint("Raise ptrack.wal_summary_memory to keep such records exact.")));
}

void schedule_cut(Lsn at, bool readd, uint32_t flags)
{
    summaries.cut_at = at;
    summaries.cut_readd = readd;
    summaries.cut_flags = flags;
}

/*
 * The LSN of a cut after everything applied: follower.next + 1 (the last
 * record ends at next; records end at MAXALIGNed positions, so none ends at
 * next + 1 or next + 2), next + 2 when the set starts at next + 1 already
 * (it holds only what walks found since); 0 when the set starts later still
 * (nothing it would vouch for has been applied yet) or the record ending at
 * next has not been read yet.
 */
Lsn cut_point_now()
{
    /* The record ending at next is still to be read (a catch-up from a base backup's redo LSN). */
    if (follower.read_record_ending_at_next)
        return 0;
    if (summaries.set_start <= follower.next)
        return follower.next + 1;
    if (summaries.set_start == follower.next + 1)
        return follower.next + 2;
    return 0;
}

/* Reads the last record applied (ending at follower.next) again; an ERROR is a read error (tracking restarts). */
void reread_last_record()
{
    if (follower.reader == NULL)
        open_reader();
    XLogReaderState* reader = follower.reader;
    follower.reading = true;
    char* errormsg = NULL;
    XLogBeginRead(reader, summaries.last_start);
    if (XLogReadRecord(reader, &errormsg) == NULL || reader->EndRecPtr != follower.next)
        ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED),
                        errmsg("ptrack could not read the WAL record at %X/%X again: %s",
                               PTRACK_LSN_ARGS(summaries.last_start),
                               errormsg != NULL ? errormsg : "it does not end where it ended before")));
    follower.reading = false;
}

bool cut_at_last_record_end();

/*
 * Writes the cut waiting in summaries.cut_at: the set as the summary
 * [set_start, cut_at), then an empty set from cut_at, the last record read
 * again into it if cut_readd, and the walks' growth the summary does not
 * hold at its date (growth_replay_pending()).  False if the summary could
 * not be written (WARNING logged): nothing changed, retried after a pause.
 */
bool perform_cut()
{
    if (summaries_held())
        return false; /* nothing is written before the files it no longer vouches for are gone */
    const Lsn end = summaries.cut_at;
    if (end <= summaries.set_start) {
        summaries.cut_at = 0; /* nothing to write: never scheduled so, but never an empty range */
        return true;
    }
    /* A cut just past the last record (a save's, a full set's): a summary ends at that record's end first. */
    if (end == follower.next + 1 && !summaries.cut_readd && summaries.cut_flags == 0) {
        if (!cut_at_last_record_end())
            return false; /* that cut waits in cut_at; the caller asks for this one again */
        schedule_cut(end, false, 0);
    }
    /* Before anything changes: a record that cannot be read again must not leave the set half done. */
    if (summaries.cut_readd)
        reread_last_record();
    /* Every record ending before `end` is applied: the walks' growth dated before it goes in, past what the WAL dated. */
    growth_settle_pending(end, false);
    ChangeSet& set = *summaries.set;
    ChangeCursor* cursor = set.open_cursor();
    SummaryHeader written;
    bool ok = cursor != nullptr;
    if (ok) {
        ok = summary_write_durably(*cursor, summaries.set_start, end, current_timeline(), summaries.cut_flags,
                                   &written);
        set.close_cursor(cursor);
    } else {
        ereport(WARNING, (errcode(ERRCODE_OUT_OF_MEMORY),
                          errmsg("ptrack could not save its change summary: out of memory for its index")));
    }
    if (!ok) {
        save_stats_record_failure(); /* ptrack_status().failed_saves */
        publish_problem(shared->summary_write_error, ERRCODE_IO_ERROR,
                        cursor != nullptr ? last_save_failure() : "out of memory for its index",
                        persist_source->save_failure_hint);
        summaries.backoff_s = summaries.backoff_s == 0 ? 1 : Min(summaries.backoff_s * 2, 60);
        summaries.retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), summaries.backoff_s * 1000L);
        return false;
    }
    ereport(DEBUG1, (errmsg("ptrack wrote the change summary of %X/%X-%X/%X: %llu forks, %llu blocks, %u databases",
                            PTRACK_LSN_ARGS(summaries.set_start), PTRACK_LSN_ARGS(end),
                            static_cast<unsigned long long>(written.fork_count),
                            static_cast<unsigned long long>(written.block_count), written.database_count)));
    ++summaries.written;
    clear_problem(shared->summary_write_error); /* after failures: written again */
    const bool readd = summaries.cut_readd;
    if (readd && (summaries.cut_flags & kSummaryEndsAtRedo) == 0) {
        summaries.plain_start = summaries.set_start;
        summaries.plain_end = end;
    }
    empty_set_from(end);
    if (readd) {
        /* The record ending at `end` belongs to the new summary (the map has it: the set only). */
        (void) capture_wal_record(follower.reader, set_only_sink);
        for (uint32_t i = 0; i < summaries.gap_count; ++i)
            add_block_range(summaries.gaps[i].rel, summaries.gaps[i].from, summaries.gaps[i].to);
        if (summaries.refused)
            readd_by_database(); /* the record alone is larger than the whole budget */
    }
    growth_replay_pending(end);
    publish(&shared->follower.summarized_lsn, end);
    if (summaries.refused)
        restart_summaries_after_overflow(); /* not even as whole databases */
    return true;
}

/*
 * Ends a summary at follower.next, the end of the last record applied, which
 * goes to the new set (read again): before a cut at follower.next + 1 (a
 * save's, a backend's request, a full set), so that a checkpoint's redo LSN
 * learnt after that cut, right at follower.next, still has a summary
 * starting there.  A checkpoint begun just after the one whose record the
 * follower has applied has its redo LSN exactly there (a backup's fast
 * checkpoint requested during a spread one: t/003's full backup); the
 * follower at the end of the WAL could save before that redo LSN was
 * written, no summary started at it (note_redo() finds it below set_start),
 * and the backup's answer took the whole summary before, back to the
 * previous redo LSN (t/003: 140,103 pages of a load listed).  The cost: a
 * small summary more per such cut (retention combines them).  True if the
 * summary was written or none was needed; false if it could not be (it
 * waits in cut_at).
 */
bool cut_at_last_record_end()
{
    if (summaries.set_start >= follower.next || !follower.next_is_record_end || follower.read_record_ending_at_next ||
        summaries.last_start == 0 || summaries.last_end != follower.next)
        return true; /* a summary starts there already, or the last record is not known: nothing to split */
    schedule_cut(follower.next, true, 0);
    return perform_cut();
}

/* The marking note_redo() asked for, between batches (before retention could combine the boundary). */
void mark_plain_summary()
{
    if (summaries.mark_end == 0 || summaries_held())
        return;
    if (!summary_mark_ends_at_redo(summaries.mark_start, summaries.mark_end))
        ereport(DEBUG1, (errmsg("ptrack could not mark the summary ending at redo LSN %X/%X as such",
                                PTRACK_LSN_ARGS(summaries.mark_end))));
    summaries.mark_start = summaries.mark_end = 0;
}

/* The main loop's retry of a cut that could not be written, once its pause has passed. */
bool retry_pending_cut()
{
    if (summaries.backoff_s != 0 && GetCurrentTimestamp() < summaries.retry_at)
        return false;
    return perform_cut();
}

/*
 * A checkpoint's redo LSN learnt (GetRedoRecPtr() before a batch, or the
 * CHECKPOINT_REDO record that starts at it): a backup may start there, so a
 * summary should end exactly there.  Ahead of the follower it joins the
 * targets cut_before_record() watches for (a queue: a follower behind the
 * WAL may learn the next redo LSN before it reaches this one); exactly where the follower stands
 * it is cut now with the last record (which ends at it) moved to the new
 * set; behind, it was learnt too late: the cut at the next save (after the
 * checkpoint record) is the fallback, whose summary an answer for it takes
 * whole (extra blocks, never fewer).  True if a cut is now waiting.
 */
bool note_redo(Lsn redo)
{
    if (redo == 0 || redo == summaries.redo_seen)
        return false;
    if (redo <= summaries.set_start) {
        /*
         * Learnt after a cut past it.  At a record's end a summary may end
         * already (cut_at_last_record_end()): marked as ending at a redo LSN,
         * retention keeps that boundary, and a backup starting there gets
         * none of the summary before.
         */
        if (redo == summaries.plain_end) {
            summaries.mark_start = summaries.plain_start;
            summaries.mark_end = summaries.plain_end;
        }
        return false;
    }
    summaries.redo_seen = redo;
    /* The summary that would end at `redo` starts at the newest target before it, or at the set's start. */
    Lsn since = summaries.set_start;
    for (uint32_t i = 0; i < summaries.redo_target_count && summaries.redo_targets[i] <= redo; ++i) {
        if (summaries.redo_targets[i] == redo)
            return false; /* learnt already (GetRedoRecPtr(), then its CHECKPOINT_REDO record) */
        since = summaries.redo_targets[i];
    }
    /*
     * A storm of checkpoints (hundreds a second: CHECKPOINT in a loop) would
     * cost one fsync'd file each and leave the follower behind the WAL.  No
     * backup starts that often: a redo LSN within kMinRedoCutMs of the last
     * one taken is let go when the summary being built holds less than
     * kMaxRedoLetGoWal of WAL before it, and a backup starting there gets
     * the extra blocks of that little WAL, never fewer.  The time alone is
     * no measure: a follower catching up (the 1 GB load before t/003's full
     * backup) reads many redo LSNs within it, far apart in the WAL.
     */
    const TimestampTz now = GetCurrentTimestamp();
    if (summaries.redo_noted_at != 0 && !TimestampDifferenceExceeds(summaries.redo_noted_at, now, kMinRedoCutMs) &&
        redo - since < kMaxRedoLetGoWal)
        return false;
    summaries.redo_noted_at = now;
    if (redo > follower.next) {
        add_redo_target(redo);
        return false;
    }
    if (redo == follower.next && follower.next_is_record_end && summaries.last_start != 0 && summaries.cut_at == 0) {
        schedule_cut(redo, true, kSummaryEndsAtRedo);
        return true;
    }
    return false;
}

/*
 * Before applying a record ending at `end`: if it ends at or after the
 * oldest redo target, the summary ends at the target, before it (the record ending
 * exactly at a cut belongs to the later summary).  True if a cut now waits
 * (the record is not applied yet).
 */
bool cut_before_record(Lsn end)
{
    while (summaries.redo_target_count > 0 && summaries.redo_targets[0] <= end) {
        const Lsn target = summaries.redo_targets[0];
        drop_redo_targets_through(target);
        if (follower.next >= target || target <= summaries.set_start)
            continue;
        schedule_cut(target, false, kSummaryEndsAtRedo);
        return true;
    }
    return false;
}

/*
 * After applying a record: a refused add (the set is full; it may hold part
 * of the record) cuts at the record's end and reads it again into the new
 * set; a set near its budget cuts after the record.
 */
void cut_after_record()
{
    if (summaries.refused) {
        if (follower.next > summaries.set_start)
            schedule_cut(follower.next, true, 0);
        else
            restart_summaries_after_overflow();
    } else if (summaries.cut_soon) {
        schedule_cut(follower.next + 1, false, 0);
    }
}

/* Outside a record (a walk's growth filled the set): cut after what was applied. */
void cut_when_full()
{
    if (!summaries.cut_soon || summaries.cut_at != 0)
        return;
    summaries.cut_soon = false;
    if (const Lsn at = cut_point_now())
        schedule_cut(at, false, 0);
}

/*
 * Before a map save complete up to follower.next (= C): the summaries end at
 * C + 1, so that the chain a restarted follower finds ends where its set
 * starts (summaries_resume()).  False if a summary could not be written,
 * or the summaries are held: the save is skipped, so that the map is never
 * ahead of the summaries.  Also false while the chain ends past C + 1 (a cut
 * at a redo LSN the follower has not reached yet, or the startup scan's
 * summaries of WAL it reads again): a save there would claim C with a chain
 * that a restart cuts back to C + 1 and finds broken, and the map, which
 * holds no marks, could not stand in for it (restarted tracking).  The save
 * waits until the follower has applied up to the chain's end (*deferred).
 */
bool cut_for_save(bool* deferred)
{
    *deferred = false;
    if (summaries_held())
        return false;
    if (summaries.cut_at != 0 && !perform_cut())
        return false;
    if (summaries.set_start > follower.next + 1 && summaries.set_start > init_lsn()) {
        *deferred = true; /* the chain ends ahead: the save comes when the follower gets there */
        return false;
    }
    if (summaries.set_start > follower.next)
        return true; /* a fresh set not reached yet, or the chain ends at next + 1 already */
    schedule_cut(follower.next + 1, false, 0);
    return perform_cut();
}

/*
 * A backend's request (FollowerProgress::cut_requested): everything applied
 * so far goes to the files, even an empty set (a summary says "nothing
 * changed" too).  True once written and summarized_lsn published.
 */
bool cut_on_request()
{
    if (summaries_held())
        return false;
    if (summaries.cut_at != 0 && !perform_cut())
        return false;
    /* First, so that the growth taken whole below goes to the summary ending at `at`, which every answer takes. */
    if (!cut_at_last_record_end())
        return false;
    const Lsn at = cut_point_now();
    /* The growth walks found, whole where the follower has not applied the WAL up to its date. */
    growth_settle_pending(at, true);
    if (summaries.set->empty() && summaries.set_start > follower.next)
        return true; /* the files hold everything applied already */
    if (at == 0)
        return true; /* nothing applied is vouched for yet (a fresh set ahead of the follower) */
    schedule_cut(at, false, 0);
    return perform_cut();
}

/*
 * The start of the record before the one at `first` if it ends at or before
 * `first` (the record ending exactly at a start LSN, which reading from that
 * LSN skips), else `first`; InvalidXLogRecPtr if the WAL at `first` is not
 * available yet.  Raises an ERROR if the WAL cannot be read: the record's
 * changes must be marked before the start LSN is claimed.
 */
Lsn start_with_previous_record(XLogReaderState* reader, Lsn first)
{
    char* errormsg = NULL;
    XLogBeginRead(reader, first);
    if (XLogReadRecord(reader, &errormsg) == NULL) {
        if (follower.page->end_of_wal)
            return InvalidXLogRecPtr;
        ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED),
                        errmsg("ptrack could not read the WAL record at %X/%X: %s", PTRACK_LSN_ARGS(first),
                               errormsg != NULL ? errormsg : "no reason given")));
    }
    const Lsn previous = XLogRecGetPrev(reader);
    if (previous == InvalidXLogRecPtr || previous >= first)
        return first;
    XLogBeginRead(reader, previous);
    if (XLogReadRecord(reader, &errormsg) == NULL)
        ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED),
                        errmsg("ptrack could not read the WAL record at %X/%X, before %X/%X: %s",
                               PTRACK_LSN_ARGS(previous), PTRACK_LSN_ARGS(first),
                               errormsg != NULL ? errormsg : "no reason given")));
    return reader->EndRecPtr <= first ? previous : first;
}

/*
 * Applies the records available from follower.next, at most `budget` of
 * them; returns how many.  Raises an ERROR if the WAL cannot be read.
 */
int apply_available(int budget)
{
    if (follower.reader == NULL)
        open_reader();
    XLogReaderState* reader = follower.reader;
    follower.page->end_of_wal = false;
    follower.at_end = false;
    /* A start position (a redo LSN, a saved covered LSN) is looked up once; after that, reading goes on. */
    Lsn first = follower.next;
    if (!follower.next_is_record_end) {
        first = XLogFindNextRecord(reader, follower.next);
        if (first == InvalidXLogRecPtr) {
            if (follower.page->end_of_wal) {
                publish_caught_up(reader->currTLI);
                follower.at_end = true;
                return 0;
            }
            ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED),
                            errmsg("ptrack could not find a valid WAL record at or after %X/%X",
                                   PTRACK_LSN_ARGS(follower.next))));
        }
        if (follower.read_record_ending_at_next) {
            const Lsn begin = start_with_previous_record(reader, first);
            if (begin == InvalidXLogRecPtr) {
                publish_caught_up(reader->currTLI);
                follower.at_end = true;
                return 0;
            }
            /* A record's start is where XLogBeginRead() may begin; saves now claim no more than was read. */
            first = begin;
            follower.next = begin;
            follower.next_is_record_end = true;
            follower.read_record_ending_at_next = false;
        }
    }
    XLogBeginRead(reader, first);
    int applied = 0;
    while (applied < budget && summaries.cut_at == 0 && !summaries_held()) {
        char* errormsg = NULL;
        if (XLogReadRecord(reader, &errormsg) == NULL) {
            if (follower.page->end_of_wal) {
                publish_caught_up(reader->currTLI);
                follower.at_end = true;
                break;
            }
            ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED),
                            errmsg("ptrack could not read the WAL at %X/%X: %s", PTRACK_LSN_ARGS(reader->EndRecPtr),
                                   errormsg != NULL ? errormsg : "no reason given")));
        }
        /* A checkpoint's redo LSN reached: the summary ends there, before this record if it ends at or after it. */
        if (checkpoint_redo_record(reader) && note_redo(reader->ReadRecPtr))
            break;
        if (cut_before_record(reader->EndRecPtr))
            break;
        summaries.refused = false;
        summaries.cut_soon = false;
        summaries.gap_count = 0;
        if (summaries.scan_tli != 0)
            guard_scan_chain(reader);
        if (const char* reason = capture_wal_record(reader, follower_sink)) {
            restart_tracking_at(reader->EndRecPtr, reason);
            summaries_after_restart(reader->EndRecPtr);
        }
        if (is_checkpoint_record(reader))
            follower.save_due = true;
        follower.next = reader->EndRecPtr;
        follower.next_is_record_end = true;
        summaries.last_start = reader->ReadRecPtr;
        summaries.last_end = reader->EndRecPtr;
        publish(&shared->follower.applied_lsn, follower.next);
        ++applied;
        cut_after_record();
    }
    return applied;
}

/* --- errors before the start, slot releases, exit ------------------------------- */

/*
 * Publishes `edata`, an ERROR raised before the start was established, as
 * the reason the follower cannot start (shared_state.h).
 */
void record_start_error(const ErrorData* edata)
{
    record_start_reason(edata->sqlerrcode, edata->message != NULL ? edata->message : "no message",
                        edata->hint != NULL ? edata->hint : "");
}

/* Publishes a problem in `e` (shared_state.h), timed now: `message` and `hint` ("" if none). */
void publish_problem(FollowerStartError& e, int sqlerrcode, const char* message, const char* hint)
{
    const TimestampTz now = GetCurrentTimestamp();
    SpinLockAcquire(&e.mutex);
    e.time = now;
    e.sqlerrcode = sqlerrcode;
    strlcpy(e.message, message, sizeof(e.message));
    strlcpy(e.hint, hint, sizeof(e.hint));
    SpinLockRelease(&e.mutex);
}

/* The problem in `e` is over. */
void clear_problem(FollowerStartError& e)
{
    SpinLockAcquire(&e.mutex);
    e.time = 0;
    SpinLockRelease(&e.mutex);
}

/* The same for a reason the follower states itself (hold_summaries()): `message` and `hint` ("" if none). */
void record_start_reason(int sqlerrcode, const char* message, const char* hint)
{
    publish_problem(shared->follower_start_error, sqlerrcode, message, hint);
}

/* The follower has started: nothing prevents it any more. */
void clear_start_error()
{
    clear_problem(shared->follower_start_error);
}

/*
 * Called on SIGTERM, before the exit's save advances the slot: if the slot
 * holds more WAL than max_slot_wal_keep_size allows, the checkpointer sent
 * the signal to release it (InvalidatePossiblyObsoleteSlot() in slot.c
 * terminates the slot's holder): count it for ptrack_status() and say what
 * follows.  Nothing is lost: the save makes the map complete up to
 * follower.next and the restarted follower resumes there; the slot is
 * invalidated only if that is still beyond the limit.
 */
void note_slot_release()
{
    if (max_slot_wal_keep_size_mb < 0 || MyReplicationSlot == NULL || !follower.started)
        return;
    const Lsn restart = slot_restart_lsn();
    if (restart == InvalidXLogRecPtr)
        return;
    const WALAvailability availability = GetWALAvailability(restart);
    if (availability != WALAVAIL_UNRESERVED && availability != WALAVAIL_REMOVED)
        return;
    (void) shared->follower.slot_releases.add(1, Order::kAcqRel);
    ereport(LOG, (errmsg("ptrack WAL follower stops to release its replication slot \"%s\", which keeps more WAL "
                         "than max_slot_wal_keep_size (%d MB) allows",
                         kFollowerSlotName, max_slot_wal_keep_size_mb),
                  errdetail("It saves the map complete up to %X/%X, moves the slot there and resumes from it; "
                            "the slot is invalidated (and tracking restarts) only if that is still too far "
                            "behind.",
                            PTRACK_LSN_ARGS(follower.next)),
                  errhint("Give max_slot_wal_keep_size at least twice max_wal_size: each release costs a save "
                          "of the whole map.")));
}

/*
 * On SIGTERM: saves what was applied (once: if that save raises an ERROR,
 * the handler comes back here and the process exits without it; the saved
 * map and the slot then still cover everything up to the previous save),
 * releases the slot and exits with code 1 (the postmaster restarts the
 * follower unless the server is shutting down).  Never returns.
 */
void exit_follower()
{
    static bool exit_save_tried = false;
    if (!exit_save_tried) {
        exit_save_tried = true;
        note_slot_release();
        if (follower.started && follower.next > follower.saved)
            save_now();
    }
    if (MyReplicationSlot != NULL)
        ReplicationSlotRelease();
    proc_exit(1);
}

/* --- the main loop -------------------------------------------------------------- */

void sleep_until_woken()
{
    (void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, kIdlePollMs, PG_WAIT_EXTENSION);
    ResetLatch(MyLatch);
    /*
     * Absorb procsignal barriers: CREATE/DROP DATABASE (and their redo on a
     * standby) wait until every process has released its smgr handles; a
     * follower that only slept would stall them, and on a standby replay.
     */
    CHECK_FOR_INTERRUPTS();
    if (ConfigReloadPending) {
        ConfigReloadPending = false;
        ProcessConfigFile(PGC_SIGHUP);
    }
}

/* ptrack.wal_batch_delay (developer option): a pause after a batch, during which nothing is applied. */
void batch_delay()
{
    const TimestampTz began = GetCurrentTimestamp();
    while (wal_batch_delay_ms > 0 && !shutdown_requested &&
           !TimestampDifferenceExceeds(began, GetCurrentTimestamp(), wal_batch_delay_ms))
        sleep_until_woken();
}

/* After an ERROR while reading: tracking restarts where the slot can keep the WAL from now on. */
void restart_after_read_error()
{
    const Lsn lost_from = follower.next;
    const Lsn start = reserve_wal();
    archive_fallback_until(0); /* from now on the slot keeps what is read */
    char reason[160];
    snprintf(reason, sizeof(reason), "the WAL follower could not read the WAL from %X/%X (see the error above)",
             PTRACK_LSN_ARGS(lost_from));
    /* Truncations in the lost WAL never reached the size table: start it over. */
    forget_restored_start();
    start_fresh(start, lost_from);
    /* After start_fresh(): the WARNING names the LSN ptrack_init_lsn() now returns (>= both). */
    restart_tracking_at(init_lsn(), reason);
    publish(&shared->follower.applied_lsn, follower.next);
}

/*
 * The walk the calls waiting in wait_for_follower() asked for, once the
 * follower has applied the WAL inserted before each of them
 * (FollowerProgress::walk_target).  A record may lower a remembered size
 * (a truncation, a drop: growth_truncated()), and a file truncated by it
 * and grown again without WAL before the call shows that growth only to a
 * walk made after the record was applied.  A walk made earlier in the same
 * call (the follower applies at most 1000 records between two looks at the
 * requests) saw the regrown file against the size from before the
 * truncation, found nothing, and the call returned without another walk
 * (t/039 section 4).  The walk is watched when the file watch vouches for
 * the files it does not look at (growth_watch.h), else full.
 */
void walk_for_calls()
{
    const uint64_t requested = shared->follower.walk_requested.load(Order::kAcquire);
    if (requested == shared->follower.walk_done.load(Order::kAcquire))
        return;
    /* Loaded after `requested`: no smaller than the target of any request it counts. */
    const Lsn needed = shared->follower.walk_target.load(Order::kAcquire);
    if (shared->follower.applied_lsn.load(Order::kAcquire) < needed)
        return;
    (void) watch_walk_for_call();
    publish(&shared->follower.walk_done, requested);
}

void follow()
{
    sigjmp_buf local_sigjmp_buf;
    if (sigsetjmp(local_sigjmp_buf, 1) != 0) {
        error_context_stack = NULL;
        HOLD_INTERRUPTS();
        EmitErrorReport();
        /* Half established (the summaries not set up, say): not started, it is all done again. */
        if (follower.establishing) {
            follower.establishing = false;
            follower.started = false;
        }
        if (!follower.started) {
            /* Not in ErrorContext, which FlushErrorState() resets. */
            MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
            ErrorData* edata = CopyErrorData();
            MemoryContextSwitchTo(old);
            record_start_error(edata);
            FreeErrorData(edata);
        }
        /* What an auxiliary process releases after an ERROR: locks, waits, files, scans. */
        LWLockReleaseAll();
        ConditionVariableCancelSleep();
        pgstat_report_wait_end();
        AtEOXact_Files(false);
        AtEOXact_HashTables(false);
        const bool was_reading = follower.reading;
        follower.reading = false;
        close_reader();
        FlushErrorState();
        RESUME_INTERRUPTS();
        /*
         * A stop request is obeyed before anything is retried (retrying first
         * spun on a persistent error).  An ERROR the stop caused (a shutdown
         * kills a running restore_command with the follower's process group,
         * wal_archive.h) is no reason to restart tracking: exit_follower()
         * saves what was applied, and the next start resumes there.
         */
        if (shutdown_requested)
            exit_follower();
        if (was_reading && follower.started) {
            restart_after_read_error();
            error_backoff_s = 1;
        }
        /* Never spin on a persistent error (1 s, doubling up to 30 s; barriers absorbed while waiting). */
        for (long i = 0; i < error_backoff_s * 1000L / kIdlePollMs && !shutdown_requested; ++i)
            sleep_until_woken();
        error_backoff_s = Min(error_backoff_s * 2, 30);
    }
    PG_exception_stack = &local_sigjmp_buf;

    for (;;) {
        if (shutdown_requested)
            exit_follower();
        if (!follower.started) {
            follower.establishing = true;
            establish_start();
            follower.establishing = false;
            if (!summaries_held())
                clear_start_error(); /* else the reason stays until the summaries can be kept */
            publish(&shared->follower.applied_lsn, follower.next);
            error_backoff_s = 1;
        }
        /* Summaries that cannot be kept come first: nothing is applied, cut or saved until they can. */
        if (summaries_held() && !retry_held_step()) {
            sleep_until_woken();
            continue;
        }
        /* A cut waiting to be written comes first: no WAL is applied until it is (the slot keeps it). */
        if (summaries.cut_at != 0 && !retry_pending_cut()) {
            sleep_until_woken();
            continue;
        }
        /* On a primary the follower usually learns a checkpoint's redo LSN before it reaches it. */
        if (!RecoveryInProgress() && note_redo(GetRedoRecPtr()))
            continue;
        /* A backend's request for a cut, seen before this batch (shared_state.h). */
        const uint64_t cut_requested = shared->follower.cut_requested.load(Order::kAcquire);
        const bool cut_wanted = cut_requested != shared->follower.cut_done.load(Order::kAcquire);
        follower.reading = true;
        const int applied = apply_available(1000);
        follower.reading = false;
        if (applied > 0 && wal_batch_delay_ms > 0)
            batch_delay();
        /* The file watch's events, read often so that its queue seldom overflows (growth_watch.h). */
        watch_drain();
        if (cut_wanted && follower.at_end && summaries.cut_at == 0) {
            /*
             * Caught up with the WAL written before the request, and the
             * growth of a walk that started after every walk request made
             * before it: a backend asks for a walk (wait_for_follower())
             * before it asks for a cut, so once walk_done reaches the walk
             * requests seen now, the growth found since the backend's call
             * began is in the set already (record_walk_growth()) and no
             * second walk is needed.
             */
            walk_for_calls();
            if (cut_on_request())
                publish(&shared->follower.cut_done, cut_requested);
        }
        walk_for_calls();
        cut_when_full();
        if (follower.save_due && (follower.save_backoff_s == 0 || GetCurrentTimestamp() >= follower.save_retry_at) &&
            TimestampDifferenceExceeds(follower.saved_at, GetCurrentTimestamp(), kMinSaveIntervalMs))
            save_now();
        mark_plain_summary();
        /* Expired and combinable summaries (a few files' work at most; nothing when nothing is new). */
        summary_retention_pass();
        /* At the end of the WAL available, wait for more rather than read again at once for a few records. */
        if ((applied == 0 || follower.at_end) && summaries.cut_at == 0)
            sleep_until_woken();
        else
            CHECK_FOR_INTERRUPTS(); /* more WAL, or a cut to write first */
    }
}

}  // namespace

void define_wal_follower_gucs()
{
    define_growth_watch_guc();
    DefineCustomIntVariable("ptrack.wal_wait_timeout",
                            "How long ptrack's functions wait for the WAL follower to catch up.",
                            "With WAL capture, ptrack_get_pagemapset() and ptrack_get_change_stat() first wait "
                            "until the follower has applied the WAL flushed (or replayed) before the call.",
                            &wal_wait_timeout_ms, 60000, 100, INT_MAX / 2, PGC_USERSET, GUC_UNIT_MS, NULL, NULL,
                            NULL);
    DefineCustomIntVariable("ptrack.wal_summary_memory",
                            "Memory the WAL follower's exact change set may use before it writes a summary.",
                            "With WAL capture, the follower records every change exactly and writes it as a summary "
                            "file (pg_wal/ptrack) at each save, at checkpoints' redo LSNs, on request, and "
                            "whenever the set reaches this size. A change takes effect with the next summary.",
                            &wal_summary_memory_mb, 64, kMinSummaryMemoryMb, kMaxSummaryMemoryMb, PGC_SIGHUP,
                            GUC_UNIT_MB, NULL, NULL, NULL);
    DefineCustomEnumVariable("ptrack.wal_answer_source",
                             "Where ptrack's functions answer from with WAL capture (developer option).",
                             "summaries: the change summaries under pg_wal/ptrack; map: the change map, which the "
                             "WAL follower fills only with ptrack.wal_legacy_map = on (otherwise ignored).",
                             &wal_answer_source, kAnswerFromSummaries, answer_source_options, PGC_SUSET,
                             GUC_NO_SHOW_ALL | GUC_NOT_IN_SAMPLE, NULL, NULL, NULL);
    DefineCustomBoolVariable("ptrack.wal_legacy_map",
                             "Lets ptrack's WAL follower mark the change map too (developer option).",
                             "Off: with WAL capture the map keeps only where the follower resumes, in a few KB, "
                             "whatever ptrack.map_size says. On: the follower also marks a map of ptrack.map_size, "
                             "as before the change summaries; for benchmarks.",
                             &wal_legacy_map, false, PGC_POSTMASTER, GUC_NO_SHOW_ALL | GUC_NOT_IN_SAMPLE, NULL, NULL,
                             NULL);
    DefineCustomIntVariable("ptrack.wal_batch_delay",
                            "Pause of the WAL follower after each batch of WAL it applied (developer option).",
                            "Keeps the follower behind the WAL for tests; 0 (the default) in production.",
                            &wal_batch_delay_ms, 0, 0, 60000, PGC_SIGHUP, GUC_UNIT_MS | GUC_NO_SHOW_ALL | GUC_NOT_IN_SAMPLE,
                            NULL, NULL, NULL);
}

void remove_follower_slot(const char* why)
{
    char path[MAXPGPATH];
    snprintf(path, sizeof(path), "pg_replslot/%s", kFollowerSlotName);
    struct stat st;
    if (stat(path, &st) != 0)
        return;
    if (!rmtree(path, true)) {
        ereport(WARNING, (errmsg("ptrack could not remove its replication slot directory \"%s\"", path),
                          errhint("Drop the slot with pg_drop_replication_slot('%s'): it keeps WAL from being "
                                  "recycled.",
                                  kFollowerSlotName)));
        return;
    }
    fsync_fname("pg_replslot", true);
    ereport(LOG, (errmsg("ptrack removed its replication slot \"%s\": %s", kFollowerSlotName, why)));
}

void register_wal_follower()
{
    BackgroundWorker worker;
    memset(&worker, 0, sizeof(worker));
    /* A connection to no database (shared catalogs only): it shows in pg_stat_activity, like other workers. */
    worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
    worker.bgw_start_time = BgWorkerStart_ConsistentState;
    worker.bgw_restart_time = 1;
    snprintf(worker.bgw_library_name, BGW_MAXLEN, "ptrack");
    snprintf(worker.bgw_function_name, BGW_MAXLEN, "ptrack_wal_follower_main");
    snprintf(worker.bgw_name, BGW_MAXLEN, "ptrack WAL follower");
    snprintf(worker.bgw_type, BGW_MAXLEN, "ptrack WAL follower");
    RegisterBackgroundWorker(&worker);
    /*
     * RegisterBackgroundWorker() only LOGs when max_worker_processes is
     * used up, and the server would run without a follower: nothing tracked,
     * and the slot keeping WAL.  Refuse to start instead.
     */
    if (bgworker_is_registered("ptrack", "ptrack_wal_follower_main"))
        return;
    ereport(FATAL, (errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
                    errmsg("ptrack could not register its WAL follower: max_worker_processes (%d) background "
                           "workers are registered already",
                           max_worker_processes),
                    errhint("Increase max_worker_processes, or set ptrack.map_size = 0 to turn change tracking "
                            "off.")));
}

/*
 * The end of the last WAL record inserted before the call, flushed (primary),
 * or of the last record replayed (standby): what the follower must have
 * applied before an answer.  Not the flush position: the WAL writer flushes
 * whole pages, so the flush position may lie inside a record (one that
 * crosses a page boundary), and the follower, which applies whole records,
 * stops before it.  Nothing else need flush that record soon (a record of a
 * transaction without an xid that aborts, such as the page pruning of a
 * cancelled query, sets no asynchronous-commit LSN): the caller then waited
 * until the next running-transactions record (15 s) had it flushed.  A
 * flush costs one fsync when there is WAL to flush, none otherwise.
 */
Lsn freshness_target()
{
    if (RecoveryInProgress())
        return GetXLogReplayRecPtr(NULL);
    /* The insert position is the start of the next record: a record boundary. */
    Lsn end = GetXLogInsertRecPtr();
    /*
     * At the start of a page, it points past the page header, which may not
     * exist yet (after a WAL switch: XLogFlush() of it raises "xlog flush
     * request ... is not satisfied"); a record that ends at the page
     * boundary ends before the header (its EndRecPtr, as the follower
     * publishes it).
     */
    const uint64_t in_segment = XLogSegmentOffset(end, wal_segment_size);
    if (in_segment == SizeOfXLogLongPHD)
        end -= SizeOfXLogLongPHD;
    else if (end % XLOG_BLCKSZ == SizeOfXLogShortPHD && in_segment > XLOG_BLCKSZ)
        end -= SizeOfXLogShortPHD;
    XLogFlush(end);
    return end;
}

namespace {

/*
 * The problem published in `e` (the reason the follower cannot start, or
 * the summary it cannot write), copied under its spinlock into `message`
 * and `hint` (sizeof the fields): its time, 0 if none.
 */
TimestampTz read_problem(FollowerStartError& e, char* message, char* hint)
{
    SpinLockAcquire(&e.mutex);
    const TimestampTz since = e.time;
    memcpy(message, e.message, sizeof(e.message));
    memcpy(hint, e.hint, sizeof(e.hint));
    SpinLockRelease(&e.mutex);
    message[sizeof(e.message) - 1] = '\0';
    hint[sizeof(e.hint) - 1] = '\0';
    return since;
}

TimestampTz read_start_error(char* message, char* hint)
{
    return read_problem(shared->follower_start_error, message, hint);
}

/*
 * After ptrack.wal_wait_timeout: if the follower cannot write its change
 * summaries (it applies no WAL until it can), an ERROR saying so, with the
 * failure and what to do, instead of the timeout's generic one.
 */
void fail_if_summaries_unwritable()
{
    char message[sizeof(FollowerStartError::message)];
    char hint[sizeof(FollowerStartError::hint)];
    const TimestampTz since = read_problem(shared->summary_write_error, message, hint);
    if (since == 0)
        return;
    ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                    errmsg("ptrack's WAL follower cannot write its change summaries: %s", message),
                    errdetail("Its last attempt failed at %s; it retries, and applies no WAL until a summary is "
                              "written; nothing is lost meanwhile (its replication slot keeps the WAL).",
                              timestamptz_to_str(since)),
                    errhint("%s", hint)));
}

/* If the follower is failing to start: an ERROR saying why, with its hint (the follower keeps retrying). */
void fail_if_follower_cannot_start()
{
    char message[sizeof(FollowerStartError::message)];
    char hint[sizeof(FollowerStartError::hint)];
    if (read_start_error(message, hint) == 0)
        return;
    /* The follower's own hint names the fix (ReplicationSlotCreate(): "Free one or increase max_replication_slots."). */
    ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                    errmsg("ptrack's WAL follower cannot start: %s", message),
                    errdetail("Change tracking is not running. The follower retries at least every 30 s and "
                              "tracking starts once it succeeds (ptrack_status() shows the reason meanwhile)."),
                    hint[0] != '\0' ? errhint("%s", hint)
                                    : errhint("See the errors of the \"ptrack WAL follower\" process in the server "
                                              "log.")));
}

/* ptrack_status(): why the follower cannot start (it keeps retrying), in `buf`; nullptr if nothing stops it. */
const char* wal_not_running(char* buf, size_t len)
{
    char message[sizeof(FollowerStartError::message)];
    char hint[sizeof(FollowerStartError::hint)];
    TimestampTz since = read_start_error(message, hint);
    if (since != 0) {
        snprintf(buf, len, "the WAL follower cannot start (retrying; last error at %s): %s",
                 timestamptz_to_str(since), message);
        return buf;
    }
    since = read_problem(shared->summary_write_error, message, hint);
    if (since == 0)
        return nullptr;
    snprintf(buf, len, "the WAL follower cannot write its change summaries (retrying; last failure at %s): %s",
             timestamptz_to_str(since), message);
    return buf;
}

/* ptrack_status(): the follower's columns, from FollowerProgress (never waits for it). */
bool wal_status(SourceStatus* out)
{
    const FollowerProgress& f = shared->follower;
    out->follower_pid = f.pid.load(Order::kAcquire);
    out->slot_releases = f.slot_releases.load(Order::kAcquire);
    out->follower_timeline = f.timeline.load(Order::kAcquire);
    /* The position the follower aims at first, then where it is: the lag is never negative. */
    const Lsn target = RecoveryInProgress() ? GetXLogReplayRecPtr(NULL) : GetFlushRecPtr(NULL);
    const Lsn applied = f.applied_lsn.load(Order::kAcquire);
    const TimestampTz caught_up = f.caught_up_time.load(Order::kAcquire);
    out->follower_lsn = applied;
    out->have_lag_seconds = false;
    if (applied != 0) {
        const uint64_t lag = target > applied ? target - applied : 0;
        out->follower_lag_bytes = lag;
        if (lag == 0 || caught_up != 0) {
            /* WAL still to apply was written after the follower last had applied everything. */
            const TimestampTz now = GetCurrentTimestamp();
            out->have_lag_seconds = true;
            out->follower_lag_seconds =
                lag == 0 || now <= caught_up ? 0.0 : static_cast<double>(now - caught_up) / USECS_PER_SEC;
        }
    }
    return true;
}

}  // namespace

void wait_for_follower()
{
    fail_if_follower_cannot_start();
    const Lsn target = freshness_target();
    /* The walk waits until the follower has applied the WAL up to the target (walk_for_calls()). */
    shared->follower.walk_target.store_max(target);
    /* A size walk that starts after this point sees every extension made before the call. */
    const uint64_t walk = shared->follower.walk_requested.add(1, Order::kAcqRel);
    const TimestampTz start = GetCurrentTimestamp();
    for (;;) {
        const Lsn applied = shared->follower.applied_lsn.load(Order::kAcquire);
        const Lsn init = shared->init_lsn.load(Order::kAcquire);
        const uint64_t walked = shared->follower.walk_done.load(Order::kAcquire);
        if (init != 0 && applied >= target && walked >= walk)
            return;
        if (void* latch = shared->follower.latch.load(Order::kAcquire))
            SetLatch(static_cast<Latch*>(latch));
        /* A follower (a restarted one too) that fails to start meanwhile: say so now, not after the timeout. */
        fail_if_follower_cannot_start();
        if (TimestampDifferenceExceeds(start, GetCurrentTimestamp(), wal_wait_timeout_ms)) {
            fail_if_summaries_unwritable();
            ereport(ERROR,
                    (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                     errmsg("ptrack's WAL follower has not caught up with the WAL within ptrack.wal_wait_timeout "
                            "(%d ms)",
                            wal_wait_timeout_ms),
                     errdetail("It has applied the WAL up to %X/%X; the answer needs %X/%X%s.",
                               PTRACK_LSN_ARGS(applied), PTRACK_LSN_ARGS(target),
                               init == 0 ? ", and it has not started yet" : ""),
                     errhint("Check the server log for errors of the \"ptrack WAL follower\" process, or raise "
                             "ptrack.wal_wait_timeout.")));
        }
        (void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 10, PG_WAIT_EXTENSION);
        ResetLatch(MyLatch);
        CHECK_FOR_INTERRUPTS();
    }
}

/*
 * The answers' source (CaptureSourceOps::summaries).  A cut, after
 * wait_for_follower(), which saw the follower apply the WAL written before
 * the call and finish a size walk started since: this bumps cut_requested;
 * the follower writes what it holds in memory as a summary, publishes
 * summarized_lsn and then cut_done.  The walk dates the growth it found at
 * the WAL position read after it, later than what the follower had applied
 * then; the follower puts it in every cut ending after that date, and in
 * the cut a backend asks for whatever its end (growth_settle_pending()).
 * This side does not rely on that alone: the target is
 * the WAL position now (freshness_target(), flushed: not before the walk's
 * date), and a cut that ends at or before it is asked for once more when
 * the follower has applied that far, so that summarized_lsn is past every
 * change made before the call by the files' own rule ([start, end) holds
 * what was recorded below end).  Same timeout and errors as
 * wait_for_follower().
 */
bool wal_summaries(bool cut, Lsn* summarized)
{
    FollowerProgress& f = shared->follower;
    if (wal_legacy_map && wal_answer_source == kAnswerFromMap)
        return false;
    if (!cut) {
        *summarized = f.summarized_lsn.load(Order::kAcquire);
        return true;
    }
    const Lsn target = freshness_target();
    uint64_t requested = f.cut_requested.add(1, Order::kAcqRel);
    const TimestampTz start = GetCurrentTimestamp();
    for (;;) {
        if (f.cut_done.load(Order::kAcquire) >= requested) {
            const Lsn now = f.summarized_lsn.load(Order::kAcquire);
            /* 0: no summary vouches for anything yet, and a cut cannot change that (summary_scan() says so). */
            if (now > target || now == 0) {
                *summarized = now;
                return true;
            }
            /* Once the follower has applied past the target, the next cut ends past it: one more request. */
            if (f.applied_lsn.load(Order::kAcquire) >= target)
                requested = f.cut_requested.add(1, Order::kAcqRel);
        }
        if (void* latch = f.latch.load(Order::kAcquire))
            SetLatch(static_cast<Latch*>(latch));
        fail_if_follower_cannot_start();
        if (TimestampDifferenceExceeds(start, GetCurrentTimestamp(), wal_wait_timeout_ms)) {
            fail_if_summaries_unwritable();
            const Lsn summarized_now = f.summarized_lsn.load(Order::kAcquire);
            ereport(ERROR,
                    (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                     errmsg("ptrack's WAL follower has not written its change summary within ptrack.wal_wait_timeout "
                            "(%d ms)",
                            wal_wait_timeout_ms),
                     errdetail("The newest summary ends at %X/%X; the answer needs one past %X/%X. The follower has "
                               "applied the WAL up to %X/%X.",
                               PTRACK_LSN_ARGS(summarized_now), PTRACK_LSN_ARGS(target),
                               PTRACK_LSN_ARGS(f.applied_lsn.load(Order::kAcquire))),
                     errhint("Check the server log for errors of the \"ptrack WAL follower\" process, or raise "
                             "ptrack.wal_wait_timeout.")));
        }
        (void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 10, PG_WAIT_EXTENSION);
        ResetLatch(MyLatch);
        CHECK_FOR_INTERRUPTS();
    }
}

const CaptureSourceOps kWalSource = {
    "wal",
    {CaptureSourceId::kWal, "ptrack_init_lsn() is set where the WAL follower starts reading.",
     "Backups are not affected yet: the changes are tracked in memory, and the WAL since ptrack's last successful "
     "save is kept (replication slot \"ptrack_wal_follower\") so that tracking survives a restart; pg_wal grows "
     "until a save succeeds. The WAL follower retries with a growing pause.",
     "Make the data directory, pg_wal/ptrack and ptrack's files in them (ptrack.map*, ptrack.limits*, ptrack.sizes*, "
     "the change summaries) writable by "
     "the server's user, and free disk space.",
     wal_before_load, wal_start_fresh, wal_continue_loaded, [] { return wal_legacy_map; }, wal_migrate_loaded},
    false,
    register_wal_follower,
    nullptr,
    wal_save_prepare,
    wal_save_covered_lsn,
    [](Lsn covered) { return growth_prepare_save(covered); },
    true,
    wal_save_point,
    wal_save_done,
    wait_for_follower,
    wal_summaries,
    wait_for_follower,
    false,
    wal_not_running,
    wal_status,
};

}  // namespace ptrack::pg

using namespace ptrack::pg;
using ptrack::Order;

/* ptrack_status() shows no follower PID once it has exited, however it exits; nobody sets its latch. */
static void clear_follower_pid(int, Datum)
{
    shared->follower.pid.store(0, Order::kRelease);
    /* The latch is in this process's PGPROC, which another process gets next: waiters must not set it. */
    shared->follower.latch.store(nullptr, Order::kRelease);
}

void ptrack_wal_follower_main(Datum)
{
    pqsignal(SIGTERM, follower_sigterm);
    archive_stop_waiting_on(&shutdown_requested);
    pqsignal(SIGHUP, SignalHandlerForConfigReload);
    /* A cancel must not abort a read (that would restart tracking); only SIGTERM stops the follower. */
    pqsignal(SIGINT, SIG_IGN);
    BackgroundWorkerUnblockSignals();
    BackgroundWorkerInitializeConnection(NULL, NULL, 0);
    follower.cxt = AllocSetContextCreate(TopMemoryContext, "ptrack WAL follower", ALLOCSET_DEFAULT_SIZES);
    growth_create();
    watch_create();
    /* Private memory (malloc), no destructor: never a C++ object across an ereport. */
    build_set();
    summaries.set_start = UINT64_MAX; /* nothing is recorded until the start is established */
    growth_set_recorder(record_walk_growth);
    growth_set_marks_map(wal_legacy_map);
    follower.next = InvalidXLogRecPtr;
    publish(&shared->follower.applied_lsn, 0);
    shared->follower.latch.store(static_cast<void*>(MyLatch), Order::kRelease);
    shared->follower.pid.store(static_cast<int32_t>(MyProcPid), Order::kRelease);
    before_shmem_exit(clear_follower_pid, 0);
    follow();
}
