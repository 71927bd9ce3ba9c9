# Copyright (c) the ptrack authors

=pod

=head1 NAME

PtrackCluster - the node factory of ptrack's TAP tests, and what they ask of a node

=head1 SYNOPSIS

  use FindBin;
  use lib "$FindBin::RealBin/lib";
  use PtrackCluster qw(ptrack_node map_header log_position log_since
    not_trusted_re init_lsn);

  my $node = ptrack_node('name', allows_streaming => 1, map_size => '64MB',
    conf => "autovacuum = off\n");
  $node->start;
  my $offset = log_position($node);
  ...
  my $header = map_header($node->data_dir);   # undef if no ptrack.map
  my $delta = ptrack_file($node->data_dir, 'ptrack.map.delta');

=head1 DESCRIPTION

Creates (but does not start) the PostgreSQL::Test::Cluster nodes of every TAP
test, with ptrack in shared_preload_libraries, on the server and in the capture
mode the suite runs (ptrack_node(), new_node(), capture_mode(),
server_has_hooks(), server_major()); gives what tests ask of a node (the
follower's PID, the server log since a point, ptrack_init_lsn(), a recovered
standby, pg_rewind); and reads the header and the delta batches of
F<ptrack.map> on its own, from the byte layout documented in
include/ptrack/map_file.h and src/engine/map_file.cpp, so that tests can tell
one map file from another without asking the server.  It knows where
ptrack keeps its files: the data directory with the hooks, F<pg_wal/ptrack>
with wal capture (src/pg/persist/state_files.h).

=cut

package PtrackCluster;

use strict;
use warnings;

use Carp;
use Config;
use Exporter 'import';
use File::Copy qw(copy);
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;

use PtrackUnits qw(int_to_lsn);

our @EXPORT_OK = qw(
  capture_mode
  state_dir
  ptrack_file
  ptrack_path
  ptrack_files_outside
  to_old_layout
  new_node
  server_major
  server_has_hooks
  tablespace_version_re
  ptrack_node
  map_header
  set_map_server_major
  delta_batches
  log_position
  log_since
  wait_until_recovered
  follower_pid
  background_pgbench
  not_trusted_re
  map_not_inherited_ok
  count_matches
  init_lsn
  rewind_from
);

croak 'PtrackCluster needs a Perl with 64-bit integers'
  unless $Config{ivsize} >= 8;

=pod

=head1 FUNCTIONS

=over

=item capture_mode()

The capture source the suite runs with: 'hooks' or 'wal', from the
environment variable PTRACK_CAPTURE (set by scripts/run-tests.sh), else
'hooks' if the postgres binary on PATH exports the core patch's mdwrite_hook,
else 'wal'.  Tests specific to one mode skip themselves in the other.

=cut

sub capture_mode
{
	return $ENV{PTRACK_CAPTURE} if $ENV{PTRACK_CAPTURE};
	return server_has_hooks() ? 'hooks' : 'wal';
}

=item state_dir($pgdata, $mode)

The folder of ptrack's own files (ptrack.map, ptrack.map.delta,
ptrack.limits, ptrack.sizes and their temporary files) in the data directory
C<$pgdata> under capture mode C<$mode> (default capture_mode()): C<$pgdata>
itself for the hooks, C<$pgdata/pg_wal/ptrack> for wal capture.

=item ptrack_file($pgdata, $name, $mode)

C<state_dir($pgdata, $mode)/$name>.

=item ptrack_path($name, $mode)

The same file as the server names it in its messages: relative to the data
directory (F<ptrack.map>, F<pg_wal/ptrack/ptrack.map>).

=item ptrack_files_outside($pgdata)

The names of ptrack's files at the top of C<$pgdata> (ptrack.* and
ptrack_*), sorted: with wal capture there must be none.

=cut

