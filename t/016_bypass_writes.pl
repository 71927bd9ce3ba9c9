# Copyright (c) the ptrack authors
#
# 016_bypass_writes.pl -- a write that bypasses shared buffers, held across a
# checkpoint and followed by a crash, keeps its mark (docs/design.md
# section 3.6).
#
# A bulk writer (ALTER TABLE ... SET TABLESPACE, a btree CREATE INDEX)
# WAL-logs a page with log_newpage() (15; from 17 on the bulk-write API,
# bulk_write.c, logs a batch of pages with log_newpages()) and then writes it
# straight to the file.
# When a whole checkpoint falls between the two, recovery starts after the
# WAL record, so it never writes the page again, and the mark made by the
# write is only in shared memory, after the map save of that checkpoint.  The
# hooks source makes the marks of the fork durable in ptrack.bypass when the
# writer syncs the fork before it commits (the core patch's mdimmedsync_hook);
# the wal source marks the page when its follower reads the WAL record.
#
# Each case holds the writer's backend in gdb (batch mode, attached to the
# backend) at its first log_newpage() (log_newpages()), takes a CHECKPOINT and L, lets the
# record be written, takes a second CHECKPOINT, releases the backend, which
# writes the page and commits, and stops the server with -m immediate.
# After the restart the map must be trusted and the page-LSN oracle must find
# no block changed or added since L that pagemapset(L) does not list; the
# held page (block 0 of the moved table, block 1 of the index: the first leaf,
# the metapage is written last) is asserted by name too.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

use PtrackCluster qw(capture_mode server_major ptrack_node log_position log_since not_trusted_re init_lsn);
use PtrackOracle qw(block_counts no_misses_ok pagemapset);

my $mode = capture_mode();
# Where a bulk writer WAL-logs the pages it then writes past shared buffers.
my $log_fn = server_major() >= 17 ? 'log_newpages' : 'log_newpage';

my ($gdb) = grep { -x $_ } map { "$_/gdb" } split /:/, $ENV{PATH};
BAIL_OUT('gdb is not installed: scripts/run-tests.sh installs it (apt-get install gdb)') unless $gdb;

my $node = ptrack_node('bypass',
	conf => "autovacuum = off\nmax_parallel_maintenance_workers = 0\ncheckpoint_timeout = 1h\n");
$node->start;
my $tsdir = PostgreSQL::Test::Utils::tempdir_short();
$node->safe_psql('postgres', "CREATE TABLESPACE ts1 LOCATION '$tsdir'");
$node->safe_psql('postgres', 'CREATE EXTENSION ptrack');
$node->safe_psql('postgres',
	"CREATE TABLE moved AS SELECT g AS id, repeat('m', 200) AS pad FROM generate_series(1, 20000) g");
$node->safe_psql('postgres',
	"CREATE TABLE indexed AS SELECT g AS id, md5(g::text) AS key FROM generate_series(1, 50000) g");
$node->safe_psql('postgres', 'CHECKPOINT');

my $flags = $node->basedir . '/gdb_flags';
mkdir $flags or die "mkdir $flags: $!";

# Waits until $flags/$name exists; dies with what gdb said otherwise.
sub wait_flag
{
	my ($name, $gdb_run, $gdb_out) = @_;
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	until (-e "$flags/$name")
	{
		$gdb_run->pump_nb;
		die "gdb never reached $name (is ptrace allowed here?); gdb said:\n$$gdb_out"
		  if time() > $deadline || !$gdb_run->pumpable;
		usleep(100_000);
	}
}

