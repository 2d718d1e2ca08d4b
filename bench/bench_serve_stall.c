/* bench_serve_stall.c — `ringlm bench serve --stall SCHEMA.json`: does what a request brings
 * (a constraint never seen before) stall the other streams?
 *
 * Per run, a runtime of its own (the ringlmd options after `--`, nothing added), one client
 * process that streams without pause (a request of --stall-stream tokens, then the next: the
 * trading-style client), and one that, once the stream is under way, sends --stall-requests
 * requests one after another (prompts of --prompt random tokens, --output tokens each): in
 * the `schemas` runs each under a JSON Schema never sent before (the file's schema with a
 * "description" naming the request: another text, so another compile, of the same
 * automaton), in the `plain` runs the same requests without one. Runs alternate plain and
 * schemas, --stall-rounds of each. The streaming client's inter-token gaps from the first
 * request's submit to the last one's end are the stall: their max (the worst gap, the
 * target's measure) and p99, beside its gaps before (alone).
 *
 * Outputs under --out: NAME-stall.json (every run) and NAME-stall.csv (every stream gap:
 * run, time, gap, whether in the window). Never fails on time. */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include "bench/bench_serve.h"
#include "bench/bench_util.h"
#include "clients/ringlm.h"
#include "ipc/rl_clock.h"

#define MAX_TOK (1u << 20)             /* stream tokens a run */
#define MAX_REQ 256

struct shm {
	_Atomic uint32_t n_tok, stop, failed;
	uint64_t tok_t[MAX_TOK];       /* the stream's token arrivals; 0 marks a new request */
	uint64_t win_start, win_end;   /* the other client's first submit, last end */
	uint64_t req_ns[MAX_REQ];      /* each of its requests, submit to end */
	uint32_t req_tokens[MAX_REQ];
};

struct run {
	int schemas, round;
	uint32_t n_in, n_alone, tokens;
	uint64_t max_in, p99_in, p50_in, max_alone, p50_alone;
	uint64_t req_p50, req_max, window_ns;
	double compile_ms;             /* the runtime's helper, from its stats */
	unsigned long long compiles, prewarmed;
};

static void fill(uint32_t *ids, uint32_t n, uint64_t seed, uint32_t vocab)
{
	for (uint32_t i = 0; i < n; i++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		ids[i] = 100 + (uint32_t)(seed >> 33) % (vocab > 200 ? vocab - 200 : 1);
	}
}

static struct ringlm *connect_to(const char *sock)
{
	struct ringlm_params p = ringlm_default_params();
	p.socket = sock;
	struct ringlm *c;
	if (ringlm_connect(&p, &c)) {
		fprintf(stderr, "bench serve --stall: %s\n", ringlm_last_error());
		return NULL;
	}
	return c;
}

/* the streaming client: one request after another until told to stop */
static int streamer(const struct rl_stall_opts *o, const char *sock, struct shm *sh)
{
	struct ringlm *c = connect_to(sock);
	if (!c)
		return 1;
	struct ringlm_info info;
	ringlm_get_info(c, &info);
	uint32_t prompt[32];
	for (uint64_t k = 0; !atomic_load(&sh->stop); k++) {
		fill(prompt, 32, o->seed * 1000 + k, info.vocab_size);
		struct ringlm_request r = ringlm_default_request();
		r.prompt = prompt;
		r.n_prompt = 32;
		r.max_new = o->stream_output < info.max_new ? o->stream_output : info.max_new;
		if (ringlm_submit(c, &r, NULL))
			return 1;
		uint32_t i = atomic_fetch_add(&sh->n_tok, 1);
		if (i < MAX_TOK)
			sh->tok_t[i] = 0;
		for (int done = 0; !done;) {
			struct ringlm_event ev[64];
			const int n = ringlm_wait(c, ev, 64, 1000);
			if (n < 0)
				return 1;
			const uint64_t t = rl_now_ns();
			for (int e = 0; e < n; e++) {
				if (ev[e].type == RINGLM_EV_TOKEN) {
					if ((i = atomic_fetch_add(&sh->n_tok, 1)) < MAX_TOK)
						sh->tok_t[i] = t;
				} else {
					done = 1;
				}
			}
			if (atomic_load(&sh->stop)) {
				ringlm_close(c);
				return 0;
			}
		}
	}
	ringlm_close(c);
	return 0;
}

