//! The C side of the rdma_cm layout check: a small C program compiled against the system's
//! `<rdma/rdma_cma.h>` and `<rdma/rdma_verbs.h>` (Debian `librdmacm-dev`) prints `sizeof`
//! and `offsetof` of every struct and field in `uroce_ibverbs::cm_abi::layout_table()`,
//! and each must equal the Rust layout. Skipped, saying so, when the headers or a C
//! compiler are absent.

use std::path::Path;
use std::process::Command;

#[path = "../../../tests/support/skip.rs"]
mod skip;

fn skip(why: &str) {
    skip::skipped("c_rdma_cma_header_layout_matches", why);
}

#[test]
fn c_rdma_cma_header_layout_matches() {
    if !Path::new("/usr/include/rdma/rdma_cma.h").is_file() {
        skip("/usr/include/rdma/rdma_cma.h not installed (apt-get install librdmacm-dev)");
        return;
    }
    let table = uroce_ibverbs::cm_abi::layout_table();
    let mut c = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <infiniband/sa.h>\n\
         #include <rdma/rdma_cma.h>\n#include <rdma/rdma_verbs.h>\nint main(void) {\n",
    );
    for (name, _) in &table {
        let expr = match name.split_once('.') {
            Some((ty, field)) => format!("offsetof(struct {ty}, {field})"),
            None => format!("sizeof(struct {name})"),
        };
        c.push_str(&format!(
            "  printf(\"%s %zu\\n\", \"{name}\", (size_t){expr});\n"
        ));
    }
    c.push_str("  return 0;\n}\n");
    let dir = std::env::temp_dir().join(format!("uroce-cm-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (src, exe) = (dir.join("cm_layout.c"), dir.join("cm_layout"));
    std::fs::write(&src, c).unwrap();
    let cc = match Command::new("cc").arg("-o").arg(&exe).arg(&src).output() {
        Ok(o) => o,
        Err(e) => {
            skip(&format!("no C compiler (cc): {e}"));
            return;
        }
    };
    assert!(
        cc.status.success(),
        "the layout program does not compile against rdma_cma.h:\n{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let out = Command::new(&exe).output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8(out.stdout).unwrap();
    let mut wrong = Vec::new();
    for ((name, ours), line) in table.iter().zip(text.lines()) {
        let (cname, theirs) = line.split_once(' ').unwrap();
        assert_eq!(cname, *name);
        if theirs.parse::<usize>().unwrap() != *ours {
            wrong.push(format!("{name}: C {theirs}, uroce {ours}"));
        }
    }
    assert_eq!(text.lines().count(), table.len());
    assert!(wrong.is_empty(), "layouts differ:\n{}", wrong.join("\n"));
}
