/*
 * datadir_walk.cpp -- see datadir_walk.h.
 *
 * An unlogged relation is recognised, as PostgreSQL itself does at the end of
 * recovery (src/backend/storage/file/reinit.c), by the presence of an init
 * fork next to it; a first pass over the directory collects those
 * relfilenodes.  Backup tools copy only the init fork of an unlogged relation,
 * so its other forks are flagged for the caller to leave out.
 */
extern "C" {
#include "postgres.h"

#include <sys/stat.h>

#include "common/relpath.h"
#include "storage/fd.h"
}

#include "core/boundary.h"
#include "core/datadir_walk.h"

namespace ptrack::pg {

PTRACK_FRAME_SAFE(RelFileName);
PTRACK_ENGINE_NOEXCEPT(&parse_relation_file_name, &parse_relation_dir);

namespace {

int compare_oids(const void* a, const void* b)
{
    const uint32_t x = *static_cast<const uint32_t*>(a);
    const uint32_t y = *static_cast<const uint32_t*>(b);
    return x < y ? -1 : x > y ? 1 : 0;
}

/* Opens a directory; NULL if it does not exist (dropped meanwhile), ERROR on other failures. */
DIR* open_dir_if_exists(const char* dir)
{
    DIR* d = AllocateDir(dir);
    if (d == NULL && errno != ENOENT)
        ereport(ERROR, (errcode_for_file_access(), errmsg("could not open directory \"%s\": %m", dir)));
    return d;
}

bool is_oid_name(const char* name)
{
    uint32_t spc = 0;
    uint32_t db = 0;
    char probe[MAXPGPATH];
    /* A database directory name is an OID: reuse the parser on "base/<name>". */
    snprintf(probe, sizeof(probe), "base/%s", name);
    return parse_relation_dir(probe, "", &spc, &db);
}

/* Sorted relfilenodes of the init forks in `dir`, palloc'd; *count set. */
uint32_t* collect_init_forks(const char* dir, int* count)
{
    int capacity = 16;
    uint32_t* oids = static_cast<uint32_t*>(palloc(capacity * sizeof(uint32_t)));
    *count = 0;
    DIR* d = open_dir_if_exists(dir);
    if (d == NULL)
        return oids;
    struct dirent* de;
    while ((de = ReadDir(d, dir)) != NULL) {
        RelFileName name;
        if (!parse_relation_file_name(de->d_name, &name) || name.temp || name.fork != kInitFork ||
            name.segno != 0)
            continue;
        if (*count == capacity) {
            capacity *= 2;
            oids = static_cast<uint32_t*>(repalloc(oids, capacity * sizeof(uint32_t)));
        }
        oids[(*count)++] = name.relfilenode;
    }
    FreeDir(d);
    qsort(oids, *count, sizeof(uint32_t), compare_oids);
    return oids;
}

}  // namespace

bool walk_relation_dir(const char* dir, RelationFileCallback callback, void* arg, RelationFileFilter filter)
{
    uint32_t spc = 0;
    uint32_t db = 0;
    if (!parse_relation_dir(dir, TABLESPACE_VERSION_DIRECTORY, &spc, &db))
        return false;

    int init_count = 0;
    uint32_t* init_forks = collect_init_forks(dir, &init_count);

    DIR* d = open_dir_if_exists(dir);
    if (d != NULL) {
        struct dirent* de;
        while ((de = ReadDir(d, dir)) != NULL) {
            RelFileName name;
            if (!parse_relation_file_name(de->d_name, &name) || name.temp)
                continue;

            RelationFile file;
            file.segment.rel = RelFork{spc, db, name.relfilenode, name.fork};
            file.segment.segno = name.segno;
            file.segment.temp = false;
            file.unlogged = name.fork != kInitFork &&
                            bsearch(&name.relfilenode, init_forks, init_count, sizeof(uint32_t),
                                    compare_oids) != NULL;
            if (filter != nullptr && !filter(file.segment, file.unlogged, arg))
                continue;

            char path[MAXPGPATH];
            snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
            struct stat st;
            if (stat(path, &st) != 0) {
                if (errno == ENOENT)
                    continue;
                ereport(ERROR, (errcode_for_file_access(), errmsg("could not stat file \"%s\": %m", path)));
            }
            if (!S_ISREG(st.st_mode))
                continue;

            file.path = path;
            file.size_bytes = static_cast<uint64_t>(st.st_size);
            callback(&file, arg);
        }
        FreeDir(d);
    }
    pfree(init_forks);
    return true;
}

void for_each_oid_dir(const char* parent, const char* suffix, OidDirCallback fn, void* arg)
{
    DIR* d = open_dir_if_exists(parent);
    if (d == NULL)
        return;
    struct dirent* de;
    while ((de = ReadDir(d, parent)) != NULL) {
        if (!is_oid_name(de->d_name))
            continue;
        char subdir[MAXPGPATH];
        snprintf(subdir, sizeof(subdir), "%s/%s%s", parent, de->d_name, suffix);
        fn(subdir, arg);
    }
    FreeDir(d);
}

namespace {

struct WalkContext {
    RelationFileCallback callback;
    void* arg;
    RelationFileFilter filter;
};
PTRACK_FRAME_SAFE(WalkContext);

void walk_database_dir(const char* dir, void* arg)
{
    const auto* ctx = static_cast<const WalkContext*>(arg);
    walk_relation_dir(dir, ctx->callback, ctx->arg, ctx->filter);
}

void walk_tablespace_dir(const char* version_dir, void* arg)
{
    for_each_oid_dir(version_dir, "", walk_database_dir, arg);
}

}  // namespace

void walk_data_directory(RelationFileCallback callback, void* arg, RelationFileFilter filter)
{
    WalkContext ctx{callback, arg, filter};
    walk_relation_dir("global", callback, arg, filter);
    for_each_oid_dir("base", "", walk_database_dir, &ctx);
    for_each_oid_dir("pg_tblspc", "/" TABLESPACE_VERSION_DIRECTORY, walk_tablespace_dir, &ctx);
}

}  // namespace ptrack::pg
