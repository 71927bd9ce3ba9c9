/*
 * change_set.cpp -- the follower's exact change set and its cursor; what the
 * set holds, its budget and its answers are in ptrack/change_set.h.
 *
 * Layout.  Forks: a dense array (index = order of first appearance) and an
 * open-addressing table of indexes (load <= 1/2).  Chunks: one
 * open-addressing table keyed by (fork index, chunk number), load <= 1/2,
 * each slot holding its block container: a hash set of 16-bit offsets
 * (0xFFFF marks an empty slot, so offset 0xFFFF itself is a flag), load <=
 * 3/4, doubling from 8 slots, or an 8 KB bitmap past kSparseMaxBlocks.
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
};

struct ChangeSet::Chunk {
    uint32_t fork_plus1; /* 0: empty slot */
    uint32_t chunk;
    uint32_t count;      /* distinct blocks */
    uint8_t log2;        /* sparse: 1 << log2 slots */
    uint8_t bitmap;      /* data is kChunkWords words */
    uint8_t has_last;    /* sparse: offset 0xFFFF is in the set */
    uint8_t unused;
    void* data;
};

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
/* Chunks one WAL record may add or turn into bitmaps (32 block references, each with its VM block). */
constexpr size_t kRecordReserve = 64 * kBitmapBytes;

inline uint32_t sparse_home(uint32_t offset, uint8_t log2) noexcept
{
    return (offset * 0x9E3779B1u) >> (32 - log2);
}

inline uint64_t chunk_home(uint32_t fork, uint32_t chunk, uint64_t slots) noexcept
{
    return mix64((uint64_t{fork} << 32) | chunk) & (slots - 1);
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

uint32_t ChangeSet::fork_index(const RelFork& rel) noexcept
{
    if (fork_slot_count_ > 0) {
        uint32_t h = static_cast<uint32_t>(hash_rel(rel)) & (fork_slot_count_ - 1);
        for (;;) {
            const uint32_t at = fork_slots_[h];
            if (at == 0)
                break;
            if (forks_[at - 1].rel == rel)
                return at - 1;
            h = (h + 1) & (fork_slot_count_ - 1);
        }
    }
    if (fork_count_ == fork_capacity_ && !grow_forks())
        return UINT32_MAX;
    const uint32_t index = fork_count_++;
    forks_[index] = Fork{rel, kNoLimit};
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
        if (c.fork_plus1 == 0)
            continue;
        uint64_t h = chunk_home(c.fork_plus1 - 1, c.chunk, slot_count);
        while (slots[h].fork_plus1 != 0)
            h = (h + 1) & (slot_count - 1);
        slots[h] = c;
    }
    release(chunks_, chunk_slot_count_ * sizeof(Chunk));
    chunks_ = slots;
    chunk_slot_count_ = slot_count;
    cache_ = nullptr; /* slots moved */
    return true;
}

ChangeSet::Chunk* ChangeSet::chunk_of(uint32_t fork, uint32_t chunk) noexcept
{
    if (chunk_slot_count_ > 0) {
        uint64_t h = chunk_home(fork, chunk, chunk_slot_count_);
        for (;;) {
            Chunk& c = chunks_[h];
            if (c.fork_plus1 == 0)
                break;
            if (c.fork_plus1 == fork + 1 && c.chunk == chunk)
                return &c;
            h = (h + 1) & (chunk_slot_count_ - 1);
        }
    }
    /* A new chunk: its first set, then (if needed) a bigger table, so a refusal changes nothing. */
    const size_t first_bytes = (size_t{1} << kFirstLog2) * sizeof(uint16_t);
    void* data = allocate(first_bytes);
    if (data == nullptr)
        return nullptr;
    if ((chunk_count_ + 1) * 2 > chunk_slot_count_ && !grow_chunks()) {
        release(data, first_bytes);
        return nullptr;
    }
    std::memset(data, 0xFF, first_bytes);
    uint64_t h = chunk_home(fork, chunk, chunk_slot_count_);
    while (chunks_[h].fork_plus1 != 0)
        h = (h + 1) & (chunk_slot_count_ - 1);
    Chunk& c = chunks_[h];
    c.fork_plus1 = fork + 1;
    c.chunk = chunk;
    c.count = 0;
    c.log2 = kFirstLog2;
    c.bitmap = 0;
    c.has_last = 0;
    c.data = data;
    ++chunk_count_;
    return &c;
}

/* Adds `offset` to the chunk's container; false (nothing changed) after a refusal. */
bool ChangeSet::add_to_chunk(Chunk* c, uint32_t offset) noexcept
{
    if (c->bitmap) {
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
        c->bitmap = 1;
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
    if (!(rel == cache_rel_)) {
        const uint32_t fork = fork_index(rel);
        if (fork == UINT32_MAX)
            return AddResult::kRefused;
        cache_rel_ = rel;
        cache_fork_ = fork;
        cache_limit_ = forks_[fork].limit;
        cache_ = nullptr;
    }
    if (block >= cache_limit_)
        return done(); /* the fork's limit already lists it */
    if (cache_ == nullptr || cache_chunk_ != chunk) {
        Chunk* c = chunk_of(cache_fork_, chunk);
        if (c == nullptr)
            return AddResult::kRefused;
        cache_ = c;
        cache_chunk_ = chunk;
    }
    if (!add_to_chunk(cache_, block & (kChunkBlocks - 1)))
        return AddResult::kRefused;
    return done();
}

AddResult ChangeSet::add_limit(const RelFork& rel, BlockNumber first) noexcept
{
    const uint32_t fork = fork_index(rel);
    if (fork == UINT32_MAX)
        return AddResult::kRefused;
    if (first < forks_[fork].limit)
        forks_[fork].limit = first;
    if (cache_rel_ == rel)
        cache_limit_ = forks_[fork].limit;
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
        if (c.fork_plus1 == 0)
            continue;
        release(c.data, c.bitmap ? kBitmapBytes : (size_t{1} << c.log2) * sizeof(uint16_t));
        c.fork_plus1 = 0;
    }
    if (fork_slots_ != nullptr)
        std::memset(fork_slots_, 0, size_t{fork_slot_count_} * sizeof(uint32_t));
    fork_count_ = 0;
    chunk_count_ = 0;
    db_count_ = 0;
    block_count_ = 0;
    cache_rel_ = RelFork{0, 0, 0, 0xFE};
    cache_ = nullptr;
    refusal_ = Refusal::kNone;
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
        if (c->bitmap) {
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
        if (c.fork_plus1 != 0)
            cursor->chunks[n++] = ChangeSetCursor::ChunkRef{(uint64_t{rank[c.fork_plus1 - 1]} << 32) | c.chunk, &c};
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
