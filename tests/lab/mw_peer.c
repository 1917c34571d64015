/* mw_peer: memory windows and SEND with Invalidate between two RDMA stacks, one program
 * for both sides (rdma-core has no example of either). Written for uroce's lab
 * (tests/lab/interop.sh, cases *-c-mw-*): built on the host against Debian's libibverbs,
 * run on the host on uroce (uroce exec) and in a lab guest on kernel rxe (the binary is
 * shared into the guest with RXELAB_SHARE). MIT OR Apache-2.0, like the rest of uroce.
 *
 *   mw_peer -t [-d DEV] [-g GIDX] [-p PORT]          the target: owns the region and its
 *                                                     windows, receives the SEND with
 *                                                     Invalidate
 *   mw_peer -i HOST [-d DEV] [-g GIDX] [-p PORT]     the initiator: WRITE / READ through
 *                                                     the windows, SEND with Invalidate
 *
 * Three RC QP pairs (an access error moves a QP to ERR, so each error case has its own),
 * connected with the GIDs, QPNs and PSNs exchanged over TCP. The checks, IBTA vol. 1
 * §10.6.7 (windows) and §9.4.1.1 / §10.6.7.2.3 (invalidation):
 *   1. the target binds a type 1 window (ibv_bind_mw, QP 1) over 4096 bytes at offset
 *      4096 of a region with IBV_ACCESS_MW_BIND, and a type 2 window (IBV_WR_BIND_MW,
 *      QP 2, its key byte chosen) over 4096 bytes at offset 8192;
 *   2. the initiator WRITEs through both and READs back through type 1: the bytes land
 *      inside the windows, and read back the same;
 *   3. the initiator's SEND with Invalidate of the type 2 key: the target's receive
 *      completion says IBV_WC_WITH_INV with that key; a WRITE through it afterwards is a
 *      remote access error;
 *   4. a WRITE through the type 1 key outside its window (but inside the region) is a
 *      remote access error, and the bytes there stay;
 *   5. after ibv_dealloc_mw of the type 1 window its key is a remote access error.
 * Each check prints "mw_peer: CHECK ok" or "mw_peer: CHECK FAILED ...". A failure where the
 * target is kernel rxe and rxe 6.1 is known to depart from IBTA (4: it lets the WRITE
 * through; 3: its receive completion lacks IBV_WC_WITH_INV) prints "rxe-deviation"
 * instead and does not fail. Ends with "mw_peer: ok" and status 0, or status 1. */

#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define NQP 3
#define BUF 16384
#define WIN 4096

static int failures;

static void die(const char *what)
{
	fprintf(stderr, "mw_peer: %s failed: %s\n", what, strerror(errno));
	exit(1);
}

/* One check's verdict; `rxe_known` when rxe 6.1 is known to fail it as target. */
static void verdict(const char *check, int ok, int rxe_known, const char *detail)
{
	if (ok)
		printf("mw_peer: %s ok\n", check);
	else if (rxe_known)
		printf("mw_peer: %s rxe-deviation (%s)\n", check, detail);
	else {
		printf("mw_peer: %s FAILED (%s)\n", check, detail);
		failures++;
	}
	fflush(stdout);
}

struct side {
	uint8_t gid[16];
	uint32_t qpn[NQP];
	uint32_t psn[NQP];
	char dev[32];
};

struct windows {
	uint64_t addr1, addr2;
	uint32_t rkey1, rkey2;
};

static void xfer(int fd, void *p, size_t n, int out)
{
	char *c = p;
	while (n) {
		ssize_t r = out ? write(fd, c, n) : read(fd, c, n);
		if (r <= 0)
			die(out ? "write to the peer" : "read from the peer");
		c += r;
		n -= (size_t)r;
	}
}

/* A one-byte step token both ways: the sides proceed in lock step. */
static void sync_step(int fd, char tag)
{
	char c = tag;
	xfer(fd, &c, 1, 1);
	xfer(fd, &c, 1, 0);
	if (c != tag) {
		fprintf(stderr, "mw_peer: out of step (%c, peer %c)\n", tag, c);
		exit(1);
	}
}

