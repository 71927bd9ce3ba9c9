# ptrack: block-level change tracking for PostgreSQL, built with PGXS.
#
#   make                 build against $(PG_CONFIG) (default: the patched server, see below)
#   make install         install into that server
#   make check-all       the unit tests, pg_regress and the TAP suite on one server
#                        ($(PG_CONFIG); PTRACK_CAPTURE=hooks|wal, else the server's
#                        hooks if it has them); scripts/run-tests.sh, the README's
#                        test command, runs them on every version and capture mode
#   make unittest        GoogleTest unit tests of the engine (no server needed)
#   make check-doc-refs  every file and function the docs and comments name exists
#   make -s pg-prefix    print the install prefix of the patched server
#
# The hooks this extension uses exist only in a server built with
# patches/pg15-ptrack-hooks.patch; scripts/build-postgres.sh builds one into
# a cache outside the repository.  PG_CONFIG selects another server built
# with the same patch.

# Goals that need no server: PGXS is not loaded when only these are asked for.
NO_SERVER_GOALS = pg-prefix patched-server unittest check-doc-refs
SERVER_GOALS := $(filter-out $(NO_SERVER_GOALS),$(or $(MAKECMDGOALS),all))

ifneq ($(SERVER_GOALS),)
ifeq ($(origin PG_CONFIG),undefined)
PATCHED_PREFIX := $(shell scripts/build-postgres.sh --print-prefix 2>/dev/null)
PG_CONFIG := $(PATCHED_PREFIX)/bin/pg_config
MISSING_SERVER = ptrack: no patched PostgreSQL server at $(or $(PATCHED_PREFIX),<unknown prefix>): run scripts/build-postgres.sh first (or give PG_CONFIG=/path/to/pg_config)
else
MISSING_SERVER = ptrack: PG_CONFIG=$(PG_CONFIG) not found (scripts/build-postgres.sh builds the patched server)
endif
ifeq ($(shell command -v '$(PG_CONFIG)' 2>/dev/null),)
$(error $(MISSING_SERVER))
endif
endif

MODULE_big = ptrack
EXTENSION = ptrack
DATA = ptrack--2.0.sql ptrack--2.0--2.1.sql ptrack--2.1--2.2.sql ptrack--2.2--2.3.sql ptrack--2.3--2.4.sql
PGFILEDESC = "ptrack - block-level change tracking"

# src/pg is layered by folder (docs/design.md section 7.1): ptrack.cpp, the
# entry point, on top; sql/, capture/{hooks,wal}/, capture/, persist/ and
# core/ beneath it.  Its files include each other by their path
# under src/pg ("core/shared_state.h").
ENGINE_SRCS = $(wildcard src/engine/*.cpp)
PG_SRCS = $(sort $(wildcard src/pg/*.cpp src/pg/*/*.cpp src/pg/*/*/*.cpp))
PG_HDRS = $(wildcard src/pg/*.h src/pg/*/*.h src/pg/*/*/*.h)
OBJS = $(ENGINE_SRCS:.cpp=.o) $(PG_SRCS:.cpp=.o)

# No C++ exception may reach PostgreSQL, whose frames cannot run C++ cleanups
# (and whose own errors longjmp over C++ frames): the extension is built with
# -fno-exceptions, so a throw expression or try block anywhere in src/ does
# not compile, and check-no-throw (below) fails the build if ptrack.so still
# calls a C++ runtime function that throws (std::string_view::substr's
# std::__throw_out_of_range_fmt, the throwing operator new...).  The unit
# tests (t/unit) are built separately and keep exceptions for GoogleTest.
#
# Symbols are hidden unless PostgreSQL must find them (_PG_init, the magic
# block, the SQL functions: all declared PGDLLEXPORT, which PostgreSQL 15
# leaves empty on Linux).  Hidden globals are reached without a GOT load and
# inline functions are not called through the PLT: this is on the write path.
PG_CPPFLAGS = -I$(CURDIR)/include -I$(CURDIR)/src/pg '-DPGDLLEXPORT=__attribute__((visibility("default")))'
PG_CXXFLAGS = -std=c++17 -fno-exceptions -fno-rtti -fvisibility=hidden -fvisibility-inlines-hidden \
	-Wall -Wextra -Wno-missing-field-initializers -Wno-register -Wno-unused-parameter
SHLIB_LINK = -lstdc++
# COPT ("flags added to whatever configure picked", PostgreSQL's Makefile.global)
# reaches only the C compiler there; pg_buildext puts the distribution's CFLAGS
# in it (Debian: -ffile-prefix-map for a reproducible build, the hardening
# flags), and every object here is C++.  Debian's CFLAGS are valid C++ flags.
ifdef COPT
PG_CXXFLAGS += $(COPT)
endif

REGRESS = ptrack_api ptrack_update ptrack_relocate ptrack_errors ptrack_status ptrack_schema
REGRESS_OPTS = --temp-instance=$(CURDIR)/tmp_check_regress --temp-config=$(CURDIR)/t/regress.conf
TAP_TESTS = 1

# The suite's wal mode (scripts/run-tests.sh sets PTRACK_CAPTURE): every test
# node (PostgreSQL::Test::Cluster appends TEMP_CONFIG at init) and the
# pg_regress instance capture from the WAL, also on a server with the hooks.
ifeq ($(PTRACK_CAPTURE),wal)
export TEMP_CONFIG = $(CURDIR)/t/capture_wal.conf
REGRESS_OPTS += --temp-config=$(CURDIR)/t/capture_wal.conf
endif

EXTRA_CLEAN = t/unit/engine_tests tmp_check tmp_check_regress tmp_check_regress_off \
	results regression.diffs regression.out

