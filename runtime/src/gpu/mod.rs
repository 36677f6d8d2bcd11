//! The OpenCL backend: device discovery ([`device`]), the dispatch decision ([`dispatch`]), GPU
//! weight layouts ([`layout`]), kernel programs built once per device ([`program`]), memory
//! shared with the CPU ([`memory`]) and the kernel launches of every op ([`launch`]).
//!
//! The kernels live in `cl/*.cl`, embedded in the binary; `libOpenCL` is loaded at run time, so
//! a machine without it still runs CPU plans.

pub mod device;
pub mod dispatch;
pub mod launch;
pub mod layout;
pub mod memory;
pub mod program;

/// Why GPU work failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GpuError {
    /// No usable OpenCL device (or no OpenCL library).
    #[error("no GPU: {0}")]
    NoDevice(String),
    /// A kernel program failed to build.
    #[error("building GPU kernels {program} failed: {log}")]
    Build { program: String, log: String },
    /// An OpenCL call failed.
    #[error("GPU device error: {0}")]
    Device(String),
    /// A wait between the devices passed its deadline.
    #[error("deadline of {deadline_ms} ms passed while {waiting}")]
    Deadline { deadline_ms: u64, waiting: String },
    /// The artifact cannot run on this device.
    #[error("{0}")]
    Mismatch(String),
}

/// Formats an OpenCL error with the call that returned it.
pub(crate) fn cl_error(what: &str, code: impl std::fmt::Display) -> GpuError {
    GpuError::Device(format!("{what}: {code}"))
}
