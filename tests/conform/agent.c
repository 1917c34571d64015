/*
 * agent: drives one RDMA device's QPs through libibverbs on behalf of a controller that
 * connects over TCP (the remote target of uroce's conformance scenarios, issue 17).
 *
 * Build:  cc -O2 -Wall -Wextra -o agent agent.c -libverbs
 *         (C99 + POSIX, libibverbs 1.x calls present in rdma-core 44)
 * Run:    ./agent [-a ADDR] [-1] [-v] PORT
 *         -a ADDR  listen address (default 127.0.0.1; 0.0.0.0 or :: to serve a lab host)
 *         -1       serve one controller, then exit
 *         -v       log every request and reply on stderr
 *         PORT     TCP port; 0 picks a free one. Once listening the agent prints one line
 *                  on stdout: `listening addr=ADDR port=N`.
 *
 * Protocol (tests/conform/AGENT.md has the same text with examples)
 * --------
 * One controller at a time. Each request is one line of ASCII: a command word, then
 * `key=value` tokens separated by spaces (no spaces inside a value). Each request gets
 * exactly one reply line:
 *
 *     ok key=value key=value ...
 *     err errno=N msg="text"
 *
 * Numbers are decimal, or hexadecimal with a 0x prefix; negative numbers are refused.
 * Replies give addresses, GUIDs and byte strings in hex (0x...), everything else in
 * decimal. A quoted value (`msg`, `status_str`, `event_str`) has `\"` and `\\` escaped.
 * An unknown command, an unknown or repeated key, a malformed number or a value out of
 * range is an `err` with errno EINVAL (22), and nothing is done; a verbs call that fails
 * is an `err` with the errno it gave. The agent keeps serving after any `err`. Lines
 * longer than 8 MiB are refused (E2BIG). When the controller disconnects or says `quit`,
 * everything it created is destroyed and the agent waits for the next controller.
 *
 * Objects get small ids (qp=0.., mr=0.., ah=0..) that later requests name. Where `qp=` is
 * optional it defaults to the QP created last.
 *
 * hello
 *     -> ok agent=uroce-conform-agent proto=1
 * open [dev=NAME|first] [port=1] [gid_index=N|auto] [cqe=1024]
 *     Opens the device, its PD, one CQ (shared by every QP's send and receive queues)
 *     with a completion channel. gid_index=auto takes the first RoCE v2 GID that is an
 *     IPv4-mapped address, else the first RoCE v2 GID, else index 0.
 *     -> ok dev= port= gid= gid_index= gid_type=roce_v2|roce_v1|ib|unknown
 *        state=down|init|armed|active|... active_mtu= max_mtu= lid=
 *        link_layer=ethernet|ib|unspecified gid_tbl_len= pkey_tbl_len= max_msg_sz=
 *        max_qp_wr= max_sge= max_cqe= max_qp_rd_atom= max_qp_init_rd_atom= atomic_cap=
 *        vendor_id= vendor_part_id= fw_ver= node_guid= cqe=
 *     (MTUs in bytes)
 * query_port
 *     -> the port fields of `open` again (state, MTUs, lid...)
 * create_qp type=rc|uc|ud [sq=16] [rq=16] [sge=1] [max_inline=0] [sig_all=0]
 *     -> ok qp=ID qpn= sq= rq= send_sge= recv_sge= max_inline=   (the granted caps)
 * modify_qp [qp=ID] state=reset|init|rtr|rts|sqd|sqe|err [defaults=1] [attributes]
 *     Attributes (each given one is set and its mask bit added): pkey_index port
 *     access=LIST qkey path_mtu=256..4096 dest_qpn rq_psn sq_psn dgid=IPV6|IPV4
 *     sgid_index hop_limit traffic_class flow_label sl timeout retry_cnt rnr_retry
 *     min_rnr_timer max_rd_atomic max_dest_rd_atomic. With defaults=1 the attributes the
 *     usual transition to `state` needs (IBTA 11.2.5.2, by QP type) are added when not
 *     given: init: pkey_index=0 port=(open's) access=0 (RC/UC) or qkey=0 (UD); rtr:
 *     path_mtu=(active) rq_psn=0, and max_dest_rd_atomic=1 min_rnr_timer=12 (RC); rts:
 *     sq_psn=0, and timeout=14 retry_cnt=7 rnr_retry=7 max_rd_atomic=1 (RC). dgid and
 *     dest_qpn have no default. sgid_index defaults to open's, hop_limit to 64 (when dgid
 *     is given). defaults=0 sends exactly the given attributes.
 *     -> ok qp=ID state=
 * query_qp [qp=ID]
 *     -> ok qp= qpn= type= state= cur_state= path_mtu= qkey= rq_psn= sq_psn= dest_qpn=
 *        access= pkey_index= port= timeout= retry_cnt= rnr_retry= min_rnr_timer=
 *        max_rd_atomic= max_dest_rd_atomic= sq_draining= dgid= sgid_index= hop_limit=
 *        traffic_class= flow_label= sl= max_send_wr= max_recv_wr= max_send_sge=
 *        max_recv_sge= max_inline=
 * reg_mr len=N [access=LIST]
 *     A zeroed, page-aligned buffer of len bytes (at most 1 GiB), registered. LIST is
 *     comma-separated lw,rw,rr,ra,mw (local write, remote write/read/atomic, MW bind),
 *     `none`, or a number (ibv_access_flags); default lw.
 *     -> ok mr=ID addr=0x.. len= lkey= rkey=
 * mr_write id=ID off=N hex=BYTES          -> ok len=
 * mr_read id=ID off=N len=N (<= 1 MiB)    -> ok hex=BYTES
 * create_ah dgid= [sgid_index=] [hop_limit=64] [traffic_class=0] [flow_label=0] [sl=0]
 *     -> ok ah=ID
 * post_send [qp=ID] opcode=send|send_imm|write|write_imm|read|cmp_swp|fetch_add
 *           [mr=ID off=0 len=0] [lkey=] [raddr=] [rkey=] [imm=] [compare=] [swap=]
 *           [add=] [signaled=1] [inline=0] [solicited=0] [fence=0] [wr_id=0]
 *           [ah=ID remote_qpn= remote_qkey=]              (UD)
 *     One WR with one SGE (none without mr=). The SGE must lie inside the MR's buffer;
 *     lkey= overrides the SGE's L_Key (to provoke local protection errors). imm is the
 *     immediate value in host order (sent big-endian, as the wire carries it).
 *     -> ok wr_id=
 * post_recv [qp=ID] [mr=ID off=0 len=0] [lkey=] [wr_id=0]  -> ok wr_id=
 * poll_cq [timeout_ms=0] [max=16] [min=1]
 *     Polls until min completions (at most max, 1..256) are in or timeout_ms passes,
 *     sleeping on the completion channel.
 *     -> ok n=K wc0.wr_id= wc0.status= wc0.status_str="" wc0.opcode= wc0.byte_len=
 *        wc0.imm= (when flags has IBV_WC_WITH_IMM; host order) wc0.flags= wc0.qp_num=
 *        wc0.src_qp= wc0.vendor_err= wc1....
 *     opcode: send write read cmp_swp fetch_add bind_mw local_inv recv recv_imm, or
 *     the number. Only wr_id, status, qp_num and vendor_err are defined for an error WC.
 * get_async_event [timeout_ms=0]
 *     -> ok event=none | ok event=N event_str="" [qpn= | cq=1 | port= | srq=1]
 * counters
 *     The port's /sys/class/infiniband/DEV/ports/PORT/hw_counters/ files (rxe has them).
 *     -> ok NAME=VALUE ... n=K    (n=0 when the device exposes none; a counter named
 *        n would be hw_n)
 * destroy [qp=ID | mr=ID | ah=ID]
 *     One object, or (no key) everything, the device included.  -> ok
 * quit
 *     -> ok bye=1, then the connection closes and everything is destroyed.
 */

#define _POSIX_C_SOURCE 200809L

#include <infiniband/verbs.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#define MAX_QP 16
#define MAX_MR 64
#define MAX_AH 64
#define MAX_KV 48
#define MAX_LINE (8u << 20)
#define MAX_MR_LEN (1ull << 30)
#define MAX_IO_LEN (1u << 20)
#define MAX_POLL 256

/* ---- reply buffer ------------------------------------------------------------------ */

static struct {
	char *p;
	size_t len, cap;
	int oom;
	int failed;
} R;

