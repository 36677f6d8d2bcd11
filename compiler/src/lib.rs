//! tandem-compiler: reads TFLite models into a graph IR, analyses and rewrites them, and writes
//! them back out (as `.tflite` today; as compiled `.tandem` artifacts once the runtime lands).
//!
//! - [`tflite`]: our own TFLite schema subset, the verified reader and the writer.
//! - [`ir`]: the graph IR on `petgraph`, shape inference and per-op cost.
//! - [`inspect`]: the report behind `tandem inspect`.

extern crate alloc; // the generated flatbuffers bindings name `alloc::` paths

pub mod dispatch;
pub mod dwauto;
pub mod inspect;
pub mod ir;
pub mod lower;
pub mod passes;
pub mod planner;
pub mod predict_cli;
pub mod run;
pub mod tflite;
