//! `UROCE_LOG`: the log of every program that uses uroce (issue 15).
//!
//! The provider, the CM agent and the tools emit [`tracing`] spans and events
//! (`uroce_provider::trace` lists them: QP state changes at INFO, NAKs, retransmissions
//! and drops at DEBUG, every packet at TRACE, error completions at WARN); nothing is
//! printed until a subscriber is installed. [`init_logging`] installs one when the
//! environment variable `UROCE_LOG` holds an [`EnvFilter`] directive, e.g.
//!
//! - `UROCE_LOG=uroce=debug`: every uroce crate (`uroce_provider`, `uroce_cm`,
//!   `uroce_verbs`, the `uroce` tool) at DEBUG and above (a target matches by prefix);
//! - `UROCE_LOG=uroce_provider::qp=info`: QP state changes only;
//! - `UROCE_LOG=uroce_provider::transport=trace,uroce_verbs::rdma_cm=debug`: every packet,
//!   and the CM's messages and events.
//!
//! Lines go to stderr in the compact format: time, level, the spans (`device`, `qp`),
//! the target, the message and fields, then the spans' fields (`qpn`, `peer`, ...).
//!
//! [`devices`](crate::devices), [`devices_from`](crate::devices_from) and every way of
//! opening a device call [`init_logging`], so Rust programs and C programs through the
//! drop-in libibverbs get the log without code; a program that installed its own global
//! subscriber keeps it (nothing is replaced, nothing panics).

use std::sync::Once;
use tracing_subscriber::EnvFilter;

/// The environment variable [`init_logging`] reads: an [`EnvFilter`] directive.
pub const LOG_ENV: &str = "UROCE_LOG";

/// Why [`init_logging_with`] installed nothing.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The directive does not parse (tracing-subscriber's `EnvFilter` syntax:
    /// `target=level,...`).
    #[error("bad log directive {directive:?}: {reason}")]
    BadDirective {
        /// The directive as given.
        directive: String,
        /// The parser's message.
        reason: String,
    },
    /// The process has a global subscriber already (its own, or one installed before).
    #[error("a global tracing subscriber is already installed")]
    AlreadySet,
}

/// Installs the stderr subscriber of `UROCE_LOG` (see the module docs) if the variable is
/// set and not blank and no global subscriber exists yet. Idempotent and cheap after the
/// first call; never panics. A directive that does not parse is reported once on stderr
/// and ignored.
pub fn init_logging() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let Some(directive) = std::env::var(LOG_ENV).ok().filter(|v| !v.trim().is_empty()) else {
            return;
        };
        if let Err(e @ LogError::BadDirective { .. }) = init_logging_with(&directive) {
            eprintln!("uroce: {LOG_ENV} ignored: {e}");
        }
    });
}

/// Installs a global stderr subscriber (compact format, with targets and span fields)
/// filtered by `directive` (what `UROCE_LOG` and `uroce --log` take), unless one is
/// installed already ([`LogError::AlreadySet`]).
pub fn init_logging_with(directive: &str) -> Result<(), LogError> {
    let filter = EnvFilter::builder()
        .parse(directive)
        .map_err(|e| LogError::BadDirective {
            directive: directive.to_string(),
            reason: e.to_string(),
        })?;
    if tracing::dispatcher::has_been_set() {
        return Err(LogError::AlreadySet);
    }
    tracing_subscriber::fmt()
        .compact()
        .with_writer(std::io::stderr)
        .with_target(true)
        .with_env_filter(filter)
        .try_init()
        .map_err(|_| LogError::AlreadySet)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directive_that_does_not_parse_installs_nothing_and_says_what() {
        let e = init_logging_with("uroce=loudest").unwrap_err();
        assert!(matches!(e, LogError::BadDirective { .. }), "{e}");
        assert!(e.to_string().contains("uroce=loudest"), "{e}");
        if std::env::var_os(LOG_ENV).is_none() {
            assert!(!tracing::dispatcher::has_been_set());
        }
        // Whatever UROCE_LOG holds: never panics, however often.
        init_logging();
        init_logging();
    }
}
