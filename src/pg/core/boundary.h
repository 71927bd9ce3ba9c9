/*
 * boundary.h -- the C++/PostgreSQL boundary rules of src/pg, checked by the
 * compiler.
 *
 * PostgreSQL raises an error by longjmp-ing to the nearest sigsetjmp
 * (ereport(ERROR)) or by exiting the process (FATAL), straight over any C++
 * frames in between: their destructors never run.  And a C++ exception
 * cannot cross PostgreSQL's C frames.  So:
 *
 *  1. A frame that may ereport (it calls ereport, palloc, ReadDir, or code
 *     that does) keeps only objects with trivial destructors, whose skipping
 *     leaks nothing; memory comes from palloc, released with its memory
 *     context.  PTRACK_FRAME_SAFE(T, ...) asserts that T is trivially
 *     destructible: written next to each src/pg type such frames keep, and
 *     once per file for the engine types its frames keep.  Adding a
 *     destructor (or a member with one, such as a std::string) to any of them
 *     then fails to compile, naming the type.
 *
 *  2. No C++ exception starts below a PostgreSQL frame.  The build holds this
 *     on its own: everything is compiled with -fno-exceptions, and the
 *     Makefile's check-no-throw rejects a ptrack.so that imports a throwing
 *     C++ runtime function.  PTRACK_ENGINE_NOEXCEPT(&f, ...) states it in the
 *     API too: each file lists the engine functions it calls, and each must
 *     be declared noexcept (a function or a member function, const or not).
 *
 * The third rule, that engine code (src/engine, include/ptrack) never
 * includes a PostgreSQL header, is held by include/ptrack/engine_guard.h and
 * the Makefile.
 */
#ifndef PTRACK_PG_BOUNDARY_H
#define PTRACK_PG_BOUNDARY_H

#include <type_traits>

namespace ptrack::pg::boundary {

template <typename T>
struct FrameSafe {
    static_assert(std::is_trivially_destructible_v<T>,
                  "a type kept in a frame that may ereport must be trivially destructible (src/pg/core/boundary.h)");
    static constexpr bool value = true;
};

template <typename... T>
inline constexpr bool frame_safe = (FrameSafe<T>::value && ...);

template <typename F>
struct IsNoexcept : std::false_type {};
template <typename R, typename... A>
struct IsNoexcept<R (*)(A...) noexcept> : std::true_type {};
template <typename R, typename C, typename... A>
struct IsNoexcept<R (C::*)(A...) noexcept> : std::true_type {};
template <typename R, typename C, typename... A>
struct IsNoexcept<R (C::*)(A...) const noexcept> : std::true_type {};

template <auto F>
struct EngineCall {
    static_assert(IsNoexcept<decltype(F)>::value,
                  "an engine function called from src/pg must be declared noexcept (src/pg/core/boundary.h)");
    static constexpr bool value = true;
};

template <auto... F>
inline constexpr bool engine_calls_noexcept = (EngineCall<F>::value && ...);

}  // namespace ptrack::pg::boundary

#define PTRACK_FRAME_SAFE(...) static_assert(::ptrack::pg::boundary::frame_safe<__VA_ARGS__>)
#define PTRACK_ENGINE_NOEXCEPT(...) static_assert(::ptrack::pg::boundary::engine_calls_noexcept<__VA_ARGS__>)

#endif
