#!/usr/bin/perl
# Copyright (c) the ptrack authors
#
# soak.pl -- the randomized soak: hunts for a block that ptrack leaves out of
# an answer (a false negative, silent data loss in someone's incremental
# backup) with random work, random faults and real pg_probackup backups.
# Run it through scripts/soak.sh, which finds the server, installs ptrack
# into a private copy of it, finds pg_probackup and sets up the environment
# (PATH, PERL5LIB, TESTDIR) for PostgreSQL::Test::Cluster and t/lib.
#
# What happens, all of it drawn from one generator seeded by --seed
# (PtrackSoak::Rng; each client derives its own stream):
#   - a primary (and with --standby a streaming standby) with ptrack, random
#     settings (data checksums, checkpoint_timeout, the hooks' map size, the
#     follower's WAL reader: ptrack.wal_reader = compare fails the soak at
#     the first record its two readers read differently; its file watch on
#     or off), two
#     tablespaces (one on a tiny file system when scripts/soak.sh could
#     mount one), a database for the clients and a template with tables;
#   - --clients processes running the weighted operation mix of
#     PtrackSoak::Workload;
#   - the driver, every few seconds, either injects a fault
#     (PtrackSoak::Faults) or takes a pg_probackup backup
#     (PtrackSoak::Backups): FULL to start a chain, then PTRACK, sometimes a
#     new FULL; most with the clients paused (the restored data is then
#     compared with the source), some under load, some right after a crash;
#   - after every backup, PtrackSoak::Checks: the page-LSN and extension
#     oracles and ptrack_verify() from the previous backup's start LSN, then
#     the chain restored into a scratch directory, started, compared and
#     amchecked.
# A FULL backup that tracking restarts make necessary (ptrack_init_lsn()
# past the previous backup's start, after a fault) is correct behaviour: it
# is counted, and the checks against the older backup are skipped.
#
# On a miss or a failed restore it prints the seed, the backup, the missed
# blocks with their files, relations and LSNs and the last operations and
# faults, keeps every data directory, and exits 1.  The last line is always
#   soak: <version> <capture> seed S: N operations, F faults, B backups,
#   R restores, K blocks checked, M missed

use strict;
use warnings;

# PostgreSQL::Test::Utils sends STDOUT and STDERR to its log file; keep the
# terminal for the progress and the summary.
my $tty;

BEGIN
{
	open($tty, '>&', \*STDOUT) or die "cannot dup STDOUT: $!";
	$tty->autoflush(1);
}

use File::Path qw(make_path rmtree);
use Getopt::Long;
use IPC::Run;
use Time::HiRes qw(sleep time);

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More ();
use PtrackCluster qw(ptrack_node new_node server_has_hooks server_major log_position log_since);
use PtrackOracle qw(block_counts lsn_to_int);
use PtrackVerify qw(cluster_digests);
use PtrackSoak::Rng;
use PtrackSoak::Log;
use PtrackSoak::Workload
  qw(start_clients pause_clients resume_clients stop_clients client_counts write_primary
  setup_workload_objects);
use PtrackSoak::Node;
use PtrackSoak::Faults;
use PtrackSoak::Backups;
use PtrackSoak::Checks;

# Test::More's notes (PostgreSQL::Test::Cluster makes some) go to the log
# file, as everything else but the progress lines.
Test::More->builder->$_(\*STDOUT) for qw(output failure_output todo_output);

my %opt = (clients => 3);
GetOptions(\%opt, 'pg-version=s', 'capture=s', 'minutes=f', 'seed=s', 'standby', 'clients=i',
	'big-table-mb=i', 'pg-probackup=s', 'tiny-dir=s', 'keep', 'faults=s')
  or die "soak.pl: bad options (run it through scripts/soak.sh --help)\n";
for my $o (qw(pg-version capture minutes seed pg-probackup))
{
	die "soak.pl: --$o is required\n" unless defined $opt{$o};
}
die "soak.pl: --capture must be hooks or wal\n" unless $opt{capture} =~ /^(hooks|wal)$/;
die "soak.pl: --seed must be a non-negative integer\n" unless $opt{seed} =~ /^\d+$/;
die "soak.pl: --clients must be 1 to 8\n" unless $opt{clients} >= 1 && $opt{clients} <= 8;
$opt{'big-table-mb'} //= $opt{minutes} >= 30 ? 1100 : 0;

