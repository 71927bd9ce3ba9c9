/*
 * capture_wal.h -- the wal capture source: a background worker that follows
 * capture_wal.h -- the wal capture source: a background worker that follows
 * the server's WAL and records what every record changed (the WAL follower,
 * follower.h), for servers without the core patch's hooks (docs/design.md
 * section 4); its registration, parameters and backends' side are in
 * capture_wal.cpp.
 */
#ifndef PTRACK_PG_CAPTURE_WAL_H
#define PTRACK_PG_CAPTURE_WAL_H

extern "C" {
#include "postgres.h"
#include "fmgr.h"

/* The follower's entry point, found by name by the postmaster (bgw_function_name). */
PGDLLEXPORT void ptrack_wal_follower_main(Datum arg);
}

namespace ptrack::pg {

/* The physical replication slot that keeps the WAL the follower still needs. */
constexpr const char* kFollowerSlotName = "ptrack_wal_follower";

/* Defines the follower's GUCs (ptrack.wal_wait_timeout); in _PG_init, whatever the source. */
void define_wal_follower_gucs();

/*
 * No follower will run (tracking off, or the hooks source runs): in the
 * postmaster before the startup process loads the replication slots, removes
 * the follower's slot from pg_replslot, so that the WAL it kept can be
 * recycled.  Logs what it did, with `why` completing "...: ".
 */
void remove_follower_slot(const char* why);

/* Registers the follower with the postmaster; in _PG_init when the wal source runs. */
void register_wal_follower();

/*
 * Freshness, in a backend, before answering for the wal source (a no-op for
 * hooks): on a primary, flushes the WAL up to the insert position read at
 * the call; waits until the follower has applied the WAL up to that record
 * boundary (the replay position on a standby), and until ptrack_init_lsn()
 * is established.  Raises an ERROR with a hint at once if the follower is
 * failing to start (the reason it published, shared_state.h), else after
 * ptrack.wal_wait_timeout; cancellable.  Call from C-style frames only.
 */
void wait_for_follower();

}  // namespace ptrack::pg

#endif
