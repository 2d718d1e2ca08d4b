/* model_dtype.c — the one table of on-disk weight types (enum rl_dt): name, GGML type id,
 * block geometry, where a block keeps its f16 scales, and the decoder of each block format
 * into fp32. The decoders follow ggml's reference dequantize_row_* (ggml-quants.c) operation
 * for operation, in the same float order, so a weight decodes to the same fp32 bits as in
 * ggml (checked against gguf-py's numpy dequantizers by tests/test_quant.c).
 *
 * Block layouts (bytes; "f16" = IEEE half, little-endian; QK_K = 256):
 *   Q4_0   32 w, 18 B: f16 d, u8 qs[16]                      w = d * (nibble - 8)
 *   Q4_1   32 w, 20 B: f16 d, f16 m, u8 qs[16]               w = d * nibble + m
 *   Q5_0   32 w, 22 B: f16 d, u8 qh[4], u8 qs[16]            w = d * (5-bit - 16)
 *   Q5_1   32 w, 24 B: f16 d, f16 m, u8 qh[4], u8 qs[16]     w = d * 5-bit + m
 *   Q8_0   32 w, 34 B: f16 d, i8 qs[32]                      w = d * q
 *   Q2_K  256 w, 84 B: u8 scales[16] (4-bit scale | 4-bit min), u8 qs[64], f16 d, f16 dmin
 *   Q3_K  256 w,110 B: u8 hmask[32], u8 qs[64], u8 scales[12] (16 x 6-bit), f16 d
 *   Q4_K  256 w,144 B: f16 d, f16 dmin, u8 scales[12] (8 x 6-bit scale, 8 x 6-bit min), u8 qs[128]
 *   Q5_K  256 w,176 B: f16 d, f16 dmin, u8 scales[12], u8 qh[32], u8 qs[128]
 *   Q6_K  256 w,210 B: u8 ql[128], u8 qh[64], i8 scales[16], f16 d
 *   IQ4_NL 32 w, 18 B: f16 d, u8 qs[16]                      w = d * kvalues[nibble]
 *   IQ4_XS 256 w,136 B: f16 d, u16 scales_h, u8 scales_l[4], u8 qs[128]
 * In every 32-weight group of the 4-bit formats, byte j holds weight j (low nibble) and
 * weight j + 16 (high nibble). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include "kernels/rl_half.h"
#include "runtime/model/model_internal.h"

#define QK_K 256

static inline float h2f(const uint8_t *p) { uint16_t h; memcpy(&h, p, 2); return rl_f16_to_f32(h); }

/* the 16 non-linear levels of IQ4_NL and IQ4_XS (ggml's kvalues_iq4nl) */
static const int8_t kvalues_iq4nl[16] = { -127, -104, -83, -65, -49, -35, -22, -10,
					  1, 13, 25, 38, 53, 69, 89, 113 };

static void dec_q4_0(float *y, const uint8_t *b)
{
	const float d = h2f(b);
	for (int j = 0; j < 16; j++) {
		const int x0 = (b[2 + j] & 0x0F) - 8, x1 = (b[2 + j] >> 4) - 8;
		y[j] = x0 * d;
		y[j + 16] = x1 * d;
	}
}

static void dec_q4_1(float *y, const uint8_t *b)
{
	const float d = h2f(b), m = h2f(b + 2);
	for (int j = 0; j < 16; j++) {
		const int x0 = b[4 + j] & 0x0F, x1 = b[4 + j] >> 4;
		y[j] = x0 * d + m;
		y[j + 16] = x1 * d + m;
	}
}

static void dec_q5_0(float *y, const uint8_t *b)
{
	const float d = h2f(b);
	uint32_t qh;
	memcpy(&qh, b + 2, 4);
	for (int j = 0; j < 16; j++) {
		const uint8_t xh0 = ((qh >> (j + 0)) << 4) & 0x10, xh1 = ((qh >> (j + 12))) & 0x10;
		const int x0 = ((b[6 + j] & 0x0F) | xh0) - 16, x1 = ((b[6 + j] >> 4) | xh1) - 16;
		y[j] = x0 * d;
		y[j + 16] = x1 * d;
	}
}

