#!/usr/bin/env bash
# Copyright (c) the ptrack authors
#
# main-job.sh -- the README's "main job": what ptrack saves a DBA.
#
# Builds this extension into a PostgreSQL server (by default Debian's own
# postgresql-15, where ptrack captures changes from the WAL; with --server
# patched, the server built with the core patch by scripts/build-postgres.sh,
# where it uses the hooks; with --pg-version 17 or 18, that version's build
# of scripts/build-postgres.sh, with wal capture unless --capture hooks; with
# --pg-config, the server of that pg_config),
# and runs scripts/main-job.pl on a throwaway cluster (Unix socket only, in a
# temporary directory): pgbench -i -s 10, a full backup, a day of changes to
# a few percent of the blocks, the incremental backup against a full one and
# against reading every page (pg_probackup DELTA), a restore verified against
# the source, and a summary.  Backups are taken with pg_probackup when it is
# there (--pg-probackup, $PTRACK_PG_PROBACKUP, or pg_probackup in PATH), else
# with the project's own tool (t/lib/PtrackBackup.pm).  Exits non-zero if the
# restored cluster differs from the source or amcheck finds corruption.
#
# Usage: scripts/main-job.sh [--pg-version 15|17|18] [--server stock|patched | --pg-config PATH [--installed]] [--capture auto|hooks|wal] [--scale N] [--transactions N] [--hot P] [--new P] [--clients N] [--pg-probackup PATH | --builtin] [--keep]
#   --pg-version   15 (default), 17 or 18; 17 and 18 run on the server of
#                  scripts/build-postgres.sh --pg-version N (built if needed,
#                  cached), which has the core hooks: --capture says which
#                  source (default wal, like Debian's stock 15)
#   --server       15 only: stock (default): Debian's postgresql-15, wal
#                  capture; patched: the server with the core patch, hooks
#                  capture
#   --pg-config    the pg_config of another PostgreSQL 15, 17 or 18
#                  installation (its capture: hooks if it has the core patch,
#                  else wal, unless --capture); ptrack is installed there
#   --installed    with --pg-config: ptrack is already installed in that
#                  server (scripts/run-tests.sh installs it once per server)
#   --capture      ptrack.capture of the job's cluster: auto (the server's
#                  hooks if it has them, else the WAL), hooks or wal
#   --scale N      pgbench scale, at least 10 (default 10)
#   --transactions N  transactions of the day (default 20000)
#   --hot P        percent of the accounts they update, the newest (default 2)
#   --new P        percent of new accounts inserted (default 1)
#   --clients N    pgbench clients (default 4)
#   --pg-probackup PATH  the pg_probackup binary (2.5.x for PostgreSQL 15)
#   --builtin      use the built-in tool even if pg_probackup is there
#   --keep         keep the temporary directory (data directories, backups,
#                  logs); it is also kept when the job fails
#
# PostgreSQL refuses to run as root (initdb, postgres and pg_ctl all check
# the effective uid; PostgreSQL::Test::Cluster's init bails out on initdb's
# "cannot be run as root").  So when started as root this script builds and
# installs as root, then runs the cluster part as the unprivileged user
# ptrack_test (created if missing, the same user scripts/run-tests.sh uses),
# with the temporary directory owned by that user and the two Perl files it
# needs copied into it (the checkout may not be readable by that user).
set -euo pipefail

usage() { sed -n '/^# Usage:/,/^#   --keep/p' "$0" | sed 's/^# \{0,1\}//' >&2; }

keep=0
installed=0
server=stock
pg_version=15
capture=
pg_config=
args=()
while [ $# -gt 0 ]; do
	case "$1" in
		--keep) keep=1 ;;
		--installed) installed=1 ;;
		--server)
			[ $# -ge 2 ] || { usage; exit 2; }
			server=$2; shift ;;
		--server=*) server=${1#--server=} ;;
		--pg-version)
			[ $# -ge 2 ] || { usage; exit 2; }
			pg_version=$2; shift ;;
		--pg-version=*) pg_version=${1#--pg-version=} ;;
		--capture)
			[ $# -ge 2 ] || { usage; exit 2; }
			capture=$2; shift ;;
		--capture=*) capture=${1#--capture=} ;;
		--pg-config)
			[ $# -ge 2 ] || { usage; exit 2; }
			pg_config=$2; server=custom; shift ;;
		--pg-config=*) pg_config=${1#--pg-config=}; server=custom ;;
		--scale|--transactions|--hot|--new|--clients|--pg-probackup)
			[ $# -ge 2 ] || { usage; exit 2; }
			args+=("$1" "$2"); shift ;;
		--scale=*|--transactions=*|--hot=*|--new=*|--clients=*|--pg-probackup=*|--builtin) args+=("$1") ;;
		-h|--help) usage; exit 0 ;;
		*) echo "main-job: unknown option $1" >&2; usage; exit 2 ;;
	esac
	shift
done

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

case $pg_version in
	15) ;;
	17|18)
		# One build per version, with the hooks: it serves both sources.
		[ "$server" = custom ] || server=build
		[ -n "$capture" ] || capture=wal ;;
	*) echo "main-job: --pg-version must be 15, 17 or 18" >&2; usage; exit 2 ;;
esac
case ${capture:-auto} in
	auto|hooks|wal) ;;
	*) echo "main-job: --capture must be auto, hooks or wal" >&2; usage; exit 2 ;;
