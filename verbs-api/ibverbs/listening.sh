# Sourced by bench.sh and instr.sh.
# listening PORT: waits (bounded, 10 s) until a TCP socket listens on PORT.
listening() {
    local hex; hex=$(printf ':%04X ' "$1")
    for _ in $(seq 1 2000); do
        if grep -q "$hex[0-9A-F:]* 0A " /proc/net/tcp /proc/net/tcp6 2>/dev/null; then return 0; fi
        sleep 0.005
    done
    echo "nothing listens on port $1" >&2; return 1
}
