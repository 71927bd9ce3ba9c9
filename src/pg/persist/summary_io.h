/*
 * summary_io.h -- the summary files of wal capture on disk (docs/design.md
 * section 4.4): where they live, how the WAL follower writes them durably,
 * and how a backend lists, reads and validates them.  The format and its
 * checks are the engine's (ptrack/summary_file.h); the cover rule and the
 * answers are in ptrack/summary_answer.h and sql/.
 *
 * Where.  Under pg_wal (kSummaryDir), like PostgreSQL 17's own
 * pg_wal/summaries: pg_basebackup sends none of pg_wal's contents and
 * pg_probackup excludes pg_wal entirely, so a backup never carries them, and
 * a restored backup starts without any.  A data directory copied some other
 * way (a file-system snapshot) brings them along and they are as trustworthy
 * as after a crash: the follower reconciles them with its resume point when
 * it starts.
 *
 * Names.  "<start><end>.summary": the start LSN (inclusive) and the end LSN
 * (exclusive) of the summary, each as 16 upper-case hex digits, so that the
 * names sort by start LSN and a listing needs no read.  A file being
 * written is "<name>.tmp" until it is fsynced and renamed (durable_rename()),
 * then the directory is fsynced: after a crash a summary either exists whole
 * or not at all (a .tmp left behind is removed when the follower starts).
 * A name is only a claim: readers validate the whole file
 * (summary_open()), whose header repeats the range.
 *
 * Who.  Only the WAL follower writes, renames and removes summaries.
 * Backends list and read them without a lock; a file that vanishes between
 * the listing and the read (the follower replaced it) makes the reader list
 * again, never answer short.
 *
 * INTERFACE: kSummaryDir, SummaryFileRef, summary_file_name(), summary_list()
 * (naming and listing); summary_write_durably(), summary_dir_problem(),
 * summary_remove_all(), summary_keep_chain_to() (the follower's side,
 * summary_write.cpp); SummaryReadResult, summary_read(),
 * summary_header_problem() (a backend's side and retention's,
 * summary_read.cpp).
 */
#ifndef PTRACK_PG_SUMMARY_IO_H
#define PTRACK_PG_SUMMARY_IO_H

#include <cstddef>
#include <cstdint>

#include "core/shared_state.h"
#include "ptrack/change_set.h"
#include "ptrack/summary_file.h"

