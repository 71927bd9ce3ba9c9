# Copyright (c) the ptrack authors
#
# 019_restored_backup.pl -- a server restored from a backup refuses the map
# that came with the backup and tracks from the backup's redo LSN, so the
# restored backup is a valid parent for the next incremental backup
# (docs/design.md sections 3.8, 4.7 and 5.2).
#
# Why the copied map is refused rather than trusted when it was saved after
# the backup's start (the rule the issue proposed): a backup copies files one
# by one while the server runs.  With the hooks source, the marks of a bulk
# write that bypassed shared buffers, WAL-logged before the backup's redo LSN
# and written after the map's last save, are made durable only in
# ptrack.bypass, written just before the writer commits; the backup may copy
# the written page but an older ptrack.bypass, and replay, which starts at
# the redo LSN, never sees that record.  So a copied map cannot be proven
# complete.  With the wal source, the follower would have to resume at the
# map's covered LSN, whose WAL the end-of-recovery checkpoint recycles
# before the follower runs.  What is provable is a fresh map from the
# backup's redo LSN: hooks, replay writes (and so marks) every page changed
# after it (docs/design.md section 3.8); wal, the postmaster reads the WAL
# in pg_wal from it before recovery and records the file sizes as the backup
# left them, and the follower reads on from where that scan ended (7.1).
# Without that scan (src/pg/capture/wal/wal_load.cpp, scan_restored_backup()) the wal
# source's ptrack_init_lsn() lies after the end-of-recovery checkpoint and
# step 4 fails.
#
#   1. a primary: FULL backup F (start L0), pgbench, incremental P1 since L0
#      (start L1);
#   2. F + P1 restored into a new node, with the primary's map files copied
#      into it where the source keeps them (the data directory; pg_wal/ptrack
#      with wal capture), as a copy that does not leave them out would:
#      the server refuses them (backup_label) and its ptrack_init_lsn() is
#      not after L1;
#   3. a backup tool asking for the changes since L0 gets the documented
#      error: the next backup must be a FULL one, not silently a wrong one;
#   4. pgbench on the restored server, incremental P2 since L1 on it;
#      F + P1 + P2 restored equals the restored server (the chain goes on
#      across the restore).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use File::Copy qw(copy);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use PtrackBackup qw(full_backup incremental_backup restore start_restored);
use PtrackVerify qw(compare_clusters);
use PtrackCluster qw(ptrack_node state_dir log_position log_since not_trusted_re init_lsn capture_mode);
use PtrackSummaries qw(summary_dir summaries chain_break describe_summaries);
use PtrackOracle qw(lsn_to_int);


my $primary = ptrack_node('primary', allows_streaming => 1, conf => "autovacuum = off\n");
$primary->start;
$primary->safe_psql('postgres', 'CREATE EXTENSION ptrack');
$primary->command_ok([ 'pgbench', '-i', '-q', '-s', '2', 'postgres' ], 'pgbench -i -s 2');

# ---- 1. F and P1 on the primary ----------------------------------------------

my $backups = PostgreSQL::Test::Utils::tempdir('backups');
my $l0 = full_backup($primary, "$backups/full");
$primary->command_ok([ 'pgbench', '-n', '-c', '2', '-j', '1', '-t', '300', 'postgres' ], 'pgbench after F');
my $p1 = incremental_backup($primary, "$backups/p1", $l0, "$backups/full");
my $l1 = $p1->{start_lsn};
note "F starts at $l0, P1 at $l1";

# ---- 2. restored, with a copied map --------------------------------------------

