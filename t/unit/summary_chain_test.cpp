/*
 * t/unit/summary_chain_test.cpp -- proves which listed summaries form the
 * follower's chain and what answers a start LSN (ptrack/summary_chain.h):
 *
 * - a plain chain: every file on it, the cover of each L from the file
 *   holding it to live, none for L >= live;
 * - a stray whose range straddles two files of the chain (the tester's
 *   junk file), usable or not, ending inside the chain or at live: off the
 *   chain, never in a cover, and every L the chain holds is still covered;
 * - a usable file starting before the chain and ending at live: it is the
 *   chain (it may be a combined file) until the caller finds it damaged;
 *   then the files it seemed to replace answer again;
 * - a combined file and the files it replaced: both on the chain, the
 *   latest start holding L chosen (fewer blocks), the longest file next;
 * - a hole and a damaged file: the chain starts after them, the files
 *   before are "before", L before the chain has no cover;
 * - files past live are "after", a file straddling live ends the chain;
 * - random listings (chains, combined files, strays, damage): every cover
 *   is a path of usable files from a start <= L to live without a hole,
 *   and a stray is never in one unless it starts the chain.
 */
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "ptrack/summary_chain.h"

using namespace ptrack;

namespace {

ChainLink f(Lsn start, Lsn end, bool usable = true)
{
    return ChainLink{start, end, usable};
}

struct Chain {
    std::vector<ChainLink> files;
    std::vector<ChainRole> roles;
    SummaryChain chain;
    Lsn live;

    Chain(std::vector<ChainLink> listing, Lsn live_lsn) : files(std::move(listing)), live(live_lsn)
    {
        std::sort(files.begin(), files.end(), [](const ChainLink& a, const ChainLink& b) {
            return a.start != b.start ? a.start < b.start : a.end > b.end;
        });
        std::vector<size_t> indexes(files.size());
        std::vector<uint8_t> flags(files.size());
        roles.resize(files.size());
        chain = find_chain(files.data(), files.size(), live, indexes.data(), flags.data(), roles.data());
    }

    ChainRole role(Lsn start, Lsn end) const
    {
        for (size_t i = 0; i < files.size(); ++i)
            if (files[i].start == start && files[i].end == end)
                return roles[i];
        ADD_FAILURE() << "no file " << start << "-" << end;
        return ChainRole::kAfter;
    }

    /* The cover of `since` as "start-end start-end ...", or "none". */
    std::string cover(Lsn since) const
    {
        std::vector<size_t> out(files.size() + 1);
        size_t n = 0;
        if (!chain_cover(files.data(), files.size(), roles.data(), live, since, out.data(), &n))
            return "none";
        std::string s;
        for (size_t i = 0; i < n; ++i)
            s += (i ? " " : "") + std::to_string(files[out[i]].start) + "-" + std::to_string(files[out[i]].end);
        return s;
    }
};

}  // namespace

TEST(SummaryChain, APlainChain)
{
    const Chain c({f(100, 200), f(200, 300), f(300, 400)}, 400);
    EXPECT_EQ(c.chain.start, 100u);
    EXPECT_EQ(c.chain.on_chain, 3u);
    EXPECT_EQ(c.chain.off_chain, 0u);
    EXPECT_EQ(c.cover(100), "100-200 200-300 300-400");
    EXPECT_EQ(c.cover(250), "200-300 300-400");
    EXPECT_EQ(c.cover(399), "300-400");
    EXPECT_EQ(c.cover(400), "") << "L at live: nothing needed";
    EXPECT_EQ(c.cover(99), "none");

    const Chain empty({}, 400);
    EXPECT_EQ(empty.chain.start, 400u);
    EXPECT_EQ(empty.cover(400), "");
    EXPECT_EQ(empty.cover(300), "none");
}

