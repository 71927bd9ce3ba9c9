/*
 * t/unit/summary_cuts_test.cpp -- proves the WAL follower's cut decisions
 * (ptrack/summary_cuts.h):
 *
 * - the redo targets: kept in order and once, forgotten through an LSN, and
 *   when 16 are pending the one whose loss joins the least WAL goes, never
 *   the newest; checked against a brute-force model over long random runs
 *   that fill and empty the queue again and again;
 * - the cut just past what was applied (next + 1, next + 2 when the set
 *   starts at next + 1, none when it starts later or the record ending at
 *   next is unread), and the cut at the last record's end that comes first;
 * - a refused add cuts at the record's end (read again), or restarts when
 *   the set starts at that end; a nearly full set cuts past the record;
 * - a save waits while the chain ends past next + 1 and past init_lsn;
 * - a redo LSN: learnt ahead it becomes a target, cut at before the record
 *   that reaches it (a record ending exactly at it too); learnt where the
 *   follower stands it is cut at now with the record read again (not when a
 *   cut waits); learnt below the set's start it marks the summary that ends
 *   exactly there; a storm of them (within 200 ms and 1 MB) is let go, the
 *   bounds themselves are not;
 * - scenarios of the TAP tests: a follower behind the WAL that learns two
 *   and then seventeen redo LSNs before it reaches them (t/036); a save's or
 *   a request's cut at next + 1, then a redo LSN at next learnt too late
 *   (t/038, t/032: the summary ending at next is marked, one starts there).
 */
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "ptrack/summary_cuts.h"
#include "ptrack/summary_file.h"

using namespace ptrack;

namespace {

constexpr uint32_t R = kSummaryEndsAtRedo;

FollowerPosition at(Lsn next, Lsn last_start = 0, bool record_end = true, bool unread = false)
{
    return FollowerPosition{next, record_end, unread, last_start, last_start != 0 ? next : 0};
}

std::vector<Lsn> targets_of(const RedoTargets& t)
{
    std::vector<Lsn> out;
    for (uint32_t i = 0; i < t.count(); ++i)
        out.push_back(t[i]);
    return out;
}

RedoTargets targets_from(const std::vector<Lsn>& lsns, Lsn set_start = 0)
{
    RedoTargets t{};
    for (Lsn l : lsns)
        t.add(l, set_start);
    return t;
}

/* Sixteen redo LSNs, 1000 apart from 1000: a full queue. */
std::vector<Lsn> every_thousand()
{
    std::vector<Lsn> lsns;
    for (Lsn i = 1; i <= kMaxRedoTargets; ++i)
        lsns.push_back(i * 1000);
    return lsns;
}

/* The rule of RedoTargets::add(), written the slow way: insert, then drop the cheapest but the newest. */
void model_add(std::vector<Lsn>& t, Lsn redo, Lsn set_start)
{
    if (std::find(t.begin(), t.end(), redo) != t.end())
        return;
    t.insert(std::upper_bound(t.begin(), t.end(), redo), redo);
    if (t.size() <= kMaxRedoTargets)
        return;
    size_t drop = 0;
    Lsn best = UINT64_MAX;
    for (size_t i = 0; i + 1 < t.size(); ++i) {
        const Lsn span = t[i + 1] - (i == 0 ? set_start : t[i - 1]);
        if (span < best) {
            best = span;
            drop = i;
        }
    }
    t.erase(t.begin() + static_cast<std::ptrdiff_t>(drop));
}

void model_drop_through(std::vector<Lsn>& t, Lsn lsn)
{
    t.erase(t.begin(), std::upper_bound(t.begin(), t.end(), lsn));
}

}  // namespace

// ---- the redo targets ----------------------------------------------------------

TEST(RedoTargets, ZeroInitialisedIsEmpty)
{
    RedoTargets t{};
    EXPECT_EQ(t.count(), 0u);
    t.drop_through(UINT64_MAX);
    EXPECT_EQ(t.count(), 0u);
}