# hold_case($label, $sql, $relation, $held): runs $sql in a session whose
# backend is held at its first $log_fn() as described above, then crashes
# and restarts the server and checks; the held page is block $held of the new
# file of $relation.
sub hold_case
{
	my ($label, $sql, $relation, $held) = @_;
	unlink glob("$flags/*");

	my $session = $node->background_psql('postgres');
	my $pid = $session->query_safe('SELECT pg_backend_pid()');
	chomp $pid;

	my $script = "$flags/script.gdb";
	open my $fh, '>', $script or die "open $script: $!";
	print $fh <<"EOF";
set pagination off
set confirm off
break $log_fn
continue
shell touch $flags/HIT1
shell while [ ! -e $flags/RELEASE1 ]; do sleep 0.1; done
finish
shell touch $flags/HIT2
shell while [ ! -e $flags/RELEASE2 ]; do sleep 0.1; done
delete
detach
shell touch $flags/DETACHED
quit
EOF
	close $fh;
	my $gdb_out = '';
	my $gdb_run = IPC::Run::start([ $gdb, '-nx', '-batch', '-p', $pid, '-x', $script ],
		'<', \undef, '>&', \$gdb_out);
	# Let gdb attach and set its breakpoint before the statement starts.
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	until ($gdb_out =~ /Breakpoint 1 at/)
	{
		$gdb_run->pump_nb;
		die "$label: gdb could not attach to backend $pid:\n$gdb_out"
		  if time() > $deadline || !$gdb_run->pumpable;
		usleep(100_000);
	}
	$session->query_until(qr//, "$sql;\nSELECT 'done';\n");

	wait_flag('HIT1', $gdb_run, \$gdb_out);
	$node->safe_psql('postgres', 'CHECKPOINT');
	my $baseline = block_counts($node->data_dir);
	my $L = $node->lsn('insert');
	my $init = init_lsn($node);
	open my $r1, '>', "$flags/RELEASE1" or die $!;
	close $r1;
	wait_flag('HIT2', $gdb_run, \$gdb_out);
	my $record_end = $node->lsn('insert');
	# Some WAL between the held page's record and the redo LSN: the startup
	# scan also reads the record that ends at the map's covered LSN, which
	# would otherwise be the held page's.
	$node->safe_psql('postgres', "SELECT pg_logical_emit_message(false, 'ptrack-test', 'spacer')");
	$node->safe_psql('postgres', 'CHECKPOINT');
	my $redo = $node->safe_psql('postgres', 'SELECT redo_lsn FROM pg_control_checkpoint()');
	open my $r2, '>', "$flags/RELEASE2" or die $!;
	close $r2;
	wait_flag('DETACHED', $gdb_run, \$gdb_out);
	$gdb_run->finish;
	note("$label: gdb held backend $pid; L $L, the held page's record ends before $record_end, "
		  . "second checkpoint's redo $redo");
	cmp_ok(PtrackOracle::lsn_to_int($redo), '>', PtrackOracle::lsn_to_int($record_end),
		"$label: the second checkpoint's redo LSN $redo is after the held page's WAL record");

	# The statement commits; its new file is the one to check.
	$session->query_safe('SELECT 1');
	$session->quit;
	my $path = $node->safe_psql('postgres', "SELECT pg_relation_filepath('$relation')");

	my $off = log_position($node);
	$node->stop('immediate');
	$node->start;
	my $log = log_since($node, $off);
	like($log, qr/database system was interrupted/, "$label: the server went through crash recovery");
	unlike($log, not_trusted_re(), "$label: the map is trusted after the crash");
	like($log, qr/LOG:  ptrack marked the blocks of \d+ relation forks written outside shared buffers/,
		"$label: the journal of writes outside shared buffers was applied")
	  if $mode eq 'hooks';
	is(init_lsn($node), $init, "$label: ptrack_init_lsn() is unchanged");

	my $map = pagemapset($node, 'postgres', $L);
	my $blocks = $map->{$path} ? $map->{$path}{blocks} : [];
	ok((grep { $_ == $held } @$blocks),
		"$label: block $held of $path (the page held across the checkpoint) is listed since $L")
	  or diag("pagemapset($L) lists for $path: "
		  . (@$blocks ? join(' ', grep { defined } @$blocks[ 0 .. 19 ]) : 'nothing'));
	my $stats = no_misses_ok($node, $L, "$label: every block changed or added since $L is listed",
		baseline => $baseline);
	cmp_ok($stats->{extended} // 0, '>', 20,
		"$label: the oracle saw the new file's blocks ($stats->{extended} blocks added since $L)");
}

hold_case('ALTER TABLE SET TABLESPACE', 'ALTER TABLE moved SET TABLESPACE ts1', 'moved', 0);
hold_case('btree CREATE INDEX', 'CREATE INDEX indexed_key ON indexed (key)', 'indexed_key', 1);

$node->stop;
done_testing();
