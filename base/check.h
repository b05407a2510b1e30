// check.h: invariant checks. FEATHER_CHECK is always on and aborts with context: a broken
// invariant is a bug, not an input error. FEATHER_DCHECK compiles away in release builds and
// guards the heavier consistency checks and preconditions of the hot core.
#pragma once

#include <cstdio>
#include <cstdlib>

#define FEATHER_CHECK(cond, msg)                                                        \
  do {                                                                                  \
    if (!(cond)) [[unlikely]] {                                                         \
      std::fprintf(stderr, "%s:%d: check failed: %s (%s)\n", __FILE__, __LINE__, #cond, \
                   msg);                                                                \
      std::abort();                                                                     \
    }                                                                                   \
  } while (0)

#ifdef NDEBUG
#define FEATHER_DCHECK(cond, msg) \
  do {                            \
  } while (0)
#else
#define FEATHER_DCHECK(cond, msg) FEATHER_CHECK(cond, msg)
#endif
