//! Scenario tests (spec section 4) over a scripted source.
