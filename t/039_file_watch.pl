# Copyright (c) the ptrack authors
#
# 039_file_watch.pl -- wal capture: a call stat()s only the relation files
# changed since the previous walk (the follower's inotify watch,
# src/pg/capture/wal/growth_watch.h), and still lists every block a file gained
# without WAL (docs/design.md section 4.3).
#
# Growth "without WAL" is made by the test itself: it extends relation files
# with zero pages through write() (append), truncate() and fallocate(), the
# system calls PostgreSQL extends files with (FileWrite/FileZero,
# FileTruncate, FileFallocate), so that no WAL record names the new blocks
# before the call, whatever the server version.  The extension oracle
# (PtrackOracle, a baseline of file sizes at L) then requires every added
# block to be listed.  The follower's pg_stat_activity row says how each
# walk was made ("walks: N watched, M full (last full: why)").  L is always
# a checkpoint's redo LSN, where the follower cuts its summaries, as at a
# backup's start: an answer from L then holds no older change of the grown
# file (checked), so only the walk can list the growth.
#
#   1. an existing file grown by each system call: listed, by a watched walk
#      (no full walk since the growth);
#   2. a database and a tablespace created after the follower started, a
#      file in each grown before any walk saw their directories: listed,
#      watched (the new directories are watched, then walked);
#   3. a file cut by VACUUM (ftruncate) and grown again: listed, watched;
#   4. a truncation record the follower applies after a walk already saw the
#      regrown file (the follower stopped with SIGSTOP, then more than 1000
#      records behind; the save at a first checkpoint is that walk): the
#      call's own walk waits until the follower has applied the WAL inserted
#      before the call, and the record makes that walk look at the file
#      again (either alone fails the case);
#   5. the kernel's event queue overflows while the follower is stopped (two
#      stray files written alternately, more times than
#      fs.inotify.max_queued_events), the growth's event is dropped: the
#      call falls back to a full walk, with a LOG saying why, and lists it;
#   6. ptrack.wal_file_watch = off: every call walks every file; on again:
#      one full walk arms the watch, then calls are watched;
#   7. an ERROR interrupts a full walk (a tablespace made unreadable) after
#      it collected a file's growth: once the walk works, the growth is
#      listed (the sizes the failed walk raised went back);
#   8. ptrack.wal_file_watch_min_files (the suite's wal mode sets it to 0,
#      t/capture_wal.conf): above the cluster's number of relation files, no
#      watch and every call walks every file (and lists the growth); at 0
#      again, watched; once on, the watch stays while the files are at least
#      half the threshold, and goes below that;
#   9. a tablespace created inside another tablespace's database directory
#      (one directory, two paths, one inotify watch): the growth there is
#      listed, and calls walk every file, saying why.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use IPC::Run;
use Time::HiRes ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use PtrackCluster qw(capture_mode ptrack_node follower_pid log_position log_since init_lsn);
use PtrackOracle qw(block_counts no_misses_ok decode_pagemap lsn_to_int);
use PtrackUnits qw(BLCKSZ);

plan skip_all => 'the file watch serves the WAL follower (wal capture)' unless capture_mode() eq 'wal';
plan skip_all => 'the file watch is Linux inotify' unless $^O eq 'linux';

