#!/usr/bin/perl
#
# ratio_summary.pl -- summarise paired A/B throughput runs: median TPS of each
# configuration, the median of the per-pair ratios B/A, and a percentile
# bootstrap 95% interval for that median.
#
# Why pairs: the machines this runs on are shared and noisy (identical runs
# differ by 15-30%), and the noise drifts over minutes.  pgbench_overhead.sh
# therefore runs A and B back to back (in ABBA order) and this script only
# ever compares the two runs of one pair.  The bootstrap resamples those
# per-pair ratios, not individual runs, so the pairing survives resampling.
#
# Input (file arguments or stdin), tab separated, one line per run:
#   workload  map_mb  pair  slot  config  tps
# where config is A or B and each (workload, map_mb, pair) has one A and one B.
# Lines starting with '#' are ignored.
#
# Options:
#   --resamples N   bootstrap resamples (default 10000)
#   --seed N        seed of the resampling PRNG (default 20251130), so that a
#                   summary recomputed from the same runs prints the same interval
#   --threshold X   the "median >= X" verdict threshold (default 0.995)
#
# Output: a Markdown table (readable as is in a terminal) and one verdict line
# per workload.  Core Perl only.

use strict;
use warnings;
use Getopt::Long;
use POSIX qw(floor);

my $resamples = 10000;
my $seed      = 20251130;
my $threshold = 0.995;
GetOptions(
    'resamples=i' => \$resamples,
    'seed=i'      => \$seed,
    'threshold=f' => \$threshold,
) or die "usage: ratio_summary.pl [--resamples N] [--seed N] [--threshold X] [file...]\n";
die "ratio_summary: --resamples must be at least 100\n" if $resamples < 100;

sub median {
    my @s = sort { $a <=> $b } @_;
    my $n = @s;
    die "ratio_summary: median of nothing\n" unless $n;
    return $n % 2 ? $s[ ($n - 1) / 2 ] : ($s[ $n / 2 - 1 ] + $s[ $n / 2 ]) / 2;
}

# Percentile bootstrap of the median: draw n ratios with replacement, take
# their median, repeat; the 2.5th and 97.5th percentiles of those medians
# bound the interval.
sub bootstrap_median_ci {
    my ($ratios) = @_;
    my $n = @$ratios;
    my @medians;
    for (1 .. $resamples) {
        my @draw = map { $ratios->[ int(rand($n)) ] } 1 .. $n;
        push @medians, median(@draw);
    }
    @medians = sort { $a <=> $b } @medians;
    my $lo = $medians[ floor(0.025 * ($resamples - 1) + 0.5) ];
    my $hi = $medians[ floor(0.975 * ($resamples - 1) + 0.5) ];
    return ($lo, $hi);
}

my (%tps, @order);    # $tps{"$workload\t$map"}{$pair}{$config} = tps
while (my $line = <>) {
    chomp $line;
    next if $line =~ /^\s*(#|$)/;
    my ($workload, $map, $pair, $slot, $config, $tps) = split /\t/, $line;
    die "ratio_summary: bad line: $line\n"
        unless defined $tps && $config =~ /^[AB]$/ && $tps =~ /^[0-9.]+$/;
    my $key = "$workload\t$map";
    push @order, $key unless exists $tps{$key};
    die "ratio_summary: two $config runs for $workload map $map pair $pair\n"
        if exists $tps{$key}{$pair}{$config};
    $tps{$key}{$pair}{$config} = $tps;
}
die "ratio_summary: no runs in the input\n" unless @order;

my @rows;
for my $key (@order) {
    my ($workload, $map) = split /\t/, $key;
    my (@a, @b, @ratio);
    for my $pair (sort { $a <=> $b } keys %{ $tps{$key} }) {
        my $p = $tps{$key}{$pair};
        next unless exists $p->{A} && exists $p->{B};    # an interrupted pair
        next unless $p->{A} > 0;
        push @a,     $p->{A};
        push @b,     $p->{B};
        push @ratio, $p->{B} / $p->{A};
    }
    next unless @ratio;
    srand($seed);    # the same seed per workload: its interval does not depend on the others
    my ($lo, $hi) = bootstrap_median_ci(\@ratio);
    my $med   = median(@ratio);
    my @met;
    push @met, 'interval contains 1.0' if $lo <= 1.0 && $hi >= 1.0;
    push @met, sprintf('median >= %g', $threshold) if $med >= $threshold;
    my $verdict = @met ? join('; ', @met)
        : sprintf('neither: B is slower (median %.4f < %g, interval excludes 1.0)', $med, $threshold);
    push @rows, {
        workload => $workload, map => $map, n => scalar(@ratio),
        a => median(@a), b => median(@b), med => $med, lo => $lo, hi => $hi,
        min => (sort { $a <=> $b } @ratio)[0], max => (sort { $b <=> $a } @ratio)[0],
        verdict => $verdict,
    };
}
die "ratio_summary: no complete pair in the input\n" unless @rows;

print "| workload | map | pairs | median TPS A (no ptrack) | median TPS B (ptrack) "
    . "| median ratio B/A | bootstrap 95% interval | pair ratios min..max |\n";
print "|---|---|---:|---:|---:|---:|---|---|\n";
for my $r (@rows) {
    printf "| %s | %s MB | %d | %.1f | %.1f | %.4f | [%.4f, %.4f] | %.3f..%.3f |\n",
        @$r{qw(workload map n a b med lo hi min max)};
}
print "\n";
for my $r (@rows) {
    printf "verdict %s (map %s MB): %s\n", $r->{workload}, $r->{map}, $r->{verdict};
}
printf "(bootstrap: %d resamples of the per-pair ratios, seed %d)\n", $resamples, $seed;