static void r_reserve(size_t more)
{
	if (R.oom || R.len + more + 1 <= R.cap)
		return;
	size_t cap = R.cap ? R.cap : 256;
	while (cap < R.len + more + 1)
		cap *= 2;
	char *p = realloc(R.p, cap);
	if (!p) {
		R.oom = 1;
		return;
	}
	R.p = p;
	R.cap = cap;
}

static void out(const char *fmt, ...)
{
	va_list ap;
	if (R.failed || R.oom)
		return;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	r_reserve((size_t)n);
	if (R.oom)
		return;
	va_start(ap, fmt);
	vsnprintf(R.p + R.len, R.cap - R.len, fmt, ap);
	va_end(ap);
	R.len += (size_t)n;
}

/* Appends ` key="text"` with `"` and `\` escaped and control bytes replaced by '?'. */
static void out_quoted(const char *key, const char *text)
{
	out(" %s=\"", key);
	for (const char *c = text; *c; c++) {
		if (*c == '"' || *c == '\\')
			out("\\%c", *c);
		else if ((unsigned char)*c < 0x20 || (unsigned char)*c > 0x7e)
			out("?");
		else
			out("%c", *c);
	}
	out("\"");
}

static void r_reset(void)
{
	R.len = 0;
	R.oom = 0;
	R.failed = 0;
	r_reserve(64);
	if (R.p)
		R.p[0] = 0;
}

/* Replaces the reply with `err errno=E msg="..."`; returns -1 for `return fail(...)`. */
static int fail(int e, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	if (R.failed)
		return -1;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	R.len = 0;
	R.oom = 0;
	out("err errno=%d", e);
	out_quoted("msg", msg);
	R.failed = 1;
	return -1;
}

/* A verbs call failed with `e` (an errno value, or 0 when the library set none). */
static int fail_verbs(int e, const char *what)
{
	if (e <= 0)
		return fail(EIO, "%s failed (the library set no errno)", what);
	return fail(e, "%s: %s", what, strerror(e));
}

/* ---- request parsing -------------------------------------------------------------- */

struct kv {
	char *key;
	char *val;
	int used;
};

struct req {
	char *cmd;
	struct kv kv[MAX_KV];
	int n;
};

/* Splits `line` in place; 0, or -1 with the err reply set. */
static int parse_line(char *line, struct req *r)
{
	char *save = NULL;
	r->n = 0;
	r->cmd = strtok_r(line, " \t", &save);
	if (!r->cmd)
		return fail(EINVAL, "empty request");
	for (char *t = strtok_r(NULL, " \t", &save); t; t = strtok_r(NULL, " \t", &save)) {
		char *eq = strchr(t, '=');
		if (!eq || eq == t)
			return fail(EINVAL, "'%.64s' is not key=value", t);
		*eq = 0;
		for (int i = 0; i < r->n; i++)
			if (!strcmp(r->kv[i].key, t))
				return fail(EINVAL, "key '%.64s' given twice", t);
		if (r->n == MAX_KV)
			return fail(EINVAL, "more than %d keys", MAX_KV);
		r->kv[r->n].key = t;
		r->kv[r->n].val = eq + 1;
		r->kv[r->n].used = 0;
		r->n++;
	}
	return 0;
}

static const char *arg(struct req *r, const char *key)
{
	for (int i = 0; i < r->n; i++)
		if (!strcmp(r->kv[i].key, key)) {
			r->kv[i].used = 1;
			return r->kv[i].val;
		}
	return NULL;
}

/* Every key must have been read by the handler: a typo is an error, not a no-op. */
static int args_done(struct req *r)
{
	for (int i = 0; i < r->n; i++)
		if (!r->kv[i].used)
			return fail(EINVAL, "unknown key '%.64s' for %s", r->kv[i].key, r->cmd);
	return 0;
}

/* Decimal, or hex after 0x; the whole string; no sign. */
static int parse_u64(const char *s, uint64_t *v)
{
	int base = 10;
	if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
		base = 16;
		s += 2;
	}
	if (!*s)
		return -1;
	for (const char *c = s; *c; c++) {
		int ok = base == 16 ? ((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f') ||
				       (*c >= 'A' && *c <= 'F'))
				    : (*c >= '0' && *c <= '9');
		if (!ok)
			return -1;
	}
	errno = 0;
	char *end = NULL;
	unsigned long long x = strtoull(s, &end, base);
	if (errno || !end || *end)
		return -1;
	*v = (uint64_t)x;
	return 0;
}

/* `key` as a number in [min, max]; `def` when absent (required when `req`). */
static int num(struct req *r, const char *key, int req, uint64_t def, uint64_t min,
	       uint64_t max, uint64_t *v)
{
	const char *s = arg(r, key);
	if (!s) {
		if (req)
			return fail(EINVAL, "%s needs %s=", r->cmd, key);
		*v = def;
		return 0;
	}
	uint64_t x;
	if (parse_u64(s, &x) < 0)
		return fail(EINVAL, "%s=%.64s is not a number", key, s);
	if (x < min || x > max)
		return fail(EINVAL, "%s=%.64s is out of range [%llu, %llu]", key, s,
			    (unsigned long long)min, (unsigned long long)max);
	*v = x;
	return 0;
}

/* As num() for a value that must fit `unsigned`, `uint32_t`... (all through uint64_t). */
#define NUM(r, key, req, def, min, max, dst)                                               \
	do {                                                                               \
		uint64_t v_;                                                               \
		if (num((r), (key), (req), (def), (min), (max), &v_) < 0)                  \
			return;                                                            \
		(dst) = v_;                                                                \
	} while (0)

struct name {
	const char *name;
	int value;
};

static int lookup(const struct name *t, const char *s, int *v)
{
	for (; t->name; t++)
		if (!strcmp(t->name, s)) {
			*v = t->value;
			return 0;
		}
	return -1;
}

static const char *name_of(const struct name *t, int v)
{
	for (; t->name; t++)
		if (t->value == v)
			return t->name;
	return NULL;
}

static const struct name QP_STATES[] = {
	{ "reset", IBV_QPS_RESET }, { "init", IBV_QPS_INIT }, { "rtr", IBV_QPS_RTR },
	{ "rts", IBV_QPS_RTS },	    { "sqd", IBV_QPS_SQD },   { "sqe", IBV_QPS_SQE },
	{ "err", IBV_QPS_ERR },	    { NULL, 0 },
};

static const struct name PORT_STATES[] = {
	{ "nop", IBV_PORT_NOP },       { "down", IBV_PORT_DOWN },
	{ "init", IBV_PORT_INIT },     { "armed", IBV_PORT_ARMED },
	{ "active", IBV_PORT_ACTIVE }, { "active_defer", IBV_PORT_ACTIVE_DEFER },
	{ NULL, 0 },
};

static const struct name QP_TYPES[] = {
	{ "rc", IBV_QPT_RC }, { "uc", IBV_QPT_UC }, { "ud", IBV_QPT_UD }, { NULL, 0 },
};

static const struct name MTUS[] = {
	{ "256", IBV_MTU_256 },	  { "512", IBV_MTU_512 },   { "1024", IBV_MTU_1024 },
	{ "2048", IBV_MTU_2048 }, { "4096", IBV_MTU_4096 }, { NULL, 0 },
};

static const struct name WC_OPCODES[] = {
	{ "send", IBV_WC_SEND },
	{ "write", IBV_WC_RDMA_WRITE },
	{ "read", IBV_WC_RDMA_READ },
	{ "cmp_swp", IBV_WC_COMP_SWAP },
	{ "fetch_add", IBV_WC_FETCH_ADD },
	{ "bind_mw", IBV_WC_BIND_MW },
	{ "local_inv", IBV_WC_LOCAL_INV },
	{ "recv", IBV_WC_RECV },
	{ "recv_imm", IBV_WC_RECV_RDMA_WITH_IMM },
	{ NULL, 0 },
};

static const struct name SEND_OPCODES[] = {
	{ "send", IBV_WR_SEND },
	{ "send_imm", IBV_WR_SEND_WITH_IMM },
	{ "write", IBV_WR_RDMA_WRITE },
	{ "write_imm", IBV_WR_RDMA_WRITE_WITH_IMM },
	{ "read", IBV_WR_RDMA_READ },
	{ "cmp_swp", IBV_WR_ATOMIC_CMP_AND_SWP },
	{ "fetch_add", IBV_WR_ATOMIC_FETCH_AND_ADD },
	{ NULL, 0 },
};

