#!/usr/bin/perl
# Copyright (c) the ptrack authors
#
# main-job.pl -- the README's main job: what ptrack saves a DBA, measured on a
# throwaway cluster with a realistic day of changes.
#
#   1. pgbench -i -s N (default 10: 1 M accounts, ~160 MB), then a FULL
#      backup;
#   2. "a day": pgbench transactions (TPC-B-like, balances stay consistent)
#      whose accounts are drawn from the newest --hot percent of accounts
#      (default 3%), and --new percent (default 1%) of new accounts inserted;
#      ptrack_get_change_stat() then says what share of the blocks changed;
#   3. the incremental backup, against the two alternatives: another full
#      backup, and reading every page to find the changed ones (what a backup
#      tool does without ptrack: pg_probackup's DELTA mode);
#   4. a restore of full + incremental, verified against the source (every
#      row of every table, amcheck, pgbench's balance invariant).
#
# With pg_probackup (--pg-probackup PATH, else $PTRACK_PG_PROBACKUP, else
# pg_probackup in PATH), step 1 is `pg_probackup backup -b FULL --stream`, and
# step 3 runs `-b DELTA` (then deleted, so that both are taken against the
# FULL) and `-b PTRACK`; the restore is pg_probackup's.  Without it, the
# project's own tool (t/lib/PtrackBackup.pm: pg_basebackup for the full
# backup, ptrack_get_pagemapset() for the incremental) is used, and "reading
# every page" is a scan of every relation file's page LSNs
# (t/lib/PtrackOracle.pm), which is the part of a DELTA backup ptrack saves.
#
# Run it through scripts/main-job.sh, which picks the server, builds the
# extension, sets PATH/PERL5LIB/TESTDIR for PostgreSQL::Test::Cluster and
# t/lib, and switches to an unprivileged user when started as root.
#
# Options: --scale N          pgbench scale, >= 10 (default 10)
#          --transactions N   pgbench transactions of the day (default 20000)
#          --hot P            percent of the accounts the day updates (2)
#          --new P            percent of new accounts the day inserts (1)
#          --clients N        pgbench clients (default 4)
#          --pg-probackup P   pg_probackup binary; --builtin: do not use one
# Exit status: 0 when the restored cluster matches the source and amcheck is
# clean, 1 otherwise.

use strict;
use warnings;

# PostgreSQL::Test::Utils sends STDOUT and STDERR to its log file; keep the
# terminal for the summary.
my $tty;
BEGIN
{
	open($tty, '>&', \*STDOUT) or die "cannot dup STDOUT: $!";
	$tty->autoflush(1);
}

use File::Find ();
use Getopt::Long;
use IPC::Run;
use Time::HiRes qw(time);

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use PtrackBackup qw(full_backup incremental_backup restore start_restored);
use PtrackOracle qw(relation_files page_lsns lsn_to_int);
use PtrackVerify qw(compare_clusters);

my %opt = (
	scale => 10,
	transactions => 20000,
	hot => 2,
	new => 1,
	clients => 4,
	'pg-probackup' => $ENV{PTRACK_PG_PROBACKUP});
GetOptions(\%opt, 'scale=i', 'transactions=i', 'hot=f', 'new=f', 'clients=i',
	'pg-probackup=s', 'builtin')
  or die "usage: $0 [--scale N] [--transactions N] [--hot P] [--new P] "
  . "[--clients N] [--pg-probackup PATH | --builtin]\n";
die "--scale must be at least 10\n" if $opt{scale} < 10;
die "--transactions must be positive\n" if $opt{transactions} < 1;
die "--hot must be in (0, 100]\n" if $opt{hot} <= 0 || $opt{hot} > 100;
die "--new must be in [0, 100]\n" if $opt{new} < 0 || $opt{new} > 100;

