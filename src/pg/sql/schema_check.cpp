/*
 * schema_check.cpp -- see schema_check.h.
 *
 * The rule is the install script's (ptrack--2.2--2.3.sql): the schema is
 * safe when its owner is a superuser and every role granted CREATE on it
 * is a superuser, PUBLIC not among them.  pg_database_owner stands for the
 * database's owner.  A member of a role granted CREATE counts through that
 * role, which is then not a superuser (a member of a superuser role is one
 * in effect), so the ACL's own entries decide: no walk over pg_roles.
 */
extern "C" {
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_database.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_proc.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/catcache.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"
}

#include "sql/schema_check.h"

namespace ptrack::pg {

namespace {

/* The called function's schema, remembered until pg_proc changes (ALTER EXTENSION ... SET SCHEMA). */
Oid remembered_function = InvalidOid;
Oid remembered_schema = InvalidOid;
bool callback_registered = false;

/* ptrack's functions that take an argument: a function of the same name can take a call meant for them. */
constexpr const char* kNamesWithArguments[] = {"ptrack_get_pagemapset", "ptrack_get_change_stat", "ptrack_verify"};

void forget_function(Datum, int, uint32)
{
    remembered_function = InvalidOid;
}

Oid schema_of(Oid function)
{
    if (!callback_registered) {
        CacheRegisterSyscacheCallback(PROCOID, forget_function, (Datum) 0);
        callback_registered = true;
    }
    if (function != remembered_function) {
        remembered_schema = get_func_namespace(function);
        remembered_function = function;
    }
    return remembered_schema;
}

/* The role a schema's owner or grantee stands for: the database's owner for pg_database_owner. */
Oid actual_role(Oid role)
{
    if (role != ROLE_PG_DATABASE_OWNER)
        return role;
    HeapTuple tuple = SearchSysCache1(DATABASEOID, ObjectIdGetDatum(MyDatabaseId));
    if (!HeapTupleIsValid(tuple))
        elog(ERROR, "cache lookup failed for database %u", MyDatabaseId);
    const Oid owner = reinterpret_cast<Form_pg_database>(GETSTRUCT(tuple))->datdba;
    ReleaseSysCache(tuple);
    return owner;
}

/* "role \"name\"" (and the database's owner it stands for) in `buf`. */
const char* describe_role(Oid role, char* buf, size_t len)
{
    if (role == ROLE_PG_DATABASE_OWNER)
        snprintf(buf, len, "pg_database_owner (the database's owner, \"%s\")",
                 GetUserNameFromId(actual_role(role), false));
    else
        snprintf(buf, len, "\"%s\"", GetUserNameFromId(role, false));
    return buf;
}

/*
 * Why roles other than superusers can create objects in `schema`
 * (completing "... in it: "), in `buf`; nullptr if none can.  Sets *name to
 * the schema's name (palloc'd).
 */
const char* why_unsafe(Oid schema, char** name, char* buf, size_t len)
{
    HeapTuple tuple = SearchSysCache1(NAMESPACEOID, ObjectIdGetDatum(schema));
    if (!HeapTupleIsValid(tuple))
        elog(ERROR, "cache lookup failed for schema %u", schema);
    const auto* form = reinterpret_cast<Form_pg_namespace>(GETSTRUCT(tuple));
    *name = pstrdup(NameStr(form->nspname));
    char role[NAMEDATALEN * 2 + 64];
    const char* why = nullptr;
    if (!superuser_arg(actual_role(form->nspowner))) {
        snprintf(buf, len, "its owner %s is not a superuser", describe_role(form->nspowner, role, sizeof(role)));
        why = buf;
    }
    bool is_null = true;
    const Datum acl_datum = SysCacheGetAttr(NAMESPACEOID, tuple, Anum_pg_namespace_nspacl, &is_null);
    if (why == nullptr && !is_null) { /* NULL: the default, only the owner may create */
        const Acl* acl = DatumGetAclP(acl_datum);
        const AclItem* items = ACL_DAT(acl);
        for (int i = 0; i < ACL_NUM(acl) && why == nullptr; ++i) {
            if ((ACLITEM_GET_PRIVS(items[i]) & ACL_CREATE) == 0)
                continue;
            if (items[i].ai_grantee == ACL_ID_PUBLIC) {
                snprintf(buf, len, "PUBLIC (every role) has CREATE on it");
                why = buf;
            } else if (!superuser_arg(actual_role(items[i].ai_grantee))) {
                snprintf(buf, len, "%s has CREATE on it, and is not a superuser",
                         describe_role(items[i].ai_grantee, role, sizeof(role)));
                why = buf;
            }
        }
    }
    ReleaseSysCache(tuple);
    return why;
}

/* The name of one of ptrack's functions of which `schema` holds more than one, or nullptr. */
const char* impostor_name(Oid schema)
{
    for (const char* name : kNamesWithArguments) {
        CatCList* list = SearchSysCacheList1(PROCNAMEARGSNSP, CStringGetDatum(name));
        int in_schema = 0;
        for (int i = 0; i < list->n_members; ++i)
            if (reinterpret_cast<Form_pg_proc>(GETSTRUCT(&list->members[i]->tuple))->pronamespace == schema)
                in_schema++;
        ReleaseSysCacheList(list);
        if (in_schema > 1)
            return name;
    }
    return nullptr;
}

}  // namespace

void require_safe_schema(FunctionCallInfo fcinfo, bool no_impostor)
{
    const Oid schema = schema_of(fcinfo->flinfo->fn_oid);
    char* name = nullptr;
    char why[NAMEDATALEN * 2 + 160];
    if (why_unsafe(schema, &name, why, sizeof(why)) != nullptr)
        ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
                        errmsg("ptrack refuses to answer from schema \"%s\": roles other than superusers can create "
                               "objects in it",
                               name),
                        errdetail("In schema \"%s\", %s. Such a role could create a function with the name of one "
                                  "of ptrack's that a backup tool's call reaches instead, and the backup would "
                                  "silently miss blocks.",
                                  name, why),
                        errhint("Take CREATE away: REVOKE CREATE ON SCHEMA %s FROM PUBLIC (and from the role named), "
                                "with ALTER SCHEMA %s OWNER TO a superuser if its owner is not one. Or move ptrack "
                                "into a schema of its own: CREATE SCHEMA ptrack; ALTER EXTENSION ptrack SET SCHEMA "
                                "ptrack.",
                                quote_identifier(name), quote_identifier(name))));
    const char* twice = no_impostor ? impostor_name(schema) : nullptr;
    if (twice != nullptr)
        ereport(ERROR, (errcode(ERRCODE_DUPLICATE_FUNCTION),
                        errmsg("ptrack refuses to answer from schema \"%s\": it holds another function named %s",
                               name, twice),
                        errdetail("A backup tool's call of %s.%s could reach that function instead of ptrack's, and "
                                  "the backup would silently miss blocks.",
                                  quote_identifier(name), twice),
                        errhint("Find out who created it and why, drop it, then retry.")));
    pfree(name);
}

}  // namespace ptrack::pg

using namespace ptrack::pg;

extern "C" {
PG_FUNCTION_INFO_V1(ptrack_check_schema);
}

/*
 * The same check once, for the update script ptrack--2.3--2.4.sql, which
 * creates this function in the extension's schema, calls it and drops it.
 */
extern "C" PGDLLEXPORT Datum ptrack_check_schema(PG_FUNCTION_ARGS)
{
    require_safe_schema(fcinfo, true);
    PG_RETURN_VOID();
}
