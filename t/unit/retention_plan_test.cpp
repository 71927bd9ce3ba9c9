/*
 * t/unit/retention_plan_test.cpp -- proves the retention policy of wal
 * capture's summaries (ptrack/retention_plan.h):
 *
 * - overlaps left by a crash while combining: a usable container is
 *   proposed for validation with the files inside it; a damaged one is
 *   removed only when the files inside tile its range, else left;
 * - files before a hole, and a damaged container its inputs do not tile,
 *   stay until they expire;
 * - expiry removes a prefix of the chain (stopping at the first file kept),
 *   never the newest file, nothing when keep_seconds is 0;
 * - nothing is combined past the follower's resume point (the last save);
 * - runs across boundaries that are not redo LSNs are combined when closed,
 *   the newest (open) run only once it holds kRetentionMaxInputs files,
 *   never across a hole or a damaged file;
 * - above max_files, the pair of smallest span among the older files is
 *   combined, never in the newest half;
 * - above max_files with a keep time, closed runs of files written in one
 *   slice of keep time / (max_files / 2) are combined whole;
 * - a simulation of 12 days of 5-minute checkpoints with calls that cut in
 *   between (256 files; keep time 10 days, then forever): after every pass
 *   the chain is whole and ends at the newest summary, there are at most
 *   max_files files, only the open run keeps non-redo boundaries, nothing
 *   younger than the keep time is lost, expired ones are gone, the newest
 *   redo boundaries are all kept, and each summary is read by combining
 *   about twice with a keep time, a few times more without (printed).
 */
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <set>
#include <vector>

#include "ptrack/retention_plan.h"

using namespace ptrack;

namespace {

constexpr uint32_t R = kSummaryEndsAtRedo;

RetentionFile file(Lsn start, Lsn end, uint32_t flags = R, int64_t mtime = 0, bool usable = true)
{
    return RetentionFile{start, end, flags, usable, mtime};
}

RetentionPolicy policy(int64_t now = 1000, int64_t keep = 0, size_t max_files = 256, Lsn combine_until = ~Lsn{0})
{
    return RetentionPolicy{now, keep, max_files, combine_until};
}

/* The roles of the chain ending at the newest end (the follower's summarized_lsn), then the plan. */
RetentionAction plan(const std::vector<RetentionFile>& files, const RetentionPolicy& p)
{
    Lsn live = 0;
    std::vector<ChainLink> links;
    for (const RetentionFile& f : files) {
        links.push_back(ChainLink{f.start, f.end, f.usable});
        live = std::max(live, f.end);
    }
    std::vector<size_t> indexes(files.size());
    std::vector<uint8_t> flags(files.size());
    std::vector<ChainRole> roles(files.size());
    (void) find_chain(links.data(), links.size(), live, indexes.data(), flags.data(), roles.data());
    return plan_retention(files.data(), files.size(), roles.data(), p);
}

/* Applies a step the way the server does when every I/O succeeds and every file is valid. */
void apply_step(std::vector<RetentionFile>& files, const RetentionAction& a, uint64_t* inputs_read = nullptr,
                uint64_t* span_read = nullptr)
{
    switch (a.step) {
    case RetentionStep::kNone:
        break;
    case RetentionStep::kOverlap:
        if (files[a.container].usable)
            files.erase(files.begin() + static_cast<long>(a.first), files.begin() + static_cast<long>(a.first + a.count));
        else
            files.erase(files.begin() + static_cast<long>(a.container));
        break;
    case RetentionStep::kStray:
        files.erase(files.begin() + static_cast<long>(a.first));
        break;
    case RetentionStep::kRemove:
        files.erase(files.begin(), files.begin() + static_cast<long>(a.count));
        break;
    case RetentionStep::kCombine: {
        RetentionFile out = files[a.first];
        for (size_t i = a.first; i < a.first + a.count; ++i) {
            out.end = files[i].end;
            out.flags = files[i].flags;
            out.mtime = std::max(out.mtime, files[i].mtime);
        }
        if (inputs_read != nullptr)
            *inputs_read += a.count;
        if (span_read != nullptr)
            *span_read += out.end - out.start;
        files.erase(files.begin() + static_cast<long>(a.first) + 1,
                    files.begin() + static_cast<long>(a.first + a.count));
        files[a.first] = out;
        break;
    }
    }
}

}  // namespace

