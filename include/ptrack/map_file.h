/*
 * ptrack/map_file.h -- the on-disk form of the map and the rules for
 * trusting it at startup (docs/design.md sections 3.4 and 5).
 *
 * Layout of ptrack.map (host byte order, like PostgreSQL's own data files;
 * the system identifier check rejects a file from another cluster):
 *
 *   [0, 512)                 header, ending with the CRC-32C of its bytes
 *   [512, data_offset)       chunk CRC table: one CRC-32C per chunk, padded to 4 KB
 *   [data_offset, ...)       the map region (ptrack/map.h), chunk_bytes per chunk,
 *                            the last chunk possibly shorter
 *
 * The region is cut into fixed-size chunks, each with its own CRC, so that a
 * later flush can rewrite only the chunks that changed and a damaged chunk
 * can be identified on its own and made conservative (make_chunk_conservative
 * in ptrack/map_delta.h) instead of discarding the whole map.  A full flush
 * writes ptrack.map.tmp and renames it over ptrack.map; the flushes in between
 * append only the changed slots to ptrack.map.delta (ptrack/map_delta.h).
 *
 * The file lives in the capture source's folder (src/pg/persist/state_files.h):
 * the top of the data directory for the hooks, pg_wal/ptrack for wal
 * capture; either way outside global/, base/ and pg_tblspc/, so unpatched
 * pg_checksums, pg_basebackup's checksum verification and pg_rewind never
 * mistake it for a relation file.
 *
 * No PostgreSQL dependency: the CRC-32C function is passed in (the server
 * passes PostgreSQL's own, port/pg_crc32c.h).  Nothing here allocates or throws.
 */
#ifndef PTRACK_MAP_FILE_H
#define PTRACK_MAP_FILE_H

#include "ptrack/engine_guard.h"

#include <cstddef>
#include <cstdint>

#include "ptrack/file_sink.h" /* Crc32cFn */
#include "ptrack/map.h"

