#!/usr/bin/env bash
# Links target/<profile>/liburoce_ibverbs.a into target/<profile>/uroce-lib/libibverbs.so.1
# with the version script (a Rust cdylib cannot carry symbol versions: GNU ld refuses
# rustc's own version script beside ours). Usage: link.sh TARGET_PROFILE_DIR
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dir="${1:?usage: link.sh TARGET_PROFILE_DIR (e.g. target/debug)}"
mkdir -p "$dir/uroce-lib"
cc -shared -o "$dir/uroce-lib/libibverbs.so.1.tmp" \
    -Wl,-soname,libibverbs.so.1 \
    -Wl,--whole-archive "$dir/liburoce_ibverbs.a" -Wl,--no-whole-archive \
    -Wl,--version-script="$here/libibverbs.map" \
    -Wl,-z,now -Wl,-z,relro \
    -lpthread -ldl -lm -lgcc_s -lc
mv "$dir/uroce-lib/libibverbs.so.1.tmp" "$dir/uroce-lib/libibverbs.so.1"
echo "built $dir/uroce-lib/libibverbs.so.1"
