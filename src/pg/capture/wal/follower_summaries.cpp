/*
 * follower_summaries.cpp -- the life of the WAL follower's change set
 * (follower.h, struct Summaries): built with the budget
 * ptrack.wal_summary_memory gives, emptied after each cut, and (re)started
 * with the summary files that go with it: a fresh start removes them all, a
 * resume keeps the chain that ends where the saved map is complete, a
 * restored backup's start goes on from the summaries the postmaster wrote
 * of the WAL it read before recovery, and a restart of tracking removes
 * what no longer holds.  A step on the files that cannot be done (the
 * directory unusable) holds the follower until it can: nothing is applied,
 * cut or saved meanwhile, so the map never gets ahead of the summaries.
 *
 * Also the growth the file walks record into the set.  Where a summary ends
 * is follower_cuts.cpp's.
 */
extern "C" {
#include "postgres.h"

#include "utils/timestamp.h"
}

#include <new>

#include "capture/capture.h"
#include "capture/wal/capture_wal.h"
#include "capture/wal/follower.h"

namespace ptrack::pg::wal_follower {

PTRACK_ENGINE_NOEXCEPT(&ChangeSet::add_block, &ChangeSet::add_limit, &ChangeSet::add_database, &ChangeSet::clear,
                       &ChangeSet::reset, &ChangeSet::open_cursor, &ChangeSet::close_cursor, &ChangeSet::empty);

namespace {

/* The set's own storage: private memory (malloc inside), no destructor (never a C++ object across an ereport). */
alignas(ChangeSet) unsigned char set_storage[sizeof(ChangeSet)];

size_t summary_budget()
{
    return wal_summary_budget_bytes();
}

/* No summary vouches for anything while a step waits (0: summary_scan() refuses), else from the set's start. */
void publish_summarized_start()
{
    publish(&shared->follower.summarized_lsn, summaries_held() ? 0 : summaries.set_start);
}

/* A new start of the summaries at `start`: also forgets the redo targets, the summary to mark and the last record. */
void restart_set(Lsn start)
{
    empty_set_from(start);
    summaries.scan_tli = 0;
    summaries.redo.targets.clear();
    summaries.last_start = 0;
    summaries.last_end = 0;
    summaries.redo.plain_start = summaries.redo.plain_end = 0;
    summaries.redo.mark_start = summaries.redo.mark_end = 0;
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
     * A resume with no chain to go on from.  The map holds no marks (a map
     * of an earlier version that did was migrated by the postmaster:
     * wal_migrate_loaded()): nothing proves the changes before covered + 1,
     * and tracking restarts there.
     */
    const Lsn covered = summaries.held_covered;
    const Lsn init = init_lsn();
    if (summaries.held == HeldStep::kKeepChain && *kept == 0 && init != 0 && init <= covered) {
        char why[160];
        snprintf(why, sizeof(why), "no change summaries end where the saved map is complete (%X/%X)",
                 PTRACK_LSN_ARGS(covered + 1));
        restart_tracking_at(covered + 1, why);
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

}  // namespace

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
    summaries.cut = SummaryCut{0, false, 0};
    summaries.backoff_s = 0;
    summaries.refused = false;
    summaries.cut_soon = false;
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
 * restored backup's WAL, [from, end) (scan_summary_writer.h): where the map's
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
 * Tracking restarted at `lsn` (a record that changed what no block list can
 * say): no summary may answer for an earlier LSN.  The set keeps what it
 * holds (extra) and vouches from `lsn` on.
 */
void summaries_after_restart(Lsn lsn)
{
    summaries.set_start = Max(summaries.set_start, lsn);
    summaries.redo.targets.drop_through(summaries.set_start);
    Lsn kept = 0;
    if (start_held_step(HeldStep::kRemoveAll, "change tracking restarted", 0, &kept))
        summaries_unheld(0, false);
}

/*
 * Before the record ending at `end`, read from a segment file of timeline
 * `tli`, is applied, while the follower reads again part
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
void guard_scan_chain(Lsn end, TimeLineID tli)
{
    if (end >= summaries.set_start) {
        summaries.scan_tli = 0; /* past the summarized WAL: the set records everything now */
        return;
    }
    if (tli == summaries.scan_tli)
        return;
    ereport(WARNING, (errmsg("ptrack's change summaries of the WAL read before recovery do not hold timeline %u after "
                             "%X/%X",
                             tli, PTRACK_LSN_ARGS(follower.next)),
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
 * the LSNs before it instead of answering short (a map of an earlier version,
 * which kept marks, was turned into that chain by the postmaster:
 * map_migration.h).
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

}  // namespace ptrack::pg::wal_follower
