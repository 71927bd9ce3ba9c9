#!/usr/bin/env bash
#
# build-pg-probackup.sh -- build and cache pg_probackup from a given source
# checkout against one of the servers of scripts/build-postgres.sh.
#
# Why this exists: the suite's PTRACK backup chains (PTRACK_PG_PROBACKUP)
# need a pg_probackup built for the server's major version, and pg_probackup
# is built from source against that server's pg_config plus an unconfigured
# PostgreSQL source tree of the same version (it compiles a few of the
# server's files: pg_crc.c, xlogreader.c, pg_basebackup's receivelog.c...).
# For 18 its README asks to apply its patches/REL_18_STABLE_pg_probackup.patch
# to that tree first (pg_crc.c: the SQL-callable functions under #ifndef
# FRONTEND).  That change only matters to the copy pg_probackup compiles:
# this script applies it to a private copy of the tree and leaves the
# server alone (the server's own pg_crc.c is compiled without FRONTEND, so
# the patch would not change it anyway).  Any patches/REL_<N>_STABLE_*.patch
# that pg_probackup ships for the chosen major version is applied the same
# way.
#
# The machine that runs CI has no internet: pg_probackup's source is never
# downloaded here.  SOURCE is either a git checkout (a work tree or a
# bare/mirror repository) or a `git archive` tarball of one; without SOURCE
# the script takes the vendored tarball the project's machines keep beside
# the repository (../shared/vendor/pg_probackup-*.tar.gz, see its README;
# PTRACK_VENDOR_DIR names another folder).  With neither it says so and
# exits 2, and callers decide whether the pg_probackup tests may skip.
#
# Usage:
#   scripts/build-pg-probackup.sh [--pg-version 15|17|18] [--ref REF] [SOURCE]
#       build if needed; the last (and only) line on stdout is the path of
#       the pg_probackup binary.  SOURCE may also come from
#       $PTRACK_PG_PROBACKUP_SRC.  REF (default HEAD, i.e. the checkout's
#       current commit; master on the mirror) is any commit-ish of a
#       checkout; a tarball is one commit (read with git get-tar-commit-id).
#   scripts/build-pg-probackup.sh --print-source
#       print the source the script would build from, or exit 2 if none
#
# Environment:
#   PTRACK_PG_PROBACKUP_SRC    the pg_probackup checkout or tarball, if not
#                              an argument
#   PTRACK_VENDOR_DIR          where the vendored tarball is looked for
#                              (default: ../shared/vendor from the
#                              repository's root, then /work/shared/vendor)
#   PTRACK_PG_PROBACKUP_CACHE  cache root (default $PTRACK_PG_CACHE/pg_probackup,
#                              i.e. /var/cache/ptrack-pg/pg_probackup)
#   PTRACK_PG_PREFIX           the server to build against (default: the
#                              prefix of scripts/build-postgres.sh
#                              --pg-version N, built if needed)
#   PTRACK_PG_SOURCE_TREE      an unconfigured PostgreSQL source tree of that
#                              server's version (default: unpacked from the
#                              source package the server was built from, kept
#                              in <prefix>.build by build-postgres.sh)
#
# Cache key: <cache>/pgpb-<commit 12>-pg<N>-<hash 12>/bin/pg_probackup, where
# the hash covers the server prefix (which itself names the PostgreSQL
# source version, core patch and configure options), the PostgreSQL source
# tarball's sha256 and the pg_probackup patches applied.  A stamp file
# written last marks a complete build; delete the directory to rebuild.
#
# Measured on the 2-core development VM (2026-12-02, shared with other
# helpers' builds and tests), pg_probackup master ea4ff496d56c (2.5.16),
# from an empty cache, the PostgreSQL tarball's unpacking included:
#
#   version  wall    CPU (user + sys)  load average
#   15.18    5m14s   28.8 s + 8.0 s    12.5
#   17.11    1m41s   22.5 s + 7.1 s     6.3
#   18.6     1m00s   22.2 s + 7.2 s     6.6
#
# `pg_probackup --version` prints "pg_probackup 2.5.16 (PostgreSQL 15.18)",
# "(PostgreSQL 17.11)" and "(PostgreSQL 18.6)".
#
# pg_probackup's Makefile is run without -j: it races on the headers it
# symlinks from the PostgreSQL tree.

set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# Only the binary's path goes to stdout (fd 3); everything else to stderr.
exec 3>&1 1>&2

log() { printf '[build-pg-probackup] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
usage() {
	sed -n '/^# Usage:/,/^# Environment:/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2
}

PG_MAJOR=15
REF=HEAD
SRC=${PTRACK_PG_PROBACKUP_SRC:-}
PRINT_SOURCE=0
while [[ $# -gt 0 ]]; do
	case $1 in
	--pg-version)
		[[ $# -ge 2 ]] || { usage; die "--pg-version needs a value"; }
		PG_MAJOR=$2; shift ;;
	--pg-version=*) PG_MAJOR=${1#--pg-version=} ;;
	--ref)
		[[ $# -ge 2 ]] || { usage; die "--ref needs a value"; }
		REF=$2; shift ;;
	--ref=*) REF=${1#--ref=} ;;
	--print-source) PRINT_SOURCE=1 ;;
	-h|--help) usage; exit 0 ;;
	-*) usage; die "unknown argument: $1" ;;
	*) SRC=$1 ;;
	esac
	shift
done
case $PG_MAJOR in
	15|17|18) ;;
	*) die "unsupported --pg-version '$PG_MAJOR' (15, 17 or 18)" ;;
