/* rl_rt_conn.c — the runtime's connection plane: the socket and its folder, accepting a
 * connection, the pre-attach hand-shake (bounded in time and per uid, so one user's flood of
 * silent connections cannot starve another), attach (peer credentials against the policy of
 * rl_validate.c, the client's shared segment and eventfds handed over by SCM_RIGHTS), and
 * detach. The data plane (rl_rt.c) calls in from its io_uring completions.
 */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "ipc/rl_clock.h"
#include "runtime/loop/rl_rt_internal.h"
#include "runtime/loop/rl_validate.h"

static void rt_conn_arm_hup(struct rl_rt *rt, uint32_t slot)
{
	struct client *c = &rt->clients[slot];
	struct io_uring_sqe *s = rt_sqe_get(rt);
	io_uring_prep_poll_add(s, c->sock, POLLIN | POLLRDHUP | POLLHUP | POLLERR);
	io_uring_sqe_set_data64(s, UD(UD_HUP, slot, c->gen));
}

void rt_conn_detach(struct rl_rt *rt, uint32_t slot, const char *why)
{
	struct client *c = &rt->clients[slot];
	if (!c->used)
		return;
	LOG(rt, "client %u (pid %d) detached: %s", slot, (int)c->pid, why);
	for (uint32_t r = 0; r < rt->p.max_inflight; r++) {
		if (c->by_rid[r]) {
			rt_cancel_req(rt, c->by_rid[r]);
			c->by_rid[r] = NULL;
		}
	}
	rt_cancel_ud(rt, UD(UD_HUP, slot, c->gen));
	if (c->bell_armed)
		rt_cancel_ud(rt, UD(UD_BELL, slot, c->gen));
	io_uring_submit(&rt->ring);
	munmap(c->seg, c->seg_size);
	close(c->sock);
	close(c->seg_fd);
	close(c->rt_efd);
	close(c->cl_efd);
	c->used = 0;
	rt->live[c->live_i] = rt->live[--rt->n_live];       /* the last takes its place */
	rt->clients[rt->live[c->live_i]].live_i = c->live_i;
	c->gen++;
	c->active = 0;
	c->unpub = c->reserved = 0;
	ST_ADD(detaches, 1);
	ST_ADD(clients, -1);
	if (c->hostile)
		ST_ADD(hostile_clients, 1);
	c->hostile = 0;
	rt_publish_sched_stats(rt);
}

