# Copyright (c) the ptrack authors
#
# 027_hostile_schema.pl -- a role that can create objects in ptrack's schema
# must not be able to answer a backup tool instead of ptrack (issue 18,
# item 3; docs/operations.md "Schema safety").
#
# The attack: the role creates ptrack_get_pagemapset(text) next to ptrack's
# ptrack_get_pagemapset(pg_lsn).  A call with an untyped literal or an
# untyped parameter (as pg_probackup sends it), schema.ptrack_get_pagemapset('L'),
# then resolves to the text function (PostgreSQL prefers the string category
# for an unknown-typed argument, parse_func.c func_select_candidate()) and
# runs it as the backup role: "nothing changed".
#
#   1. public where PUBLIC may create (a cluster upgraded from PostgreSQL 14):
#      CREATE EXTENSION ptrack refuses, with the reason and the fix.  ptrack
#      2.2 (which did not check) installed there shows the attack: the
#      untyped call gets the impostor's empty answer; the typed,
#      schema-qualified call (what docs/operations.md, t/lib/PtrackBackup.pm and
#      scripts/main-job.pl send) reaches ptrack's function, which refuses to
#      answer from that schema, and so does ptrack_init_lsn(), which a
#      backup tool asks first: the backup fails instead of missing blocks.
#      ALTER EXTENSION ptrack UPDATE refuses while PUBLIC may create, then
#      while the impostor is there; once both are gone it succeeds.
#   2. WITH SCHEMA into a schema another role owns: refused, naming the
#      role; after ALTER SCHEMA ... OWNER TO a superuser, installed, and the
#      role can no longer create the impostor.
#   3. a role granted CREATE on public (not PUBLIC): refused, naming it.
#   4. after the install, the schema made unsafe (src/pg/sql/schema_check.h):
#      every call that answers about changes fails closed, for the backup
#      role as for a superuser, naming the schema, the reason and the fix,
#      while ptrack_version() and ptrack_status keep answering; once the
#      schema is safe again the calls answer.  The ways: GRANT CREATE to a
#      role, then to PUBLIC; ALTER SCHEMA ... OWNER TO a role that is not a
#      superuser; the owner stripped of SUPERUSER (ALTER ROLE, which no
#      event trigger sees); for public (owned by pg_database_owner) a new
#      database owner that is not a superuser; ALTER EXTENSION ptrack SET
#      SCHEMA into a schema another role owns.  An impostor planted while
#      the schema was open makes ptrack_init_lsn() (which pg_probackup calls
#      before ptrack_get_pagemapset()) refuse after the schema is safe
#      again, until it is dropped.  A safe schema answers throughout: the
#      typed pagemapset lists the changed table.
#
# In case 1 the role also plants format() functions that would make it a
# superuser if an unqualified call in the install or update scripts (run
# by a superuser, with the schema in search_path) resolved to them.
#
# Works with both capture sources.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use PtrackCluster qw(capture_mode ptrack_node);

my $node = ptrack_node('hostile_schema');
$node->start;
note 'capture source: ' . capture_mode();

# psql as `role` in `db`: (exit code, stdout, stderr).
sub psql_as
{
	my ($role, $db, $sql) = @_;
	my ($out, $err) = ('', '');
	my $rc = $node->psql(
		$db, $sql,
		stdout => \$out,
		stderr => \$err,
		connstr => $node->connstr($db) . " user=$role");
	return ($rc, $out, $err);
}

# psql as the test's superuser: (exit code, stdout, stderr).
sub psql_su
{
	my ($db, $sql) = @_;
	my ($out, $err) = ('', '');
	my $rc = $node->psql($db, $sql, stdout => \$out, stderr => \$err);
	return ($rc, $out, $err);
}

# The impostor: answers "nothing changed" for any text.
my $impostor = q{
CREATE FUNCTION public.ptrack_get_pagemapset(start_lsn text)
RETURNS TABLE (path text, pagecount bigint, pagemap bytea)
LANGUAGE sql AS $$ SELECT NULL::text, NULL::bigint, NULL::bytea WHERE false $$;
};

my ($rc, $out, $err);
$node->safe_psql('postgres', q{
CREATE ROLE mallory LOGIN;
CREATE ROLE backup LOGIN;
CREATE DATABASE upgraded;
CREATE DATABASE owned;
CREATE DATABASE granted;
});

# ---- 1. public where PUBLIC may create ----------------------------------------

