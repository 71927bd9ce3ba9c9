# Copyright (c) the ptrack authors
#
# 012_unpatched_utilities.pl -- ptrack's files never get in the way of the
# stock utilities (docs/design.md section 5.1: the map file lives outside global/,
# base/ and pg_tblspc/).  On a cluster initialised with --data-checksums,
# with ptrack on, a workload and several checkpoints (so ptrack.map, its
# temporary file and ptrack.map.delta have been written many times):
#
#   - nothing ptrack-named exists under global/, base/ or pg_tblspc/;
#   - pg_basebackup (checksum verification on by default) succeeds while
#     pgbench and checkpoints run, with nothing at all on stderr, and
#     pg_verifybackup accepts the backup;
#   - pg_checksums --check on the cleanly stopped cluster succeeds and
#     reports no bad checksum;
#   - pg_rewind of the old primary after a promote and a divergence
#     succeeds; the rewound node then follows the new primary and both hold
#     the same data; pg_checksums --check passes on both once stopped.

use strict;
use warnings;

use File::Find;
use FindBin;
use lib "$FindBin::RealBin/lib";

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use PtrackCluster qw(capture_mode ptrack_node ptrack_file ptrack_files_outside map_header rewind_from);

my $node = ptrack_node(
	'utilities',
	allows_streaming => 1,
	extra => ['--data-checksums'],
	# wal_keep_size: pg_rewind needs the old primary's WAL back to the last
	# common checkpoint.
	conf => "max_wal_size = 128MB\nwal_keep_size = 1GB\n");
$node->start;
my $pgdata = $node->data_dir;
is($node->safe_psql('postgres', 'SHOW data_checksums'), 'on', 'data checksums are on');

my $tsdir = $node->basedir . '/ts1';
mkdir $tsdir or die "mkdir $tsdir: $!";
$node->safe_psql('postgres', 'CREATE EXTENSION ptrack');
$node->safe_psql('postgres', "CREATE TABLESPACE ts1 LOCATION '$tsdir'");
$node->command_ok([ 'pgbench', '-i', '-q', '-s', '3', '--index-tablespace=ts1', 'postgres' ],
	'pgbench -i -s 3 (indexes in tablespace ts1)');
$node->safe_psql('postgres', 'CHECKPOINT');
$node->command_ok([ 'pgbench', '-n', '-c', '4', '-j', '2', '-T', '5', 'postgres' ],
	'pgbench -T 5');
$node->safe_psql(
	'postgres', q{
CHECKPOINT;
CREATE TABLE extra_t TABLESPACE ts1 AS SELECT g AS id, md5(g::text) AS h FROM generate_series(1, 50000) g;
CHECKPOINT;
});

