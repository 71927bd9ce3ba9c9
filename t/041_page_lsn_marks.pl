# Copyright (c) the ptrack authors
#
# 041_page_lsn_marks.pl -- the hooks mark a page written by the buffer
# manager with its own LSN only where every change that matters moves that
# LSN (docs/design.md section 3.2, src/pg/capture/hooks/capture_hooks.cpp).
#
# The change that does not move it: without data checksums and without
# wal_log_hints, VACUUM sets PD_ALL_VISIBLE on a heap page and the page's bit
# in the visibility map, and WAL-logs the VM page only
# (visibilitymap_set()).  The heap page's LSN stays before the backup's
# start.  If the hooks marked that page with its LSN, an incremental backup
# would leave it out, and the restored cluster would hold the VM bit without
# PD_ALL_VISIBLE: a DELETE or an INSERT there does not clear the VM bit
# (heap_delete() and heap_insert() test PD_ALL_VISIBLE), and an index-only
# scan then returns deleted or aborted rows.
#
# Each case (without checksums, then with them; wal_log_hints off, which
# allows_streaming would turn on): a table filled before a full backup (L0),
# a restart, VACUUM (all pages all-visible), CHECKPOINT, an incremental
# backup since L0 (t/lib/PtrackBackup.pm), a restore of both, and on the
# restored cluster:
#   - no page whose VM bit is set while PD_ALL_VISIBLE is not (read with
#     pageinspect, which every build has);
#   - after a DELETE of one row per page and an aborted INSERT, no VM bit is
#     left set, and an index-only scan counts what a sequential scan counts;
#   - every row equals the source's (compare_clusters, amcheck).
# Then what the rule buys, where it applies: the pages an UPDATE dirtied just
# before a backup's start, written by that backup's own checkpoint, are
# listed since its start LSN with the insert position (no checksums; or a
# server whose core patch passes no pages to the hook) and not with the page
# LSN (checksums, hooks).  The wal source lists none of them.
#
# Last, with checksums (hooks only): a write that bypasses shared buffers
# keeps the insert position.  A btree CREATE INDEX WAL-logs a page and then
# writes it with skipFsync; its backend is held in gdb at that write (md.c's
# write function, skipFsync true), L is taken in the next WAL segment, and
# the page written after L must be listed since L although its page LSN lies
# before L.
#
# Checked by breaking the rule: with the page LSN used without checksums
# (XLogHintBitIsNeeded() left out of capture_hooks.cpp's test), the first
# case fails the first two checks of the restored cluster (every page of t
# has its VM bit without PD_ALL_VISIBLE; the index-only scan counts the
# deleted rows, and the DELETE leaves the VM bits set) and lists none of u's
# pages; compare_clusters still passes.  With the page LSN used for writes
# with skipFsync true, the last check fails.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use PtrackBackup qw(full_backup incremental_backup restore start_restored);
use PtrackCluster qw(capture_mode new_node ptrack_node server_has_hooks server_major);
use PtrackGdb qw(gdb_session gdb_wait gdb_output gdb_release gdb_finish);
use PtrackOracle qw(pagemapset);
use PtrackVerify qw(compare_clusters);

my $mode = capture_mode();

# Does the server's core patch pass the written pages to ptrack (mdwritev_hook)?
my $bindir = `pg_config --bindir`;
chomp $bindir;
my $page_hook = server_has_hooks()
  && `nm -D --defined-only '$bindir/postgres' 2>/dev/null` =~ /\bmdwritev_hook\b/;
note("capture mode $mode; the core patch passes the pages: " . ($page_hook ? 'yes' : 'no'));

my $rows = 4000;    # fillfactor 50: about 30 rows per page, 140 pages

# The blocks of table t whose visibility-map bit (vm) and page flag
# PD_ALL_VISIBLE (pd) satisfy $cond: their count, or with $list their numbers.
# The VM page: 2 bits per heap block after the 24-byte page header, the
# all-visible bit first (visibilitymap.c).
sub visibility_sql
{
	my ($cond, $list) = @_;
	return ($list ? "SELECT coalesce(string_agg(b::text, ' ' ORDER BY b), '')" : 'SELECT count(*)')
	  . " FROM (SELECT b, (get_byte(get_raw_page('t', 'vm', 0), 24 + (b / 4)::int) >> (b % 4 * 2)::int) & 1 = 1 AS vm,"
	  . " (SELECT flags FROM page_header(get_raw_page('t', b))) & 4 <> 0 AS pd"
	  . " FROM generate_series(0, pg_relation_size('t') / 8192 - 1) b) s WHERE $cond";
}

