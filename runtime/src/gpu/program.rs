//! Kernel programs: each `.cl` source is built once per device and set of build options, and
//! each kernel object is created once.

use super::{device::GpuDevice, GpuError};
use opencl3::kernel::Kernel;
use opencl3::program::Program;
use std::collections::HashMap;

const COMMON: &str = include_str!("cl/common.cl");

/// The kernel sources, by name.
pub const SOURCES: [(&str, &str); 9] = [
    ("conv", include_str!("cl/conv.cl")),
    ("winograd", include_str!("cl/winograd.cl")),
    ("depthwise", include_str!("cl/depthwise.cl")),
    ("fully_connected", include_str!("cl/fully_connected.cl")),
    ("elementwise", include_str!("cl/elementwise.cl")),
    ("layout", include_str!("cl/layout.cl")),
    ("pool", include_str!("cl/pool.cl")),
    ("matmul", include_str!("cl/matmul.cl")),
    ("sync", include_str!("cl/sync.cl")),
];

/// Built programs and their kernels.
#[derive(Default)]
pub struct ProgramCache {
    programs: HashMap<(&'static str, String), Program>,
    kernels: HashMap<(&'static str, String, &'static str), Kernel>,
    /// Fault injection: the next build gets a source with a syntax error.
    pub(crate) break_next_build: bool,
}

impl ProgramCache {
    /// The kernel `name` of source `source` built with `options` (e.g. `-DBC=8 -DBX=4`).
    pub fn kernel(
        &mut self,
        dev: &GpuDevice,
        source: &'static str,
        options: &str,
        name: &'static str,
    ) -> Result<&Kernel, GpuError> {
        let key = (source, options.to_string(), name);
        if !self.kernels.contains_key(&key) {
            let program = self.program(dev, source, options)?;
            let kernel = Kernel::create(program, name).map_err(|e| GpuError::Build {
                program: format!("{source}.cl"),
                log: format!("kernel {name}: {e}"),
            })?;
            self.kernels.insert(key.clone(), kernel);
        }
        Ok(&self.kernels[&key])
    }

    fn program(
        &mut self,
        dev: &GpuDevice,
        source: &'static str,
        options: &str,
    ) -> Result<&Program, GpuError> {
        let key = (source, options.to_string());
        if !self.programs.contains_key(&key) {
            let body = SOURCES
                .iter()
                .find(|(n, _)| *n == source)
                .map(|(_, s)| *s)
                .ok_or_else(|| GpuError::Build {
                    program: source.into(),
                    log: "no such kernel source".into(),
                })?;
            let mut text = format!("{COMMON}\n{body}");
            if std::mem::take(&mut self.break_next_build) {
                text.push_str("\n__kernel void injected_fault( { }\n");
            }
            let mut opts = options.to_string();
            if source == "sync" && dev.info.opencl_c_2 {
                opts.push_str(" -cl-std=CL2.0");
            }
            let program = Program::create_and_build_from_source(&dev.context, &text, &opts)
                .map_err(|log| GpuError::Build {
                    program: format!("{source}.cl ({})", opts.trim()),
                    log: log.lines().take(20).collect::<Vec<_>>().join("\n"),
                })?;
            self.programs.insert(key.clone(), program);
        }
        Ok(&self.programs[&key])
    }
}
