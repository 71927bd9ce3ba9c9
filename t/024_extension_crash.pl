# Copyright (c) the ptrack authors
#
# 024_extension_crash.pl -- blocks that relation extension added after the
# last map save are listed after a crash (docs/design.md section 3.7).
#
# Relation extension writes zero pages that get a WAL record only when first
# used.  The hooks mark them in mdextend(), in memory; a crash before the
# next save loses those marks, and recovery and the startup scan see no WAL
# for the pages.  A backup tool must still be told: where the file was
# truncated since the previous backup (VACUUM cuts empty pages at the end),
# the restore would otherwise bring back that backup's old page, rows that
# were deleted since included.  So the hooks source saves the relation file
# sizes with each map and, after a crash, marks what the files gained since;
# the wal source's follower watches the files the same way.
#
# Each case: a checkpoint (the map and the sizes saved), L, growth, an
# immediate stop with no checkpoint after L, a start; then, before any
# checkpoint, the oracle (PtrackOracle::missed_blocks, from the files: page
# LSNs, and sizes at L) must find every block changed or added since L
# listed.  Cases:
#   1. a hash index grown across a split point: _hash_alloc_buckets()
#      extends the file to the split point's last bucket page and leaves the
#      pages before it unwritten (zero, no WAL until a split uses them):
#      deterministic, and the premise (zero pages past the size at L after
#      recovery) is asserted;
#   2. the data-loss shape: a heap truncated by VACUUM after L, regrown by
#      eight concurrent inserters (RelationAddExtraBlocks() extends by many
#      pages under contention), cut off by the crash; the table's size "at
#      L" is its length after the truncation.  Contention is not
#      deterministic: the zero pages it left are counted, not required;
#   3. a standby: replay fills a file with zero pages up to a block a record
#      names (XLogReadBufferExtended()): the hash index of case 1 grown on
#      the primary; a standby has no end-of-recovery checkpoint, whose save
#      would look at the files, so only the startup's size walk finds them;
#      then the same after a clean shutdown of the standby that saved
#      nothing (no checkpoint record replayed since its last restartpoint,
#      so no shutdown restartpoint);
#   4. a database directory the walk cannot read: checkpoints go on (a
#      WARNING says why the save was skipped);
#   5. (hooks) after a crash, a map whose sizes file is gone is refused,
#      with the reason in the log.

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
use PtrackUnits qw(BLCKSZ);

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

my $init = init_lsn($node);

# Crashes $n (stop -m immediate, start) and checks what every case needs;
# returns the log since $off.
sub crash_restart
{
	my ($n, $label, $want_init) = @_;
	my $off = log_position($n);
	$n->stop('immediate');
	$n->start;
	my $log = log_since($n, $off);
	unlike($log, not_trusted_re(), "$label: the map is trusted after the crash")
	  or diag(join("\n", grep { /ptrack/ } split /\n/, $log));
	is(init_lsn($n), $want_init, "$label: ptrack_init_lsn() is unchanged");
	return $log;
}

# The blocks of $path at or after $from whose page LSN is 0 (never written
# with WAL), after a checkpoint or restartpoint wrote what replay changed.
sub zero_pages
{
	my ($n, $path, $from) = @_;
	my @lsns = page_lsns($n->data_dir, $path);
	return grep { $_ >= $from && $lsns[$_] == 0 } 0 .. $#lsns;
}