/* A big-endian 64-bit field (node GUID) as a number, without <endian.h>. */
static unsigned long long be64(const void *p)
{
	const unsigned char *b = p;
	unsigned long long v = 0;
	for (int i = 0; i < 8; i++)
		v = v << 8 | b[i];
	return v;
}

static int mtu_bytes(enum ibv_mtu m)
{
	return m >= IBV_MTU_256 && m <= IBV_MTU_4096 ? 128 << m : 0;
}

/* `access=` as a comma list, `none`, or a number. */
static int access_arg(struct req *r, unsigned def, unsigned *v)
{
	const char *s = arg(r, "access");
	if (!s) {
		*v = def;
		return 0;
	}
	uint64_t x;
	if (parse_u64(s, &x) == 0) {
		if (x > UINT32_MAX)
			return fail(EINVAL, "access=%.64s is out of range", s);
		*v = (unsigned)x;
		return 0;
	}
	unsigned acc = 0;
	if (strcmp(s, "none")) {
		const char *p = s;
		while (*p) {
			size_t n = strcspn(p, ",");
			if (n == 2 && !strncmp(p, "lw", 2))
				acc |= IBV_ACCESS_LOCAL_WRITE;
			else if (n == 2 && !strncmp(p, "rw", 2))
				acc |= IBV_ACCESS_REMOTE_WRITE;
			else if (n == 2 && !strncmp(p, "rr", 2))
				acc |= IBV_ACCESS_REMOTE_READ;
			else if (n == 2 && !strncmp(p, "ra", 2))
				acc |= IBV_ACCESS_REMOTE_ATOMIC;
			else if (n == 2 && !strncmp(p, "mw", 2))
				acc |= IBV_ACCESS_MW_BIND;
			else
				return fail(EINVAL, "access=%.64s: '%.*s' is not lw, rw, rr, ra or mw",
					    s, (int)(n > 16 ? 16 : n), p);
			p += n;
			if (*p == ',')
				p++;
		}
	}
	*v = acc;
	return 0;
}

/* A GID: IPv6 text, or IPv4 dotted quad (as its IPv4-mapped GID). */
static int gid_arg(struct req *r, const char *key, union ibv_gid *g, int *given)
{
	const char *s = arg(r, key);
	*given = s != NULL;
	if (!s)
		return 0;
	struct in_addr a4;
	if (inet_pton(AF_INET6, s, g->raw) == 1)
		return 0;
	if (inet_pton(AF_INET, s, &a4) == 1) {
		memset(g->raw, 0, 10);
		g->raw[10] = 0xff;
		g->raw[11] = 0xff;
		memcpy(g->raw + 12, &a4, 4);
		return 0;
	}
	return fail(EINVAL, "%s=%.64s is not an IPv6 or IPv4 address", key, s);
}

static void out_gid(const char *key, const union ibv_gid *g)
{
	char s[INET6_ADDRSTRLEN];
	if (inet_ntop(AF_INET6, g->raw, s, sizeof(s)))
		out(" %s=%s", key, s);
	else
		out(" %s=::", key);
}

/* ---- agent state ------------------------------------------------------------------ */

static struct {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq;
	char dev[IBV_SYSFS_NAME_MAX];
	uint8_t port;
	int gid_index;
	union ibv_gid gid;
	struct ibv_device_attr dattr;
	struct {
		struct ibv_qp *qp;
	} qp[MAX_QP];
	int last_qp;
	struct {
		struct ibv_mr *mr;
		unsigned char *buf;
		size_t len;
	} mr[MAX_MR];
	struct ibv_ah *ah[MAX_AH];
} S = { .last_qp = -1 };

static int verbose;

static int need_open(void)
{
	if (!S.ctx)
		return fail(ENODEV, "no device: send `open` first");
	return 0;
}

/* `key=ID` in [0, max] (required when `req`, else `def`). */
static int id_arg(struct req *r, const char *key, int req, int def, int max, int *id)
{
	uint64_t v;
	if (num(r, key, req, (uint64_t)def, 0, (uint64_t)max, &v) < 0)
		return -1;
	*id = (int)v;
	return 0;
}

/* `qp=ID`, or the QP created last when absent; NULL with the err reply set. */
static struct ibv_qp *qp_arg(struct req *r, int *id)
{
	int i = S.last_qp;
	if (arg(r, "qp")) {
		if (id_arg(r, "qp", 1, 0, MAX_QP - 1, &i) < 0)
			return NULL;
	} else if (i < 0) {
		fail(ENOENT, "no QP: send create_qp first");
		return NULL;
	}
	if (!S.qp[i].qp) {
		fail(ENOENT, "no QP %d", i);
		return NULL;
	}
	if (id)
		*id = i;
	return S.qp[i].qp;
}

static int mr_lookup(int i)
{
	if (i < 0 || i >= MAX_MR || !S.mr[i].mr)
		return fail(ENOENT, "no MR %d", i);
	return 0;
}

/* ---- commands --------------------------------------------------------------------- */

static void destroy_all(void)
{
	for (int i = 0; i < MAX_QP; i++)
		if (S.qp[i].qp) {
			int e = ibv_destroy_qp(S.qp[i].qp);
			if (e)
				fprintf(stderr, "agent: ibv_destroy_qp: %s\n", strerror(e));
			S.qp[i].qp = NULL;
		}
	for (int i = 0; i < MAX_AH; i++)
		if (S.ah[i]) {
			ibv_destroy_ah(S.ah[i]);
			S.ah[i] = NULL;
		}
	for (int i = 0; i < MAX_MR; i++)
		if (S.mr[i].mr) {
			ibv_dereg_mr(S.mr[i].mr);
			free(S.mr[i].buf);
			S.mr[i].mr = NULL;
			S.mr[i].buf = NULL;
		}
	if (S.cq)
		ibv_destroy_cq(S.cq);
	if (S.ch)
		ibv_destroy_comp_channel(S.ch);
	if (S.pd)
		ibv_dealloc_pd(S.pd);
	if (S.ctx)
		ibv_close_device(S.ctx);
	S.cq = NULL;
	S.ch = NULL;
	S.pd = NULL;
	S.ctx = NULL;
	S.last_qp = -1;
}

static const char *gid_type_name(int t)
{
	switch (t) {
	case IBV_GID_TYPE_IB:
		return "ib";
	case IBV_GID_TYPE_ROCE_V1:
		return "roce_v1";
	case IBV_GID_TYPE_ROCE_V2:
		return "roce_v2";
	default:
		return "unknown";
	}
}

static int report_port(void)
{
	struct ibv_port_attr pa;
	memset(&pa, 0, sizeof(pa));
	int e = ibv_query_port(S.ctx, S.port, &pa);
	if (e)
		return fail_verbs(e, "ibv_query_port");
	const char *ll = pa.link_layer == IBV_LINK_LAYER_ETHERNET	  ? "ethernet"
			 : pa.link_layer == IBV_LINK_LAYER_INFINIBAND ? "ib"
								      : "unspecified";
	out(" dev=%s port=%u", S.dev, S.port);
	out_gid("gid", &S.gid);
	struct ibv_gid_entry ge;
	const char *gt = "unknown";
	if (ibv_query_gid_ex(S.ctx, S.port, (uint32_t)S.gid_index, &ge, 0) == 0)
		gt = gid_type_name(ge.gid_type);
	out(" gid_index=%d gid_type=%s", S.gid_index, gt);
	const char *ps = name_of(PORT_STATES, pa.state);
	out(" state=%s active_mtu=%d max_mtu=%d lid=%u link_layer=%s gid_tbl_len=%d",
	    ps ? ps : "unknown", mtu_bytes(pa.active_mtu), mtu_bytes(pa.max_mtu),
	    pa.lid, ll, pa.gid_tbl_len);
	out(" pkey_tbl_len=%u max_msg_sz=%u", pa.pkey_tbl_len, pa.max_msg_sz);
	return 0;
}

/* gid_index=auto: the first RoCE v2 IPv4-mapped GID, else the first RoCE v2, else 0. */
static int auto_gid_index(void)
{
	struct ibv_port_attr pa;
	int v2 = -1;
	if (ibv_query_port(S.ctx, S.port, &pa))
		return 0;
	for (int i = 0; i < pa.gid_tbl_len && i < 1024; i++) {
		struct ibv_gid_entry ge;
		if (ibv_query_gid_ex(S.ctx, S.port, (uint32_t)i, &ge, 0))
			continue;
		if (ge.gid_type != IBV_GID_TYPE_ROCE_V2)
			continue;
		static const unsigned char mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
		if (!memcmp(ge.gid.raw, mapped, 12))
			return i;
		if (v2 < 0)
			v2 = i;
	}
	return v2 < 0 ? 0 : v2;
}

