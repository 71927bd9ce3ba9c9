/*
 * change_cursor.cpp -- the union of change sets (MergeCursor); the protocol
 * and the order every cursor keeps are in ptrack/change_cursor.h.
 */
#include "ptrack/change_cursor.h"

namespace ptrack {

MergeCursor::MergeCursor(State* states, size_t count) noexcept : states_(states), count_(count)
{
    for (size_t i = 0; i < count_; ++i) {
        State& s = states_[i];
        s.rel = RelFork{0, 0, 0, 0};
        s.limit = kNoLimit;
        s.chunk = 0;
        s.db = DatabaseKey{0, 0};
        s.has_fork = s.in_fork = s.has_chunk = s.has_db = false;
    }
}

bool MergeCursor::next_fork(RelFork* rel, BlockNumber* limit) noexcept
{
    /* Advance the sources that are on the current fork (all of them the first time). */
    for (size_t i = 0; i < count_; ++i) {
        State& s = states_[i];
        if (!started_ || s.in_fork)
            s.has_fork = s.source->next_fork(&s.rel, &s.limit);
        s.in_fork = false;
        s.has_chunk = false;
    }
    started_ = true;
    chunk_current_ = false;
    const State* least = nullptr;
    for (size_t i = 0; i < count_; ++i)
        if (states_[i].has_fork && (least == nullptr || relfork_less(states_[i].rel, least->rel)))
            least = &states_[i];
    if (least == nullptr)
        return false;
    const RelFork current = least->rel;
    BlockNumber merged = kNoLimit;
    for (size_t i = 0; i < count_; ++i) {
        State& s = states_[i];
        if (!s.has_fork || !(s.rel == current))
            continue;
        s.in_fork = true;
        if (s.limit < merged)
            merged = s.limit;
        s.has_chunk = s.source->next_chunk(&s.chunk);
    }
    *rel = current;
    *limit = merged;
    return true;
}

bool MergeCursor::next_chunk(uint32_t* chunk) noexcept
{
    if (chunk_current_)
        for (size_t i = 0; i < count_; ++i) {
            State& s = states_[i];
            if (s.in_fork && s.has_chunk && s.chunk == chunk_)
                s.has_chunk = s.source->next_chunk(&s.chunk);
        }
    bool any = false;
    uint32_t least = 0;
    for (size_t i = 0; i < count_; ++i) {
        const State& s = states_[i];
        if (s.in_fork && s.has_chunk && (!any || s.chunk < least)) {
            least = s.chunk;
            any = true;
        }
    }
    chunk_current_ = any;
    chunk_ = least;
    if (any)
        *chunk = least;
    return any;
}

void MergeCursor::or_chunk(ChunkBits* bits) noexcept
{
    for (size_t i = 0; i < count_; ++i) {
        State& s = states_[i];
        if (s.in_fork && s.has_chunk && s.chunk == chunk_)
            s.source->or_chunk(bits);
    }
}

bool MergeCursor::next_database(DatabaseKey* db) noexcept
{
    for (size_t i = 0; i < count_; ++i) {
        State& s = states_[i];
        if (!db_started_ || (db_current_ && s.has_db && s.db == db_))
            s.has_db = s.source->next_database(&s.db);
    }
    db_started_ = true;
    const State* least = nullptr;
    for (size_t i = 0; i < count_; ++i)
        if (states_[i].has_db && (least == nullptr || database_less(states_[i].db, least->db)))
            least = &states_[i];
    db_current_ = least != nullptr;
    if (least == nullptr)
        return false;
    db_ = least->db;
    *db = db_;
    return true;
}

}  // namespace ptrack
