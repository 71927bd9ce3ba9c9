# Copyright (c) the ptrack authors
#
# 011_untrusted_map.pl -- a stored map that cannot be trusted is rejected
# (docs/design.md section 5.2): one WARNING naming the reason, the file removed, a
# fresh map and a new ptrack_init_lsn(), so that a backup tool asking for
# changes since an older LSN is told to take a full backup.
#
# For every case the test asserts:
#   - exactly one WARNING 'ptrack map file "ptrack.map" is not trusted
#     because <reason>' with the exact expected reason (the file named where
#     the source keeps it: pg_wal/ptrack/ptrack.map with wal capture);
#   - after a clean stop, the rejected ptrack.map is gone right after the
#     start (before any checkpoint could write a new one);
#   - ptrack_init_lsn() is new and later than an L read before the stop
#     (after a crash: an L read before the changes the crash lost; the new
#     init_lsn is also checked to be >= the end of the crashed run's WAL);
#   - ptrack_get_pagemapset(L) and ptrack_get_change_stat(L) refuse L with
#     "start_lsn L is older than ptrack_init_lsn() NEW";
#   - after some work and a checkpoint, ptrack.map is a valid file (header
#     CRC checked here, independently of the server) carrying the new
#     init_lsn, and the page-LSN oracle (t/lib/PtrackOracle.pm) passes from
#     the new init_lsn: the fresh map tracks everything from there.
#
# Cases:
#   4. the file damaged while the server is stopped: header field (header
#      CRC), magic, truncated, empty (too short for a header), bytes
#      appended, garbage of the same size; a map from another cluster; a
#      map written under another PostgreSQL major version (its header's
#      major version changed, CRC valid);
#      ptrack.map_size changed (64MB -> 32MB; hooks only: wal capture's
#      map is a few KB whatever it says, and stays trusted); ptrack.capture
#      switched and back (servers with the hooks); data checksums enabled with
#      pg_checksums; the last batch of ptrack.map.delta cut short, and the
#      delta file removed (the map is then older than the latest checkpoint);
#      ptrack.map removed with its delta left (a WARNING, not just "not
#      found");
#   4b. not a rejection: a chunk of the data area (in the segment summary, and
#      in the slots) or an entry of the chunk CRC table damaged.  The map is
#      kept and the damaged chunk made conservative (one WARNING "N of M
#      chunks failed their checksum"): ptrack_init_lsn() unchanged, every
#      block listed before the stop still listed, the oracle passes from an L
#      read before the stop;
#   5. pg_resetwal on a cleanly stopped cluster;
#   6. a node restored from pg_basebackup, a streaming standby made from the
#      same backup, and the old primary after pg_rewind against the promoted
#      standby (all: backup_label present); with wal capture the backup
#      carries no ptrack file (its files are in pg_wal/ptrack), so the
#      restored node and the standby start afresh without a rejection, and
#      pg_rewind, which copies pg_wal's contents, brings the promoted
#      standby's map, which is rejected;
#   7. not a rejection: full_page_writes = off, immediate stop: trusted, the
#      oracle passes (the WAL after the saved map is read again at startup);
#      wal_level = minimal (hooks): clean restart trusted (with the WAL-
#      skipping path of CREATE TABLE + big INSERT in one transaction checked
#      by the oracle), immediate stop not trusted; with wal capture the
#      server refuses to start;
#   8. (hooks) a crash before the first checkpoint after a rejection: the
#      crash restart finds no map, and ptrack_status() still names the
#      rejection as the reason tracking restarted.

use strict;
use warnings;

use File::Copy qw(copy);
use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use PtrackCluster
  qw(capture_mode server_has_hooks ptrack_node ptrack_file ptrack_path ptrack_files_outside map_header set_map_server_major server_major delta_batches log_position log_since not_trusted_re count_matches init_lsn
  rewind_from);
use PtrackOracle qw(block_counts lsn_to_int no_misses_ok pagemapset show_misses);