static void cmd_open(struct req *r)
{
	const char *dev = arg(r, "dev");
	const char *gi = arg(r, "gid_index");
	uint8_t port;
	int cqe, gid_index = 0, auto_gid = 0;
	NUM(r, "port", 0, 1, 1, 255, port);
	NUM(r, "cqe", 0, 1024, 1, 1 << 20, cqe);
	if (gi && !strcmp(gi, "auto")) {
		auto_gid = 1;
	} else if (gi) {
		uint64_t v;
		if (parse_u64(gi, &v) < 0 || v > 4095) {
			fail(EINVAL, "gid_index=%.64s is neither auto nor a number below 4096", gi);
			return;
		}
		gid_index = (int)v;
	}
	if (args_done(r) < 0)
		return;
	if (S.ctx) {
		fail(EBUSY, "a device is open already (destroy closes it)");
		return;
	}
	int n = 0;
	errno = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list) {
		fail_verbs(errno, "ibv_get_device_list");
		return;
	}
	struct ibv_device *found = NULL;
	for (int i = 0; i < n && !found; i++)
		if (!dev || !strcmp(dev, "first") || !strcmp(ibv_get_device_name(list[i]), dev))
			found = list[i];
	if (!found) {
		ibv_free_device_list(list);
		fail(ENODEV, n ? "no RDMA device named %.64s" : "no RDMA devices (wanted %.64s)",
		     dev ? dev : "first");
		return;
	}
	snprintf(S.dev, sizeof(S.dev), "%s", ibv_get_device_name(found));
	errno = 0;
	S.ctx = ibv_open_device(found);
	int e = errno;
	ibv_free_device_list(list);
	if (!S.ctx) {
		fail_verbs(e, "ibv_open_device");
		return;
	}
	S.port = port;
	/* get_async_event never blocks past its timeout: poll(), then a non-blocking take. */
	int fl = fcntl(S.ctx->async_fd, F_GETFL);
	if (fl < 0 || fcntl(S.ctx->async_fd, F_SETFL, fl | O_NONBLOCK) < 0) {
		fail_verbs(errno, "fcntl(async_fd, O_NONBLOCK)");
		goto undo;
	}
	if ((e = ibv_query_device(S.ctx, &S.dattr))) {
		fail_verbs(e, "ibv_query_device");
		goto undo;
	}
	if (auto_gid)
		gid_index = auto_gid_index();
	S.gid_index = gid_index;
	if ((e = ibv_query_gid(S.ctx, S.port, gid_index, &S.gid))) {
		fail_verbs(e < 0 ? errno : e, "ibv_query_gid");
		goto undo;
	}
	errno = 0;
	if (!(S.pd = ibv_alloc_pd(S.ctx))) {
		fail_verbs(errno, "ibv_alloc_pd");
		goto undo;
	}
	/* A CQ without a channel still works (poll_cq then polls without sleeping). */
	S.ch = ibv_create_comp_channel(S.ctx);
	if (S.dattr.max_cqe > 0 && cqe > S.dattr.max_cqe)
		cqe = S.dattr.max_cqe;
	errno = 0;
	if (!(S.cq = ibv_create_cq(S.ctx, cqe, NULL, S.ch, 0))) {
		fail_verbs(errno, "ibv_create_cq");
		goto undo;
	}
	if (report_port() < 0)
		goto undo;
	const struct ibv_device_attr *d = &S.dattr;
	const char *ac = d->atomic_cap == IBV_ATOMIC_HCA    ? "hca"
			 : d->atomic_cap == IBV_ATOMIC_GLOB ? "glob"
							    : "none";
	out(" max_qp_wr=%d max_sge=%d max_cqe=%d max_qp_rd_atom=%d max_qp_init_rd_atom=%d",
	    d->max_qp_wr, d->max_sge, d->max_cqe, d->max_qp_rd_atom, d->max_qp_init_rd_atom);
	out(" atomic_cap=%s vendor_id=0x%x vendor_part_id=%u", ac, d->vendor_id,
	    d->vendor_part_id);
	char fw[sizeof(d->fw_ver) + 1];
	memcpy(fw, d->fw_ver, sizeof(d->fw_ver));
	fw[sizeof(d->fw_ver)] = 0;
	for (char *c = fw; *c; c++)
		if (*c == ' ' || *c == '"' || (unsigned char)*c < 0x21 || (unsigned char)*c > 0x7e)
			*c = '_';
	out(" fw_ver=%s node_guid=0x%016llx cqe=%d", fw[0] ? fw : "-",
	    be64(&d->node_guid), S.cq->cqe);
	return;
undo:
	destroy_all();
}

static void cmd_query_port(struct req *r)
{
	if (args_done(r) < 0 || need_open() < 0)
		return;
	report_port();
}

static void cmd_create_qp(struct req *r)
{
	const char *ts = arg(r, "type");
	int type;
	struct ibv_qp_init_attr ia;
	memset(&ia, 0, sizeof(ia));
	if (!ts) {
		fail(EINVAL, "create_qp needs type=rc|uc|ud");
		return;
	}
	if (lookup(QP_TYPES, ts, &type) < 0) {
		fail(EINVAL, "type=%.64s is not rc, uc or ud", ts);
		return;
	}
	NUM(r, "sq", 0, 16, 0, 1 << 20, ia.cap.max_send_wr);
	NUM(r, "rq", 0, 16, 0, 1 << 20, ia.cap.max_recv_wr);
	NUM(r, "sge", 0, 1, 0, 1024, ia.cap.max_send_sge);
	NUM(r, "max_inline", 0, 0, 0, 1 << 20, ia.cap.max_inline_data);
	NUM(r, "sig_all", 0, 0, 0, 1, ia.sq_sig_all);
	if (args_done(r) < 0 || need_open() < 0)
		return;
	ia.cap.max_recv_sge = ia.cap.max_send_sge;
	ia.qp_type = (enum ibv_qp_type)type;
	ia.send_cq = S.cq;
	ia.recv_cq = S.cq;
	int id = -1;
	for (int i = 0; i < MAX_QP && id < 0; i++)
		if (!S.qp[i].qp)
			id = i;
	if (id < 0) {
		fail(ENOSPC, "all %d QP slots are in use", MAX_QP);
		return;
	}
	errno = 0;
	struct ibv_qp *qp = ibv_create_qp(S.pd, &ia);
	if (!qp) {
		fail_verbs(errno, "ibv_create_qp");
		return;
	}
	S.qp[id].qp = qp;
	S.last_qp = id;
	out(" qp=%d qpn=%u sq=%u rq=%u send_sge=%u recv_sge=%u max_inline=%u", id, qp->qp_num,
	    ia.cap.max_send_wr, ia.cap.max_recv_wr, ia.cap.max_send_sge, ia.cap.max_recv_sge,
	    ia.cap.max_inline_data);
}

/* Sets attribute `key` from the request (mask bit `bit`) or, when absent and `use_def`,
 * from `def`. */
#define ATTR(key, bit, field, def, use_def, min, max)                                      \
	do {                                                                               \
		uint64_t v_ = 0;                                                           \
		int given_ = arg(r, key) != NULL;                                          \
		if (given_) {                                                              \
			if (num(r, key, 1, 0, (min), (max), &v_) < 0)                      \
				return;                                                    \
		}                                                                          \
		if (given_ || (use_def)) {                                                 \
			a.field = given_ ? v_ : (def);                                     \
			mask |= (bit);                                                     \
		}                                                                          \
	} while (0)

