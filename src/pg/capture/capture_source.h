/*
 * capture_source.h -- which capture source feeds the map, and what each
 * source owns: the clock it marks with, the LSN up to which its saved marks
 * are complete, and what triggers a map save (docs/design.md section 2).
 *
 *   hooks  the core patch's storage-manager hooks (capture_hooks.cpp).
 *          Marks with the insert LSN (replay LSN in recovery); the map is
 *          saved by the checkpointer at the end of every sync phase, complete
 *          up to that checkpoint's redo LSN.
 *   wal    a background worker that follows the WAL (capture_wal.cpp).
 *          Marks with each record's end LSN; it saves the map itself, complete
 *          up to the end of the last record it applied, and keeps the WAL
 *          after that point with a replication slot of its own.
 *
 * ptrack.capture = auto | hooks | wal (postmaster only) picks one at startup:
 * auto takes hooks when the running server has them, else wal.
 */
#ifndef PTRACK_PG_CAPTURE_SOURCE_H
#define PTRACK_PG_CAPTURE_SOURCE_H

#include "core/shared_state.h"
#include "persist/map_persistence.h"

namespace ptrack::pg {

/* True when the running server exports the four hooks of the core patch (looked up by name). */
bool hooks_available();

/* Installs the storage-manager hooks (capture_hooks.cpp); requires hooks_available(). */
void install_capture_hooks();

/*
 * In the checkpointer at the end of a sync phase: the save point of the hooks
 * source.  Waits for the marks in progress (capture.h) before returning.
 */
SavePoint hooks_save_point() noexcept;

}  // namespace ptrack::pg

#endif