my $node = ptrack_node('file_watch',
	conf => "autovacuum = off\ncheckpoint_timeout = 1h\nmax_wal_size = 1GB\nlog_min_messages = log\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION ptrack');
my $pgdata = $node->data_dir;

# The follower's walks so far: {watched, full, why, text}, from its pg_stat_activity row.
sub walks
{
	my $text = $node->safe_psql('postgres',
		"SELECT query FROM pg_stat_activity WHERE backend_type = 'ptrack WAL follower'");
	my ($w, $f, $why) = $text =~ /walks: (\d+) watched, (\d+) full \(last full: ([^)]*)\)/;
	return { watched => $w // -1, full => $f // -1, why => $why // '', text => $text };
}

# Until a call (ptrack_init_lsn(), whose walk applies the settings the
# follower has reloaded) finds the follower's status line containing $text.
sub wait_watch_status
{
	my ($text) = @_;
	return $node->poll_query_until('postgres',
		"SELECT ptrack_init_lsn() IS NOT NULL AND query LIKE '%$text%' FROM pg_stat_activity "
		  . "WHERE backend_type = 'ptrack WAL follower'");
}

# L: a CHECKPOINT's redo LSN (a summary starts there), once the follower's
# save after it (a full walk) is done; then the sizes at L and the walks so far.
sub start_at_checkpoint
{
	# A redo LSN within 200 ms of the previous one may not be cut at, nor
	# one right at the previous save's position (an idle server): the
	# summary holding L would then start before it.
	Time::HiRes::sleep(0.3);
	$node->safe_psql('postgres', "SELECT pg_logical_emit_message(false, 'ptrack', '036'); CHECKPOINT");
	my ($redo, $record) = split /\|/,
	  $node->safe_psql('postgres', 'SELECT redo_lsn, checkpoint_lsn FROM pg_control_checkpoint()');
	$node->poll_query_until('postgres', "SELECT last_save_lsn > '$record' FROM ptrack_status")
	  or die "no save after the checkpoint at $record";
	return ($redo, block_counts($pgdata), walks());
}

# Every block added since $L listed ($baseline: sizes at L), nothing older of
# the grown files @{$opts{grown_files}}, and how the walks went meanwhile.
sub listed_by_watch_ok
{
	my ($label, $L, $baseline, $before, %opts) = @_;
	my $stats = no_misses_ok($node, $L, "$label: every block added since L is listed",
		baseline => $baseline, dbname => $opts{dbname} // 'postgres', forks => [ 'main' ]);
	cmp_ok($stats->{extended}, '>=', $opts{grown}, "$label: the oracle saw the growth ($stats->{extended} blocks)");
	for my $path (@{ $opts{grown_files} // [] })
	{
		my @older = grep { $_ < $baseline->{$path} } @{ $stats->{pagemapset}{$path}{blocks} // [] };
		is(scalar @older, 0, "$label: no block $path had at L is listed (only a walk can list its growth)")
		  or diag('listed: ' . join(' ', @older));
	}
	my $after = walks();
	is($after->{full}, $before->{full}, "$label: no full walk since the growth") or diag($after->{text});
	cmp_ok($after->{watched}, '>', $before->{watched}, "$label: the call's walk was watched")
	  or diag($after->{text});
}

# Every block added since $L listed, by a call that walked every file
# (no watched walk since $before); returns the oracle's figures.
sub listed_by_full_walk_ok
{
	my ($label, $L, $baseline, $before) = @_;
	my $stats = no_misses_ok($node, $L, "$label: every block added since L is listed", baseline => $baseline);
	my $after = walks();
	cmp_ok($after->{full}, '>', $before->{full}, "$label: the call walked every file") or diag($after->{text});
	is($after->{watched}, $before->{watched}, "$label: no watched walk") or diag($after->{text});
	return $stats;
}

# Grows $path (relative to the data directory) by $blocks zero pages with system call $how.
sub grow
{
	my ($path, $blocks, $how) = @_;
	my $file = "$pgdata/$path";
	my $size = -s $file;
	die "grow: $file has $size bytes, not whole blocks" if $size % BLCKSZ;
	if ($how eq 'write')
	{
		open(my $fh, '>>', $file) or die "open $file: $!";
		binmode $fh;
		syswrite($fh, "\0" x (BLCKSZ * $blocks)) == BLCKSZ * $blocks or die "write $file: $!";
		close $fh or die "close $file: $!";
	}
	elsif ($how eq 'truncate')
	{
		truncate($file, $size + BLCKSZ * $blocks) or die "truncate $file: $!";
	}
	elsif ($how eq 'fallocate')
	{
		system('fallocate', '-o', $size, '-l', BLCKSZ * $blocks, $file) == 0 or die "fallocate $file failed";
	}
	else
	{
		die "grow: unknown system call $how";
	}
	return $size / BLCKSZ;
}

sub make_table
{
	my ($db, $name, $rows, $tablespace) = @_;
	$node->safe_psql($db,
		"CREATE TABLE $name (id int, pad text) WITH (fillfactor = 100)"
		  . (defined $tablespace ? " TABLESPACE $tablespace" : '') . ";"
		  . "ALTER TABLE $name ALTER COLUMN pad SET STORAGE PLAIN;"
		  . "INSERT INTO $name SELECT g, repeat('x', 1000) FROM generate_series(1, $rows) g;");
	return $node->safe_psql($db, "SELECT pg_relation_filepath('$name')");
}

my @psql = ('psql', '-X', '-A', '-t', '-d', $node->connstr('postgres'));

# Starts $sql in a session of its own; returns once it waits for the (stopped) follower.
sub start_waiting
{
	my ($sql) = @_;
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start([ @psql, '-c', $sql ], '>', \$out, '2>', \$err);
	$node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE query = '"
		  . ($sql =~ s/'/''/gr) . "' AND wait_event_type = 'Extension'")
	  or die "\"$sql\" did not start waiting for the follower";
	return { h => $h, out => \$out, err => \$err };
}

# The blocks of $path listed in "path|hex" rows (a pagemapset call's output).
sub listed_in_rows
{
	my ($rows, $path) = @_;
	my @blocks;
	for my $line (split /\n/, $rows)
	{
		my ($p, $hex) = split /\|/, $line;
		push @blocks, decode_pagemap($hex) if defined $hex && $p eq $path;
	}
	return @blocks;
}

# The blocks from $from to $to - 1 of $path that "path|hex" rows do not list.
sub missing_from_rows
{
	my ($rows, $path, $from, $to) = @_;
	my %listed = map { $_ => 1 } listed_in_rows($rows, $path);
	return grep { !$listed{$_} } $from .. $to - 1;
}

# ---------------------------------------------------------------------------
# 1. Growth by write(), truncate() and fallocate()
# ---------------------------------------------------------------------------

my %path;
$path{$_} = make_table('postgres', "g_$_", 70) for qw(write truncate fallocate);
my ($L, $baseline, $before) = start_at_checkpoint();
like($before->{text}, qr/file watch: on, \d+ directories/, 'the follower reports its file watch on')
  or diag($before->{text});
grow($path{$_}, 5, $_) for qw(write truncate fallocate);
listed_by_watch_ok('write, truncate, fallocate', $L, $baseline, $before, grown => 15,
	grown_files => [ values %path ]);

# ---------------------------------------------------------------------------
# 2. A database and a tablespace created after the follower started
# ---------------------------------------------------------------------------

# Two databases and two tablespaces, each with a table (and one table in
# both), created after a checkpoint's save walked every file; a call's walk
# in between the two sets; then L, at a summary's start with no walk in
# between: a spread checkpoint (the backup's pg_backup_start(fast =>
# false)) fixes its redo LSN, where the follower cuts, and writes the
# buffers a ballast table dirtied 100 ms apart (CheckpointWriteDelay()), so
# its record, and the follower's save after it (a full walk, which would
# find the growth too), come seconds later.  Then the files grow, then the
# call.  The first set's growth is seen only if the walk between the sets
# watched the new directories (their events); the second set's only if the
# call's walk watches the new directories and stat()s their files (the
# creation records name them too: SMGR_CREATE lowers their sizes).
# STRATEGY = WAL_LOG (15's default too) makes no checkpoint.
my $tsdir = PostgreSQL::Test::Utils::tempdir_short();
my $tsdir2 = PostgreSQL::Test::Utils::tempdir_short();
make_table('postgres', 'ballast', 500);
my (undef, undef, $walks0) = start_at_checkpoint();
$node->safe_psql('postgres', 'CREATE DATABASE watchdb STRATEGY = WAL_LOG');
$node->safe_psql('postgres', "CREATE TABLESPACE watch_ts LOCATION '$tsdir'");
my %new_file = (
	'1 in_db' => make_table('watchdb', 'in_db', 20),
	'1 in_ts' => make_table('postgres', 'in_ts', 20, 'watch_ts'),
	'1 in_db_ts' => make_table('watchdb', 'in_db_ts', 20, 'watch_ts'));
init_lsn($node);    # a walk: the first set's directories are watched from now on
$node->safe_psql('postgres', 'CREATE DATABASE watchdb2 STRATEGY = WAL_LOG');
$node->safe_psql('postgres', "CREATE TABLESPACE watch_ts2 LOCATION '$tsdir2'");
$new_file{'2 in_db'} = make_table('watchdb2', 'in_db', 20);
$new_file{'2 in_ts'} = make_table('postgres', 'in_ts2', 20, 'watch_ts2');
$new_file{'2 in_db_ts'} = make_table('watchdb2', 'in_db_ts', 20, 'watch_ts2');
$node->safe_psql('postgres', 'UPDATE ballast SET id = id + 1');    # dirty buffers, written 100 ms apart
Time::HiRes::sleep(0.3);    # a redo LSN within 200 ms of the previous one may not be cut at
my ($bout, $berr) = ('', '');
my $backup = IPC::Run::start([ @psql, '-c', "SELECT pg_backup_start('036', false)" ], '>', \$bout, '2>', \$berr);
my $checkpointing = "SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'checkpointer' "
  . "AND wait_event = 'CheckpointWriteDelay'";
$node->poll_query_until('postgres', $checkpointing) or die 'the spread checkpoint did not start';
$L = $node->lsn('insert');
$baseline = block_counts($pgdata);
for my $set (1, 2)
{
	grow($new_file{"$set in_db"}, 4, 'write');
	grow($new_file{"$set in_ts"}, 4, 'truncate');
	grow($new_file{"$set in_db_ts"}, 4, 'fallocate');
}
my $rows = $node->safe_psql('postgres',
	"SELECT path || '|' || encode(pagemap, 'hex') FROM ptrack_get_pagemapset('$L'::pg_lsn)");
is($node->safe_psql('postgres', $checkpointing), 't', '2: the checkpoint at L was still running after the call');
for my $name (sort keys %new_file)
{
	my $path = $new_file{$name};
	my $had = $baseline->{$path};
	my @missing = missing_from_rows($rows, $path, $had, $had + 4);
	is(scalar @missing, 0, "2: $name ($path) grew from $had blocks after L: every added block is listed")
	  or diag('not listed: blocks ' . join(' ', @missing));
	my @older_blocks = grep { $_ < $had } listed_in_rows($rows, $path);
	is(scalar @older_blocks, 0, "2: $name: no block it had at L is listed (only a walk can list its growth)")
	  or diag('listed: ' . join(' ', @older_blocks));
}
my $after = walks();
is($after->{full}, $walks0->{full}, '2: no full walk since the first checkpoint') or diag($after->{text});
cmp_ok($after->{watched}, '>', $walks0->{watched}, '2: the call\'s walk was watched') or diag($after->{text});
$node->safe_psql('postgres', 'CHECKPOINT');    # an immediate one: the spread checkpoint ends without delays
$backup->finish;
is($berr, '', '2: pg_backup_start() returned');

# ---------------------------------------------------------------------------
# 3. Cut by VACUUM, grown again
# ---------------------------------------------------------------------------

my $cut = make_table('postgres', 'cut', 700);
$node->safe_psql('postgres', 'DELETE FROM cut WHERE id > 300; VACUUM cut');
($L, $baseline, $before) = start_at_checkpoint();
my $had = $baseline->{$cut};
cmp_ok($had, '<', 60, "VACUUM cut the table ($had blocks left)");
grow($cut, 40, 'truncate');
listed_by_watch_ok('cut and grown again', $L, $baseline, $before, grown => 40, grown_files => [$cut]);

# ---------------------------------------------------------------------------
# 4. A truncation record applied after a walk saw the regrown file
# ---------------------------------------------------------------------------

$node->safe_psql('postgres', 'CREATE TABLE filler (id int, pad text)');
# The table, about 100 blocks, known to a walk; its tail deleted.
my $r = make_table('postgres', 'regrow', 700);
init_lsn($node);
my $size = (-s "$pgdata/$r") / BLCKSZ;
$node->safe_psql('postgres', 'DELETE FROM regrow WHERE id > 300');
my $fpid = follower_pid($node);
kill 'STOP', $fpid;
# Applied first after SIGCONT: its save (a full walk) sees the regrown file
# while the truncation record is still 1000s of records ahead.
$node->safe_psql('postgres', 'CHECKPOINT');
$node->safe_psql('postgres', "INSERT INTO filler SELECT g, repeat('f', 400) FROM generate_series(1, 5000) g");
$node->safe_psql('postgres', 'VACUUM regrow');    # the truncation record
($L) = split /\|/, $node->safe_psql('postgres', 'CHECKPOINT; SELECT redo_lsn FROM pg_control_checkpoint()');
$baseline = block_counts($pgdata);
my $cut_to = $baseline->{$r};
cmp_ok($cut_to, '<', $size - 10, "4: VACUUM cut $r from $size to $cut_to blocks");
grow($r, $size - $cut_to, 'truncate');    # back to its size before the cut: no growth against that
sleep 1.2;    # the follower's first save after SIGCONT is due at once (1 s apart at most), its next one a second later
my $call = start_waiting("SELECT path || '|' || encode(pagemap, 'hex') FROM ptrack_get_pagemapset('$L'::pg_lsn)");
kill 'CONT', $fpid;
$call->{h}->finish;
is(${ $call->{err} }, '', '4: the call succeeded');
my @missing = missing_from_rows(${ $call->{out} }, $r, $cut_to, $size);
is(scalar @missing, 0, "4: $r cut to $cut_to blocks before L, grown to $size after: every added block is listed")
  or diag('not listed: blocks ' . join(' ', @missing));
my @older_blocks = grep { $_ < $cut_to } listed_in_rows(${ $call->{out} }, $r);
is(scalar @older_blocks, 0, "4: no block $r had at L is listed (only a walk can list its growth)")
  or diag('listed: ' . join(' ', @older_blocks));

# ---------------------------------------------------------------------------
# 5. The event queue overflows
# ---------------------------------------------------------------------------

my $queue = slurp_file('/proc/sys/fs/inotify/max_queued_events');
chomp $queue;
my $q = make_table('postgres', 'overflow', 70);
($L, $baseline, $before) = start_at_checkpoint();
my $offset = log_position($node);
my $dbdir = $pgdata . '/' . ($q =~ s{/[^/]*$}{}r);
kill 'STOP', $fpid;
{
	# Alternating names: the kernel merges an event only with the one queued just before.
	open(my $fa, '>', "$dbdir/stray_a") or die "open: $!";
	open(my $fb, '>', "$dbdir/stray_b") or die "open: $!";
	for (1 .. $queue + 100)
	{
		syswrite($fa, 'a') == 1 or die "write: $!";
		syswrite($fb, 'b') == 1 or die "write: $!";
	}
	close $fa;
	close $fb;
}
grow($q, 6, 'write');    # its event is dropped
kill 'CONT', $fpid;
my $stats = no_misses_ok($node, $L, 'overflow: every block added since L is listed', baseline => $baseline);
cmp_ok($stats->{extended}, '>=', 6, "overflow: the oracle saw the growth ($stats->{extended} blocks)");
my @older = grep { $_ < $baseline->{$q} } @{ $stats->{pagemapset}{$q}{blocks} // [] };
is(scalar @older, 0, "overflow: no block $q had at L is listed (only a walk can list its growth)")
  or diag('listed: ' . join(' ', @older));
$after = walks();
cmp_ok($after->{full}, '>', $before->{full}, 'overflow: the call walked every file') or diag($after->{text});
like($after->{why}, qr/overflow/, 'overflow: the status says why') or diag($after->{text});
like(log_since($node, $offset),
	qr/LOG:  ptrack's WAL follower walks every relation file at the next call: the kernel's event queue overflowed/,
	'overflow: LOG says why');
unlink "$dbdir/stray_a", "$dbdir/stray_b";
init_lsn($node);
$before = walks();
init_lsn($node);
$after = walks();
cmp_ok($after->{watched}, '>', $before->{watched}, 'after the overflow: calls are watched again')
  or diag($after->{text});

# ---------------------------------------------------------------------------
# 6. ptrack.wal_file_watch = off, then on
# ---------------------------------------------------------------------------

$node->safe_psql('postgres', 'ALTER SYSTEM SET ptrack.wal_file_watch = off; SELECT pg_reload_conf()');
wait_watch_status('file watch: off') or diag(walks()->{text});
my $off = make_table('postgres', 'watch_off', 70);
($L, $baseline, $before) = start_at_checkpoint();
grow($off, 3, 'write');
listed_by_full_walk_ok('watch off', $L, $baseline, $before);
$node->safe_psql('postgres', 'ALTER SYSTEM RESET ptrack.wal_file_watch; SELECT pg_reload_conf()');
wait_watch_status('file watch: on') or diag(walks()->{text});
init_lsn($node);    # the full walk that arms the watch again
($L, $baseline, $before) = start_at_checkpoint();
grow($off, 3, 'fallocate');
listed_by_watch_ok('watch on again', $L, $baseline, $before, grown => 3, grown_files => [$off]);

# ---------------------------------------------------------------------------
# 7. An ERROR interrupts a walk
# ---------------------------------------------------------------------------

# With full walks (watch off): base/ is walked before pg_tblspc/, so a file
# of base/5 has its growth collected before the walk fails on the
# tablespace made unreadable.  The sizes it had raised go back
# (file_growth.cpp undo_collected()): the next walk finds the growth again.
# (log_min_messages = log would hide the follower's ERROR: LOG ranks above ERROR there.)
$node->safe_psql('postgres',
	'ALTER SYSTEM SET ptrack.wal_file_watch = off; ALTER SYSTEM SET log_min_messages = warning; SELECT pg_reload_conf()');
wait_watch_status('file watch: off') or diag(walks()->{text});
my $broken = make_table('postgres', 'walk_error', 40);
($L, $baseline, $before) = start_at_checkpoint();
grow($broken, 5, 'write');
$offset = log_position($node);
chmod(0000, $tsdir) or die "chmod $tsdir: $!";
{
	my ($ret, $out, $err) = $node->psql('postgres',
		"SET ptrack.wal_wait_timeout = '3s'; SELECT count(*) FROM ptrack_get_pagemapset('$L')");
	chmod(0700, $tsdir) or die "chmod $tsdir: $!";
	isnt($ret, 0, 'walk error: the call cannot answer while the walk fails') or diag($out);
}
like(log_since($node, $offset), qr/ERROR:  could not open directory "pg_tblspc\/\d+\/[^"]+": Permission denied/,
	'walk error: the follower\'s walk failed on the tablespace');
no_misses_ok($node, $L, 'walk error: once the walk works, every block added since L is listed',
	baseline => $baseline);
$node->safe_psql('postgres',
	'ALTER SYSTEM RESET ptrack.wal_file_watch; ALTER SYSTEM RESET log_min_messages; SELECT pg_reload_conf()');
wait_watch_status('file watch: on') or diag(walks()->{text});

# ---------------------------------------------------------------------------
# 8. ptrack.wal_file_watch_min_files
# ---------------------------------------------------------------------------

# Sets the threshold; once the follower has reloaded (a second), a call's
# walk (init_lsn()) must leave the watch $state ('on' or 'off').
sub set_min_files
{
	my ($value, $state) = @_;
	$node->safe_psql('postgres',
		"ALTER SYSTEM SET ptrack.wal_file_watch_min_files = $value; SELECT pg_reload_conf()");
	sleep 1;
	init_lsn($node);
	my $pattern = $state eq 'on' ? 'file watch: on' : 'file watch: off (fewer relation files';
	wait_watch_status($pattern) or diag("min_files $value: " . walks()->{text});
	like(walks()->{text}, qr/\Q$pattern\E/, "min_files $value: the watch is $state");
}

# The relation segment files a full walk counts (base/, global/, the tablespaces).
my $files = () = grep { m{/\d+(?:_(?:fsm|vm|init))?(?:\.\d+)?$} }
  glob("$pgdata/global/* $pgdata/base/*/* $pgdata/pg_tblspc/*/*/*/*");
note "about $files relation files";
set_min_files($files * 10, 'off');
my $few = make_table('postgres', 'few_files', 50);
($L, $baseline, $before) = start_at_checkpoint();
grow($few, 4, 'truncate');
listed_by_full_walk_ok('few files', $L, $baseline, $before);
set_min_files(0, 'on');
init_lsn($node);    # the full walk that arms the watch
($L, $baseline, $before) = start_at_checkpoint();
grow($few, 4, 'write');
listed_by_watch_ok('threshold 0 again', $L, $baseline, $before, grown => 4, grown_files => [$few]);
# Hysteresis: on, the watch stays while the files are at least half the threshold.
set_min_files(int($files * 1.5), 'on');
set_min_files($files * 3, 'off');
set_min_files(0, 'on');

# ---------------------------------------------------------------------------
# 9. One directory reached by two paths
# ---------------------------------------------------------------------------

# A tablespace created in another tablespace's (empty) database directory:
# that directory is a relation directory of the first and the link target
# of the second, one inotify watch for both (a tester's find: the second
# inotify_add_watch() replaced the mask without IN_MODIFY, and growth there
# was missed whenever the outer tablespace was watched first).  The watch
# says so and every call walks every file while the layout lasts.
my $outer = PostgreSQL::Test::Utils::tempdir_short();
$node->safe_psql('postgres', "CREATE TABLESPACE outer_ts LOCATION '$outer'");
$node->safe_psql('postgres', 'CREATE TABLE leaves_dir (i int) TABLESPACE outer_ts; DROP TABLE leaves_dir; CHECKPOINT');
my $dboid = $node->safe_psql('postgres', "SELECT oid FROM pg_database WHERE datname = 'postgres'");
my ($verdir) = glob("$outer/PG_*");
$offset = log_position($node);
$node->safe_psql('postgres', "CREATE TABLESPACE inner_ts LOCATION '$verdir/$dboid'");
my $victim = make_table('postgres', 'two_paths', 30, 'outer_ts');
($L, $baseline, $before) = start_at_checkpoint();
grow($victim, 4, 'write');
my $stats8 = listed_by_full_walk_ok('two paths', $L, $baseline, $before);
cmp_ok($stats8->{extended}, '>=', 4, "two paths: the oracle saw the growth ($stats8->{extended} blocks)");
like(log_since($node, $offset),
	qr/LOG:  ptrack's WAL follower walks every relation file at the next call: a directory is reached by two paths/,
	'two paths: LOG says why');

$node->stop;
done_testing();
