#!/usr/bin/env bash
# Copyright (c) the ptrack authors
#
# private-server.sh -- copies a PostgreSQL installation into a private root,
# so that ptrack can be installed into the copy without touching the
# original (Debian's server, or a build in the shared cache) and without
# replacing the ptrack.so of another work tree testing on the same machine.
#
# The copy keeps the installation's layout under ROOT: the directory above
# its bindir (for Debian's /usr/lib/postgresql/15, also its lib), its
# sharedir and its includedir, each at ROOT followed by its absolute path.
# PostgreSQL's installations are relocatable (pg_config and postgres find
# their directories relative to their own binary), so the copy runs as the
# original does.
#
# Usage: scripts/private-server.sh PG_CONFIG ROOT
#   prints the copy's pg_config; fails if the copy does not relocate.
# Used by scripts/run-tests.sh (a copy per run) and scripts/soak.sh (a
# cached copy per server and source tree).
set -euo pipefail

[ $# -eq 2 ] || { sed -n '/^# Usage:/,/^#   prints/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
pg_config=$1 root=$2
[ -x "$pg_config" ] || { echo "private-server: no pg_config at $pg_config" >&2; exit 1; }
mkdir -p "$root"
done=()
for d in "$(dirname "$("$pg_config" --bindir)")" "$("$pg_config" --sharedir)" "$("$pg_config" --includedir)"; do
	skip=0
	for c in "${done[@]}"; do
		case $d/ in "$c"/*) skip=1 ;; esac
	done
	[ "$skip" = 1 ] && continue
	mkdir -p "$root$(dirname "$d")"
	cp -a "$d" "$root$d"
	done+=("$d")
done
copy=$root$("$pg_config" --bindir)/pg_config
[ "$("$copy" --pkglibdir)" = "$root$("$pg_config" --pkglibdir)" ] || {
	echo "private-server: the copy of $pg_config in $root does not relocate (its pkglibdir is $("$copy" --pkglibdir))" >&2
	exit 1
}
echo "$copy"
