//! uroce transport (see the crate README).
