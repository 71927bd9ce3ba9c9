# Copyright (c) the ptrack authors
#
# 002_temp_unlogged.pl -- what ptrack must leave out.
#
# Temporary relations (files t<backend>_<relfilenode>) never survive a restart
# and no backup copies them: ptrack_get_pagemapset() never lists them.
# Unlogged relations are reset from their init fork at startup, so a backup
# copies only the init fork: their main, FSM and VM forks are never listed,
# the init fork may be.  Permanent relations changed at the same time are
# listed (the control: the test is not passing because nothing is listed).
#
# Every "is not listed" check is paired with a check that the files really
# exist on disk with written blocks, so that the test can fail.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use PtrackCluster qw(tablespace_version_re);
use PtrackOracle qw(BLCKSZ pagemapset relation_files);

my $node = PostgreSQL::Test::Cluster->new('temp_unlogged');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'ptrack'
ptrack.map_size = 16MB
wal_level = replica
shared_buffers = 16MB
autovacuum = off
});
$node->start;

my $tsdir = PostgreSQL::Test::Utils::tempdir_short();
$node->safe_psql('postgres', 'CREATE EXTENSION ptrack');
$node->safe_psql('postgres', "CREATE TABLESPACE ts1 LOCATION '$tsdir'");
my $L = $node->safe_psql('postgres', 'SELECT ptrack_init_lsn()');
my $pgdata = $node->data_dir;

# ---------------------------------------------------------------------------
# A psql session that stays open (temporary tables live as long as it does).
# Plain IPC::Run with pipes, so it works with any PostgreSQL 15 TAP modules.
# ---------------------------------------------------------------------------

sub session_start
{
	my ($dbname) = @_;
	my $s = { in => '', out => '', err => '', n => 0 };
	$s->{timer} = IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default);
	$s->{h} = IPC::Run::start(
		[ 'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr($dbname), '-f', '-' ],
		'<', \$s->{in}, '>', \$s->{out}, '2>', \$s->{err}, $s->{timer});
	return $s;
}

# Runs SQL in the session, returns its output; dies on error or timeout.
sub session_query
{
	my ($s, $sql) = @_;
	my $marker = sprintf('__ptrack_query_done_%d__', ++$s->{n});
	$s->{out} = '';
	$s->{err} = '';
	$s->{timer}->start($PostgreSQL::Test::Utils::timeout_default);
	$s->{in} .= "$sql;\n\\echo $marker\n";
	pump_until($s->{h}, $s->{timer}, \$s->{out}, qr/^$marker$/m)
	  or die "session query failed: $sql\nstderr: $s->{err}";
	die "session query failed: $sql\nstderr: $s->{err}" if $s->{err} =~ /ERROR/;
	(my $result = $s->{out}) =~ s/^$marker\n//m;
	chomp $result;
	return $result;
}

sub session_quit
{
	my ($s) = @_;
	$s->{in} .= "\\q\n";
	$s->{h}->finish;
}

# Pages of a file that are not all zeroes (written with content, not just extended).
sub written_pages
{
	my ($relpath) = @_;
	open(my $fh, '<:raw', "$pgdata/$relpath") or die "could not open $pgdata/$relpath: $!";
	my $zero = "\0" x BLCKSZ;
	my $n = 0;
	my $page;
	while (read($fh, $page, BLCKSZ) == BLCKSZ)
	{
		$n++ if $page ne $zero;
	}
	close $fh;
	return $n;
}

sub first_few
{
	my @list = @_;
	splice(@list, 10) if @list > 10;
	return join("\n", @list);
}

# ---------------------------------------------------------------------------
# Temporary tables, in the default tablespace and in ts1
# ---------------------------------------------------------------------------

my $session = session_start('postgres');
session_query($session, "SET temp_buffers = '800kB'");
session_query($session,
	"CREATE TEMP TABLE tmp_big AS SELECT g AS id, repeat('t', 200) AS pad "
	  . "FROM generate_series(1, 50000) g");
