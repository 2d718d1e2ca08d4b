/* rl_ipc.h — the OS plumbing under the rings: sealed memfd segments, segment layout, socket
 * paths, fd passing (SCM_RIGHTS), futex wait/wake on shared words. Used by both the runtime
 * and libringlm; nothing here knows about requests or models. */
#ifndef RL_IPC_H
#define RL_IPC_H
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include "ipc/rl_wire.h"

/* Creates a sealed (no grow, no shrink) memfd of size bytes and maps it read-write.
 * read_only_for_others: also seal F_SEAL_FUTURE_WRITE after mapping, so anyone we hand the
 * fd to can only map it read-only while our mapping stays writable. */
int  rl_shm_create(const char *name, size_t size, int read_only_for_others, int *fd, void **map);

/* Geometry of a client segment for the given capacities (powers of two); fills h's layout
 * fields and returns the total size in bytes, or -EINVAL. */
int64_t rl_seg_layout(struct rl_seg_hdr *h, uint32_t req_cap, uint32_t evt_cap, uint32_t arena_ids);
/* Client side: checks a received header against the mapped size; 0 or -EPROTO. */
int  rl_seg_check(const struct rl_seg_hdr *h, size_t mapped);

/* Client side: checks the runtime's attach reply (rc from rl_recv_fds, nfds fds received).
 * 0 when it is an acceptance carrying the 4 fds (observe = 0) or the info fd alone (observe =
 * 1, an RL_ATTACH_OBSERVE request); otherwise the -errno to report (the runtime's status, or
 * -EPROTO for a malformed reply). Always NUL-terminates rep->msg. */
int  rl_attach_rep_check(struct rl_attach_rep *rep, int rc, int nfds, int observe);

/* Socket path for a name: a name with '/' is a path; otherwise
 * $RINGLM_SOCKET_DIR/NAME or /tmp/ringlm-UID/NAME. */
int  rl_sock_path(const char *name, char *out, size_t len);
int  rl_sock_dir(const char *path, char *dir, size_t len);

int  rl_send_fds(int sock, const void *buf, size_t len, const int *fds, int nfds);
/* Receives len bytes and up to maxfds fds (*nfds set); fds are O_CLOEXEC. */
int  rl_recv_fds(int sock, void *buf, size_t len, int *fds, int maxfds, int *nfds);

/* Futexes on shared (non-private) words: work across processes mapping the same memfd. */
int  rl_futex_wake(_Atomic uint32_t *addr, int n);
/* Sleeps while *addr == val, at most timeout_ns (0 = forever). 0 woken/changed, -ETIMEDOUT,
 * -EINTR. */
int  rl_futex_wait(_Atomic uint32_t *addr, uint32_t val, uint64_t timeout_ns);

#endif