static void refuse(struct rl_rt *rt, int fd, int err, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static struct rl_attach_policy attach_policy(const struct rl_rt *rt)
{
	uint32_t n_used = 0;
	for (uint32_t i = 0; i < rt->p.max_clients; i++)
		n_used += rt->clients[i].used != 0;
	return (struct rl_attach_policy){
		.self_uid = geteuid(), .allow_uid = rt->p.allow_uid, .n_allow_uid = rt->p.n_allow_uid,
		.allow_gid = rt->p.allow_gid, .n_allow_gid = rt->p.n_allow_gid,
		.draining = rt->draining, .n_clients = n_used, .max_clients = rt->p.max_clients,
	};
}

static void refuse(struct rl_rt *rt, int fd, int err, const char *fmt, ...)
{
	struct rl_attach_rep rep = { .magic = RL_WIRE_MAGIC, .version = RL_WIRE_VERSION, .status = err };
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(rep.msg, sizeof rep.msg, fmt, ap);
	va_end(ap);
	rl_send_fds(fd, &rep, sizeof rep, NULL, 0);
	LOG(rt, "refused attach: %s", rep.msg);
	ST_ADD(refused, 1);
	if (err == -EUSERS)
		ST_ADD(refused_full, 1);
	close(fd);
}

/* The attach request arrived on fd: check the peer, build its segment, hand it the fds. */
void rt_conn_attach(struct rl_rt *rt, int fd, const struct rl_attach_req *rq)
{
	struct ucred cr;
	socklen_t cl = sizeof cr;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) < 0)
		return refuse(rt, fd, -EACCES, "cannot read the peer's credentials");
	uint32_t slot = rt->p.max_clients;
	for (uint32_t i = rt->p.max_clients; i-- > 0;)
		if (!rt->clients[i].used)
			slot = i;      /* the lowest free slot */
	struct rl_attach_policy pol = attach_policy(rt);
	char why[sizeof ((struct rl_attach_rep *)0)->msg];
	int err = rl_rt_attach_decide(rq, cr.uid, cr.gid, &pol, why, sizeof why);
	if (err)
		return refuse(rt, fd, err, "%s", why);
	if (rq->flags & RL_ATTACH_OBSERVE) {
		/* the read-only info segment and nothing else; the connection ends here */
		struct rl_attach_rep rep = { .magic = RL_WIRE_MAGIC, .version = RL_WIRE_VERSION, .status = 0,
					     .client_id = UINT32_MAX, .seg_size = 0, .info_size = rt->info_size };
		snprintf(rep.msg, sizeof rep.msg, "observer");
		if (rl_send_fds(fd, &rep, sizeof rep, &rt->info_fd, 1) == 0)
			ST_ADD(observers, 1);
		close(fd);
		return;
	}

	struct client *c = &rt->clients[slot];
	struct rl_seg_hdr h = { .magic = RL_WIRE_MAGIC, .version = RL_WIRE_VERSION, .client_id = slot };
	int64_t size = rl_seg_layout(&h, rt->p.req_cap, rt->p.evt_cap, rt->p.arena_ids);
	h.wake_mode = (rt->futex_ok && !(rq->flags & RL_ATTACH_FALLBACK)) ? RL_WAKE_FUTEX : RL_WAKE_EVENTFD;
	h.max_inflight = rt->p.max_inflight;
	h.max_prompt = rt->max_prompt;
	h.max_new = rt->max_new;
	void *seg;
	int seg_fd;
	err = rl_shm_create("ringlm-client", (size_t)size, 0, &seg_fd, &seg);
	if (err)
		return refuse(rt, fd, err, "cannot create the client segment: %s", strerror(-err));
	c->rt_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	c->cl_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (c->rt_efd < 0 || c->cl_efd < 0) {
		err = -errno;
		if (c->rt_efd >= 0) close(c->rt_efd);
		if (c->cl_efd >= 0) close(c->cl_efd);
		munmap(seg, size);
		close(seg_fd);
		return refuse(rt, fd, err, "cannot create eventfds: %s", strerror(-err));
	}
	memcpy(seg, &h, sizeof h);
	c->seg = seg;
	c->seg_size = (size_t)size;
	c->seg_fd = seg_fd;
	c->sock = fd;
	c->pid = cr.pid;
	c->uid = cr.uid;
	c->ctl = (struct rl_seg_ctl *)(c->seg + h.ctl_off);
	/* a client segment is fresh zeroed memory: rings start at 0 */
	struct rl_ring_hdr *rq_h = (struct rl_ring_hdr *)(c->seg + h.req_off);
	struct rl_ring_hdr *ev_h = (struct rl_ring_hdr *)(c->seg + h.evt_off);
	rl_ring_cons_init(&c->req, rq_h, rq_h + 1, h.req_cap, sizeof(struct rl_req));
	rl_ring_prod_init(&c->evt, ev_h, ev_h + 1, h.evt_cap, sizeof(struct rl_evt));
	c->lp = (struct rl_lp *)(c->seg + h.lp_off);
	c->arena = (const uint32_t *)(c->seg + h.arena_off);
	c->arena_mask = h.arena_ids - 1;
	memset(c->by_rid, 0, rt->p.max_inflight * sizeof *c->by_rid);
	/* touched is left alone: the slot may still be on the publish list from its last owner */
	c->reserved = c->unpub = c->bell_armed = c->hostile = 0;
	c->active = 0;

	struct rl_attach_rep rep = { .magic = RL_WIRE_MAGIC, .version = RL_WIRE_VERSION, .status = 0,
				     .client_id = slot, .seg_size = (uint64_t)size, .info_size = rt->info_size };
	snprintf(rep.msg, sizeof rep.msg, "attached as client %u", slot);
	int fds[4] = { seg_fd, rt->info_fd, c->rt_efd, c->cl_efd };
	err = rl_send_fds(fd, &rep, sizeof rep, fds, 4);
	if (err) {
		munmap(seg, size);
		close(seg_fd);
		close(c->rt_efd);
		close(c->cl_efd);
		close(fd);
		LOG(rt, "attach reply failed: %s", strerror(-err));
		return;
	}
	c->used = 1;
	c->live_i = rt->n_live;
	rt->live[rt->n_live++] = slot;
	rt_conn_arm_hup(rt, slot);
	ST_ADD(attaches, 1);
	ST_ADD(clients, 1);
	LOG(rt, "client %u attached (pid %d uid %u, %s wake-ups)", slot, (int)cr.pid, (unsigned)cr.uid,
	    h.wake_mode == RL_WAKE_FUTEX ? "futex" : "eventfd");
}

