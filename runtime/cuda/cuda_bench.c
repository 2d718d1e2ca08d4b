/* cuda_bench.c — `ringlm bench gpu`: the cuda backend at a real shape (synthetic weights made on
 * the device, default llama3-8b), measured against the ceilings of the same device in the same
 * run, so every figure reads as a fraction of what this device can do:
 *   copy     device-to-device copy bandwidth (bytes read + written), the HBM ceiling
 *   decode   step time at batch 1, 8, 64, 256 (contexts of --ctx tokens) vs the roofline
 *            (bf16 weights + the KV the step reads, over the copy bandwidth)
 *   prefill  TFLOP/s of one prompt of 512 / 2048 tokens vs a plain cuBLAS GEMM of the FFN's
 *            shape ([T, dim] x [dim, 2 hid]), and the same step (eager) with attention on CUDA
 *            cores instead of tensor cores
 *   host     host time of launch() per decode step, graph replay vs eager
 *   itl      per-step latency (ITL) of 32 decoding streams while 8k-token prompts keep arriving,
 *            chunked (512-token chunks beside the decodes) vs unchunked (whole prompts)
 * Decode and prefill rows also give the step's kernel count (from its captured graph, cuBLAS's
 * kernels included; "eager" when no graph ran it).
 * Times are medians of wall-clock launch..finish (the runtime's view of a step). Never fails on
 * time; prints a table, or with --json one line (also written to bench/out/gpu.json), with the
 * steps the backend ran by path (graph, eager; FlashInfer decode and prefill, graph and eager).
 * --batches LIST picks the decode batches, --decode-only skips prefill, host and itl.
 * --deterministic runs every step with rl_batch.deterministic (issue 51: the batch-invariant
 * GEMM and attention, their own graphs), so a run beside a default one prices the mode; the
 * prefill GEMM column is then rl_cuda_gemm_det's, and the CUDA-core attention A/B is 0 (the
 * mode picks its attention kernel by head_dim alone).
 * For a GPU session, where a run that passes by skipping is worthless:
 *   --check              prints the device and the FlashInfer build of this library, runs nothing
 *   --require-device     no device is an error (exit 1), not "skipped"
 *   --require-flashinfer a library built without FlashInfer is an error (exit 1)
 * With --cuda-attn flashinfer, a run in which FlashInfer decoded nothing, or (without
 * --decode-only) prefilled nothing, is an error; the CUDA-core attention A/B column is 0.
 * --profile decode1|decode64|prefill2048|mixed runs that one step (after warm-ups) between
 * cudaProfilerStart and cudaProfilerStop and nothing else, for a profiler started with
 * profiling off (`ncu --profile-from-start off`, bench/gpu_session.sh's profile stage).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cuda_runtime_api.h>
#include <cuda_profiler_api.h>
#include "runtime/backend/rl_backend.h"
#include "runtime/cuda/rl_cuda_api.h"
#include "kernels/rl_cuda_ops.h"
#include "runtime/cuda/cuda_internal.h"
#include "runtime/model/rl_model_plan.h"
#include "runtime/model/rl_model_io.h"

#define EXPORT __attribute__((visibility("default")))

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double pct(double *v, int n, double p)
{
	qsort(v, n, sizeof *v, cmp_d);
	int i = (int)(p * (n - 1) + 0.5);
	return v[i];
}

/* Device-to-device copy bandwidth in bytes/s (read + write), median of 10. */
static double copy_bw(size_t n)
{
	void *a, *b;
	if (cudaMalloc(&a, n) != cudaSuccess)
		return 0;
	if (cudaMalloc(&b, n) != cudaSuccess) {
		cudaFree(a);
		return 0;
	}
	cudaMemset(a, 1, n);
	cudaEvent_t e0, e1;
	cudaEventCreate(&e0);
	cudaEventCreate(&e1);
	double t[10];
	for (int i = 0; i < 12; i++) {
		cudaEventRecord(e0, 0);
		cudaMemcpyAsync(i & 1 ? a : b, i & 1 ? b : a, n, cudaMemcpyDeviceToDevice, 0);
		cudaEventRecord(e1, 0);
		cudaEventSynchronize(e1);
		float ms;
		cudaEventElapsedTime(&ms, e0, e1);
		if (i >= 2)
			t[i - 2] = ms * 1e-3;
	}
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	cudaFree(a);
	cudaFree(b);
	return 2.0 * n / pct(t, 10, 0.5);
}

