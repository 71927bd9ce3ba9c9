#!/usr/bin/env bash
#
# build-postgres.sh -- build and cache a PostgreSQL 15, 17 or 18 server
# carrying the ptrack core hooks (patches/pg<N>-ptrack-hooks.patch).
#
# Why this exists: ptrack needs four hooks in the server core (mdextend_hook,
# mdwrite_hook, copydir_hook, ProcessSyncRequests_hook) that no stock
# PostgreSQL has, Debian's postgresql-15 included.  So the extension can only
# be built and tested against a server compiled from source with our patch.
# This script does that in one command, on a bare Debian 12 machine, using
# nothing but Debian's package archive: it fetches the postgresql-15 source
# package with apt, applies our patch, configures it with the options of
# Debian's own postgresql-15 build (so that a cluster made by Debian's tools
# starts on it unchanged: ssl = on, ICU collations, lz4/zstd compression,
# PAM/LDAP/GSSAPI authentication...) plus TAP tests, and installs the server,
# a few contrib modules and the PGXS test infrastructure (pg_regress, the
# PostgreSQL::Test::* perl modules) into a prefix outside the repository.
# scripts/test-debian-cluster.sh checks the drop-in claim.  With
# --pg-version 17 or 18 it does the same for postgresql-17/-18 with a
# trimmed option set (see "PostgreSQL 17 and 18" below); everything said
# here about 15 holds for them unless that section says otherwise.
#
# Usage:
#   scripts/build-postgres.sh [--pg-version N]   build if needed; the last
#                                                (and only) line on stdout
#                                                is the prefix
#   scripts/build-postgres.sh [--pg-version N] --print-prefix
#                                                print the prefix the next
#                                                build produces (or has
#                                                produced); never builds
#   N is 15 (the default), 17 or 18.
#
# Environment:
#   PTRACK_PG_CACHE     cache root (default /var/cache/ptrack-pg)
#   PTRACK_PG_VERSION   build exactly this postgresql-N source version (no
#                       fallback to another one); normally left unset
#   PTRACK_DEBIAN_MIRROR, PTRACK_DEBIAN_SECURITY_MIRROR
#                       the archive URIs written into the deb-src entries
#                       for 17/18 (default http://deb.debian.org/debian and
#                       http://deb.debian.org/debian-security)
#
# The cache key is what is built, nothing else:
#   prefix = <cache>/pg-<source version>-<patch hash>-<options hash>
#   - source version: the Debian version of the postgresql-15 *source*
#     package fetched.  Rule: the newest source version apt knows of
#     (apt-cache showsrc) that the archive actually serves; when it does not
#     serve one (a mirror may list a security update's source without
#     carrying its files), the next older one, and so on.  The installed
#     postgresql-15 / postgresql-server-dev-15 binary packages play no part:
#     upgrading them changes neither the prefix nor what is built.
#   - patch hash: the first 12 hex digits of the patch's sha256.
#   - options hash: the first 12 hex digits of the sha256 of CONFIGURE_OPTS
#     and CONTRIB_MODULES below.
#
# How --print-prefix knows the source version without downloading it: the
# choice is recorded in <cache>/source-choice together with the list of
# source versions apt knew when it was made.  While apt's list is the same
# (installing or upgrading binary packages does not change it; only a new
# source upload seen by apt-get update does), the recorded choice is used:
# no network, well under a second.  Otherwise the rule above is applied
# again by probing each candidate's .dsc (a few KB, apt-helper
# download-file), newest first, and the result is recorded.  The build
# applies the same rule (it fetches the recorded/probed version first and
# falls back in the same order) and records the version it actually
# fetched, so --print-prefix and the next build always agree.  Without apt
# source lists (apt-get update not run, lists deleted) the recorded choice
# is used; with neither, --print-prefix fails and says to run this script,
# which adds deb-src entries and runs apt-get update.  Offline, with no
# record for apt's current list, both modes take the newest candidate that
# is already built (print mode: else the newest candidate), with a warning.
# Delete <cache>/source-choice to force a new probe.
#
# Pool fallback: when the archive serves none of the versions apt lists
# (seen for postgresql-17 on 2026-12-02: apt lists only 17.12-0+deb13u1,
# whose files the mirror does not carry), the rule goes on with the
# POOL_FALLBACK_STEPS upstream minor releases below the newest listed one,
# same Debian revision, same pool directory (17.11-0+deb13u1,
# 17.10-0+deb13u1, ...), probing each .dsc the same way.  Such a version is
# fetched without apt: its .dsc, then every file the .dsc names, each
# checked against the .dsc's SHA-256 and size (dpkg-source checks them
# again).  apt's signed index does not cover it, so only the transport from
# the configured Debian mirror vouches for the .dsc itself; the stamp says
# source_listed_by_apt=no.  On 2026-12-02 this chose 17.11-0+deb13u1.
#
# Configure options: Debian's (`/usr/lib/postgresql/15/bin/pg_config
# --configure` of postgresql-15), except:
#   - no --with-llvm (JIT): every backend and contrib source file would also
#     be compiled to LLVM bitcode by clang (measured on 20 backend files:
#     80% of the CPU time gcc needs for them, so about +50% on the whole
#     build), plus llvmjit's C++ files against the LLVM headers; and PGXS
#     would then want bitcode for our C++ sources too.  JIT only speeds up
#     long analytical queries; a Debian cluster (jit = on by default) runs
#     unchanged without it: the JIT provider is not found and queries are
#     simply not compiled.
#   - none of Debian's install layout (bindir, sysconfdir, --disable-rpath..):
#     everything is installed under the prefix, found through rpath.
#   - --enable-tap-tests and --enable-debug are kept (Debian has both);
#     --enable-dtrace is kept (it costs seconds: one probe header and
#     object).
# The needed -dev packages are installed from Debian's archive (BUILD_DEPS).
# Build time with these options, measured on the 2-core development VM
# (2026-12-01, empty cache, -dev packages already installed, make -j2), on
# a machine shared with other builds and pgbench loads (load average 10-15):
#   28m52s and 40m02s wall; 11m57s and 11m27s of CPU (user + sys).
# On an idle 2-core machine that is about 6-7 minutes (CPU / 2, plus the
# serial configure and install steps); for comparison, the previous minimal
# configuration (no SSL, ICU, LZ4, ..., PLs) built in 274 s wall there while
# the machine was still lightly loaded (load average ~2).
#
# Layout under the cache root:
#   pg-<key>/                        the install prefix (bin, lib, include..)
#   pg-<key>/.ptrack-build-stamp     written last = install complete
#   pg-<key>.build/                  source + build tree (wiped per build)
#   pg-<key>.log                     full build log
#   source-choice                    the source version rule's last answer
#   .lock                            flock serialising concurrent builds
#   (17 and 18: source-choice-N, .lock-N, .download-N, bootstrap-N.log,
#   so that builds of different versions do not disturb each other)
#
# The source is unpacked with Debian's packaging patches NOT applied
# (dpkg-source --skip-patches), i.e. it is upstream PostgreSQL.  Debian's
# 50-per-version-dirs patch hard-codes pkglibdir to
# /usr/lib/postgresql/15/lib for any prefix not containing "postgres", so
# with it `make install` would write into (and clobber) the system server's
# module directory; its other patches only matter for Debian's own packaging.
#
# PostgreSQL 17 and 18:
#   - Sources: bookworm has neither.  The script writes
#     /etc/apt/sources.list.d/ptrack-deb-src-newer.sources with deb-src
#     (source only) entries for trixie, trixie-updates, trixie-security and
#     sid and runs apt-get update.  No binary "deb" line is added and nothing
#     is pinned, so no installed package can be upgraded from those suites;
#     the build dependencies still come from bookworm.  On 2026-12-02 apt
#     listed postgresql-17 17.12-0+deb13u1 (trixie, trixie-security; not
#     served, the pool fallback above chose 17.11-0+deb13u1) and
#     postgresql-18 18.6-3 (sid; served).
#   - One build per version, patched (patches/pg17-, pg18-ptrack-hooks.patch),
#     serves both capture modes: the extension looks the hooks up by name
#     when it loads, so with ptrack.capture = wal it runs exactly as on a
#     stock server.  A second, stock build per version would double the CI
#     build time for no extra coverage.  To show that the library also loads
#     on a server without the hooks, the prefix holds bin/postgres-nohooks:
#     the same server with the patch reversed (md.c, copydir.c and sync.c
#     recompiled, postgres relinked: seconds), checked to export none of
#     the hook symbols.  It finds the prefix's lib and share directories
#     like bin/postgres does; start it with `pg_ctl -p <prefix>/bin/postgres-nohooks`.
#   - Options: what the tests need and what changes behaviour, nothing else:
#     --enable-tap-tests (PostgreSQL::Test::*), --enable-debug (backtraces),
#     openssl, ICU (16+ configure wants ICU unless told --without-icu, and
#     Debian builds with it), lz4 and zstd (wal_compression, pg_basebackup
#     and pg_probackup compression), readline, zlib, Debian's tzdata and
#     port, Debian's CFLAGS/CPPFLAGS/LDFLAGS (-O2, fortify), and on 18
#     --with-liburing so that io_method = io_uring can be tested (Debian's
#     18 has it).  Left out, unlike Debian and the 15 build: NLS, dtrace,
#     PLs (perl, python, tcl), libxml/libxslt, PAM/LDAP/GSSAPI, systemd,
#     SELinux, uuid, LLVM: none is used by the tests or the extension.
#     Contrib modules: amcheck, pageinspect, pg_walinspect, pg_prewarm,
#     pg_visibility (the CREATE EXTENSIONs in t/ and scripts/, since the one
#     build also runs the wal-mode tests).
#   - Build time, measured on the 2-core development VM (2026-12-02, empty
#     cache, make -j2, the 17 and 18 builds running at the same time next
#     to other helpers' builds and test suites: load average 7-14):
#       17.11: 74m30s wall; 11m22s user + 3m44s sys = 15m06s of CPU
#       18.6:  74m19s wall; 11m27s user + 3m48s sys = 15m15s of CPU
#     (the 15 build, full Debian options: 11m27s-11m57s of CPU under load
#     10-15, 804 s wall for the lead's build at load ~5).  The high sys time
#     is contention (context switches, page faults); an idle 2-core machine
#     needs about CPU / 2 plus the serial configure and install steps, i.e.
#     7-8 minutes for each of 17 and 18, 6-7 for 15.
#   - CI budget (fresh 2-core machine, .ci/run, target under 60 minutes):
#     server builds 15 + 17 + 18 ~ 21-23 min (about 42 min of CPU);
#     pg_probackup for each version ~ 0.5 min of CPU each (only when a
#     checkout is given); the suite takes ~8 min per version and mode alone,
#     so all of it on 15, 17 and 18 in both modes (~48 min) plus the builds
#     is ~72 min: over the target.  The plan: the whole suite in both modes
#     on 15 and 18 (~32 min), a defined core set on 17 in both modes (~6 min),
#     i.e. ~61 min with the builds; to get below 60, build 17 and 18 without
#     --enable-debug (-g makes every compile slower; not measured yet)
#     before cutting tests.

