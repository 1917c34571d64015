#!/usr/bin/env bash
# Instructions per message (figures only, never asserted): Debian's perftest on uroce's
# libibverbs.so.1, two processes on loopback, the client under callgrind. It counts the
# instructions the client executes inside uroce's verbs (ibv_poll_cq, ibv_post_send,
# ibv_post_recv, and the device's engine thread), divided by the iterations, the
# conditional branches among them, the calls made from uroce's code, and the client's Rust
# heap allocations (`__rust_alloc` calls, set-up included) likewise. The lab's emulated
# guests charge each of the three (tests/lab/tcg_cost.c: about 3 ns per simple statement,
# 14 more for a conditional branch, 65 more for a call and its return, 75 for a jump to
# another page and back), so each is a figure to bring down.
#
# Unlike a time, this count does not depend on the host's load: two builds compare to
# within a few percent, where the lab's emulated guests, whose CPU costs each instruction
# many times over, vary by a third between runs. The count includes the empty polls of
# the client's wait, which vary with timing (the line says how many passes there were).
#
# Each process is pinned to one CPU of its own (`taskset`, when there are two), so that uroce
# takes the defaults it takes in the lab's 1-CPU guests (an ACK held for the next request,
# the engine thread's long check-ups): the code that runs there is the code counted here.
#
# Needs `make cabi-release` (or UROCE_BIN_DIR: a directory with uroce and uroce-lib/),
# Debian's perftest, valgrind and python3. Usage: instr.sh [ITERS]
set -euo pipefail
BIN=${UROCE_BIN_DIR:-}
[ -n "$BIN" ] && BIN=$(realpath "$BIN")
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
BIN=${BIN:-$PWD/target/release}
U=$BIN/uroce
N=${1:-2000}
for tool in valgrind callgrind_annotate python3; do
    command -v $tool >/dev/null || { echo "bench-instr: skipped: $tool not installed (apt-get install valgrind python3)"; exit 0; }
done
[ -x /usr/bin/ib_send_lat ] || { echo "bench-instr: skipped: perftest not installed (apt-get install perftest)"; exit 0; }
[ -f "$BIN/uroce-lib/libibverbs.so.1" ] || { echo "bench-instr: $BIN/uroce-lib/libibverbs.so.1 missing: run make cabi-release first"; exit 1; }
source verbs-api/ibverbs/listening.sh
# pin CPU: taskset -c CPU, when taskset exists and the machine has two CPUs.
PIN0=() PIN1=()
if command -v taskset >/dev/null && [ "$(nproc)" -ge 2 ]; then
    PIN0=(taskset -c 0) PIN1=(taskset -c 1)
fi
TMP=$(mktemp -d)
SERVER=
trap '[ -n "$SERVER" ] && kill $SERVER 2>/dev/null; rm -rf "$TMP"' EXIT

# count NAME PORT TEST ARGS...: one run, one line.
count() {
    local name=$1 port=$2 test=$3; shift 3
    "${PIN1[@]}" "$U" exec --devices b0=127.0.92.1 -- "$test" -x 0 -p "$port" "$@" > "$TMP/s.txt" 2>&1 &
    SERVER=$!
    listening "$port"
    if ! (cd "$TMP" && "${PIN0[@]}" "$U" exec --devices b1=127.0.92.2 -- valgrind --tool=callgrind \
        --branch-sim=yes --callgrind-out-file="$TMP/cg.out" "$test" -x 0 -p "$port" "$@" 127.0.92.1 > "$TMP/c.txt" 2>&1); then
        echo "bench-instr: $name failed; client:"; tail -n 20 "$TMP/c.txt"
        echo "server:"; tail -n 20 "$TMP/s.txt"
        exit 1
    fi
    wait $SERVER || true
    SERVER=
    # (callgrind_annotate 3.19 warns about its own threshold arithmetic: not ours to print)
    callgrind_annotate --inclusive=yes --threshold=99.99 --show=Ir,Bc "$TMP/cg.out" > "$TMP/incl.txt" 2>/dev/null
    python3 - "$TMP/incl.txt" "$TMP/cg.out" "$N" "$name" <<'EOF'
import re, sys
incl, raw, n, name = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
entry = {"uroce_poll_cq": 0, "uroce_post_send": 0, "uroce_post_recv": 0, "Shared::run_shared": 0}
branches = dict.fromkeys(entry, 0)
for line in open(incl):
    m = re.match(r"\s*([\d,]+) \(.*?\)\s+([\d,]+|\.) .*?:(\S+) \[", line)
    if not m:
        continue
    for k in entry:
        if m.group(3).endswith(k) and entry[k] == 0:
            entry[k] = int(m.group(1).replace(",", ""))
            branches[k] = int(m.group(2).replace(",", "").replace(".", "0"))
# Calls, from the raw file: cfn= names the callee of the calls= line after it.
# ob= names the object of the code that follows (the caller's, for calls= lines).
names, calls, cfn = {}, {}, None
objs, ours, from_ours = {}, False, 0
for line in open(raw, errors="replace"):
    m = re.match(r"(c?fn)=\((\d+)\)(?: (.*))?", line)
    if m:
        if m.group(3):
            names[m.group(2)] = m.group(3).strip()
        if m.group(1) == "cfn":
            cfn = names.get(m.group(2))
        continue
    m = re.match(r"(c?ob)=\((\d+)\)(?: (.*))?", line)
    if m:
        if m.group(3):
            objs[m.group(2)] = m.group(3).strip()
        if m.group(1) == "ob":
            ours = objs.get(m.group(2), "").endswith("libibverbs.so.1")
        continue
    if line.startswith("calls=") and cfn:
        k = int(line[6:].split()[0])
        calls[cfn] = calls.get(cfn, 0) + k
        if ours:
            from_ours += k
def per(pat):
    return sum(v for k, v in calls.items() if re.search(pat, k)) / n
total = sum(entry.values()) / n
print(f"  {name:<24} {total:>8.0f} instructions per iteration "
      f"(poll_cq {entry['uroce_poll_cq'] / n:.0f}, post_send {entry['uroce_post_send'] / n:.0f}, "
      f"post_recv {entry['uroce_post_recv'] / n:.0f}, engine thread {entry['Shared::run_shared'] / n:.0f}); "
      f"{sum(branches.values()) / n:.0f} conditional branches, {from_ours / n:.0f} calls from uroce's code (set-up included); "
      f"{per(r'__rust_alloc$'):.2f} allocations, {per(r'Shared::pass_locked$'):.2f} passes")
EOF
}

echo "== instructions in uroce's verbs per iteration, client under callgrind, $N iterations"
count "ib_send_lat -s 8" 19301 ib_send_lat -s 8 -n "$N"
count "ib_write_bw -s 64" 19302 ib_write_bw -s 64 -n "$N"
