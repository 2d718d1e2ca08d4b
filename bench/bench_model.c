/* bench_model.c — `ringlm bench model`: cpu backend prefill and decode tokens/s.
 *
 * Prefill: a --prompt-token prompt (default 128) fed in chunks of --budget rows (the step
 * token budget, default 128), timed over several fresh sequences. Decode: B sequences
 * (B = 1, 8, 64) each with a 16-token prefilled context, then greedy decode steps of B rows,
 * timed; tokens/s = B * steps / time. Each figure is the median of its repetitions. The
 * model is --model PATH, its matrices kept as the file stores them (rl_model_load_stored, as
 * ringlmd runs it; --fp32 expands them to fp32 as before, to compare), or a random fp32 model
 * of --shape tiny (stories260K) or 110m (llama2.c 110M). Memory: the process's peak resident
 * set beside the file, the weights held and the KV pool (the target: peak <= file + KV + 10%).
 * --isa picks a lesser kernel set than the CPU's best (the AVX2 path on an AVX-512 machine).
 * --deterministic runs every step in the deterministic mode (row-invariant kernels), to price it.
 * Bandwidth: decode b1's weight stream (the bytes of every matrix a token reads: all held
 * weights less an untied token-embedding table, which a token gathers one row of) times its
 * tokens/s, beside what a plain streaming read (rl_bench_stream_gbs) over four times the weights
 * (256 MiB at least) reaches
 * on the same number of threads in the same run (the target: >= 80%).
 * Prints a table, or with --json one line; the JSON is always written to bench/out/model.json.
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include "bench/bench_util.h"
#include "clients/cli/cli.h"
#include "kernels/cpu_ops.h"
#include "runtime/backend/rl_backend.h"
#include "ipc/rl_clock.h"
#include "runtime/model/rl_model_io.h"


#define BS 16
#define MAX_B 64


struct bseq {
	uint32_t table[256];
	uint32_t done;                 /* tokens with cached KV */
	uint32_t next;                 /* next input token */
	uint32_t off;                  /* where its prompt starts in the shared token list */
};

/* --deterministic: every step takes the row-invariant kernels (rl_batch.deterministic) */
static int bench_model_det;

/* Runs one step: seqs[i] feeds q[i] rows (q[i] > 1 only as the first, prefill, seqs).
 * Sampled tokens become each seq's next input. */
static int run_step(struct rl_backend *be, struct bseq *s, uint32_t n, const uint32_t *q,
		    uint32_t n_prefill, const uint32_t *prompt, uint32_t vocab)
{
	static uint32_t tokens[4096], pos[4096], row_seq[4096];
	static struct rl_batch_seq bs[MAX_B];
	int32_t out[MAX_B];
	uint32_t T = 0;
	for (uint32_t i = 0; i < n; i++) {
		bs[i] = (struct rl_batch_seq){ .q_start = T, .q_len = q[i], .ctx_len = s[i].done + q[i],
			.n_blocks = (s[i].done + q[i] + BS - 1) / BS, .block_table = s[i].table,
			.sample = 1, .seq_id = i, .sp = { .temperature = 0, .top_p = 1 } };
		for (uint32_t r = 0; r < q[i]; r++, T++) {
			tokens[T] = q[i] == 1 && i >= n_prefill ? s[i].next : prompt[(s[i].off + s[i].done + r) % 4096] % vocab;
			pos[T] = s[i].done + r;
			row_seq[T] = i;
		}
	}
	struct rl_batch b = { .n_tokens = T, .n_seqs = n, .n_prefill = n_prefill, .block_size = BS,
			      .tokens = tokens, .pos = pos, .row_seq = row_seq, .seqs = bs,
			      .deterministic = (uint32_t)bench_model_det };
	int rc = rl_backend_launch(be, &b);
	if (rc || (rc = rl_backend_finish(be, out)))
		return rc;
	for (uint32_t i = 0; i < n; i++) {
		s[i].done += q[i];
		s[i].next = (uint32_t)out[i];
	}
	return 0;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, n, sizeof *v, cmp_d);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void usage(void)
{
	fprintf(stderr, "usage: ringlm bench model [--model PATH [--tokenizer PATH] | --shape tiny|110m] "
		"[--fp32] [--threads N] [--prompt N] [--budget N] [--depth N] [--kv-type f16|f32] [--only-batch 1|8|64 | --only-prefill] [--max-batch 1|8|64] [--isa avx512|avx2|scalar] [--deterministic] [--json]\n");
}

