# Copyright (c) the ptrack authors
#
# 027_hostile_schema.pl -- a role that can create objects in ptrack's schema
# must not be able to answer a backup tool instead of ptrack (issue 18,
# item 3; README "Schema safety").
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
#      untyped call gets the impostor's empty answer, the typed,
#      schema-qualified call (what README, t/lib/PtrackBackup.pm and
#      scripts/main-job.pl send) gets ptrack's, with the changed table in it.
#      ALTER EXTENSION ptrack UPDATE refuses while PUBLIC may create, then
#      while the impostor is there; once both are gone it succeeds.
#   2. WITH SCHEMA into a schema another role owns: refused, naming the
#      role; after ALTER SCHEMA ... OWNER TO a superuser, installed, and the
#      role can no longer create the impostor.
#   3. a role granted CREATE on public (not PUBLIC): refused, naming it.
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
is("$rc $out", '0 1', "the typed call public.ptrack_get_pagemapset('$L'::pg_lsn) reaches ptrack: "
	  . "$victim is listed") or diag $err;

($rc, $out, $err) = psql_su('upgraded', 'ALTER EXTENSION ptrack UPDATE');
note "ALTER EXTENSION ptrack UPDATE, PUBLIC may create in public:\n$err";
isnt($rc, 0, 'ALTER EXTENSION ptrack UPDATE to 2.3 fails while PUBLIC may create in public');
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

$node->safe_psql('upgraded', 'DROP FUNCTION public.ptrack_get_pagemapset(text)');
($rc, $out, $err) = psql_su('upgraded', 'ALTER EXTENSION ptrack UPDATE');
is($rc, 0, 'with the impostor dropped, the update succeeds') or diag $err;
is($node->safe_psql('upgraded', "SELECT extversion FROM pg_extension WHERE extname = 'ptrack'"),
	'2.3', '... to 2.3');
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

$node->stop;
done_testing();