$primary->safe_psql('postgres', 'CHECKPOINT');
my $restored = PostgreSQL::Test::Cluster->new('restored');
restore("$backups/full", "$backups/p1", $restored->data_dir, tablespace_dir => $restored->basedir . '/tblspc');
# Where the capture source keeps them: the data directory (hooks), or
# pg_wal/ptrack (wal capture), which a copy of the data directory with its
# pg_wal (a file-system snapshot) would bring along.
my @copied;
my ($from, $to) = map { state_dir($_->data_dir) } ($primary, $restored);
mkdir $to;
opendir(my $dh, $from) or die "opendir: $!";
foreach my $f (grep { /^ptrack\.(?:map|map\.delta|sizes|limits)$/ } readdir($dh))
{
	copy("$from/$f", "$to/$f") or die "copy $f: $!";
	push @copied, $f;
}
closedir($dh);
ok(grep({ $_ eq 'ptrack.map' } @copied), "the primary's map files were copied into the restored data directory (@copied)");
# With wal capture, the primary's change summaries too, as a copy of the data
# directory with its pg_wal (a file-system snapshot) would bring them: they
# describe the primary's WAL, not this server's, and must go.
my @planted;
if (capture_mode() eq 'wal')
{
	my $to = summary_dir($restored->data_dir);
	mkdir $to;
	for my $s (summaries($primary->data_dir))
	{
		copy(summary_dir($primary->data_dir) . "/$s->{name}", "$to/$s->{name}") or die "copy $s->{name}: $!";
		push @planted, $s->{name};
	}
	ok(@planted > 0, 'the primary\'s summaries were copied into the restored pg_wal/ptrack (' . scalar(@planted) . ')');
}
my $off = log_position($restored);
start_restored($restored);
like(log_since($restored, $off),
	not_trusted_re('a backup_label file is present (the data directory was restored from a backup or rewound)'),
	'the restored server refuses the map that came with the backup');
my $rinit = init_lsn($restored);
note "restored server: ptrack_init_lsn() $rinit";
if (capture_mode() eq 'wal')
{
	# The summaries of the WAL read before recovery (scan_summary_writer.cpp), then
	# the follower's: one unbroken chain from the backup's redo LSN, none of
	# the primary's files left.
	# A combine in progress overlaps its inputs for a moment: list until it is done.
	my @chain;
	for (1 .. 100)
	{
		@chain = summaries($restored->data_dir);
		last if chain_break(@chain) eq '';
		select(undef, undef, undef, 0.1);
	}
	my %left = map { $_->{name} => 1 } @chain;
	is_deeply([ grep { $left{$_} } @planted ], [], 'the summaries copied from the primary are gone');
	ok(@chain > 0 && $chain[0]{valid} && chain_break(@chain) eq '' && $chain[0]{start} == lsn_to_int($rinit),
		"the restored server's summaries start at ptrack_init_lsn() $rinit, unbroken")
	  or diag 'summaries: ' . describe_summaries(@chain) . '; break: ' . chain_break(@chain);
}

# ---- 3. older than the restored backup: refused ------------------------------

my ($rc, $out, $err) = $restored->psql('postgres', "SELECT count(*) FROM public.ptrack_get_pagemapset('$l0'::pg_lsn)");
isnt($rc, 0, "pagemapset since F's start $l0 fails on the restored server");
like($err, qr/ERROR:  start_lsn \Q$l0\E is older than ptrack_init_lsn\(\) \Q$rinit\E/,
	'the error says the start LSN is older than ptrack_init_lsn()');
like($err, qr/HINT:  .*full backup/i, 'and its hint says to take a full backup');

# ---- 4. the chain goes on across the restore ---------------------------------

$restored->command_ok([ 'pgbench', '-n', '-c', '2', '-j', '1', '-t', '300', 'postgres' ],
	'pgbench on the restored server');
$restored->safe_psql('postgres',
	'CREATE TABLE after_restore AS SELECT g AS id, md5(g::text) AS t FROM generate_series(1, 10000) g');

{
	ok(lsn_to_int($rinit) <= lsn_to_int($l1),
		"the restored server tracks from the restored backup's start: ptrack_init_lsn() $rinit <= P1's start $l1");
	my $p2 = eval { incremental_backup($restored, "$backups/p2", $l1, "$backups/p1") };
	ok($p2, "an incremental since P1's start ($l1) on the restored server") or diag $@;
	if ($p2)
	{
		my $again = PostgreSQL::Test::Cluster->new('restored_again');
		restore("$backups/full", [ "$backups/p1", "$backups/p2" ], $again->data_dir,
			tablespace_dir => $again->basedir . '/tblspc');
		start_restored($again);
		my @problems = compare_clusters($restored, $again);
		is_deeply(\@problems, [], 'F + P1 + P2 (across the restore) equals the restored server')
		  or diag join "\n", @problems;
		$again->stop;
	}
}

$restored->stop;
$primary->stop;
done_testing();
