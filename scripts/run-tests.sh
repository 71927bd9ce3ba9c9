#!/usr/bin/env bash
# run-tests.sh -- the README's test command: installs and builds everything it
# needs, then runs every suite on PostgreSQL 15, 17 and 18 in both capture
# modes:
#
#   the docs' references (scripts/check-doc-refs.pl), the include layering
#   (scripts/check-layers.pl) and the engine unit tests (GoogleTest, no server);
#   then per version and capture mode a "suite": pg_regress (tracking on and
#   off) and the TAP tests (t/*.pl), on these servers:
#
#     version  hooks                          wal
#     15       patched 15 (build-postgres.sh) Debian's stock postgresql-15
#     17, 18   patched N (build-postgres.sh --pg-version N), both modes;
#              wal with ptrack.capture = wal (the Makefile's TEMP_CONFIG,
#              t/capture_wal.conf), and t/020_wal_capture.pl's nodes on
#              the same build's bin/postgres-nohooks (no hooks, capture =
#              auto: the library must choose the WAL by itself, as on a
#              distribution's stock server)
#
#   What runs: everything on 15 and 18; on 17 the core set below (the
#   version-dependent paths), unless --full, or --pg-version 17 alone.
#
#   scripts/test-debian-cluster.sh (a Debian cluster starts on the patched
#   15; needs root) runs with the 15 hooks suite; with --package (or
#   PTRACK_TEST_PACKAGE=1) scripts/test-debian-package.sh builds the Debian
#   package, installs it in a private mount namespace and runs pg_regress
#   against a stock cluster (needs root; CI runs it).
#
# Scheduling (the CI budget, docs/operations.md "Tests: what runs where"):
# the servers that are not cached are built one after another in the
# background (15, 18, 17) while the suites run, at most --jobs of them at a
# time (default 2); a suite starts as soon as its server is there, the 15
# wal suite at once (Debian's server needs no build).  Each suite runs in its
# own copy of the tree (its tmp_check, its ports' socket directories), so
# suites do not disturb each other.  Every suite's output goes to
# test-logs/<version>-<mode>.log; the TAP and pg_regress result lines are
# printed when it ends, with the last lines of the log if it failed, and its
# logs (tmp_check/log, regression.diffs) are kept in test-logs/<version>-<mode>/.
#
# Each TAP test runs in both modes unless it says it is specific to one
# (PtrackCluster::capture_mode()).  PostgreSQL refuses to run as root, and CI
# runs as root: in that case the suites run as an unprivileged user
# (ptrack_test, created if missing).
#
# Usage: scripts/run-tests.sh [--pg-version 15|17|18|all] [--mode hooks|wal|both]
#            [--full | --core] [--jobs N] [--package] [--no-pg-probackup]
#            [--soak-minutes M] [make args, e.g. PROVE_TESTS='t/001_page_lsn_oracle.pl']
#   --pg-version  one version, or all (default)
#   --full        the whole suite on every version (17 included)
#   --core        only the core set, on every version
#   --jobs N      suites running at the same time (default 2, PTRACK_TEST_JOBS)
#   --no-pg-probackup  skip the pg_probackup chains and build no pg_probackup
#   --soak-minutes M   a soak of M minutes per version and mode after its suite
#
# Servers: built into the cache by scripts/build-postgres.sh unless given;
# each run copies them into its work directory and installs ptrack there
# only (private_server below), so that several work trees on one machine
# never test each other's ptrack.so:
#   PTRACK_STOCK_PG_CONFIG      Debian's stock 15 (default /usr/lib/postgresql/15/bin/pg_config)
#   PTRACK_PATCHED_PREFIX_15 (or PTRACK_PATCHED_PREFIX), PTRACK_PATCHED_PREFIX_17,
#   PTRACK_PATCHED_PREFIX_18    a patched server's prefix
#
# pg_probackup, the real client: the tests' pg_probackup chains (t/018,
# t/023's FULL + PTRACK + PTRACK chain, t/026) and the main job
# (scripts/main-job.sh, run after each suite's TAP tests) use
#   PTRACK_PG_PROBACKUP_15, _17, _18  the binary for that version's suites
#   PTRACK_PG_PROBACKUP               the same, when one --pg-version is given
#   PTRACK_PG_PROBACKUP_SRC           a pg_probackup checkout or tarball
# and otherwise the vendored source (scripts/build-pg-probackup.sh
# --print-source: ../shared/vendor/pg_probackup-*.tar.gz), built for each
# version by scripts/build-pg-probackup.sh (cached) against the patched
# build.  Without any of them the pg_probackup parts are skipped, and each
# suite's header says so; in CI (CI=true) or with
# PTRACK_REQUIRE_PG_PROBACKUP=1 that is a failure instead, and the tests
# fail rather than skip.  --no-pg-probackup skips them on purpose (a
# developer's quick round).
#
# The soak (scripts/soak.sh): after each suite and its main job, a short
# randomized run of --soak-minutes M (default 0: none; CI's .ci/run gives
# some) with a fresh seed per run, printed (PTRACK_SOAK_SEED fixes it).
set -euo pipefail
# Job control: every background job (the server builds, each suite) gets its
# own process group, so that an interrupted run stops all of it.
set -m
cd "$(dirname "$0")/.."
repo=$(pwd)