sub first_few { my @z = @_; return join(' ', @z[ 0 .. ($#z < 4 ? $#z : 4) ]); }

# The checks after a crash or restart of $n: the oracle from $L (before any
# checkpoint), then $write_out->() (a checkpoint or restartpoint that writes
# what replay changed), then the premise: $file, $had blocks long at L, has
# pages with no WAL past them.
sub listed_and_premise
{
	my ($n, $label, $L, $baseline, $file, $write_out) = @_;
	my @misses = missed_blocks($n, $L, baseline => $baseline);
	is(scalar @misses, 0, "$label: every block changed or added since $L is listed")
	  or diag(show_misses(@misses));
	$write_out->();
	my $had = $baseline->{$file};
	my @zero = zero_pages($n, $file, $had);
	cmp_ok(scalar @zero, '>', 0,
		"$label: $file had $had blocks at L; past them, pages with no WAL (the case tested): " . first_few(@zero));
}

# ---- 1. a hash index grown across a split point -------------------------------

$node->safe_psql('postgres',
	'CREATE TABLE hx (id int); CREATE INDEX hx_idx ON hx USING hash (id);'
	  . 'INSERT INTO hx SELECT g FROM generate_series(1, 20000) g;');
$node->safe_psql('postgres', 'CHECKPOINT');    # the map and the sizes are saved here
my $L = $node->lsn('insert');
my $baseline = block_counts($node->data_dir);
my $hx_idx = $node->safe_psql('postgres', "SELECT pg_relation_filepath('hx_idx')");
$node->safe_psql('postgres', 'INSERT INTO hx SELECT g FROM generate_series(1, 30000) g');
my $log = crash_restart($node, 'hash index', $init);
like($log, qr/database system was interrupted/, 'hash index: the server went through crash recovery');
like($log, qr/LOG:  ptrack marked [1-9]\d* blocks that relation files gained since the map was saved/,
	'hash index: the startup marked what the files gained since the save')
  if $mode eq 'hooks';
listed_and_premise($node, 'hash index', $L, $baseline, $hx_idx, sub { $node->safe_psql('postgres', 'CHECKPOINT') });

# ---- 2. a truncated heap regrown under contention --------------------------------

my $work = $node->basedir . '/extension_crash';
mkdir $work or die "mkdir $work: $!";
my $script = "$work/insert.sql";
open(my $fh, '>', $script) or die "open $script: $!";
# ~1.9 kB a row: four rows fill a page, so the inserters extend the table often.
print $fh "INSERT INTO ext_t VALUES (:client_id, repeat('e', 1900));\n";
close $fh;

my $file = $node->safe_psql('postgres', "SELECT pg_relation_filepath('ext_t')");    # kept: no rewrite below
my $zero_seen = 0;
for my $round (1 .. 2)
{
	# The previous backup's view: a long table, then emptied and truncated.
	$node->safe_psql('postgres',
		"INSERT INTO ext_t SELECT g, repeat('o', 1900) FROM generate_series(1, 2000) g");
	$node->safe_psql('postgres', 'CHECKPOINT');
	$L = $node->lsn('insert');
	$baseline = block_counts($node->data_dir);
	my $had = $baseline->{$file} // 0;
	$node->safe_psql('postgres', 'DELETE FROM ext_t');
	$node->safe_psql('postgres', 'VACUUM ext_t');
	my $cut = $node->safe_psql('postgres', "SELECT pg_relation_size('ext_t') / " . BLCKSZ);
	# Every block from the cut on is added after L, whatever the file held at L.
	$baseline->{$file} = $cut;
	$node->safe_psql('postgres', 'CHECKPOINT');    # the map and the sizes are saved here

	# Regrowth under contention, cut off by the crash.
	my ($out, $err) = ('', '');
	my $run = IPC::Run::start(
		[ 'pgbench', '-n', '-c', '8', '-j', '2', '-T', '60', '-f', $script, $node->connstr('postgres') ],
		'>', \$out, '2>', \$err);
	my $grown = 0;
	my $deadline = time() + 30;
	while (time() < $deadline)
	{
		$grown = $node->safe_psql('postgres', "SELECT pg_relation_size('ext_t') / " . BLCKSZ);
		last if $grown >= $cut + 200;
		select(undef, undef, undef, 0.1);
	}
	note "heap round $round: ext_t had $had blocks at L $L, $cut after VACUUM, $grown when the server is stopped";
	my $off = log_position($node);
	$node->stop('immediate');
	$run->kill_kill;
	eval { $run->finish };
	$node->start;
	$log = log_since($node, $off);
	unlike($log, not_trusted_re(), "heap round $round: the map is trusted after the crash");
	is(init_lsn($node), $init, "heap round $round: ptrack_init_lsn() is unchanged");
	my @misses = missed_blocks($node, $L, baseline => $baseline);
	is(scalar @misses, 0, "heap round $round: every block changed or added since $L is listed")
	  or diag(show_misses(@misses));
	$node->safe_psql('postgres', 'CHECKPOINT');
	my @zero = zero_pages($node, $file, $cut);
	$zero_seen += @zero;
	note "heap round $round: past block $cut, " . scalar(@zero) . ' pages with no WAL: ' . first_few(@zero);
}
note "heap rounds: $zero_seen zero pages left by bulk extension in all (contention varies; case 1 is the deterministic one)";

# ---- 3. a standby: pages replay added, then a crash ------------------------------

my $primary = ext_node('ext_primary', allows_streaming => 1);
$primary->safe_psql('postgres',
	'CREATE TABLE hx (id int); CREATE INDEX hx_idx ON hx USING hash (id);'
	  . 'INSERT INTO hx SELECT g FROM generate_series(1, 20000) g;');
$primary->backup('for_standby');
my $standby = PostgreSQL::Test::Cluster->new('ext_standby');
$standby->init_from_backup($primary, 'for_standby', has_streaming => 1);
$standby->append_conf('postgresql.conf', "checkpoint_timeout = 1h\nmax_wal_size = 1GB\n");
$standby->start;
# A restartpoint (the map and the sizes saved) needs a checkpoint record to restart from.
sub restartpoint
{
	$primary->safe_psql('postgres', 'CHECKPOINT');
	$primary->wait_for_catchup($standby);
	$standby->safe_psql('postgres', 'CHECKPOINT');
}
restartpoint();
my $sb_init = init_lsn($standby);
$L = $standby->safe_psql('postgres', 'SELECT redo_lsn FROM pg_control_checkpoint()');
$baseline = block_counts($standby->data_dir);
$hx_idx = $primary->safe_psql('postgres', "SELECT pg_relation_filepath('hx_idx')");
$primary->safe_psql('postgres', 'INSERT INTO hx SELECT g FROM generate_series(1, 30000) g');
$primary->wait_for_catchup($standby);
$log = crash_restart($standby, 'standby', $sb_init);
$primary->wait_for_catchup($standby);
listed_and_premise($standby, 'standby', $L, $baseline, $hx_idx, \&restartpoint);

# A standby's clean shutdown saves nothing when no checkpoint record was
# replayed since its last restartpoint (the shutdown restartpoint is
# skipped): the startup must look at the files as after a crash.
$L = $standby->safe_psql('postgres', 'SELECT redo_lsn FROM pg_control_checkpoint()');
$baseline = block_counts($standby->data_dir);
$primary->safe_psql('postgres', 'INSERT INTO hx SELECT g FROM generate_series(1, 50000) g');
$primary->wait_for_catchup($standby);
my $off = log_position($standby);
$standby->stop;
$standby->start;
$log = log_since($standby, $off);
# (The WAL follower saves when it stops: this is the hooks' case.)
unlike($log, qr/ptrack map flush/, 'standby shut down: no restartpoint, no save at shutdown (the case tested)')
  if $mode eq 'hooks';
unlike($log, not_trusted_re(), 'standby shut down: the map is trusted');
$primary->wait_for_catchup($standby);
listed_and_premise($standby, 'standby shut down', $L, $baseline, $hx_idx, \&restartpoint);
$standby->stop;
$primary->stop;

# ---- 4. an unreadable directory under base/ -------------------------------------
#
# The size walk looks into every database directory.  One it cannot read
# must not stop checkpoints (a checkpoint that fails is retried forever,
# and pg_wal grows): the save is skipped with a WARNING that says why, and
# the next one, once the directory is readable, works.  (A crash then is
# not tested: PostgreSQL's own crash recovery stops at such a directory.)

my $stray = $node->data_dir . '/base/4000000000';
mkdir $stray or die "mkdir $stray: $!";
chmod 0, $stray;
$off = log_position($node);
my ($ret, $out, $err) = $node->psql('postgres', 'CHECKPOINT');
is($ret, 0, 'unreadable base/4000000000: CHECKPOINT succeeds') or diag($err);
$log = log_since($node, $off);
if ($mode eq 'hooks')
{
	like($log, qr/WARNING:  ptrack could not record the relation file sizes: could not open directory "base\/4000000000": Permission denied/,
		'unreadable base/4000000000: the checkpointer says what it could not read');
	like($log, qr/DETAIL:  The map is not saved at this checkpoint; the previous save stays in force\./,
		'unreadable base/4000000000: ... and what it means');
}
chmod 0700, $stray;
rmdir $stray or die "rmdir $stray: $!";
$off = log_position($node);
$node->safe_psql('postgres', 'CHECKPOINT');
$log = log_since($node, $off);
unlike($log, qr/WARNING/, 'readable again: the next CHECKPOINT saves without a WARNING');

# ---- 5. hooks: a crashed map without its sizes is not trusted -------------------

if ($mode eq 'hooks')
{
	$node->safe_psql('postgres', 'CHECKPOINT');
	$node->safe_psql('postgres', "INSERT INTO ext_t SELECT g, 'x' FROM generate_series(1, 1000) g");
	$off = log_position($node);
	$node->stop('immediate');
	unlink($node->data_dir . "/$_") for qw(ptrack.sizes ptrack.sizes.new);
	$node->start;
	$log = log_since($node, $off);
	like($log, qr/WARNING:  ptrack map file "ptrack.map" is not trusted because no relation file sizes were saved with it \("ptrack.sizes": not found; "ptrack.sizes.new": not found\)/,
		'crash without ptrack.sizes: the map is refused, and the log says why');
	my $status = $node->safe_psql('postgres', 'SELECT restarts, last_restart_reason FROM ptrack_status()');
	like($status, qr/^1\|the map file was not trusted at startup because no relation file sizes were saved with it/,
		'crash without ptrack.sizes: ptrack_status() counts it as a restart, with the reason')
	  or diag("ptrack_status: $status");
	my $fresh = init_lsn($node);
	cmp_ok(PtrackOracle::lsn_to_int($fresh), '>', PtrackOracle::lsn_to_int($init),
		"crash without ptrack.sizes: ptrack_init_lsn() moved forward ($init -> $fresh)");
	($ret, $out, $err) = $node->psql('postgres', "SELECT count(*) FROM public.ptrack_get_pagemapset('$init'::pg_lsn)");
	isnt($ret, 0, 'crash without ptrack.sizes: a pagemapset from before the crash is refused');
	like($err, qr/older than ptrack_init_lsn/, 'crash without ptrack.sizes: the error says why') or diag($err);

	# A damaged one: a byte of its first entry flipped.
	$node->safe_psql('postgres', 'CHECKPOINT');
	$node->safe_psql('postgres', "INSERT INTO ext_t SELECT g, 'x' FROM generate_series(1, 1000) g");
	$off = log_position($node);
	$node->stop('immediate');
	my $sizes = $node->data_dir . '/ptrack.sizes';
	unlink("$sizes.new");
	open(my $fh, '+<:raw', $sizes) or die "open $sizes: $!";
	sysseek($fh, 70, 0) or die "seek $sizes: $!";
	sysread($fh, my $byte, 1) == 1 or die "read $sizes: $!";
	sysseek($fh, 70, 0) or die "seek $sizes: $!";
	syswrite($fh, chr(ord($byte) ^ 0xFF)) == 1 or die "write $sizes: $!";
	close($fh);
	$node->start;
	$log = log_since($node, $off);
	like($log, qr/not trusted because no relation file sizes were saved with it \("ptrack.sizes": its entries fail their checksum; "ptrack.sizes.new": not found\)/,
		'crash with a damaged ptrack.sizes: the map is refused, and the log names the damage');
}

$node->stop;
done_testing();
