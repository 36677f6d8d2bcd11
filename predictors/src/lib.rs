//! tandem-predictors: per-executor latency predictors (GBDTs over white-box features), trained
//! from on-device measurements and evaluated in pure Rust at compile time.
//!
//! Empty until the profiler and predictor work lands; the crate exists so that the dependency
//! direction `compiler → predictors → runtime` is fixed from the start.
