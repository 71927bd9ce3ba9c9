/*
 * schema_check.h -- the functions that answer about changes refuse to answer
 * from a schema in which a role other than a superuser can create objects
 * (docs/operations.md, "Schema safety").
 *
 * Why: such a role can create ptrack_get_pagemapset(text) next to ptrack's
 * ptrack_get_pagemapset(pg_lsn).  A backup tool's call with an untyped
 * argument (pg_probackup sends one) then runs that function instead, which
 * can answer "nothing changed": a backup that silently misses blocks.
 * CREATE EXTENSION and ALTER EXTENSION UPDATE refuse such a schema
 * (ptrack--2.2--2.3.sql), but a later GRANT CREATE ON SCHEMA, ALTER SCHEMA
 * ... OWNER TO, ALTER ROLE ... NOSUPERUSER of its owner, a new owner of the
 * database (for a schema owned by pg_database_owner, as public is) or ALTER
 * EXTENSION ptrack SET SCHEMA opens the hole again.  An event trigger would
 * see only some of these (none of the commands on roles and databases,
 * which are shared objects, fire one), so the check is made where it cannot
 * be missed: at every call, failing closed with an ERROR that says how to
 * fix the schema.  pg_probackup calls ptrack_init_lsn() before
 * ptrack_get_pagemapset() in every PTRACK backup, so a backup fails before
 * it asks for the changes; ptrack_init_lsn() also refuses a schema that
 * already holds another function named like one of ptrack's that takes an
 * argument (planted while the schema was unsafe).
 *
 * Cost: the schema of the called function is remembered per backend (until
 * pg_proc changes), then one syscache lookup of the schema per call (and of
 * the database for a schema owned by pg_database_owner); superuser_arg()
 * keeps its own cache.
 *
 * INTERFACE: require_safe_schema().
 */
#ifndef PTRACK_PG_SCHEMA_CHECK_H
#define PTRACK_PG_SCHEMA_CHECK_H

extern "C" {
#include "postgres.h"

#include "fmgr.h"
}

namespace ptrack::pg {

/*
 * ERROR unless only superusers can create objects in the schema of the
 * function `fcinfo` calls; with `no_impostor`, also unless that schema holds
 * exactly one function of each name of ptrack's that takes an argument.
 * A C-style frame (ereport).
 */
void require_safe_schema(FunctionCallInfo fcinfo, bool no_impostor);

}  // namespace ptrack::pg

#endif
