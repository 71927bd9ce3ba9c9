/*
 * compat.cpp -- the functions of compat.h whose PostgreSQL counterparts
 * changed signature or shape between 15, 17 and 18 (docs/design.md section
 * 8).  Each one does the same thing on every version; the #if says only how.
 */
extern "C" {
#include "postgres.h"

#include "postmaster/bgworker_internals.h"
#include "replication/slot.h"
#include "utils/guc.h"
#include "utils/guc_tables.h"
}

#include "compat/compat.h"

namespace ptrack::pg {

void relation_path(const RelFork& rel, char* out)
{
    const ForkNumber fork = static_cast<ForkNumber>(rel.fork);
#if PG_MAJORVERSION_NUM >= 18
    const RelPathStr path = relpathperm(pg_rel_id(rel), fork); /* a struct with the text inside */
    strlcpy(out, path.str, MAXPGPATH);
#else
    char* path = relpathperm(pg_rel_id(rel), fork); /* palloc'd */
    strlcpy(out, path, MAXPGPATH);
    pfree(path);
#endif
}

void segment_file_path(const RelFork& rel, uint32_t segno, char* out)
{
    relation_path(rel, out);
    if (segno > 0) {
        const size_t len = strlen(out);
        snprintf(out + len, MAXPGPATH - len, ".%u", segno);
    }
}

void slot_create(const char* name)
{
#if PG_MAJORVERSION_NUM >= 17
    ReplicationSlotCreate(name, false, RS_PERSISTENT, false, false /* failover */, false /* synced */);
#else
    ReplicationSlotCreate(name, false, RS_PERSISTENT, false);
#endif
}

void slot_acquire(const char* name)
{
#if PG_MAJORVERSION_NUM >= 18
    /* An invalidated slot is acquired too: the follower reserves WAL again (follower_slot_start.cpp). */
    ReplicationSlotAcquire(name, true, false /* error_if_invalid */);
#else
    ReplicationSlotAcquire(name, true);
#endif
}

bool bgworker_is_registered(const char* library, const char* function)
{
    /* slist_foreach()/dlist_foreach() and their container macros without their C-only type checks (lib/ilist.h). */
#if PG_MAJORVERSION_NUM >= 18
    const dlist_node* end = &BackgroundWorkerList.head;
    for (const dlist_node* node = end->next; node != nullptr && node != end; node = node->next) {
#else
    for (const slist_node* node = BackgroundWorkerList.head.next; node != nullptr; node = node->next) {
#endif
        const auto* registered = reinterpret_cast<const RegisteredBgWorker*>(
            reinterpret_cast<const char*>(node) - offsetof(RegisteredBgWorker, rw_lnode));
        if (strcmp(registered->rw_worker.bgw_library_name, library) == 0 &&
            strcmp(registered->rw_worker.bgw_function_name, function) == 0)
            return true;
    }
    return false;
}

config_generic** guc_variables(int* count)
{
#if PG_MAJORVERSION_NUM >= 16
    return get_guc_variables(count);
#else
    *count = GetNumConfigOptions();
    return get_guc_variables();
#endif
}

}  // namespace ptrack::pg
