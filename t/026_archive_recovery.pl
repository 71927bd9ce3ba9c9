# Copyright (c) the ptrack authors
#
# 026_archive_recovery.pl -- a server restored from a base backup whose WAL
# comes only from an archive, through restore_command (pg_probackup's
# ARCHIVE mode), tracks from the backup's redo LSN, so the restored backup
# can parent the next incremental backup (issue 18 item 5; docs/design.md
# sections 3.8 and 4.7).
#
# With the hooks source, replay writes (and so marks) every page changed
# after the redo LSN, wherever its WAL comes from.  With the wal source, the
# WAL from the redo LSN on is no longer in pg_wal when the follower starts
# (recovery's restartpoints and its end-of-recovery checkpoint removed it,
# and no slot kept it); the follower reads it through restore_command
# (src/pg/capture/wal_archive.cpp).  Before that, ptrack_init_lsn() was where the
# follower reserved its slot, after the end-of-recovery checkpoint, and
# pg_probackup refused the chain ("LSN from ptrack_control ... is greater
# than Start LSN of previous backup").
#
#   1. a primary archiving its WAL (archive_command copies to a folder);
#      pgbench runs while pg_basebackup copies it (the backup's redo LSN R
#      is read from its backup_label);
#   2. more changes on the primary (pgbench, a new table, a truncation, a
#      table rewrite), checkpoints and segment switches, all archived;
#   3. the backup restored with its pg_wal emptied, recovery.signal and a
#      restore_command reading the archive, hot_standby off (the follower
#      starts after recovery, when nothing in pg_wal reaches back to R):
#      ptrack_init_lsn() <= R;
#   4. a workload on the restored server; the page-LSN oracle on its data
#      files since R: every page changed since is listed;
#   5. restore_command broken before the follower needs it (a second
#      restore): tracking starts later with the usual WARNING, never short;
#   6. the follower terminated while it reads the archive: the one the
#      postmaster starts again resumes from its save, through the archive
#      too; ptrack_init_lsn() stays <= R, no WARNING, the oracle passes;
#   7. with pg_probackup (PTRACK_PG_PROBACKUP): a FULL in ARCHIVE mode,
#      restored by pg_probackup, then a PTRACK backup on the restored server
#      with that FULL as its parent;
#   8. point-in-time recovery with the archived WAL copied into pg_wal;
#   9. (wal) segments that recovery moves under the follower's feet: with
#      hot_standby on, the follower reads behind a recovery that a gated
#      restore_command holds; a segment it has yet to read is renamed
#      <name>.partial (what the end of an archive recovery does to the old
#      timeline's last one) and the next is missing for 2 s (what recovery's
#      replacing of a segment it restores again does): the follower reads the
#      first under its new name and waits for the second, tracking does not
#      restart, and nothing since the redo LSN is missed.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use File::Path qw(rmtree);
use IPC::Run;
use File::Copy qw(copy);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use PtrackCluster qw(capture_mode ptrack_node log_position log_since init_lsn wait_until_recovered follower_pid);
use PtrackOracle qw(lsn_to_int no_misses_ok);
use PtrackProbackup qw(pg_probackup);

my $mode = capture_mode();
my $archive = PostgreSQL::Test::Utils::tempdir('archive');

my $primary = ptrack_node('primary', allows_streaming => 1,
	conf => "autovacuum = off\narchive_mode = on\narchive_command = 'cp \"%p\" \"$archive/%f\"'\n");
$primary->start;
$primary->safe_psql('postgres', 'CREATE EXTENSION ptrack');
$primary->command_ok([ 'pgbench', '-i', '-q', '-s', '2', 'postgres' ], 'pgbench -i -s 2');
$primary->safe_psql('postgres',
	'CREATE TABLE shrinking AS SELECT g AS id, repeat(md5(g::text), 4) AS t FROM generate_series(1, 20000) g');

# Waits until the archive holds every segment up to the current one (switched out).
sub archive_everything
{
	my ($node) = @_;
	my $last = $node->safe_psql('postgres', 'SELECT pg_walfile_name(pg_current_wal_lsn())');
	$node->safe_psql('postgres', 'SELECT pg_switch_wal()');
	$node->poll_query_until('postgres',
		"SELECT last_archived_wal >= '$last' FROM pg_stat_archiver")
	  or die "the archiver did not archive $last";
}

