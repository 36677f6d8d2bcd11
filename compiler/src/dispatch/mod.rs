//! Emulation of GPU dispatch decisions: which kernels a GPU backend runs for each operator, with
//! block sizes, grids and work groups, and the numeric features latency predictors take from
//! them.
//!
//! - [`tflite_gpu`]: the stock TFLite GPU delegate (OpenCL), reproduced offline.
//! - [`features`]: one operator's dispatch as named numbers, labelled with where it came from.
//! - [`cli`]: `tandem dispatch`.

pub mod cli;
pub mod features;
pub mod tflite_gpu;