session_query($session, 'CREATE INDEX tmp_big_id ON tmp_big (id)');
session_query($session, 'UPDATE tmp_big SET pad = repeat(\'u\', 200) WHERE id % 10 = 0');
session_query($session, 'VACUUM tmp_big');
session_query($session, "SET temp_tablespaces = 'ts1'");
session_query($session,
	"CREATE TEMP TABLE tmp_ts AS SELECT g AS id, repeat('s', 200) AS pad "
	  . "FROM generate_series(1, 20000) g");
session_query($session, 'VACUUM tmp_ts');

my $tmp_path = session_query($session, "SELECT pg_relation_filepath('tmp_big')");
my $tmp_ts_path = session_query($session, "SELECT pg_relation_filepath('tmp_ts')");
like($tmp_path, qr{^base/\d+/t\d+_\d+$}, "temp table file is $tmp_path");
like($tmp_ts_path, qr{^pg_tblspc/\d+/@{[tablespace_version_re()]}/\d+/t\d+_\d+$},
	"temp table in tablespace ts1: file is $tmp_ts_path");

my @temp_files = grep { $_->{temp} } relation_files($pgdata);
my %temp_by_path = map { $_->{path} => $_ } @temp_files;
note('temp files on disk: '
	  . join(', ', map { "$_->{path} ($_->{nblocks} blocks)" } @temp_files));
ok($temp_by_path{$tmp_path} && $temp_by_path{$tmp_path}{nblocks} > 100,
	'temp table main fork exists on disk, larger than temp_buffers');
my $tmp_written = -e "$pgdata/$tmp_path" ? written_pages($tmp_path) : 0;
cmp_ok($tmp_written, '>', 100,
	"temp table blocks were really written to its file, not only kept in local buffers ($tmp_written pages)"
);
ok($temp_by_path{"${tmp_path}_fsm"} && $temp_by_path{"${tmp_path}_vm"},
	'temp table FSM and VM forks exist on disk');
ok((grep { $_->{fork} eq 'main' && $_->{path} ne $tmp_path } @temp_files),
	'temp index file exists on disk');
ok($temp_by_path{$tmp_ts_path} && written_pages($tmp_ts_path) > 0,
	'temp table in tablespace ts1 has written blocks on disk');

# The same LSNs for every check: from ptrack_init_lsn(), and from just
# before the temp tables were filled.
sub check_no_temp
{
	my ($label) = @_;
	my $map = pagemapset($node, 'postgres', $L);
	my @temp_listed = grep { m{/t\d+_} } sort keys %$map;
	is(scalar @temp_listed, 0, "$label: no temporary relation file is listed")
	  or diag(first_few(@temp_listed));
	return $map;
}

check_no_temp('temp tables open, before CHECKPOINT');
$node->safe_psql('postgres', 'CHECKPOINT');
my $map = check_no_temp('temp tables open, after CHECKPOINT');
my @listed_base = grep { m{^base/} } keys %$map;
cmp_ok(scalar @listed_base, '>', 0,
	'control: permanent files are listed at the same time (catalog changes of CREATE TEMP TABLE)');

# ---------------------------------------------------------------------------
# Unlogged relations
# ---------------------------------------------------------------------------

$node->safe_psql(
	'postgres', q{
CREATE UNLOGGED TABLE ul AS SELECT g AS id, repeat('u', 200) AS pad FROM generate_series(1, 150000) g;
CREATE INDEX ul_id ON ul (id);
CREATE UNLOGGED SEQUENCE ul_seq;
SELECT nextval('ul_seq') FROM generate_series(1, 100);
UPDATE ul SET pad = repeat('v', 200) WHERE id % 20 = 0;
VACUUM ul;
CREATE TABLE reg AS SELECT g AS id, repeat('r', 200) AS pad FROM generate_series(1, 50000) g;
UPDATE reg SET pad = repeat('s', 200) WHERE id % 20 = 0;
VACUUM reg;
});
$node->safe_psql('postgres', 'CHECKPOINT');

my %path_of;
foreach my $rel (qw(ul ul_id ul_seq reg))
{
	$path_of{$rel} = $node->safe_psql('postgres', "SELECT pg_relation_filepath('$rel')");
}
my %files = map { $_->{path} => $_ } relation_files($pgdata);