# ---- 1. a base backup of a busy primary ---------------------------------------

my ($out, $err) = ('', '');
my $pgbench = IPC::Run::start(
	[ 'pgbench', '-n', '-c', '2', '-j', '1', '-R', '100', '-T', '6', $primary->connstr('postgres') ],
	'>', \$out, '2>', \$err);
sleep 1;
$primary->backup('base');
$pgbench->finish;
my $label = slurp_file($primary->backup_dir . '/base/backup_label');
my ($redo) = $label =~ /^START WAL LOCATION: (\S+)/m or die "no START WAL LOCATION in backup_label:\n$label";
note "the backup's redo LSN is $redo";

# ---- 2. changes after the backup, archived --------------------------------------

$primary->command_ok([ 'pgbench', '-n', '-c', '2', '-j', '1', '-t', '300', 'postgres' ], 'pgbench after the backup');
# A recovery target for section 8: changes of this timeline follow it.
my $target = $primary->safe_psql('postgres', 'SELECT pg_current_wal_insert_lsn()');
$primary->safe_psql('postgres', 'CHECKPOINT');
$primary->safe_psql('postgres', 'SELECT pg_switch_wal()');
$primary->safe_psql('postgres',
	'CREATE TABLE after_backup AS SELECT g AS id, md5(g::text) AS t FROM generate_series(1, 30000) g');
$primary->safe_psql('postgres', 'DELETE FROM shrinking WHERE id > 5000');
$primary->safe_psql('postgres', 'VACUUM shrinking');    # truncates it: an smgr truncate record
$primary->safe_psql('postgres', 'CHECKPOINT');
$primary->safe_psql('postgres', 'SELECT pg_switch_wal()');
$primary->safe_psql('postgres', 'VACUUM FULL pgbench_tellers');
$primary->command_ok([ 'pgbench', '-n', '-c', '2', '-j', '1', '-t', '300', 'postgres' ], 'more pgbench');
$primary->safe_psql('postgres', 'CHECKPOINT');
archive_everything($primary);

# ---- 3. restored with its WAL only in the archive ------------------------------

# A restored copy of the base backup: pg_wal emptied, WAL through restore_command.
sub restore_from_archive
{
	my ($name, $restore_command) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init_from_backup($primary, 'base');
	my $wal = $node->data_dir . '/pg_wal';
	opendir(my $dh, $wal) or die "opendir $wal: $!";
	my @segments = grep { -f "$wal/$_" } readdir($dh);
	closedir($dh);
	unlink("$wal/$_") or die "unlink $wal/$_: $!" foreach @segments;
	$node->append_conf('postgresql.conf',
		"archive_mode = off\nhot_standby = off\nmax_wal_size = 32MB\nrestore_command = '$restore_command'\n");
	open(my $fh, '>', $node->data_dir . '/recovery.signal') or die "recovery.signal: $!";
	close($fh);
	return ($node, scalar @segments);
}

my ($restored, $emptied) = restore_from_archive('restored', "cp \"$archive/%f\" \"%p\"");
note "removed $emptied files from the restored copy's pg_wal";
my $off = log_position($restored);
$restored->start;
wait_until_recovered($restored, $off);
my $rinit = init_lsn($restored);    # waits for the follower to catch up
my $log = log_since($restored, $off);
like($log, qr/restored log file "[0-9A-F]{24}" from archive/, 'recovery read the WAL from the archive');
note "restored server: ptrack_init_lsn() $rinit, the backup's redo LSN $redo";

# Replay marks (hooks) or the follower reads (wal) every change after R; the
# record that ends exactly at R, if any, is marked too (replay never applies
# it): read through restore_command, by the postmaster before recovery
# (hooks) or by the follower.  A redo LSN just after a page header has no
# such record (pg_backup_start() switches segments first, so a quiet primary
# gives one); pgbench running through the backup makes one likely.
my $redo_int = lsn_to_int($redo);
my $after_header = ($redo_int % 8192 == 24) || ($redo_int % (16 * 1024 * 1024) == 40);
note $after_header ? "no record ends at $redo" : "a record may end at $redo";
ok(lsn_to_int($rinit) <= $redo_int,
	"$mode capture: the restored server tracks from the backup's redo LSN: ptrack_init_lsn() $rinit <= $redo")
  or diag "the restored server's log:\n",
  join("\n", grep { /ptrack|restored log file|redo|checkpoint/ } split /\n/, $log);
