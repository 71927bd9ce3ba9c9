/*
 * ptrack/change_set.h -- the exact set of changes the WAL follower has seen
 * since its last summary (docs/design.md section 4.4): per relation fork, the
 * changed block numbers and a limit ("every block >= N changed"), plus whole
 * database directories.  At each cut the follower writes it as an immutable
 * summary file (ptrack/summary_file.h) and empties it.
 *
 * Why this shape.  The follower calls add_block() once per block reference
 * of every WAL record, so adding must cost a few nanoseconds: the last 16
 * (fork, chunk)s touched are cached (WAL references come in runs on a few
 * relations: a heap page and its VM page, an index, the next table), any
 * other is one probe of a single table keyed by (relation
 * fork, chunk number), so a random reference costs two cache misses (the
 * table's slot, then the chunk's container), and a chunk of 65,536 blocks
 * (ptrack/change_cursor.h) starts as
 * a small open-addressing hash set of 16-bit offsets, which becomes an 8 KB
 * bitmap once it holds more than kSparseMaxBlocks blocks (the bitmap is then
 * no bigger than the set).  A block at or past its fork's limit is not
 * stored: the limit already says it changed.  Nothing here keeps an LSN:
 * every change of a set counts as made within the LSN range of the summary
 * it ends up in.
 *
 * Memory is bounded by a byte budget given at construction.  Every byte the
 * set allocates counts (tables, sets, bitmaps, not the allocator's
 * overhead).  An add answers:
 *   kOk       recorded;
 *   kCutSoon  recorded, but the set is near its budget (the next growth of
 *             a table, plus room for a few hundred more chunks, would not
 *             fit): write a summary at the next record boundary and clear();
 *   kRefused  NOT recorded, and the set is as it was before the call: the
 *             budget would be exceeded, or the allocator failed
 *             (last_refusal() says which).  The caller must cut before the
 *             current record, clear(), and add the record again; nothing is
 *             ever dropped silently.
 *
 * The engine never throws (the extension builds with -fno-exceptions):
 * memory comes from an Allocator that returns nullptr on failure (malloc()
 * by default; the server may pass another).  The set has no destructor, so
 * the server can keep it in a static without a C++ object crossing an
 * ereport (src/pg/core/boundary.h): call reset() to free everything.  One
 * thread uses a set at a time; nothing here is shared memory.
 *
 * INTERFACE: Allocator, malloc_allocator(), AddResult, Refusal, BlockRef,
 * kMaxBatch, ChangeSet (add_block, add_blocks, add_limit, add_database,
 * clear, reset, open_cursor).
 */
#ifndef PTRACK_CHANGE_SET_H
#define PTRACK_CHANGE_SET_H

#include "ptrack/engine_guard.h"

#include <cstddef>
#include <cstdint>

#include "ptrack/change_cursor.h"
#include "ptrack/relfork.h"

namespace ptrack {

/* Where a change set's memory comes from. */
class Allocator {
public:
    /* `bytes` bytes aligned for any scalar, or nullptr. */
    virtual void* allocate(size_t bytes) noexcept = 0;
    /* Frees what allocate() returned (`bytes` is the size asked for). */
    virtual void release(void* p, size_t bytes) noexcept = 0;

protected:
    ~Allocator() = default;
};

/* malloc() and free(). */
Allocator& malloc_allocator() noexcept;

enum class AddResult : uint8_t { kOk, kCutSoon, kRefused };
/* Why the last kRefused: the budget, the allocator, or add_blocks() given more than kMaxBatch references. */
enum class Refusal : uint8_t { kNone, kBudget, kAllocation, kBatchTooLong };

/* One block reference, for ChangeSet::add_blocks(). */
struct BlockRef {
    RelFork rel;
    BlockNumber block;
};

/* The most references one add_blocks() call takes (a WAL record has at most 33); a set that
 * has not said kCutSoon has room for a whole batch, as for one record. */
constexpr uint32_t kMaxBatch = 64;

/* Blocks a chunk's hash set holds before it becomes a bitmap (then 8 KB is no more than the set). */
constexpr uint32_t kSparseMaxBlocks = 1536;

class ChangeSet {
public:
    /* A set that may use up to `budget_bytes` bytes (at least kMinBudget). */
    explicit ChangeSet(size_t budget_bytes, Allocator& allocator = malloc_allocator()) noexcept;
    ChangeSet(const ChangeSet&) = delete;
    ChangeSet& operator=(const ChangeSet&) = delete;

    static constexpr size_t kMinBudget = 4u << 20;

    /* Block `block` of `rel` changed. */
    AddResult add_block(const RelFork& rel, BlockNumber block) noexcept;
    /*
     * The `n` blocks of `refs` changed (n <= kMaxBatch): the block
     * references of one WAL record, or of several consecutive ones.  The
     * same as add_block() on each, but all or nothing, and cheaper for
     * scattered blocks: every reference's memory is prefetched before the
     * first is added, so their cache misses overlap.  kOk or kCutSoon: all
     * recorded.  kRefused: none is recorded and the set holds what it held
     * before the call (blocks, chunks, forks, counts; only its memory may
     * have grown): cut before the first record of the batch, clear(), and
     * add the batch again.
     */
    AddResult add_blocks(const BlockRef* refs, uint32_t n) noexcept;
    /*
     * Every block >= first of `rel` changed: a truncation to `first` blocks,
     * a fork created or dropped (0), a file seen grown from `first` blocks
     * (its new blocks exist only from then on, so the limit lists nothing
     * that was there unchanged before).
     */
    AddResult add_limit(const RelFork& rel, BlockNumber first) noexcept;
    /* Every block of every file of database directory (spc, db) changed. */
    AddResult add_database(uint32_t spc, uint32_t db) noexcept;