TEST(SummaryChain, AStrayStraddlingTwoFilesIsIgnored)
{
    for (bool usable : {false, true}) {
        const Chain c({f(100, 200), f(150, 250, usable), f(200, 300), f(300, 400)}, 400);
        EXPECT_EQ(c.chain.start, 100u);
        EXPECT_EQ(c.role(150, 250), ChainRole::kOffChain) << "usable " << usable;
        EXPECT_EQ(c.chain.off_chain, 1u);
        EXPECT_EQ(c.cover(120), "100-200 200-300 300-400");
        EXPECT_EQ(c.cover(160), "100-200 200-300 300-400");
        EXPECT_EQ(c.cover(220), "200-300 300-400");
    }
    /* Ending at live, or past it: it reaches live but starts inside a file: off the chain all the same. */
    for (Lsn end : {Lsn{400}, Lsn{450}}) {
        const Chain c({f(100, 200), f(150, end), f(200, 300), f(300, 400)}, 400);
        EXPECT_EQ(c.role(150, end), ChainRole::kOffChain) << "end " << end;
        EXPECT_EQ(c.cover(160), "100-200 200-300 300-400");
    }
    /* Starting at a boundary, ending inside a file: no path to live through it. */
    const Chain d({f(100, 200), f(200, 250), f(200, 300), f(300, 400)}, 400);
    EXPECT_EQ(d.role(200, 250), ChainRole::kInside);
    EXPECT_EQ(d.cover(210), "200-300 300-400");
    const Chain e({f(100, 200), f(200, 350), f(200, 300), f(300, 400)}, 400);
    EXPECT_EQ(e.role(200, 350), ChainRole::kOffChain);
    EXPECT_EQ(e.cover(210), "200-300 300-400");
}

TEST(SummaryChain, AUsableFileBeforeTheChainIsTheChainUntilFoundDamaged)
{
    Chain c({f(50, 400), f(100, 200), f(200, 300), f(300, 400)}, 400);
    EXPECT_EQ(c.chain.start, 50u);
    EXPECT_EQ(c.role(100, 200), ChainRole::kInside);
    EXPECT_EQ(c.role(200, 300), ChainRole::kInside);
    EXPECT_EQ(c.role(300, 400), ChainRole::kInside);
    EXPECT_EQ(c.cover(120), "50-400");
    /* The caller read it and found it damaged: the files it seemed to replace answer. */
    std::vector<ChainLink> listing = c.files;
    listing[0].usable = false;
    const Chain d(listing, 400);
    EXPECT_EQ(d.chain.start, 100u);
    EXPECT_EQ(d.role(50, 400), ChainRole::kOffChain);
    EXPECT_EQ(d.cover(120), "100-200 200-300 300-400");
}

TEST(SummaryChain, ACombinedFileAndTheFilesItReplaced)
{
    const Chain c({f(100, 300), f(100, 200), f(200, 300), f(300, 400)}, 400);
    EXPECT_EQ(c.chain.on_chain, 4u);
    EXPECT_EQ(c.chain.off_chain, 0u);
    EXPECT_EQ(c.cover(150), "100-300 300-400") << "equal starts: the longest";
    EXPECT_EQ(c.cover(200), "200-300 300-400") << "the latest start holding L: fewer blocks";
    /* Some inputs already removed: what is left is inside the combined file. */
    const Chain d({f(100, 300), f(200, 300), f(300, 400)}, 400);
    EXPECT_EQ(d.role(200, 300), ChainRole::kInside);
    EXPECT_EQ(d.cover(250), "100-300 300-400");
}

TEST(SummaryChain, AHoleOrADamagedFileStartsTheChainAfterIt)
{
    const Chain hole({f(100, 200), f(300, 400)}, 400);
    EXPECT_EQ(hole.chain.start, 300u);
    EXPECT_EQ(hole.role(100, 200), ChainRole::kBefore);
    EXPECT_EQ(hole.cover(150), "none");
    EXPECT_EQ(hole.cover(300), "300-400");
    const Chain damaged({f(100, 200), f(200, 300, false), f(300, 400)}, 400);
    EXPECT_EQ(damaged.chain.start, 300u);
    EXPECT_EQ(damaged.role(200, 300), ChainRole::kBefore);
    EXPECT_EQ(damaged.cover(250), "none");
    EXPECT_EQ(damaged.cover(350), "300-400");
    const Chain last({f(100, 200), f(200, 300, false)}, 300);
    EXPECT_EQ(last.chain.start, 300u) << "nothing reaches live";
    EXPECT_EQ(last.cover(250), "none");
}