static void cmd_modify_qp(struct req *r)
{
	struct ibv_qp_attr a;
	int mask = IBV_QP_STATE, st, id, defaults, has_dgid;
	memset(&a, 0, sizeof(a));
	struct ibv_qp *qp = qp_arg(r, &id);
	if (!qp)
		return;
	const char *ss = arg(r, "state");
	if (!ss) {
		fail(EINVAL, "modify_qp needs state=");
		return;
	}
	if (lookup(QP_STATES, ss, &st) < 0) {
		fail(EINVAL, "state=%.64s is not reset, init, rtr, rts, sqd, sqe or err", ss);
		return;
	}
	a.qp_state = (enum ibv_qp_state)st;
	NUM(r, "defaults", 0, 1, 0, 1, defaults);
	int rc = qp->qp_type == IBV_QPT_RC, ud = qp->qp_type == IBV_QPT_UD;
	int init = defaults && st == IBV_QPS_INIT, rtr = defaults && st == IBV_QPS_RTR,
	    rts = defaults && st == IBV_QPS_RTS;

	ATTR("pkey_index", IBV_QP_PKEY_INDEX, pkey_index, 0, init, 0, 0xffff);
	ATTR("port", IBV_QP_PORT, port_num, S.port, init, 1, 255);
	ATTR("qkey", IBV_QP_QKEY, qkey, 0, init && ud, 0, UINT32_MAX);
	unsigned acc;
	int acc_given = arg(r, "access") != NULL;
	if (access_arg(r, 0, &acc) < 0)
		return;
	if (acc_given || (init && !ud)) {
		a.qp_access_flags = acc;
		mask |= IBV_QP_ACCESS_FLAGS;
	}
	const char *ms = arg(r, "path_mtu");
	if (ms) {
		int m;
		if (lookup(MTUS, ms, &m) < 0) {
			fail(EINVAL, "path_mtu=%.64s is not 256, 512, 1024, 2048 or 4096", ms);
			return;
		}
		a.path_mtu = (enum ibv_mtu)m;
		mask |= IBV_QP_PATH_MTU;
	} else if (rtr && !ud) {
		struct ibv_port_attr pa;
		int e = ibv_query_port(S.ctx, S.port, &pa);
		if (e) {
			fail_verbs(e, "ibv_query_port");
			return;
		}
		a.path_mtu = pa.active_mtu;
		mask |= IBV_QP_PATH_MTU;
	}
	ATTR("dest_qpn", IBV_QP_DEST_QPN, dest_qp_num, 0, 0, 0, 0xffffff);
	ATTR("rq_psn", IBV_QP_RQ_PSN, rq_psn, 0, rtr && !ud, 0, 0xffffff);
	ATTR("sq_psn", IBV_QP_SQ_PSN, sq_psn, 0, rts, 0, 0xffffff);
	ATTR("max_dest_rd_atomic", IBV_QP_MAX_DEST_RD_ATOMIC, max_dest_rd_atomic, 1, rtr && rc,
	     0, 255);
	ATTR("min_rnr_timer", IBV_QP_MIN_RNR_TIMER, min_rnr_timer, 12, rtr && rc, 0, 31);
	ATTR("timeout", IBV_QP_TIMEOUT, timeout, 14, rts && rc, 0, 31);
	ATTR("retry_cnt", IBV_QP_RETRY_CNT, retry_cnt, 7, rts && rc, 0, 7);
	ATTR("rnr_retry", IBV_QP_RNR_RETRY, rnr_retry, 7, rts && rc, 0, 7);
	ATTR("max_rd_atomic", IBV_QP_MAX_QP_RD_ATOMIC, max_rd_atomic, 1, rts && rc, 0, 255);

	/* The address vector: given by dgid (RoCE has no LIDs, so always with a GRH). */
	if (gid_arg(r, "dgid", &a.ah_attr.grh.dgid, &has_dgid) < 0)
		return;
	uint64_t sgid, hop, tclass, flow, sl;
	if (num(r, "sgid_index", 0, (uint64_t)S.gid_index, 0, 255, &sgid) < 0 ||
	    num(r, "hop_limit", 0, 64, 0, 255, &hop) < 0 ||
	    num(r, "traffic_class", 0, 0, 0, 255, &tclass) < 0 ||
	    num(r, "flow_label", 0, 0, 0, 0xfffff, &flow) < 0 || num(r, "sl", 0, 0, 0, 15, &sl) < 0)
		return;
	if (has_dgid) {
		a.ah_attr.is_global = 1;
		a.ah_attr.port_num = S.port;
		a.ah_attr.sl = (uint8_t)sl;
		a.ah_attr.grh.sgid_index = (uint8_t)sgid;
		a.ah_attr.grh.hop_limit = (uint8_t)hop;
		a.ah_attr.grh.traffic_class = (uint8_t)tclass;
		a.ah_attr.grh.flow_label = (uint32_t)flow;
		mask |= IBV_QP_AV;
	} else if (arg(r, "sgid_index") || arg(r, "hop_limit") || arg(r, "traffic_class") ||
		   arg(r, "flow_label") || arg(r, "sl")) {
		fail(EINVAL, "sgid_index, hop_limit, traffic_class, flow_label and sl need dgid=");
		return;
	}
	if (args_done(r) < 0)
		return;
	int e = ibv_modify_qp(qp, &a, mask);
	if (e) {
		fail_verbs(e, "ibv_modify_qp");
		return;
	}
	out(" qp=%d state=%s", id, ss);
}

static void cmd_query_qp(struct req *r)
{
	int id;
	struct ibv_qp *qp = qp_arg(r, &id);
	if (!qp || args_done(r) < 0)
		return;
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	memset(&a, 0, sizeof(a));
	memset(&ia, 0, sizeof(ia));
	int mask = IBV_QP_STATE | IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX |
		   IBV_QP_PORT | IBV_QP_QKEY | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_TIMEOUT |
		   IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_RQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC |
		   IBV_QP_MIN_RNR_TIMER | IBV_QP_SQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_CAP |
		   IBV_QP_DEST_QPN;
	int e = ibv_query_qp(qp, &a, mask, &ia);
	if (e) {
		fail_verbs(e, "ibv_query_qp");
		return;
	}
	const char *st = name_of(QP_STATES, a.qp_state), *cst = name_of(QP_STATES, a.cur_qp_state);
	const char *ty = name_of(QP_TYPES, qp->qp_type);
	out(" qp=%d qpn=%u type=%s state=%s cur_state=%s path_mtu=%d qkey=%u", id, qp->qp_num,
	    ty ? ty : "other", st ? st : "unknown", cst ? cst : "unknown", mtu_bytes(a.path_mtu),
	    a.qkey);
	out(" rq_psn=%u sq_psn=%u dest_qpn=%u access=%u pkey_index=%u port=%u", a.rq_psn,
	    a.sq_psn, a.dest_qp_num, a.qp_access_flags, a.pkey_index, a.port_num);
	out(" timeout=%u retry_cnt=%u rnr_retry=%u min_rnr_timer=%u max_rd_atomic=%u", a.timeout,
	    a.retry_cnt, a.rnr_retry, a.min_rnr_timer, a.max_rd_atomic);
	out(" max_dest_rd_atomic=%u sq_draining=%u", a.max_dest_rd_atomic, a.sq_draining);
	out_gid("dgid", &a.ah_attr.grh.dgid);
	out(" sgid_index=%u hop_limit=%u traffic_class=%u flow_label=%u sl=%u",
	    a.ah_attr.grh.sgid_index, a.ah_attr.grh.hop_limit, a.ah_attr.grh.traffic_class,
	    a.ah_attr.grh.flow_label, a.ah_attr.sl);
	out(" max_send_wr=%u max_recv_wr=%u max_send_sge=%u max_recv_sge=%u max_inline=%u",
	    a.cap.max_send_wr, a.cap.max_recv_wr, a.cap.max_send_sge, a.cap.max_recv_sge,
	    a.cap.max_inline_data);
}

static void cmd_reg_mr(struct req *r)
{
	uint64_t len;
	unsigned acc;
	if (num(r, "len", 1, 0, 1, MAX_MR_LEN, &len) < 0 ||
	    access_arg(r, IBV_ACCESS_LOCAL_WRITE, &acc) < 0 || args_done(r) < 0 || need_open() < 0)
		return;
	int id = -1;
	for (int i = 0; i < MAX_MR && id < 0; i++)
		if (!S.mr[i].mr)
			id = i;
	if (id < 0) {
		fail(ENOSPC, "all %d MR slots are in use", MAX_MR);
		return;
	}
	void *buf = NULL;
	int e = posix_memalign(&buf, 4096, (size_t)len);
	if (e) {
		fail(e, "cannot allocate %llu bytes", (unsigned long long)len);
		return;
	}
	memset(buf, 0, (size_t)len);
	errno = 0;
	struct ibv_mr *mr = ibv_reg_mr(S.pd, buf, (size_t)len, (int)acc);
	if (!mr) {
		fail_verbs(errno, "ibv_reg_mr");
		free(buf);
		return;
	}
	S.mr[id].mr = mr;
	S.mr[id].buf = buf;
	S.mr[id].len = (size_t)len;
	out(" mr=%d addr=0x%llx len=%llu lkey=%u rkey=%u", id,
	    (unsigned long long)(uintptr_t)buf, (unsigned long long)len, mr->lkey, mr->rkey);
}

