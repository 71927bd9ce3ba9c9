# Copyright (c) the ptrack authors
#
# 040_wal_file_layout.pl -- wal capture keeps every file of its own under
# pg_wal/ptrack (src/pg/persist/state_files.h): the map, its delta and the
# relation file sizes sit next to the change summaries, so
# that a copy of the data directory (pg_basebackup, pg_probackup's FULL
# backups and catchup) carries none of them.  A data directory of the
# previous version, which kept them at its top, is moved over at startup,
# durably and without a full backup.
#
#   1. after the start, saves, a clean restart and a crash: no ptrack file
#      at the top of the data directory, the map and its companions in
#      pg_wal/ptrack;
#   2. the previous version's layout (PtrackCluster::to_old_layout(): the
#      files at the top of the data directory), after a clean stop and after
#      a crash: the files are moved (LOG), no WARNING, ptrack_init_lsn()
#      unchanged, and the page-LSN oracle finds nothing missed since an L
#      read before the stop;
#   3. the states a crash during that move can leave, each started on:
#      a. the companions moved, the map not yet;
#      b. the map in both folders (a copy across file systems renamed into
#         place, the original not yet removed);
#      c. a partial copy (ptrack.move.tmp) in pg_wal/ptrack, nothing moved;
#      each time the move completes, tracking goes on (same
#      ptrack_init_lsn(), the oracle passes), and nothing stays outside;
#   4. both folders hold a map of wal capture, the data directory's newer (a
#      run of the previous version after this one): the newer one is used,
#      the older one's files are replaced;
#   5. pg_wal on another file system than the data directory (initdb -X on
#      /dev/shm, when that is another device): the move copies, fsyncs,
#      renames, and removes the originals;
#   6. a base backup that carries the previous version's files at its top
#      (as a FULL backup of that version did): they are moved, then refused
#      because of backup_label (one WARNING), a fresh start, and nothing of
#      them stays.
#
# Without the move (settle_state_files()), cases 2-5 start afresh with a new
# ptrack_init_lsn(); without the refusal of a restored map, case 6 trusts
# another server's state.

use strict;
use warnings;

use File::Copy qw(copy move);
use File::Temp ();
use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use PtrackCluster qw(capture_mode ptrack_node ptrack_file ptrack_files_outside to_old_layout init_lsn
  log_position log_since not_trusted_re count_matches);
use PtrackOracle qw(block_counts lsn_to_int no_misses_ok);

plan skip_all => 'the files of wal capture (the hooks keep theirs in the data directory)'
  unless capture_mode() eq 'wal';

my @companions = qw(ptrack.map.delta ptrack.limits ptrack.sizes ptrack.sizes.new);

# The node's files, for messages: "name (folder)" for each ptrack file found.
sub where_files
{
	my ($pgdata) = @_;
	my @out = map { "$_ (data directory)" } ptrack_files_outside($pgdata);
	push @out, map { "$_ (pg_wal/ptrack)" } grep { -e ptrack_file($pgdata, $_) } ('ptrack.map', @companions);
	return join(', ', @out) || 'none';
}

sub nothing_outside
{
	my ($node, $label) = @_;
	is(join(' ', ptrack_files_outside($node->data_dir)), '', "$label: no ptrack file at the top of the data directory")
	  or diag('files: ' . where_files($node->data_dir));
}

sub workload
{
	my ($node, $n) = @_;
	$node->safe_psql('postgres', qq{
UPDATE t SET v = v + 1 WHERE id % 7 = $n % 7;
CREATE TABLE t_$n AS SELECT g AS id, repeat('n', 100) AS pad FROM generate_series(1, 3000) g;
});
}

# Tracking went on across the start from $offset: no rejection, the same
# ptrack_init_lsn(), every change since $L listed.
sub goes_on
{
	my ($node, $offset, $label, $init, $L, $baseline) = @_;
	my $log = log_since($node, $offset);
	unlike($log, not_trusted_re(undef), "$label: the map is trusted");
	unlike($log, qr/WARNING/, "$label: no WARNING");
	is(init_lsn($node), $init, "$label: ptrack_init_lsn() is unchanged");
	$node->safe_psql('postgres', 'CHECKPOINT');
	no_misses_ok($node, $L, "$label: nothing missed since L $L", baseline => $baseline);
	nothing_outside($node, $label);
	return $log;
}

