/*
 * retention_plan.cpp -- the retention policy of wal capture's summaries as
 * a pure function of the listing; the steps and their order are in
 * ptrack/retention_plan.h, the reasons in docs/design.md section 4.9.
 */
#include "ptrack/retention_plan.h"

namespace ptrack {

namespace {

RetentionAction none() noexcept
{
    return RetentionAction{RetentionStep::kNone, 0, 0, 0, false};
}

/* files[i] and files[i + 1] may become one file (whatever the boundary between them). */
bool joinable(const RetentionFile* files, size_t i, Lsn combine_until) noexcept
{
    return files[i].usable && files[i + 1].usable && files[i].end == files[i + 1].start &&
           files[i + 1].end <= combine_until;
}

bool ends_at_redo(const RetentionFile& f) noexcept
{
    return (f.flags & kSummaryEndsAtRedo) != 0;
}

/* A container with files inside its range that the caller has to deal with. */
bool find_overlap(const RetentionFile* files, size_t count, const ChainRole* roles, RetentionAction* out) noexcept
{
    for (size_t c = 0; c < count; ++c) {
        /* Sorted by start, then end descending: the files inside follow c and start before its end. */
        size_t inside = 0;
        bool tiled = true;
        Lsn at = files[c].start;
        for (size_t j = c + 1; j < count && files[j].start < files[c].end && files[j].end <= files[c].end; ++j) {
            tiled = tiled && files[j].start == at;
            at = files[j].end;
            ++inside;
        }
        tiled = tiled && at == files[c].end;
        /*
         * A damaged container the files inside do not replace stays (the
         * answers refuse what it covers); a usable one off the chain is no
         * combined file (it starts inside another): its files inside stay.
         */
        if (inside == 0 || (!files[c].usable && !tiled) ||
            (files[c].usable && roles[c] != ChainRole::kOnChain))
            continue;
        *out = RetentionAction{RetentionStep::kOverlap, c + 1, inside, c, tiled};
        return true;
    }
    return false;
}

}  // namespace

RetentionAction plan_retention(const RetentionFile* files, size_t count, const ChainRole* roles,
                               const RetentionPolicy& policy) noexcept
{
    RetentionAction action = none();
    if (find_overlap(files, count, roles, &action))
        return action;

    /* Strays, once behind the resume point (the follower's restart removes those past it). */
    for (size_t i = 0; i < count; ++i)
        if (roles[i] == ChainRole::kOffChain && files[i].end <= policy.combine_until)
            return RetentionAction{RetentionStep::kStray, i, 1, 0, false};

    /*
     * Expired files: a prefix, never the newest, and never the file ending at
     * the resume point or a later one (a restart needs the chain to end there).
     */
    if (policy.keep_seconds > 0) {
        const int64_t cutoff = policy.now - policy.keep_seconds;
        size_t expired = 0;
        while (expired + 1 < count && files[expired].mtime < cutoff &&
               (policy.combine_until == 0 || files[expired].end < policy.combine_until))
            ++expired;
        if (expired > 0)
            return RetentionAction{RetentionStep::kRemove, 0, expired, 0, false};
    }

    /* Runs whose inner boundaries are not redo LSNs. */
    for (size_t i = 0; i + 1 < count;) {
        size_t j = i;
        while (j + 1 < count && joinable(files, j, policy.combine_until) && !ends_at_redo(files[j]))
            ++j;
        const size_t length = j - i + 1;
        /*
         * The newest run (up to the resume point) may still be cut again:
         * combined only once it is long.
         */
        const bool open = (j + 1 == count || files[j + 1].end > policy.combine_until) && !ends_at_redo(files[j]);
        if (length >= 2 && (!open || length >= kRetentionMaxInputs))
            return RetentionAction{RetentionStep::kCombine, i,
                                   length < kRetentionMaxInputs ? length : kRetentionMaxInputs, 0, false};
        i = j + 1;
    }

    /* Too many files: the older ones lose boundaries. */
    if (count > policy.max_files) {
        const size_t old_zone = count - policy.max_files / 2;
        /*
         * With a keep time: a closed run of files written in one slice of
         * keep_seconds / (max_files / 2) (the next file is in a later one),
         * all at once, so that each summary is rewritten about once, and the
         * keep time holds about max_files / 2 such files.
         */
        if (policy.keep_seconds > 0) {
            const int64_t half = static_cast<int64_t>(policy.max_files / 2);
            const int64_t slice = policy.keep_seconds / half > 0 ? policy.keep_seconds / half : 1;
            for (size_t i = 0; i + 1 < old_zone;) {
                const int64_t bucket = files[i].mtime / slice;
                size_t j = i;
                while (j + 1 < old_zone && joinable(files, j, policy.combine_until) &&
                       files[j + 1].mtime / slice == bucket)
                    ++j;
                const bool closed = j + 1 < count && files[j + 1].mtime / slice != bucket;
                if (j > i && closed)
                    return RetentionAction{RetentionStep::kCombine, i,
                                           j - i + 1 < kRetentionMaxInputs ? j - i + 1 : kRetentionMaxInputs, 0,
                                           false};
                i = j + 1;
            }
        }
        /* Else (or none such): the adjacent pair of smallest span. */
        size_t best = count;
        for (size_t i = 0; i + 1 < old_zone; ++i)
            if (joinable(files, i, policy.combine_until) &&
                (best == count || files[i + 1].end - files[i].start < files[best + 1].end - files[best].start))
                best = i;
        if (best != count)
            return RetentionAction{RetentionStep::kCombine, best, 2, 0, false};
    }
    return none();
}

}  // namespace ptrack