/* A step's batch, built in place. */
struct bstep {
	struct rl_batch b;
	struct rl_batch_seq *seqs;
	uint32_t *tokens, *pos, *row_seq, *bt;
	uint32_t max_rows, max_seqs, per_seq;
	uint32_t det;                  /* --deterministic: every step carries the flag */
};

static void bstep_reset(struct bstep *s, uint32_t bs)
{
	memset(&s->b, 0, sizeof s->b);
	s->b.block_size = bs;
	s->b.deterministic = s->det;
	s->b.tokens = s->tokens; s->b.pos = s->pos; s->b.row_seq = s->row_seq; s->b.seqs = s->seqs;
}

/* Sequence on blocks [first, first + ceil(ctx / bs)), q_len rows ending at ctx. */
static void bstep_add(struct bstep *s, uint32_t q_len, uint32_t ctx, uint32_t first, uint32_t bs, uint32_t vocab)
{
	uint32_t i = s->b.n_seqs++, row = s->b.n_tokens;
	struct rl_batch_seq *q = &s->seqs[i];
	uint32_t *bt = s->bt + (size_t)i * s->per_seq;
	q->q_start = row; q->q_len = q_len; q->ctx_len = ctx;
	q->n_blocks = (ctx + bs - 1) / bs;
	for (uint32_t k = 0; k < q->n_blocks; k++)
		bt[k] = first + k;
	q->block_table = bt;
	q->sample = 1; q->seq_id = i;
	q->sp = (struct rl_sampling){ 0, 1, 0, 0, i };
	for (uint32_t r = 0; r < q_len; r++) {
		s->tokens[row + r] = (row + r * 7919u) % vocab;
		s->pos[row + r] = ctx - q_len + r;
		s->row_seq[row + r] = i;
	}
	s->b.n_tokens += q_len;
	if (q_len > 1)
		s->b.n_prefill = s->b.n_seqs;
}

/* Runs the step `reps` times after 3 warm-ups; median wall seconds; *launch_s: median host
 * time inside launch(). */
/* a step's kernel count for the table: "eager" when no graph ran it (not counted) */
static const char *kcount(char *buf, size_t n, uint32_t k)
{
	if (!k)
		return "eager";
	snprintf(buf, n, "%u", k);
	return buf;
}

static double time_step(struct rl_backend *be, const struct rl_batch *b, int reps, double *launch_s, int *rc)
{
	int32_t *out = malloc(b->n_seqs * sizeof *out);
	double *t = malloc(reps * sizeof *t), *tl = malloc(reps * sizeof *tl);
	for (int i = 0; i < reps + 3 && !*rc; i++) {
		double t0 = now_s();
		*rc = rl_backend_launch(be, b);
		double t1 = now_s();
		if (!*rc)
			*rc = rl_backend_finish(be, out);
		double t2 = now_s();
		if (i >= 3) {
			t[i - 3] = t2 - t0;
			tl[i - 3] = t1 - t0;
		}
	}
	double r = *rc ? 0 : pct(t, reps, 0.5);
	if (launch_s)
		*launch_s = *rc ? 0 : pct(tl, reps, 0.5);
	free(out); free(t); free(tl);
	return r;
}

