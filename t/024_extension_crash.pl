# Copyright (c) the ptrack authors
#
# 024_extension_crash.pl -- blocks that relation extension added after the
# last map save are listed after a crash (docs/design.md section 4.8).
#
# A heap extended under contention (several backends waiting for the
# relation extension lock) gets many zero pages at once
# (RelationAddExtraBlocks() in PostgreSQL's hio.c); each one has no WAL
# record until a tuple goes into it, and some never do before the crash.
# The hooks marked them in memory only; recovery and the startup scan see no
# WAL for them.  A backup tool must still be told: where the file was
# truncated since the previous backup (VACUUM cuts empty pages at the end),
# the restore would otherwise bring back that backup's old page, rows that
# were deleted since included.  So the hooks source saves the relation file
# sizes with each map and, after a crash, marks what the files gained since;
# the wal source's follower watches the files the same way.
#
# The scenario makes that case: a table truncated by VACUUM after L, then
# regrown by eight concurrent inserters of wide rows, cut off by an immediate
# stop with no checkpoint after L.  The oracle (PtrackOracle::missed_blocks,
# from the files: page LSNs, and sizes at L, the table's being its length
# after the truncation) must find every block changed or added since L listed, and the premise is checked: zero pages with no WAL exist
# past the old end of the table, else the round proves nothing and is run
# again.  Then the refusal side (hooks): after a crash, a map whose sizes file
# is gone is not trusted, with the reason in the log.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use PtrackCluster qw(capture_mode ptrack_node log_position log_since not_trusted_re init_lsn);
use PtrackOracle qw(block_counts missed_blocks show_misses page_lsns);

my $mode = capture_mode();

# A started node with ptrack and the table ext_t; no checkpoint unless asked for.
sub ext_node
{
	my ($name, %opts) = @_;
	my $n = ptrack_node($name, %opts,
		conf => "autovacuum = off\ncheckpoint_timeout = 1h\nmax_wal_size = 1GB\nmax_connections = 30\n");
	$n->start;
	$n->safe_psql('postgres', 'CREATE EXTENSION ptrack');
	$n->safe_psql('postgres',
		"CREATE TABLE ext_t (id bigint, pad text) WITH (fillfactor = 100);"
		  . "ALTER TABLE ext_t ALTER COLUMN pad SET STORAGE PLAIN;");
	return $n;
}

my $node = ext_node('extension_crash');

my $work = $node->basedir . '/extension_crash';
mkdir $work or die "mkdir $work: $!";
my $script = "$work/insert.sql";
open(my $fh, '>', $script) or die "open $script: $!";
# ~1.9 kB a row: four rows fill a page, so the inserters extend the table often.
print $fh "INSERT INTO ext_t VALUES (:client_id, repeat('e', 1900));\n";
close $fh;

