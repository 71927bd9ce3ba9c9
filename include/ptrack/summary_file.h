/*
 * ptrack/summary_file.h -- the immutable on-disk form of an exact change set
 * (ptrack/change_cursor.h) covering one LSN range: a summary (docs/design.md
 * section 4.4).
 *
 * What a summary promises.  Every change the caller recorded at an LSN x
 * with start_lsn <= x < end_lsn is in it: its blocks, its limits, its
 * databases.  (The WAL follower records a record's changes at the record's
 * end LSN, so a summary cut at a checkpoint's redo LSN R ends at R and the
 * next one starts at R.)  Inside a summary there is no LSN: for a query
 * "changed at or after L", a summary with end_lsn > L contributes all of
 * itself, even when start_lsn < L (ptrack/summary_answer.h).
 *
 * Layout (fixed-width fields in host byte order, like PostgreSQL's own data
 * files; the system identifier rejects another cluster's file):
 *
 *   [0, 96)    header: magic "PTRKSUMM", format version, header size,
 *              PostgreSQL major version, timeline, system identifier,
 *              start LSN, end LSN, fork count, block count, database
 *              count, flags, body length, body CRC-32C, and the CRC-32C
 *              of the header's first 92 bytes in its last 4
 *   [96, ..)   body: the fork records in increasing RelFork order
 *              (relfork_less()), then the database records
 *
 * Fork record: uint32 spc, uint32 db, uint32 relfilenode, uint8 fork,
 * uint32 limit (kNoLimit: none), then its chunks in increasing chunk order,
 * each a kind byte, the chunk number as a varint (the first one as is, the
 * next ones as the gap minus one) and the blocks of the chunk (offsets
 * 0..65535 in it) in the smallest of three encodings:
 *   kArray   varint count n >= 1, then n offsets as varints: the first as
 *            is, each next one as its gap to the previous minus one;
 *   kRuns    varint count r >= 1, then r runs (start, length), each start
 *            as a varint gap to the previous run's end (the first as is),
 *            each length minus one as a varint; runs do not touch;
 *   kBitmap  8192 bytes, bit b of byte i = offset 8 * i + b (not empty).
 * A byte kEnd (0) closes the fork's chunks.  A fork record has a chunk or a
 * limit.  Varints are LEB128 (7 bits a byte, low bits first, at most 5
 * bytes, no value above 32 bits).  Database record: uint32 spc, uint32 db,
 * in increasing order.
 *
 * Measured on the 10 TiB simulation (bench/RESULTS.md): gaps of a 5% uniform
 * change are one byte each, runs cost a few bytes for a bulk load, bitmaps
 * bound the dense chunks at 1 bit a block.
 *
 * Flags (a uint32 that version 1 reserved as 0, so old files read as "no
 * flag" and the version stays 1): kSummaryEndsAtRedo says the summary ends
 * at a checkpoint's redo LSN, a boundary a backup can start at; retention
 * keeps those boundaries and combines across the others.  summary_write() refuses, and summary_open() rejects as
 * kBadVersion, a bit this build does not know (a later writer's meaning).
 *
 * Trust.  A reader validates the whole file before anything is read from
 * it (summary_open()): magic, version, header CRC, lengths, body CRC, the
 * caller's system identifier and PostgreSQL version, then every record
 * (order, bounds, encodings, counts against the header).  Each failure is
 * its own status (describe_summary_status() for the message); a damaged
 * file is never read short.  Writers write the body first and the header
 * last, into a temporary file the caller renames (as ptrack/map_flush.h).
 *
 * No PostgreSQL dependency: the CRC-32C functions are passed in.  Nothing
 * here allocates or throws; the writer's buffers are the caller's.
 *
 * INTERFACE: SummaryHeader, summary_write(), summary_open(), SummaryView,
 * SummaryCursor, describe_summary_status().
 */
#ifndef PTRACK_SUMMARY_FILE_H
#define PTRACK_SUMMARY_FILE_H

#include "ptrack/engine_guard.h"

#include <cstddef>
#include <cstdint>

#include "ptrack/change_cursor.h"
#include "ptrack/file_sink.h"
#include "ptrack/relfork.h"

