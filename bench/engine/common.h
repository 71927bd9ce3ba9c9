/*
 * bench/engine/common.h -- helpers shared by the engine benchmarks.
 *
 * The map region is allocated the way PostgreSQL allocates its main shared
 * memory segment (an anonymous MAP_SHARED mapping, 4 KB pages: this machine
 * has shmem transparent huge pages off, as most servers do), and touched
 * before any timing so page faults are not measured.  The random generator
 * is a fixed-seed splitmix64, so every run replays the same workload.
 */
#ifndef PTRACK_BENCH_COMMON_H
#define PTRACK_BENCH_COMMON_H

#include <sys/mman.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "ptrack/map.h"

namespace bench {

/* splitmix64 (Vigna, public domain), written from its published description. */
struct Rng {
    uint64_t state;
    explicit Rng(uint64_t seed) : state(seed) {}
    uint64_t next()
    {
        uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        return z ^ (z >> 31);
    }
    /* Uniform in [0, n). */
    uint64_t below(uint64_t n) { return ptrack::fastrange(next(), n); }
    /* Uniform in [lo, hi]. */
    uint64_t between(uint64_t lo, uint64_t hi) { return lo + below(hi - lo + 1); }
    /* Uniform in [0, 1). */
    double unit() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }
    /* Log-uniform integer in [lo, hi]. */
    uint64_t log_uniform(uint64_t lo, uint64_t hi)
    {
        const double v = std::exp(std::log(double(lo)) + unit() * (std::log(double(hi) + 1) - std::log(double(lo))));
        uint64_t r = static_cast<uint64_t>(v);
        return r < lo ? lo : (r > hi ? hi : r);
    }
};

/*
 * A zeroed, pre-faulted, page-aligned anonymous region.  By default shared
 * (as PostgreSQL's main segment with huge_pages = off: 4 KB pages); with
 * `huge`, private and advised for transparent 2 MB pages, to show what
 * huge_pages = on would change (the map lives in the main segment).
 */
inline void* alloc_region(uint64_t bytes, bool huge = false)
{
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, (huge ? MAP_PRIVATE : MAP_SHARED) | MAP_ANONYMOUS,
                   -1, 0);
    if (p == MAP_FAILED) {
        std::perror("mmap");
        std::exit(2);
    }
    if (huge)
        madvise(p, bytes, MADV_HUGEPAGE);
    std::memset(p, 0, bytes);
    return p;
}

/* Prints how much of this process's memory sits on transparent huge pages. */
inline void print_huge_pages()
{
    FILE* f = std::fopen("/proc/self/smaps_rollup", "r");
    if (f == nullptr)
        return;
    char line[256];
    while (std::fgets(line, sizeof line, f) != nullptr)
        if (std::strncmp(line, "AnonHugePages:", 14) == 0)
            std::printf("process %s", line);
    std::fclose(f);
}

inline void free_region(void* p, uint64_t bytes) { munmap(p, bytes); }

/* A map of `bytes` bytes (1 GB segments of 8 KB blocks, as a default build). */
struct OwnedMap {
    ptrack::MapGeometry geometry;
    void* region = nullptr;
    ptrack::Map map;
    OwnedMap(uint64_t bytes, uint32_t granule_shift = ptrack::MapGeometry::kDefaultGranuleShift, bool huge = false)
    {
        geometry = ptrack::MapGeometry::for_bytes(bytes, 131072, granule_shift);
        if (!geometry.valid()) {
            std::fprintf(stderr, "invalid geometry for %llu bytes\n", (unsigned long long)bytes);
            std::exit(2);
        }
        region = alloc_region(geometry.region_bytes(), huge);
        map = ptrack::Map(region, geometry);
    }
    ~OwnedMap() { free_region(region, geometry.region_bytes()); }
    OwnedMap(const OwnedMap&) = delete;
    OwnedMap& operator=(const OwnedMap&) = delete;
};

inline double now_seconds()
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/* A flat bitset over a few hundred million bits (the ground truth of a run). */
struct Bits {
    uint64_t* words = nullptr;
    uint64_t nbits = 0;
    explicit Bits(uint64_t n) : nbits(n) { words = static_cast<uint64_t*>(std::calloc((n + 63) / 64, 8)); }
    ~Bits() { std::free(words); }
    Bits(const Bits&) = delete;
    Bits& operator=(const Bits&) = delete;
    void set(uint64_t i) { words[i >> 6] |= uint64_t{1} << (i & 63); }
    bool test(uint64_t i) const { return (words[i >> 6] >> (i & 63)) & 1; }
    void clear() { std::memset(words, 0, (nbits + 63) / 64 * 8); }
    uint64_t count() const
    {
        uint64_t c = 0;
        for (uint64_t i = 0; i < (nbits + 63) / 64; ++i)
            c += static_cast<uint64_t>(__builtin_popcountll(words[i]));
        return c;
    }
};

/* CPU seconds of this process (all threads). */
inline double cpu_seconds()
{
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

/*
 * The relations of an "active set" holding `fraction` of a cluster's blocks
 * (indexes into cluster.relations, which have nblocks; cluster.total is the
 * sum), chosen in a fixed random order; every relation for fraction >= 1.
 */
template <class Cluster>
std::vector<uint32_t> active_set(const Cluster& c, double fraction, uint64_t seed)
{
    std::vector<uint32_t> order(c.relations.size());
    for (uint32_t i = 0; i < order.size(); ++i)
        order[i] = i;
    if (fraction >= 1.0)
        return order;
    Rng rng(seed);
    for (size_t i = order.size() - 1; i > 0; --i)
        std::swap(order[i], order[rng.below(i + 1)]);
    std::vector<uint32_t> chosen;
    uint64_t blocks = 0;
    for (uint32_t i : order) {
        if (static_cast<double>(blocks) >= fraction * static_cast<double>(c.total))
            break;
        chosen.push_back(i);
        blocks += c.relations[i].nblocks;
    }
    std::sort(chosen.begin(), chosen.end());
    return chosen;
}

}  // namespace bench

#endif
