# Copyright (c) the ptrack authors
#
# 023_backup_role.pl -- backups by a role without superuser, set up exactly
# as docs/operations.md's section "A backup role without superuser" says.  The
# three SQL blocks of that section (marked <!-- backup-role: role|postgresql|ptrack
# --> in docs/operations.md) are read from it and run as written, so the
# documentation and this test cannot drift apart.
#
#   1. the role block: the role `backup` (LOGIN REPLICATION) exists, but may
#      call none of ptrack's functions ("permission denied for function X");
#   2. the PostgreSQL block in database postgres; a full backup as `backup`
#      (pg_basebackup needs only REPLICATION); an incremental as `backup`
#      fails with "permission denied for function ptrack_get_pagemapset" and
#      leaves nothing behind (no session, no slot, init_lsn unchanged);
#   3. the ptrack block in postgres (extension in schema public): incremental
#      1 as `backup` succeeds;
#   4. the own-schema install in a separate backup database, as pg_probackup
#      recommends (backupdb): before CREATE EXTENSION the incremental and the
#      ptrack block both refuse with a message that names the database; then
#      CREATE SCHEMA ptrack; CREATE EXTENSION ptrack WITH SCHEMA ptrack, the
#      two blocks in backupdb, and incremental 2 as `backup` through backupdb;
#   5. full + incremental 1 + incremental 2 restored equals the source;
#   6. with PTRACK_PG_PROBACKUP=/path/to/pg_probackup (skipped otherwise),
#      pg_probackup as `backup`: FULL --stream through backupdb; a PTRACK
#      backup through a database without the extension fails ("does not
#      support ptrack"), one through a database where only the PostgreSQL
#      block ran fails with "permission denied for function ptrack_init_lsn",
#      and both leave nothing behind; PTRACK --stream through backupdb
#      (schema ptrack), then through postgres (schema public); pg_probackup's
#      restore of the chain equals the source.
#
# Works with both capture sources (the functions are the same; with wal
# capture they wait for the follower).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use PtrackBackup qw(full_backup incremental_backup restore start_restored);
use PtrackCluster qw(capture_mode ptrack_node ptrack_files_outside init_lsn);
use PtrackOracle qw(mismatch_blocks);
use PtrackProbackup qw(pg_probackup);
use PtrackVerify qw(compare_clusters);

# ---- the blocks of docs/operations.md ---------------------------------------

my $readme_file = "$FindBin::RealBin/../docs/operations.md";
my $readme = slurp_file($readme_file);
my %block;
for my $name (qw(role postgresql ptrack))
{
	$readme =~ /^<!-- backup-role: \Q$name\E -->\n```sql\n(.*?)^```$/ms
	  or BAIL_OUT("$readme_file has no ```sql block after "
		  . "<!-- backup-role: $name -->");
	$block{$name} = $1;
}
like($block{role}, qr/\bCREATE ROLE backup\b/,
	'the role block of docs/operations.md creates the role backup');

# ---- the cluster ----------------------------------------------------------------

my $node = ptrack_node(
	'role_src',
	allows_streaming => 1,
	conf => "max_wal_size = 256MB\nautovacuum_naptime = 1s\n");
$node->start;
note 'capture source: ' . capture_mode() . ', running: '
  . $node->safe_psql('postgres', 'SHOW ptrack.capture');
$node->safe_psql('postgres', 'CREATE EXTENSION ptrack');
$node->command_ok([ 'pgbench', '-i', '-s', '3', '-q', 'postgres' ],
	'pgbench -i -s 3');
$node->safe_psql('postgres', 'CREATE DATABASE backupdb');
$node->safe_psql('postgres', 'CREATE DATABASE otherdb');
$node->safe_psql(
	'otherdb', q{
CREATE TABLE other_t (id int PRIMARY KEY, v int, t text);
INSERT INTO other_t SELECT i, 0, md5(i::text) FROM generate_series(1, 20000) i;
});

my $host = $node->host;
my $port = $node->port;

# psql as the role backup: (exit code, stdout, stderr).
sub as_backup
{
	my ($db, $sql) = @_;
	my ($out, $err) = ('', '');
	my $rc = $node->psql(
		$db, $sql,
		stdout => \$out,
		stderr => \$err,
		connstr => $node->connstr($db) . " user=backup");
	return ($rc, $out, $err);
}