my $run = $ENV{TESTDIR} // die "soak.pl: TESTDIR is not set (run it through scripts/soak.sh)\n";
my $log = PtrackSoak::Log->new("$run/events.log");
my $rng = PtrackSoak::Rng->new($opt{seed}, 'driver');
my $t_start = time;
my $deadline = $t_start + 60 * $opt{minutes};
my $version = $opt{'pg-version'};

my %count = (faults => 0, backups => 0, restores => 0, blocks => 0, missed => 0,
	verify_pages => 0, forced_full => 0, unexplained_restarts => 0, under_load => 0,
	after_crash => 0, full => 0, ptrack => 0, compared => 0);
my %fault_count;
my $faults_since_backup = 0;
my @failures;
my ($cluster, $faults, $pgpb, $clients);
my %log_offset; # per node: where its server log stood at the last backup
my @chains;    # [ { full => backup, backups => [ ... ] } ], newest last
my $prev;      # the last backup taken: { id, start_lsn, sizes, chain, ... }

sub elapsed { return sprintf('%4ds', time - $t_start); }

sub say_tty
{
	my $line = join('', @_) . "\n";
	print $tty $line;
	print STDOUT $line;
	return;
}

sub event
{
	my ($text) = @_;
	$log->line('driver', $text);
	say_tty('soak: [' . elapsed() . "] $text");
	return;
}

# Die on ^C/TERM, so that the END blocks stop the clients and the servers.
# Once: the same signal often comes twice (^C reaches the whole process
# group, and scripts/soak.sh passes it on too), and a second die would cut
# the report, the summary and the clients' stop short.
$SIG{INT} = $SIG{TERM} = sub {
	$SIG{INT} = $SIG{TERM} = 'IGNORE';
	die "interrupted\n";
};

END
{
	my $status = $?;
	if ($clients)
	{
		kill 'KILL', grep { kill 0, $_ } @$clients;
		waitpid($_, 0) for @$clients;
	}
	$? = $status;
}

my $status = eval { main(); 1 } ? (@failures ? 1 : 0) : do {
	my $err = $@ =~ s/\s+\z//r;
	push @failures, "the soak stopped: $err";
	say_tty("soak: FAILED: $err");
	report_failure();
	1;
};
summary();
exit $status;