TEST(RetentionPlan, NothingToDo)
{
    EXPECT_EQ(plan({}, policy()).step, RetentionStep::kNone);
    EXPECT_EQ(plan({file(100, 200, 0)}, policy()).step, RetentionStep::kNone);
    EXPECT_EQ(plan({file(100, 200), file(200, 300), file(300, 400, 0)}, policy()).step, RetentionStep::kNone);
}

TEST(RetentionPlan, OverlapsLeftByACrashWhileCombining)
{
    /* [100, 400) written; [300, 400) already removed, [100, 200) and [200, 300) not yet. */
    std::vector<RetentionFile> files = {file(100, 400), file(100, 200, 0), file(200, 300, 0), file(400, 500)};
    RetentionAction a = plan(files, policy());
    ASSERT_EQ(a.step, RetentionStep::kOverlap);
    EXPECT_EQ(a.container, 0u);
    EXPECT_EQ(a.first, 1u);
    EXPECT_EQ(a.count, 2u);
    EXPECT_FALSE(a.tiled) << "[100, 300) does not cover [100, 400)";
    /* The container is found damaged: without the whole of it inside, it stays (the answers refuse). */
    files[0].usable = false;
    a = plan(files, policy());
    EXPECT_NE(a.step, RetentionStep::kOverlap);

    /* Every input still there: a damaged container goes, the inputs say the same. */
    files = {file(100, 400, R, 0, false), file(100, 200, 0), file(200, 300, 0), file(300, 400), file(400, 500)};
    a = plan(files, policy());
    ASSERT_EQ(a.step, RetentionStep::kOverlap);
    EXPECT_TRUE(a.tiled);
    EXPECT_EQ(a.count, 3u);
    apply_step(files, a);
    ASSERT_EQ(files.size(), 4u);
    EXPECT_EQ(files[0].end, 200u);

    /* A usable container: the files inside go, the chain is whole again. */
    files = {file(100, 400), file(100, 200, 0), file(200, 300, 0), file(300, 400), file(400, 500)};
    apply_step(files, plan(files, policy()));
    ASSERT_EQ(files.size(), 2u);
    EXPECT_EQ(files[0].start, 100u);
    EXPECT_EQ(files[0].end, 400u);
    EXPECT_EQ(plan(files, policy()).step, RetentionStep::kNone);
}

TEST(RetentionPlan, FilesBeforeAHoleStayUntilTheyExpire)
{
    /* The answers start after the hole and name the missing file to an older L: nothing to remove yet. */
    const std::vector<RetentionFile> files = {file(100, 200, R, 10), file(200, 300, R, 20), file(350, 400, R, 990),
                                              file(400, 500, R, 995)};
    EXPECT_EQ(plan(files, policy(1000, 0)).step, RetentionStep::kNone);
    const RetentionAction a = plan(files, policy(1000, 100));
    ASSERT_EQ(a.step, RetentionStep::kRemove);
    EXPECT_EQ(a.count, 2u) << "expired, they go";

    /*
     * A damaged container left in place (an input missing) overlaps the chain:
     * nothing is removed (the answers refuse what it covers; expiry removes it
     * in time).
     */
    const std::vector<RetentionFile> left = {file(100, 400, R, 0, false), file(100, 200), file(200, 300),
                                             file(400, 500)};
    EXPECT_EQ(plan(left, policy()).step, RetentionStep::kNone);
    const std::vector<RetentionFile> whole = {file(100, 400, R, 0, false), file(100, 200), file(200, 300),
                                              file(300, 400), file(400, 500)};
    EXPECT_EQ(plan(whole, policy()).step, RetentionStep::kOverlap) << "tiled: the damaged container goes";
    const std::vector<RetentionFile> shifted = {file(100, 200), file(150, 300, R, 0, false), file(300, 400)};
    EXPECT_EQ(plan(shifted, policy()).step, RetentionStep::kNone) << "an overlap that is no container";
}

