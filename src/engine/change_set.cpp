/*
 * change_set.cpp -- the follower's exact change set and its cursor; what the
 * set holds, its budget and its answers are in ptrack/change_set.h.
 *
 * Layout.  Chunks: one open-addressing table keyed by (relation fork, chunk
 * number), load <= 1/2, 32-byte slots, so that a block reference finds its
 * chunk in one probe without going through its fork first.  Each slot holds
 * its part of the fork's limit (offsets it no longer stores) and its block
 * container: a hash set of 16-bit offsets
 * (0xFFFF marks an empty slot, so offset 0xFFFF itself is a flag), load <=
 * 3/4, doubling from 8 slots, or an 8 KB bitmap past kSparseMaxBlocks.
 * Forks: a dense array (index = order of first appearance) and an
 * open-addressing table of indexes (load <= 1/2), used only by a chunk's
 * first block, by limits and by the cursor; a fork knows its highest chunk,
 * so lowering its limit visits only the chunks it can reach.
 * Every growth allocates the new storage first and frees the old one after,
 * so a refused allocation leaves the set as it was.
 */
#include "ptrack/change_set.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "ptrack/hash.h"

namespace ptrack {

struct ChangeSet::Fork {
    RelFork rel;
    BlockNumber limit;
    uint32_t chunk_end; /* highest chunk number in the table + 1, 0: none */
};

struct ChangeSet::Chunk {
    uint32_t spc_oid;     /* the key: relation fork and chunk number */
    uint32_t db_oid;
    uint32_t relfilenode;
    uint16_t chunk;       /* block >> kChunkShift fits 16 bits */
    uint8_t fork;
    uint8_t log2;         /* sparse: 1 << log2 slots; 0: data is an 8 KB bitmap */
    uint32_t count : 31;  /* distinct blocks */
    uint32_t has_last : 1; /* sparse: offset 0xFFFF is in the set */
    uint32_t limit;       /* offsets >= limit are covered by the fork's limit: not stored */
    void* data;           /* nullptr: empty slot */
};
static_assert(sizeof(ChangeSet::Chunk) == 32, "two chunk slots a cache line");
static_assert(kMaxChunk <= UINT16_MAX, "a chunk number fits the slot");

namespace {

class MallocAllocator final : public Allocator {
public:
    void* allocate(size_t bytes) noexcept override { return std::malloc(bytes); }
    void release(void* p, size_t) noexcept override { std::free(p); }
};

constexpr uint16_t kEmpty = 0xFFFF;
constexpr uint8_t kFirstLog2 = 3;
constexpr uint8_t kLastLog2 = 11; /* 2048 slots, 4 KB: 3/4 of it is kSparseMaxBlocks */
static_assert((1u << kLastLog2) / 4 * 3 == kSparseMaxBlocks, "the sparse set turns into a bitmap when full");
constexpr uint32_t kFirstForks = 64;
constexpr uint64_t kFirstChunkSlots = 256;
constexpr size_t kBitmapBytes = kChunkWords * sizeof(uint64_t);
/* Chunks one WAL record (32 block references, each with its VM block) or one add_blocks() batch may add or turn into bitmaps. */
constexpr size_t kRecordReserve = kMaxBatch * kBitmapBytes;

inline uint32_t sparse_home(uint32_t offset, uint8_t log2) noexcept
{
    return (offset * 0x9E3779B1u) >> (32 - log2);
}

inline uint64_t chunk_home(const RelFork& rel, uint32_t chunk, uint64_t slots) noexcept
{
    const uint64_t a = (uint64_t{rel.spc_oid} << 32) | rel.db_oid;
    const uint64_t b = (uint64_t{rel.relfilenode} << 32) | (uint64_t{chunk} << 8) | rel.fork;
    return mix64(b ^ (a * 0x9E3779B97F4A7C15ULL)) & (slots - 1);
}

inline bool chunk_is(const ChangeSet::Chunk& c, const RelFork& rel, uint32_t chunk) noexcept
{
    return c.relfilenode == rel.relfilenode && c.chunk == chunk && c.fork == rel.fork && c.db_oid == rel.db_oid &&
           c.spc_oid == rel.spc_oid;
}

inline RelFork rel_of(const ChangeSet::Chunk& c) noexcept
{
    return RelFork{c.spc_oid, c.db_oid, c.relfilenode, c.fork};
}

/* The offsets of chunk `chunk` that a fork limit `limit` covers start here (kChunkBlocks: none). */
inline uint32_t limit_in_chunk(BlockNumber limit, uint32_t chunk) noexcept
{
    const uint64_t base = uint64_t{chunk} << kChunkShift;
    if (limit <= base)
        return 0;
    return static_cast<uint32_t>(std::min<uint64_t>(limit - base, kChunkBlocks));
}

inline size_t container_bytes(const ChangeSet::Chunk& c) noexcept
{
    return c.log2 == 0 ? kBitmapBytes : (size_t{1} << c.log2) * sizeof(uint16_t);
}

}  // namespace

Allocator& malloc_allocator() noexcept
{
    static MallocAllocator allocator;
    return allocator;
}

ChangeSet::ChangeSet(size_t budget_bytes, Allocator& allocator) noexcept
    : allocator_(&allocator), budget_(budget_bytes < kMinBudget ? kMinBudget : budget_bytes)
{
}

bool ChangeSet::charge(size_t bytes) noexcept
{
    if (bytes > budget_ || used_ > budget_ - bytes) {
        refusal_ = Refusal::kBudget;
        return false;
    }
    return true;
}

void* ChangeSet::allocate(size_t bytes) noexcept
{
    if (!charge(bytes))
        return nullptr;
    void* p = allocator_->allocate(bytes);
    if (p == nullptr) {
        refusal_ = Refusal::kAllocation;
        return nullptr;
    }
    used_ += bytes;
    if (used_ > peak_)
        peak_ = used_;
    return p;
}

void ChangeSet::release(void* p, size_t bytes) noexcept
{
    if (p == nullptr)
        return;
    allocator_->release(p, bytes);
    used_ -= bytes;
}

AddResult ChangeSet::refuse(Refusal why) noexcept
{
    refusal_ = why;
    return AddResult::kRefused;
}

bool ChangeSet::needs_cut() const noexcept
{
    size_t reserve = kRecordReserve;
    if ((chunk_count_ + 64) * 2 > chunk_slot_count_)
        reserve += (chunk_slot_count_ == 0 ? kFirstChunkSlots : chunk_slot_count_ * 2) * sizeof(Chunk);
    if (fork_count_ + 64 > fork_capacity_) {
        const size_t capacity = fork_capacity_ == 0 ? kFirstForks : size_t{fork_capacity_} * 2;
        reserve += capacity * (sizeof(Fork) + 2 * sizeof(uint32_t));
    }
    return used_ + reserve > budget_;
}

bool ChangeSet::grow_forks() noexcept
{
    const uint32_t capacity = fork_capacity_ == 0 ? kFirstForks : fork_capacity_ * 2;
    if (capacity <= fork_capacity_)
        return false; /* 2^32 forks: cannot happen before the budget stops it */
    const uint32_t slot_count = capacity * 2;
    auto* forks = static_cast<Fork*>(allocate(size_t{capacity} * sizeof(Fork)));
    if (forks == nullptr)
        return false;
    auto* slots = static_cast<uint32_t*>(allocate(size_t{slot_count} * sizeof(uint32_t)));
    if (slots == nullptr) {
        release(forks, size_t{capacity} * sizeof(Fork));
        return false;
    }
    if (fork_count_ > 0)
        std::memcpy(static_cast<void*>(forks), forks_, size_t{fork_count_} * sizeof(Fork));
    std::memset(slots, 0, size_t{slot_count} * sizeof(uint32_t));
    for (uint32_t i = 0; i < fork_count_; ++i) {
        uint32_t h = static_cast<uint32_t>(hash_rel(forks[i].rel)) & (slot_count - 1);
        while (slots[h] != 0)
            h = (h + 1) & (slot_count - 1);
        slots[h] = i + 1;
    }
    release(forks_, size_t{fork_capacity_} * sizeof(Fork));
    release(fork_slots_, size_t{fork_slot_count_} * sizeof(uint32_t));
    forks_ = forks;
    fork_slots_ = slots;
    fork_capacity_ = capacity;
    fork_slot_count_ = slot_count;
    return true;
}

uint32_t ChangeSet::fork_find(const RelFork& rel) const noexcept
{
    if (fork_slot_count_ == 0)
        return UINT32_MAX;
    uint32_t h = static_cast<uint32_t>(hash_rel(rel)) & (fork_slot_count_ - 1);
    for (;;) {
        const uint32_t at = fork_slots_[h];
        if (at == 0)
            return UINT32_MAX;
        if (forks_[at - 1].rel == rel)
            return at - 1;
        h = (h + 1) & (fork_slot_count_ - 1);
    }
}

uint32_t ChangeSet::fork_insert(const RelFork& rel) noexcept
{
    if (fork_count_ == fork_capacity_ && !grow_forks())
        return UINT32_MAX;
    const uint32_t index = fork_count_++;
    forks_[index] = Fork{rel, kNoLimit, 0};
    uint32_t h = static_cast<uint32_t>(hash_rel(rel)) & (fork_slot_count_ - 1);
    while (fork_slots_[h] != 0)
        h = (h + 1) & (fork_slot_count_ - 1);
    fork_slots_[h] = index + 1;
    return index;
}

bool ChangeSet::grow_chunks() noexcept
{
    const uint64_t slot_count = chunk_slot_count_ == 0 ? kFirstChunkSlots : chunk_slot_count_ * 2;
    auto* slots = static_cast<Chunk*>(allocate(slot_count * sizeof(Chunk)));
    if (slots == nullptr)
        return false;
    std::memset(static_cast<void*>(slots), 0, slot_count * sizeof(Chunk));
    for (uint64_t i = 0; i < chunk_slot_count_; ++i) {
        const Chunk& c = chunks_[i];
        if (c.data == nullptr)
            continue;
        uint64_t h = chunk_home(rel_of(c), c.chunk, slot_count);
        while (slots[h].data != nullptr)
            h = (h + 1) & (slot_count - 1);
        slots[h] = c;
    }
    release(chunks_, chunk_slot_count_ * sizeof(Chunk));
    chunks_ = slots;
    chunk_slot_count_ = slot_count;
    drop_cache(); /* slots moved */
    return true;
}

void ChangeSet::drop_cache() noexcept
{
    for (CacheEntry& e : cache_)
        e.slot = nullptr;
}

ChangeSet::Chunk* ChangeSet::chunk_find(const RelFork& rel, uint32_t chunk) noexcept
{
    if (chunk_slot_count_ == 0)
        return nullptr;
    uint64_t h = chunk_home(rel, chunk, chunk_slot_count_);
    for (;;) {
        Chunk& c = chunks_[h];
        if (c.data == nullptr)
            return nullptr;
        if (chunk_is(c, rel, chunk))
            return &c;
        h = (h + 1) & (chunk_slot_count_ - 1);
    }
}

/* Adds `offset` to the chunk's container; false (nothing changed) after a refusal. */
bool ChangeSet::add_to_chunk(Chunk* c, uint32_t offset) noexcept
{
    if (c->log2 == 0) {
        uint64_t& word = static_cast<uint64_t*>(c->data)[offset >> 6];
        const uint64_t bit = uint64_t{1} << (offset & 63);
        if ((word & bit) == 0) {
            word |= bit;
            ++c->count;
            ++block_count_;
        }
        return true;
    }
    if (offset == kEmpty) {
        if (!c->has_last) {
            c->has_last = 1;
            ++c->count;
            ++block_count_;
        }
        return true;
    }
    auto* set = static_cast<uint16_t*>(c->data);
    uint32_t mask = (1u << c->log2) - 1;
    uint32_t h = sparse_home(offset, c->log2);
    for (;;) {
        const uint16_t v = set[h];
        if (v == offset)
            return true;
        if (v == kEmpty)
            break;
        h = (h + 1) & mask;
    }
    const uint32_t stored = c->count - c->has_last;
    if ((stored + 1) * 4 <= (mask + 1) * 3) {
        set[h] = static_cast<uint16_t>(offset);
        ++c->count;
        ++block_count_;
        return true;
    }
    /* Full: a set twice the size, or past kSparseMaxBlocks a bitmap. */
    const size_t old_bytes = (size_t{mask} + 1) * sizeof(uint16_t);
    if (c->log2 == kLastLog2) {
        auto* words = static_cast<uint64_t*>(allocate(kBitmapBytes));
        if (words == nullptr)
            return false;
        std::memset(words, 0, kBitmapBytes);
        for (uint32_t i = 0; i <= mask; ++i)
            if (set[i] != kEmpty)
                words[set[i] >> 6] |= uint64_t{1} << (set[i] & 63);
        if (c->has_last)
            words[kChunkWords - 1] |= uint64_t{1} << 63;
        words[offset >> 6] |= uint64_t{1} << (offset & 63);
        release(set, old_bytes);
        c->data = words;
        c->log2 = 0;
        c->has_last = 0;
    } else {
        const uint8_t log2 = static_cast<uint8_t>(c->log2 + 1);
        const size_t bytes = (size_t{1} << log2) * sizeof(uint16_t);
        auto* bigger = static_cast<uint16_t*>(allocate(bytes));
        if (bigger == nullptr)
            return false;
        std::memset(bigger, 0xFF, bytes);
        const uint32_t bigger_mask = (1u << log2) - 1;
        for (uint32_t i = 0; i <= mask + 1; ++i) {
            const uint32_t v = i <= mask ? set[i] : offset;
            if (v == kEmpty)
                continue;
            uint32_t at = sparse_home(v, log2);
            while (bigger[at] != kEmpty)
                at = (at + 1) & bigger_mask;
            bigger[at] = static_cast<uint16_t>(v);
        }
        release(set, old_bytes);
        c->data = bigger;
        c->log2 = log2;
    }
    ++c->count;
    ++block_count_;
    return true;
}

AddResult ChangeSet::add_block(const RelFork& rel, BlockNumber block) noexcept
{
    const uint32_t chunk = block >> kChunkShift;
    CacheEntry& e = cache_[cache_index(rel, chunk)];
    Chunk* c = e.slot;
    if (c == nullptr || e.chunk != chunk || !(e.rel == rel)) {
        c = chunk_find(rel, chunk);
        if (c == nullptr)
            return add_first_block(rel, block);
        e = CacheEntry{rel, chunk, c};
    }
    const uint32_t offset = block & (kChunkBlocks - 1);
    if (offset >= c->limit)
        return unchanged(); /* the fork's limit already lists it */
    const size_t used = used_;
    if (!add_to_chunk(c, offset))
        return AddResult::kRefused; /* nothing changed */
    return used_ == used ? unchanged() : done();
}

AddResult ChangeSet::add_first_block(const RelFork& rel, BlockNumber block) noexcept
{
    const uint32_t chunk = block >> kChunkShift;
    uint32_t fork = fork_find(rel);
    if (fork != UINT32_MAX && block >= forks_[fork].limit)
        return done(); /* the fork's limit already lists it */
    /* Its first set, a bigger table if needed, then the fork: a refusal changes nothing. */
    const size_t first_bytes = (size_t{1} << kFirstLog2) * sizeof(uint16_t);
    void* data = allocate(first_bytes);
    if (data == nullptr)
        return AddResult::kRefused;
    if ((chunk_count_ + 1) * 2 > chunk_slot_count_ && !grow_chunks()) {
        release(data, first_bytes);
        return AddResult::kRefused;
    }
    if (fork == UINT32_MAX && (fork = fork_insert(rel)) == UINT32_MAX) {
        release(data, first_bytes);
        near_cut_ = needs_cut(); /* the chunk table may have grown */
        return AddResult::kRefused;
    }
    std::memset(data, 0xFF, first_bytes);
    uint64_t h = chunk_home(rel, chunk, chunk_slot_count_);
    while (chunks_[h].data != nullptr)
        h = (h + 1) & (chunk_slot_count_ - 1);
    Chunk& c = chunks_[h];
    c.spc_oid = rel.spc_oid;
    c.db_oid = rel.db_oid;
    c.relfilenode = rel.relfilenode;
    c.chunk = static_cast<uint16_t>(chunk);
    c.fork = rel.fork;
    c.log2 = kFirstLog2;
    c.count = 0;
    c.has_last = 0;
    c.limit = limit_in_chunk(forks_[fork].limit, chunk);
    c.data = data;
    ++chunk_count_;
    Fork& f = forks_[fork];
    if (chunk >= f.chunk_end)
        f.chunk_end = chunk + 1;
    cache_[cache_index(rel, chunk)] = CacheEntry{rel, chunk, &c};
    add_to_chunk(&c, block & (kChunkBlocks - 1)); /* an empty set of 8 slots takes it */
    return done();
}

AddResult ChangeSet::add_blocks(const BlockRef* refs, uint32_t n) noexcept
{
    if (n > kMaxBatch)
        return refuse(Refusal::kBatchTooLong);
    /*
     * Prefetch in two waves: every new (fork, chunk)'s table slot, then the
     * line of its container the block lands on; then add in order.
     */
    if (chunk_slot_count_ > 0) {
        uint64_t home[kMaxBatch];
        for (uint32_t i = 0; i < n; ++i) {
            const uint32_t chunk = refs[i].block >> kChunkShift;
            if (i > 0 && chunk == refs[i - 1].block >> kChunkShift && refs[i].rel == refs[i - 1].rel) {
                home[i] = UINT64_MAX;
                continue;
            }
            home[i] = chunk_home(refs[i].rel, chunk, chunk_slot_count_);
            __builtin_prefetch(&chunks_[home[i]]);
        }
        for (uint32_t i = 0; i < n; ++i) {
            if (home[i] == UINT64_MAX)
                continue;
            const uint32_t chunk = refs[i].block >> kChunkShift;
            for (uint64_t h = home[i];; h = (h + 1) & (chunk_slot_count_ - 1)) {
                const Chunk& c = chunks_[h];
                if (c.data == nullptr)
                    break;
                if (chunk_is(c, refs[i].rel, chunk)) {
                    const uint32_t offset = refs[i].block & (kChunkBlocks - 1);
                    const auto* line = static_cast<const uint8_t*>(c.data) +
                                       (c.log2 == 0 ? (offset >> 6) * sizeof(uint64_t)
                                                    : sparse_home(offset, c.log2) * sizeof(uint16_t));
                    __builtin_prefetch(line, 1);
                    break;
                }
            }
        }
    }
    /* Each add, noting what it made new, so that a refusal can take it all back. */
    struct Made {
        uint32_t ref;
        bool chunk;
    };
    Made made[kMaxBatch];
    uint32_t made_count = 0;
    const uint32_t forks_before = fork_count_;
    AddResult result = AddResult::kOk;
    for (uint32_t i = 0; i < n; ++i) {
        const uint64_t blocks = block_count_, chunks = chunk_count_;
        result = add_block(refs[i].rel, refs[i].block);
        if (result == AddResult::kRefused) {
            while (made_count > 0) {
                const Made& m = made[--made_count];
                undo_block(refs[m.ref].rel, refs[m.ref].block, m.chunk);
            }
            while (fork_count_ > forks_before)
                remove_last_fork();
            near_cut_ = needs_cut();
            return result;
        }
        if (block_count_ != blocks)
            made[made_count++] = Made{i, chunk_count_ != chunks};
    }
    return result;
}

namespace {

/* Removes slot `at` of an open-addressing table with linear probing, moving back what its hole would hide. */
template <class Slots, class IsEmpty, class Home, class Empty>
void remove_slot(Slots* slots, uint64_t mask, uint64_t at, IsEmpty is_empty, Home home, Empty make_empty) noexcept
{
    uint64_t hole = at;
    for (uint64_t j = (at + 1) & mask; !is_empty(slots[j]); j = (j + 1) & mask) {
        const uint64_t k = home(slots[j]);
        /* slots[j] may fill the hole unless its home lies cyclically in (hole, j]. */
        const bool stays = hole <= j ? (hole < k && k <= j) : (hole < k || k <= j);
        if (!stays) {
            slots[hole] = slots[j];
            hole = j;
        }
    }
    make_empty(slots[hole]);
}

}  // namespace

void ChangeSet::undo_block(const RelFork& rel, BlockNumber block, bool chunk_made) noexcept
{
    Chunk* c = chunk_find(rel, block >> kChunkShift);
    const uint32_t offset = block & (kChunkBlocks - 1);
    if (c->log2 == 0) {
        static_cast<uint64_t*>(c->data)[offset >> 6] &= ~(uint64_t{1} << (offset & 63));
    } else if (offset == kEmpty) {
        c->has_last = 0;
    } else {
        auto* set = static_cast<uint16_t*>(c->data);
        const uint32_t mask = (1u << c->log2) - 1;
        const uint8_t log2 = c->log2;
        uint32_t h = sparse_home(offset, log2);
        while (set[h] != offset)
            h = (h + 1) & mask;
        remove_slot(
            set, mask, h, [](uint16_t v) { return v == kEmpty; },
            [log2](uint16_t v) { return uint64_t{sparse_home(v, log2)}; }, [](uint16_t& v) { v = kEmpty; });
    }
    --c->count;
    --block_count_;
    if (chunk_made)
        remove_chunk(c);
}

void ChangeSet::remove_chunk(Chunk* c) noexcept
{
    release(c->data, container_bytes(*c));
    const uint64_t slots = chunk_slot_count_;
    remove_slot(
        chunks_, slots - 1, static_cast<uint64_t>(c - chunks_), [](const Chunk& x) { return x.data == nullptr; },
        [slots](const Chunk& x) { return chunk_home(rel_of(x), x.chunk, slots); }, [](Chunk& x) { x.data = nullptr; });
    --chunk_count_;
    drop_cache(); /* slots moved */
}

void ChangeSet::remove_last_fork() noexcept
{
    const uint32_t index = fork_count_ - 1;
    const uint32_t mask = fork_slot_count_ - 1;
    uint32_t h = static_cast<uint32_t>(hash_rel(forks_[index].rel)) & mask;
    while (fork_slots_[h] != index + 1)
        h = (h + 1) & mask;
    const Fork* forks = forks_;
    remove_slot(
        fork_slots_, mask, h, [](uint32_t v) { return v == 0; },
        [forks, mask](uint32_t v) { return uint64_t{static_cast<uint32_t>(hash_rel(forks[v - 1].rel)) & mask}; },
        [](uint32_t& v) { v = 0; });
    --fork_count_;
    drop_cache();
}

void ChangeSet::lower_chunk_limits(uint32_t fork, BlockNumber first) noexcept
{
    const Fork& f = forks_[fork];
    const uint32_t from = first >> kChunkShift;
    if (from >= f.chunk_end)
        return;
    if (f.chunk_end - from <= chunk_slot_count_ / 8) {
        for (uint32_t n = from; n < f.chunk_end; ++n) {
            Chunk* c = chunk_find(f.rel, n);
            if (c != nullptr)
                c->limit = std::min(c->limit, limit_in_chunk(first, n));
        }
        return;
    }
    for (uint64_t i = 0; i < chunk_slot_count_; ++i) {
        Chunk& c = chunks_[i];
        if (c.data != nullptr && c.chunk >= from && rel_of(c) == f.rel)
            c.limit = std::min(c.limit, limit_in_chunk(first, c.chunk));
    }
}

AddResult ChangeSet::add_limit(const RelFork& rel, BlockNumber first) noexcept
{
    uint32_t fork = fork_find(rel);
    if (fork == UINT32_MAX && (fork = fork_insert(rel)) == UINT32_MAX)
        return AddResult::kRefused;
    if (first < forks_[fork].limit) {
        forks_[fork].limit = first;
        lower_chunk_limits(fork, first);
    }
    return done();
}

AddResult ChangeSet::add_database(uint32_t spc, uint32_t db) noexcept
{
    const DatabaseKey key{spc, db};
    for (uint32_t i = 0; i < db_count_; ++i)
        if (dbs_[i] == key)
            return done();
    if (db_count_ == db_capacity_) {
        const uint32_t capacity = db_capacity_ == 0 ? 16 : db_capacity_ * 2;
        auto* bigger = static_cast<DatabaseKey*>(allocate(size_t{capacity} * sizeof(DatabaseKey)));
        if (bigger == nullptr)
            return AddResult::kRefused;
        if (db_count_ > 0)
            std::memcpy(bigger, dbs_, size_t{db_count_} * sizeof(DatabaseKey));
        release(dbs_, size_t{db_capacity_} * sizeof(DatabaseKey));
        dbs_ = bigger;
        db_capacity_ = capacity;
    }
    dbs_[db_count_++] = key;
    return done();
}

void ChangeSet::clear() noexcept
{
    for (uint64_t i = 0; i < chunk_slot_count_; ++i) {
        Chunk& c = chunks_[i];
        if (c.data == nullptr)
            continue;
        release(c.data, container_bytes(c));
        c.data = nullptr;
    }
    if (fork_slots_ != nullptr)
        std::memset(fork_slots_, 0, size_t{fork_slot_count_} * sizeof(uint32_t));
    fork_count_ = 0;
    chunk_count_ = 0;
    db_count_ = 0;
    block_count_ = 0;
    drop_cache();
    refusal_ = Refusal::kNone;
    near_cut_ = needs_cut();
}

void ChangeSet::reset() noexcept
{
    clear();
    release(chunks_, chunk_slot_count_ * sizeof(Chunk));
    release(forks_, size_t{fork_capacity_} * sizeof(Fork));
    release(fork_slots_, size_t{fork_slot_count_} * sizeof(uint32_t));
    release(dbs_, size_t{db_capacity_} * sizeof(DatabaseKey));
    chunks_ = nullptr;
    forks_ = nullptr;
    fork_slots_ = nullptr;
    dbs_ = nullptr;
    chunk_slot_count_ = 0;
    fork_capacity_ = fork_slot_count_ = db_capacity_ = 0;
    near_cut_ = needs_cut();
}

/* The set in cursor order: forks sorted, then their chunks (ptrack/change_cursor.h). */
class ChangeSetCursor final : public ChangeCursor {
public:
    struct ChunkRef {
        uint64_t key; /* fork rank << 32 | chunk number */
        const ChangeSet::Chunk* chunk;
    };

