// Included (last) by the AVX-512 kernel files: GCC 12 flags the _mm512_undefined_* pass-through
// inside its own intrinsics (extracts, masked conversions) as uninitialized once constant folding
// reaches them, a false positive; the rest of the file's warnings stay on.
#pragma once
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
