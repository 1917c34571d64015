/* An rdma_cm program of uroce's own, compiled against the system's <rdma/rdma_cma.h> and
 * <rdma/rdma_verbs.h>, linked against Debian's librdmacm and libibverbs, and run on
 * uroce's (tools/tests/rdmacm_debian.rs). One process, two devices (UROCE_DEVICES
 * names them; the server binds to the second, SERVER below), what Debian's example
 * programs do not reach:
 *
 *   - rdma_event_str, rdma_get_devices, rdma_getaddrinfo (passive, active by name,
 *     refused), rdma_set_option (accepted, refused);
 *   - errors: AF_IB addresses (EAFNOSUPPORT), an address of no device (EADDRNOTAVAIL),
 *     a port bound twice (EADDRINUSE), EAGAIN from a non-blocking channel;
 *   - event channels driven by poll() on their fd; CONNECT_REQUEST's listen_id and
 *     context, private data both ways, the addresses and ports of both ends;
 *   - rdma_create_qp with no PD and no CQs (the id's PD and CQs, as librdmacm makes
 *     them), and the <rdma/rdma_verbs.h> inlines over them: rdma_reg_msgs,
 *     rdma_post_recv, rdma_post_send, rdma_get_send_comp, rdma_get_recv_comp;
 *   - a rejection with private data, rdma_migrate_id, rdma_destroy_id while an event of
 *     the id is not yet acknowledged (the event and its id stay readable), a port bound
 *     again at once after its listener is destroyed.
 *
 * Prints "cm_walkthrough: ok" and exits 0, or names the failed check and exits 1.
 * MIT OR Apache-2.0, like the rest of uroce. */

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROG "cm_walkthrough"
#include "check.h"

static const char *SERVER;
static const char *CLIENT;
#define PORT 7600

static struct sockaddr_in sin_of(const char *ip, int port)
{
	struct sockaddr_in s = { .sin_family = AF_INET, .sin_port = htons(port) };

	CHECK(inet_pton(AF_INET, ip, &s.sin_addr) == 1, "inet_pton %s", ip);
	return s;
}

/* The next event of a non-blocking channel, which must be `want`. */
static struct rdma_cm_event *next(struct rdma_event_channel *ch, enum rdma_cm_event_type want)
{
	struct rdma_cm_event *ev;
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };

	for (;;) {
		if (rdma_get_cm_event(ch, &ev) == 0)
			break;
		CHECK(errno == EAGAIN, "rdma_get_cm_event");
		CHECK(poll(&p, 1, 20000) == 1, "no %s within 20 s", rdma_event_str(want));
	}
	CHECK(ev->event == want, "got %s (status %d), wanted %s", rdma_event_str(ev->event),
	      ev->status, rdma_event_str(want));
	return ev;
}

static struct rdma_event_channel *channel(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();

	CHECK(ch && ch->fd >= 0, "rdma_create_event_channel");
	CHECK(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK) == 0, "O_NONBLOCK");
	return ch;
}

static void names_and_addresses(void)
{
	struct rdma_addrinfo hints = { 0 }, *res;
	struct ibv_context **devs;
	int n;

	CHECK(!strcmp(rdma_event_str(RDMA_CM_EVENT_ESTABLISHED), "RDMA_CM_EVENT_ESTABLISHED"),
	      "%s", rdma_event_str(RDMA_CM_EVENT_ESTABLISHED));
	CHECK(!strcmp(rdma_event_str(99), "UNKNOWN EVENT"), "%s", rdma_event_str(99));

	devs = rdma_get_devices(&n);
	CHECK(devs && n == 2 && devs[2] == NULL, "rdma_get_devices: %d", n);
	CHECK(!strcmp(ibv_get_device_name(devs[1]->device), "b"), "device %s",
	      ibv_get_device_name(devs[1]->device));
	rdma_free_devices(devs);

	/* Passive: the source address, RC in the TCP port space. */
	hints.ai_flags = RAI_PASSIVE | RAI_NUMERICHOST;
	hints.ai_port_space = RDMA_PS_TCP;
	CHECK(rdma_getaddrinfo(SERVER, "7471", &hints, &res) == 0, "rdma_getaddrinfo passive");
	CHECK(res->ai_flags == RAI_PASSIVE && res->ai_qp_type == IBV_QPT_RC &&
		      res->ai_port_space == RDMA_PS_TCP && res->ai_family == AF_INET,
	      "flags %d qp type %d ps %#x family %d", res->ai_flags, res->ai_qp_type,
	      res->ai_port_space, res->ai_family);
	CHECK(res->ai_src_len == sizeof(struct sockaddr_in) && !res->ai_dst_addr, "addresses");
	CHECK(((struct sockaddr_in *)res->ai_src_addr)->sin_port == htons(7471), "port");
	rdma_freeaddrinfo(res);

	/* Active, by name, UD in the UDP port space. */
	memset(&hints, 0, sizeof hints);
	hints.ai_port_space = RDMA_PS_UDP;
	CHECK(rdma_getaddrinfo("localhost", "7174", &hints, &res) == 0, "rdma_getaddrinfo name");
	CHECK(res->ai_dst_addr && !res->ai_src_addr && res->ai_qp_type == IBV_QPT_UD,
	      "dst %p src %p qp type %d", (void *)res->ai_dst_addr, (void *)res->ai_src_addr,
	      res->ai_qp_type);
	rdma_freeaddrinfo(res);

	hints.ai_flags = RAI_NUMERICHOST;
	CHECK(rdma_getaddrinfo("not-a-number", NULL, &hints, &res) == EAI_NONAME,
	      "a name with RAI_NUMERICHOST");
	errno = 0;
	CHECK(rdma_getaddrinfo(NULL, NULL, NULL, &res) == -1 && errno == EINVAL, "no arguments");
}

