#!/bin/bash
# `make lab-bench`: uroce against Linux rxe on the same emulated machines, the lab's TCG
# guests (one CPU each). Figures only: nothing is asserted.
#
# Each round boots the lab once per stack (STACKS, below): two guests without rxe
# (RXELAB_RXE=0) running uroce from a read-only share of the release build, for `uroce
# perf`, for perftest on uroce's library (UDP backend, the default) and for the same
# receiving through a packet socket's ring (UROCE_RX_RING=1; the guests run as root), then
# two guests with rxe: each stack on freshly booted guests. The same
# workloads run on all, server in guest 1, client in guest 2: on uroce, `uroce perf` and, when the
# drop-in libibverbs is built, Debian's own perftest binaries through `uroce exec`; on rxe,
# the same perftest binaries. Rounds alternate (RUNS, default 2, since the emulated guests
# are noisy) and the table gives the median and the range of each figure with the ratio of
# the medians.
#
# Each uroce round also measures the guests' own UDP floor (plain UDP, no RDMA: the bound of
# any userspace stack over UDP there) and the same ping-pong on a packet socket's receive
# ring (the bound of the raw backend), and a second table sets them beside rxe.
#
#   tests/lab/bench.sh [PATTERN]     only the workloads whose name matches (grep -E; "floor":
#                                    the UDP floor)
#
# Environment: RUNS, STACKS, RXELAB_DIR, OUTDIR (default target/lab-bench), UROCE_BIN_DIR (default
# target/release: the uroce binary and, if built, uroce-lib/), UROCE_ENV (NAME=VALUE words
# set for uroce's side in the guests, e.g. UROCE_ENV="UROCE_ACK_DELAY_US=300" for an A/B run).
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LAB=${RXELAB_DIR:-$ROOT/../shared/rxe-lab}
LAB=$(cd "$LAB" && pwd) || { echo "lab-bench: no rxe-lab at $LAB" >&2; exit 1; }
BIN=${UROCE_BIN_DIR:-$ROOT/target/release}
OUTDIR=${OUTDIR:-$ROOT/target/lab-bench}
RUNS=${RUNS:-2}
PATTERN=${1:-}
UROCE_ENV=${UROCE_ENV:-}
[ -x "$BIN/uroce" ] || { echo "lab-bench: $BIN/uroce missing (cargo build --release --bin uroce)" >&2; exit 1; }
mkdir -p "$OUTDIR"
SHARE=$OUTDIR/share
rm -rf "$SHARE"; mkdir -p "$SHARE"
cp "$BIN/uroce" "$SHARE/"
[ -d "$BIN/uroce-lib" ] && cp -r "$BIN/uroce-lib" "$SHARE/"
CABI=0; [ -e "$SHARE/uroce-lib/libibverbs.so.1" ] && CABI=1
# The stacks, each on freshly booted guests, in this order (rxe last): uroce-perf (`uroce
# perf`), and with the drop-in library Debian's perftest on uroce: uroce-ib (the UDP backend,
# the default), uroce-ring (the UDP backend receiving through a packet socket's ring,
# UROCE_RX_RING=1) and, if named, uroce-raw (the raw-frame backend, UROCE_BACKEND=raw).
STACKS=${STACKS:-uroce-perf uroce-ib uroce-ring rxe}
if [ $CABI = 0 ]; then
    STACKS=$(for s in $STACKS; do case $s in uroce-ib|uroce-ring|uroce-raw) ;; *) echo $s ;; esac; done | xargs)
fi
# The guests' own UDP floor (no RDMA): tests/lab/udp_pingpong.c and udp_blast.c, built here
# and run in the guests without rxe; skipped without a C compiler.
FLOOR=0
if command -v cc >/dev/null &&
    cc -O2 -static -o "$SHARE/udp_pingpong" "$ROOT/tests/lab/udp_pingpong.c" 2>/dev/null &&
    cc -O2 -static -o "$SHARE/udp_blast" "$ROOT/tests/lab/udp_blast.c" 2>/dev/null &&
    cc -O2 -static -o "$SHARE/ring_pingpong" "$ROOT/tests/lab/ring_pingpong.c" 2>/dev/null; then
    FLOOR=1
else
    echo "lab-bench: no C compiler (cc): the guests' UDP floor is not measured" >&2
fi

# Every call to a guest ends within 150 s on the host's side too (the workloads' own timeout
# is 90 s in the guest): on 2026-12-06 rxe's guest lost its network during a 64-byte
# ib_write_bw of 100000 messages and the call waited for its answer forever.
gsh() { RXELAB_TIMEOUT=${RXELAB_TIMEOUT:-150} bash "$LAB/guest.sh" "$@"; }
trap 'bash "$LAB/down.sh" >/dev/null 2>&1' EXIT
trap 'exit 130' INT TERM

