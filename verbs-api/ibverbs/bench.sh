#!/usr/bin/env bash
# The C path's cost: Debian's perftest on uroce's libibverbs.so.1 beside `uroce perf` doing
# the same, two processes on loopback (ib_write_bw 64 KiB, ib_send_lat 8 B). Figures only,
# never asserted. Needs `make cabi-release` and Debian's perftest. Usage: bench.sh [ITERS]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
U=target/release/uroce
N=${1:-5000}
[ -x /usr/bin/ib_write_bw ] || { echo "bench-cabi: skipped: perftest not installed (apt-get install perftest)"; exit 0; }
[ -f target/release/uroce-lib/libibverbs.so.1 ] || { echo "bench-cabi: run make cabi-release first"; exit 1; }

source verbs-api/ibverbs/listening.sh

# row PORT SERVER_CMD... :: CLIENT_CMD...: runs the pair, prints the client's result row.
row() {
    local port=$1; shift
    local server=() client=()
    while [ "$1" != "::" ]; do server+=("$1"); shift; done; shift
    client=("$@")
    "${server[@]}" > /tmp/uroce-bench-s.$$ 2>&1 & local sp=$!
    listening "$port"
    "${client[@]}" > /tmp/uroce-bench-c.$$ 2>&1
    wait $sp
    grep -A1 '#bytes' /tmp/uroce-bench-c.$$ | tail -1
    rm -f /tmp/uroce-bench-s.$$ /tmp/uroce-bench-c.$$
}

echo "== ib_write_bw -s 65536 -n $N: #bytes #iterations BW-peak BW-average[MB/s] MsgRate"
printf '%-28s' "Debian perftest on uroce:"
row 19201 $U exec --devices b0=127.0.90.1 -- ib_write_bw -x 0 -s 65536 -n "$N" -p 19201 :: \
    $U exec --devices b1=127.0.90.2 -- ib_write_bw -x 0 -s 65536 -n "$N" -p 19201 127.0.90.1
printf '%-28s' "uroce perf write-bw:"
row 19202 $U perf write-bw -x 0 -s 65536 -n "$N" -p 19202 --ip 127.0.90.1 :: \
    $U perf write-bw -x 0 -s 65536 -n "$N" -p 19202 --ip 127.0.90.2 127.0.90.1
echo "== ib_send_lat -s 8 -n $N: #bytes #iterations t_min t_max t_typical t_avg t_stdev 99% 99.9% [usec]"
printf '%-28s' "Debian perftest on uroce:"
row 19203 $U exec --devices b0=127.0.90.1 -- ib_send_lat -x 0 -s 8 -n "$N" -p 19203 :: \
    $U exec --devices b1=127.0.90.2 -- ib_send_lat -x 0 -s 8 -n "$N" -p 19203 127.0.90.1
printf '%-28s' "uroce perf send-lat:"
row 19204 $U perf send-lat -x 0 -s 8 -n "$N" -p 19204 --ip 127.0.90.1 :: \
    $U perf send-lat -x 0 -s 8 -n "$N" -p 19204 --ip 127.0.90.2 127.0.90.1