void rt_conn_arm_accept(struct rl_rt *rt)
{
	/* still armed while draining: a late client is told -ESHUTDOWN at once instead of
	 * waiting in the listen backlog until the runtime exits */
	if (rt->accept_armed)
		return;
	struct io_uring_sqe *s = rt_sqe_get(rt);
	rt->acc_len = sizeof rt->acc_addr;
	io_uring_prep_accept(s, rt->listen_fd, (struct sockaddr *)&rt->acc_addr, &rt->acc_len, SOCK_CLOEXEC);
	io_uring_sqe_set_data64(s, UD(UD_ACCEPT, 0, 0));
	rt->accept_armed = 1;
}

/* All HS_MAX pre-attach entries wait: cancel the oldest connection of the uid holding the
 * most of them, or of uid's own when it holds as many (see HS_MAX). */
void rt_conn_evict_one(struct rl_rt *rt, uid_t uid)
{
	int n_new = 0, n_max = 0;
	uid_t victim = uid;
	for (int i = 0; i < HS_SLOTS; i++) {
		if (rt->hs[i].used != 1)
			continue;
		int n = 0;
		for (int j = 0; j < HS_SLOTS; j++)
			n += rt->hs[j].used == 1 && rt->hs[j].uid == rt->hs[i].uid;
		if (rt->hs[i].uid == uid)
			n_new = n;
		if (n > n_max) {
			n_max = n;
			victim = rt->hs[i].uid;
		}
	}
	if (n_new >= n_max)
		victim = uid;
	int old = -1;
	for (int i = 0; i < HS_SLOTS; i++)
		if (rt->hs[i].used == 1 && rt->hs[i].uid == victim &&
		    (old < 0 || rt->hs[i].t_ns < rt->hs[old].t_ns))
			old = i;
	if (old < 0)
		return;        /* uid holds none and no other uid holds more: nothing to take */
	rt->hs[old].used = 2;  /* the recv completes with -ECANCELED and closes it */
	rt_cancel_ud(rt, UD(UD_HS, old, 0));
	ST_ADD(dropped_preattach, 1);
	LOG(rt, "pre-attach slots full: dropped a silent connection of uid %u", (unsigned)victim);
}

/* A new connection. Its peer's credentials are checked first, so a uid that may not attach
 * never takes a pre-attach slot; then its attach request is read through io_uring, bounded
 * by a linked timeout so a peer that connects and says nothing soon loses its slot. */
void rt_conn_accepted(struct rl_rt *rt, int fd)
{
	struct ucred cr;
	socklen_t cl = sizeof cr;
	char why[sizeof ((struct rl_attach_rep *)0)->msg];
	struct rl_attach_policy pol = attach_policy(rt);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) < 0) {
		ST_ADD(refused_uid, 1);
		return refuse(rt, fd, -EACCES, "cannot read the peer's credentials");
	}
	if (!rl_rt_peer_allowed(&pol, cr.uid, cr.gid, why, sizeof why)) {
		ST_ADD(refused_uid, 1);
		return refuse(rt, fd, -EACCES, "%s", why);
	}
	int waiting = 0, i = -1;
	for (int j = 0; j < HS_SLOTS; j++) {
		waiting += rt->hs[j].used == 1;
		if (!rt->hs[j].used && i < 0)
			i = j;
	}
	if (waiting >= HS_MAX)
		rt_conn_evict_one(rt, cr.uid);
	if (i < 0) {       /* every entry waits for a cancel to complete: drop the newcomer */
		ST_ADD(dropped_preattach, 1);
		close(fd);
		return;
	}
	rt->hs[i].used = 1;
	rt->hs[i].fd = fd;
	rt->hs[i].uid = cr.uid;
	rt->hs[i].t_ns = rl_now_ns();
	struct io_uring_sqe *s = rt_sqe_get(rt);
	io_uring_prep_recv(s, fd, &rt->hs[i].req, sizeof rt->hs[i].req, MSG_WAITALL);
	io_uring_sqe_set_data64(s, UD(UD_HS, i, 0));
	s->flags |= IOSQE_IO_LINK;
	s = rt_sqe_get(rt);
	io_uring_prep_link_timeout(s, &rt->hs_ts, 0);
	io_uring_sqe_set_data64(s, UD(UD_CANCEL, 0, 0));
}


