/* Token kernels for dataflex-rl (core/native.py compiles and loads this file).
 *
 * The one decision that reads every token of a batch is the token-level reweighter `ar`:
 * it needs each row's sum of p_t = exp(old_log_prob_t) over the valid tokens, then writes the
 * weights A_r * p_t + C_r. In eager torch that is several passes over a [B, T] tensor (exp,
 * mask, sum; exp, scale, mask). Here each is one loop per row over its valid tokens only
 * (rows are right-padded: row r has len[r] valid tokens first), vectorized by the compiler.
 *
 * exp is computed here, not by libm, so the loops vectorize without -ffast-math or a vector
 * math library: x = k ln2 + r with |r| <= ln2 / 2, exp(r) by its degree-7 Taylor polynomial
 * (truncation < 6e-9 relative), 2^k from the exponent bits. Relative error 1.3 float ulp at
 * most on [-87, 0] (measured; the tests allow 2), the range every value of a "plain" row lies in. A row with a value outside it
 * (> 0, < -87, NaN, infinite) is flagged odd and redone exactly by the caller in torch.
 */
#include <stdint.h>
#include <string.h>

#define LOG2E 1.44269504088896341f
#define LN2_HI 0.693145751953125f        /* 16 significant bits: k * LN2_HI is exact */
#define LN2_LO 1.42860682030941723e-06f  /* ln 2 - LN2_HI */
#define LOWEST -87.0f                     /* exp(-87) = 1.6e-38: still a normal float */
#define ROUNDER 12582912.0f               /* 1.5 * 2^23: adding it rounds to an integer */
#define ROUNDER_BITS 0x4B400000           /* its bit pattern */