my $init = init_lsn($node);
my $file = $node->safe_psql('postgres', "SELECT pg_relation_filepath('ext_t')");    # kept: no rewrite below
my $premise_met = 0;
for my $round (1 .. 5)
{
	# The previous backup's view: a long table, then emptied and truncated.
	$node->safe_psql('postgres',
		"INSERT INTO ext_t SELECT g, repeat('o', 1900) FROM generate_series(1, 2000) g");
	$node->safe_psql('postgres', 'CHECKPOINT');
	my $L = $node->lsn('insert');
	my $baseline = block_counts($node->data_dir);
	my $had = $baseline->{$file} // 0;
	$node->safe_psql('postgres', 'DELETE FROM ext_t');
	$node->safe_psql('postgres', 'VACUUM ext_t');
	my $cut = $node->safe_psql('postgres', "SELECT pg_relation_size('ext_t') / 8192");
	# Every block from the cut on is added after L, whatever the file held at L.
	$baseline->{$file} = $cut;
	$node->safe_psql('postgres', 'CHECKPOINT');    # the map and the sizes are saved here

	# Regrowth under contention, cut off by a crash before any checkpoint:
	# the extension just before it has pages that no tuple reached yet.
	my ($out, $err) = ('', '');
	my $run = IPC::Run::start(
		[ 'pgbench', '-n', '-c', '8', '-j', '2', '-T', '60', '-f', $script, $node->connstr('postgres') ],
		'>', \$out, '2>', \$err);
	my $grown = 0;
	my $deadline = time() + 30;
	while (time() < $deadline)
	{
		$grown = $node->safe_psql('postgres', "SELECT pg_relation_size('ext_t') / 8192");
		last if $grown >= $cut + 200;
		select(undef, undef, undef, 0.1);
	}
	note "round $round: ext_t had $had blocks at L $L, $cut after VACUUM, $grown when the server is stopped";
	my $off = log_position($node);
	$node->stop('immediate');
	$run->kill_kill;
	eval { $run->finish };
	$node->start;

	my $log = log_since($node, $off);
	like($log, qr/database system was interrupted/, "round $round: the server went through crash recovery");
	unlike($log, not_trusted_re(), "round $round: the map is trusted after the crash")
	  or diag(join("\n", grep { /ptrack/ } split /\n/, $log));
	is(init_lsn($node), $init, "round $round: ptrack_init_lsn() is unchanged");
	like($log, qr/LOG:  ptrack marked \d+ blocks that relation files gained since the map was saved/,
		"round $round: the startup looked at the files' growth since the save")
	  if $mode eq 'hooks';

	# Before any checkpoint: the checkpointer's first save after the restart
	# would find the growth again (it compares with the same sizes).
	my %stats;
	my @misses = missed_blocks($node, $L, baseline => $baseline, stats => \%stats);
	is(scalar @misses, 0, "round $round: every block changed or added since $L is listed")
	  or diag(show_misses(@misses));

	# Replay wrote the pages that got tuples; the zero pages stay as they were.
	$node->safe_psql('postgres', 'CHECKPOINT');
	my @lsns = page_lsns($node->data_dir, $file);
	my @zero = grep { $_ >= $cut && $lsns[$_] == 0 } 0 .. $#lsns;
	note "round $round: ext_t has " . scalar(@lsns) . ' blocks, ' . scalar(@zero)
	  . " of them past block $cut never WAL-logged (first: @zero[0 .. ($#zero < 4 ? $#zero : 4)])";
	if (@zero)
	{
		$premise_met = 1;
		last;
	}
}
ok($premise_met, 'the inserters left zero pages with no WAL past the truncated end of ext_t (the case tested)');

# ---- a standby: pages replay added, then a crash ----------------------------------
#
# A standby gets no bulk extension, but replay adds zero pages to fill a file
# up to a block a record names (XLogReadBufferExtended()), and a primary's
# bulk extension hands its pages out in no particular order, so a record may
# name a page past the standby's end.  After a crash, replay starts at the
# last restartpoint: the file is long already, nothing is extended again and
# no record names the fill pages.  A standby has no end-of-recovery
# checkpoint, whose save would look at the files; so the oracle runs on the
# standby right after it is started again, before any restartpoint.