my $header = map_header($pgdata);
# At the top of the data directory (hooks), or in pg_wal/ptrack (wal capture).
ok($header && $header->{crc_ok}, 'ptrack.map exists where the capture source keeps it')
  or diag explain($header // 'no ptrack.map');
ok(-e ptrack_file($pgdata, 'ptrack.map.delta'), 'ptrack.map.delta exists next to it');

my @misplaced;
find(
	{
		# the file name only: the test directory itself may be named after ptrack
		wanted => sub { push @misplaced, $File::Find::name if m{/[^/]*ptrack[^/]*\z} },
		follow => 1,
		no_chdir => 1
	},
	map { "$pgdata/$_" } qw(global base pg_tblspc));
is(scalar @misplaced, 0, 'nothing ptrack-named under global/, base/ or pg_tblspc/')
  or diag(join("\n", @misplaced));

# ---------------------------------------------------------------------------
# pg_basebackup with checksum verification, during writes and checkpoints
# ---------------------------------------------------------------------------

my ($pgb_out, $pgb_err) = ('', '');
my $pgbench = IPC::Run::start(
	[ 'pgbench', '-n', '-c', '2', '-j', '2', '-T', '120', '-h', $node->host, '-p', $node->port, 'postgres' ],
	'>', \$pgb_out, '2>', \$pgb_err);

my $backup_dir = $node->backup_dir . '/bb';
my ($stdout, $stderr) = ('', '');
my $backup = IPC::Run::start(
	[
		'pg_basebackup', '-D', $backup_dir, '-h', $node->host, '-p', $node->port,
		'--checkpoint=fast', '--no-sync', '--tablespace-mapping', "$tsdir=" . $node->basedir . '/bb_ts1'
	],
	'>', \$stdout, '2>', \$stderr);
# Checkpoints (map flushes: ptrack.map.tmp created and renamed) while the
# backup copies the data directory.
my $checkpoints = 0;
while ($backup->pumpable)
{
	$backup->pump_nb;
	$node->safe_psql('postgres', 'CHECKPOINT');
	$checkpoints++;
}
ok($backup->finish, "pg_basebackup succeeded ($checkpoints checkpoints during the backup)");
is($stderr, '', 'pg_basebackup printed nothing on stderr (no checksum warning)');
if (capture_mode() eq 'wal')
{
	# pg_basebackup copies none of pg_wal's contents.
	ok(!map_header($backup_dir), 'the backup holds no ptrack.map (wal capture keeps it in pg_wal/ptrack)');
	is(join(' ', ptrack_files_outside($backup_dir)), '', 'the backup holds no ptrack file in the data directory');
}
else
{
	ok(map_header($backup_dir), 'the backup holds ptrack.map');
}

$node->command_ok([ 'pg_verifybackup', $backup_dir ], 'pg_verifybackup accepts the backup');

# (pgbench answers SIGINT by cancelling its queries and going on.)
$pgbench->kill_kill;

# ---------------------------------------------------------------------------
# pg_checksums --check on the stopped cluster
# ---------------------------------------------------------------------------

$node->safe_psql('postgres', 'CHECKPOINT');
$node->stop;
ok(-e ptrack_file($pgdata, 'ptrack.map'), 'the stopped cluster holds ptrack.map');
$node->command_checks_all(
	[ 'pg_checksums', '--check', '-D', $pgdata ],
	0,
	[ qr/Bad checksums:\s+0$/m, qr/Data checksum version:\s+1$/m ],
	[qr/^$/],
	'pg_checksums --check succeeds with no bad checksum');

# ---------------------------------------------------------------------------
# pg_rewind after a promote and a divergence
# ---------------------------------------------------------------------------

$node->start;
# The standby straight from pg_basebackup (init_from_backup() cannot copy a
# backup holding tablespace symlinks).
my $standby = PostgreSQL::Test::Cluster->new('utilities_standby');
$node->command_ok(
	[
		'pg_basebackup', '-D', $standby->data_dir, '-h', $node->host, '-p', $node->port,
		'--checkpoint=fast', '--no-sync', '--tablespace-mapping', "$tsdir=" . $standby->basedir . '/ts1'
	],
	'pg_basebackup for a standby');
chmod(0700, $standby->data_dir) or die "chmod: $!";
$standby->append_conf('postgresql.conf',
	'port = ' . $standby->port . "\nunix_socket_directories = '" . $standby->host . "'");
$standby->enable_streaming($node);
$standby->start;
$node->safe_psql('postgres', 'UPDATE pgbench_branches SET bbalance = bbalance + 1');
$node->wait_for_catchup($standby, 'replay', $node->lsn('insert'));

$standby->promote;
$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'the standby was not promoted';

# Divergence: both sides write, with checkpoints (map flushes) on both.
$node->command_ok([ 'pgbench', '-n', '-c', '2', '-j', '2', '-T', '3', 'postgres' ],
	'old primary diverges');
$node->safe_psql('postgres', 'CREATE TABLE only_old AS SELECT 1 AS x; CHECKPOINT;');
$standby->command_ok([ 'pgbench', '-n', '-c', '2', '-j', '2', '-T', '3', 'postgres' ],
	'new primary diverges');
$standby->safe_psql('postgres',
	'CREATE TABLE only_new TABLESPACE ts1 AS SELECT g FROM generate_series(1, 10000) g; CHECKPOINT;');
$node->stop;

rewind_from($node, $standby);
$node->enable_streaming($standby);
$node->start;

$standby->safe_psql('postgres', 'UPDATE pgbench_tellers SET tbalance = tbalance + 1');
$standby->wait_for_catchup($node, 'replay', $standby->lsn('insert'));

my $digest = q{
SELECT (SELECT sum(abalance) FROM pgbench_accounts) || ':' ||
       (SELECT sum(bbalance) FROM pgbench_branches) || ':' ||
       (SELECT sum(tbalance) FROM pgbench_tellers) || ':' ||
       (SELECT count(*) FROM pgbench_history) || ':' ||
       (SELECT count(*) FROM only_new) || ':' ||
       (SELECT count(*) FROM extra_t) || ':' ||
       (SELECT count(*) FROM pg_class WHERE relname = 'only_old')
};
is($node->safe_psql('postgres', $digest), $standby->safe_psql('postgres', $digest),
	'the rewound node holds the new primary\'s data');

$standby->safe_psql('postgres', 'CHECKPOINT');
$standby->wait_for_catchup($node, 'replay', $standby->lsn('insert'));
$node->safe_psql('postgres', 'CHECKPOINT');
$node->stop;
$standby->stop;
foreach my $n ($node, $standby)
{
	my $name = $n->name;
	ok(-e ptrack_file($n->data_dir, 'ptrack.map'), "$name holds ptrack.map");
	$n->command_checks_all(
		[ 'pg_checksums', '--check', '-D', $n->data_dir ],
		0,
		[qr/Bad checksums:\s+0$/m],
		[qr/^$/],
		"pg_checksums --check on the stopped $name succeeds");
}

done_testing();
