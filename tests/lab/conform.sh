#!/bin/bash
# `make lab-conform`: uroce's conformance scenarios (conform/scenarios) against Linux rxe in a
# lab guest. The conformance agent (tests/conform/agent.c, built here against Debian's
# libibverbs and shared into the guests at /mnt/host) drives a QP on the guest's rxe0; the
# scripted peer is `uroce-conform run --agent` on the host (10.99.0.1 / fd99::1 inside the
# lab's netns), over IPv6 and over IPv4. Prints one table per address family (scenario
# file, PASS / FAIL with the rule and the first mismatch / N/A), then a summary line each.
#
# Brings the lab up (../shared/rxe-lab, or RXELAB_DIR) and takes it down on every exit (a
# trap). Exit status 0 only when every scenario passed on every family.
#
#   tests/lab/conform.sh [--keep-lab] [--use-lab] [--dry-run] [--family 6|4|both] [FILES...]
#     FILES        scenario files or directories (default conform/scenarios)
#     --use-lab    use a lab that is already up (and leave it up)
#     --keep-lab   bring the lab up but leave it up afterwards
#     --dry-run    print the commands instead of running them (no root, no lab needed)
#     --family     IPv6 only, IPv4 only, or both (the default)
#
# Environment: CRASHERS (0: leave conform/crashers out), CONFORM (the runner, default target/release/uroce-conform), RXELAB_DIR, OUTDIR
# (logs, default target/lab-conform), AGENT_PORT (the agent's TCP port in the guest, default
# 7100; the guest's command server has 7000), SLACK (how late an expected packet may come,
# default 100ms: the guests may be emulated), FUZZ_SECS (a fuzz run's length, see the end;
# FUZZ_SEED, FUZZ_WINDOW: its seed and how long it waits for answers to each packet).
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LAB=${RXELAB_DIR:-$ROOT/../shared/rxe-lab}
CONFORM=${CONFORM:-$ROOT/target/release/uroce-conform}
OUTDIR=${OUTDIR:-$ROOT/target/lab-conform}
AGENT_PORT=${AGENT_PORT:-7100}
SLACK=${SLACK:-100ms}
FUZZ_SECS=${FUZZ_SECS:-0}
G=2                        # the guest with the QP under test
GIP=10.99.0.12
HOST4=10.99.0.1 HOST6=fd99::1
USE_LAB=0 KEEP_LAB=0 DRY=0 FAMILY=both FILES=()
while [ $# -gt 0 ]; do
    case $1 in
        --use-lab) USE_LAB=1 ;;
        --keep-lab) KEEP_LAB=1 ;;
        --dry-run) DRY=1 ;;
        --family) shift; FAMILY=${1:-} ;;
        -*) echo "usage: $0 [--use-lab] [--keep-lab] [--dry-run] [--family 6|4|both] [FILES...]" >&2; exit 2 ;;
        *) FILES+=("$1") ;;
    esac
    shift