TEST(RetentionPlan, StraysOffTheChainGoOnceBehindTheResumePoint)
{
    /* A stray straddling two files of the chain, damaged or not: it goes, the chain stays. */
    for (bool usable : {false, true}) {
        std::vector<RetentionFile> files = {file(100, 200), file(150, 250, R, 0, usable), file(200, 300),
                                            file(300, 400)};
        const RetentionAction a = plan(files, policy());
        ASSERT_EQ(a.step, RetentionStep::kStray) << "usable " << usable;
        EXPECT_EQ(a.first, 1u);
        EXPECT_EQ(a.count, 1u);
        apply_step(files, a);
        EXPECT_EQ(files.size(), 3u);
        EXPECT_EQ(plan(files, policy()).step, RetentionStep::kNone);
    }
    /*
     * A usable file that starts inside one and holds the next one's range is
     * no combined file: the file of the chain stays, the stray goes.
     */
    std::vector<RetentionFile> files = {file(100, 200), file(150, 300), file(200, 300), file(300, 400)};
    RetentionAction a = plan(files, policy());
    ASSERT_EQ(a.step, RetentionStep::kStray);
    EXPECT_EQ(files[a.first].start, 150u);
    apply_step(files, a);
    ASSERT_EQ(files.size(), 3u);
    EXPECT_EQ(files[1].start, 200u);
    /* Not past the resume point: the follower's restart removes it if it ends after. */
    files = {file(100, 200), file(150, 350, R, 0, false), file(200, 300), file(300, 400)};
    EXPECT_NE(plan(files, policy(1000, 0, 256, 300)).step, RetentionStep::kStray);
    EXPECT_EQ(plan(files, policy(1000, 0, 256, 350)).step, RetentionStep::kStray);
    /* Before a hole it is no stray (the chain starts after the hole): expiry only. */
    files = {file(100, 200), file(150, 250, R, 0, false), file(200, 300), file(350, 400)};
    EXPECT_EQ(plan(files, policy()).step, RetentionStep::kNone);
}

TEST(RetentionPlan, ExpiryRemovesAPrefixNeverTheNewest)
{
    /* now 1000, keep 100: files written before 900 expire. */
    std::vector<RetentionFile> files = {file(100, 200, R, 100), file(200, 300, R, 200), file(300, 400, R, 950),
                                        file(400, 500, R, 990)};
    RetentionAction a = plan(files, policy(1000, 100));
    ASSERT_EQ(a.step, RetentionStep::kRemove);
    EXPECT_EQ(a.count, 2u);
    EXPECT_EQ(plan(files, policy(1000, 0)).step, RetentionStep::kNone) << "keep_seconds 0 keeps them all";

    /* An old file after a young one stays: no hole. */
    files[1].mtime = 980;
    a = plan(files, policy(1000, 100));
    ASSERT_EQ(a.step, RetentionStep::kRemove);
    EXPECT_EQ(a.count, 1u);

    /* Everything expired: the newest stays. */
    for (RetentionFile& f : files)
        f.mtime = 10;
    a = plan(files, policy(1000, 100));
    ASSERT_EQ(a.step, RetentionStep::kRemove);
    EXPECT_EQ(a.count, 3u);
}