set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/.." && pwd)

# Everything but the final prefix line goes to stderr: keep the real stdout
# on fd 3 and point fd 1 at stderr for the rest of the script.
exec 3>&1 1>&2

log() { printf '[build-postgres] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

usage() {
	sed -n '/^# Usage:/,/^# Environment:/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2
}

MODE=build
PG_MAJOR=15
while [[ $# -gt 0 ]]; do
	case $1 in
	--print-prefix) MODE=print ;;
	--pg-version)
		[[ $# -ge 2 ]] || { usage; die "--pg-version needs a value (15, 17 or 18)"; }
		PG_MAJOR=$2
		shift
		;;
	--pg-version=*) PG_MAJOR=${1#--pg-version=} ;;
	-h|--help) usage; exit 0 ;;
	*) usage; die "unknown argument: $1" ;;
	esac
	shift
done
case $PG_MAJOR in
	15|17|18) ;;
	*) usage; die "unsupported --pg-version '$PG_MAJOR' (15, 17 or 18)" ;;
esac

PKG=postgresql-$PG_MAJOR
if [[ $PG_MAJOR == 15 ]]; then
CONTRIB_MODULES=(amcheck pageinspect pg_walinspect pg_prewarm)
# Debian's options (see the header), without the install layout and LLVM.
# Part of the cache key: change them and the next build gets a new prefix.
CONFIGURE_OPTS=(
	--enable-tap-tests --enable-debug --enable-nls --enable-thread-safety
	--enable-dtrace
	--with-openssl --with-icu --with-lz4 --with-zstd
	--with-libxml --with-libxslt
	--with-pam --with-ldap --with-gssapi --with-systemd --with-selinux
	--with-uuid=e2fs --with-readline --with-zlib
	--with-perl --with-python --with-tcl
	--with-system-tzdata=/usr/share/zoneinfo --with-pgport=5432
	PYTHON=/usr/bin/python3
	"CFLAGS=-g -O2 -fstack-protector-strong -Wformat -Werror=format-security -fno-omit-frame-pointer"
	"CPPFLAGS=-Wdate-time -D_FORTIFY_SOURCE=2"
	"LDFLAGS=-Wl,-z,relro -Wl,-z,now"
)
else
# 17 and 18: only what the tests need (see "PostgreSQL 17 and 18" in the
# header).  Part of the cache key, like the 15 options.
CONTRIB_MODULES=(amcheck pageinspect pg_walinspect pg_prewarm pg_visibility)
CONFIGURE_OPTS=(
	--enable-tap-tests --enable-debug
	--with-openssl --with-icu --with-lz4 --with-zstd
	--with-readline --with-zlib
	--with-system-tzdata=/usr/share/zoneinfo --with-pgport=5432
	"CFLAGS=-g -O2 -fstack-protector-strong -Wformat -Werror=format-security -fno-omit-frame-pointer"
	"CPPFLAGS=-Wdate-time -D_FORTIFY_SOURCE=2"
	"LDFLAGS=-Wl,-z,relro -Wl,-z,now"
)
# 18: io_uring, so that the tests can run io_method = io_uring too.
[[ $PG_MAJOR != 18 ]] || CONFIGURE_OPTS+=(--with-liburing)
fi
BUILD_DEPS=(bison flex dpkg-dev libreadline-dev zlib1g-dev libipc-run-perl
            perl make gcc libc6-dev patch bzip2 xz-utils pkg-config gettext
            libssl-dev libicu-dev liblz4-dev libzstd-dev libxml2-dev
            libxslt1-dev libpam0g-dev libldap2-dev libkrb5-dev libsystemd-dev
            libselinux1-dev uuid-dev libperl-dev python3-dev tcl-dev
            systemtap-sdt-dev)
