/*
 * ptrack/summary_cuts.h -- where the WAL follower ends a change summary, and
 * when its map save waits: the follower's decisions as pure functions of its
 * position in the WAL, so that they are unit-tested without a server
 * (t/unit/summary_cuts_test.cpp).  The follower (src/pg/capture/wal/) asks,
 * then does the I/O: writes the summary, reads a record again, marks a file.
 *
 * The rules (docs/design.md section 4.5).  A record's changes count at its
 * end LSN, and a summary [start, end) holds every change at an LSN in that
 * range, so the record ending exactly at a cut belongs to the later summary.
 * The set being built holds every change at an LSN >= set_start that the
 * follower has applied; the follower stands at `next`, the end of the last
 * record it applied.  A summary ends:
 *
 *  - at a checkpoint's redo LSN R, where a backup may start (such a summary
 *    carries kSummaryEndsAtRedo).  R learnt ahead of the follower joins the
 *    redo targets (RedoTargets), cut at just before the first record ending
 *    at or after R is applied (cut_before_record()).  R learnt where the
 *    follower stands (R == next) is cut at now, the last record (ending at
 *    R) read again into the new set (note_redo()).  R learnt behind it was
 *    learnt too late: the next save's cut is the fallback, and a backup
 *    starting there takes that summary whole (extra blocks, never fewer);
 *    but if a summary already ends exactly at R (a cut at the last record's
 *    end, below), it is marked as ending at a redo LSN, so that retention
 *    keeps the boundary.  A storm of checkpoints is thinned: R within
 *    kMinRedoCutMicros of the last one taken, with less than
 *    kMaxRedoLetGoWal of WAL in the summary it would end, is let go.
 *  - just past the last record, at next + 1 (a save, a backend's request,
 *    a full set): no record ends at next + 1 or next + 2 (records end at
 *    MAXALIGNed positions), and the map's covered LSN C goes with a chain
 *    ending at C + 1 (cut_point_now()).  Such a cut first ends a summary
 *    at next with the last record read again into the next set
 *    (cut_at_last_record_end_first(), splits_at_last_record_end()), so
 *    that a redo LSN learnt later exactly at next finds a summary ending
 *    there (to mark) and one starting there.
 *  - at next, the record read again, when an add of the record was refused
 *    (the set is full: cut_after_record()).
 *
 * A map save claims next; the summaries must then end at next + 1.  If they
 * already end past it (a cut at a redo target the follower has not reached,
 * or the startup scan's summaries of WAL it reads again), the save waits
 * until the follower gets there (save_cut(): kDeferred), since a restart
 * would cut the chain back to C + 1 and find it broken.
 *
 * Nothing here allocates or throws; the structs are plain data that the
 * follower keeps in its own memory.
 *
 * INTERFACE: FollowerPosition, SummaryCut, RedoTargets, RedoWatch,
 * cut_point_now(), splits_at_last_record_end(),
 * cut_at_last_record_end_first(), cut_after_record(), save_cut(),
 * note_redo(), cut_before_record(), summary_written().
 */
#ifndef PTRACK_SUMMARY_CUTS_H
#define PTRACK_SUMMARY_CUTS_H

#include "ptrack/engine_guard.h"

#include <cstdint>

#include "ptrack/relfork.h"

namespace ptrack {

/* Redo LSNs ahead of the follower it keeps at most (RedoTargets). */
constexpr uint32_t kMaxRedoTargets = 16;

/*
 * A redo LSN closer in time than kMinRedoCutMicros to the last one taken,
 * with less than kMaxRedoLetGoWal bytes of WAL since the summary it would
 * end began, is let go (note_redo()).  Both must hold: a follower catching
 * up reads the redo LSNs of minutes of checkpoints within milliseconds, and
 * each of them may be a backup's start.
 */
constexpr int64_t kMinRedoCutMicros = 200 * 1000;
constexpr Lsn kMaxRedoLetGoWal = 1024 * 1024;

/* Where the follower stands, as the cut decisions see it. */
struct FollowerPosition {
    Lsn next;                        /* every record ending at or before it is applied */
    bool next_is_record_end;         /* next is the end of a record read (reading can go on from there) */
    bool record_ending_at_next_unread; /* the record ending exactly at next is still to be read (a catch-up
                                          from a base backup's redo LSN): nothing may claim next yet */
    Lsn last_start;                  /* the last record applied: its start; 0 unknown */
    Lsn last_end;                    /* and its end (== next when known) */
};

/* A cut: the set written as the summary [set_start, at); at == 0: none. */
struct SummaryCut {
    Lsn at;
    bool readd;     /* the last record applied (ending at `at`) is read again into the next set */
    uint32_t flags; /* the summary's header flags (kSummaryEndsAtRedo) */
};

/*
 * Checkpoints' redo LSNs learnt ahead of the follower and not reached yet,
 * ascending, at most kMaxRedoTargets (on 15 only GetRedoRecPtr() tells them,
 * and a follower behind the WAL may learn the next one before it reaches
 * the last).  Plain data: zero-initialised, it is empty.
 */
class RedoTargets {
public:
    uint32_t count() const noexcept { return count_; }
    Lsn operator[](uint32_t i) const noexcept { return lsn_[i]; }
    void clear() noexcept { count_ = 0; }