my $primary = ext_node('ext_primary', allows_streaming => 1);
$primary->backup('for_standby');
my $standby = PostgreSQL::Test::Cluster->new('ext_standby');
$standby->init_from_backup($primary, 'for_standby', has_streaming => 1);
$standby->append_conf('postgresql.conf', "checkpoint_timeout = 1h\nmax_wal_size = 1GB\n");
$standby->start;
$primary->wait_for_catchup($standby);
my $sb_init = init_lsn($standby);
my $sb_file = $primary->safe_psql('postgres', "SELECT pg_relation_filepath('ext_t')");
$premise_met = 0;
for my $round (1 .. 5)
{
	$primary->safe_psql('postgres',
		"INSERT INTO ext_t SELECT g, repeat('o', 1900) FROM generate_series(1, 2000) g");
	$primary->safe_psql('postgres', 'CHECKPOINT');    # a standby restartpoint needs a checkpoint record
	$primary->wait_for_catchup($standby);
	$standby->safe_psql('postgres', 'CHECKPOINT');
	my $L = $standby->safe_psql('postgres', 'SELECT redo_lsn FROM pg_control_checkpoint()');
	my $baseline = block_counts($standby->data_dir);
	$primary->safe_psql('postgres', 'DELETE FROM ext_t');
	$primary->safe_psql('postgres', 'VACUUM ext_t');
	$primary->wait_for_catchup($standby);
	my $cut = $standby->safe_psql('postgres', "SELECT pg_relation_size('ext_t') / 8192");
	$baseline->{$sb_file} = $cut;
	$primary->safe_psql('postgres', 'CHECKPOINT');
	$primary->wait_for_catchup($standby);
	$standby->safe_psql('postgres', 'CHECKPOINT');    # a restartpoint: the map and the sizes are saved

	$primary->command_ok(
		[ 'pgbench', '-n', '-c', '8', '-j', '2', '-T', '3', '-f', $script, 'postgres' ],
		"standby round $round: eight inserters regrow ext_t on the primary");
	$primary->wait_for_catchup($standby);
	my $off = log_position($standby);
	$standby->stop('immediate');
	$standby->start;
	$primary->wait_for_catchup($standby);

	my $log = log_since($standby, $off);
	unlike($log, not_trusted_re(), "standby round $round: the map is trusted after the crash")
	  or diag(join("\n", grep { /ptrack/ } split /\n/, $log));
	is(init_lsn($standby), $sb_init, "standby round $round: ptrack_init_lsn() is unchanged");
	my @misses = missed_blocks($standby, $L, baseline => $baseline);
	is(scalar @misses, 0, "standby round $round: every block changed or added since $L is listed")
	  or diag(show_misses(@misses));

	$primary->safe_psql('postgres', 'CHECKPOINT');    # then a restartpoint writes what replay changed
	$primary->wait_for_catchup($standby);
	$standby->safe_psql('postgres', 'CHECKPOINT');
	my @lsns = page_lsns($standby->data_dir, $sb_file);
	my @zero = grep { $_ >= $cut && $lsns[$_] == 0 } 0 .. $#lsns;
	note "standby round $round: ext_t has " . scalar(@lsns) . " blocks on the standby (cut to $cut after L $L), "
	  . scalar(@zero) . " never WAL-logged (first: @zero[0 .. ($#zero < 4 ? $#zero : 4)])";
	if (@zero)
	{
		$premise_met = 1;
		last;
	}
}
ok($premise_met, 'replay left zero fill pages on the standby past the truncated end of ext_t (the case tested)');
$standby->stop;
$primary->stop;

# ---- hooks: a crashed map without its sizes is not trusted ----------------------

if ($mode eq 'hooks')
{
	$node->safe_psql('postgres', 'CHECKPOINT');
	$node->safe_psql('postgres', "INSERT INTO ext_t SELECT g, 'x' FROM generate_series(1, 1000) g");
	my $off = log_position($node);
	$node->stop('immediate');
	unlink($node->data_dir . "/$_") for qw(ptrack.sizes ptrack.sizes.new);
	$node->start;
	my $log = log_since($node, $off);
	like($log, qr/WARNING:  ptrack map file "ptrack.map" is not trusted because the relation file sizes saved with it \(ptrack.sizes\) are missing or damaged/,
		'crash without ptrack.sizes: the map is refused, and the log says why');
	my $fresh = init_lsn($node);
	cmp_ok(PtrackOracle::lsn_to_int($fresh), '>', PtrackOracle::lsn_to_int($init),
		"crash without ptrack.sizes: ptrack_init_lsn() moved forward ($init -> $fresh)");
	my ($ret, $out, $err) = $node->psql('postgres', "SELECT count(*) FROM ptrack_get_pagemapset('$init')");
	isnt($ret, 0, 'crash without ptrack.sizes: a pagemapset from before the crash is refused')
	  and like($err, qr/ptrack/, 'crash without ptrack.sizes: the error is ptrack\'s') ;
}

$node->stop;
done_testing();