/* the other client: its requests one after another, each under a fresh schema or none */
static int requester(const struct rl_stall_opts *o, const char *sock, struct shm *sh, int schemas)
{
	struct ringlm *c = connect_to(sock);
	if (!c)
		return 1;
	struct ringlm_info info;
	ringlm_get_info(c, &info);
	while (atomic_load(&sh->n_tok) < 64)   /* the stream under way first */
		usleep(1000);
	usleep(200000);                /* and alone a while: its own gaps */
	uint32_t *prompt = malloc(sizeof *prompt * o->prompt);
	char *text = malloc(o->schema_len + 64);
	if (!prompt || !text)
		return 1;
	sh->win_start = rl_now_ns();
	for (uint32_t q = 0; q < o->requests && q < MAX_REQ; q++) {
		const uint64_t t0 = rl_now_ns();
		fill(prompt, o->prompt, o->seed * 7919 + q, info.vocab_size);
		struct ringlm_constraint *k = NULL;
		if (schemas) {         /* the file's schema, another text: {"description":"request q",... */
			const char *brace = memchr(o->schema, '{', o->schema_len);
			if (!brace) {
				fprintf(stderr, "bench serve --stall: the schema is not a JSON object\n");
				return 1;
			}
			size_t n = (size_t)snprintf(text, 64, "{\"description\":\"request %u\",", q);
			const char *rest = brace + 1;
			size_t rl = o->schema_len - (size_t)(rest - o->schema);
			memcpy(text + n, rest, rl);
			if (ringlm_constraint_create(RINGLM_CONSTRAINT_JSON_SCHEMA, text, n + rl, &k)) {
				fprintf(stderr, "bench serve --stall: the schema: %s\n", ringlm_last_error());
				return 1;
			}
		}
		struct ringlm_request r = ringlm_default_request();
		r.prompt = prompt;
		r.n_prompt = o->prompt;
		r.max_new = o->output;
		r.constraint = k;
		if (ringlm_submit(c, &r, NULL)) {
			fprintf(stderr, "bench serve --stall: submit: %s\n", ringlm_last_error());
			return 1;
		}
		uint32_t got = 0;
		for (int done = 0; !done;) {
			struct ringlm_event ev[64];
			const int n = ringlm_wait(c, ev, 64, 60000);
			if (n <= 0)
				return 1;
			for (int e = 0; e < n; e++) {
				got += ev[e].type == RINGLM_EV_TOKEN;
				if (ev[e].type == RINGLM_EV_ERROR) {
					fprintf(stderr, "bench serve --stall: request %u: %s\n", q, ringlm_strerror(ev[e].code));
					return 1;
				}
				done |= ev[e].type == RINGLM_EV_DONE;
			}
		}
		ringlm_constraint_destroy(k);
		sh->req_ns[q] = rl_now_ns() - t0;
		sh->req_tokens[q] = got;
	}
	sh->win_end = rl_now_ns();
	usleep(100000);
	free(prompt);
	free(text);
	ringlm_close(c);
	return 0;
}

static double stat_of(const char *json, const char *key)
{
	const char *k = strstr(json, key);
	return k ? strtod(k + strlen(key), NULL) : 0;
}

static int one_run(const struct rl_stall_opts *o, struct shm *sh, struct run *R, FILE *csv, int idx)
{
	char sock[96];
	snprintf(sock, sizeof sock, "bench-stall-%d", (int)getpid());
	memset(sh, 0, sizeof *sh);
	const pid_t rt = rl_bench_serve_runtime(o->rt_argv, o->rt_argc, sock, NULL, 0);
	if (rt < 0)
		return -1;
	const pid_t ps = fork();
	if (ps == 0)
		_exit(streamer(o, sock, sh));
	const pid_t pr = fork();
	if (pr == 0)
		_exit(requester(o, sock, sh, R->schemas));
	int st, bad = 0;
	waitpid(pr, &st, 0);
	bad |= !WIFEXITED(st) || WEXITSTATUS(st);
	atomic_store(&sh->stop, 1);
	waitpid(ps, &st, 0);
	bad |= !WIFEXITED(st) || WEXITSTATUS(st);
	char stats[8192] = "";
	struct ringlm *c = connect_to(sock);
	if (c) {
		if (ringlm_stats_json(c, stats, sizeof stats) < 0)
			stats[0] = 0;
		ringlm_close(c);
	}
	kill(rt, SIGTERM);
	waitpid(rt, NULL, 0);
	if (bad) {
		fprintf(stderr, "bench serve --stall: a client failed (see above)\n");
		return -1;
	}
	/* the stream's gaps, within one request, in the window and before it */
	const uint32_t n = atomic_load(&sh->n_tok) < MAX_TOK ? atomic_load(&sh->n_tok) : MAX_TOK;
	uint64_t *in = malloc(n * sizeof *in), *alone = malloc(n * sizeof *alone);
	if (!in || !alone)
		return -1;
	R->n_in = R->n_alone = 0;
	for (uint32_t i = 1; i < n; i++) {
		if (!sh->tok_t[i] || !sh->tok_t[i - 1])
			continue;
		const uint64_t g = sh->tok_t[i] - sh->tok_t[i - 1], t = sh->tok_t[i];
		const int w = t > sh->win_start && t <= sh->win_end;
		if (w)
			in[R->n_in++] = g;
		else if (t <= sh->win_start)
			alone[R->n_alone++] = g;
		fprintf(csv, "%d,%s,%.3f,%.3f,%d\n", idx, R->schemas ? "schemas" : "plain",
			(double)((int64_t)t - (int64_t)sh->win_start) / 1e6, g / 1e6, w);
	}
	R->tokens = n;
	R->p50_in = rl_bench_pct(in, R->n_in, 0.5, 0);
	R->p99_in = rl_bench_pct(in, R->n_in, 0.99, 1);
	R->max_in = R->n_in ? in[R->n_in - 1] : 0;
	R->p50_alone = rl_bench_pct(alone, R->n_alone, 0.5, 0);
	R->max_alone = R->n_alone ? alone[R->n_alone - 1] : 0;
	const uint32_t nq = o->requests < MAX_REQ ? o->requests : MAX_REQ;
	R->req_p50 = rl_bench_pct(sh->req_ns, nq, 0.5, 0);
	R->req_max = sh->req_ns[nq - 1];
	R->window_ns = sh->win_end - sh->win_start;
	R->compile_ms = stat_of(stats, "\"compile_ms\":");
	R->compiles = (unsigned long long)stat_of(stats, "\"compiles\":");
	R->prewarmed = (unsigned long long)stat_of(stats, "\"prewarmed_masks\":");
	free(in);
	free(alone);
	return R->n_in ? 0 : -1;
}

