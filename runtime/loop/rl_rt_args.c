/* rl_rt_args.c — ringlmd's command line (README.md "Command line"), shared with the embedded mode. */
#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/loop/rl_rt_args.h"
#include "runtime/sched/rl_spec.h"

void rl_rt_usage(FILE *f)
{
	fprintf(f,
"usage: ringlmd [--model PATH|synthetic:SHAPE] [--tokenizer PATH] [--backend cpu|cuda|sim]\n"
"               [--socket NAME] [--cpu N] [--threads N] [--max-batch-tokens N|auto]\n"
"               [--itl-target-us N] [--max-seqs N] [--ctx N] [--kv-blocks N] [--block-size N]\n"
"               [--prefix-cache on|off] [--spec off|ngram|DRAFT.gguf] [--spec-k N] [--spec-cost C]\n"
"               [--max-clients N] [--max-inflight N]\n"
"               [--max-prompt N] [--max-new N] [--cons-max-states N] [--cons-nice N] [--allow-uid UID] [--allow-gid GID]\n"
"               [--sim-step-us A] [--sim-token-us B] [--sim-vocab V]\n"
"               [--kv-type f16|f32] [--cuda-graph-buckets N,N,...] [--cuda-dtype bf16|fp16] [--cuda-attn ringlm|flashinfer]\n"
"               [--wake auto|futex|eventfd] [--idle-spin-us N] [--idle-adapt-ms N]\n"
"               [--event-ring N] [--request-ring N] [--arena-ids N] [--drain-timeout-ms N] [--max-queue-ms N]\n"
"               [--kv-events ENDPOINT] [--kv-events-topic TOPIC]\n"
"               [--deterministic] [--latency] [--verbose|--quiet]\n");
}

