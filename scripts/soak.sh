#!/usr/bin/env bash
# Copyright (c) the ptrack authors
#
# soak.sh -- the randomized soak: random work from concurrent clients,
# random faults (crashes, kills, a full disk, settings, a dropped slot, with
# --standby a failover) and real pg_probackup FULL and PTRACK backups, each
# checked against oracles independent of ptrack (page LSNs, file growth,
# ptrack_verify(), the chain restored, compared with the source and
# amchecked).  It hunts for the one thing ptrack must never do: leave a
# changed block out of an answer.  scripts/soak.pl is the driver; this
# script finds the server, installs ptrack into a private copy of it (so
# that other work trees' installs are left alone), finds pg_probackup and
# runs the driver (as the unprivileged user ptrack_test when started as
# root: PostgreSQL refuses to run as root).
#
# Usage: scripts/soak.sh --pg-version 15|17|18 --capture hooks|wal --minutes M [--seed S] [--standby] [--clients N] [--big-table-mb MB] [--faults LIST] [--pg-config PATH [--installed]] [--pg-probackup PATH] [--keep]
#   --pg-version   the server: 15 wal runs on Debian's postgresql-15; 15
#                  hooks, 17 and 18 on the build of scripts/build-postgres.sh
#                  --pg-version N (built if missing, cached); wal capture
#                  there runs the build's postgres-nohooks when it has one,
#                  else the patched server with ptrack.capture = wal
#   --capture      hooks or wal
#   --minutes M    how long the clients run (a fraction is fine: 0.5); then
#                  a last backup, its checks, the summary
#   --seed S       drives every choice (operations, faults, backups, settings);
#                  the same seed and options give the same sequence of
#                  operations and faults, as far as the interleaving of
#                  concurrent clients allows; default: a random one, printed
#   --standby      also a streaming standby: faults then include its crash and
#                  a failover (promotion; the old primary rewound with
#                  pg_rewind or replaced by a standby rebuilt from a base
#                  backup)
#   --clients N    concurrent clients (default 3)
#   --big-table-mb MB  client 0 grows a table to MB megabytes, past the 1 GB
#                  segment boundary, and shrinks it again (default 1100 when
#                  --minutes is at least 30, else 0: none; it makes each
#                  backup's checks several times longer)
#   --faults LIST  only these faults (comma-separated: immediate_stop,
#                  kill_postmaster, kill_checkpointer, kill_follower,
#                  kill_backend, restart, file_size_limit, fill_tablespace,
#                  summary_memory, full_page_writes, drop_slot, standby_crash,
#                  failover; default: every one that applies to the run)
#   --pg-config PATH  another server of that version (ptrack is installed
#                  into a private copy of it, unless --installed: then it is
#                  used as it is, ptrack already installed there)
#   --pg-probackup PATH  the pg_probackup binary (default $PTRACK_PG_PROBACKUP,
#                  else scripts/build-pg-probackup.sh --pg-version N: built
#                  from the vendored source, cached)
#   --keep         keep the run directory (data directories, the pg_probackup
#                  catalog, logs) even when nothing was missed
#
# Private installs of ptrack (scripts/private-server.sh, then make install)
# are cached in $PTRACK_SOAK_CACHE (default $PTRACK_PG_CACHE/soak, i.e.
# /var/cache/ptrack-pg/soak), one per server and source tree (the two newest
# of each version are kept).
#
# As root, the soak also mounts a 48 MB tmpfs for a tablespace that fills
# up (a full disk); without root, the full disk comes from prlimit --fsize
# only.  The run directory is under $TMPDIR (default /tmp; at least 2 GB free,
# more with the big table); it is removed at
# the end, unless a block was missed, a restore failed, or --keep: then the
# driver says where it is.  The last line of the output is the summary:
#   soak: <version> <capture> seed S: N operations, F faults, B backups,
#   R restores, K blocks checked, M missed
# and the exit status is 0 only when nothing was missed and every restore
# passed.
set -euo pipefail