    /* Forgets the targets at or before `lsn` (passed, or no later than the set's start). */
    void drop_through(Lsn lsn) noexcept;

    /*
     * Adds `redo` in order (once).  Full: the target whose loss joins the two
     * smallest summaries around it goes, the summary before the oldest
     * starting at `set_start`; never the newest of the targets and `redo`
     * (the likeliest backup start).  A backup starting at the one lost takes
     * both summaries: more blocks, never fewer.
     */
    void add(Lsn redo, Lsn set_start) noexcept;

private:
    Lsn lsn_[kMaxRedoTargets];
    uint32_t count_;
};

/* What the follower knows of redo LSNs, and the summary a late one marks. */
struct RedoWatch {
    RedoTargets targets;
    Lsn seen;            /* the last redo LSN learnt ahead of the set's start; 0: none */
    int64_t noted_at;    /* when a redo LSN was last taken (microseconds); 0: never */
    Lsn plain_start;     /* the last summary written that ends at a record's end without */
    Lsn plain_end;       /*   kSummaryEndsAtRedo (its set read that record again); 0: none */
    Lsn mark_start;      /* that summary, once a redo LSN was learnt at its end: to be marked */
    Lsn mark_end;        /*   as ending at a redo LSN (by the caller, then set to 0); 0: none */
};

/*
 * The cut just past everything applied: next + 1 when the set starts at or
 * before next, next + 2 when it starts at next + 1 (it holds only what file
 * walks found since); 0 when the set starts later still (nothing it would
 * vouch for is applied yet) or the record ending at next is unread.
 */
Lsn cut_point_now(const FollowerPosition& pos, Lsn set_start) noexcept;

/*
 * Whether a summary can end at next, the end of the last record applied,
 * that record read again into the next set: the set starts before next, and
 * that record is known (its start, its end == next) and read.  Else a
 * summary starts at next already, or there is nothing to split.
 */
bool splits_at_last_record_end(const FollowerPosition& pos, Lsn set_start) noexcept;

/*
 * Whether `cut` is one just past the last record (at next + 1, no record
 * read again, no flag), which a cut at the last record's end comes before.
 */
bool cut_at_last_record_end_first(const SummaryCut& cut, Lsn next) noexcept;

/*
 * After applying the record ending at next: an add refused (`refused`: the
 * set is full and may hold part of it) cuts at next with the record read
 * again, unless the set starts at or after next, when no summary can hold
 * the record (*restart: tracking restarts after it); a set near its budget
 * (`cut_soon`) cuts at next + 1.  {0}: no cut.
 */
SummaryCut cut_after_record(bool refused, bool cut_soon, Lsn next, Lsn set_start, bool* restart) noexcept;

/* What a map save claiming next needs of the summaries (see the top of this file). */
enum class SaveCut {
    kDeferred, /* the chain ends past next + 1 and past init_lsn: the save waits until the follower gets there */
    kNone,     /* the chain ends at next + 1 already, or the set starts ahead (a fresh one not reached yet) */
    kCut       /* cut at next + 1 first */
};
SaveCut save_cut(Lsn set_start, Lsn next, Lsn init_lsn) noexcept;

/*
 * A checkpoint's redo LSN learnt at time `now` (microseconds): before a
 * batch, or from the record that starts at it.  Ahead of the follower it
 * joins the targets; exactly where it stands, true: the caller cuts at
 * `redo` now with the last record read again and kSummaryEndsAtRedo
 * (unless `cut_waiting`: a cut waits already, and no second one is made);
 * at or below set_start, a summary written ending exactly there
 * (plain_end) is to be marked (mark_start, mark_end).  A redo LSN seen
 * already, one that is a target already, and one of a storm (see the top)
 * change nothing.
 */
bool note_redo(RedoWatch& watch, Lsn redo, const FollowerPosition& pos, Lsn set_start, bool cut_waiting,
               int64_t now) noexcept;

/*
 * Before applying a record ending at `end`: forgets the targets up to the
 * first at or before `end` that the follower has not passed and the set
 * has not started at or after, and returns it (cut there, flagged, before
 * the record); 0: none, the record is applied.
 */
Lsn cut_before_record(RedoTargets& targets, Lsn end, Lsn next, Lsn set_start) noexcept;

/*
 * The summary [start, cut.at) was written: one that ends at a record's end
 * without kSummaryEndsAtRedo (its record read again into the next set) is
 * remembered, so that a redo LSN learnt there later marks it (note_redo()).
 */
void summary_written(RedoWatch& watch, Lsn start, const SummaryCut& cut) noexcept;

}  // namespace ptrack

#endif