if ($mode eq 'hooks' && !$after_header)
{
	like($log, qr/ptrack marked the WAL record that ends at the base backup's redo LSN \Q$redo\E/,
		'the postmaster marked the record ending at the redo LSN, read through restore_command');
}
if ($mode eq 'wal')
{
	like($log, qr/ptrack WAL follower restored WAL segment "[0-9A-F]{24}" from the archive/,
		'the follower read the WAL it lacked through restore_command');
	unlike($log, qr/WARNING:  ptrack restarted/, 'and tracking did not restart');
}

# ---- 4. a workload on the restored server; the oracle since R -----------------

$restored->command_ok([ 'pgbench', '-n', '-c', '2', '-j', '1', '-t', '300', 'postgres' ],
	'pgbench on the restored server');
$restored->safe_psql('postgres',
	'CREATE TABLE after_restore AS SELECT g AS id, md5(g::text) AS t FROM generate_series(1, 10000) g');
$restored->safe_psql('postgres', 'CHECKPOINT');
SKIP:
{
	skip "ptrack_init_lsn() $rinit is after $redo: pagemapset($redo) is refused", 2
	  if lsn_to_int($rinit) > lsn_to_int($redo);
	my $os = no_misses_ok($restored, $redo,
		"the oracle on the restored server: every page changed since $redo is listed", forks => [ 'main', 'vm' ]);
	cmp_ok($os->{at_or_after}, '>', 100, "the oracle saw pages changed since $redo ($os->{at_or_after})");
}
$restored->stop;

# ---- 5. the archive unreadable when the follower needs it ------------------------

if ($mode eq 'wal')
{
	# Recovery reads the archive; the follower, started after it, finds the
	# command failing: it must not answer from a later point as if complete.
	my $flag = PostgreSQL::Test::Utils::tempdir('flag') . '/recovery_done';
	my ($broken) = restore_from_archive('broken',
		"test ! -e \"$flag\" && cp \"$archive/%f\" \"%p\"");
	$broken->append_conf('postgresql.conf', "recovery_end_command = 'touch \"$flag\"'\n");
	my $boff = log_position($broken);
	$broken->start;
	wait_until_recovered($broken, $boff);
	my $binit = init_lsn($broken);
	my $blog = log_since($broken, $boff);
	cmp_ok(lsn_to_int($binit), '>', $redo_int,
		"restore_command failing for the follower: ptrack_init_lsn() $binit is after the redo LSN $redo");
	like($blog, qr/WARNING:  ptrack .*restart|ptrack WAL follower cannot read the WAL since/,
		'and the log says why tracking starts later')
	  or diag join("\n", grep { /ptrack/ } split /\n/, $blog);
	my ($rc, undef, $perr) = $broken->psql('postgres', "SELECT count(*) FROM ptrack_get_pagemapset('$redo'::pg_lsn)");
	isnt($rc, 0, "pagemapset($redo) is refused, not answered short") or diag $perr;
	$broken->stop;
}

# ---- 6. the follower stopped in the middle of reading the archive ------------------