TEST(SummaryChain, FilesPastLive)
{
    const Chain c({f(100, 200), f(200, 300), f(300, 400)}, 300);
    EXPECT_EQ(c.role(300, 400), ChainRole::kAfter);
    EXPECT_EQ(c.cover(150), "100-200 200-300");
    const Chain d({f(100, 200), f(200, 400)}, 300);
    EXPECT_EQ(d.role(200, 400), ChainRole::kOnChain) << "a file straddling live ends the chain";
    EXPECT_EQ(d.cover(250), "200-400");
}

TEST(SummaryChain, RandomListingsCoverOnlyWithPathsOfUsableFiles)
{
    std::mt19937_64 rng(21);
    for (int round = 0; round < 3000; ++round) {
        /* A chain of boundaries, some combined files over it, some strays, some damage. */
        std::vector<Lsn> cuts;
        Lsn at = 100 + rng() % 50;
        const int n = 1 + static_cast<int>(rng() % 12);
        for (int i = 0; i <= n; ++i) {
            cuts.push_back(at);
            at += 1 + rng() % 40;
        }
        std::vector<ChainLink> listing;
        for (int i = 0; i < n; ++i)
            if (rng() % 8 != 0) /* a hole sometimes */
                listing.push_back(f(cuts[i], cuts[i + 1], rng() % 10 != 0));
        for (int k = static_cast<int>(rng() % 3); k > 0; --k) {
            const size_t a = rng() % cuts.size(), b = rng() % cuts.size();
            if (a < b)
                listing.push_back(f(cuts[a], cuts[b], rng() % 4 != 0)); /* a combined file */
        }
        std::vector<std::pair<Lsn, Lsn>> strays;
        for (int k = static_cast<int>(rng() % 3); k > 0; --k) {
            const Lsn s = cuts.front() + rng() % (cuts.back() - cuts.front() + 20);
            const Lsn e = s + 1 + rng() % 80;
            if (std::find(cuts.begin(), cuts.end(), s) != cuts.end())
                continue; /* starting at a boundary: a file like any other */
            listing.push_back(f(s, e, rng() % 2 != 0));
            strays.emplace_back(s, e);
        }
        const Lsn live = cuts.back();
        const Chain c(listing, live);
        for (Lsn since = cuts.front() - 5; since <= live + 2; ++since) {
            std::vector<size_t> out(c.files.size() + 1);
            size_t count = 0;
            if (!chain_cover(c.files.data(), c.files.size(), c.roles.data(), live, since, out.data(), &count)) {
                EXPECT_LT(since, c.chain.start);
                continue;
            }
            if (since >= live) {
                EXPECT_EQ(count, 0u);
                continue;
            }
            ASSERT_GT(count, 0u);
            EXPECT_LE(c.files[out[0]].start, since);
            for (size_t i = 0; i < count; ++i) {
                const ChainLink& x = c.files[out[i]];
                EXPECT_TRUE(x.usable);
                /* A usable stray starting before every file of the chain is the chain (until found damaged). */
                for (const auto& s : strays)
                    EXPECT_FALSE(x.start == s.first && x.end == s.second && s.first != c.chain.start)
                        << "a stray in a cover, L " << since;
                if (i + 1 < count)
                    EXPECT_EQ(x.end, c.files[out[i + 1]].start) << "a hole or an overlap, L " << since;
                else
                    EXPECT_GE(x.end, live);
            }
        }
        /* Every L the chain's own files cover is answered: from the chain's start on. */
        EXPECT_NE(c.cover(c.chain.start == live ? live : c.chain.start), "none");
    }
}
