/* fuzz_common.h — shared by the libFuzzer harnesses in tests/fuzz/: a per-process scratch
 * directory (on /dev/shm when it exists, so file-based loaders cost no disk I/O) and a
 * helper that writes the fuzz input to a file in it. Built only by `make fuzz` (clang). */
#ifndef RL_FUZZ_COMMON_H
#define RL_FUZZ_COMMON_H
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A property of the code under test was violated: crash so libFuzzer keeps the input. */
#define FUZZ_ASSERT(c) do { if (!(c)) { fprintf(stderr, "fuzz assertion failed: %s\n", #c); __builtin_trap(); } } while (0)

static inline const char *fuzz_dir(void)
{
	static char dir[64];
	if (!dir[0]) {
		snprintf(dir, sizeof dir, "%s/rlfuzz-XXXXXX", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
		if (!mkdtemp(dir))
			abort();
	}
	return dir;
}

/* Writes len bytes to DIR/name (replacing it) and returns the path (static buffer). */
static inline const char *fuzz_file(const char *name, const uint8_t *data, size_t len)
{
	static char path[128];
	snprintf(path, sizeof path, "%s/%s", fuzz_dir(), name);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0 || (len && write(fd, data, len) != (ssize_t)len))
		abort();
	close(fd);
	return path;
}
#endif