TEST(RedoTargets, KeptInOrderAndOnce)
{
    RedoTargets t = targets_from({300, 100, 200, 200, 100, 400});
    EXPECT_EQ(targets_of(t), (std::vector<Lsn>{100, 200, 300, 400}));
    t.clear();
    EXPECT_EQ(t.count(), 0u);
}

TEST(RedoTargets, DropThroughIncludesAnEqualLsn)
{
    RedoTargets t = targets_from({100, 200, 300});
    t.drop_through(99);
    EXPECT_EQ(targets_of(t), (std::vector<Lsn>{100, 200, 300}));
    t.drop_through(200);
    EXPECT_EQ(targets_of(t), (std::vector<Lsn>{300}));
    t.drop_through(250);
    EXPECT_EQ(targets_of(t), (std::vector<Lsn>{300}));
    t.drop_through(300);
    EXPECT_EQ(t.count(), 0u);
}

TEST(RedoTargets, FullDropsTheTargetWhoseLossJoinsTheLeastWal)
{
    /* 16 targets 1000 apart from set_start 0, but 7000 and 7100 close together. */
    std::vector<Lsn> lsns;
    for (Lsn i = 1; i <= 16; ++i)
        lsns.push_back(i == 8 ? 7100 : i * 1000);
    RedoTargets t = targets_from(lsns);
    ASSERT_EQ(t.count(), kMaxRedoTargets);
    /* A 17th, newest: dropping 7000 joins [6000, 7100), the smallest span. */
    t.add(17000, 0);
    EXPECT_EQ(t.count(), kMaxRedoTargets);
    std::vector<Lsn> want = lsns;
    want.erase(std::find(want.begin(), want.end(), 7000));
    want.push_back(17000);
    EXPECT_EQ(targets_of(t), want);
}

TEST(RedoTargets, FullNeverDropsTheNewest)
{
    /* The newest would join the least WAL (it is 1 byte after the one before), yet it stays. */
    const std::vector<Lsn> lsns = every_thousand();
    RedoTargets t = targets_from(lsns);
    t.add(16001, 0);
    const std::vector<Lsn> got = targets_of(t);
    EXPECT_EQ(got.back(), 16001u);
    EXPECT_EQ(std::count(got.begin(), got.end(), 16000u), 0) << "the one before the newest goes instead";
}

TEST(RedoTargets, FullMayDropTheOneAdded)
{
    /* A redo LSN older than the newest, in the middle of a tight pair: it goes itself. */
    const std::vector<Lsn> lsns = every_thousand();
    RedoTargets t = targets_from(lsns);
    t.add(4999, 0);
    EXPECT_EQ(targets_of(t), lsns);
}

TEST(RedoTargets, FullCountsTheFirstSpanFromTheSetStart)
{
    /* Targets 1000 apart from 1000, the set starting at 990: the first target joins only 1010. */
    const std::vector<Lsn> lsns = every_thousand();
    RedoTargets t = targets_from(lsns, 990);
    t.add(17000, 990);
    std::vector<Lsn> want(lsns.begin() + 1, lsns.end());
    want.push_back(17000);
    EXPECT_EQ(targets_of(t), want);
}

TEST(RedoTargets, MatchesTheModelOverLongRuns)
{
    /* Many rounds that fill the queue past 16 and empty it again (as a follower behind the WAL does). */
    std::mt19937_64 rng(29);
    RedoTargets t{};
    std::vector<Lsn> model;
    Lsn set_start = 0;
    Lsn frontier = 0;
    for (int step = 0; step < 200000; ++step) {
        const uint64_t r = rng() % 100;
        if (r < 70) {
            /* Mostly ahead of the others, sometimes among them, sometimes a repeat. */
            if (r >= 50 && frontier == set_start)
                continue;
            const Lsn redo = r < 50 ? (frontier += 1 + rng() % 5000) : set_start + 1 + rng() % (frontier - set_start);
            t.add(redo, set_start);
            model_add(model, redo, set_start);
        } else if (r < 95) {
            const Lsn through = set_start + rng() % (frontier - set_start + 1);
            t.drop_through(through);
            model_drop_through(model, through);
        } else {
            set_start = std::max(set_start, model.empty() ? frontier : model.front());
            t.drop_through(set_start);
            model_drop_through(model, set_start);
        }
        ASSERT_EQ(targets_of(t), model) << "step " << step;
        ASSERT_LE(t.count(), kMaxRedoTargets);
    }
}