sub main
{
	my $capture = $opt{capture};
	my $has_hooks = server_has_hooks();
	die "soak.pl: --capture hooks needs a server built with the core patch; this one has no hooks\n"
	  if $capture eq 'hooks' && !$has_hooks;
	my $bindir = `pg_config --bindir`;
	chomp $bindir;
	# On a patched build, wal capture runs its postgres-nohooks when there is
	# one (as on a distribution's server), else the hooks' binary with
	# ptrack.capture = wal.
	my $stock = $capture eq 'wal' && $has_hooks && -x "$bindir/postgres-nohooks" ? 1 : 0;
	my $capture_conf = $stock || !$has_hooks ? '' : "ptrack.capture = $capture\n";

	my $checksums = $rng->chance(0.5) ? 1 : 0;
	my $checkpoint_timeout = $rng->pick('30s', '60s', '150s');
	my $map_size = $capture eq 'hooks' ? $rng->pick('1MB', '8MB', '64MB') : '64MB';
	# The follower's reader (a developer option; inplace is the
	# default): compare reads every record of the steady state with both
	# readers, and an ERROR at the first difference fails the soak
	# (check_reader_log()).  Its own stream, so that a seed draws the same
	# sequence of everything else as before.
	my $wal_reader = $capture eq 'wal'
	  ? PtrackSoak::Rng->new($opt{seed}, 'wal_reader')->pick('inplace', 'compare')
	  : undef;
	# The file watch (growth_watch.h) on whatever the cluster's size, or only
	# from its default number of relation files (more than the soak makes).
	my $watch_min_files = $capture eq 'wal' ? PtrackSoak::Rng->new($opt{seed}, 'file_watch')->pick(0, 10000) : undef;
	say_tty("soak: PostgreSQL $version (" . `pg_config --version` =~ s/\n//r . ", $bindir"
		  . ($stock ? ', postgres-nohooks' : '') . "), $capture capture, seed $opt{seed}, "
		  . "$opt{minutes} minutes, $opt{clients} clients"
		  . ($opt{standby} ? ', with a standby' : '')
		  . ($opt{'big-table-mb'} ? ", a table grown to $opt{'big-table-mb'} MB" : ''));
	say_tty("soak: data checksums " . ($checksums ? 'on' : 'off')
		  . ", checkpoint_timeout $checkpoint_timeout"
		  . ($capture eq 'hooks' ? ", ptrack.map_size $map_size" : '')
		  . ($wal_reader ? ", ptrack.wal_reader $wal_reader" : '')
		  . (defined $watch_min_files ? ", ptrack.wal_file_watch_min_files $watch_min_files" : '')
		  . "; events: $run/events.log");

	my $conf = $capture_conf
	  . "autovacuum = off\n"
	  . "max_connections = 60\n"
	  . "max_prepared_transactions = 10\n"
	  . "max_wal_senders = 10\nmax_replication_slots = 10\n"
	  . "wal_keep_size = '256MB'\n"
	  . "max_wal_size = '256MB'\nmin_wal_size = '64MB'\n"
	  . "checkpoint_timeout = '$checkpoint_timeout'\n"
	  . "log_checkpoints = on\n"
	  . "restart_after_crash = on\n"
	  . "log_min_messages = warning\n"
	  . "log_statement = none\n"
	  . "log_line_prefix = '%m [%p] %b '\n";
	$conf .= "wal_log_hints = on\n" if $opt{standby} && !$checksums;
	$conf .= "ptrack.wal_reader = $wal_reader\n" if $wal_reader;
	$conf .= "ptrack.wal_file_watch_min_files = $watch_min_files\n" if defined $watch_min_files;

	PtrackSoak::Node::configure(note => \&event,
		reserve => $opt{'tiny-dir'} ? "$opt{'tiny-dir'}/reserve" : undef,
		space_freed => sub {
			my $done = $faults ? $faults->space_freed($_[0]) : undef;
			event($done) if defined $done;
		});
	my $primary = PtrackSoak::Node->adopt(ptrack_node('node1', allows_streaming => 1, stock => $stock,
		checksums => $checksums, map_size => $map_size, conf => $conf));
	$primary->start;
	$primary->safe_psql('postgres', 'CREATE EXTENSION ptrack');

	my %ts = (soak_ts => "$run/tablespace");
	# The tiny file system holds the tablespace and, beside it, the reserve
	# that a recovery short of space gets (PtrackSoak::Node).
	$ts{soak_tiny} = "$opt{'tiny-dir'}/ts" if $opt{'tiny-dir'};
	for my $name (sort keys %ts)
	{
		make_path($ts{$name});
		$primary->safe_psql('postgres', "CREATE TABLESPACE $name LOCATION '$ts{$name}'");
	}
	PtrackSoak::Node::make_reserve();
	setup_workload_objects($primary);

	my $node_seq = 1;
	$cluster = {
		primary => $primary,
		standby => undef,
		run => $run,
		log => $log,
		capture => $capture,
		tiny => $opt{'tiny-dir'} ? 1 : 0,
		tiny_dir => $opt{'tiny-dir'},
		stock => $stock,
		new_standby => sub { make_standby($_[0], 'node' . ++$node_seq) },
	};
	$cluster->{standby} = make_standby($primary, 'node' . ++$node_seq) if $opt{standby};
	$faults = PtrackSoak::Faults->new($cluster);

	$pgpb = PtrackSoak::Backups->new($opt{'pg-probackup'}, "$run/catalog", $log);
	say_tty('soak: ' . $pgpb->version);
	$pgpb->init($primary);

	write_primary($run, $primary, $cluster->{standby});
	$clients = start_clients($opt{clients}, run => $run, log => $log, rng => $rng,
		tablespaces => [ 'pg_default', sort keys %ts ], big_mb => $opt{'big-table-mb'});
	event("$opt{clients} clients started");

	sleep $rng->between(3, 8);
	take_backup(quiesce => 1, why => 'the first backup');
	while (!@failures && time < $deadline)
	{
		my $wait = $rng->between(3, 15);
		my $until = time + $wait;
		while (time < $until && time < $deadline)
		{
			sleep 0.2;
			check_clients();
		}
		last if time >= $deadline;
		my $action = $rng->weighted({ backup => 4, fault => 5 });
		if ($action eq 'fault')
		{
			# One to three faults, a few seconds apart, the clients running.
			my $n = $rng->between(1, 3);
			my $kind;
			for my $i (1 .. $n)
			{
				sleep $rng->between(1, 5) if $i > 1;
				$kind = $rng->weighted(fault_weights());
				$log->line('driver', "fault $kind ...");
				my $what = $faults->inject($kind, $rng);
				$count{faults}++;
				$fault_count{$kind}++;
				$faults_since_backup++;
				event("fault $kind: $what");
			}
			if ($kind =~ /^(immediate_stop|kill_|failover)/ && $rng->chance(0.4))
			{
				$count{after_crash}++;
				take_backup(quiesce => $rng->chance(0.7), why => "right after $kind");
			}
		}
		else
		{
			take_backup(quiesce => $rng->chance(0.7), why => 'scheduled');
		}
	}
	return if @failures;
	# A client that does not stop is stuck on the server or in the soak:
	# said, not hidden by the kill.
	my @stuck = stop_clients($run, $clients, 300);
	$count{stuck_clients} = @stuck;
	event(@stuck ? 'WARNING: clients ' . join(', ', @stuck) . ' did not stop within 300 s and were '
		  . "killed: see their last operations in $run/events.log" : 'clients stopped');
	take_backup(quiesce => 1, stopped => 1, why => 'the last backup');
	return;
}

