/*
 * atomic.h -- a value in shared memory that processes read and write only
 * atomically, with the memory order written at each use.
 *
 * Why a wrapper of our own: ptrack's shared state is plain structs in memory
 * the postmaster creates and zeroes (memset), and every process maps the
 * same bytes.  std::atomic<T> promises neither the layout of T nor that it
 * may live in memory no C++ constructor ran on, and PostgreSQL's
 * pg_atomic_* (port/atomics.h) cannot reach the engine, which includes no
 * PostgreSQL header.  Atomic<T> is exactly a T (same size and alignment,
 * trivially copyable and destructible, zero bytes are the value 0), lock-free
 * for every T it accepts (a lock would not work across processes), and
 * allocates nothing, throws nothing.  The GCC __atomic builtins are used
 * here and, for the map's slots (a raw array of words the write path marks
 * and the flush copies), in ptrack/map.h's atomic_max_lsn() and load_lsn().
 *
 * The memory orders, and when each is right:
 *   kRelaxed  counters, and fields that a later release store (or a
 *             sequence lock: SaveStats, LimitTable's buckets) publishes;
 *   kAcquire  a load after which what its writer stored before the value
 *             must be visible (the follower's applied_lsn: the marks of the
 *             records before it);
 *   kRelease  the store that publishes what was written before it;
 *   kAcqRel   a read-modify-write that does both (init_lsn's first value);
 *   kSeqCst   a store that must be visible before a later load of another
 *             location (the mark announcement, src/pg/capture/capture.h).
 * A group of fields says, where it is declared, what protects it and in
 * which order its writer publishes it (src/pg/core/shared_state.h).
 */
#ifndef PTRACK_ATOMIC_H
#define PTRACK_ATOMIC_H

#include <type_traits>

#include "ptrack/engine_guard.h"

namespace ptrack {

enum class Order : int {
    kRelaxed = __ATOMIC_RELAXED,
    kAcquire = __ATOMIC_ACQUIRE,
    kRelease = __ATOMIC_RELEASE,
    kAcqRel = __ATOMIC_ACQ_REL,
    kSeqCst = __ATOMIC_SEQ_CST,
};

/* A fence of `order` (kAcquire: no later load moves before it; kRelease: no earlier store after it). */
inline void atomic_fence(Order order) noexcept { __atomic_thread_fence(static_cast<int>(order)); }

template <typename T>
class Atomic {
    static_assert(std::is_trivially_copyable_v<T> && (std::is_integral_v<T> || std::is_pointer_v<T>),
                  "Atomic holds an integer or a pointer");
    static_assert(__atomic_always_lock_free(sizeof(T), 0), "shared memory needs lock-free atomics");

public:
    T load(Order order) const noexcept { return __atomic_load_n(&value_, static_cast<int>(order)); }
    void store(T value, Order order) noexcept { __atomic_store_n(&value_, value, static_cast<int>(order)); }

    /* Adds `delta`; returns the new value. */
    T add(T delta, Order order) noexcept { return __atomic_add_fetch(&value_, delta, static_cast<int>(order)); }

    /*
     * Stores `desired` if the value is `*expected` (true); else loads the
     * value into *expected (false).  Acquire-release on success, acquire on
     * failure: either way the caller sees what the winner published.
     */
    bool compare_exchange(T* expected, T desired) noexcept
    {
        return __atomic_compare_exchange_n(&value_, expected, desired, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    }

    /* Raises the value to `value` if it is smaller (release: publishes what was written before). */
    void store_max(T value) noexcept
    {
        T current = __atomic_load_n(&value_, __ATOMIC_RELAXED);
        while (current < value &&
               !__atomic_compare_exchange_n(&value_, &current, value, true, __ATOMIC_RELEASE, __ATOMIC_RELAXED)) {
        }
    }

private:
    T value_;
};

static_assert(sizeof(Atomic<unsigned long>) == sizeof(unsigned long) &&
                  alignof(Atomic<unsigned long>) == alignof(unsigned long) &&
                  std::is_trivially_copyable_v<Atomic<unsigned long>> &&
                  std::is_trivially_destructible_v<Atomic<unsigned long>> &&
                  std::is_standard_layout_v<Atomic<unsigned long>>,
              "an Atomic<T> is exactly a T in shared memory");

}  // namespace ptrack

#endif