/* `off`/`len` inside MR `id`. */
static int mr_range(int id, uint64_t off, uint64_t len)
{
	if (mr_lookup(id) < 0)
		return -1;
	if (off > S.mr[id].len || len > S.mr[id].len - off)
		return fail(ERANGE, "off=%llu len=%llu is outside MR %d (%zu bytes)",
			    (unsigned long long)off, (unsigned long long)len, id, S.mr[id].len);
	return 0;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static void cmd_mr_write(struct req *r)
{
	int id;
	uint64_t off;
	const char *hex;
	if (id_arg(r, "id", 1, 0, MAX_MR - 1, &id) < 0 || num(r, "off", 0, 0, 0, UINT64_MAX, &off) < 0)
		return;
	if (!(hex = arg(r, "hex"))) {
		fail(EINVAL, "mr_write needs hex=");
		return;
	}
	if (args_done(r) < 0 || need_open() < 0)
		return;
	size_t n = strlen(hex);
	if (n % 2) {
		fail(EINVAL, "hex= has an odd number of digits");
		return;
	}
	for (size_t i = 0; i < n; i++)
		if (hexval(hex[i]) < 0) {
			fail(EINVAL, "hex= has a non-hex character at %zu", i);
			return;
		}
	if (mr_range(id, off, n / 2) < 0)
		return;
	unsigned char *p = S.mr[id].buf + off;
	for (size_t i = 0; i < n / 2; i++)
		p[i] = (unsigned char)(hexval(hex[2 * i]) << 4 | hexval(hex[2 * i + 1]));
	out(" len=%zu", n / 2);
}

static void cmd_mr_read(struct req *r)
{
	int id;
	uint64_t off, len;
	if (id_arg(r, "id", 1, 0, MAX_MR - 1, &id) < 0 ||
	    num(r, "off", 0, 0, 0, UINT64_MAX, &off) < 0 ||
	    num(r, "len", 1, 0, 0, MAX_IO_LEN, &len) < 0 || args_done(r) < 0 || need_open() < 0 ||
	    mr_range(id, off, len) < 0)
		return;
	static const char digits[] = "0123456789abcdef";
	out(" hex=");
	r_reserve((size_t)len * 2);
	if (R.oom)
		return;
	const unsigned char *p = S.mr[id].buf + off;
	for (uint64_t i = 0; i < len; i++) {
		R.p[R.len++] = digits[p[i] >> 4];
		R.p[R.len++] = digits[p[i] & 15];
	}
	R.p[R.len] = 0;
}

static void cmd_create_ah(struct req *r)
{
	struct ibv_ah_attr a;
	int has;
	memset(&a, 0, sizeof(a));
	if (gid_arg(r, "dgid", &a.grh.dgid, &has) < 0)
		return;
	if (!has) {
		fail(EINVAL, "create_ah needs dgid=");
		return;
	}
	NUM(r, "sgid_index", 0, (uint64_t)S.gid_index, 0, 255, a.grh.sgid_index);
	NUM(r, "hop_limit", 0, 64, 0, 255, a.grh.hop_limit);
	NUM(r, "traffic_class", 0, 0, 0, 255, a.grh.traffic_class);
	NUM(r, "flow_label", 0, 0, 0, 0xfffff, a.grh.flow_label);
	NUM(r, "sl", 0, 0, 0, 15, a.sl);
	if (args_done(r) < 0 || need_open() < 0)
		return;
	a.is_global = 1;
	a.port_num = S.port;
	int id = -1;
	for (int i = 0; i < MAX_AH && id < 0; i++)
		if (!S.ah[i])
			id = i;
	if (id < 0) {
		fail(ENOSPC, "all %d AH slots are in use", MAX_AH);
		return;
	}
	errno = 0;
	struct ibv_ah *ah = ibv_create_ah(S.pd, &a);
	if (!ah) {
		fail_verbs(errno, "ibv_create_ah");
		return;
	}
	S.ah[id] = ah;
	out(" ah=%d", id);
}

/* The optional SGE of post_send/post_recv: mr=, off=, len=, lkey=; 0 or 1 SGE in `*n`. */
static int sge_args(struct req *r, struct ibv_sge *sge, int *n)
{
	uint64_t off, len, lkey;
	int has_mr = arg(r, "mr") != NULL, id = 0;
	if ((has_mr && id_arg(r, "mr", 1, 0, MAX_MR - 1, &id) < 0) ||
	    num(r, "off", 0, 0, 0, UINT64_MAX, &off) < 0 ||
	    num(r, "len", 0, 0, 0, UINT32_MAX, &len) < 0 ||
	    num(r, "lkey", 0, 0, 0, UINT32_MAX, &lkey) < 0)
		return -1;
	*n = 0;
	if (!has_mr) {
		if (arg(r, "off") || arg(r, "len") || arg(r, "lkey"))
			return fail(EINVAL, "off, len and lkey need mr=");
		return 0;
	}
	if (need_open() < 0 || mr_range(id, off, len) < 0)
		return -1;
	sge->addr = (uint64_t)(uintptr_t)(S.mr[id].buf + off);
	sge->length = (uint32_t)len;
	sge->lkey = arg(r, "lkey") ? (uint32_t)lkey : S.mr[id].mr->lkey;
	*n = 1;
	return 0;
}

static void cmd_post_send(struct req *r)
{
	struct ibv_send_wr wr, *bad = NULL;
	struct ibv_sge sge;
	int op, n, sig, inl, sol, fence, ah = -1;
	uint64_t raddr, rkey, imm, cmp, swap, add, rqpn, rqkey;
	memset(&wr, 0, sizeof(wr));
	struct ibv_qp *qp = qp_arg(r, NULL);
	if (!qp)
		return;
	const char *os = arg(r, "opcode");
	if (!os) {
		fail(EINVAL, "post_send needs opcode=");
		return;
	}
	if (lookup(SEND_OPCODES, os, &op) < 0) {
		fail(EINVAL,
		     "opcode=%.64s is not send, send_imm, write, write_imm, read, "
		     "cmp_swp or fetch_add",
		     os);
		return;
	}
	if (sge_args(r, &sge, &n) < 0)
		return;
	NUM(r, "wr_id", 0, 0, 0, UINT64_MAX, wr.wr_id);
	NUM(r, "signaled", 0, 1, 0, 1, sig);
	NUM(r, "inline", 0, 0, 0, 1, inl);
	NUM(r, "solicited", 0, 0, 0, 1, sol);
	NUM(r, "fence", 0, 0, 0, 1, fence);
	if (num(r, "raddr", 0, 0, 0, UINT64_MAX, &raddr) < 0 ||
	    num(r, "rkey", 0, 0, 0, UINT32_MAX, &rkey) < 0 ||
	    num(r, "imm", 0, 0, 0, UINT32_MAX, &imm) < 0 ||
	    num(r, "compare", 0, 0, 0, UINT64_MAX, &cmp) < 0 ||
	    num(r, "swap", 0, 0, 0, UINT64_MAX, &swap) < 0 ||
	    num(r, "add", 0, 0, 0, UINT64_MAX, &add) < 0 ||
	    num(r, "remote_qpn", 0, 0, 0, 0xffffff, &rqpn) < 0 ||
	    num(r, "remote_qkey", 0, 0, 0, UINT32_MAX, &rqkey) < 0)
		return;
	if (arg(r, "ah") && id_arg(r, "ah", 1, 0, MAX_AH - 1, &ah) < 0)
		return;
	if (args_done(r) < 0)
		return;
	wr.opcode = (enum ibv_wr_opcode)op;
	wr.sg_list = n ? &sge : NULL;
	wr.num_sge = n;
	wr.send_flags = (sig ? IBV_SEND_SIGNALED : 0) | (inl ? IBV_SEND_INLINE : 0) |
			(sol ? IBV_SEND_SOLICITED : 0) | (fence ? IBV_SEND_FENCE : 0);
	switch (op) {
	case IBV_WR_SEND_WITH_IMM:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		wr.imm_data = htonl((uint32_t)imm);
		break;
	default:
		break;
	}
	switch (op) {
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
	case IBV_WR_RDMA_READ:
		wr.wr.rdma.remote_addr = raddr;
		wr.wr.rdma.rkey = (uint32_t)rkey;
		break;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		wr.wr.atomic.remote_addr = raddr;
		wr.wr.atomic.rkey = (uint32_t)rkey;
		wr.wr.atomic.compare_add = op == IBV_WR_ATOMIC_CMP_AND_SWP ? cmp : add;
		wr.wr.atomic.swap = swap;
		break;
	default:
		break;
	}
	if (qp->qp_type == IBV_QPT_UD) {
		if (ah < 0) {
			fail(EINVAL, "a UD post_send needs ah= (create_ah)");
			return;
		}
		if (!S.ah[ah]) {
			fail(ENOENT, "no AH %d", ah);
			return;
		}
		wr.wr.ud.ah = S.ah[ah];
		wr.wr.ud.remote_qpn = (uint32_t)rqpn;
		wr.wr.ud.remote_qkey = (uint32_t)rqkey;
	} else if (ah >= 0) {
		fail(EINVAL, "ah= is for UD QPs only");
		return;
	}
	int e = ibv_post_send(qp, &wr, &bad);
	if (e) {
		fail_verbs(e, "ibv_post_send");
		return;
	}
	out(" wr_id=%llu", (unsigned long long)wr.wr_id);
}

static void cmd_post_recv(struct req *r)
{
	struct ibv_recv_wr wr, *bad = NULL;
	struct ibv_sge sge;
	int n;
	memset(&wr, 0, sizeof(wr));
	struct ibv_qp *qp = qp_arg(r, NULL);
	if (!qp || sge_args(r, &sge, &n) < 0)
		return;
	NUM(r, "wr_id", 0, 0, 0, UINT64_MAX, wr.wr_id);
	if (args_done(r) < 0)
		return;
	wr.sg_list = n ? &sge : NULL;
	wr.num_sge = n;
	int e = ibv_post_recv(qp, &wr, &bad);
	if (e) {
		fail_verbs(e, "ibv_post_recv");
		return;
	}
	out(" wr_id=%llu", (unsigned long long)wr.wr_id);
}

static int64_t now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void out_wc(int i, const struct ibv_wc *wc)
{
	out(" wc%d.wr_id=%llu wc%d.status=%d", i, (unsigned long long)wc->wr_id, i, wc->status);
	char key[32];
	snprintf(key, sizeof(key), "wc%d.status_str", i);
	out_quoted(key, ibv_wc_status_str(wc->status));
	const char *op = name_of(WC_OPCODES, wc->opcode);
	if (op)
		out(" wc%d.opcode=%s", i, op);
	else
		out(" wc%d.opcode=%d", i, wc->opcode);
	out(" wc%d.byte_len=%u", i, wc->byte_len);
	if (wc->wc_flags & IBV_WC_WITH_IMM)
		out(" wc%d.imm=%u", i, ntohl(wc->imm_data));
	out(" wc%d.flags=%u wc%d.qp_num=%u wc%d.src_qp=%u wc%d.vendor_err=%u", i, wc->wc_flags,
	    i, wc->qp_num, i, wc->src_qp, i, wc->vendor_err);
}

static void cmd_poll_cq(struct req *r)
{
	int timeout, max, min;
	NUM(r, "timeout_ms", 0, 0, 0, 600000, timeout);
	NUM(r, "max", 0, 16, 1, MAX_POLL, max);
	NUM(r, "min", 0, 1, 0, MAX_POLL, min);
	if (args_done(r) < 0 || need_open() < 0)
		return;
	if (min > max)
		min = max;
	struct ibv_wc wc[MAX_POLL];
	int got = 0;
	int64_t deadline = now_ms() + timeout;
	for (;;) {
		int n = ibv_poll_cq(S.cq, max - got, wc + got);
		if (n < 0) {
			fail(EIO, "ibv_poll_cq returned %d", n);
			return;
		}
		got += n;
		int64_t left = deadline - now_ms();
		if (got >= min || got == max || left <= 0)
			break;
		if (!S.ch)
			continue; /* No channel: poll again (busy) until the deadline. */
		int e = ibv_req_notify_cq(S.cq, 0);
		if (e) {
			fail_verbs(e, "ibv_req_notify_cq");
			return;
		}
		/* A completion may have arrived before the request: poll once more. */
		n = ibv_poll_cq(S.cq, max - got, wc + got);
		if (n < 0) {
			fail(EIO, "ibv_poll_cq returned %d", n);
			return;
		}
		got += n;
		if (got >= min || got == max)
			break;
		struct pollfd pfd = { .fd = S.ch->fd, .events = POLLIN };
		int pr = poll(&pfd, 1, left > INT_MAX ? INT_MAX : (int)left);
		if (pr < 0 && errno != EINTR) {
			fail_verbs(errno, "poll(completion channel)");
			return;
		}
		if (pr > 0) {
			struct ibv_cq *ecq;
			void *ectx;
			if (ibv_get_cq_event(S.ch, &ecq, &ectx) == 0)
				ibv_ack_cq_events(ecq, 1);
		}
	}
	out(" n=%d", got);
	for (int i = 0; i < got; i++)
		out_wc(i, &wc[i]);
}

static void cmd_get_async_event(struct req *r)
{
	int timeout;
	NUM(r, "timeout_ms", 0, 0, 0, 600000, timeout);
	if (args_done(r) < 0 || need_open() < 0)
		return;
	struct pollfd pfd = { .fd = S.ctx->async_fd, .events = POLLIN };
	int pr = poll(&pfd, 1, timeout);
	if (pr < 0) {
		fail_verbs(errno, "poll(async_fd)");
		return;
	}
	if (pr == 0) {
		out(" event=none");
		return;
	}
	struct ibv_async_event ev;
	if (ibv_get_async_event(S.ctx, &ev)) {
		/* Readable, yet nothing to take (the async fd is non-blocking): none. */
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			out(" event=none");
		else
			fail_verbs(errno, "ibv_get_async_event");
		return;
	}
	out(" event=%d", ev.event_type);
	out_quoted("event_str", ibv_event_type_str(ev.event_type));
	switch (ev.event_type) {
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		out(" qpn=%u", ev.element.qp ? ev.element.qp->qp_num : 0);
		break;
	case IBV_EVENT_CQ_ERR:
		out(" cq=1");
		break;
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED:
		out(" srq=1");
		break;
	case IBV_EVENT_PORT_ACTIVE:
	case IBV_EVENT_PORT_ERR:
	case IBV_EVENT_LID_CHANGE:
	case IBV_EVENT_PKEY_CHANGE:
	case IBV_EVENT_SM_CHANGE:
	case IBV_EVENT_CLIENT_REREGISTER:
	case IBV_EVENT_GID_CHANGE:
		out(" port=%d", ev.element.port_num);
		break;
	default:
		break;
	}
	ibv_ack_async_event(&ev);
}

static void cmd_counters(struct req *r)
{
	if (args_done(r) < 0 || need_open() < 0)
		return;
	char dir[512];
	snprintf(dir, sizeof(dir), "/sys/class/infiniband/%s/ports/%u/hw_counters", S.dev, S.port);
	DIR *d = opendir(dir);
	int n = 0;
	if (d) {
		struct dirent *e;
		while ((e = readdir(d))) {
			if (e->d_name[0] == '.' || !strcmp(e->d_name, "lifespan"))
				continue;
			char path[1024], text[64];
			snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
			FILE *f = fopen(path, "r");
			if (!f)
				continue;
			size_t k = fread(text, 1, sizeof(text) - 1, f);
			fclose(f);
			text[k] = 0;
			text[strcspn(text, "\n")] = 0;
			uint64_t v;
			if (parse_u64(text, &v) < 0)
				continue;
			char key[256];
			snprintf(key, sizeof(key), "%.255s", e->d_name);
			for (char *c = key; *c; c++)
				if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
				      (*c >= '0' && *c <= '9') || *c == '_'))
					*c = '_';
			/* `n` is the count's own key; a counter of that name gets a prefix. */
			out(strcmp(key, "n") ? " %s=%llu" : " hw_%s=%llu", key, (unsigned long long)v);
			n++;
		}
		closedir(d);
	}
	out(" n=%d", n);
}