# A started node with ptrack, a table t of $rows rows, and a first save.
sub started_node
{
	my ($name, $rows, %opts) = @_;
	my $n = ptrack_node($name, %opts, conf => "autovacuum = off\n");
	$n->start;
	$n->safe_psql('postgres', qq{
CREATE EXTENSION ptrack;
CREATE TABLE t (id int, v int, pad text);
INSERT INTO t SELECT g, 0, repeat('x', 200) FROM generate_series(1, $rows) g;
CHECKPOINT;
});
	$n->poll_query_until('postgres', 'SELECT saves > 0 FROM ptrack_status') or die 'no save';
	return $n;
}

my $node = started_node('layout', 20000, allows_streaming => 1);
my $pgdata = $node->data_dir;
my $init = init_lsn($node);

# ---- 1. start, saves, clean restart, crash --------------------------------------------

nothing_outside($node, 'started and saved');
ok(-e ptrack_file($pgdata, $_), "started and saved: $_ is in pg_wal/ptrack") for qw(ptrack.map ptrack.sizes);
$node->restart;
nothing_outside($node, 'clean restart');
is(init_lsn($node), $init, 'clean restart: ptrack_init_lsn() is unchanged');
workload($node, 1);
$node->stop('immediate');
$node->start;
nothing_outside($node, 'crash');
is(init_lsn($node), $init, 'crash: ptrack_init_lsn() is unchanged');

# ---- 2. the previous version's layout -----------------------------------------------

my $round = 10;
foreach my $stop ('fast', 'immediate')
{
	my $label = "previous layout, $stop stop";
	$node->safe_psql('postgres', 'CHECKPOINT');
	my $L = $node->lsn('insert');
	my $baseline = block_counts($pgdata);
	workload($node, $round++);
	$node->stop($stop);
	my @moved = to_old_layout($pgdata);
	ok((grep { $_ eq 'ptrack.map' } @moved), "$label: the files are at the top of the data directory (@moved)");
	my $offset = log_position($node);
	$node->start;
	my $log = goes_on($node, $offset, $label, $init, $L, $baseline);
	like($log, qr{LOG:  ptrack moved its files from the data directory to pg_wal/ptrack}, "$label: the move is logged");
	# (not the delta: the follower's first save writes the whole map and removes it)
	ok(-e ptrack_file($pgdata, $_), "$label: $_ is in pg_wal/ptrack") for qw(ptrack.map ptrack.sizes);
}

# ---- 3. a crash in the middle of the move ------------------------------------------

# Stops the node, puts its files in the previous layout, lets $mutate change
# that into what a crash during the move leaves, starts and checks.
sub interrupted_move
{
	my ($label, $mutate) = @_;
	$node->safe_psql('postgres', 'CHECKPOINT');
	my $L = $node->lsn('insert');
	my $baseline = block_counts($pgdata);
	workload($node, $round++);
	$node->stop;
	my @moved = to_old_layout($pgdata);
	$mutate->(@moved);
	note "$label: before the start: " . where_files($pgdata);
	my $offset = log_position($node);
	$node->start;
	goes_on($node, $offset, $label, $init, $L, $baseline);
	ok(-e ptrack_file($pgdata, 'ptrack.map') && !-e ptrack_file($pgdata, 'ptrack.move.tmp'),
		"$label: the map is in pg_wal/ptrack, no ptrack.move.tmp is left");
}

interrupted_move(
	'companions moved, map not yet',
	sub {
		for my $name (grep { $_ ne 'ptrack.map' } @_)
		{
			rename("$pgdata/$name", ptrack_file($pgdata, $name)) or die "rename $name: $!";
		}
	});
interrupted_move(
	'map in both folders',
	sub {
		for my $name (@_)
		{
			copy("$pgdata/$name", ptrack_file($pgdata, $name)) or die "copy $name: $!";
			unlink("$pgdata/$name") or die "unlink $name: $!" unless $name eq 'ptrack.map';
		}
	});
interrupted_move(
	'a partial copy in pg_wal/ptrack',
	sub {
		open(my $fh, '>:raw', ptrack_file($pgdata, 'ptrack.move.tmp')) or die "ptrack.move.tmp: $!";
		print $fh "\x5a" x 3000;
		close $fh;
	});

# ---- 4. a newer map in the data directory -------------------------------------------

