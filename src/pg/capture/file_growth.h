/*
 * file_growth.h -- relation extension that the WAL never shows, for the WAL
 * follower (docs/design.md section 4.3).
 *
 * PostgreSQL extends relation files with zero pages that get no WAL record
 * until they are first used, and some never are (bulk extension of a heap,
 * hash index bucket allocation).  A backup tool must still see every block a
 * file gained after L: if that range was truncated since the previous
 * backup, the restore would otherwise keep the old pages there.  The hooks
 * see mdextend(); the WAL does not.  So the follower watches the files:
 *
 *   - it keeps the size of every relation segment file as of its last look
 *     (a "walk" of the data directory, one stat() per file);
 *   - each walk dates the blocks a file gained since the previous walk with
 *     an LSN read after the walk (the follower records them in its change
 *     set: growth_set_recorder()): >= the WAL position at the moment of any
 *     extension the walk saw, so pagemapset(L) lists every block added after
 *     L once a walk has seen it;
 *   - truncation, creation and drop records lower the remembered size
 *     (growth_truncated()), so a file truncated and extended again between
 *     two walks shows its regrowth;
 *   - a walk runs before every map save and before every answer of
 *     ptrack_get_pagemapset() (requested by the backend, wait_for_follower());
 *     the WAL follower's walk for an answer looks only at the files changed
 *     since the previous walk when its file watch vouches for the others
 *     (wal/growth_watch.h, growth_walk_some());
 *   - the sizes are saved with the map (ptrack.sizes), with the covered LSN
 *     of that save, so that after a restart the follower resumes with the
 *     sizes its saved state was made from.  Saving writes ptrack.sizes.new
 *     before the map and renames it over ptrack.sizes after, so whichever
 *     save the map file holds, one of the two files matches its covered LSN.
 *
 * The hooks source uses the same table and file for one window the hooks
 * leave open: a block added after the last map save and lost with the
 * in-memory marks by a crash has no WAL to re-mark it.  The checkpointer
 * walks before each save (growth_walk() with `skip_marked_since`) and saves
 * the sizes with the map; after a crash the postmaster marks what the files
 * gained since (growth_mark_since_save()).  docs/design.md section 3.7.
 *
 * The table lives in the process that saves the map (the follower, or the
 * checkpointer); C-style frames (may ERROR).
 */
#ifndef PTRACK_PG_FILE_GROWTH_H
#define PTRACK_PG_FILE_GROWTH_H

#include "ptrack/map.h"
#include "ptrack/relfork.h"
#include "ptrack/relpath.h"
#include "core/shared_state.h"