if ($mode eq 'wal')
{
	# The follower's copies (its %p is its own file, not recovery's
	# RECOVERYXLOG) take 2 s each: it is terminated after the first, and the
	# follower the postmaster starts again resumes from its save, reading the
	# rest through restore_command too.
	my ($slow) = restore_from_archive('slow',
		"case \"%p\" in *ptrack*) sleep 2;; esac; cp \"$archive/%f\" \"%p\"");
	my $soff = log_position($slow);
	$slow->start;
	wait_until_recovered($slow, $soff);
	my $tries = 0;
	$tries++ until log_since($slow, $soff) =~ /ptrack WAL follower restored WAL segment/ || $tries > 600 || !sleep 1;
	my $terminated = $slow->safe_psql('postgres',
		"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE backend_type = 'ptrack WAL follower'");
	is($terminated, 't', 'the follower was terminated while it read the archive');
	my $sinit = init_lsn($slow);
	my $slog = log_since($slow, $soff);
	ok(lsn_to_int($sinit) <= $redo_int,
		"after the follower's restart ptrack_init_lsn() $sinit is still <= the redo LSN $redo")
	  or diag join("\n", grep { /ptrack/ } split /\n/, $slog);
	# Terminated after its first save, it resumes from the save; before it
	# (still reading the record that ends at the redo LSN), it begins the
	# catch-up from the redo LSN again.  Either keeps ptrack_init_lsn().
	like($slog, qr/ptrack WAL follower resumes at|ptrack WAL follower reads the WAL from the base backup's redo LSN (?s:.*)ptrack WAL follower reads the WAL from the base backup's redo LSN/,
		'the restarted follower resumed from its save, or began the catch-up again')
	  or diag join("\n", grep { /ptrack/ } split /\n/, $slog);
	unlike($slog, qr/WARNING:  ptrack restarted/, 'and tracking did not restart');
	$slow->safe_psql('postgres', 'CREATE TABLE after_slow AS SELECT g AS id FROM generate_series(1, 10000) g');
	$slow->safe_psql('postgres', 'CHECKPOINT');
	no_misses_ok($slow, $redo, "the oracle since $redo after the interrupted catch-up", forks => [ 'main', 'vm' ])
	  if lsn_to_int($sinit) <= $redo_int;
	$slow->stop;
}

# ---- 7. pg_probackup's ARCHIVE-mode chain, when it is installed ----------------

SKIP:
{
	my $pgpro = pg_probackup("section 7 (pg_probackup's ARCHIVE-mode chain)");
	skip 'no pg_probackup', 3 unless $pgpro;

	my $catalog = PostgreSQL::Test::Utils::tempdir('pgpro');
	my $source = ptrack_node('pgpro_source', allows_streaming => 1, conf => "autovacuum = off\narchive_mode = on\n");
	my ($prc, $pout) = $pgpro->run('init', '-B', $catalog);
	($prc, $pout) = $pgpro->run('add-instance', '-B', $catalog, '-D', $source->data_dir, '--instance', 'src')
	  if $prc == 0;
	$source->append_conf('postgresql.conf',
		"archive_command = '\"" . $pgpro->path . "\" archive-push -B \"$catalog\" --instance src --wal-file-path=%p "
		  . "--wal-file-name=%f'\n");
	$source->start;
	$source->safe_psql('postgres', 'CREATE EXTENSION ptrack');
	$source->command_ok([ 'pgbench', '-i', '-q', '-s', '2', 'postgres' ], 'pg_probackup: pgbench -i on its source');
	my @conn = ('-h', $source->host, '-p', $source->port, '-d', 'postgres');
	($prc, $pout) = $pgpro->run('backup', '-B', $catalog, '--instance', 'src', '-b', 'FULL', '--no-sync', @conn)
	  if $prc == 0;
	is($prc, 0, 'pg_probackup: a FULL backup in ARCHIVE mode') or diag $pout;
	$source->command_ok([ 'pgbench', '-n', '-c', '2', '-j', '1', '-t', '300', 'postgres' ], 'pgbench after it');
	$source->stop;

	# Restored by pg_probackup over the source (restore_command = archive-get).
	rmtree($source->data_dir);
	($prc, $pout) = $pgpro->run('restore', '-B', $catalog, '--instance', 'src', '-D', $source->data_dir, '--no-sync');
	chmod 0700, $source->data_dir;
	# The follower starts after recovery, when pg_wal no longer reaches back to the FULL's start.
	$source->append_conf('postgresql.conf', "hot_standby = off\n");
	my $pgp_off = log_position($source);
	$source->start;
	wait_until_recovered($source, $pgp_off);
	$source->command_ok([ 'pgbench', '-n', '-c', '2', '-j', '1', '-t', '300', 'postgres' ],
		'pgbench on the server pg_probackup restored');
	($prc, $pout) = $pgpro->run('backup', '-B', $catalog, '--instance', 'src', '-b', 'PTRACK', '--no-sync', @conn);
	is($prc, 0, 'pg_probackup: a PTRACK backup on the restored server, the restored FULL its parent')
	  or diag $pout, "\nptrack_init_lsn() ", init_lsn($source);
	($prc, $pout) = $pgpro->run('validate', '-B', $catalog, '--instance', 'src');
	is($prc, 0, 'pg_probackup: the chain validates') or diag $pout;
	$source->stop;
}

