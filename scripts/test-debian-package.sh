#!/usr/bin/env bash
#
# test-debian-package.sh -- does the Debian package build, install and work on
# Debian's stock PostgreSQL 15?
#
# Why this exists: the README's first install route is the package built from
# debian/ (pg_buildext, dh --with pgxs_loop).  Nothing else exercises that
# build (the Makefile's own targets run with PG_CONFIG given by hand) nor the
# files the package installs.  This test:
#   1. checks that debian/changelog's upstream version starts with
#      ptrack.control's default_version (2.1 -> 2.1.0);
#   2. builds the package with dpkg-buildpackage -us -uc -b from a copy of the
#      tree in a temporary directory (the source tree is never written to), and
#      checks that debian/rules clean leaves the copy as it found it;
#   3. checks the .deb: its name, its files, a ptrack.so that imports nothing
#      that throws;
#   4. in a private mount namespace (unshare -m) with overlays over /usr, /etc,
#      /var/lib/dpkg and /var/log, so that the host's files and dpkg database
#      are never changed: dpkg -i the package, pg_createcluster a cluster
#      owned by the unprivileged user ptrack_test (PostgreSQL refuses root;
#      loopback and a private socket directory only), put t/regress.conf
#      (shared_preload_libraries = 'ptrack', ptrack.map_size) into its conf.d
#      as the README says, start it with pg_ctlcluster, check that it runs
#      the packaged ptrack.so with wal capture, run the Makefile's
#      REGRESS suite with pg_regress against it, then restart it with
#      t/regress_off.conf and run ptrack_off; with --patched PREFIX, start the
#      patched server with the packaged ptrack.so preloaded: it must take the
#      hooks there;
#   5. checks that the host has no postgresql-15-ptrack package afterwards.
# Every failed step says what failed and shows the relevant log.  The servers
# are stopped by their PID; the work directory is removed at exit.
#
# Usage: scripts/test-debian-package.sh [--nocheck] [--deb FILE] [--patched PREFIX] [--keep]
#   --nocheck  build with DEB_BUILD_OPTIONS=nocheck (skips the engine unit
#              tests in the package build; scripts/run-tests.sh runs them anyway)
#   --deb FILE test this already built package instead of building one
#   --patched PREFIX  also check that the packaged ptrack.so loads on the
#              patched server in PREFIX (scripts/build-postgres.sh) and takes
#              the hooks there
#   --keep     keep the work directory (build log, server logs, regression output)
# Needs root (dpkg -i and mounts in the private namespace, runuser), and the
# build dependencies of debian/control (scripts/run-tests.sh --package
# installs them).
set -euo pipefail

PGVER=15
PKG=postgresql-$PGVER-ptrack
STOCK_BIN=/usr/lib/postgresql/$PGVER/bin
TEST_USER=ptrack_test

say() { printf 'test-debian-package: %s\n' "$*" >&2; }
die() { say "ERROR: $*"; exit 1; }

