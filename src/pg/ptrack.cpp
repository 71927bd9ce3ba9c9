/*
 * ptrack.cpp -- module entry point: GUCs, shared memory and the load of the
 * saved state, the capture source picked and installed.
 *
 * Tracking must see every write from the moment the server starts, so the
 * map lives in shared memory created by the postmaster: the module only
 * works from shared_preload_libraries.  Loaded any other way (CREATE
 * EXTENSION in a server without it preloaded), it defines nothing and the SQL
 * functions explain how to enable it.
 *
 * PostgreSQL 15 requires shared memory to be requested from
 * shmem_request_hook (src/backend/utils/init/miscinit.c) and initialised from
 * shmem_startup_hook under AddinShmemInitLock.
 */
extern "C" {
#include "postgres.h"

#include "access/twophase.h"
#include "access/xlog.h"
#include "access/xlogrecovery.h"
#include "fmgr.h"
#include "replication/slot.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/guc.h"
#include "utils/guc_tables.h"

PG_MODULE_MAGIC;

PGDLLEXPORT void _PG_init(void); /* exported: see PGDLLEXPORT in the Makefile */
}

#include "core/boundary.h"
#include "capture/hooks/bypass_journal_io.h"
#include "capture/capture.h"
#include "capture/capture_source.h"
#include "capture/wal/capture_wal.h"
#include "capture/file_growth.h"
#include "capture/wal_archive.h"
#include "compat/compat.h"
#include "persist/map_persistence.h"
#include "persist/state_files.h"
#include "persist/summary_io.h"
#include "core/shared_state.h"
#include "sql/verify.h"

namespace ptrack::pg {

PTRACK_ENGINE_NOEXCEPT(&MapGeometry::for_bytes, &MapGeometry::smallest, &MapGeometry::region_bytes);
static_assert(std::is_nothrow_constructible_v<Map, void*, const MapGeometry&>, "the engine must not throw");

namespace {

/* ptrack.capture: the configured choice; running_source() is what runs. */
enum CaptureSetting { kCaptureAuto, kCaptureHooks, kCaptureWal };
int capture_setting = kCaptureAuto;
const struct config_enum_entry capture_options[] = {
    {"auto", kCaptureAuto, false}, {"hooks", kCaptureHooks, false}, {"wal", kCaptureWal, false}, {NULL, 0, false}};

/* 1 TB: far beyond any sensible map, but not limited by 32-bit arithmetic. */
constexpr int kMaxMapSizeMb = 1024 * 1024;

shmem_request_hook_type prev_shmem_request_hook = nullptr;
shmem_startup_hook_type prev_shmem_startup_hook = nullptr;

/*
 * The map's geometry: ptrack.map_size's, or the smallest one for a source
 * that marks nothing in it (wal capture: its changes go to the summaries,
 * and the map keeps only the resume point; map_persistence.h).
 */
MapGeometry configured_geometry()
{
    if (persist_source != nullptr && !persist_source->marks_map())
        return MapGeometry::smallest(RELSEG_SIZE);
    return MapGeometry::for_bytes(static_cast<uint64_t>(map_size_mb) * 1024 * 1024, RELSEG_SIZE);
}

Size shared_state_bytes(const MapGeometry& geometry)
{
    /* The header padded to a cache line, the region, and slack to align the start. */
    const Size header = (sizeof(SharedState) + kLineBytes - 1) / kLineBytes * kLineBytes;
    return header + geometry.region_bytes() + kLineBytes;
}

/*
 * One mark announcement line per PGPROC (capture.h), for a source that marks
 * the map from many processes; none for one that marks nothing (wal).
 */
uint32_t announcement_slots()
{
    if (persist_source != nullptr && !persist_source->marks_map())
        return 0;
    return static_cast<uint32_t>(MaxBackends + NUM_AUXILIARY_PROCS + max_prepared_xacts);
}

void* region_of(SharedState* state)
{
    const uintptr_t header_end = reinterpret_cast<uintptr_t>(state) + sizeof(SharedState);
    return reinterpret_cast<void*>((header_end + kLineBytes - 1) / kLineBytes * kLineBytes);
}

void ptrack_shmem_request()
{
    if (prev_shmem_request_hook)
        prev_shmem_request_hook();
    if (map_size_mb > 0) {
        RequestAddinShmemSpace(shared_state_bytes(configured_geometry()));
        if (const uint32_t slots = announcement_slots())
            RequestAddinShmemSpace(slots * sizeof(MarkAnnouncement));
    }
}

/*
 * In the postmaster, on a freshly created shared state: the map as saved
 * (persist/map_load.cpp, with the running source's steps), then what
 * applies whatever map is in use: marks a crash lost with nothing else to
 * restore them (bypass_journal_io.h), and the sizes file that goes with
 * the map (a trusted one's, or those recorded before recovery:
 * file_growth.h).  A segment the WAL follower restored from the archive
 * when the server stopped goes first (wal_archive.h).
 */
void load_saved_state(SharedState* state, Map* map)
{
    remove_archive_leftover();
    load_map(state, map);
    bypass_journal_apply(map);
    growth_settle_files(state->loaded_covered_lsn != 0 ? state->loaded_covered_lsn : state->presized_redo_lsn);
}

void ptrack_shmem_startup()
{
    if (prev_shmem_startup_hook)
        prev_shmem_startup_hook();
    if (map_size_mb == 0) {
        if (!IsUnderPostmaster) {
            remove_state_files();
            remove_bypass_journals();
            remove_follower_slot("change tracking is off");
        }
        return;
    }
    /* A slot a run with the other source left would keep every WAL segment from then on (capture_source.h). */
    const CaptureSourceOps& source = running_source();
    if (source.drops_follower_slot != nullptr && !IsUnderPostmaster)
        remove_follower_slot(source.drops_follower_slot);

    const MapGeometry geometry = configured_geometry();
    bool found = false;
    LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
    auto* state = static_cast<SharedState*>(ShmemInitStruct("ptrack", shared_state_bytes(geometry), &found));
    if (!found) {
        memset(static_cast<void*>(state), 0, sizeof(SharedState));
        SpinLockInit(&state->last_restart.mutex);
        SpinLockInit(&state->follower_start_error.mutex);
        SpinLockInit(&state->summary_write_error.mutex);
        state->init_lsn.store(0, Order::kRelaxed);
        state->geometry = geometry;
        /* load_map() fills the region from the file, or clears it. */
        Map fresh(region_of(state), geometry);
        load_saved_state(state, &fresh);
    }
    const uint32_t slots = announcement_slots();
    MarkAnnouncement* lines = nullptr;
    if (slots > 0) {
        lines = static_cast<MarkAnnouncement*>(
            ShmemInitStruct("ptrack mark announcements", slots * sizeof(MarkAnnouncement), &found));
        if (!found)
            memset(static_cast<void*>(lines), 0, slots * sizeof(MarkAnnouncement));
    }
    LWLockRelease(AddinShmemInitLock);
    announcements = lines;
    announcement_count = slots;

    map = Map(region_of(state), state->geometry);
    shared = state;
}

}  // namespace

}  // namespace ptrack::pg

