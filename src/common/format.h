// hattn/src/common/format.h -- the one message formatter of the library: printf into a std::string.
//
// NOTES:
//   * The library builds every message with this (validation errors, tensor-map errors) and uses
//     no iostreams. operator<< on a float, a pointer or std::hex looks up locale facets by their
//     global ids (std::num_put<char>::id, ...); in a process where another library exports its own
//     copy of libstdc++ (PyTorch loads several with RTLD_GLOBAL), those ids can bind to the other
//     copy and the lookup indexes a locale it did not build -- a crash in a path that only formats
//     an error message. vsnprintf lives in the C library, of which a process has one.
//   * Conversions: %p for pointers, %g for floats (NaN and infinities print as nan / inf), %#x for
//     flag bits, %lld / %llu with a cast for 64-bit integers.
#pragma once

#include <cstdarg>
#include <cstdio>
#include <string>

namespace hattn::common {

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 1, 2)))
#endif
inline std::string format(const char* fmt, ...) {
    va_list args;
    va_start(args, fmt);
    va_list again;
    va_copy(again, args);
    const int needed = std::vsnprintf(nullptr, 0, fmt, args);
    va_end(args);
    std::string out;
    if (needed > 0) {
        out.resize(static_cast<size_t>(needed));
        // C++17: data() of a non-const string is writable, and size() + 1 bytes include the NUL.
        std::vsnprintf(&out[0], out.size() + 1, fmt, again);
    }
    va_end(again);
    return out;
}

}  // namespace hattn::common