# name | unit (bw: MB/s, more is better; lat: usec, less is better) | perftest arguments
# The -steady rows run 5 (64 KiB) and 20 (64 B) times as many messages as the short rows,
# about 5 s or more on each stack. The short runs last a quarter of a second on uroce, and
# there a new process's first messages weigh (the emulated CPU translates a program's code
# afresh in each process, uroce's library included; rxe's code is the kernel's, translated
# once). On 2026-12-06, 64-byte ib_write_bw on uroce gave 1.38-1.58 MB/s at -n 5000 and
# 1.89-2.05 at -n 100000; rxe 0.70 at both. They run last, so that the latencies stay those
# of guests that have run six bandwidth tests, as before they were added.
WORKLOADS="
write_bw-64K|bw|write_bw|-s 65536 -n 1000 -m 4096
read_bw-64K|bw|read_bw|-s 65536 -n 1000 -m 4096
send_bw-64K|bw|send_bw|-s 65536 -n 1000 -m 4096
write_bw-64|bw|write_bw|-s 64 -n 5000 -m 4096
read_bw-64|bw|read_bw|-s 64 -n 5000 -m 4096
send_bw-64|bw|send_bw|-s 64 -n 5000 -m 4096
send_lat-8|lat|send_lat|-s 8 -n 2000 -m 4096
write_lat-8|lat|write_lat|-s 8 -n 2000 -m 4096
read_lat-8|lat|read_lat|-s 8 -n 2000 -m 4096
write_bw-64K-steady|bw|write_bw|-s 65536 -n 5000 -m 4096
read_bw-64K-steady|bw|read_bw|-s 65536 -n 5000 -m 4096
send_bw-64K-steady|bw|send_bw|-s 65536 -n 5000 -m 4096
write_bw-64-steady|bw|write_bw|-s 64 -n 100000 -m 4096
read_bw-64-steady|bw|read_bw|-s 64 -n 100000 -m 4096
send_bw-64-steady|bw|send_bw|-s 64 -n 100000 -m 4096
"

# The figure of a perftest-style result file: BW average (bw) or t_typical (lat).
figure() {
    local unit=$1 f=$2
    grep -m1 -E '^ [0-9]+ +[0-9]+ ' "$f" 2>/dev/null |
        awk -v u="$unit" '{ print (u == "bw" ? $4 : $5) }'
}

# pair STACK NAME SERVER_CMD CLIENT_CMD: server in guest 1, client in guest 2 (connecting to
# 10.99.0.11); appends "STACK NAME FIGURE" to $OUTDIR/figures.txt.
pair() {
    local stack=$1 name=$2 unit=$3 scmd=$4 ccmd=$5 out=$OUTDIR/$stack-$name-r$R
    gsh 1 "timeout 90 $scmd > /tmp/server.txt 2>&1 &" >/dev/null 2>&1
    local end=$(( $(date +%s) + 20 ))
    until gsh 1 "netstat -ltn | grep -q ':18515 '" >/dev/null 2>&1; do
        [ "$(date +%s)" -lt "$end" ] || break
        sleep 0.3
    done
    gsh 2 "timeout 90 $ccmd 10.99.0.11" > "$out.client.txt" 2>&1
    gsh 1 "sleep 1; cat /tmp/server.txt; killall -q uroce ib_$name 2>/dev/null; true" > "$out.server.txt" 2>&1
    local v why="failed (see $out.*.txt)"; v=$(figure $unit "$out.client.txt")
    # perftest times with the TSC at a rate it measures against gettimeofday; when that fit
    # is poor (r^2 < 0.9, which a noisy emulated guest can give) it takes the rate as 0 and
    # prints zeros (64 KiB ib_write_bw "0.00 MB/s" over 5000 completed messages,
    # 2026-12-06). Such a run has no figure: it is left out of the median, not counted as 0.
    if grep -q 'Correlation coefficient' "$out.client.txt" 2>/dev/null; then
        v=""
        why="no figure: perftest could not calibrate its clock (see $out.client.txt)"
    fi
    echo "$stack $name ${v:--}" >> "$OUTDIR/figures.txt"
    printf '  %-14s %-16s %s\n' "$stack" "$name" "${v:-$why}" >&2
}