my $ul = $path_of{ul};
ok($files{$ul} && $files{$ul}{unlogged} && $files{$ul}{nblocks} > 1000,
	"unlogged table main fork $ul exists with "
	  . ($files{$ul} ? $files{$ul}{nblocks} : 0)
	  . ' blocks');
my $ul_written = $files{$ul} ? written_pages($ul) : 0;
cmp_ok($ul_written, '>', 100,
	"unlogged table blocks were really written to its file ($ul_written pages)");
ok($files{"${ul}_init"}, 'unlogged table has an init fork');
ok($files{"${ul}_fsm"} && $files{"${ul}_vm"}, 'unlogged table has FSM and VM forks on disk');
ok($files{ $path_of{ul_id} } && $files{ $path_of{ul_id} }{nblocks} > 0 && $files{"$path_of{ul_id}_init"},
	'unlogged index has a main fork with blocks and an init fork');
ok($files{ $path_of{ul_seq} } && $files{"$path_of{ul_seq}_init"},
	'unlogged sequence has a main fork and an init fork');

$map = pagemapset($node, 'postgres', $L);

my @unlogged_forks;
foreach my $rel (qw(ul ul_id ul_seq))
{
	foreach my $suffix ('', '_fsm', '_vm')
	{
		push @unlogged_forks, grep { m{^\Q$path_of{$rel}$suffix\E(\.\d+)?$} } keys %files;
	}
}
# (a fresh btree has no FSM fork, a sequence has neither FSM nor VM)
my @expected_on_disk = ($ul, "${ul}_fsm", "${ul}_vm", $path_of{ul_id}, $path_of{ul_seq});
my %on_disk = map { $_ => 1 } @unlogged_forks;
is(scalar(grep { $on_disk{$_} } @expected_on_disk), scalar @expected_on_disk,
	'unlogged main/fsm/vm files found on disk: ' . join(', ', sort @unlogged_forks))
  or diag('not on disk: ' . first_few(grep { !$on_disk{$_} } @expected_on_disk));
my @unlogged_listed = grep { $map->{$_} } sort @unlogged_forks;
is(scalar @unlogged_listed, 0, 'main, FSM and VM forks of unlogged relations are not listed')
  or diag(first_few(@unlogged_listed));

# The same, cluster-wide: no listed file belongs to a relation with an init fork.
my @any_unlogged_listed = grep { $files{$_} && $files{$_}{unlogged} } sort keys %$map;
is(scalar @any_unlogged_listed, 0, 'no non-init fork of any unlogged relation is listed')
  or diag(first_few(@any_unlogged_listed));

my @init_listed = grep { $map->{$_} } map { "$path_of{$_}_init" } qw(ul ul_id ul_seq);
note('init forks listed (allowed): ' . (join(', ', @init_listed) || 'none'));

# Control: the permanent table written in the same window is listed, whole
# (it was created after L).
my $reg = $path_of{reg};
my $reg_blocks = $files{$reg} ? $files{$reg}{nblocks} : 0;
cmp_ok($reg_blocks, '>', 100, "control table $reg has $reg_blocks blocks on disk");
my $reg_listed = $map->{$reg} ? scalar @{ $map->{$reg}{blocks} } : 0;
my %reg_bits = $map->{$reg} ? (map { $_ => 1 } @{ $map->{$reg}{blocks} }) : ();
my $reg_covered = grep { $reg_bits{$_} } 0 .. $reg_blocks - 1;
is($reg_covered, $reg_blocks,
	"control: every block of the permanent table created after L is listed ($reg_covered of $reg_blocks)")
  or diag("$reg: blocks not listed: "
	  . first_few(grep { !$reg_bits{$_} } 0 .. $reg_blocks - 1));
foreach my $fork ('fsm', 'vm')
{
	my $p = "${reg}_$fork";
	ok($map->{$p}, "control: the permanent table's \U$fork\E fork $p is listed")
	  or diag("$p: " . ($files{$p} ? "$files{$p}{nblocks} blocks on disk" : 'not on disk'));
}

# Temporary tables are still open: check once more with everything written.
check_no_temp('after the unlogged workload');

session_quit($session);
$node->stop;
done_testing();