static struct ibv_wc wait_wc(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	long spins = 0;
	int n;
	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0) {
		if (++spins > 2000000000L) {
			fprintf(stderr, "mw_peer: no completion\n");
			exit(1);
		}
	}
	if (n < 0)
		die("ibv_poll_cq");
	return wc;
}

static void to_rts(struct ibv_qp *qp, const struct side *peer, int i, uint32_t my_psn,
		   int gidx)
{
	struct ibv_qp_attr a;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				      IBV_QP_ACCESS_FLAGS))
		die("modify_qp INIT");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = peer->qpn[i];
	a.rq_psn = peer->psn[i];
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.port_num = 1;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.grh.sgid_index = (uint8_t)gidx;
	memcpy(a.ah_attr.grh.dgid.raw, peer->gid, 16);
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
				      IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				      IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		die("modify_qp RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = my_psn;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				      IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
				      IBV_QP_MAX_QP_RD_ATOMIC))
		die("modify_qp RTS");
}

static int tcp(const char *host, const char *port)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE }, *ai;
	int fd, one = 1;

	if (getaddrinfo(host, port, &hints, &ai))
		die("getaddrinfo");
	fd = socket(ai->ai_family, SOCK_STREAM, 0);
	if (fd < 0)
		die("socket");
	if (host) {
		for (int i = 0; connect(fd, ai->ai_addr, ai->ai_addrlen); i++) {
			if (i > 300)
				die("connect");
			usleep(100000); /* the target is not listening yet */
		}
	} else {
		int lfd = fd;
		setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(lfd, ai->ai_addr, ai->ai_addrlen) || listen(lfd, 1))
			die("bind/listen");
		fd = accept(lfd, NULL, NULL);
		if (fd < 0)
			die("accept");
		close(lfd);
	}
	freeaddrinfo(ai);
	return fd;
}

static int write_wr(struct ibv_qp *qp, struct ibv_mr *mr, void *src, uint32_t len,
		    uint64_t raddr, uint32_t rkey, enum ibv_wr_opcode op)
{
	struct ibv_sge sge = { (uintptr_t)src, len, mr->lkey };
	struct ibv_send_wr wr = { .wr_id = op, .sg_list = &sge, .num_sge = 1,
				  .opcode = op, .send_flags = IBV_SEND_SIGNALED }, *bad;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	return ibv_post_send(qp, &wr, &bad);
}

