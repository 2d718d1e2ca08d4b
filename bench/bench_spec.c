/* bench_spec.c — `ringlm bench spec`: speculative decoding against plain decoding, one stream.
 *
 * Runs the same requests, one at a time (batch 1), on in-process runtimes that differ only in
 * --spec: off, ngram (prompt lookup), and with --draft FILE a draft model. The modes are
 * interleaved request by request so machine noise falls on all of them alike. Per mode: decode
 * tokens/s (tokens after the first over the time from the first to the last, the median over
 * requests), time to first token, the draft tokens accepted of those verified, the mean draft
 * length (drafted / verifications) and tokens per target step, and whether every request gave
 * the very tokens of plain decoding (it must: verification keeps them).
 *
 * Workloads (--workload):
 *   repeat   (needs a vocabulary) a passage, then the passage again cut short: a model that
 *            copies text continues it, as when asked to rewrite a given passage;
 *   greedy   random prompt ids, greedy: what the model itself repeats;
 *   sampled  random prompt ids at temperature 1: text no draft predicts well, the case where
 *            speculation must cost next to nothing.
 * Prints a table; the JSON goes to bench/out/spec.json (or --json FILE).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench/bench_util.h"
#include "clients/cli/cli.h"
#include "clients/ringlm.h"
#include "ipc/rl_clock.h"

#define MAX_MODES 3
#define MAX_TOK 4096

static const char *PASSAGE =
	"Lily and Tom went to the park. They saw a big tree with red apples. Tom wanted to climb the tree, "
	"but Lily said it was too high. They found a ladder and picked the apples together. Then they sat "
	"under the tree and ate them. The apples were sweet and they were happy.\n";

struct mode {
	const char *name, *args;
	struct ringlm *c;
	double tps[256], ttft[256];
	long long drafted, accepted, rounds, steps;
	int n, same;
};

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	if (!n)
		return 0;
	qsort(v, (size_t)n, sizeof *v, cmp_d);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* One request to the end: its tokens into out (returns how many, or -errno), times */
static int run_one(struct ringlm *c, const uint32_t *prompt, uint32_t np, uint32_t n, float temp, uint64_t seed,
		   uint32_t *out, double *tps, double *ttft_ms)
{
	struct ringlm_request r = ringlm_default_request();
	r.prompt = prompt;
	r.n_prompt = np;
	r.max_new = n;
	r.temperature = temp;
	r.seed = seed;
	const uint64_t t0 = rl_now_ns();
	int rc = ringlm_submit(c, &r, NULL);
	if (rc)
		return rc;
	uint64_t first = 0, last = 0;
	int got = 0;
	struct ringlm_event ev[64];
	for (;;) {
		const int k = ringlm_wait(c, ev, 64, 600000);
		if (k <= 0)
			return k < 0 ? k : -ETIMEDOUT;
		for (int i = 0; i < k; i++) {
			if (ev[i].type != RINGLM_EV_TOKEN) {
				*tps = got > 1 && last > first ? (got - 1) / ((last - first) / 1e9) : 0;
				*ttft_ms = (first - t0) / 1e6;
				return ev[i].type == RINGLM_EV_DONE ? got : -EIO;
			}
			last = rl_now_ns();
			if (!got)
				first = last;
			if (got < MAX_TOK)
				out[got++] = ev[i].token;
		}
	}
}

static void usage(FILE *f)
{
	fprintf(f,
"usage: ringlm bench spec --model PATH [--tokenizer PATH] [--draft PATH] [--workload repeat|greedy|sampled]\n"
"                         [-n TOKENS] [--reqs N] [--prompt-len N] [--spec-k K] [--threads N]\n"
"                         [--runtime-args \"...\"] [--json FILE]\n"
"  plain decoding, --spec ngram and (with --draft) --spec PATH on the same requests, one at a time.\n"
"  defaults: --workload greedy, -n 128, --reqs 5, --prompt-len 32, --spec-k 8\n");
}