# What pg_upgrade keeps from PostgreSQL 14 and older.
$node->safe_psql('upgraded', 'GRANT CREATE ON SCHEMA public TO PUBLIC');
# The scripts run as a superuser with public in search_path: a function of
# mallory's that an unqualified call in them resolved to (format(text, text)
# beats pg_catalog.format(text, VARIADIC "any")) would make mallory a
# superuser.  Every call in the scripts is qualified.
($rc, $out, $err) = psql_as('mallory', 'upgraded', q{
CREATE FUNCTION public.format(text, text) RETURNS text LANGUAGE plpgsql
AS $$ BEGIN EXECUTE 'ALTER ROLE mallory SUPERUSER'; RETURN 'x'; END $$;
CREATE FUNCTION public.format(text, text, text) RETURNS text LANGUAGE plpgsql
AS $$ BEGIN EXECUTE 'ALTER ROLE mallory SUPERUSER'; RETURN 'x'; END $$;
CREATE FUNCTION public.format(text, text, text, text) RETURNS text LANGUAGE plpgsql
AS $$ BEGIN EXECUTE 'ALTER ROLE mallory SUPERUSER'; RETURN 'x'; END $$;
});
is($rc, 0, 'mallory plants format() functions in public') or diag $err;
($rc, $out, $err) = psql_su('upgraded', 'CREATE EXTENSION ptrack');
note "CREATE EXTENSION ptrack, PUBLIC may create in public:\n$err";
isnt($rc, 0, 'public where PUBLIC may create: CREATE EXTENSION ptrack fails');
like($err,
	qr/ERROR:  ptrack refuses schema "public": roles other than superusers can create objects in it/,
	'... saying why');
like($err, qr/DETAIL:  PUBLIC \(every role\) has CREATE on schema "public"\./, '... and who can');
like($err, qr/HINT:  .*CREATE EXTENSION ptrack WITH SCHEMA ptrack.*REVOKE CREATE ON SCHEMA public FROM PUBLIC/,
	'... and how to fix it');
is($node->safe_psql('upgraded', "SELECT count(*) FROM pg_extension WHERE extname = 'ptrack'"),
	'0', '... and nothing is installed');

# ptrack 2.2 did not check: show the attack on it, and what protects a caller.
$node->safe_psql('upgraded', q{
CREATE EXTENSION ptrack VERSION '2.2';
GRANT EXECUTE ON FUNCTION public.ptrack_get_pagemapset(pg_lsn) TO backup;
});
my $L = $node->safe_psql('upgraded', 'SELECT pg_current_wal_insert_lsn()');
$node->safe_psql('upgraded',
	'CREATE TABLE victim AS SELECT g AS id FROM generate_series(1, 1000) g; CHECKPOINT');
my $victim = $node->safe_psql('upgraded', "SELECT pg_relation_filepath('victim')");
($rc, $out, $err) = psql_as('mallory', 'upgraded', $impostor);
is($rc, 0, 'on 2.2 in that schema, mallory creates public.ptrack_get_pagemapset(text)') or diag $err;

($rc, $out, $err) = psql_as('backup', 'upgraded',
	"SELECT count(*) FROM public.ptrack_get_pagemapset('$L') WHERE path = '$victim'");
is("$rc $out", '0 0', "the untyped call public.ptrack_get_pagemapset('$L') reaches the impostor: "
	  . 'the new table is not listed (the attack)') or diag $err;
($rc, $out, $err) = psql_as('backup', 'upgraded',
	"SELECT count(*) FROM public.ptrack_get_pagemapset('$L'::pg_lsn) WHERE path = '$victim'");
isnt($rc, 0, "the typed call public.ptrack_get_pagemapset('$L'::pg_lsn) reaches ptrack, which refuses to answer");
like($err, qr/ERROR:  ptrack refuses to answer from schema "public": roles other than superusers can create objects in it/,
	'... from that schema') or diag $err;
$node->safe_psql('upgraded', 'GRANT EXECUTE ON FUNCTION public.ptrack_init_lsn() TO backup');
($rc, $out, $err) = psql_as('backup', 'upgraded', 'SELECT public.ptrack_init_lsn()');
isnt($rc, 0, 'ptrack_init_lsn(), which a backup tool asks first, refuses too: the backup fails, it misses nothing');
like($err, qr/DETAIL:  In schema "public", PUBLIC \(every role\) has CREATE on it\./, '... saying who can create')
  or diag $err;