static inline float exp_plain(float x) {
    /* x in [LOWEST, 0]. t holds round(x log2 e) = k in its low mantissa bits. */
    float t = x * LOG2E + ROUNDER;
    float kf = t - ROUNDER;
    float r = x - kf * LN2_HI;
    r = r - kf * LN2_LO;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    uint32_t tb; /* unsigned: any input (NaN, out of range) wraps, never undefined */
    memcpy(&tb, &t, sizeof tb);
    uint32_t bits = (tb + (uint32_t)(127 - ROUNDER_BITS)) << 23; /* 2^k: exponent k + 127 */
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* v clamped into [LOWEST, 0]; NaN -> 0 (x86 min/max return the second operand then). */
static inline float clamp_plain(float v) {
    float c = v < 0.0f ? v : 0.0f;
    return c > LOWEST ? c : LOWEST;
}

/* The exps of a span of values, into out (used by the accuracy test). */
void dfx_exp(const float *x, int64_t n, float *out) {
#pragma omp simd
    for (int64_t t = 0; t < n; t++) out[t] = exp_plain(clamp_plain(x[t]));
}

#define ONES 0x0101010101010101ULL /* eight bool bytes, all 1 */

/* Right padding: len[r] = the number of leading 1s of mask row r (bool bytes: 0 or 1).
 * Returns the first row with a 1 after a 0 (a hole: not right-padded), or -1 when none.
 * Eight bytes at a time: full words, then at most one partial word (its 1s first: on a
 * little- or big-endian machine alike, compared byte by byte), then zero words. */
int64_t dfx_prefix_lengths(const uint8_t *mask, int64_t B, int64_t T, int64_t *len) {
    int64_t W = T / 8;
    for (int64_t r = 0; r < B; r++) {
        const uint8_t *m = mask + r * T;
        int64_t i = 0;
        for (; i < W; i++) {
            uint64_t w;
            memcpy(&w, m + 8 * i, 8);
            if (w != ONES) break;
        }
        int64_t t = 8 * i; /* the first byte that may be 0 */
        int64_t end = t + 8 < T ? t + 8 : T;
        while (t < end && m[t]) t++;
        int64_t n = t;
        uint8_t rest = 0;
#pragma omp simd reduction(| : rest)
        for (int64_t u = t; u < T; u++) rest |= m[u];
        if (rest) return r;
        len[r] = n;
    }
    return -1;
}

/* sums[r] = sum over t < len[r] of x[r, t] (a NaN or infinity makes it non-finite). */
void dfx_row_sums(const float *x, const int64_t *len, int64_t B, int64_t T, double *sums) {
    for (int64_t r = 0; r < B; r++) {
        const float *xr = x + r * T;
        int64_t n = len[r];
        double total = 0.0;
        for (int64_t s = 0; s < n; s += 512) { /* float partial sums, added in double */
            int64_t e = s + 512 < n ? s + 512 : n;
            float part = 0.0f;
#pragma omp simd reduction(+ : part)
            for (int64_t t = s; t < e; t++) part += xr[t];
            total += part;
        }
        sums[r] = total;
    }
}

/* sums[r] = sum over t < len[r] of exp(x[r, t]); odd[r] = 1 when a value of those is not in
 * [LOWEST, 0] (a NaN included): then sums[r] is garbage and the caller redoes the row. No
 * clamp in the loop: odd values only make odd rows' results wrong, never undefined. */
void dfx_prob_row_sums(const float *x, const int64_t *len, int64_t B, int64_t T, double *sums,
                       uint8_t *odd) {
    for (int64_t r = 0; r < B; r++) {
        const float *xr = x + r * T;
        int64_t n = len[r];
        double total = 0.0;
        float lo = 0.0f, hi = LOWEST;
        int32_t nan = 0;
        for (int64_t s = 0; s < n; s += 512) { /* float partial sums, added in double */
            int64_t e = s + 512 < n ? s + 512 : n;
            float part = 0.0f;
#pragma omp simd reduction(+ : part) reduction(min : lo) reduction(max : hi) reduction(| : nan)
            for (int64_t t = s; t < e; t++) {
                float v = xr[t];
                lo = v < lo ? v : lo;
                hi = v > hi ? v : hi;
                nan |= v != v;
                part += exp_plain(v);
            }
            total += part;
        }
        sums[r] = total;
        odd[r] = nan || lo < LOWEST || hi > 0.0f;
    }
}

/* One row of dfx_affine_prob with plain stores. */
static void affine_row(const float *xr, float *o, int64_t n, int64_t T, float a, float c) {
#pragma omp simd
    for (int64_t t = 0; t < n; t++) o[t] = a * exp_plain(xr[t]) + c;
    if (n < T) memset(o + n, 0, (size_t)(T - n) * sizeof(float));
}

#if defined(__AVX__)
#include <immintrin.h>
/* One row with streaming stores (8 floats at a time, 32-byte aligned; the ends plain). */
static void affine_row_stream(const float *xr, float *o, int64_t n, int64_t T, float a, float c) {
    const __m256 zero = _mm256_setzero_ps();
    int64_t t = 0;
    for (; t < n && ((uintptr_t)(o + t) & 31); t++) o[t] = a * exp_plain(xr[t]) + c;
    for (; t + 8 <= n; t += 8) {
        float v[8];
#pragma omp simd
        for (int k = 0; k < 8; k++) v[k] = a * exp_plain(xr[t + k]) + c;
        _mm256_stream_ps(o + t, _mm256_loadu_ps(v));
    }
    for (; t < n; t++) o[t] = a * exp_plain(xr[t]) + c;
    for (; t < T && ((uintptr_t)(o + t) & 31); t++) o[t] = 0.0f;
    for (; t + 8 <= T; t += 8) _mm256_stream_ps(o + t, zero);
    for (; t < T; t++) o[t] = 0.0f;
}
#endif

/* Outputs of at least this many floats (64 MiB) are written with streaming stores (with AVX):
 * far larger than the caches and not read back here, so a normal store would first read
 * each line it writes; a smaller output stays in cache for the loss that reads it next. */
#define STREAM_MIN ((int64_t)1 << 24)

/* out[r, t] = A[r] * exp(x[r, t]) + C[r] for t < len[r], 0 after; a row with A[r] = C[r] = 0
 * is all 0 (x not read). Odd rows' values are garbage: the caller redoes them. */
void dfx_affine_prob(const float *x, const int64_t *len, int64_t B, int64_t T, const float *A,
                     const float *C, float *out) {
#if defined(__AVX__)
    int stream = B * T >= STREAM_MIN;
#endif
    for (int64_t r = 0; r < B; r++) {
        int64_t n = (A[r] == 0.0f && C[r] == 0.0f) ? 0 : len[r];
#if defined(__AVX__)
        if (stream) {
            affine_row_stream(x + r * T, out + r * T, n, T, A[r], C[r]);
            continue;
        }
#endif
        affine_row(x + r * T, out + r * T, n, T, A[r], C[r]);
    }
#if defined(__AVX__)
    if (stream) _mm_sfence(); /* streaming stores are visible to every reader after this */
#endif
}
