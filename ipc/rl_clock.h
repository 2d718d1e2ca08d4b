/* rl_clock.h — monotonic time and the spin-wait used for modelled step costs. */
#ifndef RL_CLOCK_H
#define RL_CLOCK_H
#include <stdint.h>
#include <time.h>

static inline uint64_t rl_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void rl_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}
#endif