static void dec_q5_1(float *y, const uint8_t *b)
{
	const float d = h2f(b), m = h2f(b + 2);
	uint32_t qh;
	memcpy(&qh, b + 4, 4);
	for (int j = 0; j < 16; j++) {
		const uint8_t xh0 = ((qh >> (j + 0)) << 4) & 0x10, xh1 = ((qh >> (j + 12))) & 0x10;
		const int x0 = (b[8 + j] & 0x0F) | xh0, x1 = (b[8 + j] >> 4) | xh1;
		y[j] = x0 * d + m;
		y[j + 16] = x1 * d + m;
	}
}

static void dec_q8_0(float *y, const uint8_t *b)
{
	const float d = h2f(b);
	for (int j = 0; j < 32; j++)
		y[j] = d * (float)(int8_t)b[2 + j];
}

static void dec_q2_k(float *y, const uint8_t *b)
{
	const uint8_t *scales = b, *q = b + 16;
	const float d = h2f(b + 80), min = h2f(b + 82);
	int is = 0;
	for (int n = 0; n < QK_K; n += 128) {
		int shift = 0;
		for (int j = 0; j < 4; ++j) {
			uint8_t sc = scales[is++];
			float dl = d * (sc & 0xF), ml = min * (sc >> 4);
			for (int l = 0; l < 16; ++l)
				*y++ = dl * ((int8_t)((q[l] >> shift) & 3)) - ml;
			sc = scales[is++];
			dl = d * (sc & 0xF);
			ml = min * (sc >> 4);
			for (int l = 0; l < 16; ++l)
				*y++ = dl * ((int8_t)((q[l + 16] >> shift) & 3)) - ml;
			shift += 2;
		}
		q += 32;
	}
}

static void dec_q3_k(float *y, const uint8_t *b)
{
	const uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f;
	const uint8_t *hm = b, *q = b + 32;
	const float d_all = h2f(b + 108);
	uint32_t aux[4];
	memcpy(aux, b + 96, 12);
	uint32_t tmp = aux[2];
	aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
	aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
	aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
	aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
	int8_t scales[16];
	memcpy(scales, aux, 16);
	uint8_t m = 1;
	int is = 0;
	for (int n = 0; n < QK_K; n += 128) {
		int shift = 0;
		for (int j = 0; j < 4; ++j) {
			float dl = d_all * (scales[is++] - 32);
			for (int l = 0; l < 16; ++l)
				*y++ = dl * ((int8_t)((q[l + 0] >> shift) & 3) - ((hm[l + 0] & m) ? 0 : 4));
			dl = d_all * (scales[is++] - 32);
			for (int l = 0; l < 16; ++l)
				*y++ = dl * ((int8_t)((q[l + 16] >> shift) & 3) - ((hm[l + 16] & m) ? 0 : 4));
			shift += 2;
			m <<= 1;
		}
		q += 32;
	}
}

/* the j-th 6-bit scale and min of Q4_K/Q5_K's 12 packed bytes */
static inline void scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m)
{
	if (j < 4) {
		*d = q[j] & 63;
		*m = q[j + 4] & 63;
	} else {
		*d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
		*m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
	}
}

static void dec_q4_k(float *y, const uint8_t *b)
{
	const float d = h2f(b), min = h2f(b + 2);
	const uint8_t *scales = b + 4, *q = b + 16;
	int is = 0;
	uint8_t sc, m;
	for (int j = 0; j < QK_K; j += 64) {
		scale_min_k4(is + 0, scales, &sc, &m);
		const float d1 = d * sc, m1 = min * m;
		scale_min_k4(is + 1, scales, &sc, &m);
		const float d2 = d * sc, m2 = min * m;
		for (int l = 0; l < 32; ++l)
			*y++ = d1 * (q[l] & 0xF) - m1;
		for (int l = 0; l < 32; ++l)
			*y++ = d2 * (q[l] >> 4) - m2;
		q += 32;
		is += 2;
	}
}

