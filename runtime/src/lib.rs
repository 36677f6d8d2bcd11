//! tandem-runtime: the on-device half of tandem.
//!
//! This crate is deliberately small and depends on nothing else of tandem's: it owns the element
//! types ([`DType`]) and the `.npy` tensor files ([`npy`]) that every other crate and the command-line
//! tools exchange. The compiled-model format, the CPU kernels and the OpenCL backend join it as the
//! project grows (see `docs/architecture.md` in the shared docs).

pub mod artifact;
pub mod cpu;
pub mod dtype;
pub mod gpu;
pub mod npy;
pub mod profile;
pub mod rng;
pub mod session;
pub mod sync;

pub use dtype::DType;
