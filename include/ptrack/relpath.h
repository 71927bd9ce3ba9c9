/*
 * ptrack/relpath.h -- recognising relation segment files by their paths.
 *
 * ptrack_get_pagemapset() walks the data directory and copydir_hook walks a
 * freshly copied database directory; both must tell relation data files from
 * everything else and know their relation fork and segment, exactly as
 * PostgreSQL names them (src/common/relpath.c, and the rules of
 * parse_filename_for_nontemp_relation() in src/backend/storage/file/reinit.c):
 *
 *   global/<relfilenode>[_fsm|_vm|_init][.<segno>]                      pg_global (1664), db 0
 *   base/<db>/<relfilenode>[...]                                        pg_default (1663)
 *   pg_tblspc/<spc>/<TABLESPACE_VERSION_DIRECTORY>/<db>/<relfilenode>[...]
 *
 * A temporary relation's file is named t<backend>_<relfilenode>[...]; it is
 * recognised (so callers can skip it on purpose) and flagged `temp`.
 * Numbers are decimal without leading zeros, as PostgreSQL prints them; a
 * segment number is >= 1 (segment 0 has no suffix).  Anything else
 * (pg_filenode.map, PG_VERSION, pg_internal.init, stray files) is not a
 * relation file.  No function here allocates or throws.
 */
#ifndef PTRACK_RELPATH_H
#define PTRACK_RELPATH_H

#include "ptrack/engine_guard.h"

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "ptrack/relfork.h"

namespace ptrack {

constexpr uint32_t kDefaultTablespaceOid = 1663; /* pg_default: base/ */
constexpr uint32_t kGlobalTablespaceOid = 1664;  /* pg_global: global/ */

/* A relation file name within its directory. */
struct RelFileName {
    uint32_t relfilenode;
    uint8_t fork;   /* ForkNumber */
    uint32_t segno; /* 0 for the first segment file */
    bool temp;      /* t<backend>_... : a temporary relation */
};

/* Parses a file name ("16385", "16385_vm.2", "t3_16400"); false if not a relation file. */
bool parse_relation_file_name(std::string_view name, RelFileName* out) noexcept;

/*
 * Parses a directory that holds relation files ("global", "base/16384",
 * "pg_tblspc/16390/PG_15_202209061/16384") into its tablespace and database
 * OIDs.  `tablespace_version_dir` is PostgreSQL's TABLESPACE_VERSION_DIRECTORY.
 * A trailing '/' is accepted.  False if the directory holds no relation files.
 */
bool parse_relation_dir(std::string_view dir, std::string_view tablespace_version_dir, uint32_t* spc_oid,
                        uint32_t* db_oid) noexcept;

/* A relation segment file: its relation fork and segment number. */
struct RelSegment {
    RelFork rel;
    uint32_t segno;
    bool temp;
};

/* Parses a path relative to the data directory; false if not a relation file. */
bool parse_relation_path(std::string_view path, std::string_view tablespace_version_dir,
                         RelSegment* out) noexcept;

/* Name suffix of a fork: "", "_fsm", "_vm", "_init". */
const char* fork_suffix(uint8_t fork) noexcept;

}  // namespace ptrack

#endif
