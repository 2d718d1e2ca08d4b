/* cpu_features.c — the CPU's features and the kernels' ISA (see cpu_features.h). */
#include <cpuid.h>
#include <errno.h>
#include <stdatomic.h>
#include "kernels/cpu_features.h"

#define UNPROBED 0x80000000u

static _Atomic uint32_t detected = UNPROBED, allowed = RL_CPUF_ALL;
static _Atomic int cur_isa = -1;       /* -1: the best, picked at first use */

/* A CPUID bit (reg 0..3: EAX, EBX, ECX, EDX of leaf/sub). */
static int cpuid_bit(unsigned leaf, unsigned sub, int reg, unsigned bit)
{
	unsigned e[4] = { 0, 0, 0, 0 };
	return __get_cpuid_count(leaf, sub, &e[0], &e[1], &e[2], &e[3]) && (e[reg] >> bit & 1);
}

uint32_t rl_cpu_features_detected(void)
{
	uint32_t f = atomic_load_explicit(&detected, memory_order_relaxed);
	if (!(f & UNPROBED))
		return f;
	f = 0;
#if defined(__x86_64__)
	/* __builtin_cpu_supports also checks that the OS saves the AVX / AVX-512 state; the bits
	 * clang 14's builtin does not know (f16c, avx512vnni, avx512bf16) come from CPUID and count
	 * only on top of the level whose state they need */
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
		f |= RL_CPUF_AVX2;
		if (cpuid_bit(1, 0, 2, 29))                            /* CPUID.1:ECX.F16C */
			f |= RL_CPUF_F16C;
		if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
		    __builtin_cpu_supports("avx512bw")) {
			f |= RL_CPUF_AVX512;
			if (cpuid_bit(7, 0, 2, 11))                     /* CPUID.(7,0):ECX.AVX512_VNNI */
				f |= RL_CPUF_VNNI;
			if (cpuid_bit(7, 1, 0, 5))                      /* CPUID.(7,1):EAX.AVX512_BF16 */
				f |= RL_CPUF_BF16;
		}
	}
#endif
	atomic_store_explicit(&detected, f, memory_order_relaxed);   /* every thread finds the same */
	return f;
}

uint32_t rl_cpu_features(void)
{
	return rl_cpu_features_detected() & atomic_load_explicit(&allowed, memory_order_relaxed);
}

int rl_cpu_has_f16c(void)
{
	return (rl_cpu_features() & RL_CPUF_F16C) != 0;
}

int rl_cpu_is_amd(void)
{
	static _Atomic int amd = -1;
	int v = atomic_load_explicit(&amd, memory_order_relaxed);
	if (v < 0) {
		unsigned e[4] = { 0, 0, 0, 0 };
		__get_cpuid(0, &e[0], &e[1], &e[2], &e[3]);
		v = e[1] == 0x68747541u && e[3] == 0x69746e65u && e[2] == 0x444d4163u;   /* "Auth" "enti" "cAMD" */
		atomic_store_explicit(&amd, v, memory_order_relaxed);
	}
	return v;
}

enum rl_cpu_isa rl_cpu_isa_best(void)
{
	uint32_t f = rl_cpu_features();
	return f & RL_CPUF_AVX512 && f & RL_CPUF_AVX2 ? RL_CPU_AVX512 : f & RL_CPUF_AVX2 ? RL_CPU_AVX2 : RL_CPU_SCALAR;
}

void rl_cpu_set_features(uint32_t mask)
{
	atomic_store_explicit(&allowed, mask & RL_CPUF_ALL, memory_order_relaxed);
	int best = (int)rl_cpu_isa_best(), cur = atomic_load_explicit(&cur_isa, memory_order_relaxed);
	if (cur > best)
		atomic_store_explicit(&cur_isa, best, memory_order_relaxed);
}

int rl_cpu_set_isa(enum rl_cpu_isa isa)
{
	if (isa > rl_cpu_isa_best())
		return -ENOTSUP;
	atomic_store_explicit(&cur_isa, (int)isa, memory_order_relaxed);
	return 0;
}

enum rl_cpu_isa rl_cpu_isa(void)
{
	int c = atomic_load_explicit(&cur_isa, memory_order_relaxed);
	if (c < 0) {
		c = (int)rl_cpu_isa_best();
		atomic_store_explicit(&cur_isa, c, memory_order_relaxed);
	}
	return (enum rl_cpu_isa)c;
}

const char *rl_cpu_isa_name(enum rl_cpu_isa isa)
{
	return isa == RL_CPU_AVX512 ? "avx512" : isa == RL_CPU_AVX2 ? "avx2" : "scalar";
}