# What must not change when a backup is refused: no session of the role
# left (its backend would hold a running backup), no temporary slot, the
# same init_lsn.
sub nothing_left_ok
{
	my ($init_before, $what) = @_;
	ok( $node->poll_query_until(
			'postgres',
			"SELECT count(*) = 0 FROM pg_stat_activity WHERE usename = 'backup'"),
		"$what: no session of backup is left")
	  or diag $node->safe_psql('postgres',
		"SELECT pid, state, query FROM pg_stat_activity WHERE usename = 'backup'");
	is( $node->safe_psql(
			'postgres',
			"SELECT string_agg(slot_name, ' ') FROM pg_replication_slots "
			  . "WHERE slot_name <> 'ptrack_wal_follower'"),
		'',
		"$what: no replication slot is left");
	is(init_lsn($node), $init_before,
		"$what: ptrack_init_lsn() is unchanged ($init_before)");
	return;
}

# Runs one backup workload: pgbench, and changes in otherdb and backupdb.
sub workload
{
	my ($tag) = @_;
	$node->command_ok(
		[ 'pgbench', '-n', '-c', '2', '-j', '2', '-t', '300', 'postgres' ],
		"pgbench ($tag)");
	$node->safe_psql('otherdb',
		"UPDATE other_t SET v = v + 1 WHERE id % 97 = 0; "
		  . "INSERT INTO other_t SELECT i, 1, '$tag' FROM generate_series("
		  . "(SELECT max(id) + 1 FROM other_t), (SELECT max(id) + 500 FROM other_t)) i");
	$node->safe_psql('backupdb',
		"CREATE TABLE IF NOT EXISTS bk_t (id serial PRIMARY KEY, t text); "
		  . "INSERT INTO bk_t (t) SELECT '$tag' || i FROM generate_series(1, 2000) i");
	return;
}

# Checks of ptrack's answer that every incremental must pass.
sub incremental_ok
{
	my ($st, $what) = @_;
	note sprintf(
		"%s %s..%s: %d delta files, %d changed pages, %d whole files, "
		  . "%d bytes copied of %d (%.1f%%)",
		$what, $st->{start_lsn}, $st->{stop_lsn}, $st->{delta_files},
		$st->{changed_pages}, $st->{whole_files}, $st->{bytes_copied},
		$st->{db_bytes}, 100 * $st->{bytes_copied} / $st->{db_bytes});
	cmp_ok($st->{changed_pages}, '>', 0, "$what: copied changed pages");
	is($st->{pagecount_mismatch}, 0, "$what: every pagecount matches its pagemap")
	  or diag join "\n", @{ $st->{pagecount_examples} };
	is($st->{unknown_pagemap_paths}, 0,
		"$what: every pagemapset row names a permanent relation file")
	  or diag join "\n", @{ $st->{unknown_examples} };
	is($st->{unmarked_new_blocks}, 0, "$what: every block added is listed")
	  or diag "unlisted: @{ $st->{unmarked_examples} }";
	return;
}

# ---- 1. the role alone ----------------------------------------------------------

$node->safe_psql('postgres', $block{role});
is( $node->safe_psql(
		'postgres',
		"SELECT rolcanlogin, rolreplication, rolsuper FROM pg_roles "
		  . "WHERE rolname = 'backup'"),
	't|t|f',
	'the role block made backup: LOGIN REPLICATION, not superuser');