    /* Empties the set, keeping its tables' memory for the next summary. */
    void clear() noexcept;
    /* Empties the set and frees all its memory. */
    void reset() noexcept;

    bool empty() const noexcept { return fork_count_ == 0 && db_count_ == 0; }
    /* Bytes allocated now, and the budget. */
    size_t used_bytes() const noexcept { return used_; }
    size_t budget_bytes() const noexcept { return budget_; }
    /* The most bytes allocated at once since construction (the benchmark's peak). */
    size_t peak_bytes() const noexcept { return peak_; }
    /* True when the next add may answer kRefused: the caller should cut now. */
    bool needs_cut() const noexcept;
    Refusal last_refusal() const noexcept { return refusal_; }

    uint32_t fork_count() const noexcept { return fork_count_; }
    uint64_t chunk_count() const noexcept { return chunk_count_; }
    uint32_t database_count() const noexcept { return db_count_; }
    /* Distinct blocks stored (blocks covered by a limit set later are still counted). */
    uint64_t block_count() const noexcept { return block_count_; }

    /*
     * A cursor over the set, in the order of ptrack/change_cursor.h.  Sorts
     * an index of the forks and chunks (about 16 bytes per chunk, allocated
     * outside the budget, so a set at its budget can still be written);
     * nullptr if that allocation fails.  The set must not change while the
     * cursor is in use; close_cursor() frees it.
     */
    ChangeCursor* open_cursor() noexcept;
    void close_cursor(ChangeCursor* cursor) noexcept;

    struct Fork;
    struct Chunk;

private:
    friend class ChangeSetCursor;

    bool charge(size_t bytes) noexcept;
    void* allocate(size_t bytes) noexcept;
    void release(void* p, size_t bytes) noexcept;
    AddResult refuse(Refusal why) noexcept;
    /* The answer of an add that changed no allocation and no count: near_cut_ still holds. */
    AddResult unchanged() const noexcept { return near_cut_ ? AddResult::kCutSoon : AddResult::kOk; }
    /* After anything that may have changed them: needs_cut() again. */
    AddResult done() noexcept
    {
        near_cut_ = needs_cut();
        return unchanged();
    }

    /* The fork's index, or UINT32_MAX if it is not in the set. */
    uint32_t fork_find(const RelFork& rel) const noexcept;
    /* Adds a fork that is not in the set (its index), or UINT32_MAX after a refusal. */
    uint32_t fork_insert(const RelFork& rel) noexcept;
    /* The chunk's slot, or nullptr if it is not in the set. */
    Chunk* chunk_find(const RelFork& rel, uint32_t chunk) noexcept;
    /* add_block() for a block whose chunk is not in the set. */
    AddResult add_first_block(const RelFork& rel, BlockNumber block) noexcept;
    /* The fork's limit went down to `first`: its chunks stop storing what it covers. */
    void lower_chunk_limits(uint32_t fork, BlockNumber first) noexcept;
    bool add_to_chunk(Chunk* c, uint32_t offset) noexcept;
    /* Takes back a block a refused add_blocks() had recorded (and its chunk, if it made it). */
    void undo_block(const RelFork& rel, BlockNumber block, bool chunk_made) noexcept;
    void remove_chunk(Chunk* c) noexcept;
    void remove_last_fork() noexcept;
    bool grow_forks() noexcept;
    bool grow_chunks() noexcept;

    Allocator* allocator_;
    size_t budget_;
    size_t used_ = 0;
    size_t peak_ = 0;
    Refusal refusal_ = Refusal::kNone;

    Fork* forks_ = nullptr;          /* dense, in order of first appearance */
    uint32_t fork_capacity_ = 0;
    uint32_t fork_count_ = 0;
    uint32_t* fork_slots_ = nullptr; /* open addressing: fork index + 1, 0 empty */
    uint32_t fork_slot_count_ = 0;   /* power of two, >= 2 * fork_capacity_ */

    Chunk* chunks_ = nullptr; /* open addressing on (relation fork, chunk number) */
    uint64_t chunk_slot_count_ = 0;
    uint64_t chunk_count_ = 0;

    DatabaseKey* dbs_ = nullptr; /* unsorted, no duplicates */
    uint32_t db_capacity_ = 0;
    uint32_t db_count_ = 0;

    uint64_t block_count_ = 0;
    /* needs_cut() as of the last add, clear() or reset(): an add that allocates nothing keeps it. */
    bool near_cut_ = false;

    /*
     * The (fork, chunk)s added to last, direct-mapped by a cheap hash of the
     * key: WAL records name a few relations in turn (a heap page, its VM
     * page, an index, the next table), and each stays in its entry.  An
     * entry's slot pointer is dropped whenever slots move or go
     * (drop_cache()).
     */
    struct CacheEntry {
        RelFork rel;
        uint32_t chunk;
        Chunk* slot; /* nullptr: empty */
    };
    static constexpr uint32_t kCacheLog2 = 4;
    static uint32_t cache_index(const RelFork& rel, uint32_t chunk) noexcept
    {
        return recent_entry(rel, chunk, kCacheLog2);
    }
    void drop_cache() noexcept;
    CacheEntry cache_[1u << kCacheLog2] = {};
};

}  // namespace ptrack

#endif
