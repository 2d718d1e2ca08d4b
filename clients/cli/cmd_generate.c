/* cmd_generate.c — `ringlm generate`: stream one generation from a daemon (--socket) or an
 * in-process runtime (--model), as text or ids, with optional latency stats on stderr. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "clients/cli/cli.h"
#include "clients/ringlm.h"
#include "ipc/rl_clock.h"

static void usage(FILE *f)
{
	fprintf(f,
"usage: ringlm generate [--socket NAME | --model PATH|synthetic:SHAPE [--tokenizer PATH]\n"
"                        [--backend cpu|cuda|sim] [--spec off|ngram] [--spec-k N] [--runtime-args \"...\"]]\n"
"                       (--prompt TEXT [--chat [--system TEXT]] | --prompt-ids 1,2,3) [-n N] [--temp T]\n"
"                       [--top-k K] [--top-p P] [--seed S] [--stop ID,..] [--ids] [--stats] [--no-bos]\n"
"                       [--no-spec] [--deterministic]\n"
"  --chat      the prompt is a user's turn in the model's chat template (ChatML, Llama 3, Gemma ...);\n"
"              the answer ends at the model's end of turn. --system TEXT: a system turn before it\n"
"  -n N        tokens to generate at most (>= 1, default 64)\n"
"  --temp T    0 = greedy (default), else a finite temperature > 0\n"
"  --top-k K   0 = off, else 1..vocabulary size\n"
"  --top-p P   1 = off, else in (0, 1]\n"
"  --spec M    in-process runtime: speculative decoding, off or ngram (prompt lookup); with\n"
"              --socket it is ringlmd's option. --spec-k N: the longest draft (1..16, default 8)\n"
"  --no-spec   this request without speculative decoding (same tokens, other timing)\n"
"  --deterministic  this request's logits the same bits whatever shares the runtime's steps\n"
"exit status: 0 done, 1 error, 2 bad usage, 3 stopped early because the context window was full\n");
}

/* -n and --top-k: a whole number in [lo, hi]; 0 or -1 with the message printed. */
static int whole(const char *opt, const char *v, unsigned long long lo, unsigned long long hi,
		 unsigned long long *out)
{
	char *end;
	errno = 0;
	unsigned long long x = strtoull(v, &end, 10);
	if (errno || end == v || *end || *v == '-' || x < lo || x > hi) {
		fprintf(stderr, "ringlm generate: %s must be a whole number from %llu to %llu, got '%s'\n", opt, lo, hi, v);
		return -1;
	}
	*out = x;
	return 0;
}