my %reason = (
	header_crc => 'its header checksum does not match',
	magic => 'it is not a ptrack map file (bad magic number)',
	size => 'its size does not match its header',
	short => 'it is too short to hold a header',
	other => 'it belongs to another database cluster (system identifier differs)',
	major => 'it was written under another PostgreSQL major version',
	map_size => 'ptrack.map_size changed since it was written',
	checksums => 'data checksums were enabled or disabled since it was written',
	older => 'it is older than the latest checkpoint (a flush was missed, or the WAL was reset)',
	map_deleted => 'it is missing while "' . ptrack_path('ptrack.map.delta') . '" exists (was it deleted?)',
	backup_label =>
	  'a backup_label file is present (the data directory was restored from a backup or rewound)',
	minimal => 'the server crashed while wal_level was minimal, so the WAL cannot show what was lost',
	source_hooks => 'it was written by the hooks capture source and this server captures from the WAL',
	source_wal => 'it was written by another capture source than this server\'s (ptrack.capture changed)',
);

# Some changes: an update, a delete, a new table with an index.
my $work_round = 0;
sub workload
{
	my ($node) = @_;
	$work_round++;
	$node->safe_psql(
		'postgres', qq{
UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid % 100 = $work_round % 100;
DELETE FROM pgbench_accounts WHERE aid % 1000 = $work_round % 1000;
CREATE TABLE work_$work_round AS SELECT g AS id, repeat('w', 100) AS pad FROM generate_series(1, 2000) g;
CREATE INDEX ON work_$work_round (id);
});
}