static void dec_q5_k(float *y, const uint8_t *b)
{
	const float d = h2f(b), min = h2f(b + 2);
	const uint8_t *scales = b + 4, *qh = b + 16, *ql = b + 48;
	int is = 0;
	uint8_t sc, m, u1 = 1, u2 = 2;
	for (int j = 0; j < QK_K; j += 64) {
		scale_min_k4(is + 0, scales, &sc, &m);
		const float d1 = d * sc, m1 = min * m;
		scale_min_k4(is + 1, scales, &sc, &m);
		const float d2 = d * sc, m2 = min * m;
		for (int l = 0; l < 32; ++l)
			*y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
		for (int l = 0; l < 32; ++l)
			*y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
		ql += 32;
		is += 2;
		u1 <<= 2;
		u2 <<= 2;
	}
}

static void dec_q6_k(float *y, const uint8_t *b)
{
	const float d = h2f(b + 208);
	const uint8_t *ql = b, *qh = b + 128;
	const int8_t *sc = (const int8_t *)(b + 192);
	for (int n = 0; n < QK_K; n += 128) {
		for (int l = 0; l < 32; ++l) {
			int is = l / 16;
			const int8_t q1 = (int8_t)((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
			const int8_t q2 = (int8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
			const int8_t q3 = (int8_t)((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
			const int8_t q4 = (int8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
			y[l + 0] = d * sc[is + 0] * q1;
			y[l + 32] = d * sc[is + 2] * q2;
			y[l + 64] = d * sc[is + 4] * q3;
			y[l + 96] = d * sc[is + 6] * q4;
		}
		y += 128;
		ql += 64;
		qh += 32;
		sc += 8;
	}
}

static void dec_iq4_nl(float *y, const uint8_t *b)
{
	const float d = h2f(b);
	for (int j = 0; j < 16; ++j) {
		y[j + 0] = d * kvalues_iq4nl[b[2 + j] & 0xf];
		y[j + 16] = d * kvalues_iq4nl[b[2 + j] >> 4];
	}
}

static void dec_iq4_xs(float *y, const uint8_t *b)
{
	const float d = h2f(b);
	uint16_t scales_h;
	memcpy(&scales_h, b + 2, 2);
	const uint8_t *scales_l = b + 4, *qs = b + 8;
	for (int ib = 0; ib < QK_K / 32; ++ib) {
		const int ls = ((scales_l[ib / 2] >> 4 * (ib % 2)) & 0xf) | (((scales_h >> 2 * ib) & 3) << 4);
		const float dl = d * (ls - 32);
		for (int j = 0; j < 16; ++j) {
			y[j + 0] = dl * kvalues_iq4nl[qs[j] & 0xf];
			y[j + 16] = dl * kvalues_iq4nl[qs[j] >> 4];
		}
		y += 32;
		qs += 16;
	}
}

/* f16_off: the block's f16 scale fields (the writer's random blocks give them sane values) */
static const struct rl_dt_info dt_table[RL_DT_COUNT] = {
	[RL_DT_F32]    = { "F32",     0,  1,   4, 0, { 0, 0 },    NULL },
	[RL_DT_F16]    = { "F16",     1,  1,   2, 0, { 0, 0 },    NULL },
	[RL_DT_BF16]   = { "BF16",   30,  1,   2, 0, { 0, 0 },    NULL },
	[RL_DT_Q8_0]   = { "Q8_0",    8, 32,  34, 1, { 0, 0 },    dec_q8_0 },
	[RL_DT_Q4_0]   = { "Q4_0",    2, 32,  18, 1, { 0, 0 },    dec_q4_0 },
	[RL_DT_Q4_1]   = { "Q4_1",    3, 32,  20, 2, { 0, 2 },    dec_q4_1 },
	[RL_DT_Q5_0]   = { "Q5_0",    6, 32,  22, 1, { 0, 0 },    dec_q5_0 },
	[RL_DT_Q5_1]   = { "Q5_1",    7, 32,  24, 2, { 0, 2 },    dec_q5_1 },
	[RL_DT_Q2_K]   = { "Q2_K",   10, 256, 84, 2, { 80, 82 },  dec_q2_k },
	[RL_DT_Q3_K]   = { "Q3_K",   11, 256, 110, 1, { 108, 0 }, dec_q3_k },
	[RL_DT_Q4_K]   = { "Q4_K",   12, 256, 144, 2, { 0, 2 },   dec_q4_k },
	[RL_DT_Q5_K]   = { "Q5_K",   13, 256, 176, 2, { 0, 2 },   dec_q5_k },
	[RL_DT_Q6_K]   = { "Q6_K",   14, 256, 210, 1, { 208, 0 }, dec_q6_k },
	[RL_DT_IQ4_NL] = { "IQ4_NL", 20, 32,  18, 1, { 0, 0 },    dec_iq4_nl },
	[RL_DT_IQ4_XS] = { "IQ4_XS", 23, 256, 136, 1, { 0, 0 },   dec_iq4_xs },
};

const struct rl_dt_info *rl_dt_info(int dt)
{
	return dt >= 0 && dt < RL_DT_COUNT ? &dt_table[dt] : NULL;
}

int rl_dt_of_ggml(uint32_t t)
{
	for (int i = 0; i < RL_DT_COUNT; i++)
		if (dt_table[i].ggml == t)
			return i;
	return -1;
}

int rl_ggml_of_dt(int dt)
{
	return dt >= 0 && dt < RL_DT_COUNT ? (int)dt_table[dt].ggml : -1;
}

int rl_dt_from_name(const char *s)
{
	for (int i = 0; i < RL_DT_COUNT; i++)
		if (!strcasecmp(s, dt_table[i].name))
			return i;
	return -1;
}

void rl_dt_names(char *out, size_t len)
{
	size_t n = 0;
	if (len)
		out[0] = 0;
	for (int i = 0; i < RL_DT_COUNT && n < len; i++) {
		int k = snprintf(out + n, len - n, "%s%s", i ? ", " : "", dt_table[i].name);
		n += k > 0 ? (size_t)k : 0;
	}
}

/* every GGML type id there is (ggml.h's enum ggml_type), for naming the ones we refuse */
const char *rl_ggml_type_name(uint32_t t)
{
	static const char *const names[] = {
		[0] = "F32", [1] = "F16", [2] = "Q4_0", [3] = "Q4_1", [4] = "Q4_2 (removed)",
		[5] = "Q4_3 (removed)", [6] = "Q5_0", [7] = "Q5_1", [8] = "Q8_0", [9] = "Q8_1",
		[10] = "Q2_K", [11] = "Q3_K", [12] = "Q4_K", [13] = "Q5_K", [14] = "Q6_K", [15] = "Q8_K",
		[16] = "IQ2_XXS", [17] = "IQ2_XS", [18] = "IQ3_XXS", [19] = "IQ1_S", [20] = "IQ4_NL",
		[21] = "IQ3_S", [22] = "IQ2_S", [23] = "IQ4_XS", [24] = "I8", [25] = "I16", [26] = "I32",
		[27] = "I64", [28] = "F64", [29] = "IQ1_M", [30] = "BF16", [34] = "TQ1_0",
		[35] = "TQ2_0", [39] = "MXFP4",
	};
	return t < sizeof names / sizeof *names && names[t] ? names[t] : "unknown";
}

int rl_dt_size(int dtype, uint64_t nelem, uint64_t *nbytes)
{
	const struct rl_dt_info *d = rl_dt_info(dtype);
	if (!d || nelem % d->blk_elems)
		return -EINVAL;
	return __builtin_mul_overflow(nelem / d->blk_elems, (uint64_t)d->blk_bytes, nbytes) ? -EINVAL : 0;
}

void rl_dt_block(int dtype, uint32_t *bytes, uint32_t *elems)
{
	const struct rl_dt_info *d = rl_dt_info(dtype);
	*elems = d ? d->blk_elems : 1;
	*bytes = d ? d->blk_bytes : 4;
}

double rl_dt_min_bytes_per_weight(void)
{
	double m = 4;
	for (int i = 0; i < RL_DT_COUNT; i++)
		if ((double)dt_table[i].blk_bytes / dt_table[i].blk_elems < m)
			m = (double)dt_table[i].blk_bytes / dt_table[i].blk_elems;
	return m;
}

int rl_dt_decode(int dtype, float *y, const void *src, uint64_t nblocks)
{
	const struct rl_dt_info *d = rl_dt_info(dtype);
	if (!d || !d->decode)
		return -EINVAL;
	const uint8_t *b = src;
	for (uint64_t i = 0; i < nblocks; i++)
		d->decode(y + i * d->blk_elems, b + i * d->blk_bytes);
	return 0;
}

static void enc_q8_0(uint8_t *blk, const float *x)
{
	float amax = 0;
	for (int i = 0; i < 32; i++)
		amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
	const float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
	const uint16_t h = rl_f32_to_f16(d);
	memcpy(blk, &h, 2);
	for (int i = 0; i < 32; i++)
		blk[2 + i] = (uint8_t)(int8_t)roundf(x[i] * id);
}

static uint8_t clamp_u(float v, int hi)
{
	const int q = (int)lrintf(v);
	return (uint8_t)(q < 0 ? 0 : q > hi ? hi : q);
}

/* make_qkx2_quants of ggml-quants.c: q in [0, nmax] with w ≈ scale·q − min (min <= 0 kept
 * as its negation in *the_min) minimising the error weighted by wt[], starting from the
 * range and trying nstep + 1 stretched scales, each refitted by weighted least squares */
static float qkx2(int n, int nmax, const float *x, const float *wt, uint8_t *L, float *the_min, uint8_t *Laux,
		  float rmin, float rdelta, int nstep)
{
	float mn = x[0], mx = x[0], sum_w = wt[0], sum_x = wt[0] * x[0];
	for (int i = 1; i < n; i++) {
		mn = x[i] < mn ? x[i] : mn;
		mx = x[i] > mx ? x[i] : mx;
		sum_w += wt[i];
		sum_x += wt[i] * x[i];
	}
	if (mn > 0)
		mn = 0;
	if (mx == mn) {
		memset(L, 0, (size_t)n);
		*the_min = -mn;
		return 0.0f;
	}
	float iscale = nmax / (mx - mn), scale = 1 / iscale, best = 0;
	for (int i = 0; i < n; i++) {
		const int l = (int)lrintf(iscale * (x[i] - mn));
		L[i] = (uint8_t)(l < 0 ? 0 : l > nmax ? nmax : l);
		const float diff = scale * L[i] + mn - x[i];
		best += wt[i] * diff * diff;
	}
	for (int is = 0; is <= nstep; is++) {
		iscale = (rmin + rdelta * is + nmax) / (mx - mn);
		float sum_l = 0, sum_l2 = 0, sum_xl = 0;
		for (int i = 0; i < n; i++) {
			int l = (int)lrintf(iscale * (x[i] - mn));
			l = l < 0 ? 0 : l > nmax ? nmax : l;
			Laux[i] = (uint8_t)l;
			sum_l += wt[i] * l;
			sum_l2 += wt[i] * l * l;
			sum_xl += wt[i] * l * x[i];
		}
		const float D = sum_w * sum_l2 - sum_l * sum_l;
		if (D <= 0)
			continue;
		float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D, this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
		if (this_min > 0) {
			this_min = 0;
			this_scale = sum_xl / sum_l2;
		}
		float err = 0;
		for (int i = 0; i < n; i++) {
			const float diff = this_scale * Laux[i] + this_min - x[i];
			err += wt[i] * diff * diff;
		}
		if (err < best) {
			memcpy(L, Laux, (size_t)n);
			best = err;
			scale = this_scale;
			mn = this_min;
		}
	}
	*the_min = -mn;
	return scale;
}

/* Q4_K as ggml's quantize_row_q4_K_ref: w = d·sc_j·q − dmin·m_j over 8 sub-blocks of 32
 * (dec_q4_k); each sub-block's scale and min from qkx2 (weights rms + |w|), both then stored
 * as 6-bit multiples of the block's f16 d = max scale / 63 and dmin = max min / 63, and q
 * rounded again against the stored values */
static void enc_q4_k(uint8_t *blk, const float *x)
{
	uint8_t L[256], Laux[32], sc[8], m[8];
	float wt[32], mins[8], scales[8], max_scale = 0, max_min = 0;
	for (int j = 0; j < 8; j++) {
		float sum_x2 = 0;
		for (int l = 0; l < 32; l++)
			sum_x2 += x[32 * j + l] * x[32 * j + l];
		const float av_x = sqrtf(sum_x2 / 32);
		for (int l = 0; l < 32; l++)
			wt[l] = av_x + fabsf(x[32 * j + l]);
		scales[j] = qkx2(32, 15, x + 32 * j, wt, L + 32 * j, &mins[j], Laux, -1.0f, 0.1f, 20);
		max_scale = scales[j] > max_scale ? scales[j] : max_scale;
		max_min = mins[j] > max_min ? mins[j] : max_min;
	}
	const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0, inv_min = max_min > 0 ? 63.0f / max_min : 0;
	for (int j = 0; j < 8; j++) {
		sc[j] = clamp_u(inv_scale * scales[j], 63);
		m[j] = clamp_u(inv_min * mins[j], 63);
	}
	const uint16_t hd = rl_f32_to_f16(max_scale / 63.0f), hm = rl_f32_to_f16(max_min / 63.0f);
	const float d = rl_f16_to_f32(hd), dmin = rl_f16_to_f32(hm);
	memcpy(blk, &hd, 2);
	memcpy(blk + 2, &hm, 2);
	uint8_t *s = blk + 4, *qs = blk + 16;
	for (int j = 0; j < 4; j++) {          /* the packing scale_min_k4 reads */
		s[j] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
		s[j + 4] = (uint8_t)(m[j] | (m[j + 4] >> 4) << 6);
		s[j + 8] = (uint8_t)((sc[j + 4] & 0xF) | (m[j + 4] & 0xF) << 4);
	}
	for (int j = 0; j < 8; j++) {
		const float ds = d * sc[j], dm = dmin * m[j];
		if (!ds)
			continue;                      /* L keeps qkx2's values, as ggml's */
		for (int l = 0; l < 32; l++)
			L[32 * j + l] = clamp_u((x[32 * j + l] + dm) / ds, 15);
	}
	for (int c = 0; c < 4; c++)            /* 64 weights: low nibbles the first 32, high the next */
		for (int l = 0; l < 32; l++)
			qs[32 * c + l] = (uint8_t)(L[64 * c + l] | L[64 * c + 32 + l] << 4);
}

int rl_dt_quantize(int dt, void *out, const float *x, uint64_t nblocks)
{
	void (*enc)(uint8_t *, const float *) = dt == RL_DT_Q8_0 ? enc_q8_0 : dt == RL_DT_Q4_K ? enc_q4_k : NULL;
	if (!enc)
		return -ENOTSUP;
	const struct rl_dt_info *d = rl_dt_info(dt);
	for (uint64_t i = 0; i < nblocks; i++)
		enc((uint8_t *)out + i * d->blk_bytes, x + i * d->blk_elems);
	return 0;
}

/* xorshift64*: the writer's and tests' random blocks are reproducible from a seed */
static uint64_t rnd(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545F4914F6CDD1Dull;
}

int rl_dt_random_block(int dt, uint8_t *blk, uint64_t *state, float amax)
{
	const struct rl_dt_info *d = rl_dt_info(dt);
	if (!d || !d->decode || !*state)
		return -EINVAL;
	for (uint32_t i = 0; i < d->blk_bytes; i++)
		blk[i] = (uint8_t)(rnd(state) >> 56);
	/* every format is linear in its f16 scales (w = d * A + m * B): set them to 1, measure,
	 * then scale them all so the block's largest |w| is about amax */
	uint16_t one = rl_f32_to_f16(1.0f);
	for (int k = 0; k < d->n_f16; k++)
		memcpy(blk + d->f16_off[k], &one, 2);
	float y[256], mx = 0;
	d->decode(y, blk);
	for (uint32_t i = 0; i < d->blk_elems; i++)
		mx = y[i] > mx ? y[i] : -y[i] > mx ? -y[i] : mx;
	float want = amax * (0.5f + 0.5f * (float)(rnd(state) >> 40) / (float)(1 << 24));
	uint16_t h = rl_f32_to_f16(mx > 0 ? want / mx : 0.0f);
	for (int k = 0; k < d->n_f16; k++)
		memcpy(blk + d->f16_off[k], &h, 2);
	return 0;
}

void rl_wmat_init(struct rl_wmat *w, const void *data, int dt, uint32_t rows, uint32_t cols)
{
	const struct rl_dt_info *di = rl_dt_info(dt);
	*w = (struct rl_wmat){ .data = data, .dtype = dt, .rows = rows, .cols = cols,
			       .blk_elems = di->blk_elems, .blk_bytes = di->blk_bytes,
			       .row_bytes = (size_t)cols / di->blk_elems * di->blk_bytes,
			       .decode = di->decode };
}
