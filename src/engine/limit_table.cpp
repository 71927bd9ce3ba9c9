/*
 * limit_table.cpp -- the step rules and the sequence lock of the limit table;
 * what the table means and why its answers are never too small is in
 * ptrack/limit_table.h.
 *
 * Memory order of the sequence lock (the pattern of Boehm, "Can seqlocks get
 * along with programming language memory models?", 2012), with every shared
 * field accessed through __atomic builtins so that no access is a data race:
 *
 *   writer: seq = s + 1 (relaxed); release fence; steps (relaxed);
 *           seq = s + 2 (release)
 *   reader: s1 = seq (acquire); steps (relaxed); acquire fence;
 *           s2 = seq (relaxed); the copy is consistent iff s1 == s2, s1 even
 *
 * If the reader saw any step stored after the writer's "s + 1", its acquire
 * fence makes the writer's release fence happen before the second read, so
 * s2 >= s + 1 != s1 (for s1 <= s); if s1 already was the even value written
 * after some update, the acquire load makes that update's steps visible.  So
 * an accepted copy holds exactly the steps of one even sequence value: a
 * state the bucket really had while the read was going on.
 */
#include "ptrack/limit_table.h"

#include <cstring>
#include <thread>

namespace ptrack {

namespace {

/* Reads before a reader starts yielding the CPU, and in all before it gives up (answering 0). */
constexpr uint32_t kSpinReads = 64;
constexpr uint32_t kMaxReads = 2000;

inline void cpu_relax() noexcept
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

}  // namespace

uint32_t limit_steps_answer(const LimitSteps& steps, Lsn since) noexcept
{
    /* L increases: the first step at or after `since` has the smallest limit among those that count. */
    for (uint32_t j = 0; j < steps.count; ++j)
        if (steps.lsn[j] >= since)
            return steps.limit[j];
    return kNoLimit;
}

bool limit_steps_add(LimitSteps* steps, Lsn lsn, uint32_t limit) noexcept
{
    uint32_t n = steps->count;
    if (n > 0 && lsn < steps->lsn[n - 1])
        lsn = steps->lsn[n - 1]; /* claimed later than it happened: conservative */
    while (n > 0 && steps->limit[n - 1] >= limit)
        --n; /* dominated by the new event */
    if (n > 0 && steps->lsn[n - 1] == lsn) {
        /* Same LSN, smaller limit: the event adds nothing (and nothing was removed, M < limit). */
        return false;
    }
    if (n == kLimitSteps) {
        /* Merge the two oldest steps into (L_2, M_1). */
        steps->limit[1] = steps->limit[0];
        for (uint32_t j = 0; j + 1 < n; ++j) {
            steps->lsn[j] = steps->lsn[j + 1];
            steps->limit[j] = steps->limit[j + 1];
        }
        --n;
    }
    steps->lsn[n] = lsn;
    steps->limit[n] = limit;
    steps->count = n + 1;
    return true;
}

bool limit_steps_valid(const LimitSteps& steps) noexcept
{
    if (steps.count > kLimitSteps)
        return false;
    for (uint32_t j = 1; j < steps.count; ++j)
        if (steps.lsn[j] <= steps.lsn[j - 1] || steps.limit[j] <= steps.limit[j - 1])
            return false;
    return true;
}

LimitTable::LimitTable(void* region, uint32_t buckets) noexcept
    : buckets_(static_cast<Bucket*>(region)), bucket_count_(buckets)
{
}

void LimitTable::clear() noexcept
{
    std::memset(static_cast<void*>(buckets_), 0, bytes(bucket_count_));
}

bool LimitTable::read_bucket(uint32_t bucket, LimitSteps* out) const noexcept
{
    const Bucket& b = buckets_[bucket];
    for (uint32_t attempt = 0; attempt < kMaxReads; ++attempt) {
        if (attempt >= kSpinReads)
            std::this_thread::yield();
        const uint64_t s1 = b.sequence.load(Order::kAcquire);
        if (s1 & 1) {
            cpu_relax();
            continue;
        }
        LimitSteps copy;
        copy.count = b.count.load(Order::kRelaxed);
        for (uint32_t j = 0; j < kLimitSteps; ++j) {
            copy.lsn[j] = b.lsn[j].load(Order::kRelaxed);
            copy.limit[j] = b.limit[j].load(Order::kRelaxed);
        }
        atomic_fence(Order::kAcquire);
        const uint64_t s2 = b.sequence.load(Order::kRelaxed);
        if (s1 == s2 && copy.count <= kLimitSteps) {
            *out = copy;
            return true;
        }
        cpu_relax();
    }
    return false;
}

uint32_t LimitTable::bucket_answer(uint32_t bucket, Lsn since) const noexcept
{
    LimitSteps steps;
    if (!read_bucket(bucket, &steps))
        return 0; /* no consistent copy: every block, the most conservative answer */
    return limit_steps_answer(steps, since);
}

void LimitTable::write_bucket(uint32_t bucket, const LimitSteps& steps) noexcept
{
    Bucket& b = buckets_[bucket];
    const uint64_t s = b.sequence.load(Order::kRelaxed); /* only this writer changes it */
    b.sequence.store(s + 1, Order::kRelaxed);
    atomic_fence(Order::kRelease);
    for (uint32_t j = 0; j < kLimitSteps; ++j) {
        b.lsn[j].store(j < steps.count ? steps.lsn[j] : 0, Order::kRelaxed);
        b.limit[j].store(j < steps.count ? steps.limit[j] : 0, Order::kRelaxed);
    }
    b.count.store(steps.count, Order::kRelaxed);
    b.sequence.store(s + 2, Order::kRelease);
}

void LimitTable::add(uint32_t bucket, Lsn lsn, uint32_t limit) noexcept
{
    /* The writer reads its own bucket: no concurrent store, no sequence check needed. */
    const Bucket& b = buckets_[bucket];
    LimitSteps steps;
    steps.count = b.count.load(Order::kRelaxed);
    for (uint32_t j = 0; j < kLimitSteps; ++j) {
        steps.lsn[j] = b.lsn[j].load(Order::kRelaxed);
        steps.limit[j] = b.limit[j].load(Order::kRelaxed);
    }
    if (steps.count > kLimitSteps) {
        /* Cannot happen (write_bucket keeps buckets valid); if it did, answer "every block" forever. */
        steps.count = 1;
        steps.lsn[0] = UINT64_MAX;
        steps.limit[0] = 0;
        write_bucket(bucket, steps);
    }
    if (limit_steps_add(&steps, lsn, limit))
        write_bucket(bucket, steps);
}

}  // namespace ptrack
