# Copyright (c) the ptrack authors
#
# PtrackSoak::Workload -- the soak's clients (scripts/soak.pl): concurrent
# processes that each run a weighted random mix of operations against the
# primary, and the protocol by which the driver pauses, resumes and stops
# them.
#
# Every kind of write ptrack has to see is in the mix: inserts, HOT and
# non-HOT updates, deletes, COPY, TOAST values; CREATE and DROP of tables and
# of btree, hash, gin, gist and brin indexes; TRUNCATE, VACUUM with
# truncation, VACUUM FULL, CLUSTER, REINDEX CONCURRENTLY, ALTER TABLE
# rewrites and SET TABLESPACE both ways; CREATE DATABASE with both
# strategies, DROP DATABASE, ALTER DATABASE SET TABLESPACE; sequences,
# partitions attached and detached, unlogged tables set logged (and back),
# large objects, two-phase commits (some left prepared: they survive the
# driver's crashes); CHECKPOINT; and, for client 0 when the run allows it, a
# table grown past the 1 GB segment boundary and shrunk again.
#
# Each client owns its objects (names starting with c<k>_), so clients do
# not wait on each other's locks, and its choices come from its own
# generator (PtrackSoak::Rng, derived from the run's seed): the sequence of
# operations a client attempts depends on the seed and on the outcome of
# its own operations only (a failed one, e.g. cut by a crash, makes it read
# its objects back from the catalog).  An operation that fails (lock
# timeout, full tablespace, the server crashing under it) is logged and
# counted, never fatal: the faults make failures part of the workload.
#
# Protocol with the driver, through files in the run directory:
#   pause       exists: finish the current operation, write paused-<k>
#               (holding the pause file's contents), wait until it is gone
#   stop        exists: finish the current operation and exit
#   primary     "host port" of the server to connect to (rewritten on a
#               failover; a client reads it at each connection)
#   standby     "host port" of the standby, if there is one
#   count-<k>   the client's operation counts, written at each pause and
#               at exit ("operations failed")
#   backup.lock flock()ed by the driver while pg_probackup, pg_basebackup or
#               pg_rewind runs or the standby crashes or changes, and by a
#               client around ALTER DATABASE SET TABLESPACE (which must not be
#               replayed twice: op_alter_database_tablespace)
# Clients exit with POSIX::_exit, so that the driver's END blocks
# (PostgreSQL::Test::Cluster stops its nodes there) never run in them.

package PtrackSoak::Workload;

use strict;
use warnings;

use Carp;
use Exporter 'import';
use Fcntl ();
use POSIX ();
use Time::HiRes qw(sleep time);

use PtrackBackup ();    # PtrackBackup::Session: a psql session through pipes

our @EXPORT_OK = qw(start_clients pause_clients resume_clients stop_clients
  client_counts write_primary setup_workload_objects backup_lock);

# Rows of about 2000 bytes, four to a page (STORAGE PLAIN: not compressed),
# for the table that grows past a segment boundary: 131072 pages are 1 GB.
use constant BIG_ROWS_PER_SEGMENT => 131072 * 4;
use constant BIG_ROWS_PER_OP => 16384;    # 32 MB

my $TABLE_SLOTS = 5;
my $ROW_CAP = 60000;    # rows per table before inserts turn into deletes

# Operation => weight.  Client 0 adds the big table's operations.
my %WEIGHTS = (
	insert => 14,
	copy => 5,
	toast => 4,
	update_hot => 10,
	update_nonhot => 8,
	delete => 6,
	truncate => 2,
	create_table => 3,
	create_table_as => 1.5,
	drop_table => 2,
	create_index => 4,
	drop_index => 2,
	vacuum => 4,
	vacuum_truncate => 2,
	vacuum_full => 1.5,
	cluster => 1,
	reindex_concurrently => 1.5,
	alter_rewrite => 1.5,
	set_tablespace => 2.5,
	sequence => 2,
	partition => 3,
	unlogged => 2,
	large_object => 2.5,
	prepare => 2,
	resolve_prepared => 2,
	create_database => 1,
	drop_database => 0.8,
	alter_database_tablespace => 0.6,
	database_work => 2,
	checkpoint => 0.5,
);
my %BIG_WEIGHTS = (big_grow => 4, big_update => 1.5, big_shrink => 0.6, big_drop => 0.4);

# ---------------------------------------------------------------------------
# The driver's side
# ---------------------------------------------------------------------------

# Writes the files the clients read the servers' addresses from: primary,
# and standby (removed when there is none).
sub write_primary
{
	my ($run, $node, $standby) = @_;
	for my $f ([ primary => $node ], [ standby => $standby ])
	{
		my ($name, $n) = @$f;
		if (!$n)
		{
			unlink "$run/$name";
			next;
		}
		open(my $fh, '>', "$run/$name.tmp") or croak "$name.tmp: $!";
		print $fh $n->host, ' ', $n->port, "\n";
		close $fh;
		rename("$run/$name.tmp", "$run/$name") or croak "rename $name: $!";
	}
	return;
}

# Creates the objects every client shares: database soak (where the clients
# work) and soak_tmpl (the template CREATE DATABASE copies, with tables so
# that a FILE_COPY copies real relation files).
sub setup_workload_objects
{
	my ($node) = @_;
	$node->safe_psql('postgres', 'CREATE DATABASE soak');
	$node->safe_psql('postgres', 'CREATE DATABASE soak_tmpl');
	$node->safe_psql('soak_tmpl', q{
		CREATE TABLE tmpl_data (id bigint PRIMARY KEY, v text);
		INSERT INTO tmpl_data SELECT g, md5(g::text) FROM generate_series(1, 20000) g;
		CREATE INDEX ON tmpl_data USING hash (v);
		VACUUM ANALYZE tmpl_data;
	});
	return;
}