namespace ptrack::pg {

/* Creates the empty size table in the current memory context's process (TopMemoryContext). */
void growth_create();

/* Forgets every size: the next walk is a baseline. */
void growth_reset();

/*
 * Loads the sizes saved with the map whose covered LSN is `covered`; false
 * (table unchanged) if neither ptrack.sizes.new nor ptrack.sizes matches,
 * with why each does not in `why` if given (`why_len` bytes).
 */
bool growth_load(Lsn covered, char* why = nullptr, size_t why_len = 0);

/*
 * Looks at every relation file: with `baseline`, records sizes only;
 * otherwise marks the blocks each file gained since its remembered size
 * (0 for a file not seen before), except, when `skip_marked_since` is not 0,
 * a block the map already shows changed at or after it (the hooks marked it
 * when the file was extended: marking it again would only list it in one
 * more incremental backup).  Returns the LSN read after the stat()s, which
 * the marks carry.
 */
Lsn growth_walk(bool baseline, Lsn skip_marked_since = 0);

/*
 * The WAL follower's watched walk (growth_watch.h): as growth_walk(false),
 * but looks only at the `count` segment files `segments` (one that no
 * longer exists is forgotten, as a full walk forgets a file it does not
 * find) and at every relation file of the `dir_count` directories `dirs`;
 * every other file keeps its remembered size.  Returns the LSN read after
 * the stat()s, which dates the growth found (recorded and pending as with
 * growth_walk()).
 */
Lsn growth_walk_some(const RelSegment* segments, uint32_t count, const char* const* dirs, uint32_t dir_count);
/* Relation segment files the table remembers (bounds the watch's set of changed files). */
uint32_t growth_known_files();

/*
 * The hooks source, in the postmaster before recovery from a crash
 * (hooks/hooks_load.cpp): loads the sizes saved with the map whose covered LSN is
 * `covered`, looks at every relation file and marks in `map`, at `lsn`, the
 * blocks each file gained since (every block of a file the sizes do not
 * name); *blocks counts them.  nullptr, or why it could not (no sizes file
 * matches `covered`, or the data directory could not be read: that ERROR is
 * caught and its message returned), with nothing marked then.  Leaves no
 * table behind.  Valid until the next call.
 */
const char* growth_mark_since_save(Lsn covered, Lsn lsn, Map* map, uint64_t* blocks);

/*
 * The hooks source, in the checkpointer before each map save
 * (capture_hooks.cpp): walks the data directory and writes
 * ptrack.sizes.new for a save complete up to `covered`.  The first call
 * takes the sizes saved with the map loaded at startup (covered LSN
 * `loaded_covered`, 0 for a fresh map) as the previous walk if they are
 * there, else records a baseline.  Each walk marks the growth the map does
 * not show marked since the previous walk began: the hooks mark a block
 * after mdextend() wrote it, so a walk can see a block whose mark is still
 * to come (docs/design.md section 3.7).  False on failure, WARNING logged (a
 * file that cannot be written, a directory that cannot be read: the ERROR
 * is caught, so the checkpoint goes on; the table starts over).
 */
bool growth_prepare_hooks_save(Lsn covered, Lsn loaded_covered);

/*
 * A WAL record ending at `lsn` references `block` of `rel`: the file had at
 * least block + 1 blocks before it, so blocks between the remembered size
 * and `block` were added before `lsn`, and the remembered size grows.
 * Returns the first block the WAL had not dated yet (`block` if none; below
 * the remembered size when a walk saw them first): the caller records
 * [that, block) in its change set, and they count as dated from now on
 * (growth_settle_pending()).  This dates most extensions by the WAL (a new page
 * is WAL-logged when first used) instead of by the next walk, so a backup
 * started between an extension and that walk is not given those blocks.
 */
BlockNumber growth_block_referenced(const RelFork& rel, BlockNumber block, Lsn lsn);

/* A WAL record cut `rel` to `nblocks` blocks (truncation; 0: created or dropped). */
void growth_truncated(const RelFork& rel, BlockNumber nblocks);

/* A WAL record created or dropped every file of database `db` in tablespace `spc`. */
void growth_database_replaced(uint32_t spc, uint32_t db);

/*
 * Before recovery, in the postmaster (wal/wal_load.cpp): records the size of
 * every relation file as it is before the startup process replays anything
 * and saves them as ptrack.sizes for `redo`, the LSN recovery starts from,
 * so that a fresh map's follower can take them as its baseline instead of a
 * walk made after replay (docs/design.md section 4.7).  Leaves no table
 * behind; false (WARNING logged) if the file could not be written.  Raises
 * an ERROR if the data directory cannot be read.
 */
bool growth_save_before_recovery(Lsn redo);

/*
 * The WAL follower's change set (docs/design.md section 4.3).  A walk dates
 * the growth it sees with the LSN read after it, P; that growth must end up
 * in a summary whose end is > P, and the follower cuts summaries at LSNs
 * it has applied, usually below P.  So each grown segment is kept pending,
 * waiting for the follower to apply the WAL up to P: most growth is named
 * by that WAL (a new page is WAL-logged when first used), and a follower far
 * behind (catching up after a load) would otherwise put a whole load's
 * growth into every summary up to P, the one starting at a backup's redo
 * LSN before P too.
 *
 *   - growth_settle_pending(X, whole), before a cut at X (every record
 *     ending before X applied): each waiting entry with P < X goes to
 *     `recorder` ("every block from N on", at P), N being the first block
 *     the WAL did not date (SizeEntry::dated; an entry the WAL dated whole
 *     is forgotten).  With `whole` (a backend's cut: its answer must hold
 *     every growth found before), the others go too, from their old size;
 *   - growth_replay_pending(X), after it: forgets the entries the summary
 *     just written holds at their date (recorded, P < X); those recorded
 *     whole for a backend wait again; one the recorder refused, its set
 *     being full, is dated X and given to it again (later is always safe).
 *
 * Why the WAL's dates suffice for the blocks below `dated`: a record naming
 * block b shows every block up to b existed before it, and a file shrinks
 * only after its truncation or drop record (lowering `dated`) or is seen
 * shorter by a walk (lowering it too); so an extension a walk saw before P,
 * of a block below `dated` once every record up to P is applied, came
 * before the record that raised `dated` past it, which recorded it.
 *
 * A save writes the sizes of pending segments as they were before that
 * growth, so that after a crash, when the in-memory set is lost, the next
 * walk sees the growth again.  The recorder returns false when it could not
 * record.  Without a recorder (the hooks source) nothing is pending.
 * Unlogged relations' files are never reported (they are not backed up).
 */
using GrowthRecorder = bool (*)(const RelFork& rel, BlockNumber first, Lsn lsn);
/*
 * Whether growth_walk() also marks the growth in the map (true by default:
 * the hooks source).  The WAL follower turns it
 * off: its changes go to its change set only, and the map keeps only the
 * resume point (docs/design.md section 4.6).
 */
void growth_set_marks_map(bool marks);
void growth_set_recorder(GrowthRecorder recorder);
void growth_settle_pending(Lsn applied_before, bool whole);
void growth_replay_pending(Lsn cut_end);
/* Pending growth entries (for the follower's log). */
uint32_t growth_pending_count();

/* Writes ptrack.sizes.new for a save complete up to `covered`; false on failure (WARNING logged). */
bool growth_prepare_save(Lsn covered);

/* After the map save succeeded: ptrack.sizes.new becomes ptrack.sizes. */
void growth_commit_save();

/*
 * At startup, in the postmaster, once the map is judged (ptrack.cpp, after load_map()):
 * settles a ptrack.sizes.new left by a save that crashed or failed between
 * its two renames, or brought in by a copy of the data directory.  With
 * `covered` the covered LSN of the sizes the map in use needs (0: none), a
 * ptrack.sizes.new that is intact and saved for it replaces ptrack.sizes
 * (the save's second rename, done now); any other is removed (LOG).  Then
 * only ptrack.sizes counts.  C-style frame (may ERROR on out of memory).
 */
void growth_settle_files(Lsn covered);

}  // namespace ptrack::pg

#endif