int main(int argc, char **argv)
{
	const char *devname = NULL, *host = NULL, *port = "18650";
	int target = 0, gidx = 0, opt, fd, rxe_target;
	struct ibv_device **list;
	struct ibv_context *ctx = NULL;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp[NQP];
	struct ibv_mr *mr;
	struct side me, peer;
	struct windows w;
	char *buf;
	char detail[160];

	while ((opt = getopt(argc, argv, "ti:d:g:p:")) != -1) {
		switch (opt) {
		case 't': target = 1; break;
		case 'i': host = optarg; break;
		case 'd': devname = optarg; break;
		case 'g': gidx = atoi(optarg); break;
		case 'p': port = optarg; break;
		default:
			fprintf(stderr, "usage: mw_peer -t | -i HOST [-d DEV] [-g GIDX] [-p PORT]\n");
			return 2;
		}
	}
	if (target == !!host) {
		fprintf(stderr, "mw_peer: give -t (target) or -i HOST (initiator)\n");
		return 2;
	}
	list = ibv_get_device_list(NULL);
	if (!list || !list[0])
		die("ibv_get_device_list");
	for (int i = 0; list[i]; i++)
		if (!devname || !strcmp(ibv_get_device_name(list[i]), devname))
			if (!ctx)
				ctx = ibv_open_device(list[i]);
	if (!ctx)
		die("ibv_open_device");
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	buf = aligned_alloc(4096, BUF);
	if (!pd || !cq || !buf)
		die("alloc");
	memset(buf, 0, BUF);
	mr = ibv_reg_mr(pd, buf, BUF,
			IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				(target ? IBV_ACCESS_MW_BIND : 0));
	if (!mr)
		die("ibv_reg_mr");
	memset(&me, 0, sizeof(me));
	snprintf(me.dev, sizeof(me.dev), "%s", ibv_get_device_name(ctx->device));
	if (ibv_query_gid(ctx, 1, gidx, (union ibv_gid *)me.gid))
		die("ibv_query_gid");
	srand48(getpid());
	for (int i = 0; i < NQP; i++) {
		struct ibv_qp_init_attr ia = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
					       .cap = { 16, 16, 1, 1, 0 } };
		qp[i] = ibv_create_qp(pd, &ia);
		if (!qp[i])
			die("ibv_create_qp");
		me.qpn[i] = qp[i]->qp_num;
		me.psn[i] = (uint32_t)lrand48() & 0xffffff;
	}
	fd = tcp(host, port);
	xfer(fd, &me, sizeof(me), 1);
	xfer(fd, &peer, sizeof(peer), 0);
	for (int i = 0; i < NQP; i++)
		to_rts(qp[i], &peer, i, me.psn[i], gidx);
	rxe_target = !strncmp(target ? me.dev : peer.dev, "rxe", 3);
	printf("mw_peer: %s on %s, peer on %s\n", target ? "target" : "initiator", me.dev,
	       peer.dev);

	if (target) {
		struct ibv_mw *mw1 = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
		struct ibv_mw *mw2 = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
		struct ibv_mw_bind mb = { .wr_id = 1, .send_flags = IBV_SEND_SIGNALED };
		struct ibv_send_wr bw = { .wr_id = 2, .opcode = IBV_WR_BIND_MW,
					  .send_flags = IBV_SEND_SIGNALED }, *bad;
		struct ibv_sge rs = { (uintptr_t)buf + 12288, 64, mr->lkey };
		struct ibv_recv_wr rw = { .wr_id = 3, .sg_list = &rs, .num_sge = 1 }, *rbad;
		struct ibv_wc wc;
		char expect[WIN];

		if (!mw1 || !mw2)
			die("ibv_alloc_mw");
		mb.bind_info.mr = mr;
		mb.bind_info.addr = (uintptr_t)buf + 4096;
		mb.bind_info.length = WIN;
		mb.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
		if (ibv_bind_mw(qp[0], mw1, &mb))
			die("ibv_bind_mw");
		wc = wait_wc(cq);
		snprintf(detail, sizeof(detail), "%s, opcode %d", ibv_wc_status_str(wc.status),
			 wc.opcode);
		verdict("bind-type1", wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW,
			0, detail);
		bw.bind_mw.mw = mw2;
		bw.bind_mw.rkey = ibv_inc_rkey(mw2->rkey);
		bw.bind_mw.bind_info = mb.bind_info;
		bw.bind_mw.bind_info.addr = (uintptr_t)buf + 8192;
		if (ibv_post_send(qp[1], &bw, &bad))
			die("post IBV_WR_BIND_MW");
		wc = wait_wc(cq);
		snprintf(detail, sizeof(detail), "%s, opcode %d", ibv_wc_status_str(wc.status),
			 wc.opcode);
		verdict("bind-type2", wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW,
			0, detail);
		if (ibv_post_recv(qp[1], &rw, &rbad))
			die("ibv_post_recv");
		w.addr1 = (uintptr_t)buf + 4096;
		w.rkey1 = mw1->rkey;
		w.addr2 = (uintptr_t)buf + 8192;
		w.rkey2 = bw.bind_mw.rkey;
		xfer(fd, &w, sizeof(w), 1);
		sync_step(fd, 'W'); /* the initiator wrote and read */
		memset(expect, 'A', WIN);
		verdict("write-through-type1-lands", !memcmp(buf + 4096, expect, WIN), 0,
			"the bytes differ");
		memset(expect, 'B', WIN);
		verdict("write-through-type2-lands", !memcmp(buf + 8192, expect, WIN), 0,
			"the bytes differ");
		sync_step(fd, 'I'); /* the initiator sent with invalidate */
		wc = wait_wc(cq);
		snprintf(detail, sizeof(detail), "%s, wc_flags %#x, invalidated_rkey %#x, want %#x",
			 ibv_wc_status_str(wc.status), wc.wc_flags, wc.invalidated_rkey, w.rkey2);
		verdict("recv-send-with-inv", wc.status == IBV_WC_SUCCESS &&
			(wc.wc_flags & IBV_WC_WITH_INV) && wc.invalidated_rkey == w.rkey2,
			rxe_target, detail);
		sync_step(fd, 'V'); /* the initiator wrote through the invalidated key */
		sync_step(fd, 'O'); /* ... and outside window 1 */
		verdict("outside-type1-untouched", buf[8192] == 'B' && buf[8192 + 63] == 'B',
			rxe_target, "the WRITE outside window 1 changed bytes");
		if (ibv_dealloc_mw(mw1))
			die("ibv_dealloc_mw");
		sync_step(fd, 'D');
		sync_step(fd, 'E'); /* the initiator wrote through the deallocated key */
		ibv_dealloc_mw(mw2);
	} else {
		struct ibv_wc wc;
		char *src = buf, *back = buf + 8192;
		struct ibv_sge sge = { (uintptr_t)buf, 8, mr->lkey };
		struct ibv_send_wr iw = { .wr_id = 9, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_SEND_WITH_INV,
					  .send_flags = IBV_SEND_SIGNALED }, *bad;

		xfer(fd, &w, sizeof(w), 0);
		memset(src, 'A', WIN);
		if (write_wr(qp[0], mr, src, WIN, w.addr1, w.rkey1, IBV_WR_RDMA_WRITE))
			die("post WRITE");
		wc = wait_wc(cq);
		verdict("write-through-type1", wc.status == IBV_WC_SUCCESS, 0,
			ibv_wc_status_str(wc.status));
		if (write_wr(qp[0], mr, back, WIN, w.addr1, w.rkey1, IBV_WR_RDMA_READ))
			die("post READ");
		wc = wait_wc(cq);
		verdict("read-through-type1", wc.status == IBV_WC_SUCCESS &&
			!memcmp(src, back, WIN), 0, ibv_wc_status_str(wc.status));
		memset(src, 'B', WIN);
		if (write_wr(qp[1], mr, src, WIN, w.addr2, w.rkey2, IBV_WR_RDMA_WRITE))
			die("post WRITE");
		wc = wait_wc(cq);
		verdict("write-through-type2", wc.status == IBV_WC_SUCCESS, 0,
			ibv_wc_status_str(wc.status));
		sync_step(fd, 'W');
		iw.invalidate_rkey = w.rkey2;
		if (ibv_post_send(qp[1], &iw, &bad))
			die("post SEND_WITH_INV");
		wc = wait_wc(cq);
		verdict("send-with-inv", wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND,
			0, ibv_wc_status_str(wc.status));
		sync_step(fd, 'I');
		if (write_wr(qp[1], mr, src, 64, w.addr2, w.rkey2, IBV_WR_RDMA_WRITE))
			die("post WRITE");
		wc = wait_wc(cq);
		verdict("write-through-invalidated-type2", wc.status == IBV_WC_REM_ACCESS_ERR, 0,
			ibv_wc_status_str(wc.status));
		sync_step(fd, 'V');
		memset(src, 'C', 64);
		if (write_wr(qp[2], mr, src, 64, w.addr1 + WIN, w.rkey1, IBV_WR_RDMA_WRITE))
			die("post WRITE");
		wc = wait_wc(cq);
		verdict("write-outside-type1", wc.status == IBV_WC_REM_ACCESS_ERR, rxe_target,
			ibv_wc_status_str(wc.status));
		sync_step(fd, 'O');
		sync_step(fd, 'D');
		if (write_wr(qp[0], mr, src, 64, w.addr1, w.rkey1, IBV_WR_RDMA_WRITE))
			die("post WRITE");
		wc = wait_wc(cq);
		verdict("write-through-deallocated-type1", wc.status == IBV_WC_REM_ACCESS_ERR, 0,
			ibv_wc_status_str(wc.status));
		sync_step(fd, 'E');
	}
	close(fd);
	if (failures) {
		printf("mw_peer: %d check(s) FAILED\n", failures);
		return 1;
	}
	printf("mw_peer: ok\n");
	return 0;
}
