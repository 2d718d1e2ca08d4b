/* cmd_stats.c — `ringlm stats [--json]`, `ringlm top` (the runtime's live stats from its
 * read-only info segment: attaching as an observer costs the runtime nothing per step) and
 * `ringlm reset-cache`. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <jansson.h>
#include "clients/cli/cli.h"
#include "clients/ringlm.h"

static int connect_to(int argc, char **argv, struct ringlm **c, int *json, int *interval_ms)
{
	struct ringlm_params p = ringlm_default_params();
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			if (!strcmp(argv[0], "stats"))
				printf("usage: ringlm stats [--socket NAME] [--json]\n"
				       "  the runtime's live stats as a table (--json: one JSON object)\n");
			else
				printf("usage: ringlm top [--socket NAME] [--interval-ms N]\n"
				       "  the runtime's live stats, refreshed every N ms (default 1000)\n");
			return 3;              /* help printed: the caller returns 0 */
		}
		if (!strcmp(argv[i], "--json"))
			*json = 1;
		else if (!strcmp(argv[i], "--socket") && i + 1 < argc)
			p.socket = argv[++i];
		else if (!strcmp(argv[i], "--interval-ms") && i + 1 < argc)
			*interval_ms = atoi(argv[++i]);
		else {
			fprintf(stderr, "ringlm %s: unknown option '%s' (options: --socket NAME%s)\n", argv[0], argv[i],
				!strcmp(argv[0], "stats") ? " --json" : " --interval-ms N");
			return 2;
		}
	}
	p.observe = 1;         /* takes no client slot: works when --max-clients are all taken */
	int rc = ringlm_connect(&p, c);
	if (rc) {
		fprintf(stderr, "ringlm %s: %s\n", argv[0], ringlm_last_error()[0] ? ringlm_last_error() : ringlm_strerror(rc));
		return 1;
	}
	return 0;
}

/* Pulls "key":number out of our own flat JSON (absent when it is not there). */
static double jnum_or(const char *js, const char *key, double absent)
{
	char pat[64];
	snprintf(pat, sizeof pat, "\"%s\":", key);
	const char *p = strstr(js, pat);
	return p ? atof(p + strlen(pat)) : absent;
}

static double jnum(const char *js, const char *key) { return jnum_or(js, key, 0); }

double rl_cli_stat(struct ringlm *c, const char *key)
{
	char buf[8192];
	return ringlm_stats_json(c, buf, sizeof buf) < 0 ? -1 : jnum_or(buf, key, -1);
}

static void print_rows(json_t *o, const char *prefix)
{
	const char *k;
	json_t *v;
	json_object_foreach(o, k, v) {
		char name[96];
		snprintf(name, sizeof name, "%s%s", prefix, k);
		if (json_is_object(v)) {
			char pre[100];
			snprintf(pre, sizeof pre, "%s.", name);
			print_rows(v, pre);
		} else if (json_is_integer(v)) {
			printf("%-32s %lld\n", name, (long long)json_integer_value(v));
		} else if (json_is_real(v)) {
			printf("%-32s %.6g\n", name, json_real_value(v));
		} else if (json_is_string(v)) {
			printf("%-32s %s\n", name, json_string_value(v));
		} else if (json_is_boolean(v)) {
			printf("%-32s %s\n", name, json_is_true(v) ? "yes" : "no");
		} else {
			char *t = json_dumps(v, JSON_COMPACT);
			printf("%-32s %s\n", name, t ? t : "?");
			free(t);
		}
	}
}

int rl_cmd_stats(int argc, char **argv)
{
	struct ringlm *c;
	int json = 0, iv = 0, rc = connect_to(argc, argv, &c, &json, &iv);
	if (rc)
		return rc == 3 ? 0 : rc;
	char buf[8192];
	rc = ringlm_stats_json(c, buf, sizeof buf);
	ringlm_close(c);
	if (rc < 0) {
		fprintf(stderr, "ringlm stats: %s\n", ringlm_strerror(rc));
		return 1;
	}
	if (json) {
		puts(buf);
		return 0;
	}
	/* a readable table: one "key  value" row per number, nested objects as parent.key */
	json_error_t je;
	json_t *j = json_loads(buf, 0, &je);
	if (!j) {
		fprintf(stderr, "ringlm stats: the runtime's stats are not JSON (%s); try --json\n", je.text);
		return 1;
	}
	print_rows(j, "");
	json_decref(j);
	return 0;
}

static volatile sig_atomic_t top_stop;
static void on_int(int s) { (void)s; top_stop = 1; }