int rl_cmd_bench_model(int argc, char **argv)
{
	const char *model_path = NULL, *tok_path = NULL, *shape = "tiny";
	int threads = 0, json = 0, fp32 = 0, kv_f16 = 1;   /* the runtime's default KV cache */
	uint32_t only_batch = 0;               /* 1, 8 or 64: time that decode batch alone (profiling) */
	int only_prefill = 0;                  /* time the prefill alone (profiling) */
	uint32_t max_batch = 64;               /* decode batches above it are not timed */
	uint32_t prompt_len = 128, budget = 128;
	uint32_t depth = 16;                   /* context each decode sequence starts with (llama-bench -d) */
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--json")) { json = 1; continue; }
		if (!strcmp(a, "--fp32")) { fp32 = 1; continue; }
		if (!strcmp(a, "--deterministic")) { bench_model_det = 1; continue; }
		if (!strcmp(a, "--only-prefill")) { only_prefill = 1; continue; }
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(); return 0; }
		if (!v) { fprintf(stderr, "ringlm bench model: %s needs a value\n", a); return 2; }
		i++;
		if (!strcmp(a, "--model")) model_path = v;
		else if (!strcmp(a, "--tokenizer")) tok_path = v;
		else if (!strcmp(a, "--shape")) shape = v;
		else if (!strcmp(a, "--threads")) threads = atoi(v);
		else if (!strcmp(a, "--prompt")) prompt_len = (uint32_t)atoi(v);
		else if (!strcmp(a, "--budget")) budget = (uint32_t)atoi(v);
		else if (!strcmp(a, "--depth")) depth = (uint32_t)atoi(v);
		else if (!strcmp(a, "--kv-type") && (!strcmp(v, "f32") || !strcmp(v, "f16"))) kv_f16 = !strcmp(v, "f16");
		else if (!strcmp(a, "--kv-type")) {
			fprintf(stderr, "ringlm bench model: --kv-type must be f32 or f16, got '%s'\n", v);
			return 2;
		}
		else if (!strcmp(a, "--only-batch")) only_batch = (uint32_t)atoi(v);
		else if (!strcmp(a, "--max-batch")) max_batch = (uint32_t)atoi(v);
		else if (!strcmp(a, "--isa")) {
			if (rl_bench_set_isa("model", v))
				return 2;
		} else { fprintf(stderr, "ringlm bench model: unknown option %s\n", a); usage(); return 2; }
	}
	if (!prompt_len || prompt_len > 4000 || !depth || depth > 3000 || !budget || budget > 4096 || threads < 0 ||
	    (only_batch && only_batch != 1 && only_batch != 8 && only_batch != 64) || (only_batch && only_prefill) ||
	    (max_batch != 1 && max_batch != 8 && max_batch != 64)) {
		fprintf(stderr, "ringlm bench model: --prompt must be 1..4000, --depth 1..3000, --budget 1..4096, --threads >= 0, "
			"--only-batch and --max-batch 1, 8 or 64, and --only-batch not with --only-prefill\n");
		return 2;
	}
	struct rl_model *m = NULL;
	char err[256];
	if (model_path) {
		if ((fp32 ? rl_model_load : rl_model_load_stored)(model_path, tok_path, &m, err, sizeof err)) {
			fprintf(stderr, "ringlm bench model: %s\n", err);
			return 1;
		}
	} else {
		struct rl_model_config c;
		if (rl_model_shape(shape, &c)) {
			fprintf(stderr, "ringlm bench model: unknown --shape %s (tiny, 110m, 1b or llama3-8b)\n", shape);
			return 2;
		}
		if (rl_model_alloc(&c, &m, err, sizeof err)) {
			fprintf(stderr, "ringlm bench model: %s\n", err);
			return 1;
		}
		rl_model_fill_random(m, 1);
		snprintf(m->name, sizeof m->name, "random-%s", shape);
	}
	uint32_t V = m->cfg.vocab_size, decode_steps = m->cfg.dim >= 512 ? 16 : 64;
	uint32_t per_seq = (prompt_len + decode_steps + depth + BS) / BS + 1;
	if (per_seq > 256) {
		fprintf(stderr, "ringlm bench model: --prompt plus --depth too long; keep their sum under 4000\n");
		rl_model_destroy(m);
		return 2;
	}
	/* the pool holds only the sequences that run: at --depth 2000 all 64 would be ~9 GB */
	struct rl_backend_params p = { .n_kv_blocks = (only_batch ? only_batch : MAX_B) * per_seq, .block_size = BS,
		.max_batch_tokens = budget > MAX_B ? budget : MAX_B, .max_seqs = MAX_B,
		.threads = threads, .runtime_cpu = -1, .cpu_kv_f16 = kv_f16 };
	struct rl_backend *be;
	if (rl_backend_cpu_create(m, &p, &be, err, sizeof err)) {
		fprintf(stderr, "ringlm bench model: %s\n", err);
		rl_model_destroy(m);
		return 1;
	}
	if (!threads)
		threads = -1;   /* reported below as the pool's real size */
	static uint32_t prompt[4096];
	static struct bseq seqs[MAX_B];
	for (uint32_t i = 0; i < 4096; i++)
		prompt[i] = (i * 2654435761u) >> 7;
	for (uint32_t i = 0; i < MAX_B; i++) {
		seqs[i].off = 97 * i;
		for (uint32_t k = 0; k < per_seq; k++)
			seqs[i].table[k] = i * per_seq + k;
	}

	int rc = 0, reps = 5;
	double t[8];
	/* prefill: fresh sequence each repetition (KV rewritten in place) */
	for (int r = 0; r <= reps && !rc && !only_batch; r++) {
		uint64_t t0 = rl_now_ns();
		seqs[0].done = 0;
		while (seqs[0].done < prompt_len && !rc) {
			uint32_t q = prompt_len - seqs[0].done < budget ? prompt_len - seqs[0].done : budget;
			rc = run_step(be, seqs, 1, &q, 1, prompt, V);
		}
		if (r)          /* the first run warms caches and the pool */
			t[r - 1] = prompt_len / ((rl_now_ns() - t0) * 1e-9);
	}
	double prefill = rc || only_batch ? 0 : median(t, reps);
	static const uint32_t batches[3] = { 1, 8, 64 };
	double decode[3] = { 0 };
	for (int bi = 0; bi < 3 && !rc; bi++) {
		uint32_t B = batches[bi], q[MAX_B];
		if ((only_batch && B != only_batch) || only_prefill || B > max_batch)
			continue;
		for (int r = 0; r < 3 && !rc; r++) {
			for (uint32_t i = 0; i < B; i++) {
				seqs[i].done = 0;
			}
			for (uint32_t i = 0; i < B && !rc; i++)  /* contexts, one seq per step, budget-sized */
				while (seqs[i].done < depth && !rc) {
					q[i] = depth - seqs[i].done < budget ? depth - seqs[i].done : budget;
					rc = run_step(be, seqs + i, 1, q + i, 1, prompt, V);
				}
			for (uint32_t i = 0; i < B; i++)
				q[i] = 1;
			uint64_t t0 = rl_now_ns();
			for (uint32_t k = 0; k < decode_steps && !rc; k++)
				rc = run_step(be, seqs, B, q, 0, prompt, V);
			t[r] = (double)B * decode_steps / ((rl_now_ns() - t0) * 1e-9);
		}
		decode[bi] = rc ? 0 : median(t, 3);
	}
	if (rc) {
		fprintf(stderr, "ringlm bench model: step failed: %s\n", strerror(-rc));
		rl_backend_destroy(be);
		rl_model_destroy(m);
		return 1;
	}
	/* memory: peak resident set (KiB from getrusage) against file + KV pool */
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	struct stat st;
	double file_mb = model_path && stat(model_path, &st) == 0 && S_ISREG(st.st_mode) ? st.st_size / 1e6 : 0;
	double kv_mb = (double)p.n_kv_blocks * BS * m->cfg.n_layers * m->cfg.n_kv_heads * m->cfg.head_dim * 2 *
		       (kv_f16 ? 2 : 4) / 1e6;
	double rss_mb = ru.ru_maxrss * 1024 / 1e6, weights_mb = m->mem_size / 1e6;
	const char *wtype = m->layers[0].mq.dtype >= 0 && m->layers[0].mq.dtype < RL_DT_COUNT ?
			    rl_dt_info(m->layers[0].mq.dtype)->name : "?";
	int nthreads = threads > 0 ? threads : 0;
	if (threads < 0) {
		/* the backend picked: every CPU the process may use */
		cpu_set_t set;
		nthreads = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
	}
	/* decode b1's weight stream against a streaming read on as many threads */
	double streamed = (double)m->mem_size - (m->cfg.tied_embeddings ? 0 : (double)m->mtok_emb.rows * m->mtok_emb.row_bytes);
	double decode_gbs = streamed * decode[0] / 1e9, read_gbs = decode[0] > 0 ? rl_bench_stream_gbs(4 * m->mem_size > ((size_t)256 << 20) ? 4 * m->mem_size : ((size_t)256 << 20), nthreads) : 0;
	char line[1200];
	snprintf(line, sizeof line,
		 "{\"bench\":\"model\",\"model\":\"%s\",\"dim\":%u,\"layers\":%u,\"vocab\":%u,\"params_m\":%.1f,"
		 "\"threads\":%d,\"isa\":\"%s\",\"prompt_tokens\":%u,\"depth\":%u,\"kv_type\":\"%s\",\"budget\":%u,\"prefill_tok_s\":%.1f,"
		 "\"decode_steps\":%u,\"decode_tok_s\":{\"1\":%.1f,\"8\":%.1f,\"64\":%.1f},"
		 "\"weights\":\"%s\",\"weights_mb\":%.1f,\"file_mb\":%.1f,\"kv_mb\":%.1f,\"peak_rss_mb\":%.1f,"
		 "\"decode_b1_gbs\":%.2f,\"stream_gbs\":%.2f,\"deterministic\":%d}",
		 m->name, m->cfg.dim, m->cfg.n_layers, V, rl_model_weight_elems(&m->cfg) / 1e6, nthreads,
		 rl_cpu_isa_name(rl_cpu_isa()), prompt_len, depth, kv_f16 ? "f16" : "f32", budget, prefill, decode_steps,
		 decode[0], decode[1], decode[2], wtype, weights_mb, file_mb, kv_mb, rss_mb, decode_gbs, read_gbs,
		 bench_model_det);
	if (json) {
		printf("%s\n", line);
	} else {
		printf("model %s (%.1fM params, matrices %s), %d threads, %s%s\n", m->name,
		       rl_model_weight_elems(&m->cfg) / 1e6, wtype, nthreads, rl_cpu_isa_name(rl_cpu_isa()),
		       bench_model_det ? ", deterministic" : "");
		printf("memory: peak RSS %.1f MB; weights held %.1f MB, file %.1f MB, KV pool (%s) %.1f MB\n",
		       rss_mb, weights_mb, file_mb, kv_f16 ? "f16" : "f32", kv_mb);
		printf("%-28s %12s\n", "phase", "tokens/s");
		char what[64];
		snprintf(what, sizeof what, "prefill %u (chunks of %u)", prompt_len, budget);
		printf("%-28s %12.1f\n", what, prefill);
		for (int bi = 0; bi < 3; bi++) {
			snprintf(what, sizeof what, "decode batch %u (depth %u)", batches[bi], depth);
			printf("%-28s %12.1f\n", what, decode[bi]);
		}
		printf("decode b1 streams weights at %.2f GB/s; a streaming read on %d threads: %.2f GB/s (%.0f%%)\n",
		       decode_gbs, nthreads, read_gbs, read_gbs > 0 ? 100 * decode_gbs / read_gbs : 0);
	}
	mkdir("bench/out", 0755);
	FILE *f = fopen("bench/out/model.json", "w");
	if (f) {
		fprintf(f, "%s\n", line);
		fclose(f);
	} else if (!json) {
		fprintf(stderr, "ringlm bench model: cannot write bench/out/model.json (run from the repo root)\n");
	}
	rl_backend_destroy(be);
	rl_model_destroy(m);
	return 0;
}
