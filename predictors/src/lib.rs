//! tandem-predictors: latency predictors for CPU–GPU co-execution.
//!
//! - [`dataset`]: the CSV measurements `tandem profile` writes.
//! - [`measure`]: the profiling driver (sampling, resume, progress) over
//!   `tandem_runtime::profile`.
//! - [`features`]: white-box features; GPU ones from the runtime's own dispatch function.
//! - [`kernel_counts`], [`cpu_counts`]: loop-trip counts of the GPU kernels and of the CPU
//!   depthwise loop, which the models' additive baselines cost.
//! - `train` (feature `lightgbm`, on by default): one LightGBM forest per executor, grid search with cross-validation, 80/20
//!   validation, ablations.
//! - [`forest`]: the pure-Rust tree evaluator the compiler predicts with.
//! - [`bundle`]: the device profile ([`Profile`]): load, predict, sweep every split of a layer.
//! - [`eval`]: MAPE and ±10% share per executor on any dataset.
//! - [`calibrate`]: per-executor factors that bring a profile to the device's speed today.
//! - [`corun`]: the contention of split steps (both sides at once), measured and fitted.
//! - [`speed`]: how the latencies follow the machine's speed of the hour, by the reference layer.
//! - [`flatten`]: long forests (chains of corrections) distilled into short ones (the fitting
//!   needs feature `lightgbm`).

pub mod bundle;
pub mod calibrate;
pub mod corun;
pub mod cpu_counts;
pub mod dataset;
pub mod eval;
pub mod features;
pub mod flatten;
pub mod forest;
pub mod kernel_counts;
pub mod measure;
pub mod nnls;
pub mod quiet;
pub mod speed;
#[cfg(feature = "lightgbm")]
pub mod train;

pub use bundle::{Candidate, Profile};
pub use features::Layer;