# Forks $n clients; returns their PIDs (index = client number).  %opt:
# run, log (PtrackSoak::Log), rng (the driver's: each client derives its
# own), tablespaces (names a table may move to), big_mb (0: no big table).
sub start_clients
{
	my ($n, %opt) = @_;
	my @pids;
	unlink "$opt{run}/stop", "$opt{run}/pause";
	for my $k (0 .. $n - 1)
	{
		my $rng = $opt{rng}->derive("client-$k");
		my $pid = fork();
		croak "fork: $!" unless defined $pid;
		if ($pid == 0)
		{
			my $status = eval { _client_main($k, $rng, %opt); 1 } ? 0 : 1;
			if ($status)
			{
				my $err = $@;
				eval { $opt{log}->line("c$k", "client died: $err") };
			}
			POSIX::_exit($status);
		}
		push @pids, $pid;
	}
	return \@pids;
}

# Asks the clients to pause and waits until every live one has (at most
# $timeout seconds); returns the list of clients that did not (empty: all
# paused).
sub pause_clients
{
	my ($run, $pids, $timeout) = @_;
	my $gen = int(time * 1000) . "-$$";
	open(my $fh, '>', "$run/pause.tmp") or croak "pause.tmp: $!";
	print $fh "$gen\n";
	close $fh;
	rename("$run/pause.tmp", "$run/pause") or croak "rename pause: $!";
	my $deadline = time + ($timeout // 300);
	while (1)
	{
		my @waiting;
		for my $k (0 .. $#$pids)
		{
			next unless _alive($pids->[$k]);
			my $got = _read_line("$run/paused-$k");
			push @waiting, $k unless defined $got && $got eq $gen;
		}
		return () unless @waiting;
		return @waiting if time > $deadline;
		sleep 0.05;
	}
}

sub resume_clients
{
	my ($run) = @_;
	unlink "$run/pause";
	return;
}

# Asks the clients to stop, waits up to $timeout seconds, then kills the
# ones left (by PID); returns their numbers.
sub stop_clients
{
	my ($run, $pids, $timeout) = @_;
	open(my $fh, '>', "$run/stop") or croak "stop: $!";
	close $fh;
	unlink "$run/pause";
	my $deadline = time + ($timeout // 120);
	my @killed;
	for my $k (0 .. $#$pids)
	{
		my $pid = $pids->[$k];
		while (_alive($pid) && time < $deadline)
		{
			sleep 0.1;
		}
		if (_alive($pid))
		{
			kill 'KILL', $pid;
			waitpid($pid, 0);
			push @killed, $k;
		}
	}
	return @killed;
}

# Sums of the clients' count files: (operations, failed).
sub client_counts
{
	my ($run, $n) = @_;
	my ($ops, $failed) = (0, 0);
	for my $k (0 .. $n - 1)
	{
		my $line = _read_line("$run/count-$k") // next;
		my ($o, $f) = split ' ', $line;
		$ops += $o // 0;
		$failed += $f // 0;
	}
	return ($ops, $failed);
}

# The lock between a backup (exclusive) and ALTER DATABASE SET TABLESPACE
# (shared); returns the handle holding it.
sub backup_lock
{
	my ($run, $mode) = @_;
	open(my $fh, '>>', "$run/backup.lock") or croak "backup.lock: $!";
	flock($fh, $mode) or croak "flock backup.lock: $!";
	return $fh;
}

sub _alive
{
	my ($pid) = @_;
	return 0 if waitpid($pid, POSIX::WNOHANG()) == $pid;
	return kill(0, $pid) ? 1 : 0;
}

sub _read_line
{
	my ($path) = @_;
	open(my $fh, '<', $path) or return undef;
	my $line = <$fh>;
	close $fh;
	return undef unless defined $line;
	chomp $line;
	return $line;
}

sub _write_file
{
	my ($path, $text) = @_;
	open(my $fh, '>', "$path.tmp") or return;
	print $fh $text;
	close $fh;
	rename("$path.tmp", $path);
	return;
}

# ---------------------------------------------------------------------------
# The client's side
# ---------------------------------------------------------------------------

# Where a client connects: the connstr() a PtrackBackup::Session needs.
package PtrackSoak::Workload::Target;

sub new
{
	my ($class, $host, $port) = @_;
	return bless { host => $host, port => $port }, $class;
}

sub connstr
{
	my ($self, $db) = @_;
	return "host=$self->{host} port=$self->{port} dbname=$db";
}

package PtrackSoak::Workload;

sub _client_main
{
	my ($k, $rng, %opt) = @_;
	$SIG{TERM} = sub { die "terminated\n" };
	my $c = {
		k => $k,
		rng => $rng,
		run => $opt{run},
		log => $opt{log},
		tablespaces => $opt{tablespaces} // ['pg_default'],
		big_mb => ($k == 0 ? $opt{big_mb} // 0 : 0),
		ops => 0,
		failed => 0,
		session => undef,
		dirty => 1,
		st => {},
		gid_seq => 0,
	};
	my %weights = %WEIGHTS;
	%weights = (%weights, %BIG_WEIGHTS) if $c->{big_mb} > 0;
	my $paused_for = '';
	while (1)
	{
		last if -e "$c->{run}/stop";
		if (defined(my $gen = _read_line("$c->{run}/pause")))
		{
			if ($gen ne $paused_for)
			{
				_write_file("$c->{run}/count-$k", "$c->{ops} $c->{failed}\n");
				_write_file("$c->{run}/paused-$k", "$gen\n");
				$paused_for = $gen;
			}
			sleep 0.05;
			next;
		}
		if (!$c->{session})
		{
			_connect($c) or do { sleep 0.5; next };
		}
		if ($c->{dirty})
		{
			eval { _refresh($c); 1 } or do { _failed($c, 'refresh', $@); next };
		}
		my $op = $rng->weighted(\%weights);
		my $t0 = time;
		$c->{ops}++;
		$c->{did} = $op;
		my $what;
		my $ok = eval { $what = _run_op($c, $op); 1 };
		my $ms = int((time - $t0) * 1000);
		if ($ok)
		{
			$c->{log}->line("c$k", "#$c->{ops} $c->{did} $what: ok ${ms}ms");
		}
		else
		{
			_failed($c, $c->{did}, $@, $ms);
		}
	}
	_write_file("$c->{run}/count-$k", "$c->{ops} $c->{failed}\n");
	$c->{session}->quit if $c->{session} && eval { $c->{session}{run}->pumpable };
	return;
}

sub _failed
{
	my ($c, $op, $err, $ms) = @_;
	$c->{failed}++;
	$err //= '';
	$err =~ s/^query failed: .*?\n//s;    # the SQL, logged with the operation already
	my ($first) = grep { /\S/ } split /\n/, $err;
	$first //= 'unknown error';
	$first = substr($first, 0, 200);
	$c->{log}->line("c$c->{k}",
		"#$c->{ops} $op: FAILED" . (defined $ms ? " ${ms}ms" : '') . ": $first");
	$c->{dirty} = 1;
	# The session may be gone (a crash) or inside a failed transaction.
	my $s = $c->{session};
	if ($s && !eval { $s->query('ROLLBACK'); $s->query('SELECT 1'); 1 })
	{
		eval { $s->{run}->kill_kill };
		$s->{done} = 1;
		$c->{session} = undef;
	}
	return;
}

sub _connect
{
	my ($c) = @_;
	my $line = _read_line("$c->{run}/primary") // return 0;
	my ($host, $port) = split ' ', $line;
	my $target = PtrackSoak::Workload::Target->new($host, $port);
	my $s = eval {
		my $s = PtrackBackup::Session->new($target, 'soak');
		$s->query("SET lock_timeout = '2s'");
		$s->query("SET statement_timeout = '300s'");
		$s;
	};
	return 0 unless $s;
	$c->{session} = $s;
	$c->{target} = $target;
	return 1;
}

# Runs SQL on the client's session; returns the rows (array refs).
sub _q
{
	my ($c, $sql) = @_;
	return $c->{session}->query($sql);
}

# Reads back the client's objects from the catalog.
sub _refresh
{
	my ($c) = @_;
	my $k = $c->{k};
	my %st = (tables => {}, part => {}, unlogged => undef, seq => 0, dbs => {},
		los => [], gids => []);
	my $rows = _q($c, "SELECT c.relname, c.relkind, c.relpersistence, c.relispartition, "
		  . "coalesce(t.spcname, 'pg_default'), "
		  . "(SELECT format_type(a.atttypid, NULL) FROM pg_attribute a "
		  . "WHERE a.attrelid = c.oid AND a.attname = 'k' AND NOT a.attisdropped) "
		  . "FROM pg_class c LEFT JOIN pg_tablespace t ON t.oid = c.reltablespace "
		  . "WHERE c.relnamespace = 'public'::regnamespace AND c.relname ~ '^c${k}_' "
		  . "AND c.relkind IN ('r', 'p', 'S')");
	for my $r (@$rows)
	{
		my ($name, $kind, $persistence, $is_part, $ts, $ktype) = @$r;
		if ($name =~ /^c${k}_t(\d+)$/)
		{
			$st{tables}{$1} = { name => $name, ts => $ts, ktype => $ktype // 'integer' };
		}
		elsif ($name eq "c${k}_p")
		{
			$st{part}{parent} = 1;
		}
		elsif ($name =~ /^c${k}_p(\d+)$/)
		{
			$st{part}{$1} = $is_part eq 't' ? 'attached' : 'detached';
		}
		elsif ($name eq "c${k}_u")
		{
			$st{unlogged} = $persistence eq 'u' ? 'unlogged' : 'logged';
		}
		elsif ($name eq "c${k}_s")
		{
			$st{seq} = 1;
		}
	}
	for my $t (values %{ $st{tables} })
	{
		my $r = _q($c, "SELECT coalesce(max(id), 0), count(*) FROM $t->{name}")->[0];
		($t->{next_id}, $t->{rows}) = ($r->[0] + 1, $r->[1]);
	}
	for my $r (@{ _q($c, "SELECT datname, datconnlimit = -2 FROM pg_database "
		. "WHERE datname ~ '^c${k}_db[0-9]+\$'") })
	{
		my ($j) = $r->[0] =~ /(\d+)$/;
		$st{dbs}{$j} = $r->[1] eq 't' ? 'invalid' : 'ok';
	}
	$st{los} = [ map { $_->[0] } @{ _q($c, "SELECT objoid FROM pg_description "
		. "WHERE classoid = 'pg_largeobject'::regclass AND description = 'c$k' ORDER BY 1") } ];
	$st{gids} = [ map { $_->[0] } @{ _q($c, "SELECT gid FROM pg_prepared_xacts "
		. "WHERE gid LIKE 'c${k}\\_%' ORDER BY 1") } ];
	if ($c->{big_mb} > 0)
	{
		$st{big} = undef;
		if (_q($c, "SELECT to_regclass('soak_big') IS NOT NULL")->[0][0] eq 't')
		{
			my $r = _q($c, "SELECT pg_relation_size('soak_big'), coalesce(max(id), 0) FROM soak_big")->[0];
			$st{big} = { size => $r->[0], next_id => $r->[1] + 1 };
		}
	}
	$c->{st} = \%st;
	$c->{dirty} = 0;
	return;
}

# Runs operation $op; returns what it did (for the log).  Dies on failure.
sub _run_op
{
	my ($c, $op) = @_;
	my $sub = __PACKAGE__->can("op_$op") or croak "no operation $op";
	return $sub->($c);
}

# Each operation names itself in the log: one that finds nothing to work on
# runs another (an insert into a client without tables creates one).
sub _did
{
	my ($c, $op) = @_;
	$c->{did} = $op;
	return;
}

# --- helpers ----------------------------------------------------------------

# The row expression of a client table for ids from generate_series alias g.
sub _rows_sql
{
	my ($c, $from, $to) = @_;
	my $salt = $c->{rng}->u32;
	my $pad = $c->{rng}->between(10, 400);
	return "SELECT g, ((g * 7919) % 1000)::int, md5(g::text || '$salt'), "
	  . "repeat(chr(65 + (g % 26)::int), $pad), ARRAY[(g % 100)::int, (g % 37)::int, (g % 11)::int], "
	  . "point(g % 1000, g % 997), int4range((g % 1000)::int, (g % 1000)::int + 10), "
	  . "jsonb_build_object('g', g, 'm', g % 13) FROM generate_series($from, $to) g";
}

# A table slot of this client that exists, or undef.
sub _some_table
{
	my ($c) = @_;
	my @have = sort { $a <=> $b } keys %{ $c->{st}{tables} };
	return undef unless @have;
	return $c->{st}{tables}{ $c->{rng}->pick(@have) };
}

# A batch size: mostly small, sometimes large.
sub _batch
{
	my ($c, $small, $large) = @_;
	return $c->{rng}->chance(0.8) ? $c->{rng}->between(1, $small) : $c->{rng}->between($small, $large);
}

sub _other_tablespace
{
	my ($c, $current, $small) = @_;
	my @ts = grep { $_ ne $current } @{ $c->{tablespaces} };
	@ts = grep { $_ ne 'soak_tiny' } @ts unless $small;
	return @ts ? $c->{rng}->pick(@ts) : undef;
}

# --- table operations -----------------------------------------------------------

sub op_create_table
{
	my ($c) = @_;
	_did($c, 'create_table');
	my @free = grep { !$c->{st}{tables}{$_} } 0 .. $TABLE_SLOTS - 1;
	return op_insert($c) unless @free;
	my $slot = $c->{rng}->pick(@free);
	my $name = "c$c->{k}_t$slot";
	my $ff = $c->{rng}->pick(100, 90, 70, 50);
	my $n = _batch($c, 500, 5000);
	my $sql = "CREATE TABLE $name (id bigint PRIMARY KEY, k int NOT NULL, v text, pad text, "
	  . "arr int[], pt point, r int4range, j jsonb) WITH (fillfactor = $ff);\n";
	$sql .= "ALTER TABLE $name ALTER COLUMN v SET STORAGE EXTERNAL;\n" if $c->{rng}->chance(0.3);
	$sql .= "INSERT INTO $name " . _rows_sql($c, 1, $n) . ";\n";
	_q($c, $sql);
	$c->{st}{tables}{$slot} = { name => $name, ts => 'pg_default', ktype => 'integer',
		next_id => $n + 1, rows => $n };
	return "$name (fillfactor $ff, $n rows)";
}

sub op_create_table_as
{
	my ($c) = @_;
	_did($c, 'create_table_as');
	my @free = grep { !$c->{st}{tables}{$_} } 0 .. $TABLE_SLOTS - 1;
	return op_drop_table($c) unless @free;
	my $slot = $c->{rng}->pick(@free);
	my $name = "c$c->{k}_t$slot";
	my $n = $c->{rng}->between(1000, 30000);
	_q($c, "CREATE TABLE $name (id, k, v, pad, arr, pt, r, j) AS " . _rows_sql($c, 1, $n) . ";\n"
		  . "ALTER TABLE $name ALTER COLUMN k SET NOT NULL, ADD PRIMARY KEY (id);");
	$c->{st}{tables}{$slot} = { name => $name, ts => 'pg_default', ktype => 'integer',
		next_id => $n + 1, rows => $n };
	return "$name ($n rows)";
}

sub op_drop_table
{
	my ($c) = @_;
	_did($c, 'drop_table');
	my $t = _some_table($c) // return op_create_table($c);
	_q($c, "DROP TABLE $t->{name}");
	my ($slot) = $t->{name} =~ /(\d+)$/;
	delete $c->{st}{tables}{$slot};
	return $t->{name};
}

sub op_insert
{
	my ($c) = @_;
	_did($c, 'insert');
	my $t = _some_table($c) // return op_create_table($c);
	return op_delete($c, $t) if $t->{rows} > $ROW_CAP;
	my $n = _batch($c, 300, 3000);
	my $from = $t->{next_id};
	_q($c, "INSERT INTO $t->{name} " . _rows_sql($c, $from, $from + $n - 1));
	$t->{next_id} += $n;
	$t->{rows} += $n;
	return "$t->{name} ($n rows)";
}

sub op_copy
{
	my ($c) = @_;
	_did($c, 'copy');
	my $t = _some_table($c) // return op_create_table($c);
	return op_delete($c, $t) if $t->{rows} > $ROW_CAP;
	my $n = _batch($c, 300, 2000);
	my $salt = $c->{rng}->u32;
	my $data = '';
	for my $id ($t->{next_id} .. $t->{next_id} + $n - 1)
	{
		$data .= "$id\t" . (($id * 31) % 1000) . "\tcopy-$salt-$id\t" . ('p' x ($id % 200)) . "\n";
	}
	# From a file the server reads (it runs as the same user): the COPY
	# path of the server (bulk insert), without psql's COPY FROM STDIN,
	# which a script piped to psql cannot follow with more commands.
	my $file = "$c->{run}/copy-$c->{k}.tsv";
	open(my $fh, '>', $file) or die "$file: $!";
	print $fh $data;
	close $fh;
	_q($c, "COPY $t->{name} (id, k, v, pad) FROM '$file'");
	$t->{next_id} += $n;
	$t->{rows} += $n;
	return "$t->{name} ($n rows)";
}

sub op_toast
{
	my ($c) = @_;
	_did($c, 'toast');
	my $t = _some_table($c) // return op_create_table($c);
	my $n = $c->{rng}->between(2, 40);
	my $md5s = $c->{rng}->between(80, 400);    # 2.5-12.8 KB of hex
	my $from = $t->{next_id};
	my $salt = $c->{rng}->u32;
	_q($c, "INSERT INTO $t->{name} (id, k, v) SELECT g, (g % 1000)::int, "
		  . "(SELECT string_agg(md5(g::text || x::text || '$salt'), '') FROM generate_series(1, $md5s) x) "
		  . "FROM generate_series($from, " . ($from + $n - 1) . ") g");
	$t->{next_id} += $n;
	$t->{rows} += $n;
	return "$t->{name} ($n rows of " . (32 * $md5s) . " bytes)";
}

# An id range of the table: [lo, lo + width].
sub _range
{
	my ($c, $t, $width) = @_;
	my $lo = $c->{rng}->between(1, $t->{next_id} > 1 ? $t->{next_id} - 1 : 1);
	return ($lo, $lo + $width);
}

sub op_update_hot
{
	my ($c) = @_;
	_did($c, 'update_hot');
	my $t = _some_table($c) // return op_create_table($c);
	my ($lo, $hi) = _range($c, $t, _batch($c, 200, 3000));
	my $salt = $c->{rng}->u32;
	_q($c, "UPDATE $t->{name} SET v = md5(coalesce(v, '') || '$salt') WHERE id BETWEEN $lo AND $hi");
	return "$t->{name} ids $lo-$hi";
}

sub op_update_nonhot
{
	my ($c) = @_;
	_did($c, 'update_nonhot');
	my $t = _some_table($c) // return op_create_table($c);
	my ($lo, $hi) = _range($c, $t, _batch($c, 200, 3000));
	_q($c, "UPDATE $t->{name} SET k = k + 1, pad = coalesce(pad, '') || 'u', "
		  . "arr = arr || (k % 50), j = coalesce(j, '{}') || jsonb_build_object('u', k) "
		  . "WHERE id BETWEEN $lo AND $hi");
	return "$t->{name} ids $lo-$hi";
}

sub op_delete
{
	my ($c, $t) = @_;
	_did($c, 'delete');
	$t //= _some_table($c) // return op_create_table($c);
	my $big = $t->{rows} > $ROW_CAP;
	my ($lo, $hi) = _range($c, $t, $big ? $ROW_CAP / 2 : _batch($c, 200, 5000));
	my $mod = $c->{rng}->pick(1, 1, 2, 3, 7);
	my $n = _q($c, "WITH d AS (DELETE FROM $t->{name} WHERE id BETWEEN $lo AND $hi "
		  . "AND id % $mod = 0 RETURNING 1) SELECT count(*) FROM d")->[0][0];
	$t->{rows} -= $n;
	return "$t->{name} ids $lo-$hi every $mod ($n rows)";
}

sub op_truncate
{
	my ($c) = @_;
	_did($c, 'truncate');
	my $t = _some_table($c) // return op_create_table($c);
	if ($c->{rng}->chance(0.5))
	{
		my $n = _batch($c, 200, 2000);
		_q($c, "BEGIN;\nTRUNCATE $t->{name};\nINSERT INTO $t->{name} "
			  . _rows_sql($c, $t->{next_id}, $t->{next_id} + $n - 1) . ";\nCOMMIT;");
		$t->{next_id} += $n;
		$t->{rows} = $n;
		return "$t->{name}, then $n rows in the same transaction";
	}
	_q($c, "TRUNCATE $t->{name}");
	$t->{rows} = 0;
	return $t->{name};
}

my @INDEX_KINDS = (
	[ btree => 'btree (k)' ],
	[ btree2 => 'btree (left(v, 40))' ],
	[ hash => 'hash (k)' ],
	[ gin => 'gin (arr)' ],
	[ ginj => 'gin (j jsonb_path_ops)' ],
	[ gist => 'gist (pt)' ],
	[ gistr => 'gist (r)' ],
	[ brin => 'brin (id) WITH (pages_per_range = 4)' ],
);

sub op_create_index
{
	my ($c) = @_;
	_did($c, 'create_index');
	my $t = _some_table($c) // return op_create_table($c);
	my ($kind, $def) = @{ $c->{rng}->pick(@INDEX_KINDS) };
	my $conc = $c->{rng}->chance(0.3) ? ' CONCURRENTLY' : '';
	_q($c, "CREATE INDEX$conc IF NOT EXISTS $t->{name}_$kind ON $t->{name} USING $def");
	return "$t->{name}_$kind$conc";
}

sub op_drop_index
{
	my ($c) = @_;
	_did($c, 'drop_index');
	my $t = _some_table($c) // return op_create_table($c);
	my ($kind) = @{ $c->{rng}->pick(@INDEX_KINDS) };
	my $conc = $c->{rng}->chance(0.3) ? ' CONCURRENTLY' : '';
	_q($c, "DROP INDEX$conc IF EXISTS $t->{name}_$kind");
	return "$t->{name}_$kind$conc";
}

sub op_vacuum
{
	my ($c) = @_;
	_did($c, 'vacuum');
	my $t = _some_table($c) // return op_create_table($c);
	my $how = $c->{rng}->pick('', '(FREEZE)', '(ANALYZE)', '(DISABLE_PAGE_SKIPPING)', '(INDEX_CLEANUP ON)');
	_q($c, "VACUUM $how $t->{name}");
	return "$how $t->{name}";
}

sub op_vacuum_truncate
{
	my ($c) = @_;
	_did($c, 'vacuum_truncate');
	my $t = _some_table($c) // return op_create_table($c);
	my $n = _batch($c, 500, 5000);
	my $d = _q($c, "WITH d AS (DELETE FROM $t->{name} WHERE id > "
		  . "(SELECT max(id) - $n FROM $t->{name}) RETURNING 1) SELECT count(*) FROM d")->[0][0];
	$t->{rows} -= $d;
	_q($c, "VACUUM (TRUNCATE true) $t->{name}");
	return "$t->{name} (the last $d rows deleted)";
}

sub op_vacuum_full
{
	my ($c) = @_;
	_did($c, 'vacuum_full');
	my $t = _some_table($c) // return op_create_table($c);
	_q($c, "VACUUM FULL $t->{name}");
	return $t->{name};
}

sub op_cluster
{
	my ($c) = @_;
	_did($c, 'cluster');
	my $t = _some_table($c) // return op_create_table($c);
	_q($c, "CLUSTER $t->{name} USING $t->{name}_pkey");
	return $t->{name};
}

sub op_reindex_concurrently
{
	my ($c) = @_;
	_did($c, 'reindex_concurrently');
	my $t = _some_table($c) // return op_create_table($c);
	if ($c->{rng}->chance(0.5))
	{
		_q($c, "REINDEX INDEX CONCURRENTLY $t->{name}_pkey");
		return "$t->{name}_pkey";
	}
	_q($c, "REINDEX TABLE CONCURRENTLY $t->{name}");
	return $t->{name};
}

sub op_alter_rewrite
{
	my ($c) = @_;
	_did($c, 'alter_rewrite');
	my $t = _some_table($c) // return op_create_table($c);
	if ($c->{rng}->chance(0.7))
	{
		my $to = $t->{ktype} eq 'bigint' ? 'int' : 'bigint';
		_q($c, "ALTER TABLE $t->{name} ALTER COLUMN k TYPE $to");
		$t->{ktype} = $to eq 'int' ? 'integer' : 'bigint';
		return "$t->{name} k to $to";
	}
	# A volatile default rewrites every row; the column goes again right away.
	_q($c, "ALTER TABLE $t->{name} ADD COLUMN extra float8 DEFAULT random();\n"
		  . "ALTER TABLE $t->{name} DROP COLUMN extra;");
	return "$t->{name} add column with a volatile default";
}

sub op_set_tablespace
{
	my ($c) = @_;
	_did($c, 'set_tablespace');
	my $t = _some_table($c) // return op_create_table($c);
	my $to = _other_tablespace($c, $t->{ts}, $t->{rows} < 10000) // return op_vacuum($c);
	if ($c->{rng}->chance(0.25))
	{
		_q($c, "ALTER INDEX $t->{name}_pkey SET TABLESPACE $to");
		return "$t->{name}_pkey to $to";
	}
	_q($c, "ALTER TABLE $t->{name} SET TABLESPACE $to");
	$t->{ts} = $to;
	return "$t->{name} to $to";
}

# --- other objects ------------------------------------------------------------

sub op_sequence
{
	my ($c) = @_;
	_did($c, 'sequence');
	my $s = "c$c->{k}_s";
	if (!$c->{st}{seq})
	{
		_q($c, "CREATE SEQUENCE $s CACHE " . $c->{rng}->pick(1, 1, 20));
		$c->{st}{seq} = 1;
		return "create $s";
	}
	my $what = $c->{rng}->weighted({ next => 6, setval => 1, restart => 1, drop => 1 });
	if ($what eq 'next')
	{
		my $n = _batch($c, 100, 5000);
		_q($c, "SELECT count(nextval('$s')) FROM generate_series(1, $n)");
		return "nextval x $n";
	}
	if ($what eq 'setval')
	{
		my $v = $c->{rng}->between(1, 1000000);
		_q($c, "SELECT setval('$s', $v)");
		return "setval $v";
	}
	if ($what eq 'restart')
	{
		_q($c, "ALTER SEQUENCE $s RESTART");
		return 'restart';
	}
	_q($c, "DROP SEQUENCE $s");
	$c->{st}{seq} = 0;
	return "drop $s";
}

sub op_partition
{
	my ($c) = @_;
	_did($c, 'partition');
	my $p = "c$c->{k}_p";
	my $part = $c->{st}{part};
	if (!$part->{parent})
	{
		_q($c, "CREATE TABLE $p (id bigint NOT NULL, k int, v text) PARTITION BY RANGE (id)");
		$part->{parent} = 1;
		return "create $p";
	}
	my $j = $c->{rng}->below(4);
	my $child = "${p}$j";
	my ($lo, $hi) = ($j * 1000000, ($j + 1) * 1000000);
	my $state = $part->{$j} // 'none';
	my $salt = $c->{rng}->u32;
	if ($state eq 'none')
	{
		my $n = _batch($c, 500, 5000);
		_q($c, "CREATE TABLE $child (LIKE $p);\n"
			  . "INSERT INTO $child SELECT $lo + g, g % 100, md5(g::text || '$salt') FROM generate_series(1, $n) g;\n"
			  . "ALTER TABLE $p ATTACH PARTITION $child FOR VALUES FROM ($lo) TO ($hi);");
		$part->{$j} = 'attached';
		return "$child created with $n rows and attached";
	}
	if ($state eq 'attached')
	{
		if ($c->{rng}->chance(0.7))
		{
			my $n = _batch($c, 300, 3000);
			my $base = $lo + $c->{rng}->between(0, 900000);
			_q($c, "INSERT INTO $p SELECT $base + g, g % 100, md5(g::text || '$salt') "
				  . "FROM generate_series(1, $n) g");
			return "$n rows into $p (partition $child)";
		}
		my $conc = $c->{rng}->chance(0.3) ? ' CONCURRENTLY' : '';
		_q($c, "ALTER TABLE $p DETACH PARTITION $child$conc");
		$part->{$j} = 'detached';
		return "$child detached$conc";
	}
	if ($c->{rng}->chance(0.5))
	{
		_q($c, "ALTER TABLE $p ATTACH PARTITION $child FOR VALUES FROM ($lo) TO ($hi)");
		$part->{$j} = 'attached';
		return "$child attached again";
	}
	_q($c, "DROP TABLE $child");
	delete $part->{$j};
	return "$child dropped";
}

sub op_unlogged
{
	my ($c) = @_;
	_did($c, 'unlogged');
	my $u = "c$c->{k}_u";
	my $state = $c->{st}{unlogged};
	my $n = _batch($c, 500, 5000);
	my $salt = $c->{rng}->u32;
	if (!defined $state)
	{
		_q($c, "CREATE UNLOGGED TABLE $u (id bigint PRIMARY KEY, v text);\n"
			  . "INSERT INTO $u SELECT g, md5(g::text || '$salt') FROM generate_series(1, $n) g;");
		$c->{st}{unlogged} = 'unlogged';
		return "$u created ($n rows)";
	}
	my $what = $c->{rng}->weighted({ insert => 3, switch => 2, drop => 1 });
	if ($what eq 'insert')
	{
		_q($c, "INSERT INTO $u SELECT m.id + g, md5(g::text || '$salt') "
			  . "FROM (SELECT coalesce(max(id), 0) AS id FROM $u) m, generate_series(1, $n) g");
		return "$n rows into $u ($state)";
	}
	if ($what eq 'drop')
	{
		_q($c, "DROP TABLE $u");
		$c->{st}{unlogged} = undef;
		return "$u dropped";
	}
	my $to = $state eq 'unlogged' ? 'LOGGED' : 'UNLOGGED';
	_q($c, "ALTER TABLE $u SET $to");
	$c->{st}{unlogged} = lc $to;
	return "$u set $to";
}

sub op_large_object
{
	my ($c) = @_;
	_did($c, 'large_object');
	my $los = $c->{st}{los};
	my $what = @$los < 2 ? 'create' : @$los >= 5 ? $c->{rng}->pick('write', 'unlink')
	  : $c->{rng}->weighted({ create => 2, write => 3, unlink => 1 });
	my $salt = $c->{rng}->u32;
	if ($what eq 'create')
	{
		my $n = $c->{rng}->between(10, 6000);    # 32 bytes each
		_q($c, "DO \$\$DECLARE o oid; BEGIN "
			  . "o := lo_from_bytea(0, convert_to(repeat(md5('$salt'), $n), 'UTF8')); "
			  . "EXECUTE format('COMMENT ON LARGE OBJECT %s IS %L', o, 'c$c->{k}'); END\$\$");
		$c->{dirty} = 1;    # read the new OID back
		return "create (" . (32 * $n) . " bytes)";
	}
	my $lo = $c->{rng}->pick(@$los);
	if ($what eq 'write')
	{
		my $off = $c->{rng}->between(0, 200000);
		my $n = $c->{rng}->between(1, 3000);
		_q($c, "SELECT lo_put($lo, $off, convert_to(repeat(md5('$salt'), $n), 'UTF8'))");
		return "write $lo at $off (" . (32 * $n) . " bytes)";
	}
	_q($c, "SELECT lo_unlink($lo)");
	@$los = grep { $_ != $lo } @$los;
	return "unlink $lo";
}

sub op_prepare
{
	my ($c) = @_;
	_did($c, 'prepare');
	return op_resolve_prepared($c) if @{ $c->{st}{gids} } >= 2;
	my $t = _some_table($c) // return op_create_table($c);
	my $gid = "c$c->{k}_" . $c->{rng}->u32 . '_' . ++$c->{gid_seq};
	my $n = _batch($c, 50, 500);
	my ($lo, $hi) = _range($c, $t, 100);
	_q($c, "BEGIN;\nINSERT INTO $t->{name} " . _rows_sql($c, $t->{next_id}, $t->{next_id} + $n - 1)
		  . ";\nUPDATE $t->{name} SET v = 'prepared' WHERE id BETWEEN $lo AND $hi;\n"
		  . "PREPARE TRANSACTION '$gid';");
	$t->{next_id} += $n;
	push @{ $c->{st}{gids} }, $gid;
	return "$gid ($n rows into $t->{name}, ids $lo-$hi updated)";
}

sub op_resolve_prepared
{
	my ($c) = @_;
	_did($c, 'resolve_prepared');
	my $gids = $c->{st}{gids};
	return op_insert($c) unless @$gids;
	my $gid = $c->{rng}->pick(@$gids);
	my $how = $c->{rng}->chance(0.7) ? 'COMMIT' : 'ROLLBACK';
	_q($c, "$how PREPARED '$gid'");
	@$gids = grep { $_ ne $gid } @$gids;
	$c->{dirty} = 1 if $how eq 'COMMIT';    # its rows count now
	return "$how PREPARED $gid";
}

# --- databases ------------------------------------------------------------------

# A session on one of the client's databases, for a few statements.
sub _in_database
{
	my ($c, $db, $sql) = @_;
	my $s = PtrackBackup::Session->new($c->{target}, $db);
	my $ok = eval { $s->query("SET statement_timeout = '120s'"); $s->query($sql); 1 };
	my $err = $@;
	eval { $s->quit };
	die $err unless $ok;
	return;
}

sub op_create_database
{
	my ($c) = @_;
	_did($c, 'create_database');
	my @free = grep { !$c->{st}{dbs}{$_} } 0 .. 1;
	return op_database_work($c) unless @free;
	my $j = $c->{rng}->pick(@free);
	my $db = "c$c->{k}_db$j";
	my $strategy = $c->{rng}->pick('wal_log', 'file_copy');
	my $ts = $c->{rng}->chance(0.3) ? _other_tablespace($c, 'pg_default', 0) : undef;
	_q($c, "CREATE DATABASE $db TEMPLATE soak_tmpl STRATEGY $strategy"
		  . ($ts ? " TABLESPACE $ts" : ''));
	$c->{st}{dbs}{$j} = 'ok';
	my $n = _batch($c, 2000, 20000);
	_in_database($c, $db, "CREATE TABLE d (id bigint PRIMARY KEY, v text);\n"
		  . "INSERT INTO d SELECT g, md5(g::text) FROM generate_series(1, $n) g;\n"
		  . "UPDATE tmpl_data SET v = md5(v) WHERE id % 10 = 0;");
	return "$db strategy $strategy" . ($ts ? " in $ts" : '') . " ($n rows)";
}

sub op_drop_database
{
	my ($c) = @_;
	_did($c, 'drop_database');
	my @have = sort keys %{ $c->{st}{dbs} };
	return op_create_database($c) unless @have;
	my $j = $c->{rng}->pick(@have);
	_q($c, "DROP DATABASE c$c->{k}_db$j WITH (FORCE)");
	delete $c->{st}{dbs}{$j};
	return "c$c->{k}_db$j";
}

sub op_alter_database_tablespace
{
	my ($c) = @_;
	_did($c, 'alter_database_tablespace');
	my @have = grep { $c->{st}{dbs}{$_} eq 'ok' } sort keys %{ $c->{st}{dbs} };
	return op_create_database($c) unless @have;
	my $j = $c->{rng}->pick(@have);
	my $db = "c$c->{k}_db$j";
	my $cur = _q($c, "SELECT t.spcname FROM pg_database d JOIN pg_tablespace t "
		  . "ON t.oid = d.dattablespace WHERE d.datname = '$db'")->[0][0] // 'pg_default';
	my $to = _other_tablespace($c, $cur, 0) // return "$db stays in $cur";
	# The move copies the database directory, then deletes the old one, and
	# its replay copies the directory again from the old one: replayed once
	# more after that is gone, it leaves the database empty (PostgreSQL's
	# limitation, not ptrack's).  So never during a backup (a file-level
	# backup that listed the old directory but reached its files after the
	# move restores a database with files missing, whatever the tool), nor
	# during a change of the standby (the driver holds the lock exclusively
	# meanwhile); and a standby gets a restartpoint after replaying it, so
	# that its crash recovery or promotion never replays it again.
	my $lock = backup_lock($c->{run}, Fcntl::LOCK_SH());
	_q($c, "ALTER DATABASE $db SET TABLESPACE $to");
	my $sealed = _restartpoint_on_standby($c) ? ', restartpoint on the standby' : '';
	close $lock;
	return "$db from $cur to $to$sealed";
}

# When there is a standby ("standby" in the run directory: host port): waits
# until it has replayed the WAL written so far, then makes it take a
# restartpoint.  Returns 1 if it did.
sub _restartpoint_on_standby
{
	my ($c) = @_;
	my $line = _read_line("$c->{run}/standby") // return 0;
	my ($host, $port) = split ' ', $line;
	my $lsn = _q($c, 'SELECT pg_current_wal_insert_lsn()')->[0][0];
	my $deadline = time + 300;
	my $err;
	while (time < $deadline)
	{
		my $s = eval { PtrackBackup::Session->new(PtrackSoak::Workload::Target->new($host, $port), 'postgres') };
		my $ok = $s && eval {
			return 0 unless $s->query("SELECT pg_last_wal_replay_lsn() >= '$lsn'")->[0][0] eq 't';
			$s->query('CHECKPOINT');
			1;
		};
		$err = $@;
		eval { $s->quit } if $s;
		return 1 if $ok;
		sleep 0.2;
	}
	die "no restartpoint on the standby after $lsn within 300 s: " . ($err || 'not replayed') . "\n";
}

sub op_database_work
{
	my ($c) = @_;
	_did($c, 'database_work');
	my @have = grep { $c->{st}{dbs}{$_} eq 'ok' } sort keys %{ $c->{st}{dbs} };
	return op_create_database($c) unless @have;
	my $db = "c$c->{k}_db" . $c->{rng}->pick(@have);
	my $n = _batch($c, 500, 5000);
	my $salt = $c->{rng}->u32;
	_in_database($c, $db, "INSERT INTO d SELECT m.id + g, md5(g::text || '$salt') "
		  . "FROM (SELECT coalesce(max(id), 0) AS id FROM d) m, generate_series(1, $n) g;\n"
		  . "UPDATE d SET v = md5(v) WHERE id % 17 = " . $c->{rng}->below(17) . ";\n"
		  . "DELETE FROM d WHERE id % 101 = " . $c->{rng}->below(101) . ";");
	return "$db ($n rows, updates, deletes)";
}

sub op_checkpoint
{
	my ($c) = @_;
	_did($c, 'checkpoint');
	_q($c, 'CHECKPOINT');
	return '';
}

# --- the table that crosses a segment boundary (client 0) -------------------------

sub _big_create
{
	my ($c) = @_;
	_q($c, "CREATE TABLE soak_big (id bigint NOT NULL, v text) WITH (autovacuum_enabled = off);\n"
		  . "ALTER TABLE soak_big ALTER COLUMN v SET STORAGE PLAIN;\n"
		  . "CREATE INDEX soak_big_id ON soak_big (id);");
	$c->{st}{big} = { size => 0, next_id => 1 };
	return;
}

sub op_big_grow
{
	my ($c) = @_;
	_did($c, 'big_grow');
	_big_create($c) unless $c->{st}{big};
	my $big = $c->{st}{big};
	return op_big_update($c) if $big->{size} >= $c->{big_mb} * 1048576;
	my $from = $big->{next_id};
	my $to = $from + BIG_ROWS_PER_OP - 1;
	_q($c, "INSERT INTO soak_big SELECT g, repeat(md5(g::text), 62) FROM generate_series($from, $to) g");
	$big->{next_id} = $to + 1;
	$big->{size} = _q($c, "SELECT pg_relation_size('soak_big')")->[0][0];
	return sprintf('soak_big to %.0f MB', $big->{size} / 1048576);
}

sub op_big_update
{
	my ($c) = @_;
	_did($c, 'big_update');
	my $big = $c->{st}{big} // return op_big_grow($c);
	my $last = $big->{next_id} - 1;
	return op_big_grow($c) if $last < 1;
	# Around a segment boundary when the table reaches one, else anywhere.
	my $at = $last > BIG_ROWS_PER_SEGMENT && $c->{rng}->chance(0.7)
	  ? BIG_ROWS_PER_SEGMENT + $c->{rng}->between(-400, 400)
	  : $c->{rng}->between(1, $last);
	my $n = $c->{rng}->between(10, 400);
	my $salt = $c->{rng}->u32;
	_q($c, "UPDATE soak_big SET v = repeat(md5(id::text || '$salt'), 62) "
		  . "WHERE id BETWEEN $at AND " . ($at + $n));
	return "soak_big ids $at-" . ($at + $n);
}

sub op_big_shrink
{
	my ($c) = @_;
	_did($c, 'big_shrink');
	my $big = $c->{st}{big} // return op_big_grow($c);
	return op_big_grow($c) if $big->{next_id} <= BIG_ROWS_PER_SEGMENT;
	# Back below the boundary: VACUUM truncates the relation, and its second
	# segment file goes.
	my $keep = BIG_ROWS_PER_SEGMENT - $c->{rng}->between(1000, 60000);
	_q($c, "DELETE FROM soak_big WHERE id > $keep;\nVACUUM soak_big;");
	$big->{next_id} = $keep + 1;
	$big->{size} = _q($c, "SELECT pg_relation_size('soak_big')")->[0][0];
	return sprintf('soak_big to %.0f MB (rows after %d deleted, VACUUM)', $big->{size} / 1048576, $keep);
}

sub op_big_drop
{
	my ($c) = @_;
	_did($c, 'big_drop');
	my $big = $c->{st}{big} // return op_big_grow($c);
	return op_big_update($c) if $big->{size} < $c->{big_mb} * 1048576;
	if ($c->{rng}->chance(0.5))
	{
		_q($c, 'TRUNCATE soak_big');
		$big->{size} = 0;
		$big->{next_id} = 1;
		return 'TRUNCATE soak_big';
	}
	_q($c, 'DROP TABLE soak_big');
	$c->{st}{big} = undef;
	return 'DROP TABLE soak_big';
}

1;
