#!/usr/bin/env bash
# Links target/<profile>/liburoce_ibverbs.a into target/<profile>/uroce-lib/libibverbs.so.1
# with the version script (a Rust cdylib cannot carry symbol versions: GNU ld refuses
# rustc's own version script beside ours), then builds librdmacm.so.1 beside it.
# Usage: link.sh TARGET_PROFILE_DIR
#
# librdmacm.so.1 holds no code of uroce's: the rdma_cm functions are in libibverbs.so.1
# (src/cm), so that there is one copy of uroce's state per process, exported as
# uroce_NAME in the private node UROCE_PRIVATE_1.0. librdmacm.so.1 is made from
# librdmacm.map alone: soname librdmacm.so.1, DT_NEEDED libibverbs.so.1, the RDMACM_1.x
# nodes, and for every NAME there a one-instruction jump to uroce_NAME (generated here).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dir="${1:?usage: link.sh TARGET_PROFILE_DIR (e.g. target/debug)}"
out="$dir/uroce-lib"
mkdir -p "$out"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# Every name librdmacm.map exports, once each.
names="$(sed -n 's/^[[:space:]]*\([a-z_][a-z0-9_]*\);$/\1/p' "$here/librdmacm.map" | sort -u)"

# libibverbs.so.1: its own map, and the private node of the rdma_cm implementation.
{
    cat "$here/libibverbs.map"
    printf '\nUROCE_PRIVATE_1.0 {\n\tglobal:\n'
    for n in $names; do printf '\t\turoce_%s;\n' "$n"; done
    printf '};\n'
} > "$tmp/libibverbs.map"
cc -shared -o "$out/libibverbs.so.1.tmp" \
    -Wl,-soname,libibverbs.so.1 \
    -Wl,--whole-archive "$dir/liburoce_ibverbs.a" -Wl,--no-whole-archive \
    -Wl,--version-script="$tmp/libibverbs.map" \
    -Wl,-z,now -Wl,-z,relro \
    -lpthread -ldl -lm -lgcc_s -lc
mv "$out/libibverbs.so.1.tmp" "$out/libibverbs.so.1"
echo "built $out/libibverbs.so.1"

# librdmacm.so.1: one jump per name (the arguments pass through untouched, variadic
# rfcntl included); --no-undefined makes a name without its uroce_ twin a link error.
case "$(cc -dumpmachine)" in
    x86_64*) jump='jmp' ;;
    aarch64*) jump='b' ;;
    *) echo "link.sh: no jump instruction known for $(cc -dumpmachine)" >&2; exit 1 ;;
esac
{
    printf '\t.text\n'
    for n in $names; do
        printf '\t.globl %s\n\t.type %s, %%function\n%s:\n\t%s uroce_%s@PLT\n\t.size %s, .-%s\n' \
            "$n" "$n" "$n" "$jump" "$n" "$n" "$n"
    done
    printf '\t.section .note.GNU-stack,"",%%progbits\n'
} > "$tmp/rdmacm.S"
cc -shared -o "$out/librdmacm.so.1.tmp" "$tmp/rdmacm.S" \
    -Wl,-soname,librdmacm.so.1 \
    -Wl,--version-script="$here/librdmacm.map" \
    -Wl,--no-undefined -Wl,-z,now -Wl,-z,relro \
    -L"$out" -l:libibverbs.so.1
mv "$out/librdmacm.so.1.tmp" "$out/librdmacm.so.1"
echo "built $out/librdmacm.so.1"