# ---------------------------------------------------------------------------
# Stage 2: inside the private mount namespace (the script runs itself there).
# ---------------------------------------------------------------------------
in_namespace() {
	local work=$1 deb=$2 src=$3 patched=${4:-}
	local ovl=$work/overlay
	mkdir -p "$ovl"
	# The upper layers live in a tmpfs of this namespace: everything dpkg
	# writes vanishes with it.
	mount -t tmpfs -o mode=0755 ptrack-pkg-test "$ovl"
	local d n=0
	for d in /usr /etc /var/lib/dpkg /var/log; do
		n=$((n + 1))
		mkdir -p "$ovl/u$n" "$ovl/w$n"
		mount -t overlay overlay -o "lowerdir=$d,upperdir=$ovl/u$n,workdir=$ovl/w$n" "$d" ||
			die "could not mount an overlay over $d in the private namespace"
	done

	# A ptrack installed by "make install" (CI does that) would be overwritten
	# by dpkg anyway; remove it in the overlay so only the package's files exist.
	local pkglibdir sharedir
	pkglibdir=$("$STOCK_BIN/pg_config" --pkglibdir)
	sharedir=$("$STOCK_BIN/pg_config" --sharedir)
	rm -f "$pkglibdir/ptrack.so" "$sharedir"/extension/ptrack.control "$sharedir"/extension/ptrack--*.sql

	say "dpkg -i $(basename "$deb") (private namespace)"
	DEBIAN_FRONTEND=noninteractive dpkg -i "$deb" >"$work/dpkg-i.out" 2>&1 || {
		cat "$work/dpkg-i.out" >&2
		die "dpkg -i $deb failed"
	}
	local verify
	verify=$(dpkg --verify "$PKG" 2>&1) || true
	[[ -z $verify ]] || die "dpkg --verify $PKG after dpkg -i: $verify"
	[[ -f $pkglibdir/ptrack.so && -f $sharedir/extension/ptrack.control ]] ||
		die "the package did not install $pkglibdir/ptrack.so and $sharedir/extension/ptrack.control"

	# A free loopback port.
	local port="" p i
	for ((i = 0; i < 500; i++)); do
		p=$((30000 + ($$ + i * 13) % 10000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then port=$p; break; fi
	done
	[[ -n $port ]] || die "found no free port on 127.0.0.1"

	local data=$work/data sock=$work/sock log=$work/log/server.log
	install -d -o "$TEST_USER" -m 0700 "$sock"
	install -d -o "$TEST_USER" -m 0755 "$work/log" "$work/regress"
	as_user() { (cd / && runuser -u "$TEST_USER" -- "$@"); }

	# A cluster made the Debian way (pg_createcluster: configuration in
	# /etc/postgresql/15/NAME, which is in the overlay), owned by the test
	# user, with the README's settings in its conf.d.
	local cluster=ptrack_pkgtest_$$
	local confdir=/etc/postgresql/$PGVER/$cluster
	say "pg_createcluster $PGVER $cluster (owner $TEST_USER, port $port, socket $sock)"
	pg_createcluster -u "$TEST_USER" -d "$data" -s "$sock" -p "$port" -l "$log" \
		--start-conf=manual --locale=C.UTF-8 "$PGVER" "$cluster" -- --no-sync \
		>"$work/log/createcluster.out" 2>&1 || {
		cat "$work/log/createcluster.out" >&2
		die "pg_createcluster failed"
	}
	grep -qE "^[[:space:]]*include_dir[[:space:]]*=[[:space:]]*'conf.d'" "$confdir/postgresql.conf" ||
		die "$confdir/postgresql.conf does not include conf.d (the README's install step relies on it)"

	local pid=""
	server_start() {
		if ! pg_ctlcluster --skip-systemctl-redirect "$PGVER" "$cluster" start \
			>"$work/log/pg_ctlcluster.out" 2>&1; then
			cat "$work/log/pg_ctlcluster.out" >&2
			say "server log ($log):"
			tail -n 50 "$log" >&2 || true
			die "the stock server does not start with the packaged ptrack preloaded"
		fi
		pid=$(head -n 1 "$data/postmaster.pid")
	}
	# Fast shutdown by PID; immediate if it takes more than a minute.
	server_stop() {
		[[ -n $pid ]] || return 0
		kill -INT "$pid" 2>/dev/null || { pid=""; return 0; }
		local t
		for ((t = 0; t < 600; t++)); do
			kill -0 "$pid" 2>/dev/null || { pid=""; return 0; }
			sleep 0.1
		done
		say "WARNING: the server (pid $pid) did not stop in 60 s: immediate shutdown"
		kill -QUIT "$pid" 2>/dev/null || true
		pid=""
	}
	trap 'server_stop' EXIT

	sql() {
		as_user env PGCONNECT_TIMEOUT=30 "$STOCK_BIN/psql" -X -qAt -v ON_ERROR_STOP=1 \
			-h "$sock" -p "$port" -d postgres -c "$1" 2>&1
	}
	check() {
		local what=$1 want=$2 got
		got=$(sql "$3") || true
		if [[ $got != "$want" ]]; then
			say "server log ($log):"
			tail -n 30 "$log" >&2 || true
			die "$what: expected '$want', got '$got' (SQL: $3)"
		fi
		say "ok: $what"
	}

	local pg_regress regress ext_version
	# shellcheck disable=SC2016 # $(REGRESS) is make's, not the shell's
	pg_regress=$("$STOCK_BIN/pg_config" --pkglibdir)/pgxs/src/test/regress/pg_regress
	[[ -x $pg_regress ]] || die "no pg_regress at $pg_regress (postgresql-server-dev-$PGVER)"
	# The suite is the Makefile's REGRESS list (installcheck), read from it.
	regress=$(make -s -C "$src" PG_CONFIG="$STOCK_BIN/pg_config" \
		--eval 'ptrack-print-regress: ; @echo $(REGRESS)' ptrack-print-regress) ||
		die "could not read REGRESS from the Makefile"
	[[ -n $regress ]] || die "the Makefile's REGRESS list is empty"
	ext_version=$(control_version "$src/ptrack.control")

	# run_suite NAME CONF TESTS...: restart with CONF as the server's settings
	# (the same file the Makefile's pg_regress temp instance uses), run TESTS.
	run_suite() {
		local name=$1 conf=$2
		shift 2
		server_stop
		{
			echo "# scripts/test-debian-package.sh: loopback only, and $conf"
			echo "listen_addresses = '127.0.0.1'"
			cat "$src/$conf"
		} >"$confdir/conf.d/ptrack.conf"
		say "== $name: server with $conf =="
		server_start
		say "server pid $pid: $(sql 'SELECT version()' | cut -d, -f1)"
		check "ptrack is preloaded" "ptrack" "SHOW shared_preload_libraries"
		grep -q " $pkglibdir/ptrack.so\$" "/proc/$pid/maps" ||
			die "the postmaster (pid $pid) has not mapped $pkglibdir/ptrack.so"
		say "ok: the postmaster runs the packaged $pkglibdir/ptrack.so"
		check "CREATE EXTENSION would install default_version $ext_version" "$ext_version" \
			"SELECT default_version FROM pg_available_extensions WHERE name = 'ptrack'"
		local outdir=$work/regress/$name
		install -d -o "$TEST_USER" "$outdir"
		say "pg_regress $*"
		if ! as_user "$pg_regress" --inputdir="$src" --outputdir="$outdir" --bindir="$STOCK_BIN" \
			--host="$sock" --port="$port" --dbname=contrib_regression "$@" \
			>"$outdir/pg_regress.out" 2>&1; then
			cat "$outdir/pg_regress.out" >&2
			if [[ -f $outdir/regression.diffs ]]; then
				say "regression.diffs (first 200 lines):"
				head -n 200 "$outdir/regression.diffs" >&2
			fi
			say "server log ($log, last 30 lines):"
			tail -n 30 "$log" >&2 || true
			die "FAIL: pg_regress ($name) against the installed package"
		fi
		grep -E '^(ok|not ok|#|     |test )|tests passed' "$outdir/pg_regress.out" | sed 's/^/    /' >&2 || true
	}

	local tests
	read -ra tests <<<"$regress"
	run_suite tracking-on t/regress.conf "${tests[@]}"
	check "stock server: ptrack captures from the WAL" wal "SHOW ptrack.capture"
	check "the WAL follower holds its replication slot" t \
		"SELECT active FROM pg_replication_slots WHERE slot_name = 'ptrack_wal_follower'"
	[[ -f $src/sql/ptrack_off.sql ]] || die "no sql/ptrack_off.sql (the Makefile's installcheck-off suite)"
	run_suite tracking-off t/regress_off.conf ptrack_off
	server_stop
	say "the package works on the stock server (pg_regress: $regress; ptrack_off)"

	[[ -n $patched ]] || { trap - EXIT; return 0; }
	# The same ptrack.so on a server with the core patch: it must load there
	# and take the hooks.  (The patched server has its own library directory;
	# shared_preload_libraries takes the packaged file by its path.)
	say "== the packaged ptrack.so on the patched server $patched =="
	[[ -x $patched/bin/postgres && -x $patched/bin/initdb ]] || die "no patched server in $patched"
	data=$work/data-patched
	install -d -o "$TEST_USER" -m 0700 "$data"
	as_user "$patched/bin/initdb" -D "$data" --auth=trust --no-sync --locale=C.UTF-8 \
		>"$work/log/initdb-patched.out" 2>&1 || { cat "$work/log/initdb-patched.out" >&2; die "initdb ($patched) failed"; }
	cat >>"$data/postgresql.conf" <<-EOF
		listen_addresses = '127.0.0.1'
		port = $port
		unix_socket_directories = '$sock'
		shared_preload_libraries = '$pkglibdir/ptrack.so'
		ptrack.map_size = 1MB
	EOF
	log=$work/log/server-patched.log
	if ! as_user "$patched/bin/pg_ctl" start -w -t 120 -D "$data" -l "$log" >"$work/log/pg_ctl-patched.out" 2>&1; then
		cat "$work/log/pg_ctl-patched.out" >&2
		tail -n 30 "$log" >&2 || true
		die "the patched server does not start with the packaged ptrack.so preloaded"
	fi
	pid=$(head -n 1 "$data/postmaster.pid")
	grep -q " $pkglibdir/ptrack.so\$" "/proc/$pid/maps" ||
		die "the patched postmaster (pid $pid) has not mapped $pkglibdir/ptrack.so"
	check "patched server: the packaged ptrack.so captures with the hooks" hooks "SHOW ptrack.capture"
	server_stop
	trap - EXIT
}

# control_version FILE: default_version of an extension control file.
control_version() {
	sed -n "s/^[[:space:]]*default_version[[:space:]]*=[[:space:]]*'\([^']*\)'.*/\1/p" "$1"
}

if [[ ${1:-} == --in-namespace ]]; then
	shift
	in_namespace "$@"
	exit 0
fi

# ---------------------------------------------------------------------------
# Stage 1: on the host.
# ---------------------------------------------------------------------------
cd "$(dirname "$0")/.."
repo=$(pwd)

nocheck=0 keep=0 deb="" patched=""
while [[ $# -gt 0 ]]; do
	case $1 in
	--nocheck) nocheck=1 ;;
	--patched)
		[[ $# -ge 2 ]] || die "--patched needs the patched server's prefix"
		patched=$2
		[[ -x $patched/bin/postgres ]] || die "--patched $patched: no bin/postgres there"
		shift ;;
	--keep) keep=1 ;;
	--deb)
		[[ $# -ge 2 ]] || die "--deb needs a file"
		deb=$(realpath "$2") || die "no such file: $2"
		shift ;;
	*) die "unknown argument '$1' (usage: $0 [--nocheck] [--deb FILE] [--patched PREFIX] [--keep])" ;;
	esac
	shift
done

[[ $(id -u) -eq 0 ]] || die "needs root (dpkg -i and overlay mounts in a private mount namespace, runuser)"
for tool in dpkg-buildpackage dpkg-parsechangelog dh pg_buildext pg_createcluster pg_ctlcluster unshare runuser; do
	command -v "$tool" >/dev/null || die "$tool not found (apt-get install dpkg-dev debhelper postgresql-server-dev-all util-linux)"
done
[[ -x $STOCK_BIN/postgres && -x $STOCK_BIN/pg_config ]] ||
	die "no stock PostgreSQL $PGVER in $STOCK_BIN (apt-get install postgresql-$PGVER postgresql-server-dev-$PGVER)"
id "$TEST_USER" >/dev/null 2>&1 || useradd --system --create-home --shell /bin/bash "$TEST_USER"

start=$SECONDS

# 1. One version everywhere.
ext_version=$(control_version ptrack.control)
[[ -n $ext_version ]] || die "no default_version in ptrack.control"
pkg_version=$(dpkg-parsechangelog -l debian/changelog -S Version)
upstream=${pkg_version#*:}
upstream=${upstream%-*}
case $upstream in
"$ext_version" | "$ext_version".*) say "ok: debian/changelog $pkg_version matches ptrack.control default_version '$ext_version'" ;;
*) die "version mismatch: debian/changelog has $pkg_version, ptrack.control has default_version '$ext_version': add a changelog entry $ext_version.0 (dch -v $ext_version.0)" ;;
esac

work=$(mktemp -d /tmp/ptrack-pkgtest.XXXXXX)
chmod 0755 "$work"
# On failure the logs go to test-logs/package/ (like scripts/run-tests.sh's).
cleanup() {
	local rc=$?
	if [[ $rc -ne 0 ]]; then
		rm -rf "$repo/test-logs/package"
		mkdir -p "$repo/test-logs/package"
		local f
		for f in build.log clean.log files.diff dpkg-i.out log regress; do
			[[ -e $work/$f ]] && cp -a "$work/$f" "$repo/test-logs/package/" || true
		done
		say "logs copied to $repo/test-logs/package/"
	fi
	if [[ $keep -eq 1 ]]; then
		say "work directory kept: $work"
	else
		rm -rf "$work"
	fi
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# 2. Build from a copy: dpkg-buildpackage writes into debian/ and puts the
# .deb next to the source directory.  The copy holds the tracked and the
# untracked-but-not-ignored files (the working tree as it would be committed).
src=$work/src
mkdir "$src"
if git -C "$repo" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	git -C "$repo" ls-files -z --cached --others --exclude-standard |
		(cd "$repo" && tar --null --no-recursion --ignore-failed-read -T - -cf -) | tar -xf - -C "$src"
else
	tar -C "$repo" --exclude=.git --exclude='*.o' --exclude='*.so' -cf - . | tar -xf - -C "$src"
fi
[[ -f $src/debian/rules ]] || die "the copy of the tree in $src has no debian/rules"

built=0
if [[ -z $deb ]]; then
	built=1
	(cd "$src" && find . -path ./debian/.git -prune -o -print | LC_ALL=C sort) >"$work/files.before"
	arch=$(dpkg --print-architecture)
	build_opts="parallel=$(nproc)"
	build_profiles=()
	if [[ $nocheck -eq 1 ]]; then
		build_opts="nocheck $build_opts"
		build_profiles=(-Pnocheck)
	fi
	say "DEB_BUILD_OPTIONS='$build_opts' dpkg-buildpackage -us -uc -b ${build_profiles[*]}"
	if ! (cd "$src" && DEB_BUILD_OPTIONS=$build_opts dpkg-buildpackage -us -uc -b "${build_profiles[@]}") \
		>"$work/build.log" 2>&1; then
		say "build log (last 60 lines of $work/build.log):"
		tail -n 60 "$work/build.log" >&2
		die "FAIL: dpkg-buildpackage failed"
	fi
	say "built in $((SECONDS - start))s"
	# The distribution's compiler flags (pg_buildext passes them as COPT,
	# which PGXS gives to C only) must reach the C++ compiler too: the
	# path map makes the build reproducible, the rest is hardening.
	compiles=$(grep -E '^g\+\+ .* -c -o src/' "$work/build.log" || true)
	[[ -n $compiles ]] || die "FAIL: the build log shows no g++ compile of src/ (build.log kept)"
	without=$(grep -v -e '-ffile-prefix-map=' <<<"$compiles" | sed -n 's/.* -c -o \([^ ]*\).*/\1/p' || true)
	[[ -z $without ]] || die "FAIL: compiled without Debian's CFLAGS (-ffile-prefix-map): $without"
	say "ok: every C++ object was compiled with the distribution's flags ($(wc -l <<<"$compiles") compiles)"
	deb=$work/${PKG}_${pkg_version#*:}_$arch.deb
	[[ -f $deb ]] || die "dpkg-buildpackage did not produce $(basename "$deb"); it made: $(cd "$work" && ls ./*.deb 2>/dev/null | tr '\n' ' ')"
	# debian/rules clean must bring the tree back to what it was.
	(cd "$src" && debian/rules clean) >"$work/clean.log" 2>&1 || {
		cat "$work/clean.log" >&2
		die "FAIL: debian/rules clean failed"
	}
	(cd "$src" && find . -path ./debian/.git -prune -o -print | LC_ALL=C sort) >"$work/files.after"
	if ! diff -u "$work/files.before" "$work/files.after" >"$work/files.diff"; then
		cat "$work/files.diff" >&2
		die "FAIL: after the build and debian/rules clean, the source tree differs (above)"
	fi
	say "ok: debian/rules clean leaves the source tree as it was"
fi

# 3. The .deb itself.
say "package: $(basename "$deb"), $(stat -c %s "$deb") bytes"
[[ $(dpkg-deb -f "$deb" Package) == "$PKG" ]] || die "$deb is not a $PKG package"
contents=$(dpkg-deb -c "$deb" | awk '{ print $NF }')
pkglibdir=$("$STOCK_BIN/pg_config" --pkglibdir)
sharedir=$("$STOCK_BIN/pg_config" --sharedir)
for f in "$pkglibdir/ptrack.so" "$sharedir/extension/ptrack.control" "$sharedir/extension/ptrack--2.0.sql"; do
	grep -qx "\.$f" <<<"$contents" || die "$(basename "$deb") does not contain $f"
done
mkdir "$work/deb"
dpkg-deb -x "$deb" "$work/deb"
shipped=$(control_version "$work/deb$sharedir/extension/ptrack.control")
[[ $shipped == "$ext_version" ]] ||
	die "the package's ptrack.control has default_version '$shipped', the tree has '$ext_version'"
throwing=$(nm -D --undefined-only "$work/deb$pkglibdir/ptrack.so" | awk '{ print $NF }' |
	grep -E '^(__cxa_throw|__cxa_rethrow|__gxx_personality_v0|_Unwind_Resume|_ZSt[0-9]+__throw_|_Zn[wa]m)' || true)
[[ -z $throwing ]] || die "the packaged ptrack.so imports C++ functions that throw: $throwing"
say "ok: the package holds ptrack.so, ptrack.control (default_version $shipped) and the SQL scripts"

# 4. Install and test in a private mount namespace.
say "installing and testing in a private mount namespace"
phase=$SECONDS
unshare --mount --propagation private -- "$repo/scripts/test-debian-package.sh" --in-namespace "$work" "$deb" "$src" "$patched" ||
	die "FAIL: the installed package did not pass (above)"
say "installed and tested in $((SECONDS - phase))s"

# 5. The host is unchanged: no package owns the files CI's make install writes.
status=$(dpkg-query -W -f='${db:Status-Abbrev}' "$PKG" 2>/dev/null || true)
[[ $status != i* ]] || die "$PKG is installed on the host (status '$status'): the namespace leaked"
if owner=$(dpkg -S "$pkglibdir/ptrack.so" 2>/dev/null); then
	die "a package owns $pkglibdir/ptrack.so on the host: $owner"
fi
leftover=$(compgen -G "/etc/postgresql/$PGVER/ptrack_pkgtest_*" || true)
[[ -z $leftover ]] || die "the test's cluster configuration is on the host: $leftover"
say "ok: the host has no $PKG package, no package owns $pkglibdir/ptrack.so, no test cluster"
say "PASS: $(basename "$deb") $([[ $built -eq 1 ]] && echo "builds, ")installs and passes pg_regress on the stock server$([[ -n $patched ]] && echo ", takes the hooks on the patched one") ($((SECONDS - start))s)"