# The node was just started (log from $offset on) after $old_init and $L
# were read.  Options:
#   removed  the server stopped cleanly: ptrack.map must be gone at once
#   writer   the node the workload runs on (a standby's primary)
#   mode     the capture source the node runs now (default capture_mode():
#            another after a change of ptrack.capture)
#   fresh    there was no map to reject (wal capture keeps its files in
#            pg_wal/ptrack, which a base backup does not copy): no WARNING,
#            a fresh start, and the new ptrack_init_lsn() not before L
sub check_rejected
{
	my ($node, $offset, $label, $reason, $L, $old_init, %opts) = @_;
	my $pgdata = $node->data_dir;
	my $mode = $opts{mode} // capture_mode();

	if ($opts{removed})
	{
		# Gone, or already replaced by the fresh map's first save (the WAL
		# follower saves a fresh map at once): a file carrying the new
		# ptrack_init_lsn(), which the rejected one cannot.  The rejected
		# map was written in the folder of capture_mode()'s source.
		my @left = grep { -e ptrack_file($pgdata, $_) } ('ptrack.map', 'ptrack.map.delta');
		my $now = map_header($pgdata);
		my $init_now = init_lsn($node);
		@left = ()
		  if $now && $now->{crc_ok} && $now->{init_lsn} eq $init_now && $init_now ne $old_init;
		is("@left", '',
			"$label: the rejected ptrack.map (and its delta) were removed at startup")
		  or diag('ptrack.map now: ' . ($now ? "init_lsn $now->{init_lsn}, crc_ok $now->{crc_ok}" : 'absent')
			  . "; ptrack_init_lsn() $init_now, before $old_init");
	}

	my $log = log_since($node, $offset);
	my $new_init = init_lsn($node);
	if ($opts{fresh})
	{
		is(count_matches($log, not_trusted_re(undef)), 0, "$label: no map was there to reject");
		my $map = quotemeta(ptrack_path('ptrack.map', $mode));
		like($log, qr/LOG:  ptrack map file "$map" not found: change tracking starts afresh/,
			"$label: tracking starts afresh");
		isnt($new_init, $old_init, "$label: ptrack_init_lsn() is the node's own ($old_init -> $new_init)");
		cmp_ok(lsn_to_int($new_init), '>=', lsn_to_int($L),
			"$label: the new ptrack_init_lsn() $new_init is not before L $L");
	}
	else
	{
		is(count_matches($log, not_trusted_re(undef)), 1, "$label: exactly one map rejection logged");
		like($log, not_trusted_re($reason), "$label: WARNING ... is not trusted because $reason");
		isnt($new_init, $old_init, "$label: ptrack_init_lsn() changed ($old_init -> $new_init)");
		cmp_ok(lsn_to_int($new_init), '>', lsn_to_int($L),
			"$label: the new ptrack_init_lsn() $new_init is later than L $L");
	}

	foreach my $fn ($opts{fresh} ? () : ('ptrack_get_pagemapset', 'ptrack_get_change_stat'))
	{
		my ($ret, $out, $err) =
		  $node->psql('postgres', "SELECT count(*) FROM $fn('$L')");
		isnt($ret, 0, "$label: $fn(L) fails");
		like(
			$err,
			qr/ERROR:  start_lsn \Q$L\E is older than ptrack_init_lsn\(\) \Q$new_init\E/,
			"$label: $fn(L) says L is older than ptrack_init_lsn()");
	}

	# The fresh map tracks everything from the new init_lsn.
	my $baseline = block_counts($pgdata);
	my $writer = $opts{writer} // $node;
	workload($writer);
	$writer->safe_psql('postgres', 'CHECKPOINT');
	if ($writer != $node)
	{
		# A restartpoint, at the checkpoint just replayed.
		$writer->wait_for_catchup($node, 'replay', $writer->lsn('insert'));
		$node->safe_psql('postgres', 'CHECKPOINT');
	}

	my $header = map_header($pgdata, $mode);
	ok($header && $header->{magic} eq 'PTRACKMP' && $header->{crc_ok},
		"$label: a checkpoint wrote a valid ptrack.map")
	  or diag explain($header // 'no ptrack.map');
	is($header && $header->{init_lsn}, $new_init,
		"$label: the new ptrack.map carries the new init_lsn");

	my $stats = no_misses_ok($node, $new_init, "$label: oracle from the new init_lsn passes",
		forks => [ 'main', 'vm', 'init' ],
		baseline => $baseline);
	cmp_ok($stats->{at_or_after}, '>', 50,
		"$label: the oracle saw blocks changed since the new init_lsn ($stats->{at_or_after})");
	return $new_init;
}

# ---------------------------------------------------------------------------
# 4. Damaged files, another cluster's map, map_size, data checksums
# ---------------------------------------------------------------------------

# wal_keep_size: pg_rewind needs the old primary's WAL back to the last
# common checkpoint.
# Without data checksums whatever the version's default (18 turns them on):
# a case below enables them.
my $node = ptrack_node('untrusted', allows_streaming => 1, checksums => 0,
	conf => "autovacuum = off\nwal_keep_size = 1GB\n");
$node->start;
my $pgdata = $node->data_dir;
$node->safe_psql('postgres', 'CREATE EXTENSION ptrack');
$node->command_ok([ 'pgbench', '-i', '-q', '-s', '1', 'postgres' ], 'pgbench -i -s 1');
$node->safe_psql('postgres', 'CHECKPOINT');
my $header = map_header($pgdata);
ok($header && $header->{crc_ok}, 'ptrack.map exists and its header is valid')
  or diag explain($header // 'no ptrack.map');
my $map_bytes = $header->{size};
# Hooks: a map of ptrack.map_size.  wal: the follower marks no map, which
# keeps only its resume point in the smallest geometry (docs/design.md
# section 4.6): 1088 bytes whatever ptrack.map_size says.  The data follow a
# 512-byte header and the 4 KB-aligned chunk CRC table.
my $wal = capture_mode() eq 'wal';
my $region = $wal ? 1088 : 64 * 1024 * 1024;
my $data_offset = $map_bytes - $region;
if ($wal)
{
	cmp_ok($map_bytes, '<', 8192, "wal capture: ptrack.map is a few KB ($map_bytes bytes) with ptrack.map_size = 64MB");
}
else
{
	cmp_ok($map_bytes, '>', 60 * 1024 * 1024, "ptrack.map is $map_bytes bytes");
}
is($data_offset, $wal ? 4096 : 8192, "the map's data start at $data_offset");

# Stop the node cleanly, $mutate->() the stopped data directory, start, and
# check the rejection.  (The previous case ended with work and checkpoints,
# so the shutdown checkpoint appends a batch to ptrack.map.delta.)
sub stopped_case
{
	my ($label, $reason, $mutate, %opts) = @_;
	my $old_init = init_lsn($node);
	my $L = $node->lsn('insert');
	$node->stop;
	$mutate->();
	my $offset = log_position($node);
	$node->start;
	check_rejected($node, $offset, $label, $reason, $L, $old_init, removed => 1, %opts);
}

# XORs $len bytes at $pos with 0xFF.
sub flip_bytes
{
	my ($pos, $len) = @_;
	my $file = ptrack_file($pgdata, 'ptrack.map');
	open(my $fh, '+<:raw', $file) or die "$file: $!";
	seek($fh, $pos, 0) or die "seek: $!";
	my $bytes;
	read($fh, $bytes, $len) == $len or die "short read of $file";
	seek($fh, $pos, 0) or die "seek: $!";
	print $fh ($bytes ^ ("\xFF" x $len));
	close $fh or die "close: $!";
}

sub set_size
{
	my ($size) = @_;
	truncate(ptrack_file($pgdata, 'ptrack.map'), $size) or die "truncate: $!";
}

# 4b. Damaged chunks: kept, made conservative.
sub damaged_chunk_case
{
	my ($label, $mutate) = @_;
	workload($node);
	$node->safe_psql('postgres', 'CHECKPOINT');
	my $init = init_lsn($node);
	my $L = $node->lsn('insert');
	my $baseline = block_counts($pgdata);
	workload($node);
	my $before = pagemapset($node, 'postgres', $L);
	$node->stop;
	$mutate->();
	my $offset = log_position($node);
	$node->start;
	my $log = log_since($node, $offset);
	my $map = quotemeta(ptrack_path('ptrack.map'));
	is(count_matches($log, qr/WARNING:  ptrack map file "$map": 1 of \d+ chunks failed their checksum$/m),
		1, "$label: one WARNING about one damaged chunk");
	unlike($log, not_trusted_re(undef), "$label: the map is not rejected");
	is(init_lsn($node), $init, "$label: ptrack_init_lsn() is unchanged");
	my $after = pagemapset($node, 'postgres', $L);
	my (@lost, $before_n, $after_n);
	foreach my $path (keys %$before)
	{
		my %now = map { $_ => 1 } @{ ($after->{$path} // { blocks => [] })->{blocks} };
		push @lost, map { "$path block $_" } grep { !$now{$_} } @{ $before->{$path}{blocks} };
	}
	$before_n += scalar @{ $_->{blocks} } foreach values %$before;
	$after_n += scalar @{ $_->{blocks} } foreach values %$after;
	is(scalar @lost, 0, "$label: the $before_n blocks listed before the stop are still listed ($after_n now)")
	  or diag(show_misses(@lost));
	$node->safe_psql('postgres', 'CHECKPOINT');
	my $stats = no_misses_ok($node, $L, "$label: oracle from L passes",
		forks => [ 'main', 'vm', 'init' ],
		baseline => $baseline);
	cmp_ok($stats->{at_or_after}, '>', 50, "$label: the oracle saw blocks changed since L ($stats->{at_or_after})");
}

damaged_chunk_case('first chunk (segment summary) damaged', sub { flip_bytes($data_offset + ($wal ? 100 : 4000), 16) });
damaged_chunk_case('a chunk of slots damaged',
	sub { flip_bytes($data_offset + int(($map_bytes - $data_offset) / 2) + ($wal ? 16 : 100), 16) });
# (The small map of wal capture is one chunk: its CRC is entry 0.)
damaged_chunk_case('an entry of the chunk CRC table damaged', sub { flip_bytes(512 + 4 * ($wal ? 0 : 300), 4) });

# 4. Rejections.
stopped_case('header field damaged', $reason{header_crc}, sub { flip_bytes(64, 1) });
stopped_case('magic damaged', $reason{magic}, sub { flip_bytes(0, 2) });
stopped_case('truncated to half', $reason{size}, sub { set_size(int($map_bytes / 2)) });
stopped_case('empty file', $reason{short}, sub { set_size(0) });
stopped_case(
	'bytes appended',
	$reason{size},
	sub {
		open(my $fh, '>>:raw', ptrack_file($pgdata, 'ptrack.map')) or die $!;
		print $fh "\0" x 8192;
		close $fh;
	});
stopped_case(
	'garbage of the same size',
	$reason{magic},
	sub {
		open(my $fh, '>:raw', ptrack_file($pgdata, 'ptrack.map')) or die $!;
		my $block = join('', map { chr(int(rand(256))) } 1 .. 4096);
		print $fh $block x ($map_bytes / 4096);
		close $fh;
	});

# Another cluster's map, same size and a valid CRC.
my $other = ptrack_node('other_cluster');
$other->start;
$other->safe_psql('postgres', 'CHECKPOINT');
$other->stop;
my $other_header = map_header($other->data_dir);
ok($other_header && $other_header->{crc_ok} && $other_header->{size} == $map_bytes,
	"the other cluster wrote a valid map of the same size ($map_bytes bytes)")
  or diag explain($other_header // 'no ptrack.map');
stopped_case('map of another cluster', $reason{other},
	sub { copy(ptrack_file($other->data_dir, 'ptrack.map'), ptrack_file($pgdata, 'ptrack.map')) or die "copy: $!" });

my $other_major = server_major() == 15 ? 18 : 15;
is(map_header($pgdata)->{server_major}, server_major(), 'ptrack.map records the server\'s major version');
stopped_case("map written under PostgreSQL $other_major", $reason{major},
	sub { set_map_server_major($pgdata, $other_major) });

if ($wal)
{
	# ptrack.map_size sizes only the hooks' map: the small map stays trusted.
	my $old_init = init_lsn($node);
	$node->stop;
	$node->append_conf('postgresql.conf', 'ptrack.map_size = 32MB');
	my $offset = log_position($node);
	$node->start;
	my $log = log_since($node, $offset);
	unlike($log, not_trusted_re(undef), 'wal capture, ptrack.map_size 64MB -> 32MB: the map is not rejected');
	is(init_lsn($node), $old_init, 'wal capture, ptrack.map_size 64MB -> 32MB: ptrack_init_lsn() is unchanged');
}
else
{
	stopped_case('ptrack.map_size 64MB -> 32MB', $reason{map_size},
		sub { $node->append_conf('postgresql.conf', 'ptrack.map_size = 32MB') });
}
is($node->safe_psql('postgres', 'SHOW ptrack.map_size'), '32MB', 'ptrack.map_size is now 32MB');
# (32MB from now on.)

# ptrack.capture switched, and back (a server with the hooks has both
# sources).  The two sources' maps also differ in geometry (wal capture's is
# the smallest), and the reason must name the source, not ptrack.map_size.
if (server_has_hooks())
{
	my ($mode, $other) = $wal ? ('wal', 'hooks') : ('hooks', 'wal');
	# Each source keeps its files in its own folder (the data directory,
	# pg_wal/ptrack): the one that starts judges and removes the other's.
	my $gone = sub {
		my ($label, $from) = @_;
		my @left = grep { -e ptrack_file($pgdata, $_, $from) }
		  qw(ptrack.map ptrack.map.delta ptrack.limits ptrack.sizes ptrack.sizes.new);
		is("@left", '', "$label: the $from source's files are gone from "
			  . ($from eq 'wal' ? 'pg_wal/ptrack' : 'the data directory'));
	};
	stopped_case("ptrack.capture $mode -> $other", $reason{"source_$mode"},
		sub { $node->append_conf('postgresql.conf', "ptrack.capture = $other") }, mode => $other);
	$gone->("ptrack.capture $mode -> $other", $mode);
	stopped_case("ptrack.capture $other -> $mode", $reason{"source_$other"},
		sub { $node->append_conf('postgresql.conf', "ptrack.capture = $mode") });
	$gone->("ptrack.capture $other -> $mode", $other);
	is($node->safe_psql('postgres', 'SHOW ptrack.capture'), $mode, "ptrack.capture is $mode again");
}

stopped_case(
	'pg_checksums --enable',
	$reason{checksums},
	sub {
		$node->command_ok([ 'pg_checksums', '--enable', '-D', $pgdata ],
			'pg_checksums --enable on the stopped cluster');
	});
is($node->safe_psql('postgres', 'SHOW data_checksums'), 'on', 'data checksums are on');

# The delta: its last batch is the flush of the shutdown checkpoint.  Without
# it the map is older than the latest checkpoint.
sub last_batch_is_latest
{
	my ($label) = @_;
	my @batches = delta_batches($pgdata);
	my $controldata = `pg_controldata -D '$pgdata'`;
	my ($redo) = $controldata =~ /^Latest checkpoint's REDO location:\s+(\S+)$/m;
	is(@batches ? $batches[-1]{flush_redo_lsn} : 'no batch', $redo,
		"$label: the last batch of ptrack.map.delta is the flush of the latest checkpoint ($redo)")
	  or diag(scalar(@batches) . ' batches; flush redo LSNs: '
		  . join(' ', map { $_->{flush_redo_lsn} } @batches));
	return @batches;
}
# Hooks: the saved map must be as recent as the latest checkpoint.  With WAL
# capture an older map is not a reason to refuse it: the follower re-reads
# the WAL from the map's covered LSN, and restarts tracking (WARNING) if that
# WAL is gone (t/020_wal_capture.pl).
if (capture_mode() eq 'hooks')
{
	stopped_case(
		'last delta batch cut short',
		$reason{older},
		sub {
			last_batch_is_latest('last delta batch cut short');
			truncate(ptrack_file($pgdata, 'ptrack.map.delta'), (-s ptrack_file($pgdata, 'ptrack.map.delta')) - 8) or die "truncate: $!";
		});
	like(PostgreSQL::Test::Utils::slurp_file($node->logfile),
		qr/LOG:  ptrack ignored the last \d+ bytes of "\Q${\ ptrack_path('ptrack.map.delta')}\E": they do not hold a valid flush/,
		'last delta batch cut short: the log says the delta\'s tail was ignored, next to the refusal');
	stopped_case(
		'delta file removed',
		$reason{older},
		sub {
			last_batch_is_latest('delta file removed');
			unlink(ptrack_file($pgdata, 'ptrack.map.delta')) or die "unlink: $!";
		});
}
stopped_case(
	'ptrack.map removed, its delta left',
	$reason{map_deleted},
	sub {
		ok(-e ptrack_file($pgdata, 'ptrack.map.delta'), 'ptrack.map removed: ptrack.map.delta exists');
		unlink(ptrack_file($pgdata, 'ptrack.map')) or die "unlink: $!";
	});

# ---------------------------------------------------------------------------
# 5. pg_resetwal
# ---------------------------------------------------------------------------

if (capture_mode() eq 'hooks')    # wal capture: t/020_wal_capture.pl
{
	stopped_case(
		'pg_resetwal',
		$reason{older},
		sub {
			$node->command_ok([ 'pg_resetwal', '-D', $pgdata ], 'pg_resetwal on the stopped cluster');
		});
}

# ---------------------------------------------------------------------------
# 6. Restored from a base backup; a standby; pg_rewind
# ---------------------------------------------------------------------------

workload($node);
my $old_init = init_lsn($node);
my $L = $node->lsn('insert');
$node->backup('bk');
my $bk_header = map_header($node->backup_dir . '/bk');
# Hooks: the map is in the data directory, and the backup copies it.  wal
# capture keeps every file of its own in pg_wal/ptrack, whose contents
# pg_basebackup does not copy: the backup carries none.
if ($wal)
{
	ok(!$bk_header, 'pg_basebackup copied no ptrack.map');
	is(join(' ', ptrack_files_outside($node->backup_dir . '/bk')), '',
		'pg_basebackup copied no ptrack file from the data directory');
	ok(!-e $node->backup_dir . '/bk/pg_wal/ptrack', 'pg_basebackup copied nothing of pg_wal/ptrack');
}
else
{
	ok($bk_header && $bk_header->{crc_ok}, 'pg_basebackup copied a valid ptrack.map')
	  or diag explain($bk_header // 'no ptrack.map');
}

my $restored = PostgreSQL::Test::Cluster->new('restored');
$restored->init_from_backup($node, 'bk');
my $offset = log_position($restored);
$restored->start;
check_rejected($restored, $offset, 'restored from pg_basebackup', $reason{backup_label}, $L, $old_init,
	fresh => $wal);
$restored->stop;

my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($node, 'bk', has_streaming => 1);
$offset = log_position($standby);
$standby->start;
is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'), 't', 'the standby is in recovery');
check_rejected($standby, $offset, 'standby from pg_basebackup', $reason{backup_label},
	$L, $old_init, writer => $node, fresh => $wal);

# Promote the standby and make the old primary diverge.  L: the last LSN
# both share (the start of a backup taken before the promotion).
$node->wait_for_catchup($standby, 'replay', $node->lsn('insert'));
$old_init = init_lsn($node);
$L = $node->lsn('insert');
$standby->promote;
$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'the standby was not promoted';
$node->safe_psql('postgres', 'UPDATE pgbench_accounts SET abalance = 7 WHERE aid % 100 = 0');
$standby->safe_psql(
	'postgres', q{
UPDATE pgbench_accounts SET abalance = 8 WHERE aid % 10 = 0;
CREATE TABLE after_promote AS SELECT g AS id, repeat('p', 200) AS pad FROM generate_series(1, 20000) g;
CHECKPOINT;
});
$node->stop;

rewind_from($node, $standby);
ok(-e "$pgdata/backup_label", 'pg_rewind left a backup_label');
$node->enable_streaming($standby);
$offset = log_position($node);
$node->start;
is($node->safe_psql('postgres', 'SELECT pg_is_in_recovery()'), 't', 'the rewound node is a standby');
# ptrack_init_lsn() is set at the first call, from the replay position.
$standby->wait_for_catchup($node, 'replay', $standby->lsn('insert'));
check_rejected($node, $offset, 'rewound with pg_rewind', $reason{backup_label},
	$L, $old_init, writer => $standby);
is( $node->safe_psql('postgres', 'SELECT count(*) FROM after_promote'),
	'20000', 'the rewound node replays the new primary');
$node->stop;
$standby->stop;

# ---------------------------------------------------------------------------
# 7. full_page_writes = off (trusted), wal_level = minimal
# ---------------------------------------------------------------------------

# Clean restart: trusted.  Then work, a checkpoint, more work and an immediate
# stop: not trusted.
sub crash_case
{
	my ($n, $label, $reason) = @_;
	my $npgdata = $n->data_dir;
	$n->start;
	$n->safe_psql('postgres', 'CREATE EXTENSION ptrack');
	$n->command_ok([ 'pgbench', '-i', '-q', '-s', '1', 'postgres' ], "$label: pgbench -i -s 1");
	$n->safe_psql('postgres', 'CHECKPOINT');
	my $init = init_lsn($n);

	my $Lc = $n->lsn('insert');
	my $baseline = block_counts($npgdata);
	workload($n);
	# Big enough (> wal_skip_threshold 2MB) to be synced rather than WAL-logged
	# at commit under wal_level = minimal; and a small one, WAL-logged whole.
	$n->safe_psql(
		'postgres', q{
BEGIN;
CREATE TABLE skipped_big (id int, pad text);
INSERT INTO skipped_big SELECT g, repeat('b', 200) FROM generate_series(1, 40000) g;
CREATE INDEX ON skipped_big (id);
COMMIT;
BEGIN;
CREATE TABLE skipped_small (id int, pad text);
INSERT INTO skipped_small SELECT g, 's' FROM generate_series(1, 100) g;
COMMIT;
});
	my $off = log_position($n);
	$n->restart;
	my $log = log_since($n, $off);
	unlike($log, not_trusted_re(undef), "$label, clean restart: the map is trusted");
	is(init_lsn($n), $init, "$label, clean restart: ptrack_init_lsn() is unchanged");
	$n->safe_psql('postgres', 'CHECKPOINT');
	my $stats = no_misses_ok($n, $Lc, "$label, clean restart: oracle from L passes",
		forks => [ 'main', 'vm', 'init' ],
		baseline => $baseline);
	cmp_ok($stats->{extended}, '>', 500,
		"$label, clean restart: the oracle saw the new tables' blocks ($stats->{extended})");

	workload($n);
	$n->safe_psql('postgres', 'CHECKPOINT');
	my $old = init_lsn($n);
	# L: before changes whose marks the crash loses.
	my $Lx = $n->lsn('insert');
	workload($n);
	my $wal_end = $n->lsn('insert');
	$n->stop('immediate');
	$off = log_position($n);
	$n->start;
	like(log_since($n, $off), qr/database system was interrupted/,
		"$label: the server went through crash recovery");
	my $new = check_rejected($n, $off, "$label, immediate stop", $reason, $Lx, $old);
	# Everything after the end of recovery is tracked; nothing before it can
	# be vouched for.
	cmp_ok(lsn_to_int($new), '>=', lsn_to_int($wal_end),
		"$label, immediate stop: the new ptrack_init_lsn() $new is not before the end of the WAL "
		  . "the crashed server wrote ($wal_end)");
	$n->stop;
}

# full_page_writes = off: the map stays trusted after a crash, in both modes:
# the hooks' startup scan and the WAL follower read the WAL after the saved
# map whatever recovery writes again (shared_buffers = 1MB: pages changed
# after the checkpoint are written, and marked, before the crash; see also
# t/015_crash_windows.pl).
{
	my $fpw = ptrack_node('fpw_off', conf => "autovacuum = off\nfull_page_writes = off\nshared_buffers = 1MB\n");
	$fpw->start;
	$fpw->safe_psql('postgres', 'CREATE EXTENSION ptrack');
	$fpw->command_ok([ 'pgbench', '-i', '-q', '-s', '1', 'postgres' ], 'full_page_writes = off: pgbench -i -s 1');
	$fpw->safe_psql('postgres', 'CHECKPOINT');
	my $init = init_lsn($fpw);
	my $Lx = $fpw->lsn('insert');
	my $baseline = block_counts($fpw->data_dir);
	workload($fpw);
	$fpw->safe_psql('postgres', 'CHECKPOINT');
	workload($fpw);
	$fpw->stop('immediate');
	my $off = log_position($fpw);
	$fpw->start;
	my $log = log_since($fpw, $off);
	like($log, qr/database system was interrupted/, 'full_page_writes = off: the server went through crash recovery');
	unlike($log, not_trusted_re(undef), 'full_page_writes = off: the map is trusted after the crash');
	is(init_lsn($fpw), $init, 'full_page_writes = off: ptrack_init_lsn() is unchanged');
	$fpw->safe_psql('postgres', 'CHECKPOINT');
	no_misses_ok($fpw, $Lx, 'full_page_writes = off: oracle from L passes after the crash',
		baseline => $baseline);
	$fpw->stop;
}

if (capture_mode() eq 'hooks')
{
	my $minimal = ptrack_node('wal_minimal', wal_level => 'minimal', conf => "autovacuum = off\n");
	crash_case($minimal, 'wal_level = minimal', $reason{minimal});
}

# ---------------------------------------------------------------------------
# 8. A crash before any checkpoint saved the fresh map that replaced a
#    rejected one (hooks: the fresh map is first saved at a checkpoint; the
#    WAL follower saves it at once).  The crash restart finds no map and
#    starts afresh again; ptrack_status() must still say why tracking
#    restarted.  A soak (15 hooks, seed 3004) met this after three crashes in
#    11 s: a FULL backup forced, and ptrack_status() gave no reason.
# ---------------------------------------------------------------------------
if (capture_mode() eq 'hooks')
{
	my $n = ptrack_node('crash_after_rejection', conf => "autovacuum = off\ncheckpoint_timeout = 1h\nrestart_after_crash = on\n");
	$n->start;
	$n->safe_psql('postgres', 'CREATE EXTENSION ptrack');
	$n->safe_psql('postgres', 'CREATE TABLE t AS SELECT g FROM generate_series(1, 1000) g');
	$n->safe_psql('postgres', 'CHECKPOINT');
	$n->stop;
	my $file = ptrack_file($n->data_dir, 'ptrack.map');
	open(my $fh, '+<:raw', $file) or die "$file: $!";
	seek($fh, 64, 0) or die "seek: $!";
	print $fh "\xFF";
	close $fh or die "close: $!";
	my $off = log_position($n);
	$n->start;
	my $status = sub {
		return $n->safe_psql('postgres', 'SELECT restarts, last_restart_reason FROM ptrack_status()');
	};
	like($status->(), qr/^1\|the map file was not trusted at startup because \Q$reason{header_crc}\E$/,
		'crash after a rejection: at the start, ptrack_status() says why tracking restarted');
	ok(!-e $file, 'crash after a rejection: the rejected map is gone and no checkpoint saved a new one');
	my $checkpointer = $n->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'");
	kill('KILL', $checkpointer) or die "kill $checkpointer: $!";
	$n->poll_query_until('postgres', "SELECT pid <> $checkpointer FROM pg_stat_activity WHERE backend_type = 'checkpointer'")
	  or die 'the server did not come back after the checkpointer was killed';
	like(log_since($n, $off), qr/checkpointer process \(PID $checkpointer\) was terminated by signal 9/,
		'crash after a rejection: the checkpointer was killed, a crash restart followed');
	like($status->(),
		qr/^1\|the map file was not trusted at the start of .+ because \Q$reason{header_crc}\E, and the server crashed before a checkpoint saved a new one$/,
		'crash after a rejection: after the crash restart, ptrack_status() still says why tracking restarted');
	# Once a checkpoint saved the fresh map, the next crash restart loads it: no restart to report.
	$n->safe_psql('postgres', 'CHECKPOINT');
	$checkpointer = $n->safe_psql('postgres', "SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'");
	kill('KILL', $checkpointer) or die "kill $checkpointer: $!";
	$n->poll_query_until('postgres', "SELECT pid <> $checkpointer FROM pg_stat_activity WHERE backend_type = 'checkpointer'")
	  or die 'the server did not come back after the checkpointer was killed again';
	is($status->(), '0|', 'crash after a rejection: a crash after a checkpoint saved a map reports no restart');
	$n->stop;
}
else
{
	# wal_level = minimal: the WAL does not show every write; refuse to start.
	my $minimal = ptrack_node('wal_minimal', wal_level => 'minimal', conf => "autovacuum = off\n");
	my $off = log_position($minimal);
	ok(!$minimal->start(fail_ok => 1), 'wal_level = minimal with wal capture: the server refuses to start');
	like(log_since($minimal, $off),
		qr/FATAL:  ptrack captures changes from the WAL on this server, which needs wal_level "replica" or "logical"/,
		'wal_level = minimal with wal capture: a FATAL says why');
}

done_testing();