static int parse_ids(const char *s, uint32_t *ids, int max)
{
	int n = 0;
	while (*s) {
		char *end;
		unsigned long v = strtoul(s, &end, 10);
		if (end == s || v > UINT32_MAX || n == max)
			return -1;
		ids[n++] = (uint32_t)v;
		s = end;
		if (*s == ',' || *s == ' ')
			s++;
		else if (*s)
			return -1;
	}
	return n;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

int rl_cmd_generate(int argc, char **argv)
{
	struct ringlm_params p = ringlm_default_params();
	struct ringlm_request r = ringlm_default_request();
	/* the library's wait (spin 50 us, then yield up to 200 us, then sleep): a longer pure spin
	 * kept the runtime thread, woken by the kernel onto this process's cpu, off it for the
	 * whole spin (2 ms TTFTs, perf sched) */
	const char *prompt = NULL, *prompt_ids = NULL, *stop = NULL, *spec = NULL, *spec_k = NULL, *system = NULL;
	int ids_out = 0, stats = 0, bos = 1, n_given = 0, chat = 0;
	r.max_new = 64;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--ids")) { ids_out = 1; continue; }
		if (!strcmp(a, "--stats")) { stats = 1; continue; }
		if (!strcmp(a, "--no-bos")) { bos = 0; continue; }
		if (!strcmp(a, "--chat")) { chat = 1; continue; }
		if (!strcmp(a, "--no-spec")) { r.no_spec = 1; continue; }
		if (!strcmp(a, "--deterministic")) { r.deterministic = 1; continue; }
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
		if (!v) {
			fprintf(stderr, "ringlm generate: %s needs a value (ringlm generate --help)\n", a);
			return 2;
		}
		i++;
		char *end = NULL;
		unsigned long long x;
		if (!strcmp(a, "--socket")) p.socket = v;
		else if (!strcmp(a, "--model")) p.model = v;
		else if (!strcmp(a, "--tokenizer")) p.tokenizer = v;
		else if (!strcmp(a, "--backend")) p.backend = v;
		else if (!strcmp(a, "--runtime-args")) p.runtime_args = v;
		else if (!strcmp(a, "--spec")) spec = v;
		else if (!strcmp(a, "--spec-k")) spec_k = v;
		else if (!strcmp(a, "--prompt")) prompt = v;
		else if (!strcmp(a, "--system")) system = v;
		else if (!strcmp(a, "--prompt-ids")) prompt_ids = v;
		else if (!strcmp(a, "--stop")) stop = v;
		else if (!strcmp(a, "-n")) {
			if (whole("-n", v, 1, UINT32_MAX, &x))
				return 2;
			r.max_new = (uint32_t)x;
			n_given = 1;
		} else if (!strcmp(a, "--temp")) {
			r.temperature = strtof(v, &end);
			if (end != v && !*end && !(r.temperature >= 0 && r.temperature <= 1e6f)) {
				fprintf(stderr, "ringlm generate: --temp must be 0 (greedy) or a finite number > 0, got '%s'\n", v);
				return 2;
			}
		} else if (!strcmp(a, "--top-k")) {
			if (whole("--top-k", v, 0, UINT32_MAX, &x))
				return 2;
			r.top_k = (uint32_t)x;
		} else if (!strcmp(a, "--top-p")) {
			r.top_p = strtof(v, &end);
			if (end != v && !*end && !(r.top_p > 0 && r.top_p <= 1)) {
				fprintf(stderr, "ringlm generate: --top-p must be in (0, 1] (1 = off), got '%s'\n", v);
				return 2;
			}
		}
		else if (!strcmp(a, "--seed")) r.seed = strtoull(v, &end, 10);
		else {
			fprintf(stderr, "ringlm generate: unknown option '%s' (ringlm generate --help)\n", a);
			return 2;
		}
		if (end && (*end || end == v)) {
			fprintf(stderr, "ringlm generate: %s wants a number, got '%s'\n", a, v);
			return 2;
		}
	}
	if ((chat || system) && (!prompt || !bos || (system && !chat))) {
		fprintf(stderr, "ringlm generate: %s\n", !prompt ? "--chat and --system take the turn's text from --prompt TEXT" :
			!bos ? "--chat writes the template's own BOS: drop --no-bos" : "--system goes with --chat");
		return 2;
	}
	if (!prompt == !prompt_ids) {
		fprintf(stderr, "ringlm generate: give exactly one of --prompt TEXT or --prompt-ids LIST\n");
		return 2;
	}
	if ((spec || spec_k) && !p.model) {
		fprintf(stderr, "ringlm generate: --spec and --spec-k configure the in-process runtime (--model); "
			"a ringlmd takes them on its own command line\n");
		return 2;
	}
	char rt_args[1024];
	if (spec || spec_k) {          /* checked and refused by name by the runtime's own parser */
		snprintf(rt_args, sizeof rt_args, "%s%s%s%s%s%s", p.runtime_args ? p.runtime_args : "",
			 spec ? " --spec " : "", spec ? spec : "", spec_k ? " --spec-k " : "", spec_k ? spec_k : "",
			 spec_k && !spec ? " --spec ngram" : "");
		p.runtime_args = rt_args;
	}
	static uint32_t ids[1 << 16], stops[8];
	int n_stop = 0;
	if (stop && (n_stop = parse_ids(stop, stops, 8)) < 0) {
		fprintf(stderr, "ringlm generate: --stop wants up to 8 comma-separated ids, got '%s'\n", stop);
		return 2;
	}
	struct ringlm *c;
	int rc = ringlm_connect(&p, &c);
	if (rc) {
		fprintf(stderr, "ringlm generate: %s\n", ringlm_last_error()[0] ? ringlm_last_error() : ringlm_strerror(rc));
		return 1;
	}
	struct ringlm_info info;
	if ((rc = ringlm_get_info(c, &info))) {
		fprintf(stderr, "ringlm generate: %s\n", ringlm_strerror(rc));
		ringlm_close(c);
		return 1;
	}
	/* the runtime's limits, checked here so the message can name the option */
	if (r.top_k > info.vocab_size) {
		fprintf(stderr, "ringlm generate: --top-k must be 0 (off) or 1..%u (the vocabulary), got %u\n",
			info.vocab_size, r.top_k);
		ringlm_close(c);
		return 2;
	}
	if (!n_given && r.max_new > info.max_new)
		r.max_new = info.max_new;      /* the default 64 on a smaller context */
	if (r.max_new > info.max_new) {
		fprintf(stderr, "ringlm generate: -n %u is over the runtime's limit of %u (ringlmd --max-new, "
			"at most its context of %u)\n", r.max_new, info.max_new, info.max_ctx);
		ringlm_close(c);
		return 2;
	}
	int n;
	if (prompt_ids) {
		n = parse_ids(prompt_ids, ids, 1 << 16);
		if (n <= 0) {
			fprintf(stderr, "ringlm generate: --prompt-ids wants comma-separated token ids, got '%s'\n", prompt_ids);
			ringlm_close(c);
			return 2;
		}
	} else if (chat) {
		struct ringlm_chat_msg m[2] = { { "system", system }, { "user", prompt } };
		int nm = system ? 2 : 1, len = ringlm_chat_format(c, m + 2 - nm, nm, NULL, 0);
		char *text = len >= 0 ? malloc((size_t)len + 1) : NULL;
		n = len < 0 ? len : !text ? -ENOMEM : ringlm_chat_format(c, m + 2 - nm, nm, text, len + 1);
		if (n >= 0)
			n = ringlm_tokenize_ex(c, text, RINGLM_TOKENIZE_SPECIAL, ids, 1 << 16);
		free(text);
		if (n <= 0) {
			fprintf(stderr, "ringlm generate: --chat: %s\n", n == 0 ? "the conversation is empty" : ringlm_last_error());
			ringlm_close(c);
			return n == -ENOTSUP || n == 0 ? 2 : 1;
		}
	} else {
		n = ringlm_tokenize(c, prompt, bos, ids, 1 << 16);
		if (n <= 0) {
			fprintf(stderr, "ringlm generate: %s\n",
				n == 0 ? "the prompt is empty: give --prompt some text, or drop --no-bos" :
				n == -ENOENT ? "the runtime's model has no vocabulary: use --prompt-ids" :
				n == -ENOSPC ? "the prompt is over 65536 tokens: shorten it" : ringlm_strerror(n));
			ringlm_close(c);
			return n == 0 ? 2 : 1;
		}
	}
	if ((uint32_t)n > info.max_prompt) {
		fprintf(stderr, "ringlm generate: the prompt is %d tokens, over the runtime's limit of %u "
			"(ringlmd --max-prompt, below its context of %u); shorten it\n", n, info.max_prompt, info.max_ctx);
		ringlm_close(c);
		return 2;
	}
	r.prompt = ids;
	r.n_prompt = (uint32_t)n;
	r.stop = stops;
	r.n_stop = (uint32_t)n_stop;
	uint64_t t0 = rl_now_ns(), last = 0, ttft = 0;
	uint64_t *gaps = calloc(r.max_new + 1, sizeof *gaps);
	uint32_t id, ngaps = 0, ntok = 0, prev = n ? ids[n - 1] : UINT32_MAX;
	rc = ringlm_submit(c, &r, &id);
	if (rc) {
		fprintf(stderr, "ringlm generate: submit failed: %s\n", ringlm_strerror(rc));
		ringlm_close(c);
		free(gaps);
		return 1;
	}
	if (!ids_out && prompt && !chat)
		fputs(prompt, stdout);
	int done = 0, status = 0;
	struct ringlm_event ev[64];
	char piece[512];
	/* streamed text only up to the last whole UTF-8 character (a token may end inside one) */
	struct ringlm_textstream ts;
	ringlm_textstream_init(&ts, prev);
	while (!done) {
		int k = ringlm_wait(c, ev, 64, -1);
		if (k < 0) {
			fprintf(stderr, "\nringlm generate: %s\n", ringlm_strerror(k));
			status = 1;
			break;
		}
		for (int i = 0; i < k; i++) {
			if (ev[i].type == RINGLM_EV_TOKEN) {
				uint64_t now = rl_now_ns();
				if (!ntok)
					ttft = now - t0;
				else
					gaps[ngaps++] = now - last;
				last = now;
				ntok++;
				if (ids_out) {
					printf(ntok > 1 ? " %u" : "%u", ev[i].token);
				} else {
					int n = ringlm_textstream_push(c, &ts, ev[i].token, piece, sizeof piece);
					/* like llama2.c's safe_printf: a lone control byte is dropped */
					if (n == 1 && (unsigned char)piece[0] < 0x80 &&
					    !isprint((unsigned char)piece[0]) && !isspace((unsigned char)piece[0]))
						;
					else if (n >= 0)
						fwrite(piece, 1, (size_t)n, stdout);
					else
						printf("<%u>", ev[i].token);
					fflush(stdout);
				}
			} else if (ev[i].type == RINGLM_EV_ERROR) {
				fprintf(stderr, "\nringlm generate: the runtime rejected the request: %s\n", ringlm_strerror(ev[i].code));
				done = 1;
				status = 1;
			} else {
				done = 1;
				if (ev[i].code == RINGLM_FIN_CTX) {
					fprintf(stderr, "\nringlm generate: stopped after %u of %u tokens: the context window "
						"(%u tokens) is full; shorten the prompt or start ringlmd with a larger --ctx\n",
						ntok, r.max_new, info.max_ctx);
					status = 3;
				}
			}
		}
	}
	int left = ringlm_textstream_flush(&ts, piece, sizeof piece);   /* complete or not */
	fwrite(piece, 1, (size_t)left, stdout);
	printf("\n");
	fflush(stdout);
	if (stats) {
		qsort(gaps, ngaps, sizeof *gaps, cmp_u64);
		/* the runtime's counts (all its requests) */
		const long long drafted = (long long)rl_cli_stat(c, "spec_drafted"), accepted = (long long)rl_cli_stat(c, "spec_accepted");
		const double secs = last > t0 ? (last - t0) / 1e9 : 0;
		fprintf(stderr, "{\"ttft_us\":%.1f,\"itl_us_p50\":%.1f,\"itl_us_p99\":%.1f,\"itl_us_max\":%.1f,\"tokens\":%u,"
			"\"tokens_per_s\":%.2f,\"spec_drafted\":%lld,\"spec_accepted\":%lld}\n",
			ttft / 1e3, ngaps ? gaps[ngaps / 2] / 1e3 : 0.0,
			ngaps ? gaps[(size_t)(ngaps * 0.99) < ngaps ? (size_t)(ngaps * 0.99) : ngaps - 1] / 1e3 : 0.0,
			ngaps ? gaps[ngaps - 1] / 1e3 : 0.0, ntok, secs > 0 ? ntok / secs : 0.0, drafted, accepted);
	}
	free(gaps);
	ringlm_close(c);
	return status;
}