esac

if ! perl -MIPC::Run -e 1 2>/dev/null; then
	if [ "$(id -u)" -eq 0 ]; then
		apt-get install -y --no-install-recommends libipc-run-perl >&2
	else
		echo "main-job: the Perl module IPC::Run is missing (apt-get install libipc-run-perl)" >&2
		exit 1
	fi
fi

case $server in
	stock)
		if ! dpkg -s postgresql-server-dev-15 >/dev/null 2>&1; then
			if [ "$(id -u)" -eq 0 ]; then
				apt-get install -y --no-install-recommends postgresql-15 postgresql-server-dev-15 >&2
			else
				echo "main-job: postgresql-server-dev-15 is missing (apt-get install postgresql-server-dev-15)" >&2
				exit 1
			fi
		fi
		pg_config=/usr/lib/postgresql/15/bin/pg_config ;;
	patched)
		echo "main-job: building the patched PostgreSQL 15 (cached after the first run)..." >&2
		pg_config="$(scripts/build-postgres.sh | tail -n 1)/bin/pg_config" ;;
	build)
		# PTRACK_PATCHED_PREFIX_N: a private copy of the build (as for
		# scripts/run-tests.sh).
		prefix_var=PTRACK_PATCHED_PREFIX_$pg_version
		if [ -n "${!prefix_var:-}" ]; then
			pg_config=${!prefix_var}/bin/pg_config
		else
			echo "main-job: building PostgreSQL $pg_version with the core patch (cached after the first run)..." >&2
			pg_config="$(scripts/build-postgres.sh --pg-version "$pg_version" | tail -n 1)/bin/pg_config"
		fi ;;
	custom)
		[ -x "$pg_config" ] || { echo "main-job: --pg-config $pg_config is not executable" >&2; exit 2; } ;;
	*) echo "main-job: --server must be stock or patched" >&2; usage; exit 2 ;;
esac
if [ "$installed" = 1 ]; then
	[ "$server" = custom ] || { echo "main-job: --installed goes with --pg-config" >&2; usage; exit 2; }
	[ -f "$("$pg_config" --pkglibdir)/ptrack.so" ] ||
		{ echo "main-job: --installed, but $("$pg_config" --pkglibdir) has no ptrack.so" >&2; exit 1; }
	echo "main-job: ptrack as installed in $("$pg_config" --pkglibdir) ($("$pg_config" --version))" >&2
elif command -v flock >/dev/null 2>&1; then
	echo "main-job: installing ptrack into $("$pg_config" --pkglibdir) ($("$pg_config" --version))" >&2
	flock /tmp/ptrack-build.lock make -s PG_CONFIG="$pg_config" install >&2
else
	echo "main-job: installing ptrack into $("$pg_config" --pkglibdir) ($("$pg_config" --version))" >&2
	make -s PG_CONFIG="$pg_config" install >&2
fi

pgxs_dir=$(dirname "$(dirname "$("$pg_config" --pgxs)")")
perl_lib="$pgxs_dir/test/perl"
pg_regress="$pgxs_dir/test/regress/pg_regress"
[ -f "$perl_lib/PostgreSQL/Test/Cluster.pm" ] || { echo "main-job: no PostgreSQL::Test::Cluster under $perl_lib" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/ptrack-main-job.XXXXXX")
mkdir -p "$work/lib" "$work/portlock"
cp scripts/main-job.pl "$work/"
cp t/lib/PtrackBackup.pm t/lib/PtrackVerify.pm t/lib/PtrackOracle.pm t/lib/PtrackUnits.pm "$work/lib/"

run_as=()
if [ "$(id -u)" -eq 0 ]; then
	id ptrack_test >/dev/null 2>&1 || useradd --system --create-home --shell /bin/bash ptrack_test
	chown -R ptrack_test "$work"
	run_as=(runuser -u ptrack_test --)
fi

job_env=(PATH="$("$pg_config" --bindir):$PATH" PERL5LIB="$perl_lib:$work/lib"
	TESTDIR="$work" TMPDIR="$work" PG_REGRESS="$pg_regress"
	# PostgreSQL 17 and later put the data and logs under these (15: under TESTDIR).
	TESTDATADIR="$work/tmp_check" TESTLOGDIR="$work/tmp_check/log"
	PG_TEST_PORT_DIR="$work/portlock")
[ -n "${PTRACK_PG_PROBACKUP:-}" ] && job_env+=(PTRACK_PG_PROBACKUP="$PTRACK_PG_PROBACKUP")
# The capture source: PostgreSQL::Test::Cluster appends TEMP_CONFIG to the
# configuration of every cluster it initialises.
if [ -n "$capture" ] && [ "$capture" != auto ]; then
	echo "ptrack.capture = $capture" >"$work/capture.conf"
	job_env+=(TEMP_CONFIG="$work/capture.conf")
fi
# PostgreSQL::Test::Cluster removes its data directories at exit unless told.
[ "$keep" -eq 1 ] && job_env+=(PG_TEST_NOCLEAN=1)

status=0
(cd "$work" && "${run_as[@]}" env "${job_env[@]}" perl "$work/main-job.pl" "${args[@]}") || status=$?

if [ "$status" -ne 0 ] || [ "$keep" -eq 1 ]; then
	echo "main-job: kept $work (logs in $work/tmp_check/log)" >&2
else
	rm -rf "$work"
fi
exit "$status"