sub ptrack_path
{
	my ($name, $mode) = @_;
	return (($mode // capture_mode()) eq 'wal' ? 'pg_wal/ptrack/' : '') . $name;
}

sub state_dir
{
	my ($pgdata, $mode) = @_;
	return ($mode // capture_mode()) eq 'wal' ? "$pgdata/pg_wal/ptrack" : $pgdata;
}

sub ptrack_file
{
	my ($pgdata, $name, $mode) = @_;
	return "$pgdata/" . ptrack_path($name, $mode);
}

sub ptrack_files_outside
{
	my ($pgdata) = @_;
	opendir(my $dh, $pgdata) or croak "opendir $pgdata: $!";
	my @names = sort grep { /^ptrack[._]/ } readdir $dh;
	closedir $dh;
	return @names;
}

=item to_old_layout($pgdata)

In the data directory of a stopped node with wal capture: moves ptrack's
own files from F<pg_wal/ptrack> to the top of the data directory, where the
version of ptrack before this one kept them (the summaries stay).  Returns
the names moved.

=cut

sub to_old_layout
{
	my ($pgdata) = @_;
	my @moved;
	for my $name (qw(ptrack.map ptrack.map.delta ptrack.limits ptrack.sizes ptrack.sizes.new))
	{
		my $from = ptrack_file($pgdata, $name, 'wal');
		next unless -e $from;
		rename($from, "$pgdata/$name") or croak "rename $from: $!";
		push @moved, $name;
	}
	return @moved;
}

=item server_has_hooks()

True if the postgres binary on PATH exports the core patch's mdwrite_hook.
Then the suite's wal mode runs that server with ptrack.capture = wal (the
Makefile's TEMP_CONFIG, t/capture_wal.conf), and a node made with C<stock =E<gt> 1> runs its
bin/postgres-nohooks instead (scripts/build-postgres.sh builds it next to the
patched binary for 17 and 18).

=item server_major()

The major version of the server on PATH (15, 17, 18), from pg_config.

=item tablespace_version_re()

A regex matching the version directory of this server's tablespaces
(TABLESPACE_VERSION_DIRECTORY: PG_15_202209061, PG_18_...).

=cut

my ($_has_hooks, $_major);

sub _bindir
{
	my $bindir = `pg_config --bindir`;
	chomp $bindir;
	return $bindir;
}

sub server_has_hooks
{
	if (!defined $_has_hooks)
	{
		my $bindir = _bindir();
		my $symbols = `nm -D --defined-only '$bindir/postgres' 2>/dev/null`;
		$_has_hooks = $symbols =~ /\bmdwrite_hook\b/ ? 1 : 0;
	}
	return $_has_hooks;
}

sub server_major
{
	if (!defined $_major)
	{
		my $version = `pg_config --version`;
		($_major) = $version =~ /PostgreSQL (\d+)/
		  or croak "cannot tell the server's major version from \"$version\"";
	}
	return $_major;
}

sub tablespace_version_re
{
	my $major = server_major();
	return qr/PG_${major}_\d+/;
}

# An installation whose bin/postgres is the prefix's postgres-nohooks (a
# stock server: the same sources and options without the core patch).  pg_ctl
# is copied, not linked, because it looks for postgres next to itself after
# resolving its own symbolic links; everything else is a link.  undef if the
# prefix has no postgres-nohooks.
my $_stock_install;

sub _stock_install_path
{
	return $_stock_install if defined $_stock_install;
	my $bindir = _bindir();
	return undef unless -x "$bindir/postgres-nohooks";
	my $root = PostgreSQL::Test::Utils::tempdir('stock_install');
	mkdir "$root/bin" or croak "mkdir: $!";
	opendir(my $dh, $bindir) or croak "opendir $bindir: $!";
	for my $name (readdir $dh)
	{
		next if $name =~ /^\./ || $name eq 'postgres-nohooks';
		if ($name eq 'pg_ctl')
		{
			copy("$bindir/pg_ctl", "$root/bin/pg_ctl") or croak "copy pg_ctl: $!";
			chmod 0755, "$root/bin/pg_ctl";
		}
		elsif ($name eq 'postgres')
		{
			symlink("$bindir/postgres-nohooks", "$root/bin/postgres") or croak "symlink: $!";
		}
		else
		{
			symlink("$bindir/$name", "$root/bin/$name") or croak "symlink: $!";
		}
	}
	closedir $dh;
	(my $prefix = $bindir) =~ s{/bin$}{};
	symlink("$prefix/$_", "$root/$_") for grep { -e "$prefix/$_" } qw(lib share include);
	$_stock_install = $root;
	return $root;
}

=item new_node($name, %opts)

PostgreSQL::Test::Cluster->new($name), or with C<stock =E<gt> 1> a node that
runs the server without the core hooks (as ptrack_node's option): for a
standby or a restored copy of a stock node (init_from_backup).

=cut

sub new_node
{
	my ($name, %opts) = @_;
	my %new;
	if ($opts{stock} && server_has_hooks())
	{
		my $stock = _stock_install_path();
		Test::More::plan(skip_all => 'this server has the core hooks and no postgres-nohooks next to it')
		  unless defined $stock;
		$new{install_path} = $stock;
	}
	return PostgreSQL::Test::Cluster->new($name, %new);
}

=item ptrack_node($name, %opts)

A new, initialised, stopped node with:

  shared_preload_libraries = 'ptrack'     (unless preload => 0)
  ptrack.map_size = $opts{map_size}       (default 64MB)
  wal_level = $opts{wal_level}            (default replica)
  shared_buffers = 16MB, max_connections = 20


In wal mode the Makefile puts ptrack.capture = wal in every node's
configuration (TEMP_CONFIG, t/capture_wal.conf), so that a server with the
core hooks captures from the WAL too.

Options: C<allows_streaming> and C<extra> are passed to init();
C<conf> is appended to postgresql.conf last.  C<checksums =E<gt> 1 or 0>
initialises with or without data checksums whatever the version's default
(off up to 17, on from 18); without it, the version's default.
C<stock =E<gt> 1>: the node runs a server without the core hooks, and
ptrack.capture stays auto (server_has_hooks(); skips the test if there is
none).

=cut

sub ptrack_node
{
	my ($name, %opts) = @_;
	my $node = new_node($name, stock => $opts{stock});
	my %init;
	$init{allows_streaming} = $opts{allows_streaming} if $opts{allows_streaming};
	my @extra = @{ $opts{extra} // [] };
	if (defined $opts{checksums})
	{
		push @extra, '--data-checksums' if $opts{checksums};
		push @extra, '--no-data-checksums' if !$opts{checksums} && server_major() >= 18;
	}
	$init{extra} = \@extra if @extra;
	$node->init(%init);

	my $preload = (!defined $opts{preload} || $opts{preload}) ? 'ptrack' : '';
	my $map_size = $opts{map_size} // '64MB';
	my $wal_level = $opts{wal_level} // 'replica';
	my $conf = "shared_preload_libraries = '$preload'\n"
	  . "ptrack.map_size = $map_size\n"
	  . "wal_level = $wal_level\n"
	  . "shared_buffers = 16MB\n"
	  . "max_connections = 20\n";
	$conf .= "max_wal_senders = 0\n" if $wal_level eq 'minimal';
	$conf .= $opts{conf} if defined $opts{conf};
	$node->append_conf('postgresql.conf', $conf);
	return $node;
}

=pod

=item map_header($pgdata, $mode)

Reads the header of F<ptrack.map> in the data directory C<$pgdata> (or a
backup of one), where capture mode C<$mode> keeps it (ptrack_file(); default
capture_mode()), and returns a hashref, or undef if the file does not exist:

  size                 file size in bytes
  magic                the first 8 bytes as a string
  version, system_identifier, data_checksum_version, chunk_bytes, flags,
  timeline, base_id, source (1 hooks, 2 wal), server_major    integers
  init_lsn, covered_lsn    LSN text (%X/%X); flush_redo_lsn is the same
                       field (the covered LSN of a hooks save is its
                       checkpoint's redo LSN)
  crc_ok               1 if the stored CRC-32C matches the first 508 bytes

A file shorter than the header gives only C<size>.

=cut

# CRC-32C (Castagnoli), reflected, finalised; bitwise: the header is 508 bytes.
sub _crc32c
{
	my ($data) = @_;
	my $crc = 0xFFFFFFFF;
	foreach my $byte (unpack('C*', $data))
	{
		$crc ^= $byte;
		for (1 .. 8)
		{
			$crc = ($crc & 1) ? (($crc >> 1) ^ 0x82F63B78) : ($crc >> 1);
		}
	}
	return $crc ^ 0xFFFFFFFF;
}

sub map_header
{
	my ($pgdata, $mode) = @_;
	my $path = ptrack_file($pgdata, 'ptrack.map', $mode);
	return undef unless -e $path;
	my $size = -s $path;
	open(my $fh, '<:raw', $path) or croak "could not open \"$path\": $!";
	my $bytes = '';
	my $got = read($fh, $bytes, 512);
	close $fh;
	croak "could not read \"$path\": $!" unless defined $got;
	return { size => $size } if $got < 512;

	# Native byte order, like the server writes it (map_file.cpp offsets).
	my %h = (size => $size, magic => substr($bytes, 0, 8));
	$h{version} = unpack('L', substr($bytes, 8, 4));
	$h{system_identifier} = unpack('Q', substr($bytes, 16, 8));
	$h{data_checksum_version} = unpack('L', substr($bytes, 24, 4));
	$h{chunk_bytes} = unpack('L', substr($bytes, 56, 4));
	$h{flags} = unpack('L', substr($bytes, 60, 4));
	$h{init_lsn} = int_to_lsn(unpack('Q', substr($bytes, 64, 8)));
	$h{covered_lsn} = int_to_lsn(unpack('Q', substr($bytes, 72, 8)));
	$h{flush_redo_lsn} = $h{covered_lsn};
	$h{source} = unpack('L', substr($bytes, 104, 4));
	$h{timeline} = unpack('L', substr($bytes, 80, 4));
	$h{base_id} = unpack('Q', substr($bytes, 88, 8));
	$h{server_major} = unpack('L', substr($bytes, 108, 4));
	$h{crc_ok} =
	  unpack('L', substr($bytes, 508, 4)) == _crc32c(substr($bytes, 0, 508)) ? 1 : 0;
	return \%h;
}

=pod

=item set_map_server_major($pgdata, $major)

Rewrites the PostgreSQL major version recorded in the F<ptrack.map> of
C<$pgdata> (ptrack_file(), offset 108) and the header's CRC: the file then
looks written by a server of that major version.

=cut

sub set_map_server_major
{
	my ($pgdata, $major) = @_;
	my $path = ptrack_file($pgdata, 'ptrack.map');
	open(my $fh, '+<:raw', $path) or croak "could not open \"$path\": $!";
	my $bytes;
	read($fh, $bytes, 512) == 512 or croak "short read of \"$path\"";
	substr($bytes, 108, 4) = pack('L', $major);
	substr($bytes, 508, 4) = pack('L', _crc32c(substr($bytes, 0, 508)));
	seek($fh, 0, 0) or croak "seek: $!";
	print $fh $bytes;
	close $fh or croak "close: $!";
	return;
}

=pod

=item delta_batches($pgdata)

The batches of the F<ptrack.map.delta> of C<$pgdata> (ptrack_file(); layout in
include/ptrack/map_delta.h and src/engine/map_delta.cpp) up to the first one
that is short or has a bad magic or header CRC: a list of hashrefs

  offset, bytes        where the batch starts, its length (header + entries)
  base_id, sequence, flags, entry_count, timeline
  flush_redo_lsn, init_lsn    LSN text

Entry CRCs are not checked.  The empty list if there is no delta file.

=cut

sub delta_batches
{
	my ($pgdata) = @_;
	my $path = ptrack_file($pgdata, 'ptrack.map.delta');
	return () unless -e $path;
	open(my $fh, '<:raw', $path) or croak "could not open \"$path\": $!";
	my $size = -s $fh;
	my @batches;
	my $offset = 0;
	while ($offset + 64 <= $size)
	{
		my $raw;
		seek($fh, $offset, 0) or croak "seek: $!";
		last unless read($fh, $raw, 64) == 64;
		last unless substr($raw, 0, 8) eq 'PTRKDLTA';
		last unless unpack('L', substr($raw, 60, 4)) == _crc32c(substr($raw, 0, 60));
		my %b = (offset => $offset);
		$b{base_id} = unpack('Q', substr($raw, 8, 8));
		$b{sequence} = unpack('L', substr($raw, 16, 4));
		$b{flags} = unpack('L', substr($raw, 20, 4));
		$b{entry_count} = unpack('Q', substr($raw, 24, 8));
		$b{flush_redo_lsn} = int_to_lsn(unpack('Q', substr($raw, 32, 8)));
		$b{init_lsn} = int_to_lsn(unpack('Q', substr($raw, 40, 8)));
		$b{timeline} = unpack('L', substr($raw, 48, 4));
		$b{bytes} = 64 + 16 * $b{entry_count};
		last if $offset + $b{bytes} > $size;
		push @batches, \%b;
		$offset += $b{bytes};
	}
	close $fh;
	return @batches;
}

=pod

=item wait_until_recovered($node, $offset)

Waits until the node, started after its log was at C<$offset>, has ended
recovery and accepts connections.  A server recovering with hot_standby = off
refuses connections meanwhile, and polling it with psql can die on the
framework's side (IPC::Run's write of the query to a psql that has already
exited: "ack Broken pipe"), so the log is watched first.

=item log_position($node)

The current size of the node's log file: pass it to log_since() to look only
at what the server logs from now on.

=item log_since($node, $offset)

The node's log from byte C<$offset> on.

=cut

sub wait_until_recovered
{
	my ($node, $offset) = @_;
	$node->wait_for_log(qr/database system is ready to accept connections/, $offset);
	$node->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
	  or croak 'the server ' . $node->name . ' did not finish recovery';
	return;
}

=pod

=item follower_pid($node)

The PID of the node's ptrack WAL follower, waiting (poll_query_until) for
exactly one to run; dies if none starts.

=cut

sub follower_pid
{
	my ($node) = @_;
	my $running = "FROM pg_stat_activity WHERE backend_type = 'ptrack WAL follower'";
	$node->poll_query_until('postgres', "SELECT count(*) = 1 $running")
	  or croak 'the ptrack WAL follower of ' . $node->name . ' did not start';
	return $node->safe_psql('postgres', "SELECT pid $running");
}

=item background_pgbench($node, clients => N, seconds => T)

Starts the default pgbench script against the node's postgres database in the
background (one pgbench thread, N clients, T seconds) and returns the
IPC::Run handle; the caller waits for it with C<finish>.  Tests use it to
keep the WAL follower busy while they checkpoint, kill or restart something.

=cut

sub background_pgbench
{
	my ($node, %opt) = @_;
	my ($out, $err) = ('', '');
	return IPC::Run::start(
		[
			'pgbench', '-n', '-c', $opt{clients} // 2, '-j', '1', '-T', $opt{seconds} // 5,
			'-h', $node->host, '-p', $node->port, 'postgres'
		],
		'>', \$out, '2>', \$err);
}

sub log_position
{
	my ($node) = @_;
	return -s $node->logfile // 0;
}

sub log_since
{
	my ($node, $offset) = @_;
	return PostgreSQL::Test::Utils::slurp_file($node->logfile, $offset);
}

=pod

=item not_trusted_re($reason)

A regex for the server's WARNING about a rejected map, with C<$reason> the
exact text of the reason (C<undef> for any reason).  The map is named where
either source keeps it (F<ptrack.map>, F<pg_wal/ptrack/ptrack.map>): after a
change of ptrack.capture the refused map is the other source's.

=item count_matches($text, $re)

How many times C<$re> matches in C<$text>.

=cut

sub not_trusted_re
{
	my ($reason) = @_;
	my $prefix = 'WARNING:  ptrack map file "(?:pg_wal/ptrack/)?ptrack\.map" is not trusted because ';
	return defined $reason ? qr/$prefix\Q$reason\E$/m : qr/$prefix/;
}

=item map_not_inherited_ok($node, $offset, $label)

One test: $node, started from a base backup of a ptrack node (its log from
$offset on), does not use that node's map.  With the hooks the backup
carried the map, and the server refuses it because of backup_label (the
WARNING); with wal capture the backup carried none (pg_basebackup copies
nothing of pg_wal/ptrack), and the server says that tracking starts afresh.

=cut

sub map_not_inherited_ok
{
	my ($node, $offset, $label) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my $log = log_since($node, $offset);
	if (capture_mode() eq 'wal')
	{
		my $map = quotemeta(ptrack_path('ptrack.map'));
		Test::More::like($log, qr/LOG:  ptrack map file "$map" not found: change tracking starts afresh/,
			"$label (wal capture: the backup carried no map)");
		return;
	}
	Test::More::like($log,
		not_trusted_re('a backup_label file is present (the data directory was restored from a backup or rewound)'),
		$label);
	return;
}

sub count_matches
{
	my ($text, $re) = @_;
	my $n = () = $text =~ /$re/g;
	return $n;
}

=pod

=item init_lsn($node)

C<SELECT ptrack_init_lsn()> in database postgres.

=cut

sub init_lsn
{
	my ($node) = @_;
	return $node->safe_psql('postgres', 'SELECT ptrack_init_lsn()');
}

=pod

=item rewind_from($node, $source, %opts)

pg_rewind of the stopped $node against the running $source (one test,
command_ok), keeping $node's own F<postgresql.conf>: pg_rewind copies the
source's configuration files too.  With C<test =E<gt> 0> no test is run:
it dies with pg_rewind's output if pg_rewind fails (for a script that is
not a test, scripts/soak.pl).

=cut

sub rewind_from
{
	my ($node, $source, %opts) = @_;
	my $pgdata = $node->data_dir;
	# Outside the data directory, which pg_rewind overwrites.
	my $conf_copy = $node->basedir . '/postgresql.conf.keep';
	copy("$pgdata/postgresql.conf", $conf_copy) or die "copy: $!";
	my @rewind = (
		'pg_rewind', '--target-pgdata', $pgdata,
		'--source-server', $source->connstr('postgres'),
		'--no-sync');
	if (defined $opts{test} && !$opts{test})
	{
		my ($out, $err) = ('', '');
		IPC::Run::run(\@rewind, '>', \$out, '2>', \$err)
		  or croak 'pg_rewind of ' . $node->name . " failed:\n$out$err";
	}
	else
	{
		$node->command_ok(\@rewind, 'pg_rewind of the old primary against the promoted standby');
	}
	copy($conf_copy, "$pgdata/postgresql.conf") or die "copy: $!";
	return;
}

=pod

=back

=cut

1;