TEST(RetentionPlan, ExpiryKeepsTheFileEndingAtTheResumePoint)
{
    /* All expired; the follower's last save resumes at 300: [200, 300) and what follows stay. */
    const std::vector<RetentionFile> files = {file(100, 200, R, 10), file(200, 300, R, 10), file(300, 400, R, 10),
                                              file(400, 500, R, 10)};
    RetentionAction a = plan(files, policy(1000, 100, 256, 300));
    ASSERT_EQ(a.step, RetentionStep::kRemove);
    EXPECT_EQ(a.count, 1u) << "only [100, 200) ends before the resume point 300";
    /* Resuming at the start of the oldest file: nothing expires. */
    EXPECT_NE(plan(files, policy(1000, 100, 256, 200)).step, RetentionStep::kRemove);
    /* No resume point yet (no save): expiry is bounded by the newest file only. */
    a = plan(files, policy(1000, 100, 256, 0));
    ASSERT_EQ(a.step, RetentionStep::kRemove);
    EXPECT_EQ(a.count, 3u);
}

TEST(RetentionPlan, RunsAcrossCutsThatAreNotRedoLsns)
{
    /* [100..400) ends at a redo LSN with two cuts inside; then an open run of two. */
    std::vector<RetentionFile> files = {file(100, 200, 0), file(200, 300, 0), file(300, 400, R), file(400, 500, 0),
                                        file(500, 600, 0)};
    RetentionAction a = plan(files, policy());
    ASSERT_EQ(a.step, RetentionStep::kCombine);
    EXPECT_EQ(a.first, 0u);
    EXPECT_EQ(a.count, 3u);
    apply_step(files, a);
    EXPECT_EQ(files[0].flags, R) << "the combined file ends at the redo LSN";
    EXPECT_EQ(plan(files, policy()).step, RetentionStep::kNone) << "the open run waits";

    /* The open run at kRetentionMaxInputs files is combined. */
    files.clear();
    for (Lsn i = 0; i < kRetentionMaxInputs + 5; ++i)
        files.push_back(file(100 * (i + 1), 100 * (i + 2), 0));
    a = plan(files, policy());
    ASSERT_EQ(a.step, RetentionStep::kCombine);
    EXPECT_EQ(a.first, 0u);
    EXPECT_EQ(a.count, kRetentionMaxInputs);
    apply_step(files, a);
    EXPECT_EQ(plan(files, policy()).step, RetentionStep::kNone) << "6 files in the open run: they wait";

    /* Never across a damaged file or a hole (the hole step first removes what lies before it). */
    files = {file(100, 200, 0), file(200, 300, 0, 0, false), file(300, 400, R)};
    EXPECT_EQ(plan(files, policy()).step, RetentionStep::kNone);
}

TEST(RetentionPlan, NothingIsCombinedPastTheResumePoint)
{
    /* The follower resumes at 300 after a crash: it drops what ends after 300 and needs a file ending there. */
    std::vector<RetentionFile> files = {file(100, 200, 0), file(200, 300, 0), file(300, 400, R), file(400, 500, 0)};
    RetentionAction a = plan(files, policy(1000, 0, 256, 300));
    ASSERT_EQ(a.step, RetentionStep::kNone) << "[100, 300) is still open: the next cut may come at the resume point";
    EXPECT_EQ(plan(files, policy(1000, 0, 256, 0)).step, RetentionStep::kNone) << "no save yet: nothing";
    /* The resume point moves to 400 (a save after the checkpoint ending there): the run closes. */
    a = plan(files, policy(1000, 0, 256, 400));
    ASSERT_EQ(a.step, RetentionStep::kCombine);
    EXPECT_EQ(a.first, 0u);
    EXPECT_EQ(a.count, 3u);
    /* The count bound respects it too. */
    files.clear();
    for (Lsn i = 0; i < 12; ++i)
        files.push_back(file(100 * (i + 1), 100 * (i + 2)));
    for (a = plan(files, policy(1000, 0, 8, 400)); a.step != RetentionStep::kNone; a = plan(files, policy(1000, 0, 8, 400))) {
        ASSERT_EQ(a.step, RetentionStep::kCombine);
        EXPECT_LE(files[a.first + a.count - 1].end, 400u);
        apply_step(files, a);
    }
    EXPECT_EQ(files.size(), 10u) << "[100, 400) combined, nothing after it";
}