done
case $FAMILY in 6|4|both) ;; *) echo "lab-conform: --family is 6, 4 or both" >&2; exit 2 ;; esac
[ ${#FILES[@]} -gt 0 ] || FILES=("$ROOT/conform/scenarios")

# run CMD...: runs it, or prints it under --dry-run (on the script's stdout, fd 3, even
# where the command's own output is thrown away)
exec 3>&1
run() {
    if [ $DRY = 1 ]; then printf '+ %s\n' "$*" >&3; return 0; fi
    "$@"
}
gsh() { run bash "$LAB/guest.sh" "$@"; }
ns() { run ip netns exec rxelab "$@"; }

if [ $DRY = 0 ]; then
    LAB=$(cd "$LAB" && pwd) || { echo "lab-conform: no rxe-lab at $LAB" >&2; exit 1; }
    [ -x "$CONFORM" ] || { echo "lab-conform: $CONFORM missing (cargo build --release -p uroce-conform)" >&2; exit 1; }
fi
mkdir -p "$OUTDIR"

# The agent for the guests, built here against Debian's libibverbs and shared into them at
# /mnt/host (RXELAB_SHARE).
export RXELAB_SHARE=${RXELAB_SHARE:-$OUTDIR/share}
mkdir -p "$RXELAB_SHARE"
if [ $DRY = 0 ] && ! { [ -e /usr/include/infiniband/verbs.h ] && cc -std=c99 -O2 -Wall -Wextra -Werror -o "$RXELAB_SHARE/agent" "$ROOT/tests/conform/agent.c" -libverbs 2>"$OUTDIR/agent.cc.txt"; }; then
    echo "lab-conform: tests/conform/agent.c not built (apt-get install libibverbs-dev; $OUTDIR/agent.cc.txt)" >&2
    exit 1
fi
[ $DRY = 1 ] && run cc -std=c99 -O2 -Wall -Wextra -Werror -o "$RXELAB_SHARE/agent" "$ROOT/tests/conform/agent.c" -libverbs

stop_agent() { gsh $G "killall -q agent; true" >/dev/null 2>&1; }
teardown() {
    stop_agent
    if [ $USE_LAB = 0 ] && [ $KEEP_LAB = 0 ]; then
        run bash "$LAB/down.sh" >/dev/null 2>&1 && echo "lab-conform: lab down" >&2
    fi
}
if [ $USE_LAB = 0 ]; then
    trap teardown EXIT
    trap 'exit 130' INT TERM
    run bash "$LAB/down.sh" >/dev/null 2>&1
    run bash "$LAB/build.sh" >/dev/null 2>&1 || { echo "lab-conform: build.sh failed" >&2; exit 1; }
    run bash "$LAB/up.sh" 2 >&2 || { echo "lab-conform: up.sh failed" >&2; exit 1; }
else
    trap stop_agent EXIT
fi
if [ $DRY = 1 ]; then
    GID4='$(gid.sh 2)' GID6='$(gid.sh 2 -6)'
    run bash "$LAB/gid.sh" $G
    run bash "$LAB/gid.sh" $G -6
else
    GID4=$(bash "$LAB/gid.sh" $G) GID6=$(bash "$LAB/gid.sh" $G -6)
    [ -n "$GID4" ] && [ -n "$GID6" ] || { echo "lab-conform: no GID index from gid.sh" >&2; exit 1; }
fi

# wait until the agent listens in the guest, at most $1 s
wait_agent() {
    [ $DRY = 1 ] && { gsh $G "netstat -ltn | grep -q ':$AGENT_PORT '"; return 0; }
    local end=$(( $(date +%s) + $1 ))
    while [ "$(date +%s)" -lt "$end" ]; do
        bash "$LAB/guest.sh" $G "netstat -ltn | grep -q ':$AGENT_PORT '" && return 0
        sleep 0.2
    done
    return 1
}

# The agent serves one controller after another (each scenario is one connection; it
# destroys what a controller made when it leaves). It listens on the lab network only.
stop_agent
gsh $G "/mnt/host/agent -a $GIP $AGENT_PORT >/tmp/conform-agent.log 2>&1 &" >/dev/null
wait_agent 20 || { echo "lab-conform: the agent did not listen in guest $G (/tmp/conform-agent.log there)" >&2; exit 1; }
echo "lab-conform: agent on rxe0 in guest $G ($GIP:$AGENT_PORT); GID index $GID4 (IPv4) / $GID6 (IPv6); slack $SLACK" >&2

STATUS=0
# table FAMILY PEER GID_INDEX: one table of every scenario against rxe0 over that family
table() {
    local fam=$1 peer=$2 gidx=$3 out=$OUTDIR/table-ipv$1.txt
    echo "== rxe (kernel $(gsh $G 'uname -r' 2>/dev/null | tr -d '\r')) over IPv$fam: rxe0 GID index $gidx, peer $peer"
    if [ $DRY = 1 ]; then
        ns "$CONFORM" run --agent "$GIP:$AGENT_PORT" --peer "$peer" --gid-index "$gidx" --device rxe0 --slack "$SLACK" "${FILES[@]}"
        return
    fi
    ns "$CONFORM" run --agent "$GIP:$AGENT_PORT" --peer "$peer" --gid-index "$gidx" --device rxe0 --slack "$SLACK" "${FILES[@]}" | tee "$out"
    [ "${PIPESTATUS[0]}" = 0 ] || STATUS=1
}
case $FAMILY in
    6) table 6 $HOST6 "$GID6" ;;
    4) table 4 $HOST4 "$GID4" ;;
    both) table 6 $HOST6 "$GID6"; table 4 $HOST4 "$GID4" ;;
