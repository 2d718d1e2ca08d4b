/* bench_schemas.c — `ringlm bench schemas DIR`: the JSON Schema compiler (constrain/) against a
 * schema corpus in the JSON-Schema-Test-Suite's layout (files of [{description, schema, tests:
 * [{description, data, valid}]}]; bench/schema_suite.sh fetches the official suite, pinned),
 * or one such group per file (MaskBench's data/ of JSONSchemaBench's real-world schemas), or one
 * bare schema per file (JSONSchemaBench's data/SET/).
 *
 * Per schema, three outcomes: compiled; refused (-EINVAL with a reason: what it does not
 * enforce, by name, never ignored; or -E2BIG: too large, said so); or failed (any other error, none given, or "not JSON" for
 * the corpus' valid JSON: a defect). Per compiled schema, two checks whose verdict comes from elsewhere:
 *   - soundness against the suite's own labels: each test instance written as compact JSON is
 *     fed to the automaton; an instance the suite calls invalid must not be accepted. (A valid
 *     instance may be rejected: the automaton admits one spelling, compact with properties in
 *     the schema's order, so only acceptances are evidence.)
 *   - generation: --walks random byte walks through the automaton to an accepting state, each
 *     written out for python's `jsonschema` to validate (bench/schema_suite_check.py): every
 *     finished answer must validate.
 * Writes one JSON object per schema to --out FILE (default bench/out/schemas.jsonl), prints the
 * per-file counts. Schemas compile as the runtime compiles them (RL_CONS_NO_EXTRA_KEYS) over a
 * vocabulary of the 256 bytes. Exit 0 unless the corpus cannot be read. */
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench/bench_util.h"
#include "clients/cli/cli.h"
#include "constrain/rl_cons.h"
#include "ipc/rl_clock.h"

#define WALK_BYTES 48                  /* after this many bytes a walk heads for the nearest end */
#define WALK_CAP (1 << 16)          /* bytes of one answer (minItems 600 of objects: ~20 KB) */

static uint64_t rng_next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* One random accepting string, or 0 bytes written when the walk got stuck (cannot happen for a
 * pruned automaton; counted if it does). */
static size_t walk(struct rl_cons *c, uint64_t *rng, char *out, size_t cap)
{
	uint32_t st = rl_cons_start(c);
	size_t n = 0;
	while (n + 1 < cap) {
		if (rl_cons_accepting(c, st) && (!rl_cons_can_continue(c, st) || n >= WALK_BYTES || rng_next(rng) % 8 == 0))
			return n;
		int cand[256], nc = 0, best = -1;
		uint32_t bestd = UINT32_MAX;
		for (int b = 0; b < 256; b++) {
			uint8_t byte = (uint8_t)b;
			uint32_t nx = rl_cons_feed(c, st, &byte, 1);
			if (nx == RL_CONS_DEAD)
				continue;
			cand[nc++] = b;
			const uint32_t dn = rl_cons_dist(c, nx);
			if (dn < bestd) {
				bestd = dn;
				best = b;
			}
		}
		if (!nc)
			return 0;
		int b = n >= WALK_BYTES ? best : cand[rng_next(rng) % (uint64_t)nc];
		uint8_t byte = (uint8_t)b;
		st = rl_cons_feed(c, st, &byte, 1);
		out[n++] = (char)b;
	}
	return 0;
}

struct tally {
	size_t schemas, compiled, refused, failed, instances_invalid, unsound, walks, stuck;
};

