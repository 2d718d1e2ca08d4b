/* ipc.c — sealed memfd segments, segment layout, socket paths, SCM_RIGHTS, futexes. */
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include "ipc/rl_ipc.h"

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif

int rl_shm_create(const char *name, size_t size, int read_only_for_others, int *fdp, void **mapp)
{
	int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	int err = 0;
	void *m = MAP_FAILED;
	if (ftruncate(fd, (off_t)size) < 0) {
		err = -errno;
		goto fail;
	}
	m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED) {
		err = -errno;
		goto fail;
	}
	int seals = F_SEAL_SHRINK | F_SEAL_GROW;
	if (read_only_for_others)
		seals |= F_SEAL_FUTURE_WRITE;
	if (fcntl(fd, F_ADD_SEALS, seals | F_SEAL_SEAL) < 0) {
		err = -errno;
		goto fail;
	}
	*fdp = fd;
	*mapp = m;
	return 0;
fail:
	if (m != MAP_FAILED)
		munmap(m, size);
	close(fd);
	return err;
}

static uint32_t align_up(uint32_t v, uint32_t a) { return (v + a - 1) & ~(a - 1); }
static int pow2(uint32_t v) { return v && !(v & (v - 1)); }

int64_t rl_seg_layout(struct rl_seg_hdr *h, uint32_t req_cap, uint32_t evt_cap, uint32_t arena_ids)
{
	if (!pow2(req_cap) || !pow2(evt_cap) || !pow2(arena_ids) || req_cap > (1u << 16) ||
	    evt_cap > (1u << 20) || arena_ids > (1u << 26))
		return -EINVAL;
	uint64_t off = 4096;
	h->ctl_off = (uint32_t)off;
	off += align_up(sizeof(struct rl_seg_ctl), 4096);
	h->req_off = (uint32_t)off;
	h->req_cap = req_cap;
	off += sizeof(struct rl_ring_hdr) + (uint64_t)req_cap * sizeof(struct rl_req);
	off = align_up((uint32_t)off, 4096);
	h->evt_off = (uint32_t)off;
	h->evt_cap = evt_cap;
	off += sizeof(struct rl_ring_hdr) + (uint64_t)evt_cap * sizeof(struct rl_evt);
	off = align_up((uint32_t)off, 4096);
	h->lp_off = (uint32_t)off;
	off += (uint64_t)evt_cap * sizeof(struct rl_lp);
	off = align_up((uint32_t)off, 4096);
	h->arena_off = (uint32_t)off;
	h->arena_ids = arena_ids;
	off += (uint64_t)arena_ids * 4;
	h->seg_size = off;
	return (int64_t)off;
}

int rl_seg_check(const struct rl_seg_hdr *h, size_t mapped)
{
	struct rl_seg_hdr t = *h;
	if (t.magic != RL_WIRE_MAGIC || t.version != RL_WIRE_VERSION || t.seg_size != mapped)
		return -EPROTO;
	int64_t sz = rl_seg_layout(&t, h->req_cap, h->evt_cap, h->arena_ids);
	if (sz < 0 || (uint64_t)sz != mapped || t.ctl_off != h->ctl_off || t.req_off != h->req_off ||
	    t.evt_off != h->evt_off || t.lp_off != h->lp_off || t.arena_off != h->arena_off || !h->max_inflight)
		return -EPROTO;
	return 0;
}

int rl_attach_rep_check(struct rl_attach_rep *rep, int rc, int nfds, int observe)
{
	rep->msg[sizeof rep->msg - 1] = 0;
	if (rc)
		return rc;
	if (rep->magic != RL_WIRE_MAGIC || rep->version != RL_WIRE_VERSION)
		return -EPROTO;
	if (rep->status > 0 || rep->status < -4095)
		return -EPROTO;          /* not a -errno */
	if (rep->status)
		return rep->status;
	if (rep->info_size < sizeof(struct rl_info) || rep->info_size > (1ull << 32))
		return -EPROTO;
	if (observe)
		return nfds == 1 && rep->seg_size == 0 ? 0 : -EPROTO;
	if (nfds != 4 || rep->seg_size < sizeof(struct rl_seg_hdr) || rep->seg_size > (1ull << 40))
		return -EPROTO;
	return 0;
}

int rl_sock_path(const char *name, char *out, size_t len)
{
	if (!name || !*name)
		name = "default";
	int n;
	if (strchr(name, '/'))
		n = snprintf(out, len, "%s", name);
	else if (getenv("RINGLM_SOCKET_DIR"))
		n = snprintf(out, len, "%s/%s", getenv("RINGLM_SOCKET_DIR"), name);
	else
		n = snprintf(out, len, "/tmp/ringlm-%u/%s", (unsigned)getuid(), name);
	/* a socket address holds sizeof sun_path bytes including the NUL */
	return n < 0 || (size_t)n >= len || (size_t)n >= sizeof(((struct sockaddr_un *)0)->sun_path) ? -ENAMETOOLONG : 0;
}

int rl_sock_dir(const char *path, char *dir, size_t len)
{
	const char *slash = strrchr(path, '/');
	if (!slash || (size_t)(slash - path) >= len)
		return -EINVAL;
	memcpy(dir, path, slash - path);
	dir[slash - path] = 0;
	if (slash == path)
		strcpy(dir, "/");
	return 0;
}

int rl_send_fds(int sock, const void *buf, size_t len, const int *fds, int nfds)
{
	union { char b[CMSG_SPACE(8 * sizeof(int))]; struct cmsghdr align; } u;
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	if (nfds > 8)
		return -EINVAL;
	if (nfds > 0) {
		memset(&u, 0, sizeof u);
		mh.msg_control = u.b;
		mh.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
		memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
	}
	ssize_t n = sendmsg(sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
	if (n < 0)
		return -errno;
	return (size_t)n == len ? 0 : -EIO;
}

int rl_recv_fds(int sock, void *buf, size_t len, int *fds, int maxfds, int *nfds)
{
	union { char b[CMSG_SPACE(8 * sizeof(int))]; struct cmsghdr align; } u;
	struct iovec iov = { .iov_base = buf, .iov_len = len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b,
			     .msg_controllen = sizeof u.b };
	*nfds = 0;
	ssize_t n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC | MSG_WAITALL);
	if (n < 0)
		return -errno;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		int k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		int got[8];
		memcpy(got, CMSG_DATA(c), (k > 8 ? 8 : k) * sizeof(int));
		for (int i = 0; i < k && i < 8; i++) {
			if (*nfds < maxfds)
				fds[(*nfds)++] = got[i];
			else
				close(got[i]);
		}
	}
	if (n == 0)
		return -ECONNRESET;
	return (size_t)n == len ? 0 : -EPROTO;
}

int rl_futex_wake(_Atomic uint32_t *addr, int n)
{
	long r = syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE, n, NULL, NULL, 0);
	return r < 0 ? -errno : (int)r;
}

int rl_futex_wait(_Atomic uint32_t *addr, uint32_t val, uint64_t timeout_ns)
{
	struct timespec ts = { .tv_sec = timeout_ns / 1000000000ull, .tv_nsec = timeout_ns % 1000000000ull };
	long r = syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT, val, timeout_ns ? &ts : NULL, NULL, 0);
	if (r < 0 && errno != EAGAIN)
		return -errno;
	return 0;
}