esac

# oops_since OFFSET: whether guest $G's serial console logged a kernel oops past OFFSET
SERIAL=/var/tmp/rxe-lab/run/guest$G.log
serial_size() { [ -e "$SERIAL" ] && stat -c %s "$SERIAL" || echo 0; }
oops_since() {
    [ $DRY = 0 ] && [ -e "$SERIAL" ] || return 1
    tail -c +"$(($1 + 1))" "$SERIAL" | grep -E -i "oops|BUG:|kernel panic|general protection|WARNING: CPU" >"$2"
}

# The scenarios that crashed a stack under test (conform/crashers), last: they may take
# the guest down. CRASHERS=0 leaves them out.
if [ "${CRASHERS:-1}" = 1 ] && [ $FAMILY != 6 ]; then
    from=$(serial_size)
    echo "== crashers (conform/crashers) over IPv4: the guest's serial log is watched"
    if [ $DRY = 1 ]; then
        ns "$CONFORM" run --agent "$GIP:$AGENT_PORT" --peer $HOST4 --gid-index "$GID4" --device rxe0 --slack "$SLACK" "$ROOT/conform/crashers"
    else
        ns "$CONFORM" run --agent "$GIP:$AGENT_PORT" --peer $HOST4 --gid-index "$GID4" --device rxe0 --slack "$SLACK" "$ROOT/conform/crashers" | tee "$OUTDIR/table-crashers.txt"
        [ "${PIPESTATUS[0]}" = 0 ] || STATUS=1
    fi
    if oops_since "$from" "$OUTDIR/crashers-oops.txt"; then
        echo "crashers: guest $G's kernel logged an oops (first lines in $OUTDIR/crashers-oops.txt):"
        head -n 3 "$OUTDIR/crashers-oops.txt"
        STATUS=1
        FUZZ_SECS=0   # the guest is gone
    fi
fi

# A fuzz run against the same agent over IPv4 (the agent's first RoCE v2 IPv4 GID),
# FUZZ_SECS seconds long (0: none), uroce in the simulator as the model; findings are saved
# as scenarios in $OUTDIR/findings. The guest's serial console is watched for a kernel oops
# (its log grows from the offset the run started at).
FUZZ_SEED=${FUZZ_SEED:-$(date +%s)}
if [ "$FUZZ_SECS" -gt 0 ]; then
    from=$(serial_size)
    echo "== fuzz: rxe0 over IPv4, $FUZZ_SECS s, seed $FUZZ_SEED" | tee "$OUTDIR/fuzz.txt"
    ns "$CONFORM" fuzz --agent "$GIP:$AGENT_PORT" --peer $HOST4 --slack "$SLACK" \
        --window "${FUZZ_WINDOW:-20ms}" --secs "$FUZZ_SECS" --seed "$FUZZ_SEED" --out "$OUTDIR/findings" \
        | tee -a "$OUTDIR/fuzz.txt"
    [ "${PIPESTATUS[0]}" = 0 ] || STATUS=1
    if oops_since "$from" "$OUTDIR/fuzz-oops.txt"; then
        echo "fuzz: guest $G's kernel logged an oops (see $OUTDIR/fuzz-oops.txt)" | tee -a "$OUTDIR/fuzz.txt"
        STATUS=1
    elif [ $DRY = 0 ]; then
        echo "fuzz: no oops in guest $G's serial log" | tee -a "$OUTDIR/fuzz.txt"
    fi
fi

exit $STATUS