static void one_file(const char *dir, const char *name, const struct rl_cons_vocab *v, int walks, FILE *out,
		     struct tally *tot)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	json_error_t je;
	json_t *groups = json_load_file(path, JSON_ALLOW_NUL, &je);
	if (json_is_object(groups) && !(json_object_get(groups, "schema") && json_object_get(groups, "tests"))) {
		/* JSONSchemaBench's layout: the file is the schema */
		json_t *g = json_object();
		json_object_set_new(g, "schema", groups);
		groups = g;
	}
	if (json_is_object(groups)) {          /* MaskBench's layout: one group per file */
		json_t *a = json_array();
		json_array_append_new(a, groups);
		groups = a;
	}
	if (!json_is_array(groups)) {
		fprintf(stderr, "ringlm bench schemas: %s: line %d: %s (skipped)\n", path, je.line, je.text);
		json_decref(groups);
		return;
	}
	struct tally t = { 0 };
	size_t gi;
	json_t *g;
	uint64_t rng = 0x9e3779b97f4a7c15ull ^ (uint64_t)strlen(name);
	json_array_foreach(groups, gi, g) {
		json_t *schema = json_object_get(g, "schema");
		if (!schema)
			continue;
		char *text = json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY | JSON_PRESERVE_ORDER);
		if (!text)
			continue;
		t.schemas++;
		const struct rl_cons_opts opts = { .flags = RL_CONS_NO_EXTRA_KEYS };
		struct rl_cons *c = NULL;
		char err[512] = "";
		uint64_t t0 = rl_now_ns();
		int rc = rl_cons_compile_schema(v, text, strlen(text), &opts, &c, err, sizeof err);
		double ms = (double)(rl_now_ns() - t0) / 1e6;
		json_t *rec = json_pack("{s:s, s:s, s:s}", "file", name, "group",
					json_string_value(json_object_get(g, "description")) ?: "", "schema", text);
		if (rc) {
			/* refused: the compiler said what it will not take, by name (too_large: by size);
			 * failed: anything else */
			int named = (rc == -EINVAL || rc == -E2BIG) && err[0] && !strstr(err, "is not JSON");
			named ? t.refused++ : t.failed++;
			json_object_set_new(rec, "status", json_string(!named ? "failed" : rc == -E2BIG ? "too_large" : "refused"));
			json_object_set_new(rec, "reason", json_string(err));
		} else {
			t.compiled++;
			json_object_set_new(rec, "status", json_string("compiled"));
			json_object_set_new(rec, "compile_ms", json_real(ms));
			json_object_set_new(rec, "states", json_integer(rl_cons_n_states(c)));
			json_t *unsound = json_array(), *gen = json_array();
			size_t ti;
			json_t *tc;
			json_array_foreach(json_object_get(g, "tests"), ti, tc) {
				if (json_is_true(json_object_get(tc, "valid")))
					continue;
				char *inst = json_dumps(json_object_get(tc, "data"), JSON_COMPACT | JSON_ENCODE_ANY | JSON_PRESERVE_ORDER);
				if (!inst)
					continue;
				t.instances_invalid++;
				uint32_t st = rl_cons_feed(c, rl_cons_start(c), inst, strlen(inst));
				if (st != RL_CONS_DEAD && rl_cons_accepting(c, st)) {
					t.unsound++;
					json_array_append_new(unsound, json_string(inst));
				}
				free(inst);
			}
			static char buf[WALK_CAP];
			for (int w = 0; w < walks; w++) {
				size_t n = walk(c, &rng, buf, sizeof buf);
				t.walks++;
				if (!n && !rl_cons_accepting(c, rl_cons_start(c))) {
					t.stuck++;
					continue;
				}
				/* bytes as latin-1 code points would hide bad UTF-8: the checker gets them hex */
				static char hex[2 * WALK_CAP + 1];
				for (size_t i = 0; i < n; i++)
					snprintf(hex + 2 * i, 3, "%02x", (uint8_t)buf[i]);
				hex[2 * n] = 0;
				json_array_append_new(gen, json_string(hex));
			}
			json_object_set_new(rec, "accepted_invalid", unsound);
			json_object_set_new(rec, "generated_hex", gen);
			rl_cons_destroy(c);
		}
		char *line = json_dumps(rec, JSON_COMPACT);
		if (line)
			fprintf(out, "%s\n", line);
		free(line);
		json_decref(rec);
		free(text);
	}
	json_decref(groups);
	printf("%-34s %7zu %8zu %7zu %6zu %9zu %7zu\n", name, t.schemas, t.compiled, t.refused, t.failed,
	       t.instances_invalid, t.unsound);
	tot->schemas += t.schemas;
	tot->compiled += t.compiled;
	tot->refused += t.refused;
	tot->failed += t.failed;
	tot->instances_invalid += t.instances_invalid;
	tot->unsound += t.unsound;
	tot->walks += t.walks;
	tot->stuck += t.stuck;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int rl_cmd_bench_schemas(int argc, char **argv)
{
	const char *dir = NULL, *outp = NULL;
	int walks = 8;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--walks") && i + 1 < argc)
			walks = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--out") && i + 1 < argc)
			outp = argv[++i];
		else if (argv[i][0] != '-' && !dir)
			dir = argv[i];
		else {
			fprintf(stderr, "ringlm bench schemas: unknown argument '%s' (usage: ringlm bench schemas DIR [--walks N] [--out FILE.jsonl])\n", argv[i]);
			return 2;
		}
	}
	if (!dir || walks < 0 || walks > 1000) {
		fprintf(stderr, "ringlm bench schemas: give the folder of a JSON-Schema-Test-Suite draft (bench/schema_suite.sh fetches one) and --walks 0..1000\n");
		return 2;
	}
	DIR *d = opendir(dir);
	if (!d) {
		fprintf(stderr, "ringlm bench schemas: %s: %s\n", dir, strerror(errno));
		return 1;
	}
	char **names = NULL;
	size_t nn = 0, cap = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		size_t l = strlen(e->d_name);
		if (l <= 5 || strcmp(e->d_name + l - 5, ".json"))
			continue;
		if (nn == cap) {
			char **nw = realloc(names, (cap = cap ? 2 * cap : 256) * sizeof *names);
			if (!nw)
				break;
			names = nw;
		}
		if (!(names[nn] = strdup(e->d_name)))
			break;
		nn++;
	}
	closedir(d);
	qsort(names, nn, sizeof *names, by_name);
	static char bytes[256];
	const char *tok[256];
	uint32_t len[256];
	for (int i = 0; i < 256; i++) {
		bytes[i] = (char)i;
		tok[i] = &bytes[i];
		len[i] = 1;
	}
	struct rl_cons_vocab *v = NULL;
	if (rl_cons_vocab_create(256, tok, len, NULL, NULL, 0, &v)) {
		fprintf(stderr, "ringlm bench schemas: out of memory\n");
		return 1;
	}
	if (!outp) {
		rl_bench_outdir();
		outp = "bench/out/schemas.jsonl";
	}
	FILE *out = fopen(outp, "w");
	if (!out) {
		fprintf(stderr, "ringlm bench schemas: %s: %s\n", outp, strerror(errno));
		rl_cons_vocab_destroy(v);
		return 1;
	}
	printf("%-34s %7s %8s %7s %6s %9s %7s\n", "file", "schemas", "compiled", "refused", "failed", "invalid-i", "unsound");
	struct tally tot = { 0 };
	for (size_t i = 0; i < nn; i++) {
		one_file(dir, names[i], v, walks, out, &tot);
		free(names[i]);
	}
	free(names);
	fclose(out);
	printf("%-34s %7zu %8zu %7zu %6zu %9zu %7zu\n", "all", tot.schemas, tot.compiled, tot.refused, tot.failed,
	       tot.instances_invalid, tot.unsound);
	printf("walks %zu (stuck %zu); generated answers in %s for bench/schema_suite_check.py\n", tot.walks, tot.stuck, outp);
	rl_cons_vocab_destroy(v);
	return 0;
}