# The core set on 17: the tests whose outcome depends on the server version's
# internals (write paths, WAL records and their decoding, crash recovery, the
# control file and checkpoints, backups restored by the server) or that prove
# the stock path (020) and the pg_probackup chains (018, 023, 026: the real
# client on every version and mode), the record kinds that
# differ by version (030), the summaries' retention (033: cheap, and the
# brief of issue 21 asks for it on every version), failures (034) and the
# file watch (039: the kernel events of the version's own writes), the
# follower's reads from the WAL buffers (043: 17 and 18 have them),
# plus the cheap ones.
# About half of the suite's time (measured: 304 of 619 s on 15, wal).  Left
# out: 012-014, 017, 019, 022, 024, 025 (their logic is version-independent
# once the above holds on 17, and all of them run on 15 and 18).
CORE_TESTS=(
	t/001_page_lsn_oracle.pl t/002_temp_unlogged.pl t/003_incremental_backup.pl
	t/010_restart_crash.pl t/011_untrusted_map.pl t/015_crash_windows.pl
	t/016_bypass_writes.pl t/018_fresh_standby.pl t/020_wal_capture.pl t/021_wal_limits.pl
	t/023_backup_role.pl t/026_archive_recovery.pl t/027_hostile_schema.pl t/028_disk_full.pl
	t/029_startup_leftovers.pl t/030_record_kinds.pl
	t/033_summary_retention.pl t/034_summary_failures.pl t/039_file_watch.pl t/042_hash_bucket_holes.pl
	t/043_wal_buffer_reads.pl
)

versions=all
mode=both
set_choice=auto
jobs=${PTRACK_TEST_JOBS:-2}
package=${PTRACK_TEST_PACKAGE:-0}
pg_probackup_wanted=1
soak_minutes=${PTRACK_SOAK_MINUTES:-0}
while [ $# -gt 0 ]; do
	case $1 in
		--pg-version|--mode|--jobs|--soak-minutes)
			[ $# -ge 2 ] || { echo "run-tests: $1 needs a value" >&2; exit 2; }
			case $1 in
				--pg-version) versions=$2 ;;
				--mode) mode=$2 ;;
				--jobs) jobs=$2 ;;
				--soak-minutes) soak_minutes=$2 ;;
			esac
			shift 2 ;;
		--no-pg-probackup) pg_probackup_wanted=0; shift ;;
		--full) set_choice=full; shift ;;
		--core) set_choice=core; shift ;;
		--package) package=1; shift ;;
		-h|--help) sed -n '/^# Usage:/,/^#   --jobs/p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
		-*) echo "run-tests: unknown option $1 (see --help)" >&2; exit 2 ;;
		*) break ;;
	esac
done
case $mode in hooks|wal|both) ;; *) echo "run-tests: --mode must be hooks, wal or both" >&2; exit 2 ;; esac
case $versions in
	all) version_list=(15 18 17) ;;
	15|17|18) version_list=("$versions") ;;
	*) echo "run-tests: --pg-version must be 15, 17, 18 or all" >&2; exit 2 ;;
esac
case $jobs in ''|*[!0-9]*|0) echo "run-tests: --jobs must be a positive number" >&2; exit 2 ;; esac
case $soak_minutes in ''|*[!0-9]*) echo "run-tests: --soak-minutes must be a whole number of minutes (0: no soak)" >&2; exit 2 ;; esac
modes=(hooks wal)
[ "$mode" = both ] || modes=("$mode")

