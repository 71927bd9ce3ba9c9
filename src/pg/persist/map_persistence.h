/*
 * map_persistence.h -- the map survives restarts and crashes (docs/design.md
 * section 5): loaded at postmaster start if it can be trusted (map_load.cpp),
 * saved by the process the capture source makes responsible (map_save.cpp).
 * The file format and the trust rules are in the engine (ptrack/map_file.h,
 * ptrack/map_delta.h); the file primitives in map_io.h.
 *
 * What differs between the capture sources reaches this folder through
 * SourcePersistence, a part of each source's table of operations
 * (capture/capture_source.h): persist/ sits below capture/ and never asks
 * which source runs.
 */
#ifndef PTRACK_PG_MAP_PERSISTENCE_H
#define PTRACK_PG_MAP_PERSISTENCE_H

extern "C" {
#include "catalog/pg_control.h"
}

#include "core/shared_state.h"

namespace ptrack::pg {

/* What a map save records, from the source that triggers it. */
struct SavePoint {
    Lsn covered_lsn;    /* every change whose record ends at or before it is marked (or re-marked by recovery) */
    Lsn next_threshold; /* every mark stored after the save's copy holds a value >= it (ptrack/map_delta.h) */
};

/*
 * What the map's load and save need from the capture source that runs, one
 * per source (the `persistence` entry of capture/capture_source.h's table),
 * handed over once in _PG_init (use_source_persistence()).  The steps run in
 * the postmaster, before any other process exists, and raise no ERROR.
 */
struct SourcePersistence {
    CaptureSourceId id;              /* recorded in every saved map; a map saved by another source is not trusted */
    const char* files_dir;           /* where its files are, relative to the data directory ("": there; state_files.h) */
    const char* fresh_init_detail;   /* LOG detail of a start without a map file: where ptrack_init_lsn() comes from */
    const char* save_failure_detail; /* what a failed save means for backups (warn_save_failed()) */
    const char* save_failure_hint;   /* and what to check */
    /* Before the map file is read: the source's part of the resume point (shared_state.h). */
    void (*before_load)(const ControlFileData* control, SharedState* state);
    /*
     * A fresh map (cleared, the limit table too): sets state->init_lsn when
     * it can be known now (0: established later), marking in `map` what a
     * startup scan finds, and prepares the source's own fresh start
     * (presized_redo_lsn, restored_scan_from, ...).  `control` may be nullptr
     * (pg_control could not be verified).
     */
    void (*start_fresh)(const ControlFileData* control, SharedState* state, Map* map);
    /*
     * A map read from the files and trusted by the engine's rules: the
     * source's own checks and steps before it is used (a WAL scan, a file
     * the source needs with it).  nullptr, or why it cannot be trusted.
     */
    const char* (*continue_loaded)(const ControlFileData* control, const MapFileHeader& header, Map* map);
    /*
     * Whether the source marks changes in the map.  false (wal capture,
     * docs/design.md section 4.6): the map keeps only its covered LSN and
     * init_lsn (the resume point), in the smallest geometry
     * (MapGeometry::smallest()) whatever ptrack.map_size says, and its
     * marks answer nothing.  Fixed in _PG_init, before shared memory is
     * sized.
     */
    bool (*marks_map)();
    /*
     * A source that marks no map (marks_map() false), at startup: a trusted
     * ptrack.map of another geometry, saved by this source when it still
     * marked the map (an upgrade from an earlier version), read
     * whole into `old_map`, private memory freed after this returns, after
     * continue_loaded() accepted it.  The source takes from its marks what
     * it needs (wal: the change summary the chain lacks,
     * capture/wal/map_migration.h); only the map's init_lsn and covered LSN
     * are kept, in the small shared map.  nullptr: such a map is not
     * trusted.
     */
    void (*migrate_loaded)(const ControlFileData* control, const MapFileHeader& header, const Map& old_map);
};

/* In _PG_init, once the source that runs is known: what load_map(), flush_map() and warn_save_failed() use. */
void use_source_persistence(const SourcePersistence* source);

/* The source handed over (defined in map_io.cpp); nullptr while tracking is off. */
extern const SourcePersistence* persist_source;

/*
 * In the postmaster, on a freshly created shared state: the source's files
 * in its folder (settle_state_files(), state_files.h), then fills the map
 * from ptrack.map if it can be trusted, overwriting every byte of the region, and
 * sets init_lsn, loaded_covered_lsn and loaded_timeline from it.  Otherwise
 * clears the map, logs one WARNING naming the file and the reason (none when
 * there was no file), removes the rejected files, and sets init_lsn to what a
 * fresh map can prove (0: established later).  Last, the other folder is
 * cleared of ptrack's files (clear_other_folder()).  Never raises an ERROR
 * (the postmaster must start).
 */
void load_map(SharedState* state, Map* map);

/* At startup: backup_label is in the data directory (a restored base backup, or pg_rewind's label). */
bool backup_label_present();

/*
 * The redo LSN of backup_label, if it names a base backup taken with
 * pg_backup_start() ("BACKUP METHOD: streamed": pg_basebackup, pg_probackup;
 * not pg_rewind's label), else 0.
 */
Lsn base_backup_redo_lsn();

/*
 * Saves the map as complete up to `point.covered_lsn`: the whole map to
 * ptrack.map (temporary file, fsync, durable rename), or the slots changed
 * since the previous save appended to ptrack.map.delta, in the source's
 * folder (state_files.h).  Only ever called by
 * one process per server run.  On an I/O failure logs a WARNING and returns
 * false; the next save then writes the whole map.
 */
bool flush_map(const SavePoint& point);

}  // namespace ptrack::pg

#endif