    ChangeSet* set;
    uint32_t* order;   /* fork indexes in relfork_less order */
    ChunkRef* chunks;  /* sorted by key */
    size_t bytes;      /* of this object and its arrays, one allocation */
    uint32_t next_rank = 0;
    uint64_t next_ref = 0;
    const ChangeSet::Chunk* current = nullptr;
    uint32_t next_db = 0;

    bool next_fork(RelFork* rel, BlockNumber* limit) noexcept override
    {
        /* Skip the chunks of the fork left behind. */
        while (next_ref < set->chunk_count_ && (chunks[next_ref].key >> 32) < next_rank)
            ++next_ref;
        current = nullptr;
        if (next_rank >= set->fork_count_)
            return false;
        const ChangeSet::Fork& f = set->forks_[order[next_rank++]];
        *rel = f.rel;
        *limit = f.limit;
        return true;
    }

    bool next_chunk(uint32_t* chunk) noexcept override
    {
        if (next_ref >= set->chunk_count_ || (chunks[next_ref].key >> 32) != next_rank - 1) {
            current = nullptr;
            return false;
        }
        current = chunks[next_ref].chunk;
        *chunk = static_cast<uint32_t>(chunks[next_ref].key);
        ++next_ref;
        return true;
    }

    void or_chunk(ChunkBits* bits) noexcept override
    {
        const ChangeSet::Chunk* c = current;
        if (c->log2 == 0) {
            const auto* words = static_cast<const uint64_t*>(c->data);
            for (uint32_t i = 0; i < kChunkWords; ++i)
                bits->words[i] |= words[i];
            return;
        }
        const auto* sparse = static_cast<const uint16_t*>(c->data);
        for (uint32_t i = 0; i < (1u << c->log2); ++i)
            if (sparse[i] != kEmpty)
                bits->words[sparse[i] >> 6] |= uint64_t{1} << (sparse[i] & 63);
        if (c->has_last)
            bits->words[kChunkWords - 1] |= uint64_t{1} << 63;
    }