STOCK_PG_CONFIG=${PTRACK_STOCK_PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
declare -A given_prefix=(
	[15]=${PTRACK_PATCHED_PREFIX_15:-${PTRACK_PATCHED_PREFIX:-}}
	[17]=${PTRACK_PATCHED_PREFIX_17:-}
	[18]=${PTRACK_PATCHED_PREFIX_18:-}
)

# The test set of one version: full or core.
test_set() {
	case $set_choice in
		full) echo full ;;
		core) echo core ;;
		*) [ "$1" = 17 ] && [ "$versions" = all ] && echo core || echo full ;;
	esac
}

# Which servers are needed: a patched build for hooks on any version and for
# wal on 17/18; Debian's stock server for wal on 15.
need_build=()
need_stock=0
for v in "${version_list[@]}"; do
	for m in "${modes[@]}"; do
		if [ "$v" = 15 ] && [ "$m" = wal ]; then
			need_stock=1
		elif [[ " ${need_build[*]} " != *" $v "* ]]; then
			need_build+=("$v")
		fi
	done
done
# pg_probackup: the source to build it from, unless every binary is given.
require_pg_probackup=${PTRACK_REQUIRE_PG_PROBACKUP:-0}
[ "${CI:-}" = true ] && require_pg_probackup=1
pg_probackup_src=
if [ "$pg_probackup_wanted" = 1 ]; then
	pg_probackup_src=${PTRACK_PG_PROBACKUP_SRC:-$(scripts/build-pg-probackup.sh --print-source 2>/dev/null || true)}
	if [ -z "$pg_probackup_src" ] && [ "$require_pg_probackup" = 1 ]; then
		for v in "${version_list[@]}"; do
			var=PTRACK_PG_PROBACKUP_$v
			if [ -z "${!var:-}" ] && ! { [ -n "${PTRACK_PG_PROBACKUP:-}" ] && [ "$versions" = "$v" ]; }; then
				echo "run-tests: no pg_probackup for PostgreSQL $v and no source to build it from" \
					"(PTRACK_PG_PROBACKUP_SRC, or the vendored ../shared/vendor/pg_probackup-*.tar.gz);" \
					"CI must not skip the pg_probackup chains" >&2
				exit 1
			fi
		done
	fi
elif [ "$require_pg_probackup" = 1 ]; then
	echo "run-tests: --no-pg-probackup, but CI (CI=true) or PTRACK_REQUIRE_PG_PROBACKUP=1 requires the pg_probackup chains" >&2
	exit 2
fi

# The package test also starts the packaged library on the patched 15, and
# a pg_probackup for 15 is built against it.
if { [ "$package" = 1 ] || { [ -n "$pg_probackup_src" ] && [[ " ${version_list[*]} " == *" 15 "* ]]; }; } &&
	[[ " ${need_build[*]} " != *" 15 "* ]]; then
	need_build=(15 "${need_build[@]}")
fi

need_pkgs=()
pkgs=(libgtest-dev libipc-run-perl g++ postgresql-15 postgresql-server-dev-15 gdb)
# scripts/test-debian-cluster.sh's (installed here, before any server build
# runs apt in the background).
[ "$(id -u)" -eq 0 ] && [[ " ${need_build[*]} " == *" 15 "* ]] && pkgs+=(postgresql-common ssl-cert)
# The package build: dpkg-buildpackage, dh, pg_buildext (debian/control).
[ "$package" = 1 ] && pkgs+=(dpkg-dev debhelper postgresql-server-dev-all)
for p in "${pkgs[@]}"; do
	dpkg -s "$p" >/dev/null 2>&1 || need_pkgs+=("$p")