TEST(RetentionPlan, TooManyFilesCombineTheOldHalfSmallestSpanFirst)
{
    /* 12 redo-bounded files, bound 8: the newest 4 are left whole. */
    std::vector<RetentionFile> files;
    const Lsn spans[] = {50, 10, 10, 40, 30, 30, 30, 30, 1, 1, 1, 1};
    Lsn at = 100;
    for (Lsn s : spans) {
        files.push_back(file(at, at + s));
        at += s;
    }
    RetentionAction a = plan(files, policy(1000, 0, 8));
    ASSERT_EQ(a.step, RetentionStep::kCombine);
    EXPECT_EQ(a.first, 1u) << "10 + 10 is the smallest pair";
    EXPECT_EQ(a.count, 2u);
    int steps = 0;
    for (; a.step != RetentionStep::kNone && steps < 100; ++steps, a = plan(files, policy(1000, 0, 8))) {
        ASSERT_EQ(a.step, RetentionStep::kCombine);
        EXPECT_LT(a.first + a.count, files.size() - 4 + 1) << "the newest half keeps its boundaries";
        apply_step(files, a);
    }
    EXPECT_EQ(files.size(), 8u);
    for (size_t i = 4; i < 8; ++i)
        EXPECT_EQ(files[i].end - files[i].start, 1u) << "file " << i;
}

