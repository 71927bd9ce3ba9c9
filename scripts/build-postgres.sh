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
# package with apt, applies our patch, configures a production-like build
# (no assertions) with TAP tests enabled, and installs the server, a few
# contrib modules and the PGXS test infrastructure (pg_regress, the
# PostgreSQL::Test::* perl modules) into a prefix outside the repository.
#
# The prefix is keyed on the PostgreSQL version and the patch contents, so a
# second run with the same inputs reuses the finished install and returns at
# once; a changed patch or a new minor release gets a fresh prefix.
#
# Usage:
#   scripts/build-postgres.sh                 build if needed; the last (and
#                                             only) line on stdout is the prefix
#   scripts/build-postgres.sh --print-prefix  print the prefix that would be
#                                             used; never builds, no network
#
# Environment:
#   PTRACK_PG_CACHE     cache root (default /var/cache/ptrack-pg)
#   PTRACK_PG_VERSION   override the Debian version used as the key (and
#                       fetched first); normally left unset
#
# Which version is built (one rule, the same before and after a build):
#   the key is the version of the installed binary package postgresql-15
#   (dpkg-query); if that package is not installed, apt's candidate version
#   of it.  Exactly that source version is fetched with
#   `apt-get source postgresql-15=<key>`.  If the archive cannot serve that
#   exact source (e.g. a security update whose source pool is unreachable),
#   the newest postgresql-15 source version apt knows of that *can* be
#   fetched is used instead; the version actually built is recorded in
#   $PREFIX/.ptrack-build-stamp and reported on stderr.
#
# Layout under the cache root:
#   pg-<key>-<patchhash>/             the install prefix (bin, lib, include..)
#   pg-<key>-<patchhash>/.ptrack-build-stamp   written last = install complete
#   pg-<key>-<patchhash>.build/       source + build tree (wiped per build)
#   pg-<key>-<patchhash>.log          full build log
#   .lock                             flock serialising concurrent builds
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
BUILD_DEPS=(bison flex dpkg-dev libreadline-dev zlib1g-dev libipc-run-perl
            perl make gcc libc6-dev patch bzip2 xz-utils)
HOOK_SYMBOLS=(mdextend_hook mdwrite_hook copydir_hook ProcessSyncRequests_hook)
DEB_SRC_FILE=/etc/apt/sources.list.d/ptrack-deb-src.sources

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

[[ -f $PATCH_FILE ]] || die "patch not found: $PATCH_FILE"

if [[ $(id -u) -eq 0 ]]; then
	SUDO=()
elif command -v sudo >/dev/null 2>&1; then
	SUDO=(sudo -n)
else
	SUDO=()
fi

# --- the cache key ----------------------------------------------------------

# The Debian version of postgresql-15 this build is keyed on (see header).
key_version() {
	if [[ -n ${PTRACK_PG_VERSION:-} ]]; then
		printf '%s\n' "$PTRACK_PG_VERSION"
		return 0
	fi
	local status version
	status=$(dpkg-query -W -f='${db:Status-Abbrev}' "$PKG" 2>/dev/null || true)
	if [[ $status == ii* ]]; then
		dpkg-query -W -f='${Version}\n' "$PKG"
		return 0
	fi
	version=$(apt-cache policy "$PKG" 2>/dev/null | awk '$1 == "Candidate:" { print $2 }')
	if [[ -n $version && $version != "(none)" ]]; then
		printf '%s\n' "$version"
		return 0
	fi
	return 1
}

patch_hash() {
	sha256sum "$PATCH_FILE" | cut -c1-12
}

compute_prefix() {
	local version safe
	version=$(key_version) || return 1
	# Keep the path shell/make friendly: an epoch colon or other odd
	# characters become underscores.
	safe=$(printf '%s' "$version" | tr -c 'A-Za-z0-9.+-' '_')
	printf '%s/pg-%s-%s\n' "$CACHE_ROOT" "$safe" "$(patch_hash)"
}

if [[ $MODE == print ]]; then
	PREFIX=$(compute_prefix) ||
		die "cannot tell the $PKG version: it is not installed and apt knows no candidate (install $PKG, run apt-get update, or set PTRACK_PG_VERSION)"
	printf '%s\n' "$PREFIX" >&3
	exit 0
fi

# --- build mode -------------------------------------------------------------

STAMP_NAME=.ptrack-build-stamp

# Fast path: a complete install needs neither the lock nor apt.
if PREFIX=$(compute_prefix 2>/dev/null) && [[ -f $PREFIX/$STAMP_NAME ]]; then
	log "up to date: $PREFIX"
	printf '%s\n' "$PREFIX" >&3
	exit 0
fi

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