# The faults to draw from: all that apply to the run, or those --faults
# names (with their weights).
sub fault_weights
{
	my $w = $faults->weights;
	return $w unless $opt{faults};
	my %only = map { $_ => 1 } split /,/, $opt{faults};
	my %chosen = map { $_ => $w->{$_} } grep { $only{$_} } keys %$w;
	die "soak.pl: --faults $opt{faults}: none of them applies to this run (these do: "
	  . join(', ', sort keys %$w) . ")\n" unless %chosen;
	return \%chosen;
}

# A streaming standby of $from named $name, from a base backup taken with
# pg_basebackup straight into its data directory (its tablespaces in its own
# directories), started.  Made before the clients start, or by a failover
# that holds the backup lock (PtrackSoak::Workload).
sub make_standby
{
	my ($from, $name) = @_;
	my $sb = PtrackSoak::Node->adopt(new_node($name, stock => $cluster ? $cluster->{stock} : 0));
	my @map;
	for my $line (split /\n/, $from->safe_psql('postgres',
		"SELECT oid, pg_tablespace_location(oid) FROM pg_tablespace WHERE spcname LIKE 'soak%'"))
	{
		my ($oid, $loc) = split /\|/, $line;
		push @map, "--tablespace-mapping=$loc=" . $sb->basedir . "/tablespace_$oid";
	}
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'pg_basebackup', '-D', $sb->data_dir, '-X', 'stream', '--checkpoint', 'fast',
			'--no-sync', '-d', $from->connstr('postgres'), @map ], '>', \$out, '2>', \$err)
	  or die "pg_basebackup for the standby $name failed:\n$err";
	chmod 0700, $sb->data_dir;
	$sb->append_conf('postgresql.conf', 'port = ' . $sb->port . "\n"
		  . "unix_socket_directories = '" . $sb->host . "'\nlisten_addresses = ''\n");
	$sb->enable_streaming($from);
	PtrackSoak::Faults::start_node($sb, 1);
	$log->line('driver', "standby $name started from a base backup of " . $from->name);
	return $sb;
}