    bool next_database(DatabaseKey* db) noexcept override
    {
        if (next_db >= set->db_count_)
            return false;
        *db = set->dbs_[next_db++];
        return true;
    }
};

ChangeCursor* ChangeSet::open_cursor() noexcept
{
    const size_t head = (sizeof(ChangeSetCursor) + 15) & ~size_t{15};
    const size_t bytes = head + chunk_count_ * sizeof(ChangeSetCursor::ChunkRef) + size_t{fork_count_} * 2 * sizeof(uint32_t);
    void* memory = allocator_->allocate(bytes); /* outside the budget: see the header */
    if (memory == nullptr) {
        refusal_ = Refusal::kAllocation;
        return nullptr;
    }
    auto* cursor = new (memory) ChangeSetCursor();
    cursor->set = this;
    cursor->bytes = bytes;
    cursor->chunks = reinterpret_cast<ChangeSetCursor::ChunkRef*>(static_cast<uint8_t*>(memory) + head);
    cursor->order = reinterpret_cast<uint32_t*>(cursor->chunks + chunk_count_);
    uint32_t* rank = cursor->order + fork_count_;
    for (uint32_t i = 0; i < fork_count_; ++i)
        cursor->order[i] = i;
    const Fork* forks = forks_;
    std::sort(cursor->order, cursor->order + fork_count_,
              [forks](uint32_t a, uint32_t b) { return relfork_less(forks[a].rel, forks[b].rel); });
    for (uint32_t r = 0; r < fork_count_; ++r)
        rank[cursor->order[r]] = r;
    uint64_t n = 0;
    for (uint64_t i = 0; i < chunk_slot_count_; ++i) {
        const Chunk& c = chunks_[i];
        if (c.data != nullptr)
            cursor->chunks[n++] = ChangeSetCursor::ChunkRef{(uint64_t{rank[fork_find(rel_of(c))]} << 32) | c.chunk, &c};
    }
    std::sort(cursor->chunks, cursor->chunks + n,
              [](const ChangeSetCursor::ChunkRef& a, const ChangeSetCursor::ChunkRef& b) { return a.key < b.key; });
    std::sort(dbs_, dbs_ + db_count_, database_less);
    return cursor;
}

void ChangeSet::close_cursor(ChangeCursor* cursor) noexcept
{
    if (cursor == nullptr)
        return;
    auto* c = static_cast<ChangeSetCursor*>(cursor);
    const size_t bytes = c->bytes;
    c->~ChangeSetCursor();
    allocator_->release(c, bytes);
}

}  // namespace ptrack