/* The socket's folder. The runtime never changes the mode of a folder that exists: several
 * daemons (and other programs) may share it. It creates only a missing folder, 0711 (others
 * may pass through to a socket whose own mode and SO_PEERCRED admit them, but not list it).
 * It refuses a folder where another user could replace the socket: writable by others
 * without the sticky bit, or (our own per-user folder) owned by someone else. */
static int check_sock_dir(struct rl_rt *rt, char *err, size_t errlen)
{
	const char *d = rt->sock_dir;
	int own_default = !strchr(rt->p.socket ? rt->p.socket : "", '/');   /* /tmp/ringlm-UID or $RINGLM_SOCKET_DIR */
	struct stat st;
	if (stat(d, &st) < 0) {
		if (errno != ENOENT || !own_default) {
			int e = errno;
			snprintf(err, errlen, "socket folder %s: %s; create it or choose another --socket", d, strerror(e));
			return -e;
		}
		mode_t um = umask(0);  /* the mode exactly (umask is restored at once) */
		int r = mkdir(d, 0711);
		umask(um);
		if ((r < 0 && errno != EEXIST) || stat(d, &st) < 0) {
			int e = errno;
			snprintf(err, errlen, "cannot create socket folder %s: %s; choose another --socket", d, strerror(e));
			return -e;
		}
	}
	if (!S_ISDIR(st.st_mode)) {
		snprintf(err, errlen, "socket folder %s is not a folder; choose another --socket", d);
		return -ENOTDIR;
	}
	if ((st.st_mode & S_IWOTH) && !(st.st_mode & S_ISVTX)) {
		snprintf(err, errlen, "socket folder %s is writable by every user without the sticky bit, so anyone "
			 "could replace the socket; use a folder only you can write (or chmod +t it)", d);
		return -EPERM;
	}
	if (own_default && st.st_uid != geteuid()) {
		snprintf(err, errlen, "socket folder %s belongs to uid %u, not to us (uid %u); remove it or set "
			 "RINGLM_SOCKET_DIR", d, (unsigned)st.st_uid, (unsigned)geteuid());
		return -EACCES;
	}
	if (rt->p.n_allow_uid && !(st.st_mode & S_IXOTH))
		LOG(rt, "warning: socket folder %s is mode %03o, so --allow-uid users cannot reach the socket; "
		    "chmod o+x it or choose another --socket", d, (unsigned)(st.st_mode & 0777));
	else if (rt->p.n_allow_gid && !(st.st_mode & (S_IXOTH | S_IXGRP)))
		LOG(rt, "warning: socket folder %s is mode %03o, so --allow-gid users cannot reach the socket; "
		    "chmod g+x it or choose another --socket", d, (unsigned)(st.st_mode & 0777));
	return 0;
}

int rt_conn_listen(struct rl_rt *rt, char *err, size_t errlen)
{
	int rc = rl_sock_path(rt->p.socket, rt->sock_path, sizeof rt->sock_path);
	if (rc) {
		snprintf(err, errlen, "socket name '%s' is too long for a Unix socket path", rt->p.socket);
		return rc;
	}
	rl_sock_dir(rt->sock_path, rt->sock_dir, sizeof rt->sock_dir);
	if ((rc = check_sock_dir(rt, err, errlen)))
		return rc;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	memcpy(a.sun_path, rt->sock_path, sizeof a.sun_path);   /* same size, NUL-terminated */
	/* a stale socket from a dead runtime is replaced; a live one is not */
	if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
		close(fd);
		snprintf(err, errlen, "a runtime is already serving %s; stop it or choose another --socket", rt->sock_path);
		return -EADDRINUSE;
	}
	unlink(rt->sock_path);
	if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 512) < 0) {
		snprintf(err, errlen, "cannot listen on %s: %s", rt->sock_path, strerror(errno));
		close(fd);
		return -errno;
	}
	/* access is per daemon, on its own socket file (connect needs write permission on it);
	 * SO_PEERCRED at accept is the check that counts, the mode keeps strangers out early */
	mode_t mode = rt->p.n_allow_uid ? 0666 : rt->p.n_allow_gid ? 0660 : 0600;
	if (chmod(rt->sock_path, mode) < 0 ||
	    (rt->p.n_allow_gid && !rt->p.n_allow_uid && chown(rt->sock_path, (uid_t)-1, rt->p.allow_gid[0]) < 0)) {
		snprintf(err, errlen, "cannot set the mode or group of %s: %s", rt->sock_path, strerror(errno));
		close(fd);
		unlink(rt->sock_path);
		return -errno;
	}
	rt->listen_fd = fd;
	return 0;
}