esac
# The vendored tarball: the newest pg_probackup-*.tar.gz in the first vendor
# folder that has one.
vendored_tarball() {
	local d t
	for d in ${PTRACK_VENDOR_DIR:-"$SCRIPT_DIR/../../shared/vendor" /work/shared/vendor}; do
		t=$(ls "$d"/pg_probackup-*.tar.gz 2>/dev/null | sort -V | tail -n 1 || true)
		[[ -n $t ]] && { (cd "$(dirname "$t")" && printf '%s/%s\n' "$(pwd)" "$(basename "$t")"); return 0; }
	done
	return 1
}
if [[ -z $SRC ]]; then
	SRC=$(vendored_tarball) || {
		log "no pg_probackup source: no SOURCE argument, no PTRACK_PG_PROBACKUP_SRC, and no" \
			"pg_probackup-*.tar.gz in ${PTRACK_VENDOR_DIR:-../shared/vendor or /work/shared/vendor}; nothing built"
		exit 2
	}
fi
if [[ $PRINT_SOURCE = 1 ]]; then
	printf '%s\n' "$SRC" >&3
	exit 0
fi
# SRC_KIND: git (a checkout) or tar (a git archive tarball).
if [[ -f $SRC ]]; then
	SRC_KIND=tar
	[[ $REF = HEAD ]] || die "--ref applies to a git checkout, not to the tarball $SRC"
	# git get-tar-commit-id reads the first header only; gzip then dies of
	# SIGPIPE, which pipefail would count: the output decides.
	COMMIT=$(gzip -dc "$SRC" 2>/dev/null | git get-tar-commit-id || true)
	[[ $COMMIT =~ ^[0-9a-f]{40}$ ]] ||
		die "$SRC is not a git archive tarball (git get-tar-commit-id finds no commit id)"
	TAR_TOP=$(tar -tzf "$SRC" | sed -n '1{s|/.*||;p;q}' || true)
	[[ -n $TAR_TOP ]] || die "$SRC is empty"
else
	SRC_KIND=git
	git -C "$SRC" rev-parse --git-dir >/dev/null 2>&1 || die "not a git checkout nor a tarball: $SRC"
	COMMIT=$(git -C "$SRC" rev-parse --verify "$REF^{commit}") || die "no commit $REF in $SRC"
fi

# source_patches: pg_probackup's patches/REL_<N>_STABLE*.patch at COMMIT;
# source_file PATH: one file of the source at COMMIT.
source_patches() {
	if [[ $SRC_KIND = git ]]; then
		git -C "$SRC" ls-tree --name-only "$COMMIT" patches/ 2>/dev/null
	else
		tar -tzf "$SRC" | sed -n "s|^$TAR_TOP/||p"
	fi | grep -E "^patches/REL_${PG_MAJOR}_STABLE[^/]*\.patch$" || true
}
source_file() {
	if [[ $SRC_KIND = git ]]; then
		git -C "$SRC" show "$COMMIT:$1"
	else
		tar -xzOf "$SRC" "$TAR_TOP/$1"
	fi
}

# --- the server and its source ---------------------------------------------

PREFIX=${PTRACK_PG_PREFIX:-}
if [[ -z $PREFIX ]]; then
	PREFIX=$("$SCRIPT_DIR/build-postgres.sh" --pg-version "$PG_MAJOR" | tail -n 1)
fi
PG_CONFIG=$PREFIX/bin/pg_config
[[ -x $PG_CONFIG ]] || die "no pg_config in $PREFIX"
SERVER_VERSION=$("$PG_CONFIG" --version)
[[ $SERVER_VERSION == "PostgreSQL $PG_MAJOR."* ]] ||
	die "$PG_CONFIG is $SERVER_VERSION, not PostgreSQL $PG_MAJOR"

