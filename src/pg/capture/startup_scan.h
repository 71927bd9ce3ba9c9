/*
 * startup_scan.h -- the startup scan: before recovery starts, the postmaster
 * reads the WAL left in pg_wal from the point up to which the loaded map is
 * complete, and marks everything those records changed (docs/design.md
 * section 3.5).  The hooks source scans after its loaded map's covered LSN
 * and to find a fresh map's start (capture/hooks/hooks_load.cpp); the wal
 * source scans a restored backup's WAL before recovery
 * (capture/wal/wal_load.cpp), so the
 * scan sits in capture/ itself, beneath both.
 *
 * Why: a saved map holds the hooks' marks made before the save; marks made
 * after it live in memory and a crash loses them.  Recovery re-marks the
 * pages it writes again, but replay skips a page whose on-disk LSN is already
 * at or past the record (a record without a full-page image, e.g. with
 * full_page_writes turned off for a while, or replayed on a standby), so it
 * does not mark it.  The WAL itself names every block those records changed:
 * marking them here makes the map complete up to the end of the WAL, whatever
 * recovery rewrites.
 */
#ifndef PTRACK_PG_STARTUP_SCAN_H
#define PTRACK_PG_STARTUP_SCAN_H

extern "C" {
#include "postgres.h"

#include "catalog/pg_control.h"
}

#include "capture/wal_records.h"
#include "core/boundary.h"
#include "ptrack/map.h"

namespace ptrack::pg {

struct StartupScan {
    Lsn start;          /* the first record read: the one before the requested LSN if pg_wal has it, so
                           that a record ending exactly there is marked too; else the first after it */
    Lsn end;            /* end of the last valid record: every change before it is marked */
    uint64_t records;   /* records read */
    uint64_t files;     /* relation files created or truncated in the range, marked from their size */
    uint64_t truncations; /* records in the range that cut a relation fork to a length above 0 */
};
PTRACK_FRAME_SAFE(StartupScan);

/*
 * A second destination for what the scan reads (the wal source records a
 * restored backup's WAL as change summaries too: capture/wal/scan_summary_writer.h).
 * begin() is called once, with the first LSN the scan proves (the
 * scanned_from() below), before any record; then every record is sent to
 * the recorder after the map, and record_done() is called with the record's
 * end LSN: true when the record is recorded, false when the recorder made
 * room before it (it cut there) and wants it sent again.  A recorder that
 * fails stops recording on its own and answers true; the map's scan goes on.
 */
class ScanRecorder : public WalChangeSink {
public:
    virtual void begin(Lsn first_proven) noexcept = 0;
    virtual bool record_done(Lsn end) noexcept = 0;

protected:
    ~ScanRecorder() = default;
};

/*
 * In the postmaster, before any process starts: reads the WAL of timeline
 * `timeline` from pg_wal, from the first record at or after `from` to the
 * end of the valid WAL, and marks in `map` every block each record names (at
 * the record's end LSN) and the blocks of files it creates or truncates (at
 * the end of the WAL, from their size now).  Returns nullptr when the range
 * read provably holds every change made after `from` (it reaches pg_control's
 * checkpoint record and minimum recovery point, and no later WAL of this or a
 * newer timeline exists), with *scan filled; otherwise the reason it cannot
 * be proven, completing "... because ...": the caller must not trust the
 * map.  Raises no ERROR; reads at most the WAL recovery is about to replay
 * (plus whatever a standby received beyond it).  `recorder`, if given, also
 * receives every record read (ScanRecorder above); whether its recording is
 * usable is its own to say, and only when this returns nullptr.
 */
const char* scan_wal_at_startup(const ControlFileData& control, Lsn from, TimeLineID timeline, Map* map,
                                StartupScan* scan, ScanRecorder* recorder = nullptr);

/*
 * Hooks, a base backup whose WAL pg_wal does not hold (it comes through
 * restore_command): in the postmaster, before recovery, marks in `map` the
 * blocks of the WAL record of timeline `timeline` that ends exactly at `lsn`
 * (the backup's redo LSN), which replay, starting there, never applies; the
 * segments it needs come from pg_wal, else through restore_command
 * (wal_archive.h).  nullptr when marked (or no record ends there), else why
 * it could not be, completing "... because ...".  Raises no ERROR.
 */
const char* mark_record_ending_at(const ControlFileData& control, Lsn lsn, TimeLineID timeline, Map* map);

/*
 * The first LSN from which a scan that read the WAL from its start proves
 * every change: `redo`, unless a record ending exactly there may have been
 * left unread (pagemapset(redo) must list it), then one byte past it.
 */
Lsn scanned_from(const StartupScan& scan, Lsn redo, uint32_t segment_bytes);

/* Logs what a startup scan did, `what` completing the message ("since the redo LSN ..."). */
void log_startup_scan(const StartupScan& scan, const char* what);

}  // namespace ptrack::pg

#endif
