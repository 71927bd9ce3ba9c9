/*
 * follower.h -- the WAL follower's own state and the functions its files
 * share (an internal header of capture/wal/; the rest of the tree sees the
 * wal source through capture_wal.h and kWalSource).
 *
 * The follower is a background worker, the capture source of servers
 * without the core patch's hooks (docs/design.md section 4).  It reads the
 * server's WAL with PostgreSQL's xlogreader up to the flush position, from
 * the WAL buffers while they hold it, or up to the replay position on a hot
 * standby (the no-wait page reader of xlogutils.c, which also follows
 * timeline switches through the timeline history files), and records what each record changed at the record's end LSN
 * (wal_records.cpp) in an exact change set, written as immutable summary
 * files under pg_wal/ptrack (persist/summary_io.h).  A record that ends at
 * or after L counts at an LSN >= L, so pagemapset(L) lists its blocks.
 *
 * Its clock and its saves: the follower saves the map, which keeps only its
 * resume point (the covered LSN: every record ending at or before it is in
 * the summaries), after checkpoint records and when it stops; a replication
 * slot of its own (kFollowerSlotName) keeps the WAL after that point and is
 * advanced only by a save, so after a restart or a crash the follower
 * resumes there and nothing is lost.  The slot honours
 * max_slot_wal_keep_size; if the WAL is removed anyway, reading fails and
 * tracking restarts with a WARNING, never silently.
 *
 * Its files, each owning one part, in the order a call runs down them (a
 * file calls only the files after it: scripts/check-layers.pl):
 *
 *   follower_main.cpp        the process: entry point, main loop, errors, exit
 *   follower_read.cpp        the reading loop: records applied, in batches
 *   follower_save.cpp        the map saves (the source's save steps)
 *   follower_slot_start.cpp  the replication slot, and where reading starts
 *   follower_cuts.cpp        where a summary ends: cuts, redo LSNs, requests
 *   follower_summaries.cpp   the change set's life: (re)starts, held steps
 *   follower.cpp             this state, the WAL reader, published problems
 *
 * capture_wal.cpp, above them all, is the source as backends and the
 * postmaster see it: registration, parameters, the freshness wait, the cut
 * handshake of FollowerProgress (shared_state.h), ptrack_status().
 *
 * What protects the state below: nothing needs to.  Summaries and Follower
 * live in the follower process's private memory, read and written by its
 * single thread only; other processes see what it publishes in shared
 * memory (FollowerProgress, FollowerStartError: shared_state.h), through
 * publish() and the problem functions below, and never these structs.  An
 * ERROR longjmps back to the main loop (follow()), which resets what an
 * interrupted step may have left half done (the reader, `reading`,
 * `establishing`); every other field is written whole before the step that
 * may raise one.  No C++ object with a destructor lives in these frames.
 */
#ifndef PTRACK_PG_CAPTURE_WAL_FOLLOWER_H
#define PTRACK_PG_CAPTURE_WAL_FOLLOWER_H

extern "C" {
#include "postgres.h"

#include "access/xlogreader.h"
#include "access/xlogutils.h"
#include "utils/palloc.h"
#include "utils/timestamp.h"
}

#include "capture/wal_records.h"
#include "core/boundary.h"
#include "core/shared_state.h"
#include "persist/map_persistence.h"
#include "persist/summary_io.h"
#include "ptrack/change_set.h"
#include "ptrack/summary_cuts.h"

namespace ptrack::pg::wal_follower {

/*
 * The exact change set (ptrack/change_set.h) the follower records, and how
 * it is cut into summary files (persist/summary_io.h; docs/design.md
 * sections 4.4 and 4.5).  A record's changes count at its end LSN.  A summary [start,
 * end) holds every change at an LSN in that range, so the record ending
 * exactly at a cut's LSN belongs to the later summary.  The in-memory set
 * holds every change at an LSN >= set_start that the follower has applied
 * (records ending before set_start are not recorded: nothing claims them).
 * A cut writes the set as [set_start, cut.at) and starts a new one at
 * cut.at; where is decided by the engine (ptrack/summary_cuts.h), asked by
 * follower_cuts.cpp:
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
 *     (cut.readd); such summaries carry kSummaryEndsAtRedo;
 *   - at next with cut.readd when an add was refused (the set is full): the
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
    ChangeSet* set;            /* in private memory of follower_summaries.cpp; nullptr until the follower runs */
    size_t budget_bytes;       /* what `set` was built with */
    Lsn set_start;             /* the set holds every change at an LSN >= it (see above) */
    SummaryCut cut;            /* a cut to write before anything else is applied; cut.at 0: none */
    RedoWatch redo;            /* the redo LSNs learnt (GetRedoRecPtr(), CHECKPOINT_REDO): the targets ahead,
                                  and the summary a late one marks (mark_plain_summary()) */
    bool refused;              /* an add of the current record answered kRefused */
    bool cut_soon;             /* an add answered kCutSoon */
    Lsn last_start;            /* start of the last record applied (ending at follower.next); 0: unknown */
    Lsn last_end;              /* where that record ends (cut_at_last_record_end() checks it is follower.next) */
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
PTRACK_FRAME_SAFE(Summaries, SummaryHeader);

/* The follower process's own state: where it reads, its saves. */
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
    TimestampTz saved_at;                   /* when it was made (the main loop's minimum interval) */
    TimestampTz save_retry_at;              /* after a failed save: no new attempt before this */
    int save_backoff_s;                     /* pause after the last failed save (0 after a success) */
    bool at_end;                            /* the last apply_available() reached the end of the WAL available */
};
PTRACK_FRAME_SAFE(Follower, SavePoint);

