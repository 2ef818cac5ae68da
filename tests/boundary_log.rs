//! Grant-boundary attacks, `log-…` family: the attack-fixture guest (tests/fixtures/rust/attack-fixture) against the real host and API server.