static void cmd_destroy(struct req *r)
{
	int has_qp = arg(r, "qp") != NULL, has_mr = arg(r, "mr") != NULL,
	    has_ah = arg(r, "ah") != NULL, id = 0;
	if (has_qp + has_mr + has_ah > 1) {
		fail(EINVAL, "destroy takes one of qp=, mr=, ah= (or none: all)");
		return;
	}
	if (has_qp && id_arg(r, "qp", 1, 0, MAX_QP - 1, &id) < 0)
		return;
	if (has_mr && id_arg(r, "mr", 1, 0, MAX_MR - 1, &id) < 0)
		return;
	if (has_ah && id_arg(r, "ah", 1, 0, MAX_AH - 1, &id) < 0)
		return;
	if (args_done(r) < 0)
		return;
	if (has_qp) {
		if (!S.qp[id].qp) {
			fail(ENOENT, "no QP %d", id);
			return;
		}
		int e = ibv_destroy_qp(S.qp[id].qp);
		if (e) {
			fail_verbs(e, "ibv_destroy_qp");
			return;
		}
		S.qp[id].qp = NULL;
		if (S.last_qp == id) {
			S.last_qp = -1;
			for (int i = 0; i < MAX_QP; i++)
				if (S.qp[i].qp)
					S.last_qp = i;
		}
	} else if (has_mr) {
		if (mr_lookup(id) < 0)
			return;
		int e = ibv_dereg_mr(S.mr[id].mr);
		if (e) {
			fail_verbs(e, "ibv_dereg_mr");
			return;
		}
		free(S.mr[id].buf);
		S.mr[id].mr = NULL;
		S.mr[id].buf = NULL;
	} else if (has_ah) {
		if (!S.ah[id]) {
			fail(ENOENT, "no AH %d", id);
			return;
		}
		int e = ibv_destroy_ah(S.ah[id]);
		if (e) {
			fail_verbs(e, "ibv_destroy_ah");
			return;
		}
		S.ah[id] = NULL;
	} else {
		destroy_all();
	}
}