// ---- cut points ----------------------------------------------------------------

TEST(CutPoint, PastTheLastRecord)
{
    EXPECT_EQ(cut_point_now(at(1000), 500), 1001u);
    EXPECT_EQ(cut_point_now(at(1000), 1000), 1001u) << "the set starts at next: next + 1";
    EXPECT_EQ(cut_point_now(at(1000), 1001), 1002u) << "the set starts at next + 1: next + 2";
    EXPECT_EQ(cut_point_now(at(1000), 1002), 0u) << "the set starts later: nothing to vouch for";
    EXPECT_EQ(cut_point_now(at(1000, 0, true, true), 500), 0u) << "the record ending at next is unread";
}

TEST(CutPoint, SplitAtTheLastRecordEnd)
{
    EXPECT_TRUE(splits_at_last_record_end(at(1000, 900), 500));
    EXPECT_FALSE(splits_at_last_record_end(at(1000, 900), 1000)) << "a summary starts at next already";
    EXPECT_FALSE(splits_at_last_record_end(at(1000, 900), 1001));
    EXPECT_FALSE(splits_at_last_record_end(at(1000, 0), 500)) << "the last record is not known";
    EXPECT_FALSE(splits_at_last_record_end(at(1000, 900, false), 500)) << "next is no record's end";
    EXPECT_FALSE(splits_at_last_record_end(at(1000, 900, true, true), 500)) << "the record at next is unread";
    FollowerPosition moved = at(1000, 900);
    moved.last_end = 996;
    EXPECT_FALSE(splits_at_last_record_end(moved, 500)) << "the last record does not end at next";
}

TEST(CutPoint, WhichCutsEndAtTheLastRecordFirst)
{
    EXPECT_TRUE(cut_at_last_record_end_first(SummaryCut{1001, false, 0}, 1000));
    EXPECT_FALSE(cut_at_last_record_end_first(SummaryCut{1000, true, 0}, 1000)) << "it is that cut";
    EXPECT_FALSE(cut_at_last_record_end_first(SummaryCut{1001, true, 0}, 1000));
    EXPECT_FALSE(cut_at_last_record_end_first(SummaryCut{1001, false, R}, 1000)) << "a redo target's cut";
    EXPECT_FALSE(cut_at_last_record_end_first(SummaryCut{1002, false, 0}, 1000));
}

TEST(CutPoint, AfterARecord)
{
    bool restart = true;
    SummaryCut c = cut_after_record(false, false, 1000, 500, &restart);
    EXPECT_EQ(c.at, 0u);
    EXPECT_FALSE(restart);
    c = cut_after_record(false, true, 1000, 500, &restart);
    EXPECT_EQ(c.at, 1001u);
    EXPECT_FALSE(c.readd);
    EXPECT_EQ(c.flags, 0u);
    c = cut_after_record(true, true, 1000, 500, &restart);
    EXPECT_EQ(c.at, 1000u) << "a refusal wins over a nearly full set";
    EXPECT_TRUE(c.readd);
    EXPECT_FALSE(restart);
    c = cut_after_record(true, false, 1000, 1000, &restart);
    EXPECT_EQ(c.at, 0u) << "the set starts at the record's end: no summary can hold it";
    EXPECT_TRUE(restart);
    c = cut_after_record(true, false, 1000, 999, &restart);
    EXPECT_EQ(c.at, 1000u);
    EXPECT_FALSE(restart);
}

// ---- saves ---------------------------------------------------------------------

