//! CPU kernels, NHWC float32.
//!
//! Every kernel is a plain function over slices plus shapes, testable without a graph, with a
//! naive reference test in its own module. Splittable kernels (convolution, depthwise convolution,
//! fully connected) compute an output-channel range `[c0, c1)` and write it straight into the full
//! output tensor.

pub mod activation;
pub mod batch_matmul;
pub mod check;
pub mod conv;
pub mod depthwise;
pub mod elementwise;
pub mod fully_connected;
pub mod gemm;
pub mod layout;
pub mod packed_gemm;
pub mod pool;
pub mod reduce;
pub mod resize;
pub(crate) mod shared;
pub mod simd;
pub mod threads;
pub mod transpose_conv;

pub use activation::Activation;
