//! Offline emulation of the stock TFLite GPU delegate (OpenCL backend): for every operator of a
//! model and a described GPU, the kernels the delegate runs, with block sizes, grid, work group
//! and work-group count, after the graph transforms that change them.
//!
//! The rules are those of the research note `tflite-gpu-dispatch.md` (project shared docs,
//! "the spec" below; § numbers refer to it) for the delegate's default options: fast tuning,
//! latency-first storage, precision from the options (F32 by default, F16 when precision loss is
//! allowed). Kernels the spec does not cover are listed with an approximate dispatch and
//! `exact: false`. `docs/dispatch.md` describes the choices made where the spec is silent.
//!
//! - [`gpu`], [`builtin`]: GPU descriptions (JSON format, classification, built-in devices).
//! - [`target`]: precision, storage and the kernel work-group limit.
//! - [`conv`], [`winograd`], [`depthwise`], [`fully_connected`]: the kernel selectors, plain
//!   functions of operator descriptions ([`desc`]).
//! - [`work_group`]: the work-group pickers and group counts.
//! - [`graph`]: parsing, graph transforms and fusion over a [`crate::ir::Graph`].
//! - [`kernel`], [`op`]: the output records.

pub mod builtin;
pub mod conv;
pub mod depthwise;
pub mod desc;
pub mod fully_connected;
pub mod gpu;
pub mod graph;
pub mod kernel;
pub mod op;
pub mod target;
pub mod winograd;
pub mod work_group;

pub use desc::{ConvDesc, DepthwiseDesc, FcDesc, Padding2d};
pub use gpu::{Gpu, GpuSpec, Vendor};
pub use graph::dispatch_graph;
pub use kernel::{Kernel, KernelDispatch};
pub use op::{Fate, OpDispatch, Variant};
pub use target::{Precision, StorageType, Target};
