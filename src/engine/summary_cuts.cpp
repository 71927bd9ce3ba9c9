/*
 * summary_cuts.cpp -- the WAL follower's cut decisions as pure functions; the
 * rules and the reasons are in ptrack/summary_cuts.h and docs/design.md
 * section 4.5.
 */
#include "ptrack/summary_cuts.h"

#include <cstring>

#include "ptrack/summary_file.h"

namespace ptrack {

void RedoTargets::drop_through(Lsn lsn) noexcept
{
    uint32_t n = 0;
    while (n < count_ && lsn_[n] <= lsn)
        ++n;
    count_ -= n;
    std::memmove(lsn_, lsn_ + n, count_ * sizeof(Lsn));
}

void RedoTargets::add(Lsn redo, Lsn set_start) noexcept
{
    const uint32_t n = count_;
    uint32_t at = n;
    while (at > 0 && lsn_[at - 1] > redo)
        --at;
    if (at > 0 && lsn_[at - 1] == redo)
        return;
    if (n == kMaxRedoTargets) {
        /* Candidates: the kept ones and `redo`, in order; the newest of them always stays. */
        Lsn all[kMaxRedoTargets + 1];
        std::memcpy(all, lsn_, at * sizeof(Lsn));
        all[at] = redo;
        std::memcpy(all + at + 1, lsn_ + at, (n - at) * sizeof(Lsn));
        uint32_t drop = 0;
        Lsn best = UINT64_MAX;
        for (uint32_t i = 0; i < n; ++i) {
            const Lsn before = i == 0 ? set_start : all[i - 1];
            if (all[i + 1] - before < best) {
                best = all[i + 1] - before;
                drop = i;
            }
        }
        std::memcpy(lsn_, all, drop * sizeof(Lsn));
        std::memcpy(lsn_ + drop, all + drop + 1, (n - drop) * sizeof(Lsn));
        return;
    }
    std::memmove(lsn_ + at + 1, lsn_ + at, (n - at) * sizeof(Lsn));
    lsn_[at] = redo;
    count_ = n + 1;
}

Lsn cut_point_now(const FollowerPosition& pos, Lsn set_start) noexcept
{
    if (pos.record_ending_at_next_unread)
        return 0;
    if (set_start <= pos.next)
        return pos.next + 1;
    if (set_start == pos.next + 1)
        return pos.next + 2;
    return 0;
}

bool splits_at_last_record_end(const FollowerPosition& pos, Lsn set_start) noexcept
{
    return set_start < pos.next && pos.next_is_record_end && !pos.record_ending_at_next_unread &&
           pos.last_start != 0 && pos.last_end == pos.next;
}

bool cut_at_last_record_end_first(const SummaryCut& cut, Lsn next) noexcept
{
    return cut.at == next + 1 && !cut.readd && cut.flags == 0;
}

SummaryCut cut_after_record(bool refused, bool cut_soon, Lsn next, Lsn set_start, bool* restart) noexcept
{
    *restart = false;
    if (refused) {
        if (next > set_start)
            return SummaryCut{next, true, 0};
        *restart = true;
        return SummaryCut{0, false, 0};
    }
    if (cut_soon)
        return SummaryCut{next + 1, false, 0};
    return SummaryCut{0, false, 0};
}

SaveCut save_cut(Lsn set_start, Lsn next, Lsn init_lsn) noexcept
{
    if (set_start > next + 1 && set_start > init_lsn)
        return SaveCut::kDeferred;
    if (set_start > next)
        return SaveCut::kNone;
    return SaveCut::kCut;
}

bool note_redo(RedoWatch& watch, Lsn redo, const FollowerPosition& pos, Lsn set_start, bool cut_waiting,
               int64_t now) noexcept
{
    if (redo == 0 || redo == watch.seen)
        return false;
    if (redo <= set_start) {
        /*
         * Learnt after a cut past it.  At a record's end a summary may end
         * already: marked as ending at a redo LSN, retention keeps that
         * boundary, and a backup starting there gets none of the summary
         * before.
         */
        if (redo == watch.plain_end) {
            watch.mark_start = watch.plain_start;
            watch.mark_end = watch.plain_end;
        }
        return false;
    }
    watch.seen = redo;
    /* The summary that would end at `redo` starts at the newest target before it, or at the set's start. */
    Lsn since = set_start;
    for (uint32_t i = 0; i < watch.targets.count() && watch.targets[i] <= redo; ++i) {
        if (watch.targets[i] == redo)
            return false; /* learnt already (GetRedoRecPtr(), then its CHECKPOINT_REDO record) */
        since = watch.targets[i];
    }
    /*
     * A storm of checkpoints (hundreds a second: CHECKPOINT in a loop) would
     * cost one fsync'd file each and leave the follower behind the WAL.  No
     * backup starts that often; the time alone is no measure, since a
     * follower catching up reads many redo LSNs within it, far apart in the
     * WAL.
     */
    if (watch.noted_at != 0 && now - watch.noted_at < kMinRedoCutMicros && redo - since < kMaxRedoLetGoWal)
        return false;
    watch.noted_at = now;
    if (redo > pos.next) {
        watch.targets.add(redo, set_start);
        return false;
    }
    return redo == pos.next && pos.next_is_record_end && pos.last_start != 0 && !cut_waiting;
}

Lsn cut_before_record(RedoTargets& targets, Lsn end, Lsn next, Lsn set_start) noexcept
{
    while (targets.count() > 0 && targets[0] <= end) {
        const Lsn target = targets[0];
        targets.drop_through(target);
        if (next >= target || target <= set_start)
            continue;
        return target;
    }
    return 0;
}

void summary_written(RedoWatch& watch, Lsn start, const SummaryCut& cut) noexcept
{
    if (cut.readd && (cut.flags & kSummaryEndsAtRedo) == 0) {
        watch.plain_start = start;
        watch.plain_end = cut.at;
    }
}

}  // namespace ptrack
