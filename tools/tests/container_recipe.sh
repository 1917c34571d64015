#!/bin/sh
# The recipe of README.md's "uroce in CI and containers": uroce as the RDMA device of a job
# with no kernel module, no /dev/infiniband and no privilege, here inside a fresh network
# namespace (where only `lo` exists, and it is down). container_recipe.rs runs this file as
# an unprivileged user under `unshare --user --map-root-user --net`, so it cannot rot:
#
#   setpriv --reuid=nobody --regid=nogroup --clear-groups \
#     unshare --user --map-root-user --net sh container_recipe.sh
#
# UROCE: the uroce binary (with the drop-in libraries of `make cabi` in uroce-lib/ beside
# it); RDMA_OPS: a Rust program on uroce_verbs (the rdma_ops example). Every wait is
# bounded; the clients start once their server's TCP port is listening.
set -eu
U=${UROCE:-uroce}
RDMA_OPS=${RDMA_OPS:-rdma_ops}
S=127.29.0.1 # the servers' device
C=127.29.0.2 # the clients' device

# Waits (at most 10 s) until something listens on TCP port $1 in this network namespace,
# or in process $2's.
wait_port() {
	hex=$(printf '%04X' "$1")
	i=0
	until grep -q ":$hex 00000000:0000 0A" "/proc/${2:-self}/net/tcp"; do
		i=$((i + 1))
		if [ "$i" -gt 200 ]; then
			echo "recipe: nothing listens on TCP port $1" >&2
			return 1
		fi
		sleep 0.05
	done
}

# 1. Loopback up: the mapped root of a user namespace may configure its own network
#    namespace. Every 127.x address is then on lo, with no `ip addr add`.
ip link set lo up

# 2. What uroce finds here (exits 1 when a check fails).
UROCE_DEVICES=uroce0=$S,uroce1=$C "$U" doctor

# 3. A user's C program on the drop-in libibverbs: Debian's unmodified rdma-core tools.
"$U" exec --devices uroce0=$S -- ibv_devinfo
"$U" exec --devices uroce0=$S -- ibv_rc_pingpong -g 0 -n 100 &
server=$!
wait_port 18515
"$U" exec --devices uroce1=$C -- ibv_rc_pingpong -g 0 -n 100 $S
wait $server

# 4. A Rust program on uroce_verbs (no library needed: uroce is linked in), two processes.
"$RDMA_OPS" server $S &
server=$!
wait_port 18600
"$RDMA_OPS" client $C $S
wait $server

# 5. The raw-frame backend (AF_PACKET: every ICRC checked) needs CAP_NET_RAW, which the
#    mapped root has for this namespace's interfaces, and an interface other than lo (it
#    refuses loopback): a veth pair to a second network namespace, made here without
#    privilege too. The server runs in the second namespace, the client here.
ip link add uroce-a type veth peer name uroce-b
ip addr add 10.29.0.1/24 dev uroce-a
ip link set uroce-a up
unshare --net sh -c '
	i=0
	until ip link show uroce-b >/dev/null 2>&1; do
		i=$((i + 1))
		[ "$i" -le 200 ] || { echo "recipe: uroce-b never arrived" >&2; exit 1; }
		sleep 0.05
	done
	ip addr add 10.29.0.2/24 dev uroce-b
	ip link set uroce-b up
	exec "$0" pingpong --backend raw --ip 10.29.0.2 -n 100 --timeout 20
' "$U" &
server=$!
i=0
until [ "$(readlink /proc/$server/ns/net)" != "$(readlink /proc/self/ns/net)" ]; do
	i=$((i + 1))
	[ "$i" -le 200 ] || { echo "recipe: no second namespace" >&2; exit 1; }
	sleep 0.01
done
ip link set uroce-b netns $server
wait_port 18515 $server
"$U" pingpong --backend raw --ip 10.29.0.1 -n 100 --timeout 20 10.29.0.2
wait $server
echo "recipe: all passed"
