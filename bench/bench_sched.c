/* bench_sched.c — `ringlm bench sched [--json] [--steps N]`: host time of one scheduling step.
 *
 * One step = rl_sched_plan + rl_sched_compose (no speculation: no asks, and the composition packs
 * the batch description) + rl_sched_complete with an
 * emit hook that writes an event record into an array (what publishing costs the scheduler).
 * The backend is left out: sampled tokens are fabricated, so only scheduler time is measured.
 * Measured at 1, 64, 256 and 1024 running decode sequences, prefix cache on (a decode that
 * fills a block registers it), after the prompts are prefilled. Prints a table; --json prints
 * one line and writes bench/out/sched.json.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "runtime/sched/rl_sched.h"
#include "ipc/rl_clock.h"
#include "clients/cli/cli.h"
#include "bench/bench_chunking.h"

struct ev {
	uint64_t tag;
	uint32_t rid, type, token;
	int32_t code;
};

#define N_EV 4096

struct sink {
	struct ev ev[N_EV];
	uint32_t head;
};

static int b_reserve(void *ctx, uint32_t client, uint32_t n)
{
	return 0;
}

static void b_emit(void *ctx, const struct rl_seq *q, uint32_t type, uint32_t token, int32_t code)
{
	struct sink *k = ctx;
	struct ev *e = &k->ev[k->head++ & (N_EV - 1)];
	e->tag = q->tag;
	e->rid = q->rid;
	e->type = type;
	e->token = token;
	e->code = code;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

struct result {
	uint32_t n;
	double p50, p99;
};

/* Prompt lengths PROMPT .. PROMPT + 15: sequences cross block boundaries (allocate a block,
 * register the full one) on different steps, as in a real mix, not all in the same step. */
#define PROMPT 8

/* Runs n decoding sequences for steps measured steps; fills r. */
static int bench_one(uint32_t n, uint32_t steps, struct sink *k, struct result *r)
{
	uint32_t warm = 64;
	struct rl_sched_params p;
	rl_sched_default_params(&p);
	p.max_seqs = p.pool_size = n;
	p.max_batch_tokens = n * (PROMPT + 16);
	p.max_ctx = PROMPT + 16 + warm + steps + 16;
	p.n_kv_blocks = n * ((p.max_ctx + p.block_size - 1) / p.block_size);
	struct rl_sched_hooks h = { .ctx = k, .reserve = b_reserve, .emit = b_emit };
	struct rl_sched *s;
	int rc = rl_sched_create(&p, &h, &s);
	if (rc)
		return rc;
	for (uint32_t i = 0; i < n; i++) {
		struct rl_seq *q = rl_sched_seq_alloc(s);
		q->client = i % 8;
		q->rid = i;
		q->tag = i;
		q->n_prompt = PROMPT + i % 16;
		for (uint32_t t = 0; t < q->n_prompt; t++)
			q->tokens[t] = 1 + (i * 131 + t * 7) % 30000;
		q->max_new = p.max_ctx;
		rl_sched_enqueue(s, q, 0);
	}
	int32_t *out = malloc(n * sizeof *out);
	uint64_t *ns = malloc(steps * sizeof *ns);
	if (!out || !ns) {
		free(out);
		free(ns);
		rl_sched_destroy(s);
		return -ENOMEM;
	}
	uint32_t m = 0;
	for (uint32_t it = 0; it < warm + steps; it++) {
		uint64_t t0 = rl_now_ns();
		struct rl_draft_ask *asks;
		rl_sched_plan(s, t0, &asks);
		const struct rl_batch *b = rl_sched_compose(s);
		uint64_t t1 = rl_now_ns();
		if (!b)
			break;
		for (uint32_t i = 0; i < b->n_seqs; i++)   /* the "backend" */
			out[i] = b->seqs[i].sample ? (int32_t)(1 + (it * 17 + i) % 30000) : -1;
		uint64_t t2 = rl_now_ns();
		rl_sched_complete(s, out, t2);
		uint64_t t3 = rl_now_ns();
		if (it >= warm)
			ns[m++] = (t1 - t0) + (t3 - t2);
	}
	struct rl_sched_stats st;
	rl_sched_get_stats(s, &st);
	rc = st.running == n && st.prefilling == 0 && m == steps ? 0 : -EPROTO;
	qsort(ns, m, sizeof *ns, cmp_u64);
	r->n = n;
	r->p50 = m ? ns[m / 2] / 1e3 : 0;
	r->p99 = m ? ns[(uint64_t)m * 99 / 100] / 1e3 : 0;
	free(out);
	free(ns);
	rl_sched_destroy(s);
	return rc;
}

