/*
 * ptrack/limit_table.h -- "every block from B on changed": relation and
 * database events that the block map cannot express.
 *
 * Why it exists.  Some changes have no block reference in the WAL (docs/design.md
 * section 4.2): after XLOG_SMGR_TRUNCATE to T blocks, every block >= T of that
 * fork counts as changed from then on, including blocks re-added later by an
 * extension that is never WAL-logged; a created or dropped relation fork
 * counts as changed from block 0 (a reused relfilenode must not inherit the
 * old file's blocks); CREATE/DROP DATABASE changes every block of every file
 * of a database directory.  The block map (ptrack/map.h) marks single blocks
 * and cannot say "every block >= T", so an earlier version's WAL follower,
 * which marked the map, kept these events here.  This version's follower
 * records them in its change set (ptrack/change_set.h); a table is read only
 * from such a version's ptrack.limits, to migrate its map (docs/design.md
 * section 4.10).
 *
 * Keys.  A relation fork (RelFork), or a database directory (tablespace,
 * database), meaning every block of every file in it.  A database key is the
 * RelFork {spc, db, relfilenode 0, fork kDatabaseKeyFork}: relfilenode 0 is
 * InvalidOid and no fork has that number, so it never equals a relation key,
 * and both kinds are placed by ptrack's own hash (ptrack/hash.h).
 *
 * What a key's events mean.  Each event is (lsn, limit): "every block >= limit
 * changed at lsn".  For a start LSN `since`, the blocks to list are those >=
 *     f(since) = min { limit : event with lsn >= since },   kNoLimit if none.
 * f only grows with `since` (fewer events qualify), so it is a step function,
 * and a new event only ever lowers it (for every `since`).
 *
 * Representation: fixed memory, no overflow case.  A fixed array of buckets
 * addressed by the key's hash; a bucket holds up to kLimitSteps steps
 * (L_1, M_1) .. (L_n, M_n) with L and M both strictly increasing, and answers
 *     g(since) = M_j for the smallest j with L_j >= since,  kNoLimit if none.
 * Every event of every key that hashed to the bucket is folded in, with rules
 * that keep g(since) <= f_key(since) for every key and every `since` (a
 * bucket only ever lists more blocks than the truth, never fewer):
 *   - a new event (lsn, limit) first raises lsn to L_n if it is older (a
 *     change claimed later than it happened is listed for more start LSNs:
 *     conservative; the follower is the single writer and feeds events in WAL
 *     order, so this only happens when a replay repeats events);
 *   - it then removes the steps with M_j >= limit (for every since <= L_j <=
 *     lsn the new event gives limit <= M_j: they no longer decide anything),
 *     and appends (lsn, limit) unless the last remaining step has the same
 *     LSN (then that step, with a smaller limit, already dominates it);
 *   - if the bucket is full, the two oldest steps merge into (L_2, M_1): for
 *     since in (L_1, L_2] the answer drops from M_2 to M_1 < M_2, more
 *     conservative, and nothing else moves.
 * Collisions therefore only add blocks, and so does overflow.  Without
 * collision and with at most kLimitSteps distinct pending levels the answer
 * is exact; in particular a relation created once and truncated much later
 * is listed from the truncation point on for a start LSN between the two,
 * not whole (a single (max LSN, min limit) pair per bucket would list the
 * whole relation after every later truncation, forever).
 *
 * Concurrency: one writer (the WAL follower), lock-free readers (backends in
 * ptrack_get_pagemapset).  Each bucket is a sequence lock: the writer makes
 * the bucket's sequence odd, stores the steps, makes it even again; a reader
 * copies the steps between two reads of the sequence and retries when they
 * differ or are odd.  Readers never block the writer; a reader that cannot
 * get a consistent copy within a bound (the writer descheduled mid-update
 * for that long) answers 0, "every block changed": more conservative than
 * any state the bucket could have held.  A consistent copy is a state the
 * bucket held at some instant during the read, and the bucket's answers only
 * ever decrease over time, so a reader answers no more than the bucket's
 * answer when its read began.
 *
 * Nothing here allocates or throws; the table is a view over memory the
 * caller owns (shared memory in the server, src/pg/ptrack.cpp).  The on-disk
 * form is in ptrack/limit_file.h.
 */
#ifndef PTRACK_LIMIT_TABLE_H
#define PTRACK_LIMIT_TABLE_H

#include <cstddef>
#include <cstdint>

#include "ptrack/atomic.h"
#include "ptrack/hash.h"
#include "ptrack/relfork.h"