# No LLVM bitcode: the extension is C++ and the patched server is built without LLVM.
override with_llvm = no

ifneq ($(SERVER_GOALS),)
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)
endif

# Engine code never sees PostgreSQL (include/ptrack/engine_guard.h): its
# objects are compiled with our include directory only, so that a PostgreSQL
# header included there is not found, while every file under src/pg is told
# it is the layer allowed to mix both.
$(ENGINE_SRCS:.cpp=.o): override CPPFLAGS := -I$(CURDIR)/include
$(PG_SRCS:.cpp=.o): override CPPFLAGS += -DPTRACK_PG_LAYER

# PGXS tracks no header dependencies unless the server was configured with
# --enable-depend: rebuild every object when any of our headers changes.
$(OBJS): $(wildcard include/ptrack/*.h src/engine/*.h) $(PG_HDRS)

# The objects are built in the tree, for one server: built for 15 and then
# installed into 18 (make PG_CONFIG=.../18/bin/pg_config install), they would
# be linked into an ptrack.so that 18 refuses ("incompatible library") or,
# worse for a patched build of the same major version, accepts.  The stamp
# names the server the objects were compiled for (its version, its include
# directory, the compiler flags); when it changes, it is rewritten, and being
# newer than every object, it makes all of them rebuild.
ifneq ($(SERVER_GOALS),)
SERVER_STAMP = .ptrack-server-stamp
SERVER_ID := $(shell '$(PG_CONFIG)' --version) $(shell '$(PG_CONFIG)' --includedir-server) $(CXXFLAGS)
$(SERVER_STAMP): FORCE_STAMP
	@if [ "$$(cat $@ 2>/dev/null)" != '$(SERVER_ID)' ]; then \
		[ ! -e $@ ] || echo "ptrack: objects were built for another server ($$(cut -c1-60 $@)...): rebuilding all" >&2; \
		echo '$(SERVER_ID)' > $@; \
	fi
.PHONY: FORCE_STAMP
$(OBJS): $(SERVER_STAMP)
EXTRA_CLEAN += $(SERVER_STAMP)
endif

.PHONY: pg-prefix patched-server unittest check-all installcheck-off check-no-throw check-layers check-doc-refs

# The C++ runtime's entry points that throw or unwind, as ptrack.so would
# import them: throw and rethrow, the personality routine and _Unwind_Resume
# (a frame compiled with exception handling), std::__throw_* helpers called by
# library templates, the throwing operator new and new[].  A match removes
# ptrack.so, so that the next make fails again instead of installing it.
THROWING_IMPORTS = __cxa_throw|__cxa_rethrow|__cxa_allocate_exception|__gxx_personality_v0|_Unwind_Resume|_ZSt[0-9]+__throw_|_Zn[wa]m

ifneq ($(filter pg-prefix,$(MAKECMDGOALS)),pg-prefix)
all: check-no-throw check-layers
endif

# Every include and every call runs downward (docs/design.md section 7.1):
# scripts/check-layers.pl fails on a cycle among files or folders, in the
# includes and, from the objects just linked, in the calls.
check-layers: $(shlib)
	@scripts/check-layers.pl --objects

# The core patch's hooks are looked up by name at load time (capture_hooks.cpp),
# never linked against: a ptrack.so that imports one would fail to load on a
# stock server with "undefined symbol: mdwrite_hook" (ptrack < 2.2 did).
CORE_HOOK_SYMBOLS = mdwrite_hook|mdextend_hook|copydir_hook|ProcessSyncRequests_hook|mdimmedsync_hook

check-no-throw: $(shlib)
	@found=$$(nm -D --undefined-only $(shlib) | awk '{ print $$NF }' | grep -E '^($(CORE_HOOK_SYMBOLS))$$' || true); \
	if [ -n "$$found" ]; then \
		echo "$(shlib) links against core-patch hooks, so a stock server could not load it: $$found" >&2; \
		rm -f $(shlib); exit 1; \
	fi
	@found=$$(nm -D --undefined-only $(shlib) | awk '{ print $$NF }' | grep -E '^($(THROWING_IMPORTS))' || true); \
	if [ -n "$$found" ]; then \
		echo "$(shlib) calls C++ runtime functions that throw (build with -fno-exceptions, use nothing that throws):" >&2; \
		echo "$$found" | c++filt | sed 's/^/    /' >&2; \
		rm -f $(shlib); exit 1; \
	fi

pg-prefix:
	@scripts/build-postgres.sh --print-prefix

patched-server:
	scripts/build-postgres.sh >/dev/null

t/unit/engine_tests: $(ENGINE_SRCS) $(wildcard t/unit/*.cpp) $(wildcard include/ptrack/*.h)
	$(CXX) -std=c++17 -O2 -g -Wall -Wextra -Werror -Iinclude $(wildcard t/unit/*.cpp) $(ENGINE_SRCS) \
		-lgtest -lgtest_main -pthread -o $@

# With the unit tests (also run by the package build): no include cycle.
unittest: t/unit/engine_tests
	@scripts/check-layers.pl
	t/unit/engine_tests

# No document or comment names a file or function that does not exist (needs
# git: it reads the tracked files).  The test command runs it first.
check-doc-refs:
	@scripts/check-doc-refs.pl

# pg_regress with tracking off: the functions must refuse with the documented errors.
installcheck-off:
	$(pg_regress_installcheck) --temp-instance=$(CURDIR)/tmp_check_regress_off \
		--temp-config=$(CURDIR)/t/regress_off.conf ptrack_off

check-all: unittest
	$(MAKE) install
	$(MAKE) installcheck
	$(MAKE) installcheck-off
