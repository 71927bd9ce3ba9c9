#!/usr/bin/perl
# Copyright (c) the ptrack authors
#
# main-job.pl -- the README's main job, end to end on a throwaway cluster:
# pgbench -i, full backup, pgbench run, incremental backup through
# ptrack_get_pagemapset(), restore into a new data directory, verification
# against the source (every row of every table, amcheck), and a summary.
#
# Run it through scripts/main-job.sh, which picks the server (stock: WAL capture; patched: hooks), builds the
# extension, sets PATH/PERL5LIB/TESTDIR for PostgreSQL::Test::Cluster and
# t/lib, and switches to an unprivileged user when started as root.
#
# Options: --scale N (pgbench scale, >= 10; default 10)
#          --duration S (seconds of pgbench between the backups; default 60)
#          --clients N (pgbench clients; default 4)
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

use Getopt::Long;
use IPC::Run;
use Time::HiRes qw(time);

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use PtrackBackup qw(full_backup incremental_backup restore start_restored);
use PtrackVerify qw(compare_clusters);

my %opt = (scale => 10, duration => 60, clients => 4);
GetOptions(\%opt, 'scale=i', 'duration=i', 'clients=i')
  or die "usage: $0 [--scale N] [--duration S] [--clients N]\n";
die "--scale must be at least 10\n" if $opt{scale} < 10;
die "--duration must be positive\n" if $opt{duration} < 1;

sub say_tty
{
	my $line = join('', @_) . "\n";
	print $tty $line;
	print STDOUT $line;    # the log file too
	return;
}

sub mb { return sprintf('%.1f MB', $_[0] / 1048576); }

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
	say_tty("ptrack main job: pgbench scale $opt{scale}, $opt{duration} s "
		  . "run with $opt{clients} clients, between a full and an incremental backup");

	my $node = PostgreSQL::Test::Cluster->new('main_job_source');
	$node->init(allows_streaming => 1);
	$node->append_conf(
		'postgresql.conf', q{
shared_preload_libraries = 'ptrack'
ptrack.map_size = 64MB
wal_level = replica
shared_buffers = 128MB
max_connections = 40
max_wal_size = 1GB
checkpoint_timeout = 30s
});
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION ptrack');
	my $version = $node->safe_psql('postgres',
		"SELECT extversion FROM pg_extension WHERE extname = 'ptrack'");

	$t = time;
	run_client($node, 'pgbench', '-i', '-q', '-s', $opt{scale}, 'postgres');
	say_tty(sprintf('pgbench -i -s %d: %.1f s', $opt{scale}, time - $t));

	my $backups = PostgreSQL::Test::Utils::tempdir('backups');
	$t = time;
	my $l0 = full_backup($node, "$backups/full");
	say_tty(sprintf('full backup (pg_basebackup) at %s: %.1f s', $l0, time - $t));

	$t = time;
	my $out = run_client($node, 'pgbench', '-n', '-c', $opt{clients},
		'-j', ($opt{clients} > 1 ? 2 : 1), '-T', $opt{duration}, 'postgres');
	my ($tx) = $out =~ /number of transactions actually processed: (\d+)/;
	my ($tps) = $out =~ /tps = ([\d.]+)/;
	say_tty(sprintf('pgbench run: %d transactions in %.0f s (%.0f tps)',
		$tx // 0, time - $t, $tps // 0));

	$t = time;
	my $st = incremental_backup($node, "$backups/incr", $l0, "$backups/full");
	my $incr_s = time - $t;

	my $restored = PostgreSQL::Test::Cluster->new('main_job_restored');
	$t = time;
	restore("$backups/full", "$backups/incr", $restored->data_dir,
		tablespace_dir => $restored->basedir . '/tblspc');
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

	my $pct = 100 * $st->{bytes_copied} / $st->{db_bytes};
	say_tty('');
	say_tty("==================== ptrack $version main job summary ====================");
	say_tty(sprintf('%-34s %s (%d files)', 'database size:',
		mb($st->{db_bytes}), $st->{files}));
	say_tty(sprintf('%-34s %d files, %d pages (%s) changed since %s',
		'ptrack_get_pagemapset:', $st->{pagemap_rows}, $st->{pagemap_pages},
		mb($st->{pagemap_pages} * 8192), $l0));
	say_tty(sprintf('%-34s %.1f ms server-side (first call in the session; '
		  . 'called again: %.1f ms)', '  which took:',
		$st->{pagemapset_ms}, $st->{pagemapset_warm_ms}));
	say_tty(sprintf('%-34s %d pages in %d files = %s',
		'changed pages copied:', $st->{changed_pages}, $st->{delta_files},
		mb($st->{changed_pages} * 8192)));
	say_tty(sprintf('%-34s %d (%.1f%% of the pages copied)',
		'  of which page LSN < start LSN:', $st->{old_lsn_pages},
		$st->{changed_pages} ? 100 * $st->{old_lsn_pages} / $st->{changed_pages} : 0));
	say_tty(sprintf('%-34s %d files = %s (new relation files and '
		  . 'non-relation files)', 'files copied whole:', $st->{whole_files},
		mb($st->{whole_bytes})));
	say_tty(sprintf('%-34s %d files (no pagemap row)', 'unchanged relation files:',
		$st->{unchanged_files}));
	say_tty(sprintf('%-34s %s of %s = %.2f%% of the database',
		'data copied by the incremental:', mb($st->{bytes_copied}),
		mb($st->{db_bytes}), $pct));
	say_tty(sprintf('%-34s %s (%d segments)', 'WAL copied:',
		mb($st->{wal_bytes}), $st->{wal_segments}));
	say_tty(sprintf('%-34s %.1f s; restore + recovery %.1f s; verification %.1f s',
		'incremental backup took:', $incr_s, $restore_s, $verify_s));
	say_tty(sprintf('%-34s %d', 'blocks ptrack failed to list:',
		$st->{unmarked_new_blocks}));
	say_tty('');
	say_tty(sprintf('%-10s %-24s %12s  %s', 'database', 'table', 'rows', 'result'));
	for my $r (@{ $report{tables} })
	{
		say_tty(sprintf('%-10s %-24s %12s  %s', @$r));
	}
	my $am = $report{amcheck};
	say_tty('');
	say_tty(sprintf('amcheck on the restored cluster: %d btree indexes '
		  . '(bt_index_check heapallindexed), %d relations (verify_heapam): %s',
		$am->{indexes}, $am->{relations},
		@{ $am->{problems} } ? scalar(@{ $am->{problems} }) . ' problems'
		: 'no corruption'));
	say_tty('pgbench invariant (balances = sum of history) on the restored cluster: '
		  . ($inv eq 't' ? 'holds' : 'BROKEN'));
	push @problems, "ptrack failed to list $st->{unmarked_new_blocks} blocks "
	  . "added after the full backup: @{ $st->{unmarked_examples} }"
	  if $st->{unmarked_new_blocks};

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
		  . 'the incremental copied %.2f%% of the database',
		scalar @{ $report{tables} }, $pct));
	return 0;
}