($rc, $out, $err) = psql_su('upgraded', 'ALTER EXTENSION ptrack UPDATE');
note "ALTER EXTENSION ptrack UPDATE, PUBLIC may create in public:\n$err";
isnt($rc, 0, 'ALTER EXTENSION ptrack UPDATE fails while PUBLIC may create in public');
like($err, qr/ptrack refuses schema "public": roles other than superusers can create objects in it/,
	'... saying why');

$node->safe_psql('upgraded', 'REVOKE CREATE ON SCHEMA public FROM PUBLIC');
# A grant that the update carries over (ptrack_status is created again): its loop calls format().
$node->safe_psql('upgraded', 'GRANT SELECT ON ptrack_status TO backup');
($rc, $out, $err) = psql_su('upgraded', 'ALTER EXTENSION ptrack UPDATE');
note "ALTER EXTENSION ptrack UPDATE, impostor present:\n$err";
isnt($rc, 0, 'after the REVOKE, the update still fails while the impostor is there');
like($err, qr/ptrack refuses schema "public": it holds functions named like ptrack's that are not ptrack's/,
	'... saying so');
like($err, qr/DETAIL:  Not part of the extension: ptrack_get_pagemapset\(text\)\./, '... naming it');
($rc, $out, $err) = psql_as('backup', 'upgraded', 'SELECT public.ptrack_init_lsn()');
isnt($rc, 0, 'with public safe again but the impostor there, ptrack_init_lsn() refuses');
like($err, qr/ERROR:  ptrack refuses to answer from schema "public": it holds another function named ptrack_get_pagemapset/,
	'... naming the function') or diag $err;

$node->safe_psql('upgraded', 'DROP FUNCTION public.ptrack_get_pagemapset(text)');
($rc, $out, $err) = psql_su('upgraded', 'ALTER EXTENSION ptrack UPDATE');
is($rc, 0, 'with the impostor dropped, the update succeeds') or diag $err;
is($node->safe_psql('upgraded', "SELECT extversion FROM pg_extension WHERE extname = 'ptrack'"),
	'2.4', '... to 2.4');
is($node->safe_psql('postgres', "SELECT rolsuper FROM pg_roles WHERE rolname = 'mallory'"), 'f',
	'no call in the scripts reached mallory\'s format(): mallory is not a superuser');
($rc, $out, $err) = psql_as('mallory', 'upgraded', $impostor);
isnt($rc, 0, 'mallory can no longer create the impostor');
like($err, qr/permission denied for schema public/, '... permission denied') or diag $err;
($rc, $out, $err) = psql_as('backup', 'upgraded',
	"SELECT count(*) FROM public.ptrack_get_pagemapset('$L') WHERE path = '$victim'");
is("$rc $out", '0 1', 'and the untyped call reaches ptrack again') or diag $err;

# ---- 2. WITH SCHEMA into a schema another role owns ---------------------------

$node->safe_psql('owned', 'CREATE SCHEMA tools AUTHORIZATION mallory');
($rc, $out, $err) = psql_su('owned', 'CREATE EXTENSION ptrack WITH SCHEMA tools');
note "CREATE EXTENSION ptrack WITH SCHEMA tools (owned by mallory):\n$err";
isnt($rc, 0, 'a schema owned by another role: CREATE EXTENSION ptrack WITH SCHEMA fails');
like($err, qr/ptrack refuses schema "tools": roles other than superusers can create objects in it/,
	'... saying why');
like($err, qr/DETAIL:  These roles can create objects in schema "tools": mallory\./, '... naming the owner');
like($err, qr/ALTER SCHEMA tools OWNER TO a superuser/, '... and the fix');

# The same through an update of a version that did not check.
$node->safe_psql('owned', "CREATE EXTENSION ptrack WITH SCHEMA tools VERSION '2.2'");
($rc, $out, $err) = psql_su('owned', 'ALTER EXTENSION ptrack UPDATE');
isnt($rc, 0, 'ALTER EXTENSION ptrack UPDATE in that schema fails too');
like($err, qr/ptrack refuses schema "tools"/, '... saying why');
$node->safe_psql('owned', 'DROP EXTENSION ptrack');