static int write_json(FILE *f, const struct result *r, int n, const struct rl_chunking_result *ch)
{
	fprintf(f, "{\"step_us\":{");
	for (int i = 0; i < n; i++)
		fprintf(f, "%s\"%u\":{\"p50\":%.3f,\"p99\":%.3f}", i ? "," : "", r[i].n, r[i].p50,
			r[i].p99);
	fprintf(f, "}");
	if (ch) {
		fprintf(f, ",");
		rl_bench_chunking_json(f, ch);
	}
	return fprintf(f, "}\n") < 0 ? -EIO : 0;
}

int rl_cmd_bench_sched(int argc, char **argv)
{
	int json = 0, chunking = 1;
	uint32_t steps = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json")) {
			json = 1;
		} else if (!strcmp(argv[i], "--no-chunking")) {
			chunking = 0;
		} else if (!strcmp(argv[i], "--steps") && i + 1 < argc) {
			steps = (uint32_t)strtoul(argv[++i], NULL, 10);
		} else {
			fprintf(stderr, "usage: ringlm bench sched [--json] [--steps N] [--no-chunking]\n");
			return 2;
		}
	}
	static const uint32_t sizes[] = { 1, 64, 256, 1024 };
	struct result r[4];
	struct sink *k = calloc(1, sizeof *k);
	if (!k)
		return 1;
	for (int i = 0; i < 4; i++) {
		uint32_t m = steps ? steps : sizes[i] <= 64 ? 20000 : 4000;
		int rc = bench_one(sizes[i], m, k, &r[i]);
		if (rc) {
			fprintf(stderr, "ringlm bench sched: %u sequences: %s\n", sizes[i], strerror(-rc));
			free(k);
			return 1;
		}
	}
	free(k);
	struct rl_chunking_result ch[2];
	if (chunking) {
		int rc = rl_bench_chunking(ch);
		if (rc) {
			fprintf(stderr, "ringlm bench sched: chunking run failed: %s\n",
				*rl_bench_chunking_error() ? rl_bench_chunking_error() : strerror(-rc));
			return 1;
		}
	}
	if (!json) {
		printf("host time of one scheduling step (admit, compose, batch description, publish)\n");
		printf("%10s %10s %10s %14s\n", "running", "p50 us", "p99 us", "p50 ns/seq");
		for (int i = 0; i < 4; i++)
			printf("%10u %10.2f %10.2f %14.1f\n", r[i].n, r[i].p50, r[i].p99,
			       r[i].p50 * 1e3 / r[i].n);
		if (chunking)
			rl_bench_chunking_print(stdout, ch);
		return 0;
	}
	write_json(stdout, r, 4, chunking ? ch : NULL);
	mkdir("bench", 0777);
	mkdir("bench/out", 0777);
	FILE *f = fopen("bench/out/sched.json", "w");
	int bad = !f;
	if (f) {
		bad |= write_json(f, r, 4, chunking ? ch : NULL) != 0;
		bad |= fclose(f) != 0;
	}
	if (bad) {
		fprintf(stderr, "ringlm bench sched: cannot write bench/out/sched.json\n");
		return 1;
	}
	return 0;
}