namespace {

TEST(RetentionPlan, TooManyFilesWithAKeepTimeCombineWholeSlices)
{
    /* Bound 8 (the newest 4 whole), keep 400 s: slices of 100 s. */
    std::vector<RetentionFile> files;
    const int64_t mtimes[] = {10, 20, 30, 150, 160, 250, 260, 270, 280, 290, 300};
    Lsn at = 100;
    for (int64_t m : mtimes) {
        files.push_back(file(at, at + 10, R, m));
        at += 10;
    }
    RetentionAction a = plan(files, policy(300, 400, 8));
    ASSERT_EQ(a.step, RetentionStep::kCombine);
    EXPECT_EQ(a.first, 0u) << "the slice [0, 100)";
    EXPECT_EQ(a.count, 3u);
    apply_step(files, a);
    a = plan(files, policy(300, 400, 8));
    ASSERT_EQ(a.step, RetentionStep::kCombine);
    EXPECT_EQ(a.first, 1u) << "the slice [100, 200)";
    EXPECT_EQ(a.count, 2u);
    apply_step(files, a);
    EXPECT_EQ(files.size(), 8u);
    EXPECT_EQ(plan(files, policy(300, 400, 8)).step, RetentionStep::kNone);
}

/*
 * 12 days of checkpoints every 5 minutes (its LSN advancing by a random
 * amount), with 0 to 3 calls that cut in between, and a pass after each
 * new summary; 256 files at most, kept `keep` seconds (0: forever).
 * *span_ratio: the bytes read by combining per byte of WAL summarized (LSN
 * spans standing for sizes).
 */
void simulate_twelve_days(int64_t keep, double* span_ratio_out)
{
    *span_ratio_out = 1e9;
    const size_t max_files = 256;
    std::mt19937_64 random(21);
    std::vector<RetentionFile> files;
    struct Original {
        Lsn start, end;
        int64_t mtime;
        bool redo;
    };
    std::vector<Original> originals;
    uint64_t inputs_read = 0, span_read = 0;
    const Lsn first_lsn = 0x1000000;
    Lsn at = first_lsn;
    Lsn resume_at = 0;
    int64_t now = 1700000000;
    for (int tick = 0; tick < 12 * 288; ++tick) {
        const int cuts = static_cast<int>(random() % 4);
        for (int c = 0; c <= cuts; ++c) {
            now += 300 / (cuts + 1);
            const Lsn end = at + 1 + random() % 100000;
            const bool redo = c == cuts;
            files.push_back(file(at, end, redo ? R : 0, now));
            originals.push_back(Original{at, end, now, redo});
            at = end;
            /* The follower saves after each checkpoint: it would resume at the newest redo boundary. */
            if (redo)
                resume_at = end;
            int steps = 0;
            for (RetentionAction a = plan(files, policy(now, keep, max_files, resume_at));
                 a.step != RetentionStep::kNone; a = plan(files, policy(now, keep, max_files, resume_at))) {
                ASSERT_NE(a.step, RetentionStep::kOverlap);
                apply_step(files, a, &inputs_read, &span_read);
                ASSERT_LT(++steps, 1000) << "the plan does not converge";
            }

            /* The chain is whole and ends at the newest summary. */
            ASSERT_FALSE(files.empty());
            for (size_t i = 1; i < files.size(); ++i)
                ASSERT_EQ(files[i].start, files[i - 1].end) << "hole at file " << i << " of " << files.size();
            ASSERT_EQ(files.back().end, at);
            ASSERT_LE(files.size(), max_files);
            /* Non-redo boundaries only inside the open run (the newest files after the last redo boundary). */
            size_t open_from = files.size();
            while (open_from > 0 && (files[open_from - 1].flags & R) == 0)
                --open_from;
            for (size_t i = 0; i + 1 < open_from; ++i)
                ASSERT_NE(files[i].flags & R, 0u) << "a cut that is no redo LSN kept at file " << i;
            ASSERT_LT(files.size() - open_from, kRetentionMaxInputs);
            /* Nothing younger than the keep time lost; nothing wholly expired kept (but the newest). */
            if (keep == 0) {
                EXPECT_EQ(files.front().start, first_lsn) << "keep time 0 removes nothing";
                continue;
            }
            const int64_t cutoff = now - keep;
            for (const Original& o : originals) {
                if (o.mtime >= cutoff) {
                    ASSERT_LE(files.front().start, o.start) << "a summary younger than the keep time was removed";
                    break;
                }
            }
            if (files.size() > 1 && files.front().end < resume_at) {
                ASSERT_GE(files.front().mtime, cutoff) << "an expired file stays";
            }
        }
    }
    /* The newest redo boundaries are all kept. */
    std::set<Lsn> boundaries;
    for (const RetentionFile& f : files)
        boundaries.insert(f.end);
    size_t newest_kept = 0;
    for (auto o = originals.rbegin(); o != originals.rend(); ++o) {
        if (!o->redo)
            continue;
        if (boundaries.count(o->end) == 0)
            break;
        ++newest_kept;
    }
    EXPECT_GE(newest_kept, max_files / 2 - kRetentionMaxInputs);
    const double rewrites = static_cast<double>(inputs_read) / static_cast<double>(originals.size());
    /* The bytes combining reads, in proportion to the WAL (LSN span) summarized: what it costs in I/O. */
    const double span_ratio = static_cast<double>(span_read) / static_cast<double>(at - first_lsn);
    std::printf("retention simulation, keep %lld days: %zu summaries written, %zu files left, the newest %zu redo "
                "boundaries kept, the oldest file's newest change %.1f days old; each summary read by %.2f "
                "combining steps on average, %.2f times its WAL span\n",
                static_cast<long long>(keep / 86400), originals.size(), files.size(), newest_kept,
                static_cast<double>(now - files.front().mtime) / 86400.0, rewrites, span_ratio);
    EXPECT_LT(rewrites, 12.0);
    *span_ratio_out = span_ratio;
}

}  // namespace

TEST(RetentionPlan, TwelveDaysOfCheckpointsAndCuts)
{
    double ratio = 0;
    /* With a keep time, whole slices of it are combined at once: about two reads per byte. */
    simulate_twelve_days(10 * 86400, &ratio);
    EXPECT_LT(ratio, 3.0);
    /* Kept forever: pairs of smallest span, about log2(summaries / 128) reads per byte. */
    simulate_twelve_days(0, &ratio);
    EXPECT_LT(ratio, 16.0);
}