namespace ptrack {

constexpr const char* kMapFileName = "ptrack.map";
constexpr const char* kMapTempFileName = "ptrack.map.tmp";
/* 2: records the capture source and the covered LSN (1 had only the flush redo LSN). */
constexpr uint32_t kMapFileVersion = 2;
constexpr size_t kMapFileHeaderBytes = 512;
constexpr uint32_t kMapFileChunkBytes = 64 * 1024; /* see bench/RESULTS.md, checkpoint cost */

/*
 * Which capture source wrote the map (src/pg/capture/capture_source.h).  A map is
 * only trusted by the source that wrote it: their completeness arguments
 * differ (hooks: checkpoint + full-page images; wal: the WAL itself).
 */
enum class CaptureSourceId : uint32_t { kNone = 0, kHooks = 1, kWal = 2 };

/* "hooks", "wal" or "unknown". */
const char* capture_source_name(CaptureSourceId source) noexcept;

/* Conditions of the run that wrote the file, as flags. */
enum MapFileFlags : uint32_t {
    kFlagFullPageWrites = 1u << 0, /* full_page_writes was on at flush */
    kFlagWalLevelReplica = 1u << 1 /* wal_level was replica or logical at flush */
};

struct MapFileHeader {
    uint32_t version;
    uint64_t system_identifier;     /* pg_control's, to reject another cluster's file */
    uint32_t data_checksum_version; /* pg_control's; pg_checksums --enable rewrites every block */
    MapGeometry geometry;
    uint32_t chunk_bytes;
    uint32_t flags;          /* MapFileFlags */
    Lsn init_lsn;            /* ptrack_init_lsn() of the map */
    /*
     * The LSN up to which the saved marks are complete: every change whose
     * WAL record ends at or before it is marked in the file (or, for hooks,
     * re-marked by crash recovery, which starts at or after it).  hooks: the
     * redo LSN of the checkpoint/restartpoint whose sync phase ended before
     * the save; wal: the end of the last record the follower had applied.
     */
    Lsn covered_lsn;
    CaptureSourceId source;  /* the capture source that wrote the map */
    uint32_t timeline;       /* timeline at flush (informational) */
    uint64_t base_id;        /* identifies this file to the delta batches written against it */
    uint64_t placement;      /* placement_fingerprint() of the build that wrote it */
    /*
     * PostgreSQL major version of the server that wrote it (15, 17, 18).  A
     * map is never trusted by another major version: pg_upgrade rewrites
     * files under new relfilenodes, and the capture rules (the WAL records,
     * the core patch) are per version.  0 in files of builds that predate
     * the field, which ran on PostgreSQL 15 only (kUnrecordedServerMajor).
     */
    uint32_t server_major;
};

/* The major version a file without the server_major field was written under. */
constexpr uint32_t kUnrecordedServerMajor = 15;

/*
 * A fingerprint of where this build places blocks in a map of `geometry`:
 * the slots and summary slots of a fixed set of keys, hashed.  A map written
 * by a build that hashes differently (an upgrade) would silently point every
 * block at other slots, so such a file is not trusted.
 */
uint64_t placement_fingerprint(const MapGeometry& geometry) noexcept;

/* Number of chunks of a region, byte offset of the region in the file, file size. */
uint64_t map_file_chunk_count(const MapGeometry& geometry, uint32_t chunk_bytes) noexcept;
uint64_t map_file_data_offset(uint64_t chunk_count) noexcept;
uint64_t map_file_bytes(const MapGeometry& geometry, uint32_t chunk_bytes) noexcept;

/* Bytes of chunk `chunk` of the region (chunk_bytes, or less for the last). */
uint64_t map_file_chunk_length(const MapGeometry& geometry, uint32_t chunk_bytes, uint64_t chunk) noexcept;

/* Writes `header` into `out` (kMapFileHeaderBytes bytes), magic and CRC included. */
void map_file_encode_header(const MapFileHeader& header, Crc32cFn crc32c, uint8_t* out) noexcept;

enum class HeaderStatus { kOk, kBadMagic, kBadVersion, kBadCrc, kBadGeometry };

/* Reads a header from `in` (kMapFileHeaderBytes bytes). */
HeaderStatus map_file_decode_header(const uint8_t* in, Crc32cFn crc32c, MapFileHeader* out) noexcept;

/* A reason fit for a log message, e.g. "its header checksum does not match". */
const char* describe_header_status(HeaderStatus status) noexcept;

/* What the server knows at startup, from pg_control, the configuration and the data directory. */
struct StartupFacts {
    uint64_t system_identifier;
    uint32_t server_major;     /* PostgreSQL major version of the running server */
    uint32_t data_checksum_version;
    MapGeometry geometry;      /* from ptrack.map_size */
    CaptureSourceId source;    /* the capture source of this run */
    Lsn checkpoint_redo;       /* pg_control's latest checkpoint redo LSN */
    bool backup_label;         /* backup_label present: restored from a backup, or rewound */
    bool crashed;              /* pg_control says the last run did not shut down cleanly */
    bool checkpoint_wal_level_replica; /* pg_control's wal_level >= replica */
    bool wal_level_replica;    /* configured now */
    uint64_t file_bytes;       /* size of the map file */
};

/*
 * Why a stored map with a valid header must not be trusted, or nullptr if it
 * can be.  The rules of docs/design.md section 5.2: same cluster, same
 * PostgreSQL major version, same capture source, same geometry, placement and file size, no backup_label, same data checksum
 * setting; and for the hooks source, flushed no earlier than the checkpoint
 * recovery starts from and, after a crash, a run that kept wal_level >=
 * replica (under minimal, new relations bypass the WAL).  What else a crash
 * needs is proven by reading the WAL after covered_lsn at startup (the
 * hooks' startup scan, the wal source's follower), not judged here.  The text
 * completes "the map file is not trusted because ...".
 */
const char* map_file_distrust_reason(const MapFileHeader& header, const StartupFacts& facts) noexcept;

}  // namespace ptrack

#endif
