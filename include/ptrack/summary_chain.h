/*
 * ptrack/summary_chain.h -- which listed summary files (ptrack/summary_file.h)
 * form the chain the WAL follower wrote, so that a file that is not part of
 * it (a stray file with a summary-like name, a damaged one, a leftover of an
 * interrupted combining) can neither block an answer the chain can give nor
 * be taken into one.  Used by the answers (the backends, before reading the
 * files) and by retention (the follower, before removing or combining).
 *
 * The rule.  The files are edges between LSNs, [start, end).  The chain
 * ends at `live` (summarized_lsn: the newest summary's end), and a file
 * ending at or after it is where the chain may end.  A usable file (its
 * header valid and repeating its name's range: the caller decides) reaches
 * live if it ends there or a usable file reaching live starts where it ends.
 * The chain starts at the oldest start of the files that reach live; a file
 * is *on the chain* when it reaches live and it starts at the chain's start
 * or where a file on the chain ends: so every path of files on the chain
 * goes from the chain's start to live without a hole or an overlap.  A
 * combined file and the files it replaced are both on the chain (two paths);
 * a file whose start no path reaches (its range starts inside another file)
 * is not, whatever it holds.
 *
 * Every other file gets a role (ChainRole): before the chain (it ends at or
 * before the chain's start: what lies before a hole, or a damaged file the
 * chain stops at), inside a file on the chain (replaced by a combining that
 * has not removed it yet), after live (written after the cut the caller
 * knows of), or off the chain: a file whose range overlaps the chain's
 * without fitting it.  Only the last kind is a stray: the answers name it in
 * a WARNING and ignore it, retention removes it.
 *
 * The cover of a start LSN L (chain_cover()): files on the chain only, the
 * first one the latest that starts at or before L, then at each boundary the
 * longest file that starts there.  None is needed when L >= live; none is
 * found when L is before the chain's start (the caller says why: a hole, a
 * damaged file, or L older than every file kept).
 *
 * Nothing here allocates or throws; the caller gives the buffers.  The
 * listing must be sorted by start, then by end descending (a file holding
 * another's range first), as both callers list it.
 *
 * INTERFACE: ChainLink, ChainRole, SummaryChain, find_chain(), chain_cover().
 */
#ifndef PTRACK_SUMMARY_CHAIN_H
#define PTRACK_SUMMARY_CHAIN_H

#include "ptrack/engine_guard.h"

#include <cstddef>
#include <cstdint>

#include "ptrack/relfork.h"

namespace ptrack {

/* One listed file: its range (from its name) and whether its header can be trusted to hold that range. */
struct ChainLink {
    Lsn start;
    Lsn end;
    bool usable;
};

enum class ChainRole : uint8_t {
    kOnChain, /* on a path from the chain's start to live */
    kBefore,  /* not on it, ends at or before the chain's start */
    kInside,  /* not on it, inside the range of a file that is */
    kAfter,   /* starts at or after live */
    kOffChain /* overlaps the chain's range without fitting it: a stray */
};

struct SummaryChain {
    Lsn start;         /* the chain's start; live when no file reaches live */
    size_t on_chain;   /* files on it */
    size_t off_chain;  /* strays (ChainRole::kOffChain) */
};

/*
 * The chain of `files` (`count`, sorted as the header comment says) that
 * ends at `live`; roles[i] says what files[i] is.  `scratch`: room for
 * `count` indexes and `count` flags.
 */
SummaryChain find_chain(const ChainLink* files, size_t count, Lsn live, size_t* scratch_indexes,
                        uint8_t* scratch_flags, ChainRole* roles) noexcept;

/*
 * The files that answer `since` (header comment): their indexes in order in
 * out[0, *out_count) (room for `count`).  True with *out_count = 0 when
 * since >= live; false when since lies before the chain's start.
 */
bool chain_cover(const ChainLink* files, size_t count, const ChainRole* roles, Lsn live, Lsn since, size_t* out,
                 size_t* out_count) noexcept;

}  // namespace ptrack

#endif
