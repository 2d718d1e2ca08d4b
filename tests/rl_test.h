/* rl_test.h — the tiny test harness every tests/test_*.c uses.
 * Each test prints one line: "PASS name", "FAIL name" or "SKIP name: reason"; tests/run.sh
 * adds them up and prints the closing "N passed, N failed, N skipped" line. */
#ifndef RL_TEST_H
#define RL_TEST_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int rl_t_failed_now, rl_t_skipped_now, rl_t_npass, rl_t_nfail, rl_t_nskip;
static char rl_t_skip_why[256];

#define CHECK(cond) do { if (!(cond)) { rl_t_failed_now++; \
	fprintf(stderr, "  check failed %s:%d: %s\n", __FILE__, __LINE__, #cond); } } while (0)
#define CHECKF(cond, ...) do { if (!(cond)) { rl_t_failed_now++; \
	fprintf(stderr, "  check failed %s:%d: %s: ", __FILE__, __LINE__, #cond); \
	fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)
/* Stop the current test early (after a failed CHECK that makes the rest meaningless). */
#define REQUIRE(cond) do { if (!(cond)) { rl_t_failed_now++; \
	fprintf(stderr, "  required %s:%d: %s\n", __FILE__, __LINE__, #cond); return; } } while (0)
#define SKIP(...) do { rl_t_skipped_now = 1; \
	snprintf(rl_t_skip_why, sizeof rl_t_skip_why, __VA_ARGS__); return; } while (0)

/* RL_TEST_ONLY=a,b runs only the tests whose names contain one of the comma-separated parts. */
static inline int rl_t_selected(const char *name)
{
	const char *only = getenv("RL_TEST_ONLY");
	if (!only || !*only)
		return 1;
	char buf[256];
	snprintf(buf, sizeof buf, "%s", only);
	for (char *sv, *p = strtok_r(buf, ",", &sv); p; p = strtok_r(NULL, ",", &sv))
		if (strstr(name, p))
			return 1;
	return 0;
}

#define RUN(fn) do { if (!rl_t_selected(#fn)) break; \
	rl_t_failed_now = 0; rl_t_skipped_now = 0; fflush(stdout); fn(); \
	if (rl_t_failed_now) { rl_t_nfail++; printf("FAIL %s\n", #fn); } \
	else if (rl_t_skipped_now) { rl_t_nskip++; printf("SKIP %s: %s\n", #fn, rl_t_skip_why); } \
	else { rl_t_npass++; printf("PASS %s\n", #fn); } fflush(stdout); } while (0)

#define TEST_MAIN_END() do { printf("%d passed, %d failed, %d skipped\n", \
	rl_t_npass, rl_t_nfail, rl_t_nskip); return rl_t_nfail ? 1 : 0; } while (0)

/* A scratch directory for one test binary's files, in memory (/dev/shm) when it can be:
 * rl_t_tmpdir_make("name") creates it (0 or -1), rl_t_tmp("file") is a path inside it (four
 * rotating buffers, so a call can take a few), rl_t_tmpdir_remove() deletes it all. */
static char rl_t_tmpdir[256];
static inline int rl_t_tmpdir_make(const char *tag)
{
	snprintf(rl_t_tmpdir, sizeof rl_t_tmpdir, "%s/rl_%s_XXXXXX",
		 access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp", tag);
	return mkdtemp(rl_t_tmpdir) ? 0 : -1;
}
static inline const char *rl_t_tmp(const char *name)
{
	static char b[4][512];
	static int k;
	char *p = b[k++ & 3];
	snprintf(p, 512, "%s/%s", rl_t_tmpdir, name);
	return p;
}
static inline void rl_t_tmpdir_remove(void)
{
	char cmd[300];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", rl_t_tmpdir);
	if (system(cmd))
		fprintf(stderr, "could not remove %s\n", rl_t_tmpdir);
}

/* Path of a shared model file ("../shared/models/NAME" relative to the repo root, or
 * $RINGLM_MODELS/NAME); NULL when absent so the test can SKIP. */
#include <unistd.h>
static inline const char *rl_t_model(const char *name)
{
	static char buf[4][1024]; static int k;
	char *b = buf[k++ & 3];
	const char *dir = getenv("RINGLM_MODELS");
	snprintf(b, 1024, "%s/%s", dir ? dir : "../shared/models", name);
	return access(b, R_OK) == 0 ? b : NULL;
}

/* Path of a real model that .ci/models fetched from PyPI into the cache (its sha256 checked:
 * the ".NAME.ok" mark beside it), or NULL so the test can SKIP with RL_T_REAL_WHY. */
#define RL_T_REAL_WHY "not fetched: .ci/models could not reach PyPI (make test runs it)"
static inline const char *rl_t_real_model(const char *name)
{
	static char buf[4][1024]; static int k;
	char *b = buf[k++ & 3], ok[1100];
	const char *cache = getenv("RINGLM_CACHE"), *home = getenv("HOME");
	if (cache)
		snprintf(b, 1024, "%s/models", cache);
	else
		snprintf(b, 1024, "%s/.cache/ringlm/models", home ? home : "/root");
	snprintf(ok, sizeof ok, "%s/.%s.ok", b, name);
	snprintf(b + strlen(b), 1024 - strlen(b), "/%s", name);
	return access(b, R_OK) == 0 && access(ok, R_OK) == 0 ? b : NULL;
}
#endif
