/* cpu_features.h — what this CPU can run, with one owner: the kernels, the sampler and the
 * benchmarks ask here instead of probing CPUID or __builtin_cpu_supports themselves. Tests and
 * benchmarks narrow the set with a mask (rl_cpu_set_features), so every kernel path (AVX-512
 * without VNNI, without BF16, AVX2 without F16C...) runs on one machine.
 *
 * Two levels: the features (bits below, probed once: CPUID traps to the hypervisor in a VM),
 * and the ISA the kernels are written for (scalar, AVX2, AVX-512), which defaults to the best
 * the allowed features support and can be lowered with rl_cpu_set_isa. A kernel asks for the
 * ISA (which implementation) and for the features its variant needs (VNNI, BF16, F16C).
 */
#ifndef RL_CPU_FEATURES_H
#define RL_CPU_FEATURES_H
#include <stdint.h>

enum rl_cpu_feature {
	RL_CPUF_AVX2   = 1u << 0,      /* AVX2 and FMA */
	RL_CPUF_F16C   = 1u << 1,      /* IEEE half <-> single in hardware */
	RL_CPUF_AVX512 = 1u << 2,      /* AVX-512 F, VL and BW */
	RL_CPUF_VNNI   = 1u << 3,      /* AVX512-VNNI: vpdpbusd */
	RL_CPUF_BF16   = 1u << 4,      /* AVX512-BF16: vdpbf16ps, vcvtne2ps2bf16 */
};
#define RL_CPUF_ALL 0x1fu

/* What the CPU (and the OS's saved state) supports. */
uint32_t rl_cpu_features_detected(void);
/* The detected features that the mask allows: what the kernels may use. */
uint32_t rl_cpu_features(void);
/* Allows only the features in mask (process-wide; RL_CPUF_ALL restores them all) and lowers
 * the selected ISA to what they support. */
void rl_cpu_set_features(uint32_t mask);
/* Whether the CPU converts halves in hardware (rl_cpu_features() & RL_CPUF_F16C). */
int rl_cpu_has_f16c(void);
/* Whether the CPU is AMD's (CPUID's vendor string): a few tuning choices measured to differ
 * between AMD's and Intel's cores, each noted where it is made (none changes a result). */
int rl_cpu_is_amd(void);

enum rl_cpu_isa { RL_CPU_SCALAR = 0, RL_CPU_AVX2 = 1, RL_CPU_AVX512 = 2 };

/* The best ISA the allowed features support. */
enum rl_cpu_isa rl_cpu_isa_best(void);
/* Selects the implementation for all later calls (process-wide; the default is the best).
 * -ENOTSUP when the allowed features cannot run isa. */
int rl_cpu_set_isa(enum rl_cpu_isa isa);
enum rl_cpu_isa rl_cpu_isa(void);
const char *rl_cpu_isa_name(enum rl_cpu_isa isa);

#endif