for my $checksums (0, 1)
{
	my $tag = $checksums ? 'checksums' : 'nochecksums';
	my $node = ptrack_node("pagelsn_$tag",
		checksums => $checksums,
		allows_streaming => 1,
		conf => "autovacuum = off\ncheckpoint_timeout = 1h\nmax_wal_size = 1GB\nwal_log_hints = off\n");
	$node->start;
	is($node->safe_psql('postgres', 'SHOW data_checksums'),
		$checksums ? 'on' : 'off', "$tag: data_checksums");
	is($node->safe_psql('postgres', 'SHOW wal_log_hints'), 'off', "$tag: wal_log_hints is off");
	$node->safe_psql('postgres', 'CREATE EXTENSION ptrack');
	$node->safe_psql('postgres', 'CREATE EXTENSION pageinspect');
	$node->safe_psql('postgres',
		"CREATE TABLE t (id int PRIMARY KEY, pad text) WITH (fillfactor = 50);"
		  . "INSERT INTO t SELECT g, repeat('x', 100) FROM generate_series(1, $rows) g;"
		  . "CREATE TABLE u (id int PRIMARY KEY, n int);"
		  . "INSERT INTO u SELECT g, 0 FROM generate_series(1, 20000) g;"
		  . 'VACUUM u');
	$node->safe_psql('postgres', 'CHECKPOINT');

	my $backups = $node->basedir . '/backups';
	mkdir $backups or die "mkdir $backups: $!";
	my $l0 = full_backup($node, "$backups/full");

	# A restart: no map save of this run has happened yet when the CHECKPOINT
	# below writes t's pages, so nothing raises their marks above their
	# LSNs (the mark floor, capture.h, starts at 0 in each run).
	$node->restart;

	# VACUUM: PD_ALL_VISIBLE on every heap page of t, its VM bits.  Without
	# checksums the heap pages keep their LSN from before L0.
	$node->safe_psql('postgres', 'VACUUM t');
	my $heap_pages = $node->safe_psql('postgres', visibility_sql('vm AND pd'));
	my $t_pages = $node->safe_psql('postgres', "SELECT pg_relation_size('t') / 8192");
	is($heap_pages, $t_pages, "$tag: VACUUM made all $t_pages pages of t all-visible");
	$node->safe_psql('postgres', 'CHECKPOINT');

	my $st = incremental_backup($node, "$backups/incr", $l0, "$backups/full");
	is($st->{unmarked_new_blocks}, 0, "$tag: every block added since L0 is listed")
	  or diag(join("\n", @{ $st->{unmarked_examples} }));

	my $restored = new_node("pagelsn_${tag}_restored");
	restore("$backups/full", "$backups/incr", $restored->data_dir);
	start_restored($restored);

	# 1. The VM and the heap pages agree.
	my $stale = $restored->safe_psql('postgres', visibility_sql('vm AND NOT pd', 'list'));
	is($stale, '', "$tag: no page of t has its VM bit set without PD_ALL_VISIBLE after the restore")
	  or diag("blocks with a stale VM bit: $stale");

	# 2. One row per page deleted, one insert aborted: each must clear its
	# page's VM bit, or index-only scans return those rows.
	$restored->safe_psql('postgres',
		"DELETE FROM t WHERE id IN (SELECT min(id) FROM t GROUP BY (ctid::text::point)[0]);"
		  . "BEGIN; INSERT INTO t VALUES ($rows + 1, 'aborted'); ROLLBACK;");
	my $seq = $restored->safe_psql('postgres',
		'SET enable_indexscan = off; SET enable_bitmapscan = off; SELECT count(*) FROM t WHERE id > 0');
	my $plan = $restored->safe_psql('postgres',
		'SET enable_seqscan = off; SET enable_bitmapscan = off; '
		  . 'EXPLAIN (COSTS OFF) SELECT count(id) FROM t WHERE id > 0');
	like($plan, qr/Index Only Scan/, "$tag: the count below is an index-only scan");
	my $ios = $restored->safe_psql('postgres',
		'SET enable_seqscan = off; SET enable_bitmapscan = off; SELECT count(id) FROM t WHERE id > 0');
	is($ios, $seq, "$tag: the index-only scan counts the rows a sequential scan counts ($seq)");
	my $vm_left = $restored->safe_psql('postgres', visibility_sql('vm', 'list'));
	is($vm_left, '', "$tag: the DELETE cleared the VM bit of every page of t")
	  or diag("blocks whose VM bit is still set: $vm_left");

	# 3. The rest of the cluster.
	$node->safe_psql('postgres',
		"DELETE FROM t WHERE id IN (SELECT min(id) FROM t GROUP BY (ctid::text::point)[0]);");
	my @problems = compare_clusters($node, $restored);
	is_deeply(\@problems, [], "$tag: restored cluster equals the source, amcheck clean")
	  or diag(join("\n", @problems));
	$restored->stop;

	# What the rule buys: u's pages dirtied before a backup's start and
	# written by its checkpoint.  The WAL switch puts the start LSN in a new
	# segment, past the 64 KB granule of the UPDATE's last record.
	$node->safe_psql('postgres', 'UPDATE u SET n = n + 1');
	my $u_path = $node->safe_psql('postgres', "SELECT pg_relation_filepath('u')");
	my $u_dirty = $node->safe_psql('postgres', "SELECT pg_relation_size('u') / 8192");
	$node->safe_psql('postgres', 'SELECT pg_switch_wal()');
	my $l1 = full_backup($node, "$backups/full2");
	my $listed = pagemapset($node, 'postgres', $l1);
	my $u_listed = $listed->{$u_path} ? scalar @{ $listed->{$u_path}{blocks} } : 0;
	my $marks_page_lsn = $mode eq 'wal' || ($checksums && $page_hook);
	if ($marks_page_lsn)
	{
		is($u_listed, 0,
			"$tag: none of u's $u_dirty pages written by the backup's checkpoint is listed since its start $l1");
	}
	else
	{
		# All of them unless the background writer wrote some before $l1.
		cmp_ok($u_listed, '>', $u_dirty / 2,
			"$tag: u's pages written by the backup's checkpoint are listed since its start $l1 "
			  . "(marked with the insert position): $u_listed of $u_dirty");
	}
	bypass_write_case($node) if $checksums && $mode eq 'hooks' && $page_hook;
	$node->stop;
}

