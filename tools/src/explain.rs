//! `uroce explain [CODE]`: the sentence of a `vendor_err` code of uroce's error
//! completions (see `uroce_provider::explain`); without a code, every code.

use crate::common::Fail;
use clap::Args;
use uroce_verbs::CauseCode;

/// `uroce explain` arguments.
#[derive(Args, Debug)]
pub struct ExplainArgs {
    /// The `vendor_err` of a completion (`ibv_wc.vendor_err`; decimal or 0x hex). Without
    /// it, every code.
    code: Option<String>,
}

/// One line: code, name, libibverbs' status string and the sentence with `{values}`.
fn line(c: CauseCode) -> String {
    format!(
        "{} {} ({}): {}",
        c as u32,
        c.name(),
        c.status(),
        c.template()
    )
}

/// Runs `uroce explain`.
pub fn run(args: &ExplainArgs) -> Result<(), Fail> {
    let Some(text) = &args.code else {
        for c in CauseCode::ALL {
            crate::common::stdout_line(line(c));
        }
        return Ok(());
    };
    let t = text.trim();
    let parsed = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16),
        None => t.parse::<u32>(),
    };
    let v = match parsed {
        Ok(v) => v,
        Err(e) if matches!(e.kind(), std::num::IntErrorKind::PosOverflow) => {
            return Err(format!(
                "explain: {text:?} is larger than a vendor_err can be (32 bits; the codes are \
                 1 to {})",
                CauseCode::ALL.len()
            ))
        }
        Err(_) => {
            return Err(format!(
                "explain: {text:?} is not a number (a vendor_err, e.g. 5 or 0x5)"
            ))
        }
    };
    if v == 0 {
        crate::common::stdout_line("0: no error (vendor_err of a successful completion)".into());
        return Ok(());
    }
    match CauseCode::from_u32(v) {
        Some(c) => {
            crate::common::stdout_line(line(c));
            Ok(())
        }
        None => Err(format!(
            "explain: {v} is not a uroce vendor_err code (they are 1 to {}; `uroce explain` lists them)",
            CauseCode::ALL.len()
        )),
    }
}
