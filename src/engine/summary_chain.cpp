/*
 * summary_chain.cpp -- which listed summaries form the follower's chain,
 * and the cover of a start LSN; see ptrack/summary_chain.h.
 *
 * Two passes over the listing, each in LSN order so that a file's answer
 * depends only on files already decided: backwards (by start) for "reaches
 * live", forwards for "on the chain" (the files ending where it starts are
 * found through `scratch_indexes`, the listing sorted by end).  O(n log n).
 */
#include "ptrack/summary_chain.h"

#include <algorithm>

namespace ptrack {

namespace {

constexpr uint8_t kReaches = 1; /* reaches live */
constexpr uint8_t kOn = 2;      /* on the chain */

/* The first index whose start is >= lsn (files sorted by start). */
size_t first_starting_at(const ChainLink* files, size_t count, Lsn lsn) noexcept
{
    size_t lo = 0, hi = count;
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        if (files[mid].start < lsn)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

bool has_flag_starting_at(const ChainLink* files, size_t count, const uint8_t* flags, Lsn lsn, uint8_t flag) noexcept
{
    for (size_t j = first_starting_at(files, count, lsn); j < count && files[j].start == lsn; ++j)
        if ((flags[j] & flag) != 0)
            return true;
    return false;
}

}  // namespace

SummaryChain find_chain(const ChainLink* files, size_t count, Lsn live, size_t* scratch_indexes,
                        uint8_t* scratch_flags, ChainRole* roles) noexcept
{
    uint8_t* flags = scratch_flags;
    /* Backwards: a file reaches live if it ends there (or past it) or a file that does starts where it ends. */
    for (size_t k = count; k > 0; --k) {
        const size_t i = k - 1;
        const ChainLink& f = files[i];
        flags[i] = 0;
        if (!f.usable || f.start >= f.end || f.start >= live)
            continue;
        if (f.end >= live || has_flag_starting_at(files, count, flags, f.end, kReaches))
            flags[i] = kReaches;
    }
    SummaryChain chain{live, 0, 0};
    for (size_t i = 0; i < count; ++i)
        if ((flags[i] & kReaches) != 0) {
            chain.start = files[i].start; /* sorted by start: the first is the oldest */
            break;
        }

    /* Forwards: on the chain if it reaches live and starts at the chain's start or where a file on it ends. */
    for (size_t i = 0; i < count; ++i)
        scratch_indexes[i] = i;
    std::sort(scratch_indexes, scratch_indexes + count,
              [files](size_t a, size_t b) noexcept { return files[a].end < files[b].end; });
    Lsn widest_on = 0; /* the largest end of the files on the chain so far (all start at or before this one) */
    for (size_t i = 0; i < count; ++i) {
        const ChainLink& f = files[i];
        bool on = false;
        if ((flags[i] & kReaches) != 0) {
            on = f.start == chain.start;
            /* The files ending at f.start start before it: decided already. */
            const size_t* first = std::lower_bound(
                scratch_indexes, scratch_indexes + count, f.start,
                [files](size_t a, Lsn lsn) noexcept { return files[a].end < lsn; });
            for (const size_t* j = first; !on && j < scratch_indexes + count && files[*j].end == f.start; ++j)
                on = (flags[*j] & kOn) != 0;
        }
        if (on) {
            flags[i] |= kOn;
            roles[i] = ChainRole::kOnChain;
            ++chain.on_chain;
        } else if (f.start >= live) {
            roles[i] = ChainRole::kAfter;
        } else if (f.end <= chain.start) {
            roles[i] = ChainRole::kBefore;
        } else if (widest_on >= f.end) {
            roles[i] = ChainRole::kInside; /* a file on the chain starting at or before it ends at or after it */
        } else {
            roles[i] = ChainRole::kOffChain;
            ++chain.off_chain;
        }
        if (on && f.end > widest_on)
            widest_on = f.end;
    }
    return chain;
}

bool chain_cover(const ChainLink* files, size_t count, const ChainRole* roles, Lsn live, Lsn since, size_t* out,
                 size_t* out_count) noexcept
{
    *out_count = 0;
    if (since >= live)
        return true;
    /* The latest file on the chain that holds `since` (equal starts: the first, the longest). */
    size_t first = count;
    for (size_t i = 0; i < count && files[i].start <= since; ++i)
        if (roles[i] == ChainRole::kOnChain && since < files[i].end &&
            (first == count || files[i].start > files[first].start))
            first = i;
    if (first == count)
        return false;
    size_t n = 0;
    out[n++] = first;
    Lsn at = files[first].end;
    while (at < live) {
        size_t next = count;
        for (size_t j = first_starting_at(files, count, at); j < count && files[j].start == at; ++j)
            if (roles[j] == ChainRole::kOnChain) {
                next = j; /* equal starts: the longest first */
                break;
            }
        if (next == count || n == count)
            return false; /* cannot happen for a chain from find_chain(): every file on it reaches live */
        out[n++] = next;
        at = files[next].end;
    }
    *out_count = n;
    return true;
}

}  // namespace ptrack
