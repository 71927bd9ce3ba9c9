#!/usr/bin/env bash
#
# test-debian-cluster.sh -- does a cluster made by Debian's own tooling start
# unchanged on the patched server?
#
# Why this exists: the patched server (scripts/build-postgres.sh) is meant to
# replace Debian's postgresql-15 binaries for an existing cluster.  A server
# configured without a feature Debian's build has refuses such a cluster
# (ssl = on without OpenSSL: "SSL is not supported by this build") or fails
# its queries (ICU collations imported by Debian's initdb).  This test makes
# a cluster the way a Debian administrator does (pg_createcluster, default
# configuration: ssl = on with the snakeoil certificate, peer/scram
# pg_hba.conf, sockets in /var/run/postgresql), starts it with the PATCHED
# pg_ctl/postgres the way pg_ctlcluster would, and checks:
#   - the server starts, and it is the patched binary that runs;
#   - SHOW ssl is on and a TCP connection with sslmode=require is encrypted;
#   - ICU: an ICU collation from Debian's initdb, a new one (CREATE
#     COLLATION ... provider = icu) and an ICU-default database sort German;
#   - lz4 TOAST compression (default_toast_compression = lz4), zstd and lz4
#     WAL compression, and libxml (xmlparse).
# Every failed check prints what it expected and what it got; the server log
# is shown on failure.  The cluster is dropped (pg_dropcluster) at exit.
#
# Usage: scripts/test-debian-cluster.sh [PREFIX]
#   PREFIX  the patched server's install prefix (default:
#           scripts/build-postgres.sh --print-prefix)
# Needs root (pg_createcluster writes /etc/postgresql; the server runs as the
# Debian cluster owner, postgres).  Installs postgresql-15 and ssl-cert from
# Debian's archive if missing, and creates Debian's default snakeoil
# certificate if it is missing (as ssl-cert's own postinst does), because
# pg_createcluster enables SSL only when that certificate exists.
# The cluster uses --locale=C.UTF-8 so that its encoding is UTF8 whatever the
# caller's environment (a C locale would give SQL_ASCII, where ICU cannot
# be used).
set -euo pipefail
cd "$(dirname "$0")/.."

PGVER=15
STOCK_BIN=/usr/lib/postgresql/$PGVER/bin
SOCKET_DIR=/var/run/postgresql
SNAKEOIL_CERT=/etc/ssl/certs/ssl-cert-snakeoil.pem
SNAKEOIL_KEY=/etc/ssl/private/ssl-cert-snakeoil.key

say() { printf 'test-debian-cluster: %s\n' "$*" >&2; }
die() { say "ERROR: $*"; exit 1; }

[[ $(id -u) -eq 0 ]] || die "needs root (pg_createcluster writes /etc/postgresql/$PGVER)"

prefix=${1:-$(scripts/build-postgres.sh --print-prefix)}
[[ -x $prefix/bin/postgres && -x $prefix/bin/pg_ctl ]] ||
	die "no patched server at $prefix: run scripts/build-postgres.sh"

missing=()
for p in postgresql-$PGVER postgresql-common ssl-cert; do
	dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null | grep -q '^ii' || missing+=("$p")