static int num(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s || *end || *s == '-' || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

/* Every option that takes a value; parsed by getopt_long (so "--opt=value" works and an
 * unknown option is named as one), then handled by name below. */
static const struct option value_opts[] = {
	{ "model", required_argument, NULL, 0 },
	{ "tokenizer", required_argument, NULL, 0 },
	{ "cuda-graph-buckets", required_argument, NULL, 0 },
	{ "cuda-dtype", required_argument, NULL, 0 },
	{ "kv-type", required_argument, NULL, 0 },
	{ "cuda-attn", required_argument, NULL, 0 },
	{ "backend", required_argument, NULL, 0 },
	{ "socket", required_argument, NULL, 0 },
	{ "cpu", required_argument, NULL, 0 },
	{ "threads", required_argument, NULL, 0 },
	{ "max-batch-tokens", required_argument, NULL, 0 },
	{ "itl-target-us", required_argument, NULL, 0 },
	{ "max-seqs", required_argument, NULL, 0 },
	{ "ctx", required_argument, NULL, 0 },
	{ "kv-blocks", required_argument, NULL, 0 },
	{ "block-size", required_argument, NULL, 0 },
	{ "prefix-cache", required_argument, NULL, 0 },
	{ "spec", required_argument, NULL, 0 },
	{ "spec-k", required_argument, NULL, 0 },
	{ "spec-cost", required_argument, NULL, 0 },
	{ "max-clients", required_argument, NULL, 0 },
	{ "max-inflight", required_argument, NULL, 0 },
	{ "max-prompt", required_argument, NULL, 0 },
	{ "max-new", required_argument, NULL, 0 },
	{ "cons-max-states", required_argument, NULL, 0 },
	{ "cons-nice", required_argument, NULL, 0 },
	{ "allow-uid", required_argument, NULL, 0 },
	{ "allow-gid", required_argument, NULL, 0 },
	{ "sim-step-us", required_argument, NULL, 0 },
	{ "sim-token-us", required_argument, NULL, 0 },
	{ "sim-vocab", required_argument, NULL, 0 },
	{ "wake", required_argument, NULL, 0 },
	{ "event-ring", required_argument, NULL, 0 },
	{ "request-ring", required_argument, NULL, 0 },
	{ "arena-ids", required_argument, NULL, 0 },
	{ "drain-timeout-ms", required_argument, NULL, 0 },
	{ "max-queue-ms", required_argument, NULL, 0 },
	{ "idle-spin-us", required_argument, NULL, 0 },
	{ "idle-adapt-ms", required_argument, NULL, 0 },
	{ "kv-events", required_argument, NULL, 0 },
	{ "kv-events-topic", required_argument, NULL, 0 },
	{ "latency", no_argument, NULL, 'L' },
	{ "deterministic", no_argument, NULL, 'D' },
	{ "help", no_argument, NULL, 'h' },
	{ "quiet", no_argument, NULL, 'q' },
	{ "verbose", no_argument, NULL, 'v' },
	{ NULL, 0, NULL, 0 },
};

int rl_rt_parse_args(struct rl_rt_params *p, int argc, char **argv, char *err, size_t errlen)
{
	int spec = -1;                 /* --spec: -1 not given */
	uint32_t spec_k = 0;           /* --spec-k: 0 not given */
	optind = 0;                    /* full re-initialisation: callers parse more than once */
	opterr = 0;                    /* our own one-line messages, not getopt's */
	for (;;) {
		int idx = -1, o = getopt_long(argc, argv, ":hqv", value_opts, &idx);
		if (o == -1)
			break;
		if (o == 'h')
			return 1;
		if (o == 'L') {
			p->latency = 1;
			continue;
		}
		if (o == 'D') {
			p->deterministic = 1;
			continue;
		}
		if (o == 'q' || o == 'v') {
			p->verbose = o == 'v';
			continue;
		}
		const char *bad = argv[optind - 1 < argc ? optind - 1 : argc - 1];
		if (o == '?') {
			snprintf(err, errlen, "unknown option '%s' (see ringlmd --help)", optopt ? (char[]){ '-', (char)optopt, 0 } : bad);
			return -EINVAL;
		}
		if (o == ':') {
			snprintf(err, errlen, "option %s needs a value (see ringlmd --help)", bad);
			return -EINVAL;
		}
		char name[40];
		snprintf(name, sizeof name, "--%s", value_opts[idx].name);
		const char *a = name, *v = optarg;
		uint64_t n;
#define NUM(lo, hi) do { if (num(v, lo, hi, &n)) { \
	snprintf(err, errlen, "%s wants a number in [%llu, %llu], got '%s'", a, \
		 (unsigned long long)(lo), (unsigned long long)(hi), v); return -EINVAL; } } while (0)
		if (!strcmp(a, "--model"))
			p->model = v;
		else if (!strcmp(a, "--tokenizer"))
			p->tokenizer = v;
		else if (!strcmp(a, "--cuda-graph-buckets"))
			p->cuda_graph_buckets = v;     /* parsed (and rejected) by the cuda backend */
		else if (!strcmp(a, "--kv-type")) {
			if (strcmp(v, "f32") && strcmp(v, "f16")) {
				snprintf(err, errlen, "--kv-type must be f32 or f16, got '%s'", v);
				return -EINVAL;
			}
			p->kv_f16 = !strcmp(v, "f16");
		} else if (!strcmp(a, "--cuda-dtype")) {
			if (strcmp(v, "bf16") && strcmp(v, "fp16")) {
				snprintf(err, errlen, "--cuda-dtype must be bf16 or fp16, got '%s'", v);
				return -EINVAL;
			}
			p->cuda_dtype = !strcmp(v, "fp16");
		} else if (!strcmp(a, "--cuda-attn")) {
			if (strcmp(v, "ringlm") && strcmp(v, "flashinfer")) {
				snprintf(err, errlen, "--cuda-attn must be ringlm or flashinfer, got '%s'", v);
				return -EINVAL;
			}
			p->cuda_attn = !strcmp(v, "flashinfer");
		} else if (!strcmp(a, "--backend")) {
			if (strcmp(v, "cpu") && strcmp(v, "cuda") && strcmp(v, "sim")) {
				snprintf(err, errlen, "--backend must be cpu, cuda or sim, got '%s'", v);
				return -EINVAL;
			}
			p->backend = v;
		} else if (!strcmp(a, "--socket"))
			p->socket = v;
		else if (!strcmp(a, "--cpu")) {
			NUM(0, 4095);
			p->cpu = (int)n;
		} else if (!strcmp(a, "--threads")) {
			NUM(0, 1024);
			p->threads = (int)n;
		} else if (!strcmp(a, "--max-batch-tokens")) {
			if (!strcmp(v, "auto"))
				p->budget_auto = 1;
			else {
				NUM(1, 1u << 20);
				p->max_batch_tokens = (uint32_t)n;
				p->budget_auto = 0;
			}
		} else if (!strcmp(a, "--itl-target-us")) {
			NUM(1, 100000000);
			p->itl_target_ns = n * 1000;
		} else if (!strcmp(a, "--max-seqs")) {
			NUM(1, 65536);
			p->max_seqs = (uint32_t)n;
		} else if (!strcmp(a, "--ctx")) {
			NUM(2, 1u << 24);
			p->ctx = (uint32_t)n;
		} else if (!strcmp(a, "--kv-blocks")) {
			NUM(1, 1u << 26);
			p->kv_blocks = (uint32_t)n;
		} else if (!strcmp(a, "--block-size")) {
			NUM(1, 1024);
			p->block_size = (uint32_t)n;
		} else if (!strcmp(a, "--prefix-cache")) {
			if (strcmp(v, "on") && strcmp(v, "off")) {
				snprintf(err, errlen, "--prefix-cache must be on or off, got '%s'", v);
				return -EINVAL;
			}
			p->prefix_cache = !strcmp(v, "on");
		} else if (!strcmp(a, "--spec")) {
			if (!*v) {
				snprintf(err, errlen, "--spec must be off, ngram (prompt lookup) or a draft model's file");
				return -EINVAL;
			}
			spec = strcmp(v, "off") != 0;
			p->spec_model = strcmp(v, "off") && strcmp(v, "ngram") ? v : NULL;
		} else if (!strcmp(a, "--spec-k")) {
			NUM(1, RL_SPEC_MAX_K);
			spec_k = (uint32_t)n;
		} else if (!strcmp(a, "--spec-cost")) {
			char *end;
			const double c = strtod(v, &end);
			if (end == v || *end || !(c > 0 && c <= 100)) {
				snprintf(err, errlen, "--spec-cost wants a draft's cost relative to a one-row step, a number in (0, 100], got '%s'", v);
				return -EINVAL;
			}
			p->spec_cost = c;
		} else if (!strcmp(a, "--max-clients")) {
			NUM(1, 4096);
			p->max_clients = (uint32_t)n;
		} else if (!strcmp(a, "--max-inflight")) {
			NUM(1, 65536);
			p->max_inflight = (uint32_t)n;
		} else if (!strcmp(a, "--max-prompt")) {
			NUM(1, 1u << 24);
			p->max_prompt = (uint32_t)n;
		} else if (!strcmp(a, "--max-new")) {
			NUM(1, 1u << 24);
			p->max_new = (uint32_t)n;
		} else if (!strcmp(a, "--cons-max-states")) {
			/* below a few states no constraint compiles; above ten million a grammar's
			 * tables alone outgrow any machine this serves on */
			NUM(16, 10000000);
			p->cons_max_states = (uint32_t)n;
		} else if (!strcmp(a, "--cons-nice")) {
			/* 0 (the step's threads' own) to 19; below 0 needs privileges a server should not have */
			NUM(0, 19);
			p->cons_nice = (int)n;
		} else if (!strcmp(a, "--allow-uid") || !strcmp(a, "--allow-gid")) {
			int is_uid = a[8] == 'u';
			int *cnt = is_uid ? &p->n_allow_uid : &p->n_allow_gid;
			if (*cnt >= RL_RT_MAX_ALLOW) {
				snprintf(err, errlen, "at most %d %s options", RL_RT_MAX_ALLOW, a);
				return -EINVAL;
			}
			if (num(v, 0, UINT32_MAX - 1, &n)) {
				struct passwd *pw = is_uid ? getpwnam(v) : NULL;
				struct group *gr = is_uid ? NULL : getgrnam(v);
				if (!pw && !gr) {
					snprintf(err, errlen, "%s: no such %s '%s'", a, is_uid ? "user" : "group", v);
					return -EINVAL;
				}
				n = pw ? pw->pw_uid : gr->gr_gid;
			}
			if (is_uid)
				p->allow_uid[(*cnt)++] = (uid_t)n;
			else
				p->allow_gid[(*cnt)++] = (gid_t)n;
		} else if (!strcmp(a, "--sim-step-us")) {
			NUM(0, 10000000);
			p->sim_step_ns = n * 1000;
		} else if (!strcmp(a, "--sim-token-us")) {
			NUM(0, 10000000);
			p->sim_token_ns = n * 1000;
		} else if (!strcmp(a, "--sim-vocab")) {
			NUM(2, 1u << 22);
			p->sim_vocab = (uint32_t)n;
		} else if (!strcmp(a, "--wake")) {
			if (!strcmp(v, "auto")) p->wake = RL_RT_WAKE_AUTO;
			else if (!strcmp(v, "futex")) p->wake = RL_RT_WAKE_FUTEX;
			else if (!strcmp(v, "eventfd")) p->wake = RL_RT_WAKE_EVENTFD;
			else {
				snprintf(err, errlen, "--wake must be auto, futex or eventfd, got '%s'", v);
				return -EINVAL;
			}
		} else if (!strcmp(a, "--event-ring") || !strcmp(a, "--request-ring") || !strcmp(a, "--arena-ids")) {
			NUM(2, 1u << 26);
			if (n & (n - 1)) {
				snprintf(err, errlen, "%s must be a power of two, got %s", a, v);
				return -EINVAL;
			}
			if (a[2] == 'e') p->evt_cap = (uint32_t)n;
			else if (a[2] == 'r') p->req_cap = (uint32_t)n;
			else p->arena_ids = (uint32_t)n;
		} else if (!strcmp(a, "--drain-timeout-ms")) {
			NUM(0, 3600000);
			p->drain_timeout_ns = n * 1000000;
		} else if (!strcmp(a, "--max-queue-ms")) {
			NUM(0, 3600000);
			p->max_queue_ns = n * 1000000;
		} else if (!strcmp(a, "--idle-spin-us")) {
			NUM(0, 10000000);
			p->idle_spin_ns = n * 1000;
		} else if (!strcmp(a, "--idle-adapt-ms")) {
			NUM(0, 60000);
			p->idle_adapt_ns = n * 1000000;
		} else if (!strcmp(a, "--kv-events") || !strcmp(a, "--kv-events-topic")) {
			if (!*v) {
				snprintf(err, errlen, "%s needs a value (an endpoint such as tcp://127.0.0.1:5557; a topic)", a);
				return -EINVAL;
			}
			if (a[11])
				p->kv_events_topic = v;
			else
				p->kv_events = v;
		} else {
			snprintf(err, errlen, "unknown option '%s' (see ringlmd --help)", a);
			return -EINVAL;
		}
#undef NUM
	}
	if (optind < argc) {
		snprintf(err, errlen, "unexpected argument '%s' (options start with --; see ringlmd --help)", argv[optind]);
		return -EINVAL;
	}
	if ((spec_k || p->spec_cost > 0) && spec != 1) {
		snprintf(err, errlen, "%s tunes --spec; give --spec ngram or --spec FILE too",
			 spec_k ? "--spec-k" : "--spec-cost");
		return -EINVAL;
	}
	if (spec >= 0)
		p->spec_k = spec ? (spec_k ? spec_k : RL_SPEC_DEFAULT_K) : 0;
	if (p->kv_events_topic && !p->kv_events) {
		snprintf(err, errlen, "--kv-events-topic names --kv-events' messages; give --kv-events ENDPOINT too");
		return -EINVAL;
	}
	if (!p->budget_auto && p->itl_target_ns) {
		snprintf(err, errlen, "--itl-target-us is the automatic budget's target; a fixed --max-batch-tokens N has none "
			 "(drop one of them)");
		return -EINVAL;
	}
	return 0;
}