# The last case of the header: a CREATE INDEX backend held in gdb at its
# first write with skipFsync (after the page's WAL record), L taken there.
sub bypass_write_case
{
	my ($node) = @_;
	my $write_fn = server_major() >= 17 ? 'mdwritev' : 'mdwrite';
	$node->safe_psql('postgres',
		"CREATE TABLE idx_src AS SELECT g AS id, md5(g::text) AS key FROM generate_series(1, 50000) g;"
		  . 'CHECKPOINT');

	my $flags = $node->basedir . '/gdb_flags';
	my $g = gdb_session($node, $flags,
		"break $write_fn if skipFsync",
		'continue',
		'printf "held block %u\\n", blocknum',
		"shell touch $flags/HIT",
		"shell while [ ! -e $flags/RELEASE ]; do sleep 0.1; done");
	$g->{session}->query_until(qr//, "CREATE INDEX idx_key ON idx_src (key);\nSELECT 'done';\n");
	gdb_wait($g, 'HIT');
	my ($held) = gdb_output($g) =~ /held block (\d+)/
	  or die "no block number from gdb:\n" . gdb_output($g);
	# L in the next WAL segment: past the held page's LSN and the 64 KB granule it is stored in.
	$node->safe_psql('postgres', 'SELECT pg_switch_wal()');
	my $L = $node->lsn('insert');
	gdb_release($g, 'RELEASE');
	gdb_finish($g);
	$g->{session}->query_safe('SELECT 1');
	$g->{session}->quit;

	my $path = $node->safe_psql('postgres', "SELECT pg_relation_filepath('idx_key')");
	my $page_lsn =
	  $node->safe_psql('postgres', "SELECT lsn FROM page_header(get_raw_page('idx_key', $held))");
	cmp_ok(PtrackOracle::lsn_to_int($page_lsn), '<', PtrackOracle::lsn_to_int($L),
		"bypass write: block $held of idx_key, written after $L, has the older page LSN $page_lsn");
	my $map = pagemapset($node, 'postgres', $L);
	my $blocks = $map->{$path} ? $map->{$path}{blocks} : [];
	ok((grep { $_ == $held } @$blocks),
		"bypass write: block $held of $path, written with skipFsync after $L, is listed since $L")
	  or diag("pagemapset($L) lists for $path: " . (@$blocks ? "@$blocks" : 'nothing'));
	return;
}

done_testing();