/* ---- serving ---------------------------------------------------------------------- */

/* Runs one request line; returns 1 when the controller said quit. */
static int handle(char *line)
{
	struct req r;
	r_reset();
	out("ok");
	if (parse_line(line, &r) < 0)
		return 0;
	const char *c = r.cmd;
	int quit = 0;
	if (!strcmp(c, "hello")) {
		if (args_done(&r) == 0)
			out(" agent=uroce-conform-agent proto=1");
	} else if (!strcmp(c, "open"))
		cmd_open(&r);
	else if (!strcmp(c, "query_port"))
		cmd_query_port(&r);
	else if (!strcmp(c, "create_qp"))
		cmd_create_qp(&r);
	else if (!strcmp(c, "modify_qp"))
		cmd_modify_qp(&r);
	else if (!strcmp(c, "query_qp"))
		cmd_query_qp(&r);
	else if (!strcmp(c, "reg_mr"))
		cmd_reg_mr(&r);
	else if (!strcmp(c, "mr_write"))
		cmd_mr_write(&r);
	else if (!strcmp(c, "mr_read"))
		cmd_mr_read(&r);
	else if (!strcmp(c, "create_ah"))
		cmd_create_ah(&r);
	else if (!strcmp(c, "post_send"))
		cmd_post_send(&r);
	else if (!strcmp(c, "post_recv"))
		cmd_post_recv(&r);
	else if (!strcmp(c, "poll_cq"))
		cmd_poll_cq(&r);
	else if (!strcmp(c, "get_async_event"))
		cmd_get_async_event(&r);
	else if (!strcmp(c, "counters"))
		cmd_counters(&r);
	else if (!strcmp(c, "destroy"))
		cmd_destroy(&r);
	else if (!strcmp(c, "quit")) {
		if (args_done(&r) == 0) {
			out(" bye=1");
			quit = 1;
		}
	} else
		fail(EINVAL, "unknown command '%.64s'", c);
	return quit;
}

static int send_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t k = send(fd, p, n, 0);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

static int reply(int fd)
{
	if (R.oom || !R.p) {
		static const char nomem[] = "err errno=12 msg=\"out of memory\"\n";
		return send_all(fd, nomem, sizeof(nomem) - 1);
	}
	if (verbose)
		fprintf(stderr, "agent: <- %.*s\n", (int)(R.len > 400 ? 400 : R.len), R.p);
	R.p[R.len] = '\n';
	int e = send_all(fd, R.p, R.len + 1);
	R.p[R.len] = 0;
	return e;
}

/* Runs the request in buf[0..len) (its newline removed) and sends the reply; -1 to stop
 * serving (quit, or the controller is gone). */
static int run_line(int fd, char *line, size_t len)
{
	int quit = 0;
	if (len && line[len - 1] == '\r')
		len--;
	line[len] = 0;
	if (strlen(line) != len) {
		r_reset();
		fail(EINVAL, "request contains a NUL byte");
	} else {
		if (verbose)
			fprintf(stderr, "agent: -> %.400s\n", line);
		quit = handle(line);
	}
	return reply(fd) < 0 || quit ? -1 : 0;
}

/* Serves one controller until it disconnects or quits. */
static void serve(int fd)
{
	size_t cap = 65536, len = 0;
	char *buf = malloc(cap);
	int discarding = 0, stop = 0;
	if (!buf)
		return;
	while (!stop) {
		char *nl;
		while (!stop && (nl = memchr(buf, '\n', len))) {
			size_t ll = (size_t)(nl - buf);
			if (discarding)
				discarding = 0;
			else
				stop = run_line(fd, buf, ll) < 0;
			memmove(buf, nl + 1, len - ll - 1);
			len -= ll + 1;
		}
		if (stop)
			break;
		if (len == cap) {
			char *nb = cap < MAX_LINE ? realloc(buf, cap * 2) : NULL;
			if (nb) {
				buf = nb;
				cap *= 2;
			} else {
				/* Too long (or no memory): refuse the line once, skip to its end. */
				if (!discarding) {
					r_reset();
					fail(E2BIG, "request line longer than %zu bytes", cap);
					if (reply(fd) < 0)
						break;
				}
				discarding = 1;
				len = 0;
			}
		}
		ssize_t k = recv(fd, buf + len, cap - len, 0);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		len += (size_t)k;
	}
	free(buf);
	destroy_all();
}

static void usage(void)
{
	fprintf(stderr, "usage: agent [-a ADDR] [-1] [-v] PORT\n");
	exit(2);
}

int main(int argc, char **argv)
{
	const char *addr = "127.0.0.1";
	int once = 0, opt;
	while ((opt = getopt(argc, argv, "a:1v")) != -1) {
		if (opt == 'a')
			addr = optarg;
		else if (opt == '1')
			once = 1;
		else if (opt == 'v')
			verbose = 1;
		else
			usage();
	}
	if (optind + 1 != argc)
		usage();
	uint64_t port;
	if (parse_u64(argv[optind], &port) < 0 || port > 65535)
		usage();
	signal(SIGPIPE, SIG_IGN);

	struct addrinfo hints, *ai = NULL;
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICHOST | AI_NUMERICSERV;
	char ports[8];
	snprintf(ports, sizeof(ports), "%u", (unsigned)port);
	int e = getaddrinfo(addr, ports, &hints, &ai);
	if (e) {
		fprintf(stderr, "agent: %s: %s\n", addr, gai_strerror(e));
		return 1;
	}
	int ls = socket(ai->ai_family, SOCK_STREAM, 0);
	int one = 1;
	if (ls < 0 || setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(ls, ai->ai_addr, ai->ai_addrlen) < 0 || listen(ls, 4) < 0) {
		fprintf(stderr, "agent: cannot listen on %s port %u: %s\n", addr, (unsigned)port,
			strerror(errno));
		return 1;
	}
	freeaddrinfo(ai);
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	if (getsockname(ls, (struct sockaddr *)&ss, &sl) < 0) {
		perror("agent: getsockname");
		return 1;
	}
	unsigned bound = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
						  : ntohs(((struct sockaddr_in *)&ss)->sin_port);
	printf("listening addr=%s port=%u\n", addr, bound);
	fflush(stdout);
	for (;;) {
		int fd = accept(ls, NULL, NULL);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			perror("agent: accept");
			return 1;
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		serve(fd);
		close(fd);
		if (once)
			break;
	}
	close(ls);
	return 0;
}
