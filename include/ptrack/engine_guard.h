/*
 * engine_guard.h -- keeps PostgreSQL out of the engine.
 *
 * The engine (src/engine, include/ptrack) is plain C++17: it is unit-tested
 * and benchmarked without a server, and it must stay free of PostgreSQL's
 * macros, types and error handling (an ereport in engine code would longjmp
 * over C++ frames; see src/pg/core/boundary.h).  Only src/pg uses PostgreSQL.
 *
 * Every engine header includes this file first.  In a translation unit that
 * is not part of src/pg (the Makefile compiles src/pg with
 * -DPTRACK_PG_LAYER), a PostgreSQL header included before it is an #error,
 * and one included after it stops the build at the identifiers poisoned
 * below: the include guards of postgres.h, postgres_fe.h, c.h and
 * postgres_ext.h, and PG_VERSION_NUM, which pg_config.h defines.  The
 * Makefile also compiles src/engine without PostgreSQL's include
 * directories, so that #include "postgres.h" there is not even found.
 */
#ifndef PTRACK_ENGINE_GUARD_H
#define PTRACK_ENGINE_GUARD_H

#ifndef PTRACK_PG_LAYER
#if defined(POSTGRES_H) || defined(POSTGRES_FE_H) || defined(C_H) || defined(POSTGRES_EXT_H) || \
    defined(PG_VERSION_NUM)
#error "engine code (src/engine, include/ptrack) must not include PostgreSQL headers; only src/pg may"
#endif
#pragma GCC poison POSTGRES_H POSTGRES_FE_H C_H POSTGRES_EXT_H PG_VERSION_NUM
#endif

#endif
