/* rl_half.h — the one owner of IEEE half (f16) and bfloat16 (bf16) conversions on the host:
 * the loaders decode file weights with them, the CUDA upload encodes device weights with them,
 * the tests build references with them. static inline and branch-light so a conversion loop
 * vectorizes (model_stream.c converts every weight of a model through them).
 *
 * Semantics (checked in tests/test_cuda_host.c against the compiler's _Float16 and an exact
 * rounding reference):
 *   decode   exact, subnormal halves included, without touching a denormal float (so the
 *            result does not depend on the FPU's flush-to-zero mode);
 *   encode   round to nearest, ties to even; overflow to infinity (f16: |x| >= 65520);
 *            a NaN stays a NaN of the same sign, quieted, with the top payload bits kept. */
#ifndef RL_HALF_H
#define RL_HALF_H
#include <stdint.h>
#include <string.h>

static inline float rl_half_as_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t rl_half_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

static inline float rl_f16_to_f32(uint16_t h)
{
	uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
	uint32_t u = e == 0x1f ? 0x7f800000u | m << 13 : (e + 112) << 23 | m << 13;
	if (!e)                        /* zero or subnormal: m * 2^-24, exact from a small integer */
		u = rl_half_bits((float)m * 0x1p-24f);
	return rl_half_as_f32(u | (uint32_t)(h & 0x8000u) << 16);
}

static inline float rl_bf16_to_f32(uint16_t h)
{
	return rl_half_as_f32((uint32_t)h << 16);
}

static inline uint16_t rl_f32_to_bf16(float f)
{
	uint32_t u = rl_half_bits(f);
	uint16_t r = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16),   /* ties to even */
		 q = (uint16_t)((u >> 16) | 0x40);                           /* quiet NaN */
	return (u & 0x7fffffffu) > 0x7f800000u ? q : r;
}

static inline uint16_t rl_f32_to_f16(float f)
{
	uint32_t u = rl_half_bits(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
	if (a > 0x7f800000u)                                /* NaN: quiet, payload's top bits */
		return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
	if (a >= 0x477ff000u)                               /* >= 65520 rounds to inf */
		return (uint16_t)(sign | 0x7c00u);
	if (a < 0x38800000u) {                              /* below 2^-14: subnormal or zero */
		if (a < 0x33000000u)                        /* < 2^-25: rounds to zero */
			return (uint16_t)sign;
		uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
		uint32_t shift = 126 - e;                   /* 14..24: to units of 2^-24 */
		uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
		if (rem > half || (rem == half && (q & 1)))
			q++;
		return (uint16_t)(sign | q);
	}
	uint32_t r = a - 0x38000000u;                       /* rebias 127 -> 15, in place */
	r += 0xfffu + ((r >> 13) & 1);                      /* ties to even */
	return (uint16_t)(sign | (r >> 13));
}
#endif