# pg_probackup: the option, else $PTRACK_PG_PROBACKUP, else the PATH.
my $pgpro;
unless ($opt{builtin})
{
	if (defined $opt{'pg-probackup'} && $opt{'pg-probackup'} ne '')
	{
		$pgpro = $opt{'pg-probackup'};
		die "pg_probackup \"$pgpro\" is not executable\n" unless -x $pgpro;
	}
	else
	{
		# Packages name the binary after the server's major version.
		my ($major) = `pg_config --version` =~ /PostgreSQL (\d+)/;
		for my $dir (split /:/, $ENV{PATH} // '')
		{
			for my $name ('pg_probackup', 'pg_probackup-' . ($major // 15))
			{
				if (-x "$dir/$name")
				{
					$pgpro = "$dir/$name";
					last;
				}
			}
			last if $pgpro;
		}
	}
}

sub say_tty
{
	my $line = join('', @_) . "\n";
	print $tty $line;
	print STDOUT $line;    # the log file too
	return;
}

sub mb { return sprintf('%.1f MB', $_[0] / 1048576); }

# Total size of the files under $dir.
sub du
{
	my ($dir) = @_;
	my $total = 0;
	File::Find::find(
		{ wanted => sub { $total += -s $_ if -f $_ }, no_chdir => 1 }, $dir);
	return $total;
}

# Runs a client program against $node; returns its stdout, dies on failure.
sub run_client
{
	my ($node, @cmd) = @_;
	local %ENV = (%ENV, PGHOST => $node->host, PGPORT => $node->port);
	my ($out, $err) = ('', '');
	print STDOUT "# running: @cmd\n";
	IPC::Run::run(\@cmd, '>', \$out, '2>', \$err)
	  or die "@cmd failed:\n$err";
	print STDOUT $out, $err;
	return $out;
}

# Bytes this process has read through read() and the like, from files or
# the page cache alike (Linux: /proc/self/io rchar); undef elsewhere.
sub rchar
{
	my ($pid) = @_;
	open(my $fh, '<', '/proc/' . ($pid // 'self') . '/io') or return undef;
	my ($n) = join('', <$fh>) =~ /^rchar: (\d+)/m;
	close($fh);
	return $n;
}

# Runs pg_probackup; returns its output (stdout and stderr), dies on failure.
# In list context also the bytes it read (rchar of a shell that waited for
# it: a reaped child's counts are added to its parent's), or undef.
sub run_pgpro
{
	my (@args) = @_;
	my $out = '';
	print STDOUT "# running: $pgpro @args\n";
	IPC::Run::run(
		[
			'sh', '-c',
			'"$0" "$@"; rc=$?; '
			  . 'grep "^rchar:" /proc/$$/io 2>/dev/null | sed "s/^/pg_probackup-read /"; '
			  . 'exit $rc',
			$pgpro, @args
		],
		'>&', \$out) or die "pg_probackup @args failed:\n$out";
	my ($read) = $out =~ s/^pg_probackup-read rchar: (\d+)\n//m ? ($1) : (undef);
	print STDOUT $out;
	return wantarray ? ($out, $read) : $out;
}

# Die on ^C/TERM, so that PostgreSQL::Test::Cluster's END block still stops
# the servers.
$SIG{INT} = $SIG{TERM} = sub { die "interrupted\n"; };

my $status = eval { main(); };
if (!defined $status)
{
	say_tty("main job FAILED: $@");
	say_tty("logs: $PostgreSQL::Test::Utils::log_path");
	$status = 1;
}
exit $status;

sub main
{
	my $t;
	my $tool = $pgpro ? 'pg_probackup' : 'the built-in backup tool (t/lib/PtrackBackup.pm)';
	say_tty("ptrack main job: pgbench scale $opt{scale}; a day of "
		  . "$opt{transactions} transactions on the newest $opt{hot}% of the "
		  . "accounts and $opt{new}% new accounts; backups with $tool");

	my $node = PostgreSQL::Test::Cluster->new('main_job_source');
	$node->init(allows_streaming => 1);
	# The map: 16 MB is ~100 times what this day needs (README: about 160
	# bytes per block changed between two backups); pg_probackup copies it
	# into its FULL backup.
	$node->append_conf(
		'postgresql.conf', q{
shared_preload_libraries = 'ptrack'
ptrack.map_size = 16MB
wal_level = replica
shared_buffers = 128MB
max_connections = 40
max_wal_size = 1GB
checkpoint_timeout = 5min
autovacuum_naptime = 10s
});
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION ptrack');
	my $version = $node->safe_psql('postgres',
		"SELECT extversion FROM pg_extension WHERE extname = 'ptrack'");
	my $capture = $node->safe_psql('postgres', 'SHOW ptrack.capture');
	say_tty("server: " . $node->safe_psql('postgres', 'SELECT version()'));
	say_tty("ptrack $version, capture: $capture");

	$t = time;
	run_client($node, 'pgbench', '-i', '-q', '-s', $opt{scale}, 'postgres');
	# Settled data, as after yesterday's load: otherwise the full backup's own
	# checkpoint writes the pages the load dirtied, after its start LSN, and
	# hooks capture (which marks writes) lists them as changed since then.
	$node->safe_psql('postgres', 'VACUUM ANALYZE');
	$node->safe_psql('postgres', 'CHECKPOINT');
	say_tty(sprintf('pgbench -i -s %d: %.1f s', $opt{scale}, time - $t));

	# ---- the full backup -----------------------------------------------------
	my $backups = PostgreSQL::Test::Utils::tempdir('backups');
	my $catalog = "$backups/pg_probackup";
	my @pgpro_backup = ('backup', '-B', $catalog, '--instance', 'main',
		'--stream', '--no-sync', '-h', $node->host, '-p', $node->port,
		'-d', 'postgres');
	my (%full, $l0);
	$t = time;
	if ($pgpro)
	{
		say_tty('pg_probackup: ' . (run_pgpro('--version') =~ s/\n//gr));
		run_pgpro('init', '-B', $catalog);
		run_pgpro('add-instance', '-B', $catalog, '-D', $node->data_dir,
			'--instance', 'main');
		my ($out, $read) = run_pgpro(@pgpro_backup, '-b', 'FULL');
		$full{s} = time - $t;
		$full{read} = $read;
		%full = (%full, pgpro_backup_info($catalog, $out));
		$l0 = $full{start_lsn};
		$full{name} = 'pg_probackup -b FULL';
	}
	else
	{
		$l0 = full_backup($node, "$backups/full");
		$full{s} = time - $t;
		$full{bytes} = du("$backups/full/data");
		$full{name} = 'full backup (pg_basebackup)';
	}
	say_tty(sprintf('%s at %s: %s in %.1f s', $full{name}, $l0,
		mb($full{bytes}), $full{s}));

	# ---- the day -------------------------------------------------------------
	my $naccounts = 100000 * $opt{scale};
	my $hot = int($naccounts * $opt{hot} / 100) || 1;
	my $script = "$backups/day.sql";
	open(my $fh, '>', $script) or die "$script: $!";
	print $fh <<'EOS';
\set aid :naccounts - random(0, :hot - 1)
\set bid random(1, :scale)
\set tid random(1, 10 * :scale)
\set delta random(-5000, 5000)
BEGIN;
UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;
UPDATE pgbench_tellers SET tbalance = tbalance + :delta WHERE tid = :tid;
UPDATE pgbench_branches SET bbalance = bbalance + :delta WHERE bid = :bid;
INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (:tid, :bid, :aid, :delta, CURRENT_TIMESTAMP);
END;
EOS
	close($fh);
	$t = time;
	my $per_client = int($opt{transactions} / $opt{clients}) || 1;
	my $out = run_client(
		$node, 'pgbench', '-n',
		'-c', $opt{clients},
		'-j', ($opt{clients} > 1 ? 2 : 1),
		'-t', $per_client,
		'-D', "naccounts=$naccounts",
		'-D', "hot=$hot",
		'-D', "scale=$opt{scale}",
		'-f', $script, 'postgres');
	my ($tx) = $out =~ /number of transactions actually processed: (\d+)/;
	my ($tps) = $out =~ /tps = ([\d.]+)/;
	my $new = int($naccounts * $opt{new} / 100);
	$node->safe_psql('postgres',
		"INSERT INTO pgbench_accounts (aid, bid, abalance, filler) "
		  . "SELECT a, (a - 1) / 100000 + 1, 0, '' "
		  . "FROM generate_series($naccounts + 1, $naccounts + $new) a")
	  if $new > 0;
	say_tty(sprintf('the day: %d transactions (%.0f tps) on accounts %d..%d, '
		  . '%d new accounts: %.1f s',
		$tx // 0, $tps // 0, $naccounts - $hot + 1, $naccounts, $new, time - $t));

	# What changed, by ptrack's count, against the relation pages there are.
	$node->safe_psql('postgres', 'CHECKPOINT');
	my ($files_changed, $pages_changed) = split /\|/,
	  $node->safe_psql('postgres',
		"SELECT files, pages FROM public.ptrack_get_change_stat('$l0'::pg_lsn)");
	my $all_pages = 0;
	$all_pages += $_->{nblocks}
	  for grep { !$_->{temp} && !$_->{unlogged} } relation_files($node->data_dir);
	say_tty(sprintf('ptrack_get_change_stat: %d of %d relation pages changed '
		  . '(%.2f%%) in %d files', $pages_changed, $all_pages,
		100 * $pages_changed / $all_pages, $files_changed));

	# ---- incremental vs. reading every page ----------------------------------
	my (%scan, %incr, $restore);
	if ($pgpro)
	{
		# DELTA first, then deleted: the PTRACK backup's parent is the FULL.
		$t = time;
		my ($dout, $dread) = run_pgpro(@pgpro_backup, '-b', 'DELTA');
		%scan = (s => time - $t, pgpro_backup_info($catalog, $dout),
			read => $dread, name => 'pg_probackup -b DELTA');
		run_pgpro('delete', '-B', $catalog, '--instance', 'main', '-i',
			$scan{id});
		$t = time;
		my ($pout, $pread) = run_pgpro(@pgpro_backup, '-b', 'PTRACK');
		%incr = (s => time - $t, pgpro_backup_info($catalog, $pout),
			read => $pread, name => 'pg_probackup -b PTRACK');
		say_tty(scalar run_pgpro('show', '-B', $catalog, '--instance', 'main'));
	}
	else
	{
		# The scan a backup tool needs without ptrack: every page's LSN.
		my $r0 = rchar();
		$t = time;
		my $since = lsn_to_int($l0);
		my ($read, $newer) = (0, 0);
		for my $f (relation_files($node->data_dir))
		{
			next if $f->{temp} || $f->{unlogged};
			for my $lsn (page_lsns($node->data_dir, $f->{path}))
			{
				$read++;
				$newer++ if $lsn >= $since;
			}
		}
		%scan = (s => time - $t, name => 'without ptrack: page LSN scan',
			read => (defined $r0 ? rchar() - $r0 : undef),
			bytes => $newer * 8192);

		$r0 = rchar();
		$t = time;
		my $st = incremental_backup($node, "$backups/incr", $l0, "$backups/full");
		%incr = (s => time - $t, name => 'ptrack incremental',
			read => (defined $r0 ? rchar() - $r0 : undef),
			bytes => $st->{bytes_copied}, wal => $st->{wal_bytes},
			pagemapset_ms => $st->{pagemapset_ms}, st => $st);
	}

	# ---- restore and verify --------------------------------------------------
	my $restored = PostgreSQL::Test::Cluster->new('main_job_restored');
	$t = time;
	if ($pgpro)
	{
		run_pgpro('restore', '-B', $catalog, '--instance', 'main', '-D',
			$restored->data_dir, '--no-sync');
	}
	else
	{
		restore("$backups/full", "$backups/incr", $restored->data_dir,
			tablespace_dir => $restored->basedir . '/tblspc');
	}
	start_restored($restored);
	my $restore_s = time - $t;

	$t = time;
	my %report;
	my @problems = compare_clusters($node, $restored, report => \%report);
	# pgbench's own invariant: every transaction adds the same delta to one
	# account, teller and branch and logs it in history.
	my $inv = $restored->safe_psql('postgres',
		'SELECT (SELECT sum(abalance) FROM pgbench_accounts) = '
		  . '(SELECT sum(delta) FROM pgbench_history) AND '
		  . '(SELECT sum(tbalance) FROM pgbench_tellers) = '
		  . '(SELECT sum(delta) FROM pgbench_history) AND '
		  . '(SELECT sum(bbalance) FROM pgbench_branches) = '
		  . '(SELECT sum(delta) FROM pgbench_history)');
	push @problems, 'pgbench balances do not add up on the restored cluster'
	  unless $inv eq 't';
	my $verify_s = time - $t;
	my $st = $incr{st};
	push @problems, "ptrack failed to list $st->{unmarked_new_blocks} blocks "
	  . "added after the full backup: @{ $st->{unmarked_examples} }"
	  if $st && $st->{unmarked_new_blocks};

	# ---- summary -------------------------------------------------------------
	say_tty('');
	say_tty("==================== ptrack $version main job summary ($capture capture) ====================");
	say_tty(sprintf('%-30s %d files, %d pages = %s; %.2f%% of its pages '
		  . 'changed since the full backup', 'database:', $files_changed,
		$all_pages, mb($all_pages * 8192), 100 * $pages_changed / $all_pages));
	say_tty(sprintf('%-32s %10s %10s %8s  %s', '', 'stored', 'read', 'time', ''));
	my $row = sub {
		my ($b, $stored, $what) = @_;
		say_tty(sprintf('%-32s %10s %10s %6.1f s  %s', $b->{name}, $stored,
			(defined $b->{read} ? mb($b->{read}) : '-'), $b->{s}, $what));
	};
	if ($pgpro)
	{
		$row->(\%full, mb($full{bytes}), 'every file');
		$row->(\%scan, mb($scan{bytes}), 'every page of every relation file');
		$row->(\%incr, mb($incr{bytes}), 'the pages ptrack listed');
	}
	else
	{
		$row->(\%full, mb($full{bytes}), 'every file (pg_basebackup: read by the server)');
		$row->(\%scan, '(' . mb($scan{bytes}) . ')',
			'every page; stored would be the pages with an LSN since the full backup');
		$row->(\%incr, mb($incr{bytes}),
			sprintf('the pages ptrack listed, the non-relation files; '
				  . 'ptrack_get_pagemapset: %.0f ms', $incr{pagemapset_ms}));
	}
	say_tty('("read": bytes the backup tool read, from disk or the page cache, '
		  . 'with its validation and WAL: /proc/<pid>/io rchar; pg_probackup 2.5 '
		  . 'reads 64 KB for each page it seeks to, so DELTA\'s count is several '
		  . 'times the cluster)') if $pgpro;
	say_tty('("read": bytes this process read, from disk or the page cache: '
		  . '/proc/self/io rchar)') unless $pgpro;
	say_tty(sprintf('%-36s %.1f%% of the full backup\'s size', 'the incremental stored:',
		100 * $incr{bytes} / $full{bytes}));
	say_tty('(the page cache holds this whole cluster, so reading every page is '
		  . 'cheap here; on a cluster larger than RAM it reads the whole cluster from disk)');
	if ($pgpro)
	{
		# wal capture keeps its files in pg_wal/ptrack, which pg_probackup does not copy.
		say_tty(sprintf('(of the FULL backup, %s is ptrack.map, which pg_probackup cannot '
			  . 'leave out)', mb($full{ptrack_bytes}))) if $full{ptrack_bytes} > 0;
		say_tty('(each --stream backup waits for the WAL streamer to pass its stop LSN, '
			  . 'up to 10 s on an idle server)');
	}
	say_tty(sprintf('%-30s restore + recovery %.1f s; verification %.1f s',
		'restore:', $restore_s, $verify_s));
	say_tty('');
	say_tty(sprintf('%-10s %-24s %12s  %s', 'database', 'table', 'rows', 'result'));
	for my $r (@{ $report{tables} })
	{
		say_tty(sprintf('%-10s %-24s %12s  %s', @$r));
	}
	my $am = $report{amcheck};
	say_tty(sprintf('amcheck on the restored cluster: %d btree indexes '
		  . '(bt_index_check heapallindexed), %d relations (verify_heapam): %s',
		$am->{indexes}, $am->{relations},
		@{ $am->{problems} } ? scalar(@{ $am->{problems} }) . ' problems'
		: 'no corruption'));
	say_tty('pgbench invariant (balances = sum of history) on the restored cluster: '
		  . ($inv eq 't' ? 'holds' : 'BROKEN'));
	say_tty(sprintf('blocks ptrack failed to list: %d', $st->{unmarked_new_blocks}))
	  if $st;

	$restored->stop;
	$node->stop;

	say_tty('');
	if (@problems)
	{
		say_tty("  $_") for @problems;
		say_tty('RESULT: MISMATCH -- the restored cluster differs from the source');
		say_tty("logs: $PostgreSQL::Test::Utils::log_path");
		return 1;
	}
	say_tty(sprintf('RESULT: MATCH -- %d tables identical, amcheck clean; '
		  . 'the incremental stored %s, %.1f%% of a full backup',
		scalar @{ $report{tables} }, mb($incr{bytes}),
		100 * $incr{bytes} / $full{bytes}));
	return 0;
}

# What pg_probackup says about the backup whose output is $out: id, start
# LSN, bytes stored (data-bytes), bytes of ptrack's files in it.
sub pgpro_backup_info
{
	my ($catalog, $out) = @_;
	my ($id) = $out =~ /INFO: Backup (\w+) completed/
	  or die "pg_probackup did not say which backup it completed:\n$out";
	my $json = run_pgpro('show', '-B', $catalog, '--instance', 'main', '-i',
		$id, '--format=json');
	my ($bytes) = $json =~ /"data-bytes"\s*:\s*(\d+)/
	  or die "no data-bytes for backup $id:\n$json";
	my ($start) = $json =~ /"start-lsn"\s*:\s*"([0-9A-F]+\/[0-9A-F]+)"/
	  or die "no start-lsn for backup $id:\n$json";
	my $ptrack_bytes = 0;
	my $db = "$catalog/backups/main/$id/database";
	opendir(my $d, $db) or die "$db: $!";
	$ptrack_bytes += -s "$db/$_" for grep { /^ptrack\./ } readdir($d);
	closedir($d);
	return (id => $id, start_lsn => $start, bytes => $bytes,
		ptrack_bytes => $ptrack_bytes);
}
