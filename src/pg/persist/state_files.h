/*
 * state_files.h -- where ptrack keeps its own files, and how they reach
 * that folder from the other one (docs/design.md section 5.1).
 *
 * The files: the map (ptrack.map, ptrack.map.tmp, ptrack.map.delta), the
 * relation file sizes (ptrack.sizes, ptrack.sizes.new) and an earlier
 * version's limit table (ptrack.limits, ptrack.limits.tmp: read once to
 * migrate that version's map, capture/wal/map_migration.h).  Each capture source keeps them
 * in one folder (SourcePersistence::files_dir): the hooks in the data
 * directory, wal capture in pg_wal/ptrack, next to its change summaries.
 * pg_basebackup and pg_probackup (FULL backups, catchup) copy none of
 * pg_wal's contents, so a copy of a cluster that captures from the WAL
 * carries no ptrack state for the trust rules to refuse, as PostgreSQL's
 * own pg_wal/summaries.  A copy that does carry them (a file-system
 * snapshot, pg_rewind, a backup made by hand) is judged by the same rules
 * as before: a backup_label refuses the map.
 *
 * What is in the other folder at startup (settle_state_files(), called by
 * load_map() in the postmaster before anything reads the files):
 *
 *   - a map of the running source, newer than the one in its own folder (or
 *     with none there): the files of a version of ptrack that kept wal
 *     capture's files in the data directory, or a move a crash interrupted.
 *     They are moved to the source's folder: ptrack.map.delta,
 *     ptrack.limits, ptrack.sizes and ptrack.sizes.new first, the map last,
 *     each renamed (across file systems: copied to ptrack.move.tmp, fsynced,
 *     renamed, the original then unlinked), both folders fsynced after each.
 *     The map's move is the commit.  Before it, the other folder's map says
 *     the move is not done, and the next start moves what is still there (a
 *     companion already moved is no longer there, or is an identical copy
 *     that the move replaces).  After it, the source's own map is at least as
 *     new, and the move is done.  The moved files are then judged by the
 *     usual rules, so tracking goes on without a full backup, and a data
 *     directory restored from a backup that carried them is refused by its
 *     backup_label as it always was.
 *   - another source's map, or one whose header does not decode: judged where
 *     it is (the usual WARNING: a map that cannot be trusted), so that a
 *     change of ptrack.capture is reported as before.
 *
 * After the load nothing reads the other folder: clear_other_folder()
 * removes every file of ptrack's from it (a refused map, the leftovers of
 * a completed move, with wal capture the hooks' bypass journals), so that
 * with wal capture no ptrack file stays outside pg_wal.
 *
 * Like the rest of persist/, nothing here raises an ERROR: the postmaster
 * must start, and a save must not stop the process that makes it.
 *
 * INTERFACE: StateFile, state_file(), ensure_state_folder(), fsync_state_folder_for_save(), SettledMap,
 * settle_state_files(), clear_other_folder(), remove_state_files().
 */
#ifndef PTRACK_PG_STATE_FILES_H
#define PTRACK_PG_STATE_FILES_H

#include <cstddef>

namespace ptrack::pg {

/* One of ptrack's own files (the change summaries are summary_io.h's). */
enum class StateFile { kMap, kMapTemp, kMapDelta, kLimits, kLimitsTemp, kSizes, kSizesNew };

/*
 * `file` in the running source's folder, relative to the data directory:
 * "ptrack.map" (hooks), "pg_wal/ptrack/ptrack.map" (wal).  Only while
 * tracking is on (persist_source set: use_source_persistence()).
 */
const char* state_file(StateFile file);

/*
 * The running source's folder exists: pg_wal/ptrack is created if it is
 * missing, and it and pg_wal are fsynced.  False after warn_save_failed(what, ...).
 */
bool ensure_state_folder(const char* what);

/* fsync of the running source's folder after a save created a file in it; warn_save_failed() on failure. */
bool fsync_state_folder_for_save(const char* what);

/* What settle_state_files() leaves for the load. */
struct SettledMap {
    const char* path;         /* the map to judge: the source's own, or another source's in the other folder */
    const char* move_failure; /* why this source's files could not be moved here (start afresh), or nullptr */
};

/* In the postmaster, before the map is loaded: see the header comment. */
SettledMap settle_state_files();

/* In the postmaster, after the load: removes every file of ptrack's from the other folder (LOG for each). */
void clear_other_folder();

/* Tracking off (ptrack.map_size = 0), in the postmaster: removes ptrack's files from both folders (LOG for each). */
void remove_state_files();

}  // namespace ptrack::pg

#endif