for my $call (
	'ptrack_version()', 'ptrack_init_lsn()',
	"public.ptrack_get_pagemapset('0/1'::pg_lsn)", "public.ptrack_get_change_stat('0/1'::pg_lsn)")
{
	(my $fn = $call) =~ s/\(.*//;
	$fn =~ s/^public\.//;
	my ($rc, $out, $err) = as_backup('postgres', "SELECT * FROM $call");
	isnt($rc, 0, "without the grants, backup cannot call $fn");
	like($err, qr/permission denied for function \Q$fn\E\b/,
		"without the grants, $fn says permission denied")
	  or diag "exit code $rc, stderr: $err";
}

# ---- 2. PostgreSQL's grants only: full yes, incremental refused ------------------

$node->safe_psql('postgres', $block{postgresql});
my $backups = PostgreSQL::Test::Utils::tempdir('backups');
my $l0 = full_backup($node, "$backups/full", user => 'backup');
note "full backup as backup at $l0";

workload('w1');
my $init0 = init_lsn($node);
my $denied = eval {
	incremental_backup($node, "$backups/denied", $l0, "$backups/full",
		user => 'backup');
	1;
};
my $why = $@ // '';
ok(!$denied, 'without ptrack\'s grants, the incremental as backup fails');
like(
	$why,
	qr/ERROR:  permission denied for function ptrack_get_pagemapset/,
	'... with "permission denied for function ptrack_get_pagemapset"')
  or diag "the error was: $why";
nothing_left_ok($init0, 'after the refused incremental');

# ---- 3. ptrack's grants (schema public): incremental 1 -------------------------

$node->safe_psql('postgres', $block{ptrack});
my ($rc, $out, $err) = as_backup('postgres',
	"SELECT ptrack_version(), ptrack_init_lsn() = '$init0', "
	  . "(SELECT files >= 0 FROM public.ptrack_get_change_stat('$l0'::pg_lsn))");
is("$rc $out", "0 " . $node->safe_psql('postgres', 'SELECT ptrack_version()') . '|t|t',
	'after the ptrack block, backup calls ptrack\'s functions in schema public')
  or diag $err;

my $st1 = incremental_backup($node, "$backups/incr1", $l0, "$backups/full",
	user => 'backup');
incremental_ok($st1, 'incremental 1 as backup (schema public)');

# ---- 4. the own-schema install in a separate backup database ----------------------

workload('w2');
my $init1 = init_lsn($node);
my $no_ext = eval {
	incremental_backup($node, "$backups/no_ext", $st1->{start_lsn},
		"$backups/incr1", user => 'backup', dbname => 'backupdb');
	1;
};
$why = $@ // '';
ok(!$no_ext, 'an incremental through a database without ptrack fails');
like($why, qr/extension ptrack is not installed in database backupdb/,
	'... saying that ptrack is not installed there')
  or diag "the error was: $why";
nothing_left_ok($init1, 'after the incremental through backupdb without ptrack');

my ($grc, $gout, $gerr) = $node->psql('backupdb', $block{ptrack});
isnt($grc, 0, 'the ptrack block fails in a database without the extension');
like($gerr, qr/ptrack is not installed in database backupdb.*\n.*HINT:  Run CREATE EXTENSION ptrack/s,
	'... naming the database, with a hint')
  or diag "stderr: $gerr";

$node->safe_psql('backupdb',
	'CREATE SCHEMA ptrack; CREATE EXTENSION ptrack WITH SCHEMA ptrack');
$node->safe_psql('backupdb', $block{postgresql});
$node->safe_psql('backupdb', $block{ptrack});
($rc, $out, $err) = as_backup('backupdb',
	"SELECT ptrack.ptrack_init_lsn() = '$init1', "
	  . "(SELECT count(*) >= 0 FROM ptrack.ptrack_get_pagemapset('$l0'::pg_lsn))");
is("$rc $out", '0 t|t',
	'after the ptrack block in backupdb, backup calls ptrack.ptrack_*()')
  or diag $err;

my $st2 = incremental_backup($node, "$backups/incr2", $st1->{start_lsn},
	"$backups/incr1", user => 'backup', dbname => 'backupdb');
incremental_ok($st2, 'incremental 2 as backup through backupdb (schema ptrack)');

# ---- 5. restore full + incr1 + incr2 --------------------------------------------

my $restored = PostgreSQL::Test::Cluster->new('role_restored');
restore("$backups/full", [ "$backups/incr1", "$backups/incr2" ],
	$restored->data_dir);
start_restored($restored);
my %report;
my @problems = compare_clusters($node, $restored, report => \%report);
is_deeply(\@problems, [],
	'full + incr1 + incr2 taken by backup equal the source, amcheck clean')
  or diag join "\n", @problems,
  map { mismatch_blocks($node, $restored, $_->[0], $_->[1], since => $l0) }
  grep { $_->[3] eq 'MISMATCH' } @{ $report{tables} };
cmp_ok(scalar @{ $report{tables} }, '>=', 6, 'tables were compared')
  or diag explain $report{tables};
$restored->stop;

# ---- 6. pg_probackup as backup ---------------------------------------------------

SKIP:
{
	my $pgpro = pg_probackup('section 6 (pg_probackup as the backup role)');
	skip 'no pg_probackup', 1 unless $pgpro;

	my $catalog = PostgreSQL::Test::Utils::tempdir('pgpro');
	my $pgdata = $node->data_dir;

	my @as_backup = ('-h', $host, '-p', $port, '-U', 'backup');
	my @backup = ('backup', '-B', $catalog, '--instance', 'node',
		'--stream', '--no-sync', '-j', '2', @as_backup);

	my ($prc, $pout) = $pgpro->run('--version');
	note "pg_probackup: $pout";
	($prc, $pout) = $pgpro->run('init', '-B', $catalog);
	is($prc, 0, 'pg_probackup init') or diag $pout;
	($prc, $pout) =
	  $pgpro->run('add-instance', '-B', $catalog, '-D', $pgdata, '--instance', 'node');
	is($prc, 0, 'pg_probackup add-instance') or diag $pout;

	($prc, $pout) = $pgpro->run(@backup, '-b', 'FULL', '-d', 'backupdb');
	is($prc, 0, 'pg_probackup backup -b FULL --stream as backup through backupdb')
	  or diag $pout;
	my ($full_id) = $pout =~ /INFO: Backup (\w+) completed/;
	if (defined $full_id && capture_mode() eq 'wal')
	{
		# wal capture keeps its files in pg_wal/ptrack, which pg_probackup does not copy.
		my $database = "$catalog/backups/node/$full_id/database";
		is(join(' ', ptrack_files_outside($database)), '', 'the FULL backup carries no ptrack file');
		ok(!-e "$database/pg_wal/ptrack", 'the FULL backup carries nothing of pg_wal/ptrack');
	}
	elsif (defined $full_id)
	{
		my $map = "$catalog/backups/node/$full_id/database/ptrack.map";
		note sprintf('the FULL backup carries ptrack.map: %s', -e $map ? (-s $map) . ' bytes' : 'no');
	}

	workload('p1');
	my $init2 = init_lsn($node);

	# otherdb has no ptrack.
	($prc, $pout) = $pgpro->run(@backup, '-b', 'PTRACK', '-d', 'otherdb');
	isnt($prc, 0, 'pg_probackup -b PTRACK through a database without ptrack fails');
	like($pout, qr/This PostgreSQL instance does not support ptrack/,
		'... saying "does not support ptrack"')
	  or diag $pout;
	note 'pg_probackup said: ', join ' | ', grep { /^ERROR/ } split /\n/, $pout;

	# otherdb with the extension and PostgreSQL's grants, not ptrack's.
	$node->safe_psql('otherdb', 'CREATE EXTENSION ptrack');
	$node->safe_psql('otherdb', $block{postgresql});
	($prc, $pout) = $pgpro->run(@backup, '-b', 'PTRACK', '-d', 'otherdb');
	isnt($prc, 0,
		'pg_probackup -b PTRACK without ptrack\'s grants fails');
	like($pout, qr/permission denied for function ptrack_init_lsn\b/,
		'... with "permission denied for function ptrack_init_lsn" '
		  . '(the first of ptrack\'s functions it calls)')
	  or diag $pout;
	note 'pg_probackup said: ', join ' | ', grep { /^ERROR/ } split /\n/, $pout;
	nothing_left_ok($init2, 'after the refused pg_probackup backups');

	($prc, $pout) = $pgpro->run(@backup, '-b', 'PTRACK', '-d', 'backupdb');
	is($prc, 0,
		'pg_probackup backup -b PTRACK --stream as backup through backupdb (schema ptrack)')
	  or diag $pout;

	workload('p2');
	($prc, $pout) = $pgpro->run(@backup, '-b', 'PTRACK', '-d', 'postgres');
	is($prc, 0,
		'pg_probackup backup -b PTRACK --stream as backup through postgres (schema public)')
	  or diag $pout;
	($prc, $pout) = $pgpro->run('show', '-B', $catalog, '--instance', 'node');
	note $pout;

	my $pg_restored = PostgreSQL::Test::Cluster->new('pgpro_restored');
	($prc, $pout) = $pgpro->run('restore', '-B', $catalog, '--instance', 'node',
		'-D', $pg_restored->data_dir, '--no-sync', '-j', '2');
	is($prc, 0, 'pg_probackup restore of FULL + PTRACK + PTRACK') or diag $pout;
	start_restored($pg_restored);
	%report = ();
	@problems = compare_clusters($node, $pg_restored, report => \%report);
	is_deeply(\@problems, [],
		'the pg_probackup chain taken by backup equals the source, amcheck clean')
	  or diag join "\n", @problems;
	cmp_ok(scalar @{ $report{tables} }, '>=', 6, 'tables were compared');
	$pg_restored->stop;
}

$node->stop;
done_testing();