int rl_cmd_bench_spec(int argc, char **argv)
{
	const char *model = NULL, *tok = NULL, *draft = NULL, *workload = "greedy", *json = NULL, *extra = "";
	int n = 128, reqs = 5, plen = 32, k = 8, threads = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage(stdout);
			return 0;
		}
		if (!v) {
			fprintf(stderr, "ringlm bench spec: %s needs a value (ringlm bench spec --help)\n", a);
			return 2;
		}
		i++;
		if (!strcmp(a, "--model")) model = v;
		else if (!strcmp(a, "--tokenizer")) tok = v;
		else if (!strcmp(a, "--draft")) draft = v;
		else if (!strcmp(a, "--workload")) workload = v;
		else if (!strcmp(a, "--json")) json = v;
		else if (!strcmp(a, "--runtime-args")) extra = v;
		else if (!strcmp(a, "-n")) n = atoi(v);
		else if (!strcmp(a, "--reqs")) reqs = atoi(v);
		else if (!strcmp(a, "--prompt-len")) plen = atoi(v);
		else if (!strcmp(a, "--spec-k")) k = atoi(v);
		else if (!strcmp(a, "--threads")) threads = atoi(v);
		else {
			fprintf(stderr, "ringlm bench spec: unknown option '%s' (ringlm bench spec --help)\n", a);
			return 2;
		}
	}
	if (!model || n < 2 || n > MAX_TOK || reqs < 1 || reqs > 256 || plen < 1 || plen > 1024 || k < 1 || k > 16 ||
	    (strcmp(workload, "repeat") && strcmp(workload, "greedy") && strcmp(workload, "sampled"))) {
		fprintf(stderr, "ringlm bench spec: give --model, -n 2..%d, --reqs 1..256, --prompt-len 1..1024, --spec-k 1..16 "
			"and --workload repeat, greedy or sampled\n", MAX_TOK);
		return 2;
	}
	static struct mode m[MAX_MODES];
	static char args[MAX_MODES][1024];
	const char *specs[MAX_MODES] = { "off", "ngram", draft };
	const int n_modes = draft ? 3 : 2;
	for (int i = 0; i < n_modes; i++) {
		snprintf(args[i], sizeof args[i], "--threads %d --spec %s%s%d %s", threads, specs[i],
			 i ? " --spec-k " : "", i ? k : 0, extra);
		if (!i)                        /* no --spec-k with --spec off */
			snprintf(args[i], sizeof args[i], "--threads %d --spec off %s", threads, extra);
		m[i].name = i == 0 ? "plain" : i == 1 ? "ngram" : "draft";
		m[i].args = args[i];
		struct ringlm_params p = ringlm_default_params();
		p.model = model;
		p.tokenizer = tok;
		p.backend = "cpu";
		p.runtime_args = args[i];
		if (ringlm_connect(&p, &m[i].c)) {
			fprintf(stderr, "ringlm bench spec: %s: %s\n", m[i].name, ringlm_last_error());
			return 1;
		}
		m[i].same = 1;
	}
	struct ringlm_info info;
	ringlm_get_info(m[0].c, &info);
	const float temp = !strcmp(workload, "sampled") ? 1.0f : 0.0f;
	static uint32_t prompt[4096], ref[MAX_TOK], got[MAX_TOK];
	uint64_t rng = 0x5eed;
	for (int q = 0; q < reqs; q++) {
		int np;
		if (!strcmp(workload, "repeat")) {
			char text[4096];
			/* the passage, then again up to a point that moves with q */
			const size_t cut = 20 + (size_t)q * 37 % (strlen(PASSAGE) - 40);
			snprintf(text, sizeof text, "%s%.*s", PASSAGE, (int)cut, PASSAGE);
			np = ringlm_tokenize(m[0].c, text, 1, prompt, 4096);
			if (np <= 0) {
				fprintf(stderr, "ringlm bench spec: --workload repeat needs a model with a vocabulary (or --tokenizer)\n");
				return 1;
			}
		} else {
			np = plen;
			prompt[0] = info.bos_id != UINT32_MAX ? info.bos_id : 1;
			for (int i = 1; i < np; i++) {
				rng = rng * 6364136223846793005ull + 1442695040888963407ull;
				prompt[i] = (uint32_t)((rng >> 33) % info.vocab_size);
			}
		}
		int n_ref = 0;
		for (int i = 0; i < n_modes; i++) {
			const long long d0 = (long long)rl_cli_stat(m[i].c, "spec_drafted"), a0 = (long long)rl_cli_stat(m[i].c, "spec_accepted"),
					r0 = (long long)rl_cli_stat(m[i].c, "spec_rounds"), s0 = (long long)rl_cli_stat(m[i].c, "steps");
			int g = run_one(m[i].c, prompt, (uint32_t)np, (uint32_t)n, temp, 1000 + (uint64_t)q, i ? got : ref,
					&m[i].tps[m[i].n], &m[i].ttft[m[i].n]);
			if (g < 0) {
				fprintf(stderr, "ringlm bench spec: %s request %d: %s\n", m[i].name, q, ringlm_strerror(g));
				return 1;
			}
			if (!i)
				n_ref = g;
			else if (g != n_ref || memcmp(got, ref, (size_t)g * sizeof *got))
				m[i].same = 0;
			m[i].n++;
			m[i].drafted += (long long)rl_cli_stat(m[i].c, "spec_drafted") - d0;
			m[i].accepted += (long long)rl_cli_stat(m[i].c, "spec_accepted") - a0;
			m[i].rounds += (long long)rl_cli_stat(m[i].c, "spec_rounds") - r0;
			m[i].steps += (long long)rl_cli_stat(m[i].c, "steps") - s0;
		}
	}
	const double base = median(m[0].tps, m[0].n);
	printf("ringlm bench spec: %s, workload %s, %d requests of %d tokens, batch 1, %s\n", model, workload, reqs, n,
	       rl_cpu_isa_name(rl_cpu_isa_best()));
	printf("%-6s %10s %8s %9s %12s %10s %11s %10s\n", "mode", "decode t/s", "vs plain", "TTFT ms", "accepted", "draft len",
	       "tok/step", "same tok");
	rl_bench_outdir();
	FILE *jf = fopen(json ? json : "bench/out/spec.json", "w");
	if (jf)
		fprintf(jf, "{\"model\":\"%s\",\"draft\":\"%s\",\"workload\":\"%s\",\"requests\":%d,\"tokens\":%d,\"spec_k\":%d,"
			"\"cpu\":\"%s\",\"modes\":[", model, draft ? draft : "", workload, reqs, n, k, rl_cpu_isa_name(rl_cpu_isa_best()));
	for (int i = 0; i < n_modes; i++) {
		const double tps = median(m[i].tps, m[i].n), ttft = median(m[i].ttft, m[i].n);
		const double rate = m[i].drafted ? (double)m[i].accepted / m[i].drafted : 0;
		const double len = m[i].rounds ? (double)m[i].drafted / m[i].rounds : 0;
		const double per_step = m[i].steps ? (double)n * reqs / m[i].steps : 0;
		char acc[32];
		snprintf(acc, sizeof acc, "%lld/%lld", m[i].accepted, m[i].drafted);
		printf("%-6s %10.2f %7.2fx %9.1f %12s %10.2f %11.2f %10s\n", m[i].name, tps, base > 0 ? tps / base : 0, ttft,
		       i ? acc : "-", len, per_step, m[i].same ? "yes" : "NO");
		if (jf)
			fprintf(jf, "%s{\"mode\":\"%s\",\"args\":\"%s\",\"decode_tps\":%.3f,\"vs_plain\":%.4f,\"ttft_ms\":%.2f,"
				"\"drafted\":%lld,\"accepted\":%lld,\"acceptance\":%.4f,\"rounds\":%lld,\"mean_draft\":%.3f,"
				"\"tokens_per_step\":%.3f,\"same_tokens\":%s}", i ? "," : "", m[i].name, m[i].args, tps,
				base > 0 ? tps / base : 0, ttft, m[i].drafted, m[i].accepted, rate, m[i].rounds, len, per_step,
				m[i].same ? "true" : "false");
	}
	if (jf) {
		fprintf(jf, "]}\n");
		fclose(jf);
	}
	int bad = 0;
	for (int i = 0; i < n_modes; i++) {
		bad |= !m[i].same;
		ringlm_close(m[i].c);
	}
	return bad;
}