TEST(SaveCut, WaitsWhileTheChainEndsAhead)
{
    EXPECT_EQ(save_cut(500, 1000, 100), SaveCut::kCut);
    EXPECT_EQ(save_cut(1000, 1000, 100), SaveCut::kCut) << "the set starts at next: cut at next + 1";
    EXPECT_EQ(save_cut(1001, 1000, 100), SaveCut::kNone) << "the chain ends at next + 1 already";
    EXPECT_EQ(save_cut(1002, 1000, 100), SaveCut::kDeferred) << "a cut at a redo target ahead";
    EXPECT_EQ(save_cut(5000, 1000, 5000), SaveCut::kNone) << "a fresh set at init_lsn, not reached yet";
    EXPECT_EQ(save_cut(5000, 1000, 4999), SaveCut::kDeferred);
}

// ---- redo LSNs -----------------------------------------------------------------

TEST(NoteRedo, NothingForZeroOrTheSameAgain)
{
    RedoWatch w{};
    EXPECT_FALSE(note_redo(w, 0, at(1000, 900), 500, false, 1));
    EXPECT_EQ(w.seen, 0u);
    EXPECT_FALSE(note_redo(w, 2000, at(1000, 900), 500, false, 1));
    EXPECT_EQ(w.seen, 2000u);
    const int64_t noted = w.noted_at;
    EXPECT_FALSE(note_redo(w, 2000, at(1000, 900), 500, false, 10'000'000));
    EXPECT_EQ(w.noted_at, noted);
    EXPECT_EQ(w.targets.count(), 1u);
}

TEST(NoteRedo, AheadBecomesATargetCutBeforeTheRecordReachingIt)
{
    RedoWatch w{};
    EXPECT_FALSE(note_redo(w, 2000, at(1000, 900), 500, false, 1));
    EXPECT_EQ(targets_of(w.targets), (std::vector<Lsn>{2000}));
    EXPECT_EQ(cut_before_record(w.targets, 1500, 1000, 500), 0u) << "a record ending before it is applied";
    EXPECT_EQ(w.targets.count(), 1u);
    EXPECT_EQ(cut_before_record(w.targets, 2000, 1500, 500), 2000u) << "the record ending exactly at it too";
    EXPECT_EQ(w.targets.count(), 0u);
}

TEST(NoteRedo, WhereTheFollowerStandsIsCutNow)
{
    RedoWatch w{};
    EXPECT_TRUE(note_redo(w, 1000, at(1000, 900), 500, false, 1));
    EXPECT_EQ(w.targets.count(), 0u);
    RedoWatch waiting{};
    EXPECT_FALSE(note_redo(waiting, 1000, at(1000, 900), 500, true, 1)) << "a cut waits already";
    EXPECT_EQ(waiting.seen, 1000u);
    RedoWatch unknown{};
    EXPECT_FALSE(note_redo(unknown, 1000, at(1000, 0), 500, false, 1)) << "the last record is not known";
    RedoWatch inside{};
    EXPECT_FALSE(note_redo(inside, 1000, at(1000, 900, false), 500, false, 1)) << "next is no record's end";
}

TEST(NoteRedo, BehindTheFollowerIsLate)
{
    RedoWatch w{};
    EXPECT_FALSE(note_redo(w, 800, at(1000, 900), 500, false, 1));
    EXPECT_EQ(w.targets.count(), 0u);
    EXPECT_EQ(w.mark_end, 0u);
}

TEST(NoteRedo, AtOrBelowTheSetStartMarksOnlyASummaryEndingThere)
{
    RedoWatch w{};
    w.plain_start = 400;
    w.plain_end = 1000;
    EXPECT_FALSE(note_redo(w, 900, at(1000, 900), 1001, false, 1));
    EXPECT_EQ(w.mark_end, 0u) << "no summary ends at 900";
    EXPECT_FALSE(note_redo(w, 1000, at(1000, 900), 1001, false, 1));
    EXPECT_EQ(w.mark_start, 400u);
    EXPECT_EQ(w.mark_end, 1000u);
    EXPECT_EQ(w.seen, 0u) << "nothing else changes";
    EXPECT_EQ(w.noted_at, 0);
    RedoWatch equal{};
    equal.plain_start = 400;
    equal.plain_end = 1000;
    EXPECT_FALSE(note_redo(equal, 1000, at(1000, 900), 1000, false, 1)) << "the set starts exactly at it";
    EXPECT_EQ(equal.mark_end, 1000u);
}