{
	my $label = 'newer map in the data directory';
	$node->stop;
	my $stash = $node->basedir . '/older';
	mkdir $stash or die "mkdir: $!";
	copy(ptrack_file($pgdata, $_), "$stash/$_") for grep { -e ptrack_file($pgdata, $_) } ('ptrack.map', @companions);
	$node->start;
	$node->safe_psql('postgres', 'CHECKPOINT');
	my $L = $node->lsn('insert');
	my $baseline = block_counts($pgdata);
	workload($node, $round++);
	$node->safe_psql('postgres', 'CHECKPOINT');
	$node->stop;
	to_old_layout($pgdata);
	opendir(my $dh, $stash) or die "opendir: $!";
	copy("$stash/$_", ptrack_file($pgdata, $_)) for grep { /^ptrack\./ } readdir $dh;
	closedir $dh;
	my $offset = log_position($node);
	$node->start;
	my $log = goes_on($node, $offset, $label, $init, $L, $baseline);
	like($log, qr{LOG:  ptrack map file "ptrack\.map" \(complete up to \S+\) is newer than "pg_wal/ptrack/ptrack\.map"},
		"$label: the log says which one is used");
}

# ---- 5. pg_wal on another file system -----------------------------------------------

SKIP:
{
	my $shm = '/dev/shm';
	skip "$shm is not another file system here", 8
	  unless -d $shm && -w $shm && (stat $shm)[0] != (stat $node->basedir)[0];
	my $waldir = File::Temp::tempdir('ptrack_wal_XXXX', DIR => $shm, CLEANUP => 1);
	my $other = started_node('layout_exdev', 5000, extra => [ '-X', "$waldir/pg_wal" ]);
	my $odata = $other->data_dir;
	my $oinit = init_lsn($other);
	my $L = $other->lsn('insert');
	my $baseline = block_counts($odata);
	workload($other, 99);
	$other->stop;
	# rename() cannot cross the file systems: move() copies.
	for my $name ('ptrack.map', @companions)
	{
		my $from = ptrack_file($odata, $name);
		move($from, "$odata/$name") or die "move $name: $!" if -e $from;
	}
	ok(-e "$odata/ptrack.map", 'pg_wal elsewhere: the files are at the top of the data directory');
	my $offset = log_position($other);
	$other->start;
	my $log = log_since($other, $offset);
	like($log, qr{LOG:  ptrack moved its files from the data directory to pg_wal/ptrack}, 'pg_wal elsewhere: moved');
	unlike($log, qr/WARNING/, 'pg_wal elsewhere: no WARNING');
	is(init_lsn($other), $oinit, 'pg_wal elsewhere: ptrack_init_lsn() is unchanged');
	$other->safe_psql('postgres', 'CHECKPOINT');
	no_misses_ok($other, $L, "pg_wal elsewhere: nothing missed since L $L", baseline => $baseline);
	nothing_outside($other, 'pg_wal elsewhere');
	ok(-e ptrack_file($odata, 'ptrack.map') && !-e ptrack_file($odata, 'ptrack.move.tmp'),
		'pg_wal elsewhere: the map is in pg_wal/ptrack, no ptrack.move.tmp is left');
	ok((stat ptrack_file($odata, 'ptrack.map'))[0] != (stat "$odata/base")[0],
		'pg_wal elsewhere: pg_wal/ptrack is on the other file system');
	$other->stop;
}

# ---- 6. a base backup that carries the previous version's files ---------------------

{
	my $label = 'backup with the previous layout';
	my $old_init = init_lsn($node);
	$node->safe_psql('postgres', 'CHECKPOINT');
	$node->backup('bk');
	my $bk = $node->backup_dir . '/bk';
	is(join(' ', ptrack_files_outside($bk)), '', 'pg_basebackup copies no ptrack file');
	# What a FULL backup of the previous version held: the map and its companions at the top.
	for my $name (grep { -e ptrack_file($pgdata, $_) } ('ptrack.map', @companions))
	{
		copy(ptrack_file($pgdata, $name), "$bk/$name") or die "copy $name: $!";
	}
	ok(-e "$bk/ptrack.map", "$label: the backup holds ptrack.map at its top");
	my $restored = PostgreSQL::Test::Cluster->new('restored');
	$restored->init_from_backup($node, 'bk');
	my $offset = log_position($restored);
	$restored->start;
	my $log = log_since($restored, $offset);
	is(count_matches($log, not_trusted_re(undef)), 1, "$label: one map rejection");
	like($log,
		not_trusted_re('a backup_label file is present (the data directory was restored from a backup or rewound)'),
		"$label: refused because of backup_label");
	isnt(init_lsn($restored), $old_init, "$label: a fresh ptrack_init_lsn()");
	nothing_outside($restored, $label);
	$restored->stop;
}

$node->stop;
done_testing();