# A client process that died on its own is a bug of the soak: stop.
sub check_clients
{
	for my $k (0 .. $#$clients)
	{
		my $pid = $clients->[$k];
		next unless waitpid($pid, POSIX::WNOHANG()) == $pid;
		die "client $k (PID $pid) exited: see $run/events.log\n";
	}
	return;
}

# One backup and its checks.  %o: quiesce (pause the clients for the
# backup), stopped (the clients are gone), why.
sub take_backup
{
	my (%o) = @_;
	my $p = $cluster->{primary};
	$faults->lift_limits;
	pause_clients_or_die() if $o{quiesce} && !$o{stopped};
	# With a standby, some backups are taken there (the chain goes on from
	# either node; a quiesced one waits until the standby has replayed
	# everything, so that it holds what the paused primary holds).
	my $src = $cluster->{standby} && $rng->chance(0.3) ? $cluster->{standby} : $p;
	$p->wait_for_catchup($src->name, 'replay', $p->lsn('insert')) if $src != $p && $o{quiesce};

	my $chain = $chains[-1];
	# A chain ends after 8 backups: long enough to restore through, and the
	# catalog of a long run stays within a few GB (prune_chains() keeps the current one).
	my $mode = $chain && !$rng->chance(0.1) && @{ $chain->{backups} } < 8 ? 'PTRACK' : 'FULL';
	my $init = lsn_to_int($src->safe_psql('postgres', 'SELECT ptrack_init_lsn()'));
	my $restarted = $prev && $init > lsn_to_int($prev->{start_lsn});
	if ($restarted)
	{
		my $reason = $src->safe_psql('postgres', 'SELECT last_restart_reason FROM ptrack_status()');
		# What the server said since the previous backup (a refusal at a start
		# that a later crash restart replaced is only in the log).
		my $from = $log_offset{ $src->name } // 0;
		$from = 0 if $from > log_position($src);
		my @said = grep { /ptrack.*(?:not trusted|restart|afresh|cannot)/ } split /\n/, log_since($src, $from);
		event("the server log of " . $src->name . " since the previous backup, on ptrack's tracking:\n"
			  . join("\n", map { "    $_" } @said)) if @said;
		my $explained = $faults_since_backup > 0;
		$count{forced_full}++ if $mode eq 'PTRACK';
		$count{unexplained_restarts}++ unless $explained;
		event(($explained ? '' : 'WARNING: with no fault since the previous backup, ')
			  . "tracking restarted: ptrack_init_lsn() " . PtrackOracle::int_to_lsn($init)
			  . " is past the previous backup's start $prev->{start_lsn} ($reason): a FULL backup");
		$mode = 'FULL';
	}
	my $b = $pgpb->backup($src, $mode, $run);
	if (!$b->{ok} && $b->{refused} && $mode eq 'PTRACK')
	{
		$count{forced_full}++;
		event("pg_probackup refused the PTRACK backup (tracking restarted): a FULL backup");
		$mode = 'FULL';
		$b = $pgpb->backup($src, $mode, $run);
	}
	if (!$b->{ok} || ($b->{status} // '') !~ /^(OK|DONE)$/)
	{
		fail("pg_probackup backup -b $mode failed:\n" . join("\n", grep { /ERROR|WARNING/ } split /\n/, $b->{out}));
		resume_clients($run) unless $o{stopped};
		return;
	}
	$count{backups}++;
	$count{ lc $mode }++;
	check_reader_log($_) for grep { defined } $cluster->{primary}, $cluster->{standby};
	$log_offset{ $_->name } = log_position($_) for grep { defined } $cluster->{primary}, $cluster->{standby};
	$count{under_load}++ unless $o{quiesce};
	pause_clients_or_die() if !$o{quiesce} && !$o{stopped};
	$p->wait_for_catchup($src->name, 'replay', $p->lsn('insert')) if $src != $p;

	# The checks on the node backed up, clients paused.
	my @misses;
	my $checked = 0;
	my $against = $prev && !$restarted ? $prev : undef;
	my $note = '';
	if ($against)
	{
		my $o = PtrackSoak::Checks::oracle($src, $against->{start_lsn}, $against->{sizes});
		my $v = PtrackSoak::Checks::verify($src, $against->{start_lsn});
		$checked = $o->{blocks};
		$count{blocks} += $o->{blocks};
		$count{verify_pages} += $v->{pages};
		push @misses, @{ $o->{misses} };
		# ptrack_verify() is judged on its own: the blocks it reports that
		# the oracles did not find, and whether it found theirs.
		my %seen = map { /^(\S+ block \d+)/ ? ($1 => 1) : () } @misses;
		my @own = grep { /^(\S+ block \d+)/ && !$seen{$1} } @{ $v->{misses} };
		push @misses, @own;
		push @misses, sprintf('ptrack_verify() reports %d of the %d blocks the oracles found missed',
			scalar(@{ $v->{misses} }) - scalar(@own), scalar(keys %seen))
		  if %seen;
		$note = sprintf('; since %s: %d blocks checked (%d at or past it, %d extended), '
			  . 'ptrack_verify %d pages', $against->{start_lsn}, $o->{blocks}, $o->{at_or_after},
			$o->{extended}, $v->{pages});
		# Also from the chain's FULL backup, now and then.
		my $full = $chain ? $chain->{full} : undef;
		if ($full && $full != $against && $rng->chance(0.3)
			&& $init <= lsn_to_int($full->{start_lsn}))
		{
			my $o2 = PtrackSoak::Checks::oracle($src, $full->{start_lsn}, $full->{sizes});
			$count{blocks} += $o2->{blocks};
			push @misses, @{ $o2->{misses} };
			$note .= sprintf('; since the FULL %s: %d blocks', $full->{start_lsn}, $o2->{blocks});
		}
	}
	my $digests;
	if ($o{quiesce})
	{
		$digests = cluster_digests($p, large_objects => 1);
		$digests->{prepared} = PtrackSoak::Checks::prepared_transactions($p);
	}
	# The file sizes the next backup's extension oracle starts from: the
	# primary's, which are never smaller than a standby's at the same point
	# (a standby has only the blocks the WAL names), so that they hold for
	# a check on either node.
	my %rec = (
		id => $b->{id},
		mode => $mode,
		start_lsn => $b->{start_lsn},
		stop_lsn => $b->{stop_lsn},
		sizes => block_counts($p->data_dir),
		node => $src->name,
		tablespaces => { map { split /\|/ } split /\n/, $src->safe_psql('postgres',
			"SELECT oid, pg_tablespace_location(oid) FROM pg_tablespace WHERE spcname LIKE 'soak%'") },
	);
	resume_clients($run) unless $o{stopped};
	$faults_since_backup = 0;

	if ($mode eq 'FULL')
	{
		push @chains, { full => \%rec, backups => [ \%rec ] };
	}
	else
	{
		push @{ $chains[-1]{backups} }, \%rec;
	}
	$rec{chain} = $chains[-1];
	my $n = $count{backups};
	event(sprintf('backup %d %s %s of %s (%s; %s%s; start %s, stop %s)%s', $n, $mode, $b->{id},
		$src == $p ? 'the primary' : 'the standby ' . $src->name, $o{why},
		$o{quiesce} ? 'clients paused' : 'under load', $against ? ", parent $against->{id}" : '',
		$b->{start_lsn}, $b->{stop_lsn}, $note));
	if (@misses)
	{
		my %blocks = map { /^(\S+ block \d+)/ ? ($1 => 1) : () } @misses;
		$count{missed} += keys %blocks;
		fail("backup $n ($mode $b->{id}, parent " . ($against ? $against->{id} : '-')
			  . ', since ' . ($against ? $against->{start_lsn} : '-') . '): '
			  . scalar(keys %blocks) . ' blocks missed', @misses);
		return;
	}

	my $r = PtrackSoak::Checks::restored(
		name => "restored$n",
		stock => $cluster->{stock},
		pgpb => $pgpb,
		backup => $b,
		tablespaces => $rec{tablespaces},
		digests => $digests,
		keep => $opt{keep});
	if (!$r->{ok})
	{
		fail("restore of backup $n ($mode $b->{id}) failed its checks (data directory "
			  . $r->{node}->data_dir . ')', @{ $r->{problems} });
		return;
	}
	$count{restores}++;
	$count{compared}++ if $digests;
	event(sprintf('backup %d restored: %s, amcheck clean (%d btree indexes)', $n,
		$digests ? "$r->{tables} tables equal to the source" : 'started (taken under load: not compared)',
		$r->{indexes}));
	$prev = \%rec;
	prune_chains();
	return;
}

sub pause_clients_or_die
{
	my @stuck = pause_clients($run, $clients, 600);
	return unless @stuck;
	my $activity = eval {
		$cluster->{primary}->safe_psql('postgres', "SELECT pid, state, wait_event_type, wait_event, "
			  . "left(query, 100) FROM pg_stat_activity WHERE backend_type = 'client backend' "
			  . 'AND pid <> pg_backend_pid()');
	} // $@;
	die 'clients ' . join(', ', @stuck) . " did not pause within 600 s: see $run/events.log; "
	  . "the client backends:\n$activity\n";
	return;
}

# Keeps only the current chain in the catalog: a chain is restored and
# checked backup by backup, never again once the next FULL has passed.
sub prune_chains
{
	while (@chains > 1)
	{
		my $old = shift @chains;
		my ($rc, $out) = $pgpb->delete($old->{full}{id});
		$log->line('driver', "deleted the chain of $old->{full}{id}" . ($rc ? " (failed: $out)" : ''));
	}
	return;
}

# With ptrack.wal_reader = compare, the follower raises an ERROR where its
# two WAL readers read a record differently: a failure of the soak, with
# the server's words.
sub check_reader_log
{
	my ($node) = @_;
	my $from = $log_offset{ $node->name } // 0;
	$from = 0 if $from > log_position($node);
	my @differ = grep { /WAL readers differ/ } split /\n/, log_since($node, $from);
	fail("the follower's WAL readers read a record differently on " . $node->name . ' (see ' . $node->logfile . ')',
		@differ)
	  if @differ;
}

sub fail
{
	my ($what, @details) = @_;
	push @failures, $what;
	say_tty("soak: FAILED: $what");
	my @show = @details > 40 ? (@details[ 0 .. 39 ], '... ' . (@details - 40) . ' more') : @details;
	say_tty("soak:   $_") for @show;
	report_failure();
	return;
}

# What to rerun, what happened last, what was kept.
sub report_failure
{
	$opt{keep} = 1;
	# scripts/soak.sh passes its own command line, every option it was given.
	my $rerun = $ENV{PTRACK_SOAK_RERUN}
	  // "scripts/soak.sh --pg-version $version --capture $opt{capture} --minutes $opt{minutes} --seed $opt{seed}"
	  . ($opt{standby} ? ' --standby' : '') . ($opt{clients} != 3 ? " --clients $opt{clients}" : '')
	  . ($opt{faults} ? " --faults $opt{faults}" : '') . " --big-table-mb $opt{'big-table-mb'}";
	say_tty("soak: seed $opt{seed} (rerun: $rerun)");
	say_tty('soak: the last operations and faults:');
	say_tty("soak:   $_") for $log->tail(30);
	if ($clients)
	{
		stop_clients($run, $clients, 60);
		$clients = undef;
	}
	say_tty("soak: kept $run: data directories " . join(', ',
			map { $_->data_dir } grep { -d $_->data_dir } @PostgreSQL::Test::Cluster::all_nodes)
		  . "; pg_probackup catalog $run/catalog; events $run/events.log; "
		  . "server logs $PostgreSQL::Test::Utils::log_path");
	if (open(my $fh, ">", "$run/KEEP")) { close $fh; }
	return;
}

sub summary
{
	say_tty("soak: kept $run (--keep)") if $opt{keep} && !@failures;
	my ($ops, $failed) = client_counts($run, $opt{clients});
	say_tty(sprintf('soak: operations: %d (%d failed: lock timeouts, a full tablespace, faults)', $ops, $failed));
	say_tty('soak: faults: ' . (join(', ', map { "$_ $fault_count{$_}" } sort keys %fault_count) || 'none'));
	say_tty(sprintf('soak: backups: %d FULL (%d forced by a tracking restart), %d PTRACK; %d under load, '
			. '%d right after a crash; %d restores compared with the source; ptrack_verify read %d pages',
		$count{full}, $count{forced_full}, $count{ptrack}, $count{under_load}, $count{after_crash},
		$count{compared}, $count{verify_pages}));
	my $nc = PtrackSoak::Node::counts();
	say_tty(sprintf('soak: crash restarts waited out by the driver: %d (%.0f s); recoveries short of '
			. 'space started again after freeing the reserve: %d', $nc->{waits}, $nc->{waited_s},
		$nc->{freed}));
	say_tty("soak: WARNING: $count{unexplained_restarts} tracking restarts with no fault before them")
	  if $count{unexplained_restarts};
	say_tty("soak: WARNING: $count{stuck_clients} clients did not stop and were killed")
	  if $count{stuck_clients};
	say_tty(sprintf('soak: %s %s seed %s: %d operations, %d faults, %d backups, %d restores, '
			. '%d blocks checked, %d missed',
		$version, $opt{capture}, $opt{seed}, $ops, $count{faults}, $count{backups},
		$count{restores}, $count{blocks}, $count{missed}));
	return;
}