$node->safe_psql('owned', 'ALTER SCHEMA tools OWNER TO CURRENT_USER');
($rc, $out, $err) = psql_su('owned', 'CREATE EXTENSION ptrack WITH SCHEMA tools');
is($rc, 0, 'once a superuser owns the schema, CREATE EXTENSION ptrack WITH SCHEMA tools succeeds') or diag $err;
(my $impostor_tools = $impostor) =~ s/public\./tools./;
($rc, $out, $err) = psql_as('mallory', 'owned', $impostor_tools);
isnt($rc, 0, 'mallory can no longer create tools.ptrack_get_pagemapset(text)');
like($err, qr/permission denied for schema tools/, '... permission denied') or diag $err;

# ---- 3. a role granted CREATE on public ----------------------------------------

$node->safe_psql('granted', 'GRANT CREATE ON SCHEMA public TO mallory');
($rc, $out, $err) = psql_su('granted', 'CREATE EXTENSION ptrack');
isnt($rc, 0, 'public with CREATE granted to one role: CREATE EXTENSION ptrack fails');
like($err, qr/DETAIL:  These roles can create objects in schema "public": mallory\./, '... naming the role')
  or diag $err;
$node->safe_psql('granted', 'REVOKE CREATE ON SCHEMA public FROM mallory');
($rc, $out, $err) = psql_su('granted', 'CREATE EXTENSION ptrack');
is($rc, 0, 'after the REVOKE it succeeds') or diag $err;

# ---- 4. the schema made unsafe after the install -------------------------------

$node->safe_psql('postgres', q{
CREATE ROLE admin SUPERUSER;
CREATE ROLE dbowner SUPERUSER;
CREATE DATABASE later OWNER dbowner;
});
$node->safe_psql('later', q{
CREATE SCHEMA ptrack AUTHORIZATION admin;
CREATE EXTENSION ptrack WITH SCHEMA ptrack;
GRANT USAGE ON SCHEMA ptrack TO backup;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA ptrack TO backup;
GRANT SELECT ON ptrack.ptrack_status TO backup;
});
my $L4 = $node->safe_psql('later', 'SELECT pg_current_wal_insert_lsn()');
$node->safe_psql('later', 'CREATE TABLE changed AS SELECT g AS id FROM generate_series(1, 1000) g; CHECKPOINT');
my $changed = $node->safe_psql('later', "SELECT pg_relation_filepath('changed')");

# Every call that answers about changes, as the backup role: "" if it answered, else its error.
my @calls = (
	"SELECT count(*) FROM ptrack.ptrack_get_pagemapset('$L4'::pg_lsn) WHERE path = '$changed'",
	"SELECT files > 0 FROM ptrack.ptrack_get_change_stat('$L4'::pg_lsn)",
	'SELECT ptrack.ptrack_init_lsn() IS NOT NULL',
	"SELECT count(*) >= 0 FROM ptrack.ptrack_verify('$L4'::pg_lsn)");
