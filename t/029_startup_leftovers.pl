# Copyright (c) the ptrack authors
#
# 029_startup_leftovers.pl -- what ptrack finds in the data directory and the
# configuration at startup (issue 18, item 4):
#
#   1. leftover temporary files (a save that crashed or failed between its
#      steps, or files a backup tool copied along: pg_probackup copied an
#      empty ptrack.sizes.new into a catchup) are removed at startup, with a
#      LOG line, and the map is still trusted: an empty ptrack.sizes.new and
#      a ptrack.limits.tmp;
#   2. a ptrack.sizes.new that matches the saved map (a crash between the
#      map's rename and the sizes' rename) is the save's second half: it
#      becomes ptrack.sizes;
#   3. a map that cannot be opened is refused with the reason and the errno
#      (Permission denied);
#   4. an invalid ptrack.capture (and any other invalid ptrack setting)
#      stops the server at startup like an invalid ptrack.map_size or an
#      invalid setting of PostgreSQL's own, instead of a WARNING and the
#      default.
#
# Works with both capture sources.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use File::Copy;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use PtrackCluster qw(capture_mode ptrack_node ptrack_file ptrack_path init_lsn log_position log_since not_trusted_re);

my $node = ptrack_node('leftovers', conf => "autovacuum = off\n");
my $pgdata = $node->data_dir;
note 'capture source: ' . capture_mode();

$node->start;
$node->safe_psql('postgres', q{
CREATE EXTENSION ptrack;
CREATE TABLE t (id int, v text);
INSERT INTO t SELECT g, md5(g::text) FROM generate_series(1, 2000) g;
CHECKPOINT;
});
$node->poll_query_until('postgres', 'SELECT saves > 0 FROM ptrack_status')
  or die 'no save';
my $init0 = init_lsn($node);
$node->stop;
ok(-e ptrack_file($pgdata, 'ptrack.sizes'), 'a clean stop leaves ptrack.sizes');

# ---- 1. leftover temporary files ---------------------------------------------------

sub plant
{
	my ($name, $bytes) = @_;
	my $path = ptrack_file($pgdata, $name);
	open(my $fh, '>:raw', $path) or die "could not create $path: $!";
	print $fh $bytes;
	close $fh;
	return;
}
plant('ptrack.sizes.new', '');
plant('ptrack.limits.tmp', 'x' x 100);
my $log_at = log_position($node);
$node->start;
my $log = log_since($node, $log_at);
# The files themselves are looked at once the server is stopped: a save
# running meanwhile writes both names for a moment.
my ($sizes_re, $sizes_new_re, $limits_tmp_re) = map { quotemeta(ptrack_path($_)) } qw(ptrack.sizes ptrack.sizes.new ptrack.limits.tmp);
like($log, qr/LOG:  ptrack removed leftover file "$sizes_new_re": too short or unreadable/,
	'an empty ptrack.sizes.new is removed at startup, with a LOG line saying why') or diag $log;
like($log, qr/LOG:  ptrack removed leftover temporary file "$limits_tmp_re"/,
	'a leftover ptrack.limits.tmp is removed at startup, with a LOG line');
unlike($log, not_trusted_re(), 'the map is still trusted');
is(init_lsn($node), $init0, "ptrack_init_lsn() is unchanged ($init0)");
$node->safe_psql('postgres', 'UPDATE t SET v = v || 1 WHERE id % 5 = 0; CHECKPOINT');
$node->stop;
ok(!-e ptrack_file($pgdata, 'ptrack.sizes.new') && !-e ptrack_file($pgdata, 'ptrack.limits.tmp'),
	'stopped: neither ptrack.sizes.new nor ptrack.limits.tmp is there');

# ---- 2. the second half of a save ---------------------------------------------------

move(ptrack_file($pgdata, 'ptrack.sizes'), ptrack_file($pgdata, 'ptrack.sizes.new')) or die "move: $!";
$log_at = log_position($node);
$node->start;
$log = log_since($node, $log_at);
like($log, qr/LOG:  ptrack completed an interrupted save: renamed "$sizes_new_re" to "$sizes_re"/,
	'a ptrack.sizes.new that matches the map becomes ptrack.sizes at startup, with a LOG line') or diag $log;
unlike($log, not_trusted_re(), 'the map is trusted');
is(init_lsn($node), $init0, "ptrack_init_lsn() is unchanged ($init0)");
$node->stop;
ok(-e ptrack_file($pgdata, 'ptrack.sizes') && !-e ptrack_file($pgdata, 'ptrack.sizes.new'), 'stopped: ptrack.sizes is there, no ptrack.sizes.new');

# ---- 3. a map that cannot be opened -------------------------------------------------

chmod(0000, ptrack_file($pgdata, 'ptrack.map')) or die "chmod: $!";
$log_at = log_position($node);
$node->start;
$log = log_since($node, $log_at);
like($log, not_trusted_re('it could not be opened: Permission denied'),
	'a map that cannot be opened is refused with the errno') or diag $log;
like($node->safe_psql('postgres', 'SELECT last_restart_reason FROM ptrack_status'),
	qr/could not be opened: Permission denied/, 'ptrack_status says it too');
$node->stop;
chmod(0600, ptrack_file($pgdata, 'ptrack.map')) or die "chmod: $!";

# ---- 4. invalid settings --------------------------------------------------------------

for my $setting ("ptrack.capture = garbage", "ptrack.wal_wait_timeout = 'soon'", "ptrack.wal_summary_memory = '1MB'",
	"ptrack.wal_reader = bogus", "ptrack.wal_file_watch_min_files = -1")
{
	my ($name) = $setting =~ /^(\S+)/;
	$node->append_conf('postgresql.conf', "$setting\n");
	$log_at = log_position($node);
	my $started = $node->start(fail_ok => 1);
	$log = log_since($node, $log_at);
	ok(!$started, "$setting: the server does not start");
	like($log, qr/FATAL:  invalid value for parameter "\Q$name\E": /, '... with a FATAL naming the setting')
	  or diag $log;
	$node->stop if $started;
	$node->adjust_conf('postgresql.conf', $name, undef);
}
ok($node->start(fail_ok => 1), 'with the settings removed, the server starts');
$node->stop;

done_testing();
