/*
 * datadir_walk.h -- finding the relation segment files of the data directory.
 *
 * Both ptrack_get_pagemapset() (every file of the cluster) and copydir_hook
 * (every file of one copied database) need the same thing: the permanent
 * relation files of a directory, with their relation fork, segment and size.
 * Temporary relations (t<backend>_...) are skipped here, once for all
 * callers.  Uses PostgreSQL's AllocateDir/ReadDir so descriptors are released
 * on error; a file or directory that vanishes during the walk (a concurrent
 * DROP) is skipped; any other I/O error raises an ERROR.
 *
 * C-style code: callable only from frames that own no C++ objects with
 * destructors, since errors longjmp out of it.
 */
#ifndef PTRACK_PG_DATADIR_WALK_H
#define PTRACK_PG_DATADIR_WALK_H

#include <cstdint>

#include "core/boundary.h"
#include "ptrack/relpath.h"

namespace ptrack::pg {

struct RelationFile {
    const char* path;    /* relative to the data directory, e.g. "base/16384/16385.1" */
    RelSegment segment;  /* relation fork and segment number; never temp */
    uint64_t size_bytes; /* the file's size when it was looked at */
    bool unlogged;       /* a main/fsm/vm fork whose relation has an init fork */
};
PTRACK_FRAME_SAFE(RelationFile, RelSegment);

using RelationFileCallback = void (*)(const RelationFile* file, void* arg);

/*
 * Optional, called before a file's size is looked up: false skips the file
 * without a stat() (ptrack_get_pagemapset() skips the segments the map's
 * summary shows unchanged, most files of a big cluster).
 */
using RelationFileFilter = bool (*)(const RelSegment& segment, bool unlogged, void* arg);

/*
 * Calls `callback` for each relation file directly in `dir` that `filter`
 * (if any) wants; false if `dir` holds no relation files.
 */
bool walk_relation_dir(const char* dir, RelationFileCallback callback, void* arg,
                       RelationFileFilter filter = nullptr);

/* The same for every relation file in global/, base/<db>/ and pg_tblspc/<spc>/<version>/<db>/. */
void walk_data_directory(RelationFileCallback callback, void* arg, RelationFileFilter filter = nullptr);

/*
 * Calls `fn("<parent>/<oid><suffix>", arg)` for each entry of `parent`
 * named by a valid OID (a database directory of base/ or of a tablespace's
 * version directory, a tablespace link of pg_tblspc/); nothing if `parent`
 * does not exist; an ERROR if it cannot be read.
 */
using OidDirCallback = void (*)(const char* path, void* arg);
void for_each_oid_dir(const char* parent, const char* suffix, OidDirCallback fn, void* arg);

}  // namespace ptrack::pg

#endif