sub answers
{
	my ($label) = @_;
	($rc, $out, $err) = psql_as('backup', 'later', $calls[0]);
	is("$rc $out", '0 1', "$label: the typed pagemapset lists the changed table") or diag $err;
	for my $sql (@calls[ 1 .. $#calls ])
	{
		($rc, $out, $err) = psql_as('backup', 'later', $sql);
		is("$rc $out", '0 t', "$label: $sql answers") or diag $err;
	}
}
sub refuses
{
	my ($label, $schema, $detail) = @_;
	for my $sql (@calls)
	{
		(my $call = $sql) =~ s/\bptrack\./$schema./g;
		for my $role ('backup', undef)
		{
			($rc, $out, $err) =
			  defined $role ? psql_as($role, 'later', $call) : psql_su('later', $call);
			my $who = $role // 'a superuser';
			isnt($rc, 0, "$label: $call fails for $who");
			like($err,
				qr/ERROR:  ptrack refuses to answer from schema "\Q$schema\E": roles other than superusers can create objects in it/,
				"$label: ... with the refusal") or diag $err;
		}
	}
	like($err, $detail, "$label: the detail says why") or diag $err;
	like($err, qr/HINT:  Take CREATE away: REVOKE CREATE ON SCHEMA \Q$schema\E FROM PUBLIC/, "$label: the hint says how to fix it")
	  or diag $err;
	($rc, $out, $err) = psql_as('backup', 'later', "SELECT $schema.ptrack_version() IS NOT NULL");
	is("$rc $out", '0 t', "$label: ptrack_version() still answers") or diag $err;
	($rc, $out, $err) = psql_as('backup', 'later', "SELECT capture IS NOT NULL FROM $schema.ptrack_status");
	is("$rc $out", '0 t', "$label: ptrack_status still answers") or diag $err;
}

answers('installed in a safe schema');

$node->safe_psql('later', 'GRANT CREATE ON SCHEMA ptrack TO mallory');
refuses('GRANT CREATE to mallory', 'ptrack', qr/DETAIL:  In schema "ptrack", "mallory" has CREATE on it, and is not a superuser\./);
$node->safe_psql('later', 'REVOKE CREATE ON SCHEMA ptrack FROM mallory');
answers('CREATE revoked');

$node->safe_psql('later', 'GRANT CREATE ON SCHEMA ptrack TO PUBLIC');
refuses('GRANT CREATE to PUBLIC', 'ptrack', qr/DETAIL:  In schema "ptrack", PUBLIC \(every role\) has CREATE on it\./);
$node->safe_psql('later', 'REVOKE CREATE ON SCHEMA ptrack FROM PUBLIC');
answers('CREATE revoked from PUBLIC');

$node->safe_psql('later', 'ALTER SCHEMA ptrack OWNER TO mallory');
refuses('owned by mallory', 'ptrack', qr/DETAIL:  In schema "ptrack", its owner "mallory" is not a superuser\./);
$node->safe_psql('later', 'ALTER SCHEMA ptrack OWNER TO admin');
answers('owned by a superuser again');

$node->safe_psql('postgres', 'ALTER ROLE admin NOSUPERUSER');
refuses('its owner no longer a superuser', 'ptrack', qr/DETAIL:  In schema "ptrack", its owner "admin" is not a superuser\./);
$node->safe_psql('postgres', 'ALTER ROLE admin SUPERUSER');
answers('its owner a superuser again');

# public, owned by pg_database_owner: the database's owner counts.
$node->safe_psql('later', 'ALTER EXTENSION ptrack SET SCHEMA public');
($rc, $out, $err) = psql_as('backup', 'later', 'SELECT public.ptrack_init_lsn() IS NOT NULL');
is("$rc $out", '0 t', 'moved to public, owned by pg_database_owner, the database owned by a superuser: it answers')
  or diag $err;
$node->safe_psql('postgres', 'ALTER DATABASE later OWNER TO mallory');
refuses('the database owned by mallory', 'public',
	qr/DETAIL:  In schema "public", its owner pg_database_owner \(the database's owner, "mallory"\) is not a superuser\./);
$node->safe_psql('postgres', 'ALTER DATABASE later OWNER TO dbowner');
$node->safe_psql('later', 'ALTER EXTENSION ptrack SET SCHEMA ptrack');
answers('back in its own schema');

# SET SCHEMA into a schema another role owns.
$node->safe_psql('later', 'CREATE SCHEMA tools AUTHORIZATION mallory');
$node->safe_psql('later', 'GRANT USAGE ON SCHEMA tools TO backup; ALTER EXTENSION ptrack SET SCHEMA tools');
refuses('ALTER EXTENSION ptrack SET SCHEMA tools (owned by mallory)', 'tools',
	qr/DETAIL:  In schema "tools", its owner "mallory" is not a superuser\./);
$node->safe_psql('later', 'ALTER EXTENSION ptrack SET SCHEMA ptrack');
answers('moved back');

# An impostor planted while the schema was open stays after it is closed.
$node->safe_psql('later', 'GRANT CREATE ON SCHEMA ptrack TO mallory');
(my $impostor_later = $impostor) =~ s/public\./ptrack./;
($rc, $out, $err) = psql_as('mallory', 'later', $impostor_later);
is($rc, 0, 'while the schema is open, mallory plants ptrack.ptrack_get_pagemapset(text)') or diag $err;
$node->safe_psql('later', 'REVOKE CREATE ON SCHEMA ptrack FROM mallory');
($rc, $out, $err) = psql_as('backup', 'later', 'SELECT ptrack.ptrack_init_lsn()');
isnt($rc, 0, 'the schema closed again, the impostor there: ptrack_init_lsn() refuses');
like($err, qr/ERROR:  ptrack refuses to answer from schema "ptrack": it holds another function named ptrack_get_pagemapset/,
	'... naming it') or diag $err;
like($err, qr/HINT:  Find out who created it and why, drop it, then retry\./, '... and what to do') or diag $err;
$node->safe_psql('later', 'DROP FUNCTION ptrack.ptrack_get_pagemapset(text)');
answers('the impostor dropped');

$node->stop;
done_testing();
