//! Integration-test helpers shared by the tests in `tests/tests/`.
