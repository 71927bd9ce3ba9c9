/*
 * capture.cpp -- mark announcements (see capture.h), the whole-directory
 * capture used after a directory copy, and the restarts of tracking; see
 * capture.h.
 */
extern "C" {
#include "postgres.h"

#include "access/xlogdefs.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/timestamp.h"
}

#include "core/boundary.h"
#include "capture/capture.h"
#include "compat/compat.h"
#include "core/datadir_walk.h"
#include "core/shared_state.h"

namespace ptrack::pg {

PTRACK_ENGINE_NOEXCEPT(&Map::attached);

MarkAnnouncement* announcements = nullptr;
uint32_t announcement_count = 0;

namespace {

/* For processes without a PGPROC (none is expected to write): a private line nobody waits on. */
MarkAnnouncement private_announcement;

void mark_every_block(const RelationFile* file, void*)
{
    /* Every block of the segment file is marked as written now, after the copy finished. */
    const uint64_t nblocks = (file->size_bytes + BLCKSZ - 1) / BLCKSZ;
    const BlockNumber first = file->segment.segno * static_cast<BlockNumber>(RELSEG_SIZE);
    if (nblocks > 0)
        capture_blocks_written(file->segment.rel, first, static_cast<uint32_t>(nblocks));
}

}  // namespace

MarkAnnouncement* attach_announcement() noexcept
{
    const int number = my_proc_number();
    if (number >= 0 && announcements != nullptr && static_cast<uint32_t>(number) < announcement_count)
        my_announcement = &announcements[number];
    else
        my_announcement = &private_announcement;
    return my_announcement;
}

void wait_for_marks_in_progress() noexcept
{
    atomic_fence(Order::kSeqCst);
    for (uint32_t i = 0; i < announcement_count; ++i) {
        const uint64_t seen = announcements[i].state.load(Order::kAcquire);
        if ((seen & 1) == 0)
            continue;
        /* A mark is a few hundred instructions; wait for this one to end (the generation moves on). */
        for (int spins = 0; announcements[i].state.load(Order::kAcquire) == seen; ++spins) {
            if (spins < 1000)
                pg_spin_delay();
            else
                pg_usleep(100);
        }
    }
}

void capture_relation_files(const char* dir)
{
    if (!map.attached())
        return;
    if (!walk_relation_dir(dir, mark_every_block, nullptr)) {
        char reason[MAXPGPATH + 64];
        snprintf(reason, sizeof(reason), "directory \"%s\" was copied but is not a database directory", dir);
        restart_tracking(reason);
    }
}

void restart_tracking(const char* reason)
{
    if (map.attached())
        restart_tracking_at(current_mark_lsn(), reason);
}

void restart_tracking_at(Lsn now, const char* reason)
{
    if (!map.attached())
        return;
    shared->init_lsn.store_max(now);
    (void) shared->restart_count.add(1, Order::kRelaxed);
    /* For ptrack_status(): no allocation, no error under the spinlock. */
    const TimestampTz at = GetCurrentTimestamp();
    RestartInfo& last = shared->last_restart;
    SpinLockAcquire(&last.mutex);
    last.time = at;
    last.lsn = now;
    strlcpy(last.reason, reason, sizeof(last.reason));
    SpinLockRelease(&last.mutex);
    ereport(WARNING, (errmsg("ptrack restarted change tracking at %X/%X: %s", PTRACK_LSN_ARGS(now), reason),
                      errdetail("Changes made before this LSN are not known to ptrack."),
                      errhint("The next backup must be a full backup.")));
}

}  // namespace ptrack::pg