int rl_cmd_top(int argc, char **argv)
{
	struct ringlm *c;
	int json = 0, iv = 1000, rc = connect_to(argc, argv, &c, &json, &iv);
	if (rc)
		return rc == 3 ? 0 : rc;
	signal(SIGINT, on_int);
	char buf[8192];
	double last_tok = -1, last_steps = 0;
	int tty = isatty(1);
	while (!top_stop) {
		if (ringlm_stats_json(c, buf, sizeof buf) < 0)
			break;
		double tok = jnum(buf, "tokens_out"), steps = jnum(buf, "steps");
		if (tty)
			printf("\033[H\033[2J");
		char model[80] = "?", backend[24] = "?";
		const char *mp = strstr(buf, "\"model\":\""), *bp = strstr(buf, "\"backend\":\"");
		if (mp)
			sscanf(mp + 9, "%79[^\"]", model);
		if (bp)
			sscanf(bp + 11, "%23[^\"]", backend);
		printf("ringlm top — %s on %s, pid %.0f, heartbeat %.0f ms ago   (Ctrl-C quits)\n",
		       model, backend, jnum(buf, "pid"), jnum(buf, "heartbeat_age_ms"));
		printf("clients %4.0f   active %5.0f   queued %5.0f   running %5.0f   prefilling %4.0f   paused %4.0f\n",
		       jnum(buf, "clients"), jnum(buf, "active_requests"), jnum(buf, "queued_requests"),
		       jnum(buf, "running"), jnum(buf, "prefilling"), jnum(buf, "paused"));
		printf("kv blocks %6.0f free / %6.0f   prefix hits %8.0f / %8.0f tokens   preemptions %6.0f\n",
		       jnum(buf, "kv_blocks_free"), jnum(buf, "kv_blocks_total"), jnum(buf, "prefix_hit_tokens"),
		       jnum(buf, "prefix_query_tokens"), jnum(buf, "preemptions"));
		printf("steps %10.0f   tokens out %10.0f   budget %6.0f   last step %6.0f tokens %8.1f us\n",
		       steps, tok, jnum(buf, "budget"), jnum(buf, "last_step_tokens"), jnum(buf, "last_step_us"));
		if (jnum(buf, "spec_k") > 0) {
			const double dr = jnum(buf, "spec_drafted"), ac = jnum(buf, "spec_accepted");
			printf("speculation ngram, drafts up to %.0f: %.0f of %.0f draft tokens accepted (%.0f%%)\n",
			       jnum(buf, "spec_k"), ac, dr, dr > 0 ? 100 * ac / dr : 0.0);
		}
		if (last_tok >= 0)
			printf("rate: %.0f tokens/s, %.0f steps/s\n", (tok - last_tok) * 1000.0 / iv,
			       (steps - last_steps) * 1000.0 / iv);
		double tgt = jnum(buf, "itl_target_us");
		if (tgt > 0 && (jnum(buf, "c0_ns") > 0 || jnum(buf, "calibration_ms") > 0))   /* the automatic budget's step model */
			printf("budget auto, ITL target %.0f us: step %.0f us + %.1f us/sampled row + %.1f us/prefill token"
			       " + %.2f us/1k decode ctx + %.2f us/1k prefill pairs + %.0f us a prompt step; margin %.0f%%,"
			       " calibrated in %.0f ms\n",
			       tgt, jnum(buf, "c0_ns") / 1e3, jnum(buf, "per_sampled_row_ns") / 1e3,
			       jnum(buf, "per_prefill_token_ns") / 1e3, jnum(buf, "per_kctx_decode_ns") / 1e3,
			       jnum(buf, "per_kpairs_prefill_ns") / 1e3, jnum(buf, "prompt_step_ns") / 1e3, jnum(buf, "margin_pct"), jnum(buf, "calibration_ms"));
		if (tgt > 0)
			printf("running at most %.0f at once; overloaded (waited %.0f ms unadmitted) %.0f\n",
			       jnum(buf, "max_running"), jnum(buf, "max_queue_ms"), jnum(buf, "overloaded"));
		printf("constraints: %.0f compiled (%.0f ms on the compiler thread), %.0f masks computed ahead; %.0f "
		       "requests waiting for a compile\n", jnum(buf, "compiles"), jnum(buf, "compile_ms"),
		       jnum(buf, "prewarmed_masks"), jnum(buf, "waiting"));
		printf("rejected: invalid %.0f  limit %.0f  busy %.0f   hostile clients %.0f\n",
		       jnum(buf, "rejected_invalid"), jnum(buf, "rejected_limit"), jnum(buf, "rejected_busy"),
		       jnum(buf, "hostile_clients"));
		printf("attach refused %.0f (uid %.0f, full %.0f)   silent connections dropped %.0f\n",
		       jnum(buf, "refused"), jnum(buf, "refused_uid"), jnum(buf, "refused_full"),
		       jnum(buf, "dropped_preattach"));
		fflush(stdout);
		last_tok = tok;
		last_steps = steps;
		usleep(iv * 1000);
	}
	ringlm_close(c);
	return 0;
}

/* `ringlm reset-cache`: empties the runtime's prefix cache (a client, not an observer: it
 * takes a request id and waits for the answer on it) */
int rl_cmd_reset_cache(int argc, char **argv)
{
	struct ringlm_params p = ringlm_default_params();
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			printf("usage: ringlm reset-cache [--socket NAME]\n"
			       "  empties the runtime's prefix cache (routers following --kv-events hear AllBlocksCleared);\n"
			       "  refused while requests hold cached blocks\n");
			return 0;
		}
		if (!strcmp(argv[i], "--socket") && i + 1 < argc) {
			p.socket = argv[++i];
		} else {
			fprintf(stderr, "ringlm reset-cache: unknown option '%s' (options: --socket NAME)\n", argv[i]);
			return 2;
		}
	}
	struct ringlm *c;
	if (ringlm_connect(&p, &c)) {
		fprintf(stderr, "ringlm reset-cache: %s\n", ringlm_last_error());
		return 1;
	}
	uint32_t id;
	int rc = ringlm_reset_prefix_cache(c, 1, &id);
	struct ringlm_event ev = { 0 };
	while (!rc) {
		int n = ringlm_wait(c, &ev, 1, 10000);
		if (n < 0)
			rc = n;
		else if (!n)
			rc = -ETIMEDOUT;
		else if (ev.id == id && ev.type != RINGLM_EV_TOKEN)
			break;
	}
	ringlm_close(c);
	if (!rc && ev.type == RINGLM_EV_ERROR)
		rc = ev.code;
	if (rc) {
		fprintf(stderr, "ringlm reset-cache: %s%s\n", ringlm_strerror(rc),
			rc == -EBUSY ? " (requests hold cached blocks; retry when they have finished)" : "");
		return 1;
	}
	printf("prefix cache reset\n");
	return 0;
}
