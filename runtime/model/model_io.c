/* model_io.c — file access for the model loaders: opening, exact preads for headers, the
 * half-precision conversions, one-line errors and the tokenizer checks. The bulk weight reads
 * (io_uring, several multi-MiB reads in flight) are model_stream.c's, for the fp32 load
 * (rl_model_plan_load) and the cuda upload alike. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include "tokenizer/rl_bpe.h"
#include "tokenizer/rl_tok.h"
#include "runtime/model/model_internal.h"


void rl_model_err(char *err, size_t errlen, const char *name, const char *fmt, ...)
{
	if (!err || !errlen)
		return;
	int n = snprintf(err, errlen, "%s: ", name ? name : "model");
	if (n < 0 || (size_t)n >= errlen)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err + n, errlen - n, fmt, ap);
	va_end(ap);
	/* one line, whatever a file-supplied string contained */
	for (char *p = err; *p; p++)
		if (*p == '\n' || *p == '\r')
			*p = ' ';
}

const char *rl_model_basename(const char *path)
{
	const char *s = strrchr(path, '/');
	return s && s[1] ? s + 1 : path;
}

int rl_mfile_open(struct rl_mfile *f, const char *path, char *err, size_t errlen)
{
	const char *base = rl_model_basename(path);
	f->name = NULL;
	f->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (f->fd < 0) {
		int e = errno;
		rl_model_err(err, errlen, base, "cannot open: %s", strerror(e));
		return -e;
	}
	struct stat st;
	if (fstat(f->fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		int e = S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
		rl_model_err(err, errlen, base, "not a regular file");
		close(f->fd);
		f->fd = -1;
		return -e;
	}
	/* a copy: a plan keeps the file open after the caller's path buffer is gone */
	if (!(f->name = strdup(base))) {
		rl_model_err(err, errlen, base, "out of memory");
		close(f->fd);
		f->fd = -1;
		return -ENOMEM;
	}
	f->size = (uint64_t)st.st_size;
	return 0;
}

void rl_mfile_close(struct rl_mfile *f)
{
	if (f->fd >= 0)
		close(f->fd);
	f->fd = -1;
	free(f->name);
	f->name = NULL;
}

int rl_mfile_pread(const struct rl_mfile *f, void *buf, size_t len, uint64_t off,
		   char *err, size_t errlen)
{
	if (off > f->size || len > f->size - off) {
		rl_model_err(err, errlen, f->name, "truncated: need %zu bytes at offset %llu, file has %llu",
			     len, (unsigned long long)off, (unsigned long long)f->size);
		return -EINVAL;
	}
	char *p = buf;
	while (len) {
		ssize_t r = pread(f->fd, p, len, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			int e = r < 0 ? errno : EINVAL;
			rl_model_err(err, errlen, f->name, "read at offset %llu failed: %s",
				     (unsigned long long)off, r < 0 ? strerror(e) : "file shrank");
			return -e;
		}
		p += r; len -= r; off += r;
	}
	return 0;
}

int rl_model_vocab_check(const void *blob, size_t size, uint32_t n_vocab, const char *name,
			 char *err, size_t errlen)
{
	const uint8_t *p = blob;
	if (size < 4) {
		rl_model_err(err, errlen, name, "tokenizer too short (%zu bytes)", size);
		return -EINVAL;
	}
	int32_t maxlen = (int32_t)rl_rd32(p);
	if (maxlen <= 0 || maxlen > 65536) {
		rl_model_err(err, errlen, name, "tokenizer max_token_length %d out of range", maxlen);
		return -EINVAL;
	}
	struct rl_spm_trailer tr;
	rl_tok_spm_trailer(blob, size, &tr);
	size -= tr.len;
	size_t off = 4;
	for (uint32_t i = 0; i < n_vocab; i++) {
		if (size - off < 8) {
			rl_model_err(err, errlen, name, "tokenizer ends at token %u of %u", i, n_vocab);
			return -EINVAL;
		}
		float score;
		memcpy(&score, p + off, 4);
		int32_t len = (int32_t)rl_rd32(p + off + 4);
		off += 8;
		if (isnan(score) || len < 0 || len > maxlen || (size_t)len > size - off) {
			rl_model_err(err, errlen, name, "tokenizer token %u: bad %s (length %d, max %d)",
				     i, isnan(score) ? "score" : "length", len, maxlen);
			return -EINVAL;
		}
		off += len;
	}
	if (off != size || (tr.type && tr.n != n_vocab)) {
		rl_model_err(err, errlen, name, "tokenizer has %zu bytes after %u tokens (vocabulary size mismatch?)",
			     size - off, n_vocab);
		return -EINVAL;
	}
	return 0;
}

int rl_model_vocab_no_prefix(void **blob, uint32_t *size)
{
	if (!*blob || *size < 4 || !memcmp(*blob, RL_BPE_MAGIC, 4) || rl_model_vocab_prefixless(*blob, *size))
		return 0;
	struct rl_spm_trailer tr;
	rl_tok_spm_trailer(*blob, *size, &tr);
	if (tr.len) {                  /* a trailer already: its flags gain the bit */
		uint32_t fl = tr.flags | RL_SPM_NO_PREFIX;
		memcpy((uint8_t *)*blob + *size - (tr.type ? 16 : 4), &fl, 4);
		return 0;
	}
	uint8_t *b = realloc(*blob, (size_t)*size + 8);
	if (!b)
		return -ENOMEM;
	const uint32_t fl = RL_SPM_NO_PREFIX;
	memcpy(b + *size, RL_SPM_TRAILER, 4);
	memcpy(b + *size + 4, &fl, 4);
	*blob = b;
	*size += 8;
	return 0;
}

int rl_model_vocab_prefixless(const void *blob, uint32_t size)
{
	struct rl_spm_trailer tr;
	rl_tok_spm_trailer(blob, size, &tr);
	return (tr.flags & RL_SPM_NO_PREFIX) != 0;
}

int rl_model_read_tokenizer(const char *path, uint32_t n_vocab, void **out, uint32_t *out_size,
			    char *err, size_t errlen)
{
	struct rl_mfile f;
	int rc = rl_mfile_open(&f, path, err, errlen);
	if (rc)
		return rc;
	void *blob = NULL;
	if (f.size > (256u << 20)) {
		rl_model_err(err, errlen, f.name, "tokenizer of %llu bytes is implausibly large",
			     (unsigned long long)f.size);
		rc = -EFBIG;
	} else if (!(blob = malloc(f.size ? f.size : 1))) {
		rl_model_err(err, errlen, f.name, "out of memory");
		rc = -ENOMEM;
	} else {
		rc = rl_mfile_pread(&f, blob, f.size, 0, err, errlen);
		if (!rc)
			rc = rl_model_vocab_check(blob, f.size, n_vocab, f.name, err, errlen);
	}
	uint64_t size = f.size;
	rl_mfile_close(&f);
	if (rc) {
		free(blob);
		return rc;
	}
	*out = blob;
	*out_size = (uint32_t)size;
	return 0;
}

int rl_model_load_tokenizer(struct rl_model *m, const char *path, char *err, size_t errlen)
{
	void *blob;
	uint32_t size;
	int rc = rl_model_read_tokenizer(path, m->cfg.vocab_size, &blob, &size, err, errlen);
	if (rc)
		return rc;
	free(m->vocab_blob);
	m->vocab_blob = blob;
	m->vocab_blob_size = size;
	return 0;
}

int rl_model_check_space(const char *path, uint64_t bytes, char *err, size_t errlen)
{
	char dir[4096];
	snprintf(dir, sizeof dir, "%s", path);
	char *slash = strrchr(dir, '/');
	if (slash)
		*(slash == dir ? slash + 1 : slash) = 0;
	struct statvfs vfs;
	if (statvfs(slash ? dir : ".", &vfs) == 0 && (uint64_t)vfs.f_bavail * vfs.f_frsize < bytes) {
		rl_model_err(err, errlen, rl_model_basename(path),
			     "would be %.2f GiB but only %.2f GiB are free there", bytes / 1073741824.0,
			     (double)vfs.f_bavail * vfs.f_frsize / 1073741824.0);
		return -ENOSPC;
	}
	return 0;
}