# The PostgreSQL source: a given tree, or the tarball build-postgres.sh kept.
TREE=${PTRACK_PG_SOURCE_TREE:-}
TARBALL=""
if [[ -z $TREE ]]; then
	TARBALL=$(ls "$PREFIX".build/*.orig.tar.* 2>/dev/null | head -n 1 || true)
	[[ -n $TARBALL ]] ||
		die "no PostgreSQL source tarball in $PREFIX.build: set PTRACK_PG_SOURCE_TREE to an unconfigured $PG_MAJOR.x tree"
	TREE_ID=$(sha256sum "$TARBALL" | cut -d' ' -f1)
else
	[[ -f $TREE/src/backend/utils/hash/pg_crc.c ]] || die "not a PostgreSQL source tree: $TREE"
	[[ ! -f $TREE/src/Makefile.global ]] || die "$TREE is configured; give an unconfigured tree"
	TREE_ID=$(cd "$TREE" && cat src/backend/utils/hash/pg_crc.c src/backend/access/transam/xlogreader.c \
		src/bin/pg_basebackup/receivelog.c | sha256sum | cut -d' ' -f1)
fi

PGPB_PATCHES=$(source_patches)
PATCHES_ID=$(for p in $PGPB_PATCHES; do source_file "$p"; done | sha256sum | cut -c1-12)

CACHE_ROOT=${PTRACK_PG_PROBACKUP_CACHE:-${PTRACK_PG_CACHE:-/var/cache/ptrack-pg}/pg_probackup}
KEY_HASH=$(printf '%s\n' "$PREFIX" "$TREE_ID" "$PATCHES_ID" | sha256sum | cut -c1-12)
OUT=$CACHE_ROOT/pgpb-${COMMIT:0:12}-pg$PG_MAJOR-$KEY_HASH
STAMP=$OUT/.ptrack-build-stamp

if [[ -f $STAMP ]]; then
	log "up to date: $OUT"
	printf '%s\n' "$OUT/bin/pg_probackup" >&3
	exit 0
fi

mkdir -p "$CACHE_ROOT"
exec 9>"$CACHE_ROOT/.lock"
flock 9
if [[ -f $STAMP ]]; then
	printf '%s\n' "$OUT/bin/pg_probackup" >&3
	exit 0
fi

START=$(date +%s)
WORK=$OUT.build
LOG_FILE=$OUT.log
rm -rf "$OUT" "$WORK"
mkdir -p "$WORK"
: >"$LOG_FILE"
log "building pg_probackup ${COMMIT:0:12} for $SERVER_VERSION into $OUT (log: $LOG_FILE)"

run() {
	local what=$1
	shift
	log "$what"
	printf '\n==== %s\n==== $ %s\n' "$what" "$*" >>"$LOG_FILE"
	if ! "$@" >>"$LOG_FILE" 2>&1; then
		log "FAILED: $what; last lines of $LOG_FILE:"
		tail -n 40 "$LOG_FILE" >&2
		exit 1
	fi
}

# A private, unconfigured copy of the PostgreSQL tree.
if [[ -n $TARBALL ]]; then
	mkdir -p "$WORK/pgsrc"
	run "unpacking $(basename "$TARBALL")" tar -xf "$TARBALL" -C "$WORK/pgsrc" --strip-components=1
else
	run "copying $TREE" cp -a "$TREE" "$WORK/pgsrc"
fi
if [[ $SRC_KIND = git ]]; then
	run "cloning pg_probackup at ${COMMIT:0:12}" git clone --quiet --no-checkout "$SRC" "$WORK/pg_probackup"
	run "checking out ${COMMIT:0:12}" git -C "$WORK/pg_probackup" checkout --quiet --detach "$COMMIT"
else
	mkdir -p "$WORK/pg_probackup"
	run "unpacking $(basename "$SRC") (${COMMIT:0:12})" tar -xzf "$SRC" -C "$WORK/pg_probackup" --strip-components=1
fi
for p in $PGPB_PATCHES; do
	run "applying pg_probackup's $p to the private PostgreSQL tree" \
		patch -d "$WORK/pgsrc" -p1 --fuzz=0 --batch -i "$WORK/pg_probackup/$p"
done

run "make (USE_PGXS, $PG_CONFIG)" make -C "$WORK/pg_probackup" USE_PGXS=1 \
	PG_CONFIG="$PG_CONFIG" top_srcdir="$WORK/pgsrc"

mkdir -p "$OUT/bin"
cp "$WORK/pg_probackup/pg_probackup" "$OUT/bin/pg_probackup"
VERSION_LINE=$("$OUT/bin/pg_probackup" --version) || die "$OUT/bin/pg_probackup --version failed"
[[ $VERSION_LINE == *"PostgreSQL $PG_MAJOR."* ]] ||
	die "$OUT/bin/pg_probackup reports '$VERSION_LINE', not PostgreSQL $PG_MAJOR"
END=$(date +%s)
{
	printf 'pg_probackup_commit=%s\n' "$COMMIT"
	printf 'pg_probackup_source=%s\n' "$SRC"
	printf 'version=%s\n' "$VERSION_LINE"
	printf 'server=%s (%s)\n' "$PREFIX" "$SERVER_VERSION"
	printf 'postgresql_tree=%s\n' "${TARBALL:-$TREE}"
	printf 'pg_probackup_patches=%s\n' "${PGPB_PATCHES:-none}"
	printf 'built_at=%s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
	printf 'seconds=%s\n' "$((END - START))"
} >"$STAMP.tmp"
mv "$STAMP.tmp" "$STAMP"
rm -rf "$WORK"
log "done in $((END - START))s: $VERSION_LINE"
printf '%s\n' "$OUT/bin/pg_probackup" >&3