# The floor: what plain UDP between the same two guests delivers, the bound of any
# userspace stack over UDP there. udp_pingpong: 64-byte messages, busy-polled, each answered
# with an 8-byte ACK datagram first, as an RC responder does; half its median round trip is
# in perftest's terms for send_lat and write_lat (they print half the round trip). The
# same blocking, without ACKs, whole round trip: read_lat's shape (the responder's side
# sleeps). udp_blast: sendmmsg of 16 datagrams of a 64 KiB WRITE's packets (4136 bytes at
# MTU 4096) and of a 64 B WRITE's (96 bytes), as MB/s of RDMA payload (4096 and 64 of them).
floor_run() {
    local name=$1 scmd=$2 ccmd=$3 out=$OUTDIR/udp-$1-r$R v
    gsh 1 "$scmd > /tmp/floor.txt 2>&1 &" >/dev/null 2>&1
    sleep 1
    gsh 2 "timeout 60 $ccmd" > "$out.client.txt" 2>&1
    gsh 1 "sleep 1; cat /tmp/floor.txt; killall -q udp_pingpong udp_blast 2>/dev/null; true" > "$out.server.txt" 2>&1
    case $name in
        rt-busy-ack|ring-busy-ack) v=$(awk '/round trip us/ { printf "%.1f", $7 / 2 }' "$out.client.txt") ;;
        rt-block) v=$(awk '/round trip us/ { print $7 }' "$out.client.txt") ;;
        blast-4136) v=$(awk '/^recv/ { printf "%.2f", $2 * 4096 / 4136 }' "$out.server.txt") ;;
        blast-96) v=$(awk '/^recv/ { printf "%.2f", $2 * 64 / 96 }' "$out.server.txt") ;;
    esac
    echo "udp $name ${v:--}" >> "$OUTDIR/figures.txt"
    printf '  %-14s %-16s %s\n' udp "$name" "${v:-failed (see $out.*.txt)}" >&2
}
run_floor() {
    [ $FLOOR = 1 ] || return 0
    [ -n "$PATTERN" ] && ! echo "floor" | grep -Eq -- "$PATTERN" && return 0
    local P=/mnt/host
    floor_run rt-busy-ack "timeout 90 $P/udp_pingpong server 18600 spin ack" "$P/udp_pingpong client 10.99.0.11 18600 2000 spin ack"
    floor_run rt-block "timeout 90 $P/udp_pingpong server 18601 block noack" "$P/udp_pingpong client 10.99.0.11 18601 2000 block noack"
    floor_run ring-busy-ack "timeout 90 $P/ring_pingpong server eth0 10.99.0.11 18604" "$P/ring_pingpong client eth0 10.99.0.12 10.99.0.11 52:54:00:99:00:11 18604 2000"
    floor_run blast-4136 "timeout 30 $P/udp_blast recv 18602 5 nogro" "$P/udp_blast send 10.99.0.11 18602 6 4136 16 0"
    floor_run blast-96 "timeout 30 $P/udp_blast recv 18603 5 nogro" "$P/udp_blast send 10.99.0.11 18603 6 96 16 0"
}

run_workloads() {
    local stack=$1 line name unit test args
    while IFS='|' read -r name unit test args; do
        [ -n "$name" ] || continue
        [ -n "$PATTERN" ] && ! echo "$name" | grep -Eq -- "$PATTERN" && continue
        case $stack in
            uroce-perf) pair $stack $name $unit "env $UROCE_ENV /mnt/host/uroce perf ${test//_/-} --ip 10.99.0.11 $args" \
                             "env $UROCE_ENV /mnt/host/uroce perf ${test//_/-} --ip 10.99.0.12 $args" ;;
            uroce-ib) pair $stack $name $unit "env $UROCE_ENV UROCE_DEVICES=uroce0=10.99.0.11 /mnt/host/uroce exec -- ib_$test -d uroce0 -x 0 -F $args" \
                           "env $UROCE_ENV UROCE_DEVICES=uroce0=10.99.0.12 /mnt/host/uroce exec -- ib_$test -d uroce0 -x 0 -F $args" ;;
            uroce-ring) pair $stack $name $unit "env UROCE_RX_RING=1 $UROCE_ENV UROCE_DEVICES=uroce0=10.99.0.11 /mnt/host/uroce exec -- ib_$test -d uroce0 -x 0 -F $args" \
                             "env UROCE_RX_RING=1 $UROCE_ENV UROCE_DEVICES=uroce0=10.99.0.12 /mnt/host/uroce exec -- ib_$test -d uroce0 -x 0 -F $args" ;;
            uroce-raw) pair $stack $name $unit "env UROCE_BACKEND=raw $UROCE_ENV UROCE_DEVICES=uroce0=10.99.0.11 /mnt/host/uroce exec -- ib_$test -d uroce0 -x 0 -F $args" \
                            "env UROCE_BACKEND=raw $UROCE_ENV UROCE_DEVICES=uroce0=10.99.0.12 /mnt/host/uroce exec -- ib_$test -d uroce0 -x 0 -F $args" ;;
            rxe) pair $stack $name $unit "ib_$test -d rxe0 -x 1 -F $args" \
                      "ib_$test -d rxe0 -x 1 -F $args" ;;
        esac
    done <<< "$WORKLOADS"
}