done
if [[ ${#missing[@]} -gt 0 ]]; then
	say "installing ${missing[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >&2
fi
if [[ ! -e $SNAKEOIL_CERT || ! -e $SNAKEOIL_KEY ]]; then
	say "creating Debian's default snakeoil certificate (make-ssl-cert generate-default-snakeoil)"
	make-ssl-cert generate-default-snakeoil
fi
id -nG postgres | tr ' ' '\n' | grep -qx ssl-cert ||
	die "user postgres is not in group ssl-cert: pg_createcluster would not enable SSL"
# Debian creates the socket directory at boot (tmpfiles.d) and in pg_ctlcluster.
[[ -d $SOCKET_DIR ]] || install -d -m 2775 -o postgres -g postgres "$SOCKET_DIR"

# A port nothing listens on and no Debian cluster is configured for.
port_free() {
	! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null &&
		[[ ! -e $SOCKET_DIR/.s.PGSQL.$1 ]] &&
		! grep -qsE "^[[:space:]]*port[[:space:]]*=[[:space:]]*$1([^0-9]|\$)" /etc/postgresql/*/*/postgresql.conf
}
port=""
for ((i = 0; i < 500; i++)); do
	p=$((20000 + ($$ + i * 7) % 10000))
	if port_free "$p"; then port=$p; break; fi
done
[[ -n $port ]] || die "found no free port"

name=ptrack_dropin_$$
work=$(mktemp -d /tmp/ptrack-dropin.XXXXXX)
chmod 0755 "$work"
install -d -m 0755 -o postgres -g postgres "$work/log"
datadir=$work/data
server_log=$work/log/server.log
confdir=/etc/postgresql/$PGVER/$name
created=0
started=0

cleanup() {
	local rc=$?
	if [[ $started -eq 1 && -f $datadir/postmaster.pid ]]; then
		runuser -u postgres -- "$prefix/bin/pg_ctl" stop -D "$datadir" -m fast -w >/dev/null 2>&1 ||
			say "WARNING: could not stop the server of $datadir"
	fi
	if [[ $created -eq 1 ]]; then
		pg_dropcluster "$PGVER" "$name" >/dev/null 2>&1 ||
			say "WARNING: pg_dropcluster $PGVER $name failed"
	fi
	rm -rf "$work"
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say "pg_createcluster $PGVER $name (data $datadir, port $port)"
created=1
pg_createcluster --start-conf=manual --locale=C.UTF-8 -d "$datadir" -l "$work/log/debian.log" \
	-p "$port" "$PGVER" "$name" >"$work/createcluster.out" 2>&1 || {
	cat "$work/createcluster.out" >&2
	die "pg_createcluster failed"
}
grep -qE "^[[:space:]]*ssl[[:space:]]*=[[:space:]]*on" "$confdir/postgresql.conf" ||
	die "pg_createcluster did not write ssl = on into $confdir/postgresql.conf"

# Start it the way pg_ctlcluster does, but with the patched binaries.
say "starting it with $prefix/bin/pg_ctl"
started=1
if ! (cd / && runuser -u postgres -- "$prefix/bin/pg_ctl" start -w -t 120 -D "$datadir" \
	-l "$server_log" -o "-c config_file=$confdir/postgresql.conf") >"$work/start.out" 2>&1; then
	cat "$work/start.out" >&2
	say "server log ($server_log):"
	cat "$server_log" >&2 || true
	die "FAIL: the Debian cluster does not start on the patched server"
fi

failures=0
pass() { say "ok: $*"; }
fail() { say "FAIL: $*"; failures=$((failures + 1)); }

pid=$(head -n 1 "$datadir/postmaster.pid")
exe=$(readlink "/proc/$pid/exe" || true)
if [[ $exe == "$prefix/bin/postgres" ]]; then
	pass "the running postmaster (pid $pid) is $exe"
else
	fail "the running postmaster (pid $pid) is '$exe', expected $prefix/bin/postgres"
fi

# SQL through Debian's own client: peer authentication on the socket.
sql() {
	local db=$1
	shift
	local args=() s
	for s in "$@"; do args+=(-c "$s"); done
	(cd / && runuser -u postgres -- env PGCONNECT_TIMEOUT=30 "$STOCK_BIN/psql" -X -qAt \
		-v ON_ERROR_STOP=1 -h "$SOCKET_DIR" -p "$port" -d "$db" "${args[@]}") 2>&1
}
# check NAME EXPECTED DB SQL...
check() {
	local what=$1 want=$2 db=$3 got
	shift 3
	got=$(sql "$db" "$@") || true
	if [[ $got == "$want" ]]; then
		pass "$what"
	else
		fail "$what: expected '$want', got '$got' (SQL: $*)"
	fi
}

check "SHOW ssl is on" on postgres "SHOW ssl"

password=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
check "set a password for TCP (scram) logins" "" postgres \
	"ALTER ROLE postgres PASSWORD '$password'"
got=$(PGPASSWORD=$password PGCONNECT_TIMEOUT=30 "$STOCK_BIN/psql" -X -qAt -v ON_ERROR_STOP=1 \
	"host=127.0.0.1 port=$port dbname=postgres user=postgres sslmode=require" \
	-c "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()" 2>&1) || true
if [[ $got == t ]]; then
	pass "a sslmode=require connection over TCP is encrypted"
else
	fail "sslmode=require connection over TCP: expected pg_stat_ssl.ssl 't', got '$got'"
fi

# German ICU order puts ä right after a; byte order (C, C.UTF-8) puts it last.
values="(VALUES ('b'), ('ä'), ('a'), ('z')) v(x)"
check "ICU collations imported by Debian's initdb exist" t postgres \
	"SELECT count(*) > 0 FROM pg_collation WHERE collprovider = 'i' AND collname = 'de-x-icu'"
check "ORDER BY an ICU collation from Debian's initdb (de-x-icu)" "a,ä,b,z" postgres \
	"SELECT string_agg(x, ',' ORDER BY x COLLATE \"de-x-icu\") FROM $values"
check "CREATE COLLATION (provider = icu, locale = 'de-DE') and ORDER BY it" "a,ä,b,z" postgres \
	"CREATE COLLATION ptrack_de (provider = icu, locale = 'de-DE')" \
	"SELECT string_agg(x, ',' ORDER BY x COLLATE ptrack_de) FROM $values"
check "CREATE DATABASE with the ICU locale provider" "" postgres \
	"CREATE DATABASE ptrack_icu TEMPLATE template0 LOCALE 'C.UTF-8' LOCALE_PROVIDER icu ICU_LOCALE 'de-DE'"
check "ORDER BY in the ICU-default database" "a,ä,b,z" ptrack_icu \
	"SELECT string_agg(x, ',' ORDER BY x) FROM $values"

check "lz4 TOAST compression (default_toast_compression = lz4)" "lz4|12000|t" postgres \
	"SET default_toast_compression = lz4" \
	"CREATE TABLE ptrack_lz4 (v text)" \
	"INSERT INTO ptrack_lz4 VALUES (repeat('ptrack', 2000))" \
	"SELECT pg_column_compression(v), length(v), v = repeat('ptrack', 2000) FROM ptrack_lz4"
check "zstd WAL compression" zstd postgres "SET wal_compression = zstd" "SHOW wal_compression"
check "lz4 WAL compression" lz4 postgres "SET wal_compression = lz4" "SHOW wal_compression"
check "libxml (xmlparse)" "<a>1</a>" postgres "SELECT xmlparse(document '<a>1</a>')"

if [[ $failures -gt 0 ]]; then
	say "server log ($server_log):"
	cat "$server_log" >&2 || true
	die "$failures check(s) failed on the Debian cluster $name started by $prefix/bin/pg_ctl"
fi
say "PASS: a Debian cluster (pg_createcluster $PGVER, ssl = on) runs unchanged on $prefix"