LOG_FILE=""

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
	if [[ -z $(apt-cache showsrc "$PKG" 2>/dev/null | head -n1) ]]; then
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

# Newest first: every postgresql-15 source version apt knows of.
known_source_versions() {
	apt-cache showsrc "$PKG" 2>/dev/null |
		awk -v pkg="$PKG" '$1 == "Package:" { cur = $2 } $1 == "Version:" && cur == pkg { print $2 }' |
		sort -u | sort -r -V
}

# Download the source package into the current directory; prints the
# version actually fetched.
fetch_source() {
	local want=$1 v
	printf '\n==== apt-get source %s=%s\n' "$PKG" "$want" >>"$LOG_FILE"
	if apt-get source --download-only "$PKG=$want" >>"$LOG_FILE" 2>&1; then
		printf '%s\n' "$want"
		return 0
	fi
	log "source $PKG=$want cannot be fetched; trying the other source versions apt knows"
	while read -r v; do
		[[ -n $v && $v != "$want" ]] || continue
		rm -f ./*.dsc ./*.tar.* ./*.diff.gz
		printf '\n==== apt-get source %s=%s\n' "$PKG" "$v" >>"$LOG_FILE"
		if apt-get source --download-only "$PKG=$v" >>"$LOG_FILE" 2>&1; then
			printf '%s\n' "$v"
			return 0
		fi
	done < <(known_source_versions)
	return 1
}

# The key may change once apt lists exist (package not installed, fresh
# machine), so set apt up before computing the prefix in that case.
START=$(date +%s)
LOG_FILE=$CACHE_ROOT/bootstrap.log
: >"$LOG_FILE"
if ! PREFIX=$(compute_prefix 2>/dev/null) || ! have_deb_src; then
	ensure_apt_ready
	APT_READY=1
else
	APT_READY=0
fi
PREFIX=$(compute_prefix) ||
	die "cannot tell the $PKG version: it is not installed and apt knows no candidate (install $PKG or set PTRACK_PG_VERSION)"
KEY_VERSION=$(key_version)

# Someone else may have finished this build while we waited for the lock.
if [[ -f $PREFIX/$STAMP_NAME ]]; then
	log "up to date: $PREFIX"
	printf '%s\n' "$PREFIX" >&3
	exit 0
fi

BUILD_DIR=$PREFIX.build
LOG_FILE=$PREFIX.log
cat "$CACHE_ROOT/bootstrap.log" >"$LOG_FILE"
rm -f "$CACHE_ROOT/bootstrap.log"
log "building PostgreSQL ($PKG $KEY_VERSION + $(basename "$PATCH_FILE")) into $PREFIX"
log "full build log: $LOG_FILE"

[[ $APT_READY -eq 1 ]] || ensure_apt_ready

# Start from scratch: whatever is there is an interrupted attempt.
rm -rf "$PREFIX" "$BUILD_DIR"
mkdir -p "$BUILD_DIR"
cd "$BUILD_DIR"

log "fetching source package $PKG=$KEY_VERSION"
SOURCE_VERSION=$(fetch_source "$KEY_VERSION") || {
	log "last lines of $LOG_FILE:"
	tail -n 40 "$LOG_FILE" >&2
	die "could not fetch any $PKG source package"
}
if [[ $SOURCE_VERSION != "$KEY_VERSION" ]]; then
	log "NOTE: building source $SOURCE_VERSION (installed binary / key is $KEY_VERSION)"
fi

DSC=$(ls ./*.dsc)
run "unpacking $DSC (upstream source, Debian patches not applied)" \
	dpkg-source --skip-patches -x "$DSC" src
cd src

run "applying $(basename "$PATCH_FILE")" patch -p1 --fuzz=0 --batch -i "$PATCH_FILE"

run "configure" env CFLAGS="-O2 -g" ./configure \
	--prefix="$PREFIX" \
	--enable-tap-tests \
	--enable-debug \
	--without-icu \
	--without-llvm \
	--with-readline \
	--with-zlib

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
cat >"$PREFIX/$STAMP_NAME.tmp" <<EOF
key_version=$KEY_VERSION
source_version=$SOURCE_VERSION
pg_version=$("$PREFIX/bin/pg_config" --version)
patch=$(basename "$PATCH_FILE")
patch_sha256=$(sha256sum "$PATCH_FILE" | cut -d' ' -f1)
built_at=$(date -u +%Y-%m-%dT%H:%M:%SZ)
build_seconds=$((END - START))
EOF
mv "$PREFIX/$STAMP_NAME.tmp" "$PREFIX/$STAMP_NAME"

log "done in $((END - START))s: $("$PREFIX/bin/pg_config" --version) at $PREFIX"
printf '%s\n' "$PREFIX" >&3