/* The follower's state (follower.cpp): private to its process (see above). */
extern Summaries summaries;
extern Follower follower;

/* ptrack.wal_batch_delay (developer option, ms; its GUC is defined in capture_wal.cpp): a pause after each batch. */
extern int wal_batch_delay_ms;

/*
 * ptrack.wal_reader (developer option; its GUC is defined in capture_wal.cpp):
 * the reader of the follower's steady state (follower_read.cpp).
 */
enum WalReaderMode : int {
    kWalReaderXlogreader, /* xlogreader everywhere */
    kWalReaderInplace,    /* the default: the in-place reader (inplace_reader.h) in the steady state */
    kWalReaderCompare     /* the in-place reader and xlogreader, every record compared: an ERROR at the first
                             difference */
};
extern int wal_reader_mode;

/* --- follower.cpp ------------------------------------------------------------- */

/* Publishes `lsn` in a FollowerProgress field (shared_state.h) for backends. */
inline void publish(Atomic<uint64_t>* field, Lsn lsn)
{
    field->store(lsn, Order::kRelease);
}

/* An add to the set answered `r`: a refusal or a nearly full set is noted for the cut decisions. */
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
inline void add_block_range(const RelFork& rel, BlockNumber from, BlockNumber to)
{
    for (BlockNumber b = from; b < to; ++b)
        note_add(summaries.set->add_block(rel, b));
}

/* Where the follower stands, for the cut decisions (ptrack/summary_cuts.h). */
inline FollowerPosition position()
{
    return FollowerPosition{follower.next, follower.next_is_record_end, follower.read_record_ending_at_next,
                            summaries.last_start, summaries.last_end};
}

/* A step on the summary files waits (Summaries): nothing is applied, cut or saved. */
inline bool summaries_held()
{
    return summaries.held != HeldStep::kNone;
}

/* The server's timeline: the one replayed on a standby, else the one inserted into. */
TimeLineID current_timeline();

/* The reader at follower.next's segment, allocated in follower.cxt; close_reader() frees it (also after an ERROR). */
void open_reader();
void close_reader();

/* A problem published for backends in `e` (shared_state.h), timed now: `message` and `hint` ("" if none). */
void publish_problem(FollowerStartError& e, int sqlerrcode, const char* message, const char* hint);
/* The problem in `e` is over. */
void clear_problem(FollowerStartError& e);
/* In a backend: the problem in `e`, copied into `message` and `hint` (sizeof the fields); its time, 0 if none. */
TimestampTz read_problem(FollowerStartError& e, char* message, char* hint);
/* The reason the follower cannot start (FollowerStartError), stated by the follower itself. */
void record_start_reason(int sqlerrcode, const char* message, const char* hint);
/* The follower has started: nothing prevents it any more. */
void clear_start_error();

/* --- follower_summaries.cpp ---------------------------------------------------- */

void build_set();
void empty_set_from(Lsn start);
bool record_walk_growth(const RelFork& rel, BlockNumber first, Lsn lsn);
bool retry_held_step();
void summaries_start_fresh(Lsn start);
bool summaries_continue_scan(Lsn claim, Lsn reads_from);
void guard_scan_chain(Lsn end, TimeLineID tli);
void summaries_resume(Lsn start, Lsn covered);
void summaries_after_restart(Lsn lsn);
void restart_summaries_after_overflow();

/* --- follower_cuts.cpp --------------------------------------------------------- */

bool note_redo(Lsn redo);
bool cut_before_record(Lsn end);
void cut_after_record();
void cut_when_full();
bool cut_for_save(bool* deferred);
bool cut_on_request();
bool retry_pending_cut();
void mark_plain_summary();

/* --- follower_slot_start.cpp ------------------------------------------------- */

Lsn slot_restart_lsn();
Lsn reserve_wal();
void advance_slot(Lsn lsn);
void establish_start();
void start_fresh(Lsn start, Lsn floor, bool with_record_ending_at_start = false);

/* --- follower_save.cpp --------------------------------------------------------- */

void forget_restored_start();
void save_now();
void wal_save_prepare();
Lsn wal_save_covered_lsn();
SavePoint wal_save_point(Lsn covered);
void wal_save_done(Lsn covered);

/* --- follower_read.cpp --------------------------------------------------------- */

int apply_available(int budget);

}  // namespace ptrack::pg::wal_follower

#endif
