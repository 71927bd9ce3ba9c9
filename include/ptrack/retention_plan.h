/*
 * ptrack/retention_plan.h -- which summary files (ptrack/summary_file.h) to
 * remove or combine next: the retention policy of wal capture as a pure
 * function of the listing, so that it is unit-tested and simulated over
 * days of checkpoints without a server (t/unit/retention_plan_test.cpp).
 * The server side (the WAL follower's retention pass) lists the files,
 * asks for the next step, does it (I/O, validation, summary_combine()),
 * updates its listing and asks again.
 *
 * The steps, in the order they are proposed (each only once the earlier
 * kinds have nothing left; docs/design.md section 4.9 says why):
 *
 *  kOverlap  files[container] holds the range of the `count` files after it
 *            (a crash between writing a combined file and removing its
 *            inputs).  A usable container must be on the chain
 *            (ptrack/summary_chain.h): a file that starts inside another
 *            one is no combined file, whatever it claims.  The caller
 *            validates the container: if good, it
 *            removes the files inside; if not, it marks the container not
 *            usable, and the step comes back as: remove the container if the
 *            files inside tile its range (`tiled`), else it is left (the
 *            answers refuse what it covers).
 *  kStray    files[first] is off the chain (ChainRole::kOffChain: its range
 *            overlaps the chain's without fitting it, e.g. a stray file with
 *            a summary-like name) and ends at or before combine_until (the
 *            follower's resume point, past which its restart removes files
 *            anyway).  The caller validates the files on the chain that
 *            overlap it, whole; if they are good it removes the stray, else
 *            it marks the damaged one not usable (the chain changes, ask
 *            again).  The answers already ignore it (and name it).
 *  kRemove   remove files[0, count), expired: modification time older than
 *            keep_seconds, oldest first, stopping at the first one kept;
 *            never the newest file, nor one ending at or after
 *            combine_until (the file ending at the resume point stays while
 *            no later save moves it: without it a restart finds no chain
 *            ending there and restarts tracking).  (Files before a hole in the chain stay
 *            until they expire: the answers already start after the hole,
 *            and name the missing file to a caller whose L lies before it.)
 *  kCombine  combine files[first, first + count) (2 <= count <=
 *            kRetentionMaxInputs, adjacent, usable, ending at or before
 *            combine_until) into one: first the
 *            runs whose inner boundaries are not redo LSNs (a closed run, or
 *            the newest run once it holds kRetentionMaxInputs files), then,
 *            while there are more than max_files, among the older files (all
 *            but the newest max_files / 2): with a keep time, a run written
 *            within one slice of keep_seconds / (max_files / 2) once the next
 *            file is of a later slice (each summary rewritten about once);
 *            else the adjacent pair with the smallest LSN span.
 *  kNone     nothing to do.
 *
 * Nothing here allocates or throws.
 *
 * The chain (which files the follower wrote, which are strays) is the
 * caller's to compute with find_chain() (ptrack/summary_chain.h), from the
 * same listing and summarized_lsn; plan_retention() takes its roles.
 *
 * INTERFACE: RetentionFile, RetentionPolicy, RetentionStep, RetentionAction,
 * plan_retention().
 */
#ifndef PTRACK_RETENTION_PLAN_H
#define PTRACK_RETENTION_PLAN_H

#include "ptrack/engine_guard.h"

#include <cstddef>
#include <cstdint>

#include "ptrack/relfork.h"
#include "ptrack/summary_chain.h"
#include "ptrack/summary_file.h"

namespace ptrack {

/* Inputs of one combining step at most (MergeCursor is O(inputs) a step). */
constexpr size_t kRetentionMaxInputs = 32;

/* One summary file, as listed: sorted by start LSN, then by end LSN descending (a container first). */
struct RetentionFile {
    Lsn start;
    Lsn end;
    uint32_t flags;  /* the header's (kSummaryEndsAtRedo) */
    bool usable;     /* header valid and matching the name, not known to be damaged */
    int64_t mtime;   /* seconds */
};

struct RetentionPolicy {
    int64_t now;          /* seconds, the clock of mtime */
    int64_t keep_seconds; /* 0: keep forever */
    size_t max_files;     /* >= 4 */
    /*
     * Only files ending at or before this LSN are combined, and only files
     * ending before it expire: where the follower resumes after a crash (its
     * last save's covered LSN + 1), which must stay a boundary (it drops the
     * files ending after it and needs the rest to end exactly there).  0: no
     * resume point; nothing is combined, expiry is unbounded.
     */
    Lsn combine_until;
};

enum class RetentionStep { kNone, kOverlap, kStray, kRemove, kCombine };

struct RetentionAction {
    RetentionStep step;
    size_t first;      /* kOverlap: container + 1; kStray: the stray; kRemove: 0; kCombine: the first input */
    size_t count;      /* files inside / 1 / removed / combined */
    size_t container;  /* kOverlap */
    bool tiled;        /* kOverlap: the files inside cover the container's range without a hole */
};

/*
 * The next step for `files` (`count` of them) under `policy`; roles[i] is
 * files[i]'s role in the chain (find_chain() over the same listing, usable
 * as in RetentionFile).
 */
RetentionAction plan_retention(const RetentionFile* files, size_t count, const ChainRole* roles,
                               const RetentionPolicy& policy) noexcept;

}  // namespace ptrack

#endif