TEST(NoteRedo, AlreadyATarget)
{
    RedoWatch w{};
    EXPECT_FALSE(note_redo(w, 2000, at(1000, 900), 500, false, 1));
    EXPECT_FALSE(note_redo(w, 9000, at(1000, 900), 500, false, 10'000'000));
    const int64_t noted = w.noted_at;
    /* GetRedoRecPtr() told 2000 before; its CHECKPOINT_REDO record tells it again after 9000. */
    EXPECT_FALSE(note_redo(w, 2000, at(1000, 900), 500, false, 20'000'000));
    EXPECT_EQ(w.noted_at, noted);
    EXPECT_EQ(targets_of(w.targets), (std::vector<Lsn>{2000, 9000}));
}

TEST(NoteRedo, AStormIsThinnedButNotItsBounds)
{
    const int64_t t0 = 1'000'000'000;
    RedoWatch w{};
    EXPECT_FALSE(note_redo(w, 10'000, at(1000, 900), 500, false, t0));
    /* Within 200 ms and less than 1 MB after the summary it would end begins: let go. */
    EXPECT_FALSE(note_redo(w, 20'000, at(1000, 900), 500, false, t0 + kMinRedoCutMicros - 1));
    EXPECT_EQ(targets_of(w.targets), (std::vector<Lsn>{10'000}));
    EXPECT_EQ(w.seen, 20'000u);
    EXPECT_EQ(w.noted_at, t0) << "a redo LSN let go does not restart the clock";
    /* Exactly 200 ms later: taken. */
    EXPECT_FALSE(note_redo(w, 30'000, at(1000, 900), 500, false, t0 + kMinRedoCutMicros));
    EXPECT_EQ(targets_of(w.targets), (std::vector<Lsn>{10'000, 30'000}));
    /* At once, but exactly 1 MB after the newest target before it: taken. */
    EXPECT_FALSE(note_redo(w, 30'000 + kMaxRedoLetGoWal, at(1000, 900), 500, false, t0 + kMinRedoCutMicros));
    EXPECT_EQ(w.targets.count(), 3u);
    /* At once, 1 MB - 1 after it: let go. */
    EXPECT_FALSE(note_redo(w, 30'000 + 2 * kMaxRedoLetGoWal - 1, at(1000, 900), 500, false, t0 + kMinRedoCutMicros));
    EXPECT_EQ(w.targets.count(), 3u);
}

TEST(NoteRedo, AStormCountsFromTheSetStartWithoutTargets)
{
    const int64_t t0 = 1'000'000'000;
    RedoWatch w{};
    w.noted_at = t0;
    EXPECT_FALSE(note_redo(w, 500 + kMaxRedoLetGoWal - 1, at(1000, 900), 500, false, t0 + 1));
    EXPECT_EQ(w.targets.count(), 0u) << "let go: less than 1 MB since the set's start";
    EXPECT_FALSE(note_redo(w, 500 + kMaxRedoLetGoWal, at(1000, 900), 500, false, t0 + 1));
    EXPECT_EQ(w.targets.count(), 1u);
}

// ---- cut before a record ---------------------------------------------------------

TEST(CutBeforeRecord, PassedTargetsAreForgotten)
{
    RedoTargets t = targets_from({1000, 2000, 3000, 9000});
    /* The follower stands at 2000 (passed 1000, at 2000), the set starts at 500: 3000 is next. */
    EXPECT_EQ(cut_before_record(t, 5000, 2000, 500), 3000u);
    EXPECT_EQ(targets_of(t), (std::vector<Lsn>{9000}));
    RedoTargets started = targets_from({1000, 2000});
    EXPECT_EQ(cut_before_record(started, 5000, 900, 2000), 0u) << "the set starts at or after both";
    EXPECT_EQ(started.count(), 0u);
    RedoTargets none{};
    EXPECT_EQ(cut_before_record(none, 5000, 900, 500), 0u);
}

// ---- the summary a late redo LSN marks ---------------------------------------------

TEST(SummaryWritten, RemembersOnlyARecordEndWithoutTheFlag)
{
    RedoWatch w{};
    summary_written(w, 100, SummaryCut{1000, false, 0});
    EXPECT_EQ(w.plain_end, 0u) << "a cut past the last record";
    summary_written(w, 100, SummaryCut{1000, true, R});
    EXPECT_EQ(w.plain_end, 0u) << "already ends at a redo LSN";
    summary_written(w, 100, SummaryCut{1000, true, 0});
    EXPECT_EQ(w.plain_start, 100u);
    EXPECT_EQ(w.plain_end, 1000u);
    summary_written(w, 1000, SummaryCut{1001, false, 0});
    EXPECT_EQ(w.plain_end, 1000u) << "kept across the cut at next + 1 after it";
}

// ---- scenarios ---------------------------------------------------------------------

namespace {

/*
 * The follower's use of the decisions, reduced to LSNs: records applied one
 * after the other, cuts written at once (each appends a summary), redo LSNs
 * learnt at a time.  As follower_read.cpp, follower_cuts.cpp and
 * follower_summaries.cpp call them.
 */
struct Model {
    Lsn next = 0;
    Lsn last_start = 0;
    Lsn set_start = 0;
    SummaryCut cut{0, false, 0};
    RedoWatch watch{};
    struct Summary {
        Lsn start, end;
        uint32_t flags;
    };
    std::vector<Summary> written;
    std::vector<Lsn> marked;

    FollowerPosition pos() const { return FollowerPosition{next, true, false, last_start, last_start ? next : 0}; }

    void write(const SummaryCut& c)
    {
        if (c.at <= set_start)
            return;
        if (cut_at_last_record_end_first(c, next) && splits_at_last_record_end(pos(), set_start))
            write(SummaryCut{next, true, 0});
        written.push_back(Summary{set_start, c.at, c.flags});
        summary_written(watch, set_start, c);
        set_start = c.at;
    }
    void flush_cut()
    {
        if (cut.at != 0)
            write(cut);
        cut = SummaryCut{0, false, 0};
    }
    /* A record [start, end): a redo target reached first cuts before it. */
    void apply(Lsn start, Lsn end)
    {
        if (const Lsn target = cut_before_record(watch.targets, end, next, set_start))
            write(SummaryCut{target, false, R});
        next = end;
        last_start = start;
    }
    void learn(Lsn redo, int64_t now)
    {
        if (note_redo(watch, redo, pos(), set_start, cut.at != 0, now))
            cut = SummaryCut{redo, true, R};
        flush_cut();
        if (watch.mark_end != 0) {
            marked.push_back(watch.mark_end);
            watch.mark_start = watch.mark_end = 0;
        }
    }
    void save_or_request() { write(SummaryCut{cut_point_now(pos(), set_start), false, 0}); }

    bool ends_at(Lsn lsn, uint32_t flags) const
    {
        for (const Summary& s : written)
            if (s.end == lsn && s.flags == flags)
                return true;
        return false;
    }
    bool starts_at(Lsn lsn) const
    {
        for (const Summary& s : written)
            if (s.start == lsn)
                return true;
        return set_start == lsn;
    }
};

}  // namespace

TEST(Scenario, BehindTheWalTwoRedoLsnsLearntBeforeTheFirstIsReached)
{
    /* t/036: GetRedoRecPtr() tells R1, then R2, while the follower is still before R1. */
    Model m;
    m.set_start = 100;
    m.apply(100, 200);
    const Lsn r1 = 5'000'000, r2 = 9'000'000;
    m.learn(r1, 1'000'000);
    m.apply(200, 300);
    m.learn(r2, 10'000'000);
    for (Lsn s = 300; s < 12'000'000; s += 4000)
        m.apply(s, s + 4000);
    EXPECT_TRUE(m.ends_at(r1, R));
    EXPECT_TRUE(m.ends_at(r2, R));
    EXPECT_TRUE(m.starts_at(r1));
    EXPECT_TRUE(m.starts_at(r2));
}

TEST(Scenario, BehindTheWalSeventeenRedoLsns)
{
    /* Sixteen are kept; the one lost joins the two shortest summaries around it, the newest is cut at. */
    Model m;
    m.set_start = 100;
    m.apply(100, 200);
    std::vector<Lsn> redo;
    for (Lsn i = 1; i <= 17; ++i)
        redo.push_back(i * 3'000'000 + (i == 9 ? 2'900'000 : 0)); /* the 9th just before the 10th */
    int64_t now = 1'000'000;
    for (Lsn r : redo)
        m.learn(r, now += 1'000'000);
    EXPECT_EQ(m.watch.targets.count(), kMaxRedoTargets);
    for (Lsn s = 200; s < 60'000'000; s += 8000)
        m.apply(s, s + 8000);
    size_t cut = 0;
    for (Lsn r : redo)
        cut += m.ends_at(r, R) ? 1 : 0;
    EXPECT_EQ(cut, 16u);
    EXPECT_TRUE(m.ends_at(redo[8], R));
    EXPECT_FALSE(m.ends_at(redo[9], R)) << "the 10th, just after the 9th: its loss joins the least WAL";
    EXPECT_TRUE(m.ends_at(redo.back(), R));
}

TEST(Scenario, ACutPastTheLastRecordThenARedoLsnThere)
{
    /* t/038: a request's (or a save's) cut at C + 1, then a checkpoint whose redo LSN is C. */
    Model m;
    m.set_start = 100;
    m.apply(100, 500);
    m.apply(500, 1000); /* C = 1000 */
    m.save_or_request();
    ASSERT_EQ(m.written.size(), 2u);
    EXPECT_EQ(m.written[0].start, 100u);
    EXPECT_EQ(m.written[0].end, 1000u) << "a summary ends at C first";
    EXPECT_EQ(m.written[1].start, 1000u);
    EXPECT_EQ(m.written[1].end, 1001u) << "then the one-byte summary [C, C + 1)";
    EXPECT_EQ(m.set_start, 1001u);
    m.learn(1000, 1'000'000);
    EXPECT_EQ(m.marked, (std::vector<Lsn>{1000})) << "the summary ending at C is marked as ending at a redo LSN";
    EXPECT_TRUE(m.starts_at(1000));
}

TEST(Scenario, ARedoLsnWhereTheFollowerStands)
{
    /* The CHECKPOINT_REDO record starts at next: cut at next now, the record ending there read again. */
    Model m;
    m.set_start = 100;
    m.apply(100, 1000);
    m.learn(1000, 1'000'000);
    ASSERT_EQ(m.written.size(), 1u);
    EXPECT_EQ(m.written[0].end, 1000u);
    EXPECT_EQ(m.written[0].flags, R);
    EXPECT_EQ(m.watch.plain_end, 0u) << "flagged already: nothing to mark later";
    /* A save right after: the set starts at next, so the cut is at next + 1 and nothing splits. */
    m.save_or_request();
    ASSERT_EQ(m.written.size(), 2u);
    EXPECT_EQ(m.written[1].start, 1000u);
    EXPECT_EQ(m.written[1].end, 1001u);
}

TEST(Scenario, TwoRequestsInARowWithoutWal)
{
    /* t/032: every call cuts; a second one with no WAL in between ends past the first. */
    Model m;
    m.set_start = 100;
    m.apply(100, 1000);
    m.save_or_request();
    EXPECT_EQ(m.set_start, 1001u);
    m.save_or_request();
    EXPECT_EQ(m.set_start, 1002u) << "next + 2: the set started at next + 1";
    m.save_or_request();
    EXPECT_EQ(m.set_start, 1002u) << "nothing it would vouch for: no cut";
}