namespace ptrack {

/* "No block of this key changed at or after since". */
constexpr uint32_t kNoLimit = UINT32_MAX;
/* Steps per bucket: four fit one 64-byte bucket with its sequence. */
constexpr uint32_t kLimitSteps = 4;
/* The server's table size: 16384 buckets of 64 bytes, 1 MB. */
constexpr uint32_t kDefaultLimitBuckets = 16384;
/* The fork number of a database key (no real fork has it). */
constexpr uint8_t kDatabaseKeyFork = 0xFF;
/* Seed of the bucket hash (ptrack/hash.h has the others). */
constexpr uint64_t kSeedLimitBucket = 0x85ebca77c2b2ae63ULL;

/* One bucket's steps, copied out consistently (also the on-disk content). */
struct LimitSteps {
    uint32_t count;             /* 0 .. kLimitSteps */
    Lsn lsn[kLimitSteps];       /* strictly increasing */
    uint32_t limit[kLimitSteps]; /* strictly increasing */
};

/* g(since) of a set of steps (see above). */
uint32_t limit_steps_answer(const LimitSteps& steps, Lsn since) noexcept;

/* Folds the event (lsn, limit) into `steps` by the rules above; false if nothing changed. */
bool limit_steps_add(LimitSteps* steps, Lsn lsn, uint32_t limit) noexcept;

/* True if `steps` satisfies the invariants (count in range, both sequences strictly increasing). */
bool limit_steps_valid(const LimitSteps& steps) noexcept;

class LimitTable {
public:
    /*
     * One bucket, a sequence lock with one writer: `sequence` is odd while
     * the writer updates the bucket (made odd relaxed, a release fence, the
     * fields stored relaxed, the next even value stored with release); a
     * reader copies the fields (relaxed) between an acquire load of an even
     * sequence and an acquire fence, and keeps the copy if the sequence did
     * not change (read_bucket()).
     */
    struct alignas(64) Bucket {
        Atomic<uint64_t> sequence;
        Atomic<uint64_t> lsn[kLimitSteps];
        Atomic<uint32_t> limit[kLimitSteps];
        Atomic<uint32_t> count;
    };
    static_assert(sizeof(Bucket) == 64, "a bucket is one cache line");

    /* Bytes of a region of `buckets` buckets (the region must be 64-byte aligned). */
    static constexpr size_t bytes(uint32_t buckets) noexcept { return size_t{buckets} * sizeof(Bucket); }

    LimitTable() noexcept = default;
    /* A view of `region` (bytes(buckets) bytes, 64-byte aligned); its content is kept: clear() empties it. */
    LimitTable(void* region, uint32_t buckets) noexcept;

    bool attached() const noexcept { return buckets_ != nullptr; }
    uint32_t bucket_count() const noexcept { return bucket_count_; }

    /* Empties every bucket.  Not concurrent-safe with readers or the writer. */
    void clear() noexcept;

    /* Writer side (one writer at a time). */
    void set_relation_limit(const RelFork& rel, uint32_t limit_block, Lsn lsn) noexcept
    {
        add(relation_bucket(rel), lsn, limit_block);
    }
    void set_database_limit(uint32_t spc, uint32_t db, Lsn lsn) noexcept { add(database_bucket(spc, db), lsn, 0); }

    /*
     * The smallest absolute block number b of `rel` such that every block
     * >= b counts as changed at or after `since`, from the relation fork's
     * and its database's buckets; kNoLimit if none.  Two bucket reads.
     */
    uint32_t first_changed_block(const RelFork& rel, Lsn since) const noexcept
    {
        const uint32_t r = bucket_answer(relation_bucket(rel), since);
        const uint32_t d = bucket_answer(database_bucket(rel.spc_oid, rel.db_oid), since);
        return r < d ? r : d;
    }

    /* Placement, exposed for the file format's fingerprint and the tests. */
    uint32_t relation_bucket(const RelFork& rel) const noexcept
    {
        return static_cast<uint32_t>(fastrange(hash_unit(hash_rel(rel), 0, kSeedLimitBucket), bucket_count_));
    }
    uint32_t database_bucket(uint32_t spc, uint32_t db) const noexcept
    {
        return relation_bucket(RelFork{spc, db, 0, kDatabaseKeyFork});
    }

    /* g(since) of one bucket; 0 when no consistent copy could be read. */
    uint32_t bucket_answer(uint32_t bucket, Lsn since) const noexcept;

    /* A consistent copy of one bucket's steps; false if none could be read within the bound. */
    bool read_bucket(uint32_t bucket, LimitSteps* out) const noexcept;

    /* Replaces one bucket's steps (loading a file); `steps` must be valid.  Writer side. */
    void write_bucket(uint32_t bucket, const LimitSteps& steps) noexcept;

    /* Folds an event into one bucket.  Writer side. */
    void add(uint32_t bucket, Lsn lsn, uint32_t limit) noexcept;

    /* The raw region, bytes(bucket_count()) long. */
    uint8_t* region() const noexcept { return reinterpret_cast<uint8_t*>(buckets_); }

private:
    Bucket* buckets_ = nullptr;
    uint32_t bucket_count_ = 0;
};

}  // namespace ptrack

#endif