: > "$OUTDIR/figures.txt"
T0=$(date +%s)
bash "$LAB/build.sh" >/dev/null 2>&1 || { echo "lab-bench: build.sh failed" >&2; exit 1; }
for R in $(seq 1 "$RUNS"); do
    floor_done=0
    for stack in $STACKS; do
        # Freshly booted guests for each stack, so that each runs the same sequence of
        # workloads from a fresh boot: in one boot the guests slow down as runs accumulate
        # (ib_send_lat on uroce took 816-940 µs at the end of a boot's runs against 296-502
        # µs right after boot, 2026-12-03).
        bash "$LAB/down.sh" >/dev/null 2>&1
        if [ "$stack" = rxe ]; then
            echo "lab-bench: round $R of $RUNS: rxe in two guests" >&2
            bash "$LAB/up.sh" 2 >/dev/null 2>&1 || { echo "lab-bench: up.sh failed" >&2; exit 1; }
        else
            echo "lab-bench: round $R of $RUNS: $stack in two guests without rxe" >&2
            RXELAB_SHARE=$SHARE RXELAB_RXE=0 bash "$LAB/up.sh" 2 >/dev/null 2>&1 || { echo "lab-bench: up.sh failed" >&2; exit 1; }
            [ $floor_done = 1 ] || run_floor
            floor_done=1
        fi
        run_workloads "$stack"
    done
done
bash "$LAB/down.sh" >/dev/null 2>&1

# The table: median [min-max] of each stack, and each uroce column's ratio to rxe.
python3 - "$OUTDIR/figures.txt" "$WORKLOADS" $STACKS <<'EOF'
import statistics, sys
figs, workloads, stacks = sys.argv[1], sys.argv[2], sys.argv[3:]
vals = {}
for line in open(figs):
    stack, name, v = line.split()
    if v != "-":
        vals.setdefault((stack, name), []).append(float(v))
def cell(xs):
    if not xs:
        return "failed"
    m = statistics.median(xs)
    return f"{m:.2f} [{min(xs):.2f}-{max(xs):.2f}]" if len(xs) > 1 else f"{m:.2f}"
head = ["workload", "unit"] + stacks + [f"{s} / rxe" for s in stacks if s != "rxe"]
print("| " + " | ".join(head) + " |")
print("|" + "---|" * len(head))
for w in workloads.strip().splitlines():
    name, unit = w.split("|")[:2]
    row = [name, "MB/s" if unit == "bw" else "usec (t_typical)"]
    row += [cell(vals.get((s, name), [])) for s in stacks]
    r = vals.get(("rxe", name))
    for s in stacks:
        if s == "rxe":
            continue
        u = vals.get((s, name))
        row.append(f"{statistics.median(u) / statistics.median(r):.2f}x" if u and r else "-")
    if any(c != "failed" for c in row[2:2 + len(stacks)]):
        print("| " + " | ".join(row) + " |")
# The floor beside rxe: the best ratio to rxe that any stack over the guests' UDP could show.
floors = [("rt-busy-ack", "send_lat-8 write_lat-8", "usec, half the round trip", "busy-polled UDP with ACK datagrams"),
          ("ring-busy-ack", "send_lat-8 write_lat-8", "usec, half the round trip", "the same on a packet socket's receive ring"),
          ("rt-block", "read_lat-8", "usec, whole round trip", "blocking UDP, no ACKs"),
          ("blast-4136", "write_bw-64K-steady read_bw-64K-steady send_bw-64K-steady", "MB/s", "sendmmsg of 16 x 4136 B"),
          ("blast-96", "write_bw-64-steady read_bw-64-steady send_bw-64-steady", "MB/s", "sendmmsg of 16 x 96 B")]
if any(vals.get(("udp", f[0])) for f in floors):
    print()
    print("| UDP floor | unit | floor | bounds | rxe | floor / rxe |")
    print("|---|---|---|---|---|---|")
    for name, bounds, unit, what in floors:
        f = vals.get(("udp", name))
        if not f:
            continue
        ws = [w for w in bounds.split() if vals.get(("rxe", w))]
        rx = ", ".join(f"{statistics.median(vals[('rxe', w)]):.2f}" for w in ws)
        ratio = ", ".join(f"{statistics.median(f) / statistics.median(vals[('rxe', w)]):.2f}x" for w in ws)
        print(f"| {name} ({what}) | {unit} | {cell(f)} | {', '.join(bounds.split())} | {rx or '-'} | {ratio or '-'} |")
EOF
echo "lab-bench: $(( $(date +%s) - T0 )) s, $RUNS round(s); per-run output in $OUTDIR" >&2