$primary->stop;
# ---- 8. point-in-time recovery with the archived WAL in pg_wal -------------------

# The classic PITR: the base backup restored, the WAL saved from the old
# server copied into pg_wal, recovery to a target before its end, promote.
# The postmaster's scan (wal capture) reads all the WAL pg_wal holds, past
# the target, and writes it as summaries; the new timeline's records after
# the target lie below their end, so the follower must not take them as
# held by those summaries (guard_scan_chain() in capture_wal.cpp).  Whatever
# ptrack_init_lsn() then is, nothing since it (or since the target) may be
# missed.
{
	my $pitr = PostgreSQL::Test::Cluster->new('pitr');
	$pitr->init_from_backup($primary, 'base');
	opendir(my $dh, $archive) or die "opendir $archive: $!";
	my @segments = grep { /^[0-9A-F]{24}$/ } readdir($dh);
	closedir($dh);
	copy("$archive/$_", $pitr->data_dir . "/pg_wal/$_") or die "copy $_: $!" foreach @segments;
	$pitr->append_conf('postgresql.conf',
		"archive_mode = off
restore_command = 'cp \"$archive/%f\" \"%p\"'
"
		  . "recovery_target_lsn = '$target'
recovery_target_action = 'promote'
");
	open(my $fh, '>', $pitr->data_dir . '/recovery.signal') or die "recovery.signal: $!";
	close($fh);
	my $poff = log_position($pitr);
	$pitr->start;
	$pitr->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
	  or die 'the point-in-time recovery did not end';
	$pitr->safe_psql('postgres',
		'CREATE TABLE after_pitr AS SELECT g AS id, md5(g::text) AS t FROM generate_series(1, 20000) g');
	$pitr->command_ok([ 'pgbench', '-n', '-c', '2', '-j', '1', '-t', '200', 'postgres' ],
		'pgbench on the new timeline');
	$pitr->safe_psql('postgres', 'CHECKPOINT');
	my $pinit = init_lsn($pitr);
	my $plog = log_since($pitr, $poff);
	note "point-in-time recovery to $target: ptrack_init_lsn() $pinit, the backup's redo LSN $redo";
	like($plog, qr/recovery stopping/, 'recovery stopped at the target, before the end of the WAL in pg_wal');
	foreach my $l ($redo, $target)
	{
		my $from = lsn_to_int($pinit) > lsn_to_int($l) ? $pinit : $l;
		no_misses_ok($pitr, $from,
			"after point-in-time recovery to $target: every page changed since $from is listed",
			forks => [ 'main', 'vm' ]);
	}
	$pitr->stop;
}

# ---- 9. segments moved under the follower's feet during recovery (wal) -------------

if ($mode eq 'wal')
{
	# More segments in the archive, so that recovery can be held with two
	# segments restored that the follower has not read yet.
	$primary->start;
	my $target_segment = $primary->safe_psql('postgres', "SELECT pg_walfile_name('$target')");
	for my $i (1 .. 4)
	{
		$primary->safe_psql('postgres', "INSERT INTO after_backup SELECT g, 'more $i' FROM generate_series(1, 2000) g");
		$primary->safe_psql('postgres', 'SELECT pg_switch_wal()');
	}
	archive_everything($primary);
	$primary->stop;

	# The segment name $n after $name (16 MB segments, the tests' default).
	my $next_segment = sub {
		my ($name, $n) = @_;
		my ($tli, $log, $seg) = map { hex } unpack('A8 A8 A8', $name);
		my $no = $log * 0x100 + $seg + $n;
		return sprintf('%08X%08X%08X', $tli, int($no / 0x100), $no % 0x100);
	};
	my $g1 = $next_segment->($target_segment, 1);
	my $g2 = $next_segment->($target_segment, 2);
	my $g3 = $next_segment->($target_segment, 3);
	ok(-f "$archive/$g3", "the archive holds $g3");

	# restore_command holds every segment named >= the one in $hold (none without the file).
	my $gatedir = PostgreSQL::Test::Utils::tempdir('gate');
	my $hold = "$gatedir/hold";
	open(my $gfh, '>', "$gatedir/gate") or die "$gatedir/gate: $!";
	print $gfh <<'GATE';
use strict;
use File::Copy qw(copy);
my ($archive, $hold, $f, $p) = @ARGV;
while ($f =~ /^[0-9A-F]{24}$/)
{
	open(my $h, '<', $hold) or last;
	my $gate = <$h>;
	close $h;
	last if !defined $gate || $f lt $gate;    # held: segments named >= the gate
	select(undef, undef, undef, 0.1);
}
copy("$archive/$f", $p) or exit 1;
GATE
	close $gfh;
	my $set_hold = sub {
		open(my $h, '>', "$hold.new") or die "$hold: $!";
		print $h $_[0];
		close $h;
		rename("$hold.new", $hold) or die "rename $hold: $!";
	};
	$set_hold->($g1);
	my ($moved) = restore_from_archive('moved', "\"$^X\" \"$gatedir/gate\" \"$archive\" \"$hold\" \"%f\" \"%p\"");
	$moved->append_conf('postgresql.conf', "hot_standby = on\n");
	my $moff = log_position($moved);
	$moved->start;
	$moved->wait_for_log(qr/ready to accept read-only connections/, $moff);
	my $caught_up = 'SELECT follower_lsn >= pg_last_wal_replay_lsn() FROM ptrack_status()';
	$moved->poll_query_until('postgres', $caught_up)
	  or die 'the follower did not catch up with recovery held before ' . $g1;
	my $fpid = follower_pid($moved);
	kill 'STOP', $fpid;
	# Recovery restores and replays $g1 and $g2, then waits for $g3.
	$set_hold->($g3);
	my $g2_start = sprintf('%X/%X', hex(substr($g2, 8, 8)), hex(substr($g2, 16, 8)) * 0x1000000);
	my $wal = $moved->data_dir . '/pg_wal';
	$moved->poll_query_until('postgres', "SELECT pg_last_wal_replay_lsn() > '$g2_start'")
	  or die "recovery did not reach $g2 ($g2_start)";
	ok(-f "$wal/$g1" && -f "$wal/$g2", "recovery restored $g1 and $g2 into pg_wal");
	rename("$wal/$g1", "$wal/$g1.partial") or die "rename $g1: $!";
	rename("$wal/$g2", "$wal/$g2.away") or die "rename $g2: $!";
	kill 'CONT', $fpid;
	sleep 2;
	rename("$wal/$g2.away", "$wal/$g2") or die "rename $g2 back: $!";
	$moved->poll_query_until('postgres', $caught_up)
	  or diag 'the follower did not catch up with recovery after the moves';
	rename("$wal/$g1.partial", "$wal/$g1") or die "rename $g1 back: $!";
	unlink $hold;
	wait_until_recovered($moved, $moff);
	my $minit = init_lsn($moved);
	my $mlog = log_since($moved, $moff);
	like($mlog, qr/ptrack WAL follower reads "pg_wal\/$g1\.partial", renamed at the end of recovery/,
		"the follower read $g1 as $g1.partial");
	unlike($mlog, qr/has already been removed|WARNING:  ptrack restarted/,
		"tracking did not restart ($g2 missing for 2 s)")
	  or diag join("\n", grep { /ptrack/ } split /\n/, $mlog);
	ok(lsn_to_int($minit) <= $redo_int, "ptrack_init_lsn() $minit is still <= the redo LSN $redo");
	$moved->safe_psql('postgres', 'CREATE TABLE after_moved AS SELECT g AS id FROM generate_series(1, 10000) g');
	$moved->safe_psql('postgres', 'CHECKPOINT');
	no_misses_ok($moved, $redo, "the oracle since $redo after segments moved during recovery",
		forks => [ 'main', 'vm' ])
	  if lsn_to_int($minit) <= $redo_int;
	$moved->stop;
}

done_testing();
