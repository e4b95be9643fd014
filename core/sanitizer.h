// HG_ASAN: 1 in AddressSanitizer builds (gcc defines __SANITIZE_ADDRESS__, clang answers
// __has_feature), for the allocators that must hand their blocks back to it there.
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define HG_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HG_ASAN 1
#endif
#endif
#ifndef HG_ASAN
#define HG_ASAN 0
#endif
#if HG_ASAN
#include <sanitizer/asan_interface.h>
#endif