namespace ptrack::pg {

/* The summaries' directory, relative to the data directory. */
constexpr char kSummaryDir[] = "pg_wal/ptrack";
/* "<16 hex><16 hex>.summary" */
constexpr size_t kSummaryNameLength = 32 + 8;

/* One summary file, from its name only. */
struct SummaryFileRef {
    Lsn start_lsn;
    Lsn end_lsn;
};

/*
 * ptrack.wal_summary_memory, in MB (defined with the follower's settings,
 * capture_wal.cpp), and the budget of a change set it gives now, in bytes
 * (at least ChangeSet::kMinBudget): the follower's set, and the
 * postmaster's for a restored backup's WAL (capture/wal/scan_summary_writer.h).
 */
extern int wal_summary_memory_mb;
size_t wal_summary_budget_bytes();

/* The name of the summary of [start_lsn, end_lsn) in `buf` (at least kSummaryNameLength + 1 bytes). */
void summary_file_name(Lsn start_lsn, Lsn end_lsn, char* buf, size_t len);

/*
 * The summary files of kSummaryDir, sorted by start LSN, from their names
 * (nothing is read): a palloc'd array in CurrentMemoryContext, *count
 * entries.  A missing directory has none.  Names that do not parse (.tmp
 * files included) are skipped.  ERROR if the directory cannot be read.
 */
SummaryFileRef* summary_list(size_t* count);

/*
 * The WAL follower (summary_write.cpp): writes what `content` yields as the
 * summary of [start_lsn, end_lsn) on `timeline` with header `flags`
 * (kSummaryEndsAtRedo), durably: "<name>.tmp" through the engine's
 * summary_write(), fsync, durable_rename() (which fsyncs the directory);
 * kSummaryDir is created if missing.  On success fills *written (the
 * header as written).  False after a rate-limited WARNING, the .tmp removed:
 * nothing changed, the caller keeps its set and retries.
 */
bool summary_write_durably(ChangeCursor& content, Lsn start_lsn, Lsn end_lsn, uint32_t timeline, uint32_t flags,
                           SummaryHeader* written);

/*
 * Why kSummaryDir cannot serve the follower now, in `buf` (it exists but is
 * not a directory the server's user can list and write in); nullptr if it
 * can, or does not exist (the first write creates it).  No ERROR.
 */
const char* summary_dir_problem(char* buf, size_t len);

/*
 * The follower's fresh start: removes every summary and every .tmp file (LOG
 * with `why` if any summary was there).  False after a WARNING if the
 * directory could not be read or a file not removed: the caller does not go
 * on as if they were gone, and tries again.
 */
bool summary_remove_all(const char* why);

/*
 * The follower's resume at `resume_end` (the first LSN its in-memory set will
 * hold): removes every .tmp file and every summary that ends after it; if
 * what remains does not end exactly at `resume_end`, removes it all (the
 * chain is broken: answers refuse the LSNs it covered instead of answering
 * short).  *kept: the kept chain's end (`resume_end`), or 0 if none is kept.
 * False as summary_remove_all() (*kept 0; nothing it could not remove is
 * claimed gone): the caller tries again.
 */
bool summary_keep_chain_to(Lsn resume_end, Lsn* kept);

/* --- reading, in a backend (summary_read.cpp) -------------------------------- */

enum class SummaryReadResult {
    kOk,      /* *view is the whole file, validated */
    kGone,    /* the file no longer exists: the follower replaced or removed it (list again) */
    kDamaged  /* the file is there but not usable: *damage says why */
};

/*
 * Reads the summary `ref` whole into palloc'd memory (CurrentMemoryContext;
 * more than 1 GB allowed) and validates it with summary_open() for this
 * cluster (GetSystemIdentifier()) and this server's major version; its
 * header must also repeat the range its name claims.  On kDamaged, *damage
 * is a reason completing "summary file ... is not usable because ..." and
 * nothing stays allocated.  A read error other than a missing file raises
 * an ERROR naming the file.  `path` (MAXPGPATH bytes) receives the file's
 * path relative to the data directory, for the caller's messages.
 */
SummaryReadResult summary_read(const SummaryFileRef& ref, SummaryView* view, const char** damage, char* path);

/*
 * Why the header of `ref` cannot be trusted, from its first 96 bytes: not a
 * summary header (describe_summary_status()), another range than its name,
 * another cluster or server version, or it cannot be opened or read (*gone
 * set if it does not exist).  nullptr if it can, *header then holds it.
 * Raises no ERROR (the follower's retention calls it too).
 */
const char* summary_header_problem(const SummaryFileRef& ref, SummaryHeader* header, bool* gone);

/* --- Retention (summary_retention.cpp) --------------------------------------------------------- */

/* ptrack.wal_summary_keep_time and ptrack.wal_summary_max_files (_PG_init). */
void define_summary_retention_gucs();

/*
 * One retention pass over kSummaryDir, by the WAL follower only, between two
 * batches of WAL (it is the only writer): removes files left inside a
 * combined one by a crash and expired files (oldest first, never the
 * newest), and combines adjacent files across boundaries that are
 * not redo LSNs, then across old redo boundaries while there are more files
 * than ptrack.wal_summary_max_files.  Cheap when there is nothing to do: it
 * lists the directory only after a new summary was written, when the last
 * pass left work, or once a minute.  Problems are WARNINGs; a half-done pass
 * leaves a valid chain.
 */
void summary_retention_pass();

/*
 * Rewrites the summary [start, end) with kSummaryEndsAtRedo set (same
 * content, same name, same modification time), so that retention keeps the
 * boundary at `end`: a checkpoint's redo LSN learnt after the summary was
 * written (follower_cuts.cpp, note_redo()).  By the WAL follower only.  False
 * if the file is gone, damaged or could not be written (WARNING); the
 * boundary may then be combined away later (extra blocks, never fewer).
 */
bool summary_mark_ends_at_redo(Lsn start, Lsn end);

}  // namespace ptrack::pg

#endif