usage() { sed -n '/^# Usage:/,/^#                  catalog, logs) even/p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "soak: $*" >&2; exit 2; }

# $pg_probackup runs and is a 2.5 built for $pg_version.
check_pg_probackup() {
	local hint="give --pg-probackup (or PTRACK_PG_PROBACKUP) a pg_probackup 2.5.x built for PostgreSQL $pg_version, or neither: scripts/build-pg-probackup.sh builds one"
	[ -f "$pg_probackup" ] && [ -x "$pg_probackup" ] || die "pg_probackup '$pg_probackup' is not an executable file; $hint"
	local v
	v=$("$pg_probackup" --version 2>&1 | head -n 1) || true
	[[ $v =~ ^pg_probackup\ 2\.5\.[0-9]+\ \(PostgreSQL\ $pg_version\. ]] ||
		die "'$pg_probackup --version' says '$v', not pg_probackup 2.5.x (PostgreSQL $pg_version.x); $hint"
}

# The whole script is one function, read before it runs: editing the file
# during a run does not change the run.
main() {
	pg_version= capture= minutes= seed= standby=0 clients=3 big= keep=0
	given_pg_config= installed=0 pg_probackup= faults=
	while [ $# -gt 0 ]; do
		case $1 in
			--pg-version|--capture|--minutes|--seed|--clients|--big-table-mb|--pg-config|--pg-probackup|--faults)
				[ $# -ge 2 ] || die "$1 needs a value (see --help)"
				case $1 in
					--pg-config) given_pg_config=$2 ;;
				--faults) faults=$2 ;;
					--pg-probackup) pg_probackup=$2 ;;
					--pg-version) pg_version=$2 ;;
					--capture) capture=$2 ;;
					--minutes) minutes=$2 ;;
					--seed) seed=$2 ;;
					--clients) clients=$2 ;;
					--big-table-mb) big=$2 ;;
				esac
				shift 2 ;;
			--standby) standby=1; shift ;;
			--keep) keep=1; shift ;;
			--installed) installed=1; shift ;;
			-h|--help) usage; exit 0 ;;
			*) die "unknown argument '$1' (see --help)" ;;
		esac
	done
	case $pg_version in
		15|17|18) ;;
		'') die "--pg-version is required: 15, 17 or 18 (see --help)" ;;
		*) die "--pg-version must be 15, 17 or 18, not '$pg_version'" ;;
	esac
	case $capture in
		hooks|wal) ;;
		'') die "--capture is required: hooks or wal (see --help)" ;;
		*) die "--capture must be hooks or wal, not '$capture'" ;;
	esac
	[ -n "$minutes" ] || die "--minutes is required (see --help)"
	[[ $minutes =~ ^[0-9]+(\.[0-9]+)?$ ]] && [ "$(awk -v m="$minutes" 'BEGIN { print (m > 0) }')" = 1 ] ||
		die "--minutes must be a positive number, not '$minutes'"
	if [ -z "$seed" ]; then
		seed=$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')
	fi
	[[ $seed =~ ^[0-9]+$ ]] || die "--seed must be a non-negative integer, not '$seed'"
	[[ $clients =~ ^[1-8]$ ]] || die "--clients must be 1 to 8, not '$clients'"
	[ -z "$big" ] || [[ $big =~ ^[0-9]+$ ]] || die "--big-table-mb must be a number of megabytes, not '$big'"
	[ -z "$faults" ] || [[ $faults =~ ^[a-z_]+(,[a-z_]+)*$ ]] || die "--faults takes fault names separated by commas, not '$faults'"

	repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
	cd "$repo"
	# Every name --faults gives is one of PtrackSoak::Faults's and applies to
	# this run (as its weights() decides), so that a typo fails here, not
	# after the cluster is set up, and no named fault is silently left out.
	if [ -n "$faults" ]; then
		known=$(sed -n '/^my %WEIGHTS = (/,/^);/s/^\t\([a-z_]*\) =>.*/\1/p' t/lib/PtrackSoak/Faults.pm)
		for f in ${faults//,/ }; do
			grep -qx "$f" <<<"$known" || die "--faults: no fault named '$f'; the faults are: $(echo $known | sed 's/ /, /g')"
			case $f in
				kill_follower|summary_memory|drop_slot)
					[ "$capture" = wal ] || die "--faults: $f needs --capture wal (the WAL follower)" ;;
				standby_crash|failover)
					[ "$standby" = 1 ] || die "--faults: $f needs --standby" ;;
				fill_tablespace)
					[ "$(id -u)" -eq 0 ] || die "--faults: fill_tablespace needs root (it mounts a tmpfs for the tablespace)" ;;
			esac
		done
	fi
	# A given pg_probackup is checked before anything is built or started.
	pg_probackup=${pg_probackup:-${PTRACK_PG_PROBACKUP:-}}
	[ -z "$pg_probackup" ] || check_pg_probackup
	# A full disk under the run directory fails restores and servers, which
	# would read as findings: a run starts only with room for its data
	# directories, catalog and restores (a 1-minute run takes up to 1.5 GB,
	# a 45-minute one several GB, the big table three times its size).
	big_mb=${big:-$(awk -v m="$minutes" 'BEGIN { print (m >= 30 ? 1100 : 0) }')}
	need_mb=$((2048 + 3 * big_mb))
	free_mb=$(df -Pm "${TMPDIR:-/tmp}" | awk 'NR == 2 { print $4 }')
	[ "${free_mb:-0}" -ge "$need_mb" ] ||
		die "only ${free_mb:-?} MB free in ${TMPDIR:-/tmp}, and a run needs at least $need_mb MB: free some (kept runs: ls -d ${TMPDIR:-/tmp}/ptrack-soak.*) or set TMPDIR"
	# The command that runs the same again, every option that shapes the run
	# included; the driver prints it again when a run fails.
	rerun=(scripts/soak.sh --pg-version "$pg_version" --capture "$capture" --minutes "$minutes" --seed "$seed")
	[ "$standby" = 1 ] && rerun+=(--standby)
	[ "$clients" != 3 ] && rerun+=(--clients "$clients")
	[ -n "$big" ] && rerun+=(--big-table-mb "$big")
	[ -n "$faults" ] && rerun+=(--faults "$faults")
	[ -n "$given_pg_config" ] && rerun+=(--pg-config "$given_pg_config")
	[ "$installed" = 1 ] && rerun+=(--installed)
	[ -n "$pg_probackup" ] && rerun+=(--pg-probackup "$pg_probackup")
	rerun_line=$(printf '%q ' "${rerun[@]}")
	rerun_line=${rerun_line% }
	echo "soak: seed $seed ($rerun_line)"

	as_root=0
	[ "$(id -u)" -eq 0 ] && as_root=1
	need=()
	for p in libipc-run-perl prlimit:util-linux; do
		case $p in
			*:*) command -v "${p%%:*}" >/dev/null 2>&1 || need+=("${p#*:}") ;;
			*) dpkg -s "$p" >/dev/null 2>&1 || need+=("$p") ;;
		esac
	done
	if [ "$pg_version" = 15 ] && [ "$capture" = wal ]; then
		for p in postgresql-15 postgresql-server-dev-15; do
			dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
		done
	fi
	if [ ${#need[@]} -gt 0 ]; then
		[ "$as_root" = 1 ] || die "missing packages: ${need[*]} (install them as root)"
		apt-get install -y --no-install-recommends "${need[@]}" >&2
	fi

	# --- the server, and ptrack installed into a private copy of it --------------

	if [ -n "$given_pg_config" ]; then
		[ -x "$given_pg_config" ] || die "--pg-config $given_pg_config is not executable"
		"$given_pg_config" --version | grep -q "^PostgreSQL $pg_version\." ||
			die "--pg-config $given_pg_config is $("$given_pg_config" --version), not PostgreSQL $pg_version"
		if [ "$capture" = hooks ] &&
			! nm -D --defined-only "$("$given_pg_config" --bindir)/postgres" 2>/dev/null | grep -w mdwrite_hook >/dev/null; then
			die "--capture hooks needs a server built with the core patch; $("$given_pg_config" --bindir)/postgres has no hooks (without --pg-config, scripts/build-postgres.sh's build is used)"
		fi
		server_pg_config=$given_pg_config
		server=$(dirname "$("$given_pg_config" --bindir)")
	elif [ "$pg_version" = 15 ] && [ "$capture" = wal ]; then
		server_pg_config=/usr/lib/postgresql/15/bin/pg_config
		server=debian-15
	else
		prefix=$(scripts/build-postgres.sh --pg-version "$pg_version" --print-prefix 2>/dev/null || true)
		if [ -z "$prefix" ] || [ ! -f "$prefix/.ptrack-build-stamp" ]; then
			echo "soak: building PostgreSQL $pg_version with the core patch (scripts/build-postgres.sh; cached afterwards)..." >&2
			prefix=$(scripts/build-postgres.sh --pg-version "$pg_version" | tail -n 1)
		fi
		server_pg_config=$prefix/bin/pg_config
		server=$prefix
	fi
	[ -x "$server_pg_config" ] || die "no pg_config at $server_pg_config"

	if [ "$installed" = 1 ]; then
		[ -n "$given_pg_config" ] || die "--installed goes with --pg-config"
		[ -f "$("$server_pg_config" --pkglibdir)/ptrack.so" ] ||
			die "--installed, but $("$server_pg_config" --pkglibdir) has no ptrack.so"
		pg_config=$server_pg_config
	else
		cache=${PTRACK_SOAK_CACHE:-${PTRACK_PG_CACHE:-/var/cache/ptrack-pg}/soak}
		mkdir -p "$cache" 2>/dev/null && [ -w "$cache" ] ||
			die "cannot write the install cache $cache: set PTRACK_SOAK_CACHE to a writable directory"
		tree_hash=$(find Makefile ptrack.control ./*.sql src include -type f -print0 | sort -z |
			xargs -0 sha256sum | sha256sum | cut -c1-12)
		key=$(printf '%s\n' "$server" "$("$server_pg_config" --version)" "$tree_hash" | sha256sum | cut -c1-12)
		case $server in
			debian-15) tag=pg15-debian ;;
			/var/cache/ptrack-pg/*|"${PTRACK_PG_CACHE:-/var/cache/ptrack-pg}"/*) tag=pg$pg_version-build ;;
			*) tag=pg$pg_version-other ;;
		esac
		install=$cache/$tag-$key
		if [ ! -f "$install/.soak-install-stamp" ]; then
			(
				flock 9
				[ -f "$install/.soak-install-stamp" ] && exit 0
				echo "soak: installing ptrack into a private copy of the server: $install" >&2
				rm -rf "$install" "$install.tmp"
				tmp_pg_config=$(scripts/private-server.sh "$server_pg_config" "$install.tmp")
				build=$install.tmp/ptrack-build
				mkdir -p "$build"
				cp -a Makefile ptrack.control ./*.sql src include scripts t "$build/"
				if ! nice -n 10 make -s -C "$build" -j2 PG_CONFIG="$tmp_pg_config" install >"$install.tmp/ptrack-build.log" 2>&1; then
					tail -n 40 "$install.tmp/ptrack-build.log" >&2
					die "building ptrack failed (log: $install.tmp/ptrack-build.log)"
				fi
				rm -rf "$build"
				echo "${tmp_pg_config#"$install.tmp"}" >"$install.tmp/.soak-install-stamp"
				mv "$install.tmp" "$install"
				# The two newest installs of each server are kept, and any
				# that a run is using (it holds its stamp file locked).
				ls -dt "$cache/$tag"-*/ 2>/dev/null | grep -v '\.tmp/$' | tail -n +3 |
					while read -r old; do
						old=${old%/}
						flock -n -x "$old/.soak-install-stamp" rm -rf "$old" "$old.lock" || true
					done
			) 9>"$install.lock"
		fi
		# In use until this script ends (the pruning above leaves it alone).
		exec 8<"$install/.soak-install-stamp"
		flock -s 8
		pg_config=$install$(cat "$install/.soak-install-stamp")
	fi
	[ -x "$pg_config" ] || die "no pg_config at $pg_config"

	if [ -z "$pg_probackup" ]; then
		rc=0
		pg_probackup=$(scripts/build-pg-probackup.sh --pg-version "$pg_version" 2>"$cache/pg_probackup-$pg_version.log" | tail -n 1) || rc=$?
		if [ "$rc" -ne 0 ] || [ -z "$pg_probackup" ]; then
			tail -n 20 "$cache/pg_probackup-$pg_version.log" >&2
			die "no pg_probackup for PostgreSQL $pg_version: set PTRACK_PG_PROBACKUP=/path/to/pg_probackup (2.5.x built for $pg_version), or see scripts/build-pg-probackup.sh"
		fi
		check_pg_probackup
	fi

	# --- the run ----------------------------------------------------------------------

	pgxs_dir=$(dirname "$(dirname "$("$pg_config" --pgxs)")")
	run=$(mktemp -d "${TMPDIR:-/tmp}/ptrack-soak.XXXXXX")
	chmod 755 "$run"
	mkdir -p "$run/lib/PtrackSoak" "$run/portlock"
	cp scripts/soak.pl "$run/"
	cp t/lib/*.pm "$run/lib/"
	cp t/lib/PtrackSoak/*.pm "$run/lib/PtrackSoak/"

	run_as=()
	tiny=
	if [ "$as_root" = 1 ]; then
		id ptrack_test >/dev/null 2>&1 || useradd --system --create-home --shell /bin/bash ptrack_test
		chown -R ptrack_test "$run"
		# setpriv execs the driver: runuser would stay its parent and, on a
		# signal, kill it 2 s later, in the middle of stopping its servers.
		run_as=(setpriv --reuid=ptrack_test --regid=ptrack_test --init-groups
			env HOME="$(getent passwd ptrack_test | cut -d: -f6)" USER=ptrack_test LOGNAME=ptrack_test)
		# A tablespace on a tiny file system: it fills up.
		tiny=$run/tiny
		mkdir "$tiny"
		if mount -t tmpfs -o "size=48m,mode=0700,uid=$(id -u ptrack_test),gid=$(id -g ptrack_test)" ptrack-soak-tiny "$tiny"; then
			:
		else
			echo "soak: could not mount a tmpfs for the tiny tablespace; the full disk comes from prlimit only" >&2
			rmdir "$tiny"
			tiny=
		fi
	fi

	cleanup() {
		local status=$?
		if [ -n "$tiny" ] && mountpoint -q "$tiny"; then
			if [ -e "$run/KEEP" ] || [ "$keep" = 1 ] || [ "$status" -ne 0 ]; then
				# The kept data directories' tablespace lives on the tmpfs:
				# copy it out before it goes.
				mkdir -p "$run/tiny.kept"
				cp -a "$tiny/." "$run/tiny.kept/" 2>/dev/null || true
				umount "$tiny" && cp -a "$run/tiny.kept/." "$tiny/" && rm -rf "$run/tiny.kept"
			else
				umount "$tiny"
			fi
		fi
		if [ "$status" -eq 0 ] && [ "$keep" = 0 ] && [ ! -e "$run/KEEP" ]; then
			rm -rf "$run"
		elif [ ! -e "$run/KEEP" ] && [ "$keep" = 0 ]; then
			echo "soak: kept $run (exit status $status)" >&2
		fi
		exit "$status"
	}
	trap cleanup EXIT
	driver=
	signal=
	trap 'exit 130' INT
	trap 'exit 143' TERM

	driver_env=(PATH="$("$pg_config" --bindir):$PATH" PERL5LIB="$pgxs_dir/test/perl:$run/lib"
		TESTDIR="$run" TMPDIR="$run" PG_REGRESS="$pgxs_dir/test/regress/pg_regress"
		TESTDATADIR="$run/tmp_check" TESTLOGDIR="$run/tmp_check/log" PG_TEST_PORT_DIR="$run/portlock"
		PG_TEST_TIMEOUT_DEFAULT=600 PTRACK_CAPTURE="$capture" PTRACK_SOAK_RERUN="$rerun_line")
	args=(--pg-version "$pg_version" --capture "$capture" --minutes "$minutes" --seed "$seed"
		--clients "$clients" --pg-probackup "$pg_probackup")
	[ "$standby" = 1 ] && args+=(--standby)
	[ -n "$big" ] && args+=(--big-table-mb "$big")
	[ -n "$faults" ] && args+=(--faults "$faults")
	[ -n "$tiny" ] && args+=(--tiny-dir "$tiny")
	[ "$keep" = 1 ] && args+=(--keep)
	# The driver runs in the background, so that a signal to this script
	# (^C, kill, timeout) reaches it at once, not when the run is over; the
	# script then waits for it to stop its clients and servers, and exits
	# 130 (INT) or 143 (TERM).
	trap 'signal=130; signals=$((signals + 1)); kill -INT "$driver" 2>/dev/null || true' INT
	trap 'signal=143; signals=$((signals + 1)); kill -TERM "$driver" 2>/dev/null || true' TERM
	signals=0
	(cd "$run" && exec "${run_as[@]}" env "${driver_env[@]}" perl "$run/soak.pl" "${args[@]}") &
	driver=$!
	while :; do
		n=$signals
		status=0
		wait "$driver" || status=$?
		# wait returns early (128 + the signal) when a trap ran: wait again.
		[ "$signals" != "$n" ] && [ "$status" -gt 128 ] || break
	done
	[ -z "$signal" ] || status=$signal
	exit "$status"
}

main "$@"