using namespace ptrack::pg;

/*
 * PostgreSQL keeps a custom parameter at its default (0 here: tracking off)
 * when the configured value is invalid, with only a WARNING.  For
 * ptrack.map_size that would silently turn tracking off and remove the map
 * files of the previous run (ptrack_shmem_startup), so the next backup would
 * have to be full.  Check the configured text (`raw`, NULL if not set)
 * ourselves and refuse to start instead.  Also refuses a non-zero size that
 * rounds to 0 MB (e.g. 100kB).  Rules: parse_int() as for any GUC with
 * GUC_UNIT_MB (src/backend/utils/misc/guc.c).
 */
static void check_configured_map_size(const char* raw)
{
    if (raw == NULL)
        return;
    char problem[256];
    const char* hint = NULL;
    int mb = 0;
    int kb = 0;
    if (!parse_int(raw, &mb, GUC_UNIT_MB, &hint))
        snprintf(problem, sizeof(problem), "invalid value for parameter \"ptrack.map_size\": \"%s\"", raw);
    else if (mb < 0 || mb > kMaxMapSizeMb)
        snprintf(problem, sizeof(problem),
                 "%d MB is outside the valid range for parameter \"ptrack.map_size\" (0 .. %d MB)", mb,
                 kMaxMapSizeMb);
    else if (mb == 0 && parse_int(raw, &kb, GUC_UNIT_KB, NULL) && kb != 0) {
        snprintf(problem, sizeof(problem),
                 "ptrack.map_size \"%s\" rounds down to 0 MB, which turns change tracking off", raw);
        hint = "Set at least 1MB, or exactly 0 to turn tracking off.";
    } else
        return;
    ereport(FATAL, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg_internal("%s", problem),
                    errdetail("The server does not start with change tracking in an unknown state; the map "
                              "files of the previous run are kept."),
                    errhint("%s", hint != NULL ? hint : "Set a size in MB, such as 64MB, or 0 to turn tracking off.")));
}

