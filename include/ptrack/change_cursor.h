/*
 * ptrack/change_cursor.h -- one way to read an exact change set, whatever
 * holds it: the follower's in-memory set (ptrack/change_set.h), a summary
 * file (ptrack/summary_file.h), or the union of several (MergeCursor below).
 * The summary writer, the combining of summaries and the answers to
 * ptrack_get_pagemapset() (ptrack/summary_answer.h) all read through it, so
 * that each has one copy of the order and of the union rule.
 *
 * What a change set says, per relation fork (RelFork, ptrack/relfork.h):
 *   - a set of changed block numbers, cut into chunks of kChunkBlocks
 *     consecutive blocks (chunk c holds blocks [c * 65536, (c + 1) * 65536));
 *   - a limit: every block >= limit changed (kNoLimit: none).  Truncations,
 *     created and dropped forks, file growth (ptrack/limit_table.h has the
 *     events; here there is no LSN inside a set, see summary_file.h);
 * and per database directory (tablespace, database): every block of every
 * file in it changed (CREATE/DROP DATABASE).
 *
 * Order: forks in increasing RelFork order (relfork_less()), chunks of a fork
 * in increasing chunk number, databases in increasing (spc, db) order; no
 * key twice.  A fork is only listed with at least one chunk or a limit.
 *
 * Protocol: next_fork() moves to the next fork and gives its limit; then
 * next_chunk() moves to each of its chunks in turn, and or_chunk() ORs the
 * current chunk's blocks into a bitmap (skipping chunks, or the rest of a
 * fork, is allowed); next_database() walks the database list, independently
 * of the forks.  Nothing here allocates, throws or fails: a cursor over a
 * file reads only a file that was validated whole first.
 *
 * INTERFACE: ChunkBits, DatabaseKey, relfork_less(), ChangeCursor,
 * MergeCursor.
 */
#ifndef PTRACK_CHANGE_CURSOR_H
#define PTRACK_CHANGE_CURSOR_H

#include "ptrack/engine_guard.h"

#include <cstddef>
#include <cstdint>

#include "ptrack/limit_table.h" /* kNoLimit */
#include "ptrack/relfork.h"

namespace ptrack {

constexpr uint32_t kChunkShift = 16;
constexpr uint32_t kChunkBlocks = 1u << kChunkShift; /* 512 MB of 8 KB blocks */
constexpr uint32_t kChunkWords = kChunkBlocks / 64;
constexpr uint32_t kMaxChunk = UINT32_MAX >> kChunkShift;

/* The blocks of one chunk: block b of the chunk is bit b % 64 of words[b / 64]. */
struct ChunkBits {
    uint64_t words[kChunkWords];
};

/* A database directory: every block of every file under it. */
struct DatabaseKey {
    uint32_t spc_oid;
    uint32_t db_oid;
};

inline bool operator==(const DatabaseKey& a, const DatabaseKey& b) noexcept
{
    return a.spc_oid == b.spc_oid && a.db_oid == b.db_oid;
}

inline bool database_less(const DatabaseKey& a, const DatabaseKey& b) noexcept
{
    return a.spc_oid != b.spc_oid ? a.spc_oid < b.spc_oid : a.db_oid < b.db_oid;
}

/* The order of forks in every change set: tablespace, database, relfilenode, fork. */
inline bool relfork_less(const RelFork& a, const RelFork& b) noexcept
{
    if (a.spc_oid != b.spc_oid)
        return a.spc_oid < b.spc_oid;
    if (a.db_oid != b.db_oid)
        return a.db_oid < b.db_oid;
    if (a.relfilenode != b.relfilenode)
        return a.relfilenode < b.relfilenode;
    return a.fork < b.fork;
}

class ChangeCursor {
public:
    /* Moves to the next fork; false when there is none left. */
    virtual bool next_fork(RelFork* rel, BlockNumber* limit) noexcept = 0;
    /* Moves to the next chunk of the current fork; false when the fork has no more. */
    virtual bool next_chunk(uint32_t* chunk) noexcept = 0;
    /* ORs the current chunk's blocks into `bits` (only after next_chunk() returned true). */
    virtual void or_chunk(ChunkBits* bits) noexcept = 0;
    /* Moves to the next database directory; false when there is none left. */
    virtual bool next_database(DatabaseKey* db) noexcept = 0;

protected:
    ~ChangeCursor() = default;
};

/*
 * The union of several change sets: a fork's blocks are the union of its
 * blocks in each, its limit the smallest, the databases the union.  The
 * caller provides one State per source (no allocation); every source must
 * be fresh (nothing read yet).  O(sources) per step: meant for a few dozen
 * sources (combine many summaries in steps, summary_answer.h).
 */
class MergeCursor final : public ChangeCursor {
public:
    struct State {
        ChangeCursor* source;
        RelFork rel;
        BlockNumber limit;
        uint32_t chunk;
        DatabaseKey db;
        bool has_fork;  /* source positioned on `rel` */
        bool in_fork;   /* source's `rel` is the merged current fork */
        bool has_chunk; /* source positioned on `chunk` of the current fork */
        bool has_db;    /* source positioned on `db` */
    };

    /* `states[i].source` set by the caller for i < count; the rest is initialised here. */
    MergeCursor(State* states, size_t count) noexcept;

    bool next_fork(RelFork* rel, BlockNumber* limit) noexcept override;
    bool next_chunk(uint32_t* chunk) noexcept override;
    void or_chunk(ChunkBits* bits) noexcept override;
    bool next_database(DatabaseKey* db) noexcept override;

private:
    State* states_;
    size_t count_;
    bool started_ = false;
    bool db_started_ = false;
    bool chunk_current_ = false; /* a merged chunk is current: next_chunk() first advances its sources */
    uint32_t chunk_ = 0;
    bool db_current_ = false;
    DatabaseKey db_{0, 0};
};

}  // namespace ptrack

#endif
