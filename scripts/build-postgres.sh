#!/usr/bin/env bash
#
# build-postgres.sh -- build and cache a PostgreSQL 15 server carrying the
# ptrack core hooks (patches/pg15-ptrack-hooks.patch).
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
# scripts/test-debian-cluster.sh checks the drop-in claim.
#
# Usage:
#   scripts/build-postgres.sh                 build if needed; the last (and
#                                             only) line on stdout is the prefix
#   scripts/build-postgres.sh --print-prefix  print the prefix the next build
#                                             produces (or has produced);
#                                             never builds
#
# Environment:
#   PTRACK_PG_CACHE     cache root (default /var/cache/ptrack-pg)
#   PTRACK_PG_VERSION   build exactly this postgresql-15 source version (no
#                       fallback to another one); normally left unset
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
#
# The source is unpacked with Debian's packaging patches NOT applied
# (dpkg-source --skip-patches), i.e. it is upstream PostgreSQL.  Debian's
# 50-per-version-dirs patch hard-codes pkglibdir to
# /usr/lib/postgresql/15/lib for any prefix not containing "postgres", so
# with it `make install` would write into (and clobber) the system server's
# module directory; its other patches only matter for Debian's own packaging.

set -euo pipefail

PKG=postgresql-15
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
BUILD_DEPS=(bison flex dpkg-dev libreadline-dev zlib1g-dev libipc-run-perl
            perl make gcc libc6-dev patch bzip2 xz-utils pkg-config gettext
            libssl-dev libicu-dev liblz4-dev libzstd-dev libxml2-dev
            libxslt1-dev libpam0g-dev libldap2-dev libkrb5-dev libsystemd-dev
            libselinux1-dev uuid-dev libperl-dev python3-dev tcl-dev
            systemtap-sdt-dev)
HOOK_SYMBOLS=(mdextend_hook mdwrite_hook copydir_hook ProcessSyncRequests_hook)
DEB_SRC_FILE=/etc/apt/sources.list.d/ptrack-deb-src.sources
STAMP_NAME=.ptrack-build-stamp

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/.." && pwd)
PATCH_FILE=$REPO_ROOT/patches/pg15-ptrack-hooks.patch

# Everything but the final prefix line goes to stderr: keep the real stdout
# on fd 3 and point fd 1 at stderr for the rest of the script.
exec 3>&1 1>&2

log() { printf '[build-postgres] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

usage() {
	sed -n '/^# Usage:/,/^# Environment:/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2
}

MODE=build
case "${1:-}" in
	"") ;;
	--print-prefix) MODE=print ;;
	-h|--help) usage; exit 0 ;;
	*) usage; die "unknown argument: $1" ;;
esac
[[ $# -le 1 ]] || { usage; die "too many arguments"; }

CACHE_ROOT=${PTRACK_PG_CACHE:-/var/cache/ptrack-pg}
[[ $CACHE_ROOT == /* ]] || CACHE_ROOT=$(pwd)/$CACHE_ROOT
CACHE_ROOT=${CACHE_ROOT%/}
[[ -n $CACHE_ROOT ]] || die "PTRACK_PG_CACHE must not be /"
CHOICE_FILE=$CACHE_ROOT/source-choice

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
OPTIONS_HASH=$(printf '%s\n' "${CONFIGURE_OPTS[@]}" "contrib: ${CONTRIB_MODULES[*]}" |
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

# Does the archive serve this source version?  Fetches only its .dsc.
source_available() {
	local uri dir rc=0
	uri=$(apt-get source --print-uris "$PKG=$1" 2>/dev/null |
		awk '$2 ~ /\.dsc$/ { u = $1; gsub(/\047/, "", u); print u; exit }')
	[[ -n $uri ]] || return 1
	dir=$(mktemp -d)
	/usr/lib/apt/apt-helper -o APT::Sandbox::User=root -o Acquire::Retries=0 \
		-o Acquire::http::Timeout=20 download-file "$uri" "$dir/probe.dsc" \
		>/dev/null 2>&1 || rc=$?
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
	for v in $CANDIDATES; do
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

exec 9>"$CACHE_ROOT/.lock"
if ! flock -n 9; then
	log "another build holds $CACHE_ROOT/.lock; waiting for it"
	flock 9
fi

# Someone else may have finished this build while we waited for the lock.
exit_if_built

START=$(date +%s)
LOG_FILE=$CACHE_ROOT/bootstrap.log
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
	for v in "$first" $([[ -n ${PTRACK_PG_VERSION:-} ]] || known_source_versions); do
		[[ -n $v ]] || continue
		[[ " ${tried[*]} " == *" $v "* ]] && continue
		tried+=("$v")
		rm -f ./*.dsc ./*.tar.* ./*.diff.gz
		printf '\n==== apt-get source --download-only %s=%s\n' "$PKG" "$v" >>"$LOG_FILE"
		if apt-get source --download-only "$PKG=$v" >>"$LOG_FILE" 2>&1; then
			printf '%s\n' "$v"
			return 0
		fi
		log "source $PKG=$v cannot be fetched"
	done
	return 1
}

ensure_apt_ready
rc=0
resolve_source_version || rc=$?
[[ $rc -ne 1 ]] || die "apt knows no $PKG source package even after apt-get update (see $LOG_FILE)"

DOWNLOAD_DIR=$CACHE_ROOT/.download
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

END=$(date +%s)
# Written last: its presence marks a complete, verified install.
{
	printf 'source_version=%s\n' "$SOURCE_VERSION"
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
