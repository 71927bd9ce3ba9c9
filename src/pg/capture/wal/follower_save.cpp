/*
 * follower_save.cpp -- the WAL follower's map saves: its steps of
 * save_map() (capture_source.h; entries of kWalSource) and when it runs
 * one (save_now()).  The map keeps only the resume point: a save claims
 * that every record ending at or before follower.next is in the summaries,
 * so the summaries are cut up to there first (cut_for_save()), and after
 * the save the replication slot lets the WAL before it go.  A save that
 * cannot be made is retried with a growing pause; one the summaries cannot
 * follow yet (their chain ends ahead of the follower) waits.
 */
extern "C" {
#include "postgres.h"

#include "utils/timestamp.h"
}

#include "capture/capture_source.h"
#include "capture/wal/follower.h"
#include "capture/wal/growth_watch.h"

namespace ptrack::pg::wal_follower {

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

void save_now()
{
    /* A save now would claim the record ending at follower.next, not read yet (apply_available()). */
    if (follower.read_record_ending_at_next)
        return;
    /* The summaries first, up to the map's covered LSN: if they cannot be written, no save either. */
    bool deferred = false;
    if (cut_for_save(&deferred) && save_map(running_source()))
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

}  // namespace ptrack::pg::wal_follower