EXPORT int rl_cuda_bench(int argc, char **argv)
{
	const char *shape = "llama3-8b";
	uint32_t ctx = 1024, reps = 20, prompt = 8192, streams = 32, max_b = 256, chunk = 512, nsteps = 64, copy_mb = 1024;
	int json = 0, attn = 0;        /* --cuda-attn: 0 in-house, 1 FlashInfer (decode steps) */
	int check = 0, need_dev = 0, need_fi = 0, decode_only = 0, det = 0;
	const char *upload = NULL, *batch_list = NULL, *profile = NULL;
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--json"))
			json = 1;
		else if (!strcmp(a, "--shape") && v)
			shape = argv[++i];
		else if (!strcmp(a, "--ctx") && v)
			ctx = (uint32_t)atoi(argv[++i]);
		else if (!strcmp(a, "--reps") && v)
			reps = (uint32_t)atoi(argv[++i]);
		else if (!strcmp(a, "--prompt") && v)
			prompt = (uint32_t)atoi(argv[++i]);
		else if (!strcmp(a, "--streams") && v)
			streams = (uint32_t)atoi(argv[++i]);
		else if (!strcmp(a, "--max-batch") && v)
			max_b = (uint32_t)atoi(argv[++i]);
		else if (!strcmp(a, "--chunk") && v)
			chunk = (uint32_t)atoi(argv[++i]);
		else if (!strcmp(a, "--itl-steps") && v)
			nsteps = (uint32_t)atoi(argv[++i]);
		else if (!strcmp(a, "--copy-mb") && v)
			copy_mb = (uint32_t)atoi(argv[++i]);
		else if (!strcmp(a, "--upload") && v)
			upload = argv[++i];
		else if (!strcmp(a, "--cuda-attn") && v && (!strcmp(v, "ringlm") || !strcmp(v, "flashinfer")))
			attn = !strcmp(argv[++i], "flashinfer");
		else if (!strcmp(a, "--batches") && v)
			batch_list = argv[++i];
		else if (!strcmp(a, "--profile") && v && (!strcmp(v, "decode1") || !strcmp(v, "decode64") ||
							 !strcmp(v, "prefill2048") || !strcmp(v, "mixed")))
			profile = argv[++i];
		else if (!strcmp(a, "--decode-only"))
			decode_only = 1;
		else if (!strcmp(a, "--deterministic"))
			det = 1;
		else if (!strcmp(a, "--check"))
			check = 1;
		else if (!strcmp(a, "--require-device"))
			need_dev = 1;
		else if (!strcmp(a, "--require-flashinfer"))
			need_fi = 1;
		else {
			fprintf(stderr, "usage: ringlm bench gpu [--shape tiny|110m|1b|llama3-8b] [--ctx N] [--reps N] "
				"[--prompt N] [--chunk N] [--streams N] [--max-batch 8|64|256] [--batches N,N,...] [--decode-only] [--deterministic] "
				"[--itl-steps N] [--copy-mb N] [--upload MODEL] [--cuda-attn ringlm|flashinfer] [--json] "
				"[--check] [--require-device] [--require-flashinfer] [--profile decode1|decode64|prefill2048|mixed]\n");
			return 2;
		}
	}
	/* decode batches: --batches, else 1, 8, 64, 256 up to --max-batch */
	uint32_t batches[8] = { 1, 8, 64, 256 };
	int n_dec = max_b == 8 ? 2 : max_b == 64 ? 3 : 4;
	if (batch_list) {
		n_dec = 0;
		for (const char *q = batch_list; *q;) {
			char *end;
			unsigned long b = strtoul(q, &end, 10);
			if (end == q || !b || b > 256 || n_dec == 8 || (*end && *end != ',')) {
				fprintf(stderr, "ringlm bench gpu: --batches takes up to 8 decode batch sizes of 1..256 "
					"separated by commas (got '%s')\n", batch_list);
				return 2;
			}
			batches[n_dec++] = (uint32_t)b;
			if (b > max_b)     /* the backend holds the largest batch asked for */
				max_b = b <= 8 ? 8 : b <= 64 ? 64 : 256;
			q = *end ? end + 1 : end;
		}
		if (!n_dec) {
			fprintf(stderr, "ringlm bench gpu: --batches is empty\n");
			return 2;
		}
	}
#ifdef RL_HAVE_FLASHINFER
	const char *fi_version = RL_CUDA_FI_VERSION;
#else
	const char *fi_version = NULL;