int rl_bench_serve_stall(const struct rl_stall_opts *o)
{
	struct shm *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (sh == MAP_FAILED) {
		fprintf(stderr, "bench serve --stall: cannot map the record area\n");
		return 1;
	}
	char path[512];
	snprintf(path, sizeof path, "%s/%s-stall.csv", o->out_dir, o->name);
	FILE *csv = fopen(path, "w");
	if (!csv) {
		fprintf(stderr, "bench serve --stall: cannot write %s: %s\n", path, strerror(errno));
		return 1;
	}
	fprintf(csv, "run,kind,t_ms,gap_ms,in_window\n");
	const int nr = 2 * o->rounds;
	struct run *R = calloc((size_t)nr, sizeof *R);
	printf("| run | requests | request ms p50 / max | stream gaps in the window | p50 ms | p99 ms | worst ms | "
	       "alone p50 / worst ms | compiles | compile ms |\n|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n");
	double worst[2] = { 0, 0 };
	for (int i = 0; i < nr; i++) {
		R[i].schemas = i & 1;
		R[i].round = i / 2;
		fprintf(stderr, "bench serve --stall: run %d/%d (%s)\n", i + 1, nr, R[i].schemas ? "fresh schemas" : "plain");
		if (one_run(o, sh, &R[i], csv, i)) {
			fclose(csv);
			free(R);
			return 1;
		}
		worst[R[i].schemas] += R[i].max_in / 1e6 / o->rounds;
		printf("| %s %d | %u | %.0f / %.0f | %u | %.1f | %.1f | %.1f | %.1f / %.1f | %llu | %.0f |\n",
		       R[i].schemas ? "schemas" : "plain", R[i].round + 1, o->requests, R[i].req_p50 / 1e6, R[i].req_max / 1e6,
		       R[i].n_in, R[i].p50_in / 1e6, R[i].p99_in / 1e6, R[i].max_in / 1e6, R[i].p50_alone / 1e6,
		       R[i].max_alone / 1e6, R[i].compiles, R[i].compile_ms);
		fflush(stdout);
	}
	fclose(csv);
	const double ratio = worst[0] > 0 ? worst[1] / worst[0] : 0;
	printf("\nthe stream's worst gap while fresh schemas arrive / while plain requests arrive: %.1f / %.1f ms = %.2fx "
	       "(mean of %d rounds; the target is 1.5x at most)\n", worst[1], worst[0], ratio, o->rounds);
	snprintf(path, sizeof path, "%s/%s-stall.json", o->out_dir, o->name);
	FILE *f = fopen(path, "w");
	if (f) {
		fprintf(f, "{\"bench\":\"serve-stall\",\"requests\":%u,\"prompt\":%u,\"output\":%u,\"worst_ms\":{\"plain\":%.3f,"
			"\"schemas\":%.3f},\"ratio\":%.3f,\"runs\":[", o->requests, o->prompt, o->output, worst[0], worst[1], ratio);
		for (int i = 0; i < nr; i++)
			fprintf(f, "%s{\"kind\":\"%s\",\"round\":%d,\"stream_tokens\":%u,\"gaps_in_window\":%u,\"p50_ms\":%.3f,"
				"\"p99_ms\":%.3f,\"worst_ms\":%.3f,\"alone_p50_ms\":%.3f,\"alone_worst_ms\":%.3f,\"request_p50_ms\":%.3f,"
				"\"request_max_ms\":%.3f,\"window_ms\":%.1f,\"compiles\":%llu,\"compile_ms\":%.1f,\"prewarmed_masks\":%llu}",
				i ? "," : "", R[i].schemas ? "schemas" : "plain", R[i].round + 1, R[i].tokens, R[i].n_in,
				R[i].p50_in / 1e6, R[i].p99_in / 1e6, R[i].max_in / 1e6, R[i].p50_alone / 1e6, R[i].max_alone / 1e6,
				R[i].req_p50 / 1e6, R[i].req_max / 1e6, R[i].window_ns / 1e6, R[i].compiles, R[i].compile_ms,
				R[i].prewarmed);
		fprintf(f, "]}\n");
		fclose(f);
		printf("wrote %s and %s-stall.csv\n", path, o->name);
	}
	free(R);
	munmap(sh, sizeof *sh);
	return 0;
}