[[ $PG_MAJOR != 18 ]] || BUILD_DEPS+=(liburing-dev)
HOOK_SYMBOLS=(mdextend_hook mdwrite_hook copydir_hook ProcessSyncRequests_hook)
[[ $PG_MAJOR == 15 ]] || HOOK_SYMBOLS+=(mdimmedsync_hook)
DEB_SRC_FILE=/etc/apt/sources.list.d/ptrack-deb-src.sources
# Source-only entries for the suites that carry postgresql-17/-18 (header).
DEB_SRC_NEWER_FILE=/etc/apt/sources.list.d/ptrack-deb-src-newer.sources
DEBIAN_MIRROR=${PTRACK_DEBIAN_MIRROR:-http://deb.debian.org/debian}
DEBIAN_SECURITY_MIRROR=${PTRACK_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
# How many upstream minor releases below the newest listed source version
# the pool fallback tries (header: "source version").
POOL_FALLBACK_STEPS=4
STAMP_NAME=.ptrack-build-stamp

PATCH_FILE=$REPO_ROOT/patches/pg$PG_MAJOR-ptrack-hooks.patch
# Per-version names under the cache root; 15 keeps its historic ones.
if [[ $PG_MAJOR == 15 ]]; then VSUFFIX=""; else VSUFFIX="-$PG_MAJOR"; fi

CACHE_ROOT=${PTRACK_PG_CACHE:-/var/cache/ptrack-pg}
[[ $CACHE_ROOT == /* ]] || CACHE_ROOT=$(pwd)/$CACHE_ROOT
CACHE_ROOT=${CACHE_ROOT%/}
[[ -n $CACHE_ROOT ]] || die "PTRACK_PG_CACHE must not be /"
CHOICE_FILE=$CACHE_ROOT/source-choice$VSUFFIX

[[ -f $PATCH_FILE ]] || die "patch not found: $PATCH_FILE"

if [[ $(id -u) -eq 0 ]]; then
	SUDO=()
elif command -v sudo >/dev/null 2>&1; then
	SUDO=(sudo -n)
else
	SUDO=()
fi

# --- the cache key ----------------------------------------------------------

PATCH_HASH=$(sha256sum "$PATCH_FILE" | cut -c1-12)
OPTIONS_HASH=$(printf '%s\n' "${CONFIGURE_OPTS[@]}" "contrib: ${CONTRIB_MODULES[*]}" \
	$([[ $PG_MAJOR == 15 ]] || echo "extra: bin/postgres-nohooks") |
	sha256sum | cut -c1-12)

prefix_for() {
	local safe
	# Keep the path shell/make friendly: an epoch colon or other odd
	# characters become underscores.
	safe=$(printf '%s' "$1" | tr -c 'A-Za-z0-9.+-' '_')
	printf '%s/pg-%s-%s-%s\n' "$CACHE_ROOT" "$safe" "$PATCH_HASH" "$OPTIONS_HASH"
}

# Newest first, space-separated: every postgresql-15 source version apt
# knows of (local package lists only, no network).
known_source_versions() {
	apt-cache showsrc "$PKG" 2>/dev/null |
		awk -v pkg="$PKG" '$1 == "Package:" { cur = $2 } $1 == "Version:" && cur == pkg { print $2 }' |
		sort -u | sort -r -V | paste -sd' ' -
}

# The recorded choice (see the header); with an argument, only if it was
# made from that same list of candidates.
recorded_choice() {
	local cands chosen
	[[ -f $CHOICE_FILE ]] || return 1
	cands=$(sed -n 's/^candidates=//p' "$CHOICE_FILE")
	chosen=$(sed -n 's/^chosen=//p' "$CHOICE_FILE")
	[[ -n $chosen ]] || return 1
	[[ $# -eq 0 || $cands == "$1" ]] || return 1
	printf '%s\n' "$chosen"
}

# Best effort (the cache may not be writable by this user), atomic.
record_choice() {
	local tmp=$CHOICE_FILE.tmp.$$
	[[ -d $CACHE_ROOT && -w $CACHE_ROOT ]] || return 0
	printf 'candidates=%s\nchosen=%s\n' "$1" "$2" >"$tmp" 2>/dev/null &&
		mv -f "$tmp" "$CHOICE_FILE" 2>/dev/null || rm -f "$tmp" 2>/dev/null || true
}

# The .dsc URI of a source version apt lists (no network).
listed_dsc_uri() {
	apt-get source --print-uris "$PKG=$1" 2>/dev/null |
		awk '$2 ~ /\.dsc$/ { u = $1; gsub(/\047/, "", u); print u; exit }'
}

# The pool fallback (header): "version dsc-URI" lines, newest first, for the
# POOL_FALLBACK_STEPS upstream minor releases below the newest listed
# version, with its Debian revision, in its pool directory.  No network.
pool_candidates() {
	local newest uri upstream rev major minor m v
	newest=$(known_source_versions)
	newest=${newest%% *}
	[[ -n $newest && $newest == *-* && $newest != *:* ]] || return 0
	uri=$(listed_dsc_uri "$newest")
	[[ -n $uri ]] || return 0
	upstream=${newest%%-*}
	rev=${newest#*-}
	major=${upstream%%.*}
	minor=${upstream#*.}
	[[ $minor =~ ^[0-9]+$ ]] || return 0
	for ((m = minor - 1; m >= 0 && m >= minor - POOL_FALLBACK_STEPS; m--)); do
		v=$major.$m-$rev
		printf '%s %s/%s_%s.dsc\n' "$v" "${uri%/*}" "$PKG" "${v//+/%2b}"
	done
}

# The .dsc URI of a version: apt's, or the pool fallback's.
dsc_uri() {
	local uri v u
	uri=$(listed_dsc_uri "$1")
	if [[ -z $uri ]]; then
		while read -r v u; do
			[[ $v == "$1" ]] && { uri=$u; break; }
		done < <(pool_candidates)
	fi
	[[ -n $uri ]] && printf '%s\n' "$uri"
}

# Download one URI to a file with apt's own downloader.
download() {
	/usr/lib/apt/apt-helper -o APT::Sandbox::User=root -o Acquire::Retries=0 \
		-o Acquire::http::Timeout=20 download-file "$1" "$2" >/dev/null 2>&1
}

# Does the archive serve this source version?  Fetches only its .dsc.
source_available() {
	local uri dir rc=0
	uri=$(dsc_uri "$1")
	[[ -n $uri ]] || return 1
	dir=$(mktemp -d)
	download "$uri" "$dir/probe.dsc" || rc=$?
	rm -rf "$dir"
	return $rc
}

# The source version rule (see the header).  Sets CANDIDATES and
# SOURCE_VERSION; returns 1 if apt knows no source and nothing is recorded,
# 2 if no candidate could be reached.
resolve_source_version() {
	local v
	SOURCE_VERSION=""
	CANDIDATES=""
	if [[ -n ${PTRACK_PG_VERSION:-} ]]; then
		SOURCE_VERSION=$PTRACK_PG_VERSION
		return 0
	fi
	CANDIDATES=$(known_source_versions)
	if [[ -z $CANDIDATES ]]; then
		SOURCE_VERSION=$(recorded_choice) && return 0
		return 1
	fi
	SOURCE_VERSION=$(recorded_choice "$CANDIDATES") && return 0
	for v in $CANDIDATES $(pool_candidates | cut -d' ' -f1); do
		if source_available "$v"; then
			SOURCE_VERSION=$v
			record_choice "$CANDIDATES" "$v"
			return 0
		fi
	done
	SOURCE_VERSION=""
	return 2
}

# When no candidate can be reached (offline) and none is recorded for this
# list: the newest candidate already built, if any.  Used by both modes.
offline_choice() {
	local v
	for v in $CANDIDATES; do
		if [[ -f $(prefix_for "$v")/$STAMP_NAME ]]; then
			SOURCE_VERSION=$v
			log "WARNING: no $PKG source version could be reached ($CANDIDATES); using the built $v"
			return 0
		fi
	done
	return 1
}

if [[ $MODE == print ]]; then
	rc=0
	resolve_source_version || rc=$?
	case $rc in
	0) ;;
	1) die "apt knows no $PKG source package and no build is recorded in $CACHE_ROOT: run scripts/build-postgres.sh (it adds deb-src entries and runs apt-get update)" ;;
	*)
		# The next build cannot fetch anything either: name the best guess.
		if ! offline_choice; then
			SOURCE_VERSION=${CANDIDATES%% *}
			log "WARNING: no $PKG source version could be reached ($CANDIDATES); assuming $SOURCE_VERSION"
		fi
		;;
	esac
	prefix_for "$SOURCE_VERSION" >&3
	exit 0
fi

# --- build mode -------------------------------------------------------------

# If the rule's answer is already built, print its prefix and stop.
exit_if_built() {
	local rc=0
	resolve_source_version 2>/dev/null || rc=$?
	[[ $rc -eq 0 ]] || { [[ $rc -eq 2 ]] && offline_choice; } || return 0
	PREFIX=$(prefix_for "$SOURCE_VERSION")
	if [[ -f $PREFIX/$STAMP_NAME ]]; then
		log "up to date: $PREFIX"
		printf '%s\n' "$PREFIX" >&3
		exit 0
	fi
}

# Fast path: a complete install needs neither the lock nor apt's network.
exit_if_built

as_root() {
	if [[ $(id -u) -eq 0 ]]; then
		"$@"
	elif [[ ${#SUDO[@]} -gt 0 ]]; then
		"${SUDO[@]}" "$@"
	else
		die "needs root for: $*"
	fi
}

mkdir -p "$CACHE_ROOT" 2>/dev/null || as_root install -d -m 0755 -o "$(id -u)" -g "$(id -g)" "$CACHE_ROOT"

exec 9>"$CACHE_ROOT/.lock$VSUFFIX"
if ! flock -n 9; then
	log "another build holds $CACHE_ROOT/.lock$VSUFFIX; waiting for it"
	flock 9
fi

# Someone else may have finished this build while we waited for the lock.
exit_if_built

START=$(date +%s)
LOG_FILE=$CACHE_ROOT/bootstrap$VSUFFIX.log
: >"$LOG_FILE"

# Run a command with its output appended to the build log; on failure show
# the end of the log and stop.
run() {
	local what=$1
	shift
	log "$what"
	printf '\n==== %s\n==== $ %s\n' "$what" "$*" >>"$LOG_FILE"
	if ! "$@" >>"$LOG_FILE" 2>&1; then
		log "FAILED: $what"
		log "last lines of $LOG_FILE:"
		tail -n 60 "$LOG_FILE" >&2
		exit 1
	fi
}

export DEBIAN_FRONTEND=noninteractive


have_deb_src() {
	local f
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[[ -f $f ]] || continue
		grep -qE '^[[:space:]]*deb-src[[:space:]]' "$f" && return 0
	done
	for f in /etc/apt/sources.list.d/*.sources; do
		[[ -f $f ]] || continue
		grep -qiE '^Types:.*[[:space:]]deb-src([[:space:]]|$)' "$f" && return 0
	done
	return 1
}

# Print deb822 "deb-src" stanzas mirroring every enabled "deb" entry.
derive_deb_src() {
	local f
	for f in /etc/apt/sources.list.d/*.sources; do
		[[ -f $f && $f != "$DEB_SRC_FILE" ]] || continue
		# Paragraph-wise: keep stanzas whose Types include "deb" and that
		# are not disabled; emit only the fields apt needs for sources.
		awk '
			function flush() {
				if (is_deb && !disabled && uris != "")
				{
					print "Types: deb-src"
					print "URIs: " uris
					if (suites != "") print "Suites: " suites
					if (comps != "") print "Components: " comps
					if (signed != "") print "Signed-By: " signed
					print ""
				}
				is_deb = 0; disabled = 0; uris = suites = comps = signed = ""
				last = ""
			}
			/^[[:space:]]*#/ { next }
			/^[[:space:]]*$/ { flush(); next }
			# Continuation line (e.g. an inline key under Signed-By:).
			/^[[:space:]]/ {
				if (last == "signed-by") signed = signed "\n" $0
				next
			}
			{
				line = $0
				field = tolower(line); sub(/:.*/, "", field)
				value = line; sub(/^[^:]*:[[:space:]]*/, "", value)
				if (field == "types") {
					n = split(value, t, /[[:space:]]+/)
					for (i = 1; i <= n; i++) if (t[i] == "deb") is_deb = 1
				}
				else if (field == "enabled" && tolower(value) == "no") disabled = 1
				else if (field == "uris") uris = value
				else if (field == "suites") suites = value
				else if (field == "components") comps = value
				else if (field == "signed-by") signed = value
				last = field
			}
			END { flush() }
		' "$f"
	done
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[[ -f $f ]] || continue
		# One-line format: deb [options] URI suite [component...]
		awk '
			$1 != "deb" { next }
			{
				signed = ""; i = 2
				if ($2 ~ /^\[/) {
					opts = ""
					while (i <= NF) {
						opts = opts " " $i
						if ($i ~ /\]$/) { i++; break }
						i++
					}
					gsub(/[][]/, "", opts)
					n = split(opts, o, /[[:space:]]+/)
					for (j = 1; j <= n; j++)
						if (o[j] ~ /^signed-by=/) { signed = o[j]; sub(/^signed-by=/, "", signed) }
				}
				uri = $i; suite = $(i + 1); comps = ""
				for (k = i + 2; k <= NF; k++) comps = comps (comps == "" ? "" : " ") $k
				print "Types: deb-src"
				print "URIs: " uri
				print "Suites: " suite
				if (comps != "") print "Components: " comps
				if (signed != "") print "Signed-By: " signed
				print ""
			}
		' "$f"
	done
}


ensure_apt_ready() {
	local need_update=0 missing=() p status
	if ! have_deb_src; then
		local stanzas
		stanzas=$(derive_deb_src)
		[[ -n $stanzas ]] || die "found no 'deb' entries in /etc/apt to derive a deb-src entry from"
		log "no deb-src configured; writing $DEB_SRC_FILE"
		printf '# Written by ptrack scripts/build-postgres.sh: source entries mirroring\n# the binary ones, so that "apt-get source postgresql-15" works.\n\n%s\n' \
			"$stanzas" | as_root tee "$DEB_SRC_FILE" >/dev/null
		need_update=1
	fi
	if [[ $PG_MAJOR != 15 && ! -f $DEB_SRC_NEWER_FILE ]]; then
		log "writing $DEB_SRC_NEWER_FILE (deb-src only: trixie, trixie-updates, trixie-security, sid)"
		printf '%s\n' \
			"# Written by ptrack scripts/build-postgres.sh --pg-version 17|18: SOURCE" \
			"# entries only (no binary \"deb\" lines, so nothing installed is upgraded)" \
			"# for Debian's newer suites, which carry postgresql-17 and postgresql-18." \
			"" \
			"Types: deb-src" "URIs: $DEBIAN_MIRROR" "Suites: trixie trixie-updates sid" \
			"Components: main" "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" \
			"" \
			"Types: deb-src" "URIs: $DEBIAN_SECURITY_MIRROR" "Suites: trixie-security" \
			"Components: main" "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" |
			as_root tee "$DEB_SRC_NEWER_FILE" >/dev/null
		need_update=1
	fi
	if [[ -z $(known_source_versions) ]]; then
		need_update=1
	fi
	if [[ $need_update -eq 1 ]]; then
		run "apt-get update" as_root apt-get update
	fi
	for p in "${BUILD_DEPS[@]}"; do
		status=$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null || true)
		[[ $status == ii* ]] || missing+=("$p")
	done
	if [[ ${#missing[@]} -gt 0 ]]; then
		log "installing build dependencies: ${missing[*]}"
		if ! as_root apt-get install -y --no-install-recommends "${missing[@]}" >>"$LOG_FILE" 2>&1; then
			# Stale package lists are the usual cause; refresh once and retry.
			run "apt-get update" as_root apt-get update
			run "apt-get install ${missing[*]}" \
				as_root apt-get install -y --no-install-recommends "${missing[@]}"
		fi
	fi
}

# Download a source package into the current directory: the version the
# rule chose first, then (unless PTRACK_PG_VERSION pins it) every other
# known one, newest first.  Prints the version actually fetched.
fetch_source() {
	local first=$1 v tried=()
	for v in "$first" $([[ -n ${PTRACK_PG_VERSION:-} ]] ||
			{ known_source_versions; pool_candidates | cut -d' ' -f1; }); do
		[[ -n $v ]] || continue
		[[ " ${tried[*]} " == *" $v "* ]] && continue
		tried+=("$v")
		rm -f ./*.dsc ./*.tar.* ./*.diff.gz
		if [[ -n $(listed_dsc_uri "$v") ]]; then
			printf '\n==== apt-get source --download-only %s=%s\n' "$PKG" "$v" >>"$LOG_FILE"
			if apt-get source --download-only "$PKG=$v" >>"$LOG_FILE" 2>&1; then
				printf '%s\n' "$v"
				return 0
			fi
		elif fetch_unlisted "$v" >>"$LOG_FILE" 2>&1; then
			printf '%s\n' "$v"
			return 0
		fi
		log "source $PKG=$v cannot be fetched"
	done
	return 1
}

# A version apt does not list (the pool fallback, header): its .dsc and the
# files it names, each checked against the .dsc's SHA-256.
fetch_unlisted() {
	local uri name sum size
	uri=$(dsc_uri "$1")
	[[ -n $uri ]] || return 1
	printf '\n==== pool fallback: %s (not listed by apt)\n' "$uri"
	download "$uri" "./${PKG}_$1.dsc" || return 1
	while read -r sum size name; do
		[[ -n $name ]] || continue
		printf 'fetching %s\n' "$name"
		download "${uri%/*}/${name//+/%2b}" "./$name" || return 1
		[[ $(stat -c %s "./$name") == "$size" ]] || { echo "size mismatch: $name"; return 1; }
		sha256sum -c - <<<"$sum  ./$name" || return 1
	done < <(awk '/^Checksums-Sha256:/ { on = 1; next } /^[^ ]/ { on = 0 } on && NF == 3 { print }' "./${PKG}_$1.dsc")
}

ensure_apt_ready
rc=0
resolve_source_version || rc=$?
[[ $rc -ne 1 ]] || die "apt knows no $PKG source package even after apt-get update (see $LOG_FILE)"

DOWNLOAD_DIR=$CACHE_ROOT/.download$VSUFFIX
rm -rf "$DOWNLOAD_DIR"
mkdir -p "$DOWNLOAD_DIR"
cd "$DOWNLOAD_DIR"
log "fetching source package $PKG=${SOURCE_VERSION:-<newest available>}"
FETCHED=$(fetch_source "$SOURCE_VERSION") || {
	log "last lines of $LOG_FILE:"
	tail -n 40 "$LOG_FILE" >&2
	die "could not fetch any $PKG source package"
}
[[ -n ${PTRACK_PG_VERSION:-} ]] || record_choice "$(known_source_versions)" "$FETCHED"
SOURCE_VERSION=$FETCHED
PREFIX=$(prefix_for "$SOURCE_VERSION")
cd "$CACHE_ROOT"
if [[ -f $PREFIX/$STAMP_NAME ]]; then
	rm -rf "$DOWNLOAD_DIR" "$LOG_FILE"
	log "up to date: $PREFIX"
	printf '%s\n' "$PREFIX" >&3
	exit 0
fi

BUILD_DIR=$PREFIX.build
cat "$LOG_FILE" >"$PREFIX.log"
rm -f "$LOG_FILE"
LOG_FILE=$PREFIX.log
log "building PostgreSQL ($PKG source $SOURCE_VERSION + $(basename "$PATCH_FILE")) into $PREFIX"
log "full build log: $LOG_FILE"

# Start from scratch: whatever is there is an interrupted attempt.
rm -rf "$PREFIX" "$BUILD_DIR"
mv "$DOWNLOAD_DIR" "$BUILD_DIR"
cd "$BUILD_DIR"

DSC=$(ls ./*.dsc)
run "unpacking $DSC (upstream source, Debian patches not applied)" \
	dpkg-source --skip-patches -x "$DSC" src
cd src

run "applying $(basename "$PATCH_FILE")" patch -p1 --fuzz=0 --batch -i "$PATCH_FILE"

COMPILE_START=$(date +%s)
run "configure" ./configure --prefix="$PREFIX" "${CONFIGURE_OPTS[@]}"

JOBS=$(nproc)
run "make -j$JOBS" make -j"$JOBS"
run "make install" make install
for m in "${CONTRIB_MODULES[@]}"; do
	run "contrib/$m: build and install" make -C "contrib/$m" -j"$JOBS" install
done
# PGXS TAP tests (TAP_TESTS=1 make installcheck) look for the perl test
# modules and pg_regress under $PREFIX/lib/pgxs/src/test/.
run "install TAP test perl modules" make -C src/test/perl install
run "install pg_regress" make -C src/test/regress install
if [[ $PG_MAJOR != 15 ]]; then
	# The same server without the hooks (header: "PostgreSQL 17 and 18"):
	# the patch reversed, only md.c, copydir.c and sync.c recompiled (no
	# --enable-depend: the other objects keep the patched headers' extra
	# extern declarations, which change no code) and postgres relinked.
	run "reverse $(basename "$PATCH_FILE") for bin/postgres-nohooks" \
		patch -p1 -R --fuzz=0 --batch -i "$PATCH_FILE"
	run "make postgres without the hooks" make -C src/backend -j"$JOBS" postgres
	run "install bin/postgres-nohooks" install -m 0755 src/backend/postgres "$PREFIX/bin/postgres-nohooks"
	run "re-apply $(basename "$PATCH_FILE") to the build tree" \
		patch -p1 --fuzz=0 --batch -i "$PATCH_FILE"
fi
COMPILE_END=$(date +%s)

# --- verify -----------------------------------------------------------------

log "verifying the install"
"$PREFIX/bin/pg_config" --version >/dev/null || die "$PREFIX/bin/pg_config does not run"
# pg_config --pgxs names <pgxsdir>/src/makefiles/pgxs.mk
PGXS_DIR=$("$PREFIX/bin/pg_config" --pgxs)
PGXS_DIR=${PGXS_DIR%/src/makefiles/pgxs.mk}
for f in "$PGXS_DIR/src/test/perl/PostgreSQL/Test/Cluster.pm" \
         "$PGXS_DIR/src/test/perl/PostgreSQL/Test/Utils.pm" \
         "$PGXS_DIR/src/test/regress/pg_regress"; do
	[[ -f $f ]] || die "missing after install: $f"
done
for m in "${CONTRIB_MODULES[@]}"; do
	[[ -f $("$PREFIX/bin/pg_config" --sharedir)/extension/$m.control ]] ||
		die "contrib module $m not installed"
done
SYMBOLS=$(nm -D --defined-only "$PREFIX/bin/postgres")
for s in "${HOOK_SYMBOLS[@]}"; do
	grep -qE "[[:space:]]$s\$" <<<"$SYMBOLS" ||
		die "hook symbol $s is NOT exported by $PREFIX/bin/postgres -- the core patch did not take effect"
done
log "hooks present: ${HOOK_SYMBOLS[*]}"
if [[ $PG_MAJOR != 15 ]]; then
	SYMBOLS=$(nm -D --defined-only "$PREFIX/bin/postgres-nohooks")
	for s in "${HOOK_SYMBOLS[@]}"; do
		! grep -qE "[[:space:]]$s\$" <<<"$SYMBOLS" ||
			die "$PREFIX/bin/postgres-nohooks exports $s: it is not the stock server"
	done
	"$PREFIX/bin/postgres-nohooks" --version >/dev/null || die "$PREFIX/bin/postgres-nohooks does not run"
	log "bin/postgres-nohooks exports none of them"
fi

END=$(date +%s)
# Written last: its presence marks a complete, verified install.
{
	printf 'source_version=%s\n' "$SOURCE_VERSION"
	printf 'source_listed_by_apt=%s\n' "$([[ -n $(listed_dsc_uri "$SOURCE_VERSION") ]] && echo yes || echo "no (pool fallback)")"
	printf 'pg_version=%s\n' "$("$PREFIX/bin/pg_config" --version)"
	printf 'patch=%s\n' "$(basename "$PATCH_FILE")"
	printf 'patch_sha256=%s\n' "$(sha256sum "$PATCH_FILE" | cut -d' ' -f1)"
	printf 'options_hash=%s\n' "$OPTIONS_HASH"
	printf 'configure=%s\n' "${CONFIGURE_OPTS[*]}"
	printf 'contrib=%s\n' "${CONTRIB_MODULES[*]}"
	printf 'built_at=%s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
	printf 'compile_seconds=%s\n' "$((COMPILE_END - COMPILE_START))"
	printf 'total_seconds=%s\n' "$((END - START))"
} >"$PREFIX/$STAMP_NAME.tmp"
mv "$PREFIX/$STAMP_NAME.tmp" "$PREFIX/$STAMP_NAME"

log "done in $((END - START))s (configure to install: $((COMPILE_END - COMPILE_START))s): $("$PREFIX/bin/pg_config" --version) at $PREFIX"
printf '%s\n' "$PREFIX" >&3