#endif
	if ((need_fi || check) && !fi_version) {
		fprintf(stderr, "ringlm bench gpu: this librlcuda.so was built without FlashInfer (its headers were not "
			"found at build time: run .ci/flashinfer, or point RINGLM_CACHE or FLASHINFER_DIR at them, "
			"and build with FLASHINFER=1)\n");
		if (need_fi)
			return 1;
	}
	if (!ctx || ctx > 8192 || !reps || reps > 1000 || !chunk || chunk % 16 || chunk > 8192 || prompt < chunk ||
	    prompt > 32768 || prompt % chunk || !streams || streams > 256 || (max_b != 8 && max_b != 64 && max_b != 256) ||
	    !nsteps || nsteps > 10000 || !copy_mb || copy_mb > 16384) {
		fprintf(stderr, "ringlm bench gpu: --ctx must be 1..8192, --reps 1..1000, --chunk a multiple of 16 up to 8192, "
			"--prompt a multiple of --chunk up to 32768, --streams 1..256, --max-batch 8, 64 or 256, "
			"--itl-steps 1..10000, --copy-mb 1..16384\n");
		return 2;
	}
	char why[256], err[512];
	if (rl_cuda_device_check(why, sizeof why)) {
		if (check || need_dev) {
			fprintf(stderr, "ringlm bench gpu: %s; this run needs one\n", why);
			return 1;
		}
		printf("skipped: no CUDA device (%s)\n", why);
		return 0;
	}
	struct rl_model_config cfg;
	if (rl_model_shape(shape, &cfg)) {
		fprintf(stderr, "ringlm bench gpu: unknown shape '%s'\n", shape);
		return 2;
	}
	struct cudaDeviceProp prop;
	cudaError_t pe = cudaGetDeviceProperties(&prop, 0);
	if (pe != cudaSuccess) {
		fprintf(stderr, "ringlm bench gpu: cudaGetDeviceProperties: %s\n", cudaGetErrorString(pe));
		return 1;
	}
	if (check) {
		int drv = 0, rt = 0;
		cudaDriverGetVersion(&drv);
		cudaRuntimeGetVersion(&rt);
		printf("device %s (sm_%d%d, %d SMs, %.0f GiB), driver %d, runtime %d; FlashInfer %s\n", prop.name,
		       prop.major, prop.minor, prop.multiProcessorCount, prop.totalGlobalMem / 1073741824.0, drv, rt,
		       fi_version ? fi_version : "not built in");
		return fi_version || !need_fi ? 0 : 1;
	}
	double bw = copy_bw((size_t)copy_mb << 20);
	/* --upload: backend creation streaming a model file (io_uring reads -> pinned staging ->
	 * async copies), timed; the file is read once before, so this is the page-cache rate */
	double up_s = 0, up_bytes = 0;
	if (upload) {
		struct rl_model_plan plan;
		if (rl_model_plan_open(upload, NULL, &plan, err, sizeof err)) {
			fprintf(stderr, "ringlm bench gpu: %s\n", err);
			return 1;
		}
		for (size_t i = 0; i < plan.n_reads; i++)
			up_bytes += plan.reads[i].nbytes;
		struct rl_backend_params up = { .n_kv_blocks = 64, .block_size = 16, .max_batch_tokens = 16,
			.max_seqs = 4, .runtime_cpu = -1, .cuda_graph_buckets = "", .model_path = upload };
		struct rl_backend *ub;
		for (int k = 0; k < 2; k++) {      /* the first pass warms the page cache */
			double t0 = now_s();
			if (rl_backend_cuda_create(NULL, NULL, &up, &ub, err, sizeof err)) {
				fprintf(stderr, "ringlm bench gpu: --upload: %s\n", err);
				rl_model_plan_close(&plan);
				return 1;
			}
			up_s = now_s() - t0;
			rl_backend_destroy(ub);
		}
		rl_model_plan_close(&plan);
	}

	const uint32_t bs = 16;
	if (streams > max_b)
		streams = max_b;
	uint32_t per_seq = (ctx > prompt ? ctx : prompt) / bs + 2;
	struct rl_backend_params p = {
		.n_kv_blocks = max_b * ((ctx + bs - 1) / bs + 1) + prompt / bs + 1, .block_size = bs,
		.max_batch_tokens = prompt + streams, .max_seqs = max_b, .runtime_cpu = -1, .cuda_attn = attn,
	};
	struct rl_backend *be;
	int rc = rl_backend_cuda_create(NULL, shape, &p, &be, err, sizeof err);
	if (rc) {
		fprintf(stderr, "ringlm bench gpu: %s\n", err);
		return 1;
	}
	struct rl_cuda *c = be->priv;
	/* KV contents matter for timing only through their values: random, never zeros */
	rl_cuda_fill_uniform(c->kc, c->layer_kv * c->nl, 1.0f, 0.0f, 99, c->wdt, c->st);
	rl_cuda_fill_uniform(c->vc, c->layer_kv * c->nl, 1.0f, 0.0f, 98, c->wdt, c->st);
	cudaStreamSynchronize(c->st);

	struct bstep s = { .max_rows = p.max_batch_tokens, .max_seqs = max_b, .per_seq = per_seq, .det = (uint32_t)det };
	s.seqs = calloc(max_b, sizeof *s.seqs);
	s.tokens = calloc(s.max_rows, 4); s.pos = calloc(s.max_rows, 4); s.row_seq = calloc(s.max_rows, 4);
	s.bt = calloc((size_t)max_b * per_seq, 4);
	if (!s.seqs || !s.tokens || !s.pos || !s.row_seq || !s.bt) {
		rl_backend_destroy(be);
		return 1;
	}

	if (profile) {
		bstep_reset(&s, bs);
		uint32_t T = prompt < 2048 ? prompt : 2048, n = !strcmp(profile, "decode1") ? 1 : 64;
		if (!strcmp(profile, "prefill2048"))
			bstep_add(&s, T, T, 0, bs, c->vocab);
		else if (!strcmp(profile, "mixed")) {    /* a prompt's chunk beside the decode streams */
			bstep_add(&s, chunk, 2 * chunk, max_b * ((ctx + bs - 1) / bs + 1), bs, c->vocab);
			for (uint32_t i = 0; i < streams; i++)
				bstep_add(&s, 1, ctx, i * ((ctx + bs - 1) / bs + 1), bs, c->vocab);
		} else
			for (uint32_t i = 0; i < n; i++)
				bstep_add(&s, 1, ctx, i * ((ctx + bs - 1) / bs + 1), bs, c->vocab);
		time_step(be, &s.b, 2, NULL, &rc);      /* warm-ups, unprofiled */
		int32_t *o = malloc(max_b * sizeof *o);
		cudaProfilerStart();
		if (!rc && !(rc = rl_backend_launch(be, &s.b)))
			rc = rl_backend_finish(be, o);
		cudaProfilerStop();
		free(o);
		if (rc)
			fprintf(stderr, "ringlm bench gpu: --profile %s: %s\n", profile, c->err);
		else
			printf("profiled one %s step: %u rows, %u sequences\n", profile, s.b.n_tokens, s.b.n_seqs);
		rl_backend_destroy(be);
		free(s.seqs); free(s.tokens); free(s.pos); free(s.row_seq); free(s.bt);
		return rc ? 1 : 0;
	}

	/* bytes of the weights every step streams (the embedding is gathered, not streamed) */
	double wbytes = 2.0 * ((double)c->nl * ((double)c->dim * (c->qd + 2 * c->kvd) + (double)c->dim * c->qd +
				3.0 * c->dim * c->hid) + (double)c->vocab * c->dim);
	double dec_t[8] = { 0 }, dec_roof[8] = { 0 }, graph_launch = 0, eager_launch = 0, graph_step = 0, eager_step = 0;
	uint32_t dec_k[8] = { 0 }, pf_k[2] = { 0 };    /* kernels a step's graph launched (0: eager) */
	struct rl_cuda_stats ks;
	for (int k = 0; k < n_dec && !rc; k++) {
		bstep_reset(&s, bs);
		for (uint32_t i = 0; i < batches[k]; i++)
			bstep_add(&s, 1, ctx, i * ((ctx + bs - 1) / bs + 1), bs, c->vocab);
		double kv = 2.0 * 2.0 * batches[k] * (double)ctx * c->nl * c->kvd;
		int host = batches[k] == 8 && !decode_only;
		dec_t[k] = time_step(be, &s.b, (int)reps, host ? &graph_launch : NULL, &rc);
		dec_roof[k] = (wbytes + kv) / bw;
		rl_backend_cuda_stats(be, &ks);
		dec_k[k] = ks.last_kernels;
		if (host && !rc) {                     /* batch 8: graph vs eager host overhead */
			graph_step = dec_t[k];
			rl_backend_cuda_set_graphs(be, 0);
			eager_step = time_step(be, &s.b, (int)reps, &eager_launch, &rc);
			rl_backend_cuda_set_graphs(be, 1);
		}
	}

	uint32_t pf_len[] = { prompt < 512 ? prompt : 512, prompt < 2048 ? prompt : 2048 };
	double pf_t[2] = { 0 }, pf_simt[2] = { 0 }, pf_flops[2] = { 0 }, gemm_tflops[2] = { 0 };
	for (int k = 0; k < 2 && !rc && !decode_only; k++) {
		uint32_t T = pf_len[k];
		bstep_reset(&s, bs);
		bstep_add(&s, T, T, 0, bs, c->vocab);
		pf_t[k] = time_step(be, &s.b, (int)(reps < 5 ? reps : 5), NULL, &rc);
		rl_backend_cuda_stats(be, &ks);
		pf_k[k] = ks.last_kernels;
		/* A/B: the same step eagerly with the in-house prefill attention on CUDA cores (under
		 * --cuda-attn flashinfer the in-house kernel does not run: no A/B) */
		rl_backend_cuda_set_graphs(be, 0);
		rl_cuda_attention_use_tc(0);
		pf_simt[k] = rc || attn || det ? 0 : time_step(be, &s.b, (int)(reps < 5 ? reps : 5), NULL, &rc);
		rl_cuda_attention_use_tc(1);
		rl_backend_cuda_set_graphs(be, 1);
		double lin = 2.0 * T * ((double)c->dim * (c->qd + 2 * c->kvd) + (double)c->dim * c->qd + 3.0 * c->dim * c->hid);
		double att = 2.0 * 2.0 * (double)T * T / 2 * c->qd;      /* QK^T and PV, causal half */
		pf_flops[k] = c->nl * (lin + att) + 2.0 * c->dim * c->vocab;
		/* the ceiling: the FFN's gate/up GEMM alone, same library, same shapes */
		cudaEvent_t e0, e1;
		cudaEventCreate(&e0); cudaEventCreate(&e1);
		double gt[10];
		for (int i = 0; i < 12 && !rc; i++) {
			cudaEventRecord(e0, c->st);
			c->det_step = det;     /* the GEMM the steps ran: cuBLAS, or rl_cuda_gemm_det */
			rc = rl_cuda_gemm(c, c->gu, 0, c->xb, c->L[i % c->nl].wgu, T, c->dim, 2 * c->hid);
			c->det_step = 0;
			cudaEventRecord(e1, c->st);
			cudaEventSynchronize(e1);
			float ms;
			cudaEventElapsedTime(&ms, e0, e1);
			if (i >= 2)
				gt[i - 2] = ms * 1e-3;
		}
		cudaEventDestroy(e0); cudaEventDestroy(e1);
		gemm_tflops[k] = rc ? 0 : 2.0 * T * c->dim * 2.0 * c->hid / pct(gt, 10, 0.5) / 1e12;
	}

	/* ITL: decode streams at context ctx, plus a prompt on the blocks after them */
	double itl[2][2] = { { 0 } };
	uint32_t pblk = max_b * ((ctx + bs - 1) / bs + 1);
	double *lat = malloc(nsteps * sizeof *lat);
	int32_t *out = malloc(max_b * sizeof *out);
	for (int mode = 0; mode < 2 && !rc && !decode_only; mode++) {     /* 0 chunked, 1 unchunked */
		uint32_t done = 0;
		for (uint32_t st = 0; st < nsteps + 4 && !rc; st++) {
			bstep_reset(&s, bs);
			uint32_t q = mode == 0 ? chunk : (st % (prompt / chunk) == 0 ? prompt : 0);
			if (q) {
				if (done + q > prompt)
					done = 0;                  /* the next prompt arrives */
				bstep_add(&s, q, done + q, pblk, bs, c->vocab);
				s.seqs[0].sample = done + q == prompt;
				done += q;
			}
			for (uint32_t i = 0; i < streams; i++)
				bstep_add(&s, 1, ctx, i * ((ctx + bs - 1) / bs + 1), bs, c->vocab);
			double t0 = now_s();
			rc = rl_backend_launch(be, &s.b);
			if (!rc)
				rc = rl_backend_finish(be, out);
			if (st >= 4)
				lat[st - 4] = now_s() - t0;
		}
		if (!rc) {
			itl[mode][0] = pct(lat, (int)nsteps, 0.5);
			itl[mode][1] = pct(lat, (int)nsteps, 0.99);
		}
	}
	free(lat); free(out);
	struct rl_cuda_stats cs;
	rl_backend_cuda_stats(be, &cs);
	if (rc)
		fprintf(stderr, "ringlm bench gpu: a step failed (%s)\n", *c->err ? c->err : strerror(-rc));
	rl_backend_destroy(be);
	free(s.seqs); free(s.tokens); free(s.pos); free(s.row_seq); free(s.bt);
	if (rc)
		return 1;
	if (attn && !cs.fi_graph_steps && !cs.fi_eager_steps) {
		fprintf(stderr, "ringlm bench gpu: --cuda-attn flashinfer, but FlashInfer ran no decode step\n");
		return 1;
	}
	if (attn && !decode_only && !cs.fi_prefill_graph_steps && !cs.fi_prefill_eager_steps) {
		fprintf(stderr, "ringlm bench gpu: --cuda-attn flashinfer, but FlashInfer ran no prefill step\n");
		return 1;
	}

	char js[4096];
	int n = snprintf(js, sizeof js,
		"{\"device\":\"%s\",\"shape\":\"%s\",\"attention\":\"%s\",\"flashinfer\":%s%s%s,\"deterministic\":%d,\"ctx\":%u,"
		"\"copy_gbps\":%.1f,\"upload_gbps\":%.2f,\"steps\":{\"graph\":%llu,\"eager\":%llu,\"fi_graph\":%llu,"
		"\"fi_eager\":%llu,\"fi_prefill_graph\":%llu,\"fi_prefill_eager\":%llu},\"decode\":[",
		prop.name, shape, attn ? "flashinfer" : "ringlm", fi_version ? "\"" : "", fi_version ? fi_version : "null",
		fi_version ? "\"" : "", det, ctx, bw / 1e9, up_s > 0 ? up_bytes / 1e9 / up_s : 0.0,
		(unsigned long long)cs.graph_steps, (unsigned long long)cs.eager_steps,
		(unsigned long long)cs.fi_graph_steps, (unsigned long long)cs.fi_eager_steps,
		(unsigned long long)cs.fi_prefill_graph_steps, (unsigned long long)cs.fi_prefill_eager_steps);
	for (int k = 0; k < n_dec; k++)
		n += snprintf(js + n, sizeof js - n, "%s{\"batch\":%u,\"step_ms\":%.3f,\"roofline_ms\":%.3f,\"efficiency\":%.3f,"
			      "\"kernels\":%u}", k ? "," : "", batches[k], dec_t[k] * 1e3, dec_roof[k] * 1e3,
			      dec_roof[k] / dec_t[k], dec_k[k]);
	n += snprintf(js + n, sizeof js - n, "],\"prefill\":[");
	for (int k = 0; k < (decode_only ? 0 : 2); k++)
		n += snprintf(js + n, sizeof js - n, "%s{\"tokens\":%u,\"ms\":%.2f,\"tflops\":%.1f,\"gemm_tflops\":%.1f,"
			      "\"simt_attention_ms\":%.2f,\"kernels\":%u}", k ? "," : "", pf_len[k], pf_t[k] * 1e3,
			      pf_flops[k] / pf_t[k] / 1e12, gemm_tflops[k], pf_simt[k] * 1e3, pf_k[k]);
	n += snprintf(js + n, sizeof js - n,
		"],\"host\":{\"batch\":8,\"graph_launch_us\":%.1f,\"eager_launch_us\":%.1f,\"graph_step_ms\":%.3f,\"eager_step_ms\":%.3f},"
		"\"itl\":{\"streams\":%u,\"prompt\":%u,\"chunk\":%u,\"chunked_p50_ms\":%.2f,\"chunked_p99_ms\":%.2f,"
		"\"unchunked_p50_ms\":%.2f,\"unchunked_p99_ms\":%.2f}}",
		graph_launch * 1e6, eager_launch * 1e6, graph_step * 1e3, eager_step * 1e3, streams, prompt, chunk,
		itl[0][0] * 1e3, itl[0][1] * 1e3, itl[1][0] * 1e3, itl[1][1] * 1e3);
	FILE *f = fopen("bench/out/gpu.json", "w");
	if (f) {
		fprintf(f, "%s\n", js);
		fclose(f);
	}
	if (json) {
		printf("%s\n", js);
		return 0;
	}
	printf("device %s, synthetic:%s, copy bandwidth %.0f GB/s%s\n", prop.name, shape, bw / 1e9,
	       det ? "; deterministic steps" : "");
	if (upload)
		printf("upload %s: %.2f GB of file weights in %.2f s (%.2f GB/s, create included)\n", upload,
		       up_bytes / 1e9, up_s, up_bytes / 1e9 / up_s);
	printf("%-22s %10s %12s %10s %8s\n", "decode (ctx tokens)", "step ms", "roofline ms", "of roof", "kernels");
	char kb[16];
	for (int k = 0; k < n_dec; k++)
		printf("batch %-4u (ctx %-5u) %10.3f %12.3f %9.0f%% %8s\n", batches[k], ctx, dec_t[k] * 1e3,
		       dec_roof[k] * 1e3, 100 * dec_roof[k] / dec_t[k], kcount(kb, sizeof kb, dec_k[k]));
	if (!decode_only) {
		printf("%-22s %10s %12s %10s %14s %8s\n", "prefill", "ms", "TFLOP/s", "GEMM TF/s", "CUDA-core attn",
		       "kernels");
		for (int k = 0; k < 2; k++)
			printf("%-5u tokens           %10.2f %12.1f %10.1f %11.2f ms %8s\n", pf_len[k], pf_t[k] * 1e3,
			       pf_flops[k] / pf_t[k] / 1e12, gemm_tflops[k], pf_simt[k] * 1e3,
			       kcount(kb, sizeof kb, pf_k[k]));
		printf("host per step (batch 8): launch %.1f us graph, %.1f us eager; step %.3f / %.3f ms\n",
		       graph_launch * 1e6, eager_launch * 1e6, graph_step * 1e3, eager_step * 1e3);
		printf("ITL, %u streams + %u-token prompts: chunked(%u) p50 %.2f p99 %.2f ms; unchunked p50 %.2f p99 %.2f ms\n",
		       streams, prompt, chunk, itl[0][0] * 1e3, itl[0][1] * 1e3, itl[1][0] * 1e3, itl[1][1] * 1e3);
	}
	printf("steps: %llu graph, %llu eager; FlashInfer (%s) decode %llu graph, %llu eager; prefill %llu graph, "
	       "%llu eager\n", (unsigned long long)cs.graph_steps, (unsigned long long)cs.eager_steps,
	       fi_version ? fi_version : "not built in", (unsigned long long)cs.fi_graph_steps,
	       (unsigned long long)cs.fi_eager_steps, (unsigned long long)cs.fi_prefill_graph_steps,
	       (unsigned long long)cs.fi_prefill_eager_steps);
	return 0;
}
