/*
 * capture.cpp -- capture_block() and the whole-directory capture used after
 * a directory copy; see capture.h.
 */
extern "C" {
#include "postgres.h"

#include "access/xlogdefs.h"
}

#include "capture.h"
#include "datadir_walk.h"
#include "shared_state.h"

namespace ptrack::pg {

namespace {

void mark_every_block(const RelationFile* file, void* arg)
{
    const Lsn lsn = *static_cast<const Lsn*>(arg);
    const uint64_t nblocks = (file->size_bytes + BLCKSZ - 1) / BLCKSZ;
    const BlockNumber first = file->segment.segno * static_cast<BlockNumber>(RELSEG_SIZE);
    for (uint64_t b = 0; b < nblocks; ++b)
        capture_block(file->segment.rel, first + static_cast<BlockNumber>(b), lsn);
}

}  // namespace

void capture_relation_files(const char* dir)
{
    if (!map.attached())
        return;
    /* Taken after the copy finished: every copied block was written before this LSN. */
    Lsn lsn = current_mark_lsn();
    if (!walk_relation_dir(dir, mark_every_block, &lsn)) {
        char reason[MAXPGPATH + 64];
        snprintf(reason, sizeof(reason), "directory \"%s\" was copied but is not a database directory", dir);
        restart_tracking(reason);
    }
}

void restart_tracking(const char* reason)
{
    if (!map.attached())
        return;
    const Lsn now = current_mark_lsn();
    atomic_max_lsn(&shared->init_lsn, now);
    ereport(WARNING, (errmsg("ptrack restarted change tracking at %X/%X: %s", PTRACK_LSN_ARGS(now), reason),
                      errdetail("Changes made before this LSN are not known to ptrack."),
                      errhint("The next backup must be a full backup.")));
}

}  // namespace ptrack::pg