done
if [ ${#need_pkgs[@]} -gt 0 ]; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "run-tests: missing packages: ${need_pkgs[*]} (install them as root)" >&2
		exit 1
	fi
	apt-get install -y --no-install-recommends "${need_pkgs[@]}" >&2 ||
		{ apt-get update >&2 && apt-get install -y --no-install-recommends "${need_pkgs[@]}" >&2; }
fi

if [ "$(id -u)" -eq 0 ]; then
	id ptrack_test >/dev/null 2>&1 || useradd --system --create-home --shell /bin/bash ptrack_test
fi

t_start=$(date +%s)
elapsed() { echo $(($(date +%s) - t_start)); }
say() { echo "run-tests: [$(printf '%4d' "$(elapsed)")s] $*" >&2; }

work=$(mktemp -d /tmp/ptrack-tests.XXXXXX)
chmod 755 "$work"
state=$work/state
mkdir -p "$state" "$repo/test-logs"
jobs_running=()   # PIDs of the background jobs (each its own process group)
cleanup() {
	local p
	for p in "${jobs_running[@]}" ${build_pid:-}; do
		kill -TERM -- "-$p" 2>/dev/null || true
	done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- the servers: the cached ones at once, the others built in the background

declare -A prefix=()
for v in "${need_build[@]}"; do
	if [ -n "${given_prefix[$v]}" ]; then
		[ -x "${given_prefix[$v]}/bin/pg_config" ] ||
			{ echo "run-tests: no pg_config in the given prefix ${given_prefix[$v]} (PostgreSQL $v)" >&2; exit 1; }
		echo "${given_prefix[$v]}" >"$state/prefix-$v"
	fi
done
build_queue=()
for v in "${need_build[@]}"; do
	[ -e "$state/prefix-$v" ] || build_queue+=("$v")
done
if [ ${#build_queue[@]} -gt 0 ]; then
	say "building the servers in the background: PostgreSQL ${build_queue[*]} (cached ones return at once; logs: test-logs/build-N.log)"
	(
		for v in "${build_queue[@]}"; do
			s=$(date +%s)
			if p=$(scripts/build-postgres.sh --pg-version "$v" 2>"test-logs/build-$v.log" | tail -n 1) && [ -n "$p" ]; then
				echo "$p" >"$state/prefix-$v.tmp"
				echo $(($(date +%s) - s)) >"$state/build-seconds-$v"
				mv "$state/prefix-$v.tmp" "$state/prefix-$v"
			else
				: >"$state/build-failed-$v"
			fi
		done
	) &
	build_pid=$!
fi

make -s check-doc-refs

# The engine's unit tests (no server), in their own copy of the tree.
unit_tests() {
	mkdir -p "$work/unit"
	cp -a "$repo/." "$work/unit/"
	rm -rf "$work/unit/test-logs"
	make -C "$work/unit" -s unittest
	rm -rf "$work/unit"
}

# --- ptrack built and installed once per server ------------------------------

# private_server TAG PG_CONFIG: copies the server of PG_CONFIG into
# $work/server-TAG (scripts/private-server.sh) and prints the copy's
# pg_config: ptrack is installed into the copy only, and a run never shares
# a ptrack.so with another work tree's run on the same machine, nor leaves
# one behind in the cache or in Debian's server.
private_server() {
	scripts/private-server.sh "$2" "$work/server-$1"
}

# prepare TAG PG_CONFIG: copies the server (private_server), builds ptrack
# in a copy of the tree and installs it into the server's copy (once per
# TAG, serialised by a lock: the hooks and wal suites of 17/18 share one
# install).  The built tree is $work/build-TAG, the copy's pg_config is in
# $state/pg_config-TAG.
prepare() {
	local tag=$1
	(
		flock 9
		[ -e "$state/installed-$tag" ] && exit 0
		[ -e "$state/install-failed-$tag" ] && exit 1
		local pg_config
		pg_config=$(private_server "$tag" "$2") || { : >"$state/install-failed-$tag"; exit 1; }
		echo "$pg_config" >"$state/pg_config-$tag"
		local tree=$work/build-$tag
		rm -rf "$tree"
		mkdir -p "$tree"
		cp -a "$repo/." "$tree/"
		rm -rf "$tree/test-logs"
		if { make -s -C "$tree" PG_CONFIG="$pg_config" clean && make -s -C "$tree" -j2 PG_CONFIG="$pg_config" install; } \
			>"$repo/test-logs/ptrack-$tag.log" 2>&1; then
			: >"$state/installed-$tag"
		else
			: >"$state/install-failed-$tag"
			echo "run-tests: building or installing ptrack into $("$pg_config" --bindir) failed:" >&2
			tail -n 40 "$repo/test-logs/ptrack-$tag.log" >&2
			exit 1
		fi
	) 9>"$state/lock-$tag"
}

# pg_probackup_for V: the pg_probackup binary for version V's suites, if any
# (header: "pg_probackup"); built from $pg_probackup_src when there is one.
pg_probackup_for() {
	local v=$1 var=PTRACK_PG_PROBACKUP_$1
	if [ "$pg_probackup_wanted" = 0 ]; then
		return 0
	elif [ -n "${!var:-}" ]; then
		echo "${!var}"
	elif [ -n "${PTRACK_PG_PROBACKUP:-}" ] && [ "$versions" = "$v" ]; then
		echo "$PTRACK_PG_PROBACKUP"
	elif [ -n "$pg_probackup_src" ]; then
		# Against the patched build of V (also for the stock 15's suite:
		# pg_probackup needs the same major version, not the same server).
		# The stock 15's suite starts before the patched 15 is built.
		while [ ! -e "$state/prefix-$v" ] && [ ! -e "$state/build-failed-$v" ] &&
			[ -n "${build_pid:-}" ] && kill -0 "$build_pid" 2>/dev/null; do
			sleep 5
		done
		[ -e "$state/prefix-$v" ] || { echo "run-tests: no PostgreSQL $v build to build pg_probackup against" >&2; return 1; }
		(
			flock 9
			PTRACK_PG_PREFIX=$(cat "$state/prefix-$v") scripts/build-pg-probackup.sh --pg-version "$v" \
				"$pg_probackup_src" 2>"$repo/test-logs/pg_probackup-$v.log" | tail -n 1
		) 9>"$state/lock-pg_probackup" || {
			echo "run-tests: building pg_probackup for $v failed (test-logs/pg_probackup-$v.log)" >&2
			return 1
		}
	fi
}

# suite V M: one version's pg_regress and TAP suite in one capture mode, in a
# copy of the built tree; output in test-logs/V-M.log.
suite() {
	local v=$1 m=$2
	shift 2
	local pg_config tag set p
	if [ "$v" = 15 ] && [ "$m" = wal ]; then
		tag=15-stock
		pg_config=$STOCK_PG_CONFIG
	else
		tag=$v
		p=$(cat "$state/prefix-$v")
		pg_config=$p/bin/pg_config
	fi
	prepare "$tag" "$pg_config" || return 1
	pg_config=$(cat "$state/pg_config-$tag")
	set=$(test_set "$v")
	echo "run-tests: === PostgreSQL $v, $m capture ($set set): $("$pg_config" --version) ($("$pg_config" --bindir)) ==="
	local pgpro
	pgpro=$(pg_probackup_for "$v") || return 1
	if [ -n "$pgpro" ]; then
		echo "run-tests: pg_probackup: $pgpro ($("$pgpro" --version))"
	elif [ "$require_pg_probackup" = 1 ]; then
		echo "run-tests: pg_probackup: none for PostgreSQL $v, and CI (CI=true) or PTRACK_REQUIRE_PG_PROBACKUP=1 requires it: FAILED"
		return 1
	else
		echo "run-tests: pg_probackup: none ($([ "$pg_probackup_wanted" = 0 ] && echo --no-pg-probackup || echo 'no source')): the pg_probackup chains are SKIPPED"
	fi
	local tree=$work/suite-$v-$m status=0
	cp -a "$work/build-$tag" "$tree"
	local args=(PG_CONFIG="$pg_config" PROVE_FLAGS=--timer installcheck installcheck-off)
	[ "$set" = core ] && args+=(PROVE_TESTS="${CORE_TESTS[*]}")
	args+=("$@")
	local test_env=(env -u PTRACK_PG_PROBACKUP PTRACK_CAPTURE="$m" ${pgpro:+PTRACK_PG_PROBACKUP="$pgpro"}
		PTRACK_REQUIRE_PG_PROBACKUP="$require_pg_probackup")
	if [ "$(id -u)" -eq 0 ]; then
		chown -R ptrack_test "$tree"
		runuser -u ptrack_test -- "${test_env[@]}" make -C "$tree" "${args[@]}" || status=$?
	else
		"${test_env[@]}" make -C "$tree" "${args[@]}" || status=$?
	fi
	local logs=$repo/test-logs/$v-$m f
	rm -rf "$logs"
	mkdir -p "$logs"
	for f in regression.diffs regression.out tmp_check/log results; do
		[ -e "$tree/$f" ] && cp -a "$tree/$f" "$logs/" || true
	done
	rm -rf "$tree"
	# The main job and the soak: a developer's round that picks its TAP
	# files (PROVE_TESTS=...) leaves them out.
	if [ "$status" -eq 0 ] && [ "$picked" = 0 ]; then
		echo "run-tests: === main job (scripts/main-job.sh), PostgreSQL $v, $m capture ==="
		scripts/main-job.sh --pg-config "$pg_config" --capture "$m" --installed \
			${pgpro:+--pg-probackup "$pgpro"} || status=$?
	fi
	if [ "$status" -eq 0 ] && [ "$picked" = 0 ] && [ "$soak_minutes" -gt 0 ]; then
		local seed=${PTRACK_SOAK_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
		echo "run-tests: === soak (scripts/soak.sh), PostgreSQL $v, $m capture, $soak_minutes minutes, seed $seed ==="
		scripts/soak.sh --pg-version "$v" --capture "$m" --minutes "$soak_minutes" --seed "$seed" \
			--pg-config "$pg_config" --installed ${pgpro:+--pg-probackup "$pgpro"} || status=$?
	fi
	if [ "$status" -eq 0 ] && [ "$v" = 15 ] && [ "$m" = hooks ]; then
		# A cluster made by Debian's pg_createcluster must start unchanged on
		# the patched server (SSL, ICU, lz4...); needs root.
		if [ "$(id -u)" -eq 0 ]; then
			scripts/test-debian-cluster.sh "$(dirname "$(dirname "$pg_config")")" || status=1
		else
			echo "run-tests: scripts/test-debian-cluster.sh NOT run (it needs root)"
		fi
	fi
	return $status
}

# package: the Debian package test (needs root); with the patched 15, it also
# checks that the packaged ptrack.so takes the hooks there.  --nocheck: the
# package build would compile and run the unit tests again (about a minute
# of CPU); they ran above.
package_test() {
	if [ "$(id -u)" -ne 0 ]; then
		echo "run-tests: scripts/test-debian-package.sh NOT run: it needs root (dpkg -i in a private mount namespace)"
		return 1
	fi
	scripts/test-debian-package.sh --nocheck --patched "$(cat "$state/prefix-15")"
}

# --- the scheduler -----------------------------------------------------------

# Jobs in order of start: the unit tests and the stock 15 wal suite first
# (they need no server build), then each version's suites in the order the
# servers are built, the package test with 15's (it needs the patched 15).
# A run that picks its TAP files (PROVE_TESTS=...) is a developer's quick
# round: the engine's unit tests (a minute of compiling) are left out.
queue=(unit)
picked=0
for a in "$@"; do
	case $a in PROVE_TESTS=*) queue=(); picked=1; say "unit tests, main job and soak left out: PROVE_TESTS picks the TAP files" ;; esac
done
[[ " ${version_list[*]} " == *" 15 "* && " ${modes[*]} " == *" wal "* ]] && queue+=(15-wal)
for v in "${version_list[@]}"; do
	for m in "${modes[@]}"; do
		[ "$v-$m" = 15-wal ] || queue+=("$v-$m")
	done
	[ "$v" = 15 ] && [ "$package" = 1 ] && queue+=(package)
done
[ "$package" = 1 ] && [[ " ${queue[*]} " != *" package "* ]] && queue+=(package)

# ready NAME: 0 ready, 1 not yet, 2 never (its server build failed).
ready() {
	local v=${1%%-*}
	[ "$1" = package ] && v=15
	case $1 in unit|15-wal) return 0 ;; esac
	[ -e "$state/prefix-$v" ] && return 0
	[ -e "$state/build-failed-$v" ] && return 2
	[ -n "${build_pid:-}" ] && kill -0 "$build_pid" 2>/dev/null && return 1
	# The chain may have ended between the two tests above.
	[ -e "$state/prefix-$v" ] && return 0
	return 2
}

declare -A job_pid=() job_start=() job_secs=() job_result=()
status=0
failed=()
report() {
	local j=$1 rc=$2 log=$repo/test-logs/$1.log
	job_secs[$j]=$(($(date +%s) - ${job_start[$j]}))
	if [ "$rc" -eq 0 ]; then
		job_result[$j]=passed
		say "$j passed in ${job_secs[$j]}s:"
	else
		job_result[$j]="FAILED (exit $rc)"
		status=1
		failed+=("$j")
		say "$j FAILED (exit $rc) after ${job_secs[$j]}s; log: test-logs/$j.log, test-logs/$j/:"
	fi
	grep -E '^\[[0-9:]{8}\] t/|^\[  (PASSED|FAILED)  \]|^(not )?ok |^test [a-z_]+ +\.\.\. |^Files=|^Result:|^All [0-9]+ tests|^run-tests: ===|^RESULT: |^soak: |^test-debian' "$log" |
		sed 's/^/    /' >&2 || true
	if [ "$rc" -ne 0 ]; then
		echo "    --- last 60 lines of test-logs/$j.log ---" >&2
		tail -n 60 "$log" | sed 's/^/    /' >&2
	fi
}

while [ ${#queue[@]} -gt 0 ] || [ ${#jobs_running[@]} -gt 0 ]; do
	# Reap the finished jobs.
	still=()
	for p in "${jobs_running[@]}"; do
		if kill -0 "$p" 2>/dev/null; then
			still+=("$p")
		else
			rc=0
			wait "$p" || rc=$?
			for j in "${!job_pid[@]}"; do
				[ "${job_pid[$j]}" = "$p" ] && { report "$j" "$rc"; unset "job_pid[$j]"; }
			done
		fi
	done
	jobs_running=("${still[@]}")
	# Start what is ready, in queue order, up to --jobs at a time.
	rest=()
	for j in "${queue[@]}"; do
		r=0
		ready "$j" || r=$?
		if [ "$r" -eq 2 ]; then
			job_result[$j]="NOT RUN (the PostgreSQL ${j%%-*} build failed: test-logs/build-${j%%-*}.log)"
			[ "$j" = package ] && job_result[$j]="NOT RUN (the PostgreSQL 15 build failed: test-logs/build-15.log)"
			say "$j: ${job_result[$j]}"
			tail -n 20 "$repo/test-logs/build-${j%%-*}.log" 2>/dev/null | sed 's/^/    /' >&2 || true
			status=1
			failed+=("$j")
		elif [ "$r" -eq 0 ] && [ ${#jobs_running[@]} -lt "$jobs" ]; then
			job_start[$j]=$(date +%s)
			rm -rf "$repo/test-logs/$j" "$repo/test-logs/$j.log"
			case $j in
				unit) ( unit_tests ) >"$repo/test-logs/$j.log" 2>&1 & ;;
				package) ( package_test ) >"$repo/test-logs/$j.log" 2>&1 & ;;
				*) ( suite "${j%%-*}" "${j#*-}" "$@" ) >"$repo/test-logs/$j.log" 2>&1 & ;;
			esac
			job_pid[$j]=$!
			jobs_running+=("$!")
			case $j in
				unit|package) say "$j started" ;;
				*) say "$j started ($(test_set "${j%%-*}") set)" ;;
			esac
		else
			rest+=("$j")
		fi
	done
	queue=("${rest[@]}")
	if [ ${#queue[@]} -gt 0 ] || [ ${#jobs_running[@]} -gt 0 ]; then
		sleep 2
	fi
done
[ -n "${build_pid:-}" ] && { wait "$build_pid" || true; build_pid=; }

say "summary (wall seconds; the suites ran up to $jobs at a time):"
for v in "${need_build[@]}"; do
	if [ -e "$state/build-seconds-$v" ]; then
		echo "    PostgreSQL $v server: built in $(cat "$state/build-seconds-$v")s ($(cat "$state/prefix-$v"))" >&2
	elif [ -e "$state/prefix-$v" ]; then
		echo "    PostgreSQL $v server: $(cat "$state/prefix-$v")" >&2
	fi
done
for j in "${!job_result[@]}"; do
	echo "    $j: ${job_result[$j]}${job_secs[$j]:+ in ${job_secs[$j]}s}" >&2
done | sort >&2
if [ $status -eq 0 ]; then
	say "all suites passed (PostgreSQL ${version_list[*]}; $mode$([ "$package" = 1 ] && echo ', package'))"
else
	say "FAILED: ${failed[*]}"
fi
exit $status