static void refusals(void)
{
	struct rdma_event_channel *ch = channel();
	struct rdma_cm_id *a, *b;
	struct rdma_cm_event *ev;
	struct sockaddr_storage ib = { .ss_family = AF_IB };
	struct sockaddr_in none = sin_of("127.0.200.200", PORT), here = sin_of(SERVER, PORT);
	uint8_t tos = 8;
	int on = 1;

	errno = 0;
	CHECK(rdma_get_cm_event(ch, &ev) == -1 && errno == EAGAIN, "EAGAIN");
	CHECK(rdma_create_id(ch, &a, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
	CHECK(rdma_create_id(ch, &b, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
	CHECK(rdma_bind_addr(a, (struct sockaddr *)&ib) == -1 && errno == EAFNOSUPPORT, "AF_IB");
	CHECK(rdma_resolve_addr(a, NULL, (struct sockaddr *)&ib, 2000) == -1 &&
		      errno == EAFNOSUPPORT,
	      "AF_IB destination");
	CHECK(rdma_bind_addr(a, (struct sockaddr *)&none) == -1 && errno == EADDRNOTAVAIL,
	      "an address of no device");
	CHECK(rdma_set_option(a, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof tos) == 0, "TOS");
	CHECK(rdma_set_option(a, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &on, sizeof on) == 0,
	      "REUSEADDR");
	CHECK(rdma_set_option(a, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &tos, sizeof tos) == -1 &&
		      errno == EOPNOTSUPP,
	      "ACK_TIMEOUT");
	CHECK(rdma_set_option(a, 7, 7, &on, sizeof on) == -1 && errno == ENOSYS, "unknown option");
	CHECK(rdma_bind_addr(a, (struct sockaddr *)&here) == 0, "rdma_bind_addr");
	CHECK(a->verbs && !strcmp(ibv_get_device_name(a->verbs->device), "b") && a->pd,
	      "a bound id's verbs and pd");
	CHECK(rdma_get_src_port(a) == htons(PORT), "src port %u", ntohs(rdma_get_src_port(a)));
	CHECK(rdma_bind_addr(b, (struct sockaddr *)&here) == -1 && errno == EADDRINUSE,
	      "the port twice");
	CHECK(rdma_listen(a, 4) == 0, "rdma_listen");
	/* The port is free again as soon as its listener is destroyed. */
	CHECK(rdma_destroy_id(a) == 0, "rdma_destroy_id");
	CHECK(rdma_bind_addr(b, (struct sockaddr *)&here) == 0, "the port again");
	CHECK(rdma_destroy_id(b) == 0, "rdma_destroy_id");
	rdma_destroy_event_channel(ch);
}

/* An RC QP of 4 WRs each way, with no CQs given. */
static void qp_attr(struct ibv_qp_init_attr *qa)
{
	memset(qa, 0, sizeof *qa);
	qa->qp_type = IBV_QPT_RC;
	qa->cap.max_send_wr = qa->cap.max_recv_wr = 4;
	qa->cap.max_send_sge = qa->cap.max_recv_sge = 1;
}

static const char REQ_DATA[] = "from the client";
static const char REP_DATA[] = "from the server";
static const char MSG[] = "a SEND through rdma_post_send";

static void connect_and_talk(void)
{
	struct rdma_event_channel *sch = channel(), *cch = channel(), *moved;
	struct sockaddr_in sa = sin_of(SERVER, PORT), ca = sin_of(CLIENT, 0);
	struct rdma_cm_id *listen, *cid, *sid;
	struct rdma_cm_event *ev;
	struct rdma_conn_param cp = { 0 };
	struct ibv_qp_init_attr qa;
	struct ibv_mr *smr, *cmr;
	struct ibv_wc wc;
	char sbuf[64] = { 0 }, cbuf[64];
	int listen_ctx = 1;

	CHECK(rdma_create_id(sch, &listen, &listen_ctx, RDMA_PS_TCP) == 0, "rdma_create_id");
	CHECK(rdma_bind_addr(listen, (struct sockaddr *)&sa) == 0, "rdma_bind_addr");
	CHECK(rdma_listen(listen, 4) == 0, "rdma_listen");
	/* The listener moves to another channel; its requests arrive there. */
	moved = channel();
	CHECK(rdma_migrate_id(listen, moved) == 0 && listen->channel == moved, "rdma_migrate_id");
	rdma_destroy_event_channel(sch);
	sch = moved;

	CHECK(rdma_create_id(cch, &cid, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
	CHECK(rdma_resolve_addr(cid, NULL, (struct sockaddr *)&sa, 2000) == 0, "rdma_resolve_addr");
	rdma_ack_cm_event(next(cch, RDMA_CM_EVENT_ADDR_RESOLVED));
	CHECK(rdma_resolve_route(cid, 2000) == 0, "rdma_resolve_route");
	rdma_ack_cm_event(next(cch, RDMA_CM_EVENT_ROUTE_RESOLVED));
	CHECK(cid->verbs && !strcmp(ibv_get_device_name(cid->verbs->device), "a"),
	      "the client leaves from the other device");
	CHECK(cid->route.num_paths == 1 && cid->route.path_rec, "path");
	CHECK(((struct sockaddr_in *)rdma_get_local_addr(cid))->sin_addr.s_addr ==
		      ca.sin_addr.s_addr,
	      "local address");
	CHECK(rdma_get_dst_port(cid) == htons(PORT), "dst port");

	/* No PD, no CQs: the id's PD, and CQs with channels, whose context is the id. */
	qp_attr(&qa);
	CHECK(rdma_create_qp(cid, NULL, &qa) == 0, "rdma_create_qp");
	CHECK(cid->qp && cid->send_cq && cid->recv_cq && cid->send_cq_channel &&
		      cid->recv_cq_channel && cid->pd && cid->qp->pd == cid->pd,
	      "the QP's PD and CQs");
	CHECK(qa.send_cq == cid->send_cq && cid->send_cq->cq_context == cid, "CQ context");
	cmr = rdma_reg_msgs(cid, cbuf, sizeof cbuf);
	CHECK(cmr, "rdma_reg_msgs");

	cp.private_data = REQ_DATA;
	cp.private_data_len = sizeof REQ_DATA;
	cp.responder_resources = cp.initiator_depth = 1;
	cp.retry_count = cp.rnr_retry_count = 7;
	CHECK(rdma_connect(cid, &cp) == 0, "rdma_connect");

	ev = next(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
	sid = ev->id;
	CHECK(ev->listen_id == listen && sid != listen && sid->context == &listen_ctx,
	      "listen_id %p, context %p", (void *)ev->listen_id, sid->context);
	CHECK(ev->param.conn.private_data_len >= sizeof REQ_DATA &&
		      !memcmp(ev->param.conn.private_data, REQ_DATA, sizeof REQ_DATA),
	      "the REQ's private data");
	CHECK(((struct sockaddr_in *)rdma_get_peer_addr(sid))->sin_addr.s_addr ==
			  ca.sin_addr.s_addr &&
		      ((struct sockaddr_in *)rdma_get_peer_addr(sid))->sin_port ==
			      rdma_get_src_port(cid),
	      "the server sees the client's address and port");
	CHECK(!strcmp(ibv_get_device_name(sid->verbs->device), "b"), "the server's device");
	qp_attr(&qa);
	CHECK(rdma_create_qp(sid, NULL, &qa) == 0, "rdma_create_qp (server)");
	smr = rdma_reg_msgs(sid, sbuf, sizeof sbuf);
	CHECK(smr, "rdma_reg_msgs");
	CHECK(rdma_post_recv(sid, sbuf, sbuf, sizeof sbuf, smr) == 0, "rdma_post_recv");
	memset(&cp, 0, sizeof cp);
	cp.private_data = REP_DATA;
	cp.private_data_len = sizeof REP_DATA;
	cp.responder_resources = cp.initiator_depth = 1;
	cp.rnr_retry_count = 7;
	CHECK(rdma_accept(sid, &cp) == 0, "rdma_accept");
	rdma_ack_cm_event(ev);

	ev = next(cch, RDMA_CM_EVENT_ESTABLISHED);
	CHECK(ev->id == cid && ev->param.conn.private_data_len >= sizeof REP_DATA &&
		      !memcmp(ev->param.conn.private_data, REP_DATA, sizeof REP_DATA),
	      "the REP's private data");
	rdma_ack_cm_event(ev);
	rdma_ack_cm_event(next(sch, RDMA_CM_EVENT_ESTABLISHED));

	memcpy(cbuf, MSG, sizeof MSG);
	CHECK(rdma_post_send(cid, cbuf, cbuf, sizeof MSG, cmr, IBV_SEND_SIGNALED) == 0,
	      "rdma_post_send");
	CHECK(rdma_get_send_comp(cid, &wc) == 1 && wc.status == IBV_WC_SUCCESS &&
		      wc.wr_id == (uintptr_t)cbuf,
	      "rdma_get_send_comp: status %d", wc.status);
	CHECK(rdma_get_recv_comp(sid, &wc) == 1 && wc.status == IBV_WC_SUCCESS &&
		      wc.byte_len == sizeof MSG && !memcmp(sbuf, MSG, sizeof MSG),
	      "rdma_get_recv_comp: status %d, %u bytes", wc.status, wc.byte_len);

	/* The client disconnects; the server destroys its id before acknowledging the
	 * event: the event, and the id it points at, stay readable until the ack. */
	CHECK(rdma_disconnect(cid) == 0, "rdma_disconnect");
	ev = next(sch, RDMA_CM_EVENT_DISCONNECTED);
	CHECK(ev->id == sid, "the DISCONNECTED id");
	rdma_dereg_mr(smr);
	rdma_destroy_qp(sid);
	CHECK(rdma_destroy_id(sid) == 0, "rdma_destroy_id with an event outstanding");
	CHECK(ev->id->context == &listen_ctx && ev->event == RDMA_CM_EVENT_DISCONNECTED,
	      "the event after its id's destroy");
	CHECK(rdma_ack_cm_event(ev) == 0, "rdma_ack_cm_event");
	rdma_ack_cm_event(next(cch, RDMA_CM_EVENT_DISCONNECTED));
	rdma_dereg_mr(cmr);
	rdma_destroy_qp(cid);
	CHECK(rdma_destroy_id(cid) == 0, "rdma_destroy_id");

	/* A second client, rejected with private data (REJ reason 28, consumer defined). */
	CHECK(rdma_create_id(cch, &cid, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
	CHECK(rdma_resolve_addr(cid, (struct sockaddr *)&ca, (struct sockaddr *)&sa, 2000) == 0,
	      "rdma_resolve_addr from an address");
	rdma_ack_cm_event(next(cch, RDMA_CM_EVENT_ADDR_RESOLVED));
	CHECK(rdma_resolve_route(cid, 2000) == 0, "rdma_resolve_route");
	rdma_ack_cm_event(next(cch, RDMA_CM_EVENT_ROUTE_RESOLVED));
	qp_attr(&qa);
	CHECK(rdma_create_qp(cid, NULL, &qa) == 0, "rdma_create_qp");
	CHECK(rdma_connect(cid, NULL) == 0, "rdma_connect");
	ev = next(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
	CHECK(rdma_reject(ev->id, "no", 3) == 0, "rdma_reject");
	sid = ev->id;
	rdma_ack_cm_event(ev);
	CHECK(rdma_destroy_id(sid) == 0, "rdma_destroy_id");
	ev = next(cch, RDMA_CM_EVENT_REJECTED);
	CHECK(ev->status == 28 && ev->param.conn.private_data &&
		      !memcmp(ev->param.conn.private_data, "no", 3),
	      "status %d", ev->status);
	rdma_ack_cm_event(ev);
	rdma_destroy_qp(cid);
	CHECK(rdma_destroy_id(cid) == 0, "rdma_destroy_id");
	CHECK(rdma_destroy_id(listen) == 0, "rdma_destroy_id");
	rdma_destroy_event_channel(sch);
	rdma_destroy_event_channel(cch);
}

int main(int argc, char **argv)
{
	CHECK(argc == 3, "usage: cm_walkthrough CLIENT_IP SERVER_IP");
	CLIENT = argv[1];
	SERVER = argv[2];
	names_and_addresses();
	refusals();
	connect_and_talk();
	printf("cm_walkthrough: ok\n");
	return 0;
}
