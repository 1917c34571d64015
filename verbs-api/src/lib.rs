//! Verbs API.