/*
 * The other ptrack parameters, as configured (postgresql.conf, ALTER SYSTEM,
 * -c), read before they are defined: `name` and the text, NULL if not set.
 * ptrack.map_size has its own check above; the developer options (hidden
 * from SHOW ALL) are checked like the others.
 */
struct ConfiguredText {
    const char* name;
    char* text;
};
static ConfiguredText configured_texts[] = {{"ptrack.capture", NULL},
                                            {"ptrack.wal_wait_timeout", NULL},
                                            {"ptrack.wal_summary_memory", NULL},
                                            {"ptrack.verify_max_rate", NULL},
                                            {"ptrack.wal_summary_keep_time", NULL},
                                            {"ptrack.wal_summary_max_files", NULL},
                                            {"ptrack.use_segment_summary", NULL},
                                            {"ptrack.wal_reader", NULL},
                                            {"ptrack.wal_file_watch", NULL},
                                            {"ptrack.wal_file_watch_min_files", NULL},
                                            {"ptrack.wal_batch_delay", NULL}};

static void remember_configured_texts()
{
    for (ConfiguredText& setting : configured_texts) {
        const char* text = GetConfigOption(setting.name, true, false);
        setting.text = text != NULL ? pstrdup(text) : NULL;
    }
}

/*
 * PostgreSQL applies the configured value of an extension's parameter when
 * the extension defines it, and keeps the default with only a WARNING if the
 * value is invalid (define_custom_variable() in src/backend/utils/misc/guc.c
 * reapplies it at WARNING), while an invalid value of its own parameters
 * stops the server at startup ("configuration file contains errors").
 * ptrack.capture = garbage would then start with "auto".  Refuse every
 * invalid ptrack setting at startup like PostgreSQL's own (and like
 * ptrack.map_size): the value is checked again, without applying it, by
 * set_config_option() with changeVal = false.  Called once every parameter
 * is defined.
 */
static void check_configured_texts()
{
    for (const ConfiguredText& setting : configured_texts) {
        if (setting.text == NULL)
            continue;
        if (set_config_option(setting.name, setting.text, PGC_POSTMASTER, PGC_S_FILE, GUC_ACTION_SET, false,
                              DEBUG1, false) != 0) /* 0: invalid; -1: valid, not applied */
            continue;
        ereport(FATAL, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("invalid value for parameter \"%s\": \"%s\"", setting.name, setting.text),
                        errdetail("The server does not start with a ptrack setting it cannot apply, as for "
                                  "PostgreSQL's own parameters."),
                        errhint("Correct the setting; the WARNING before this message says which values are valid.")));
    }
}

/*
 * A misspelt ptrack.* line in the configuration (ptrack.mapsize = 64MB)
 * would leave ptrack.map_size at 0 and tracking off.  PostgreSQL itself
 * warns when MarkGUCPrefixReserved() removes such a placeholder, without the
 * consequence; say it in ptrack's words first, and remember the first name
 * for ptrack_status().  Called after every ptrack parameter is defined, so
 * the placeholders left over are exactly the unknown names.
 */
static void warn_unknown_settings()
{
    int count = 0;
    struct config_generic** variables = guc_variables(&count);
    for (int i = 0; i < count; ++i) {
        const struct config_generic* var = variables[i];
        if ((var->flags & GUC_CUSTOM_PLACEHOLDER) == 0 || pg_strncasecmp(var->name, "ptrack.", 7) != 0)
            continue;
        if (unknown_setting[0] == '\0')
            strlcpy(unknown_setting, var->name, sizeof(unknown_setting));
        ereport(WARNING,
                (errcode(ERRCODE_UNDEFINED_OBJECT),
                 errmsg("ptrack has no parameter \"%s\": the setting is ignored", var->name),
                 map_size_mb == 0 ? errdetail("ptrack.map_size is 0, so change tracking is off.")
                                  : errdetail("ptrack.map_size is %d MB; change tracking is on.", map_size_mb),
                 errhint("Correct the name in the configuration. ptrack's parameters are ptrack.map_size, "
                         "ptrack.capture, ptrack.wal_wait_timeout, ptrack.wal_summary_memory, "
                         "ptrack.wal_summary_keep_time, ptrack.wal_summary_max_files and "
                         "ptrack.verify_max_rate.")));
    }
}

/*
 * Which source runs, from ptrack.capture and the running server; FATAL when
 * the configured source cannot run here (the server does not start with
 * tracking in an unknown state, as for ptrack.map_size).
 */