namespace ptrack {

constexpr uint32_t kSummaryFileVersion = 1;
constexpr size_t kSummaryHeaderBytes = 96;
/* The writer's buffer: at least one encoded chunk (a bitmap and its framing) plus a fork record. */
constexpr size_t kSummaryMinBuffer = 16384;

/* Header flags. */
constexpr uint32_t kSummaryEndsAtRedo = 1u;   /* end_lsn is a checkpoint's redo LSN */
constexpr uint32_t kSummaryKnownFlags = kSummaryEndsAtRedo;

/* Chunk kinds in the body. */
enum SummaryChunkKind : uint8_t { kChunkEnd = 0, kChunkArray = 1, kChunkRuns = 2, kChunkBitmap = 3 };

struct SummaryHeader {
    uint32_t pg_major;          /* PostgreSQL major version (15, 17, 18), the caller's */
    uint32_t timeline;          /* at end_lsn (informational) */
    uint64_t system_identifier; /* pg_control's */
    Lsn start_lsn;              /* inclusive */
    Lsn end_lsn;                /* exclusive; > start_lsn */
    uint32_t flags;             /* kSummaryEndsAtRedo, or 0 */
    /* Written by summary_write(), checked by summary_open(): */
    uint64_t fork_count;
    uint64_t block_count; /* blocks in chunks (limits not counted) */
    uint32_t database_count;
    uint64_t body_bytes;
};

enum class SummaryStatus {
    kOk,
    kTooShort,     /* shorter than a header */
    kBadMagic,
    kBadVersion,
    kBadHeaderCrc,
    kBadRange,     /* start_lsn >= end_lsn */
    kOtherSystem,  /* another cluster's system identifier */
    kOtherServer,  /* another PostgreSQL major version */
    kBadLength,    /* truncated, or bytes past the body */
    kBadBodyCrc,
    kBadOrder,     /* forks, chunks or databases out of order or repeated */
    kBadContent,   /* a record that cannot be decoded or breaks a rule above */
    kBadCounts,    /* the records do not add up to the header's counts */
    kWriteFailed,  /* summary_write(): the sink refused a write */
    kBadBuffer     /* summary_write(): buffer smaller than kSummaryMinBuffer */
};

/* A reason completing "summary file ... is not usable because ...". */
const char* describe_summary_status(SummaryStatus status) noexcept;

/* What summary_write() needs besides the content. */
struct SummaryWriteBuffers {
    uint8_t* buffer;     /* output staging, buffer_bytes >= kSummaryMinBuffer */
    size_t buffer_bytes;
    ChunkBits* scratch;  /* one chunk */
};

/*
 * Writes everything `source` yields as a summary for `header` (its pg_major,
 * timeline, system identifier and range; the counts are filled in, into
 * *written too): the body from byte kSummaryHeaderBytes on, then the header
 * at 0.  Blocks at or past their fork's limit are left out (the limit
 * lists them), and so are forks left with neither chunk nor limit.  kOk, kBadRange,
 * kBadVersion (a flag outside kSummaryKnownFlags), kBadBuffer or kWriteFailed.  The file is the header plus
 * written->body_bytes bytes.
 */
SummaryStatus summary_write(const SummaryHeader& header, ChangeCursor& source, Crc32cFn crc32c,
                            Crc32cUpdateFn crc32c_update, const SummaryWriteBuffers& buffers, FlushSink& sink,
                            SummaryHeader* written) noexcept;

/* A summary file in memory, validated whole by summary_open(). */
struct SummaryView {
    const uint8_t* data;
    size_t length;
    SummaryHeader header;
};

/*
 * Validates `length` bytes at `data` as a summary of the cluster
 * `system_identifier` written by PostgreSQL `pg_major`, in the order given
 * above; on kOk fills *view.  Never reads outside [data, data + length).
 */
SummaryStatus summary_open(const uint8_t* data, size_t length, uint64_t system_identifier, uint32_t pg_major,
                           Crc32cFn crc32c, SummaryView* view) noexcept;

/*
 * Reads only the header (for listing files without reading them whole):
 * magic, version, header CRC, flags and range.  The body is not checked.
 */
SummaryStatus summary_read_header(const uint8_t* data, size_t length, Crc32cFn crc32c,
                                  SummaryHeader* header) noexcept;

/* A cursor over a validated summary. */
class SummaryCursor final : public ChangeCursor {
public:
    explicit SummaryCursor(const SummaryView& view) noexcept;
    /* An empty cursor (room in an array; assign a real one before use). */
    SummaryCursor() noexcept = default;

    bool next_fork(RelFork* rel, BlockNumber* limit) noexcept override;
    bool next_chunk(uint32_t* chunk) noexcept override;
    void or_chunk(ChunkBits* bits) noexcept override;
    bool next_database(DatabaseKey* db) noexcept override;

private:
    const uint8_t* data_ = nullptr;
    size_t end_ = 0;          /* end of the body */
    size_t pos_ = 0;          /* next fork record, or inside the current fork's chunks */
    uint64_t forks_left_ = 0;
    bool in_fork_ = false;
    uint32_t chunk_ = 0;
    uint32_t next_base_ = 0;  /* the current fork's next chunk is next_base_ + its coded number */
    uint8_t kind_ = kChunkEnd;
    size_t payload_ = 0;      /* the current chunk's payload */
    bool payload_read_ = true;
    size_t db_pos_ = 0;       /* next database record */
    uint32_t dbs_left_ = 0;
};

}  // namespace ptrack

#endif