/*
 * ptrack.capture's check hook, for a value set in a running server (ALTER
 * SYSTEM, a reload): "hooks" on a server without the core hooks would be
 * accepted now and stop the next start with the FATAL below, so it is
 * refused at once.  At startup (the library being preloaded) the value is
 * left to resolve_capture_source(), whose FATAL says the same.
 */
static bool check_capture_setting(int* newval, void** extra, GucSource source)
{
    if (*newval != kCaptureHooks || process_shared_preload_libraries_in_progress || hooks_available())
        return true;
    GUC_check_errdetail("This server has no ptrack core hooks (patches/pg%u-ptrack-hooks.patch); it would not "
                        "start with this setting.",
                        kServerMajor);
    GUC_check_errhint("Use ptrack.capture = auto or wal to capture changes from the WAL on this server.");
    return false;
}

static const CaptureSourceOps* resolve_capture_source()
{
    const bool have_hooks = hooks_available();
    if (capture_setting == kCaptureHooks && !have_hooks)
        ereport(FATAL, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                        errmsg("ptrack.capture is \"hooks\" but this server has no ptrack core hooks"),
                        errdetail("The running postgres binary does not export mdwrite_hook, mdextend_hook, "
                                  "copydir_hook and ProcessSyncRequests_hook (patches/pg%u-ptrack-hooks.patch).",
                                  kServerMajor),
                        errhint("Set ptrack.capture = auto or wal to capture changes from the WAL on this server.")));
    if (capture_setting == kCaptureHooks || (capture_setting == kCaptureAuto && have_hooks))
        return &kHooksSource;
    if (wal_level < WAL_LEVEL_REPLICA)
        ereport(FATAL, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("ptrack captures changes from the WAL on this server, which needs wal_level "
                               "\"replica\" or \"logical\""),
                        errdetail("Under wal_level = minimal, writes of new relations are not WAL-logged."),
                        errhint("Set wal_level = replica, or ptrack.map_size = 0 to turn change tracking off.")));
    if (max_replication_slots < 1)
        ereport(FATAL, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("ptrack captures changes from the WAL on this server, which needs a replication "
                               "slot, but max_replication_slots = 0"),
                        errhint("Set max_replication_slots to at least 1 (ptrack uses one slot, \"%s\").",
                                kFollowerSlotName)));
    return &kWalSource;
}

void _PG_init(void)
{
    if (!process_shared_preload_libraries_in_progress)
        return;

    /* The text as configured, read before DefineCustomIntVariable() replaces the placeholder. */
    const char* configured = GetConfigOption("ptrack.map_size", true, false);
    char* configured_copy = configured != NULL ? pstrdup(configured) : NULL;
    remember_configured_texts();

    DefineCustomIntVariable("ptrack.map_size",
                            "Size of the ptrack change map in shared memory.",
                            "0 disables change tracking. About 160 bytes per block changed between two "
                            "backups keeps false positives under 1%.",
                            &map_size_mb, 0, 0, kMaxMapSizeMb, PGC_POSTMASTER, GUC_UNIT_MB, NULL, NULL,
                            NULL);
    DefineCustomBoolVariable("ptrack.use_segment_summary",
                             "Lets ptrack_get_pagemapset skip unchanged files and 8 MB ranges (developer option).",
                             "Turning it off makes every block of every file be probed; for benchmarks.",
                             &use_segment_summary, true, PGC_SUSET, GUC_NO_SHOW_ALL | GUC_NOT_IN_SAMPLE, NULL,
                             NULL, NULL);
    DefineCustomEnumVariable("ptrack.capture", "Where ptrack captures changed blocks from.",
                             "auto: the core-patch hooks when the server has them, else the WAL; hooks; wal. "
                             "SHOW gives the source that runs.",
                             &capture_setting, kCaptureAuto, capture_options, PGC_POSTMASTER, 0, check_capture_setting,
                             NULL, NULL);
    define_wal_follower_gucs();
    define_summary_retention_gucs();
    define_verify_gucs();
    warn_unknown_settings();
    MarkGUCPrefixReserved("ptrack");
    check_configured_map_size(configured_copy);
    check_configured_texts();
    preloaded = true;

    prev_shmem_request_hook = shmem_request_hook;
    shmem_request_hook = ptrack_shmem_request;
    prev_shmem_startup_hook = shmem_startup_hook;
    shmem_startup_hook = ptrack_shmem_startup;

    if (map_size_mb == 0)
        return;
    const CaptureSourceOps* source = resolve_capture_source();
    set_running_source(source);
    /* SHOW ptrack.capture names the source that runs, not "auto". */
    SetConfigOption("ptrack.capture", source->name, PGC_POSTMASTER, PGC_S_OVERRIDE);
    source->install();
}
