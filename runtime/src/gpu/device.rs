//! OpenCL device discovery and description.
//!
//! [`DeviceInfo`] is plain data (it is stored in artifacts and fed to [`super::dispatch`]);
//! [`GpuDevice`] owns the live OpenCL context and in-order queue of one device.

use super::GpuError;
use opencl3::command_queue::CommandQueue;
use opencl3::context::Context;
use opencl3::device::{
    Device, CL_DEVICE_SVM_ATOMICS, CL_DEVICE_SVM_COARSE_GRAIN_BUFFER,
    CL_DEVICE_SVM_FINE_GRAIN_BUFFER, CL_DEVICE_TYPE_ALL, CL_DEVICE_TYPE_GPU,
};
use serde::{Deserialize, Serialize};

/// Shared-virtual-memory capabilities of a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SvmSupport {
    pub coarse_buffer: bool,
    pub fine_buffer: bool,
    pub atomics: bool,
}

/// What the dispatcher and the predictors know about a device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceInfo {
    pub vendor: String,
    pub name: String,
    /// `CL_DEVICE_VERSION`, e.g. `OpenCL 3.0 PoCL …`.
    pub version: String,
    pub driver: String,
    /// `true` for a real GPU, `false` for a CPU OpenCL device such as PoCL.
    pub is_gpu: bool,
    pub compute_units: u32,
    pub max_work_group_size: usize,
    pub global_mem_bytes: u64,
    pub local_mem_bytes: u64,
    pub max_constant_bytes: u64,
    pub svm: SvmSupport,
    /// The device compiles OpenCL C 2.0 (C11 atomics with memory scopes).
    pub opencl_c_2: bool,
}

impl DeviceInfo {
    /// Whether two descriptions denote the same kind of device (vendor, name and driver); an
    /// artifact planned for one is only run on the same.
    pub fn same_device(&self, other: &DeviceInfo) -> bool {
        self.vendor == other.vendor && self.name == other.name && self.driver == other.driver
    }

    /// A short label: `vendor name (driver)`.
    pub fn label(&self) -> String {
        format!("{} {} (driver {})", self.vendor, self.name, self.driver)
    }

    /// Fine-grained buffer SVM with atomics: what the polling protocol and the shared arena need.
    pub fn has_fine_svm(&self) -> bool {
        self.svm.fine_buffer && self.svm.atomics
    }
}

/// A live OpenCL device with its context and in-order command queue.
pub struct GpuDevice {
    pub info: DeviceInfo,
    pub device: Device,
    pub context: Context,
    pub queue: CommandQueue,
}

impl GpuDevice {
    /// Opens the first GPU of the first platform that has one, else the first OpenCL device of
    /// any type (PoCL's CPU device on machines without a GPU). `TANDEM_OPENCL_DEVICE=SUBSTRING`
    /// picks the first device whose name contains it.
    pub fn open() -> Result<GpuDevice, GpuError> {
        // Some OpenCL implementations do not tolerate concurrent discovery.
        static DISCOVERY: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _guard = DISCOVERY.lock().unwrap_or_else(|e| e.into_inner());
        if !cl3::is_opencl_runtime_available() {
            return Err(GpuError::NoDevice(
                "the OpenCL library (libOpenCL.so) could not be loaded".into(),
            ));
        }
        let platforms = opencl3::platform::get_platforms().map_err(|e| {
            GpuError::NoDevice(format!(
                "listing OpenCL platforms failed: {e} (no ICD installed?)"
            ))
        })?;
        let wanted = std::env::var("TANDEM_OPENCL_DEVICE").ok();
        let mut candidates = Vec::new();
        for p in &platforms {
            for ty in [CL_DEVICE_TYPE_GPU, CL_DEVICE_TYPE_ALL] {
                for id in p.get_devices(ty).unwrap_or_default() {
                    if !candidates.contains(&id) {
                        candidates.push(id);
                    }
                }
            }
        }
        let device = candidates
            .into_iter()
            .map(Device::new)
            .find(|d| match &wanted {
                Some(w) => d.name().map(|n| n.contains(w.as_str())).unwrap_or(false),
                None => true,
            })
            .ok_or_else(|| {
                GpuError::NoDevice(match &wanted {
                    Some(w) => format!("no OpenCL device's name contains '{w}'"),
                    None => format!("no OpenCL device found ({} platform(s))", platforms.len()),
                })
            })?;
        let info = describe(&device)?;
        let context = Context::from_device(&device)
            .map_err(|e| GpuError::Device(format!("creating a context on {}: {e}", info.name)))?;
        let queue = CommandQueue::create_default(&context, 0)
            .map_err(|e| GpuError::Device(format!("creating a queue on {}: {e}", info.name)))?;
        Ok(GpuDevice {
            info,
            device,
            context,
            queue,
        })
    }
}

/// Reads the description of `device`.
fn describe(device: &Device) -> Result<DeviceInfo, GpuError> {
    let q = |what: &str, e: opencl3::error_codes::ClError| {
        GpuError::Device(format!("querying the device's {what}: {e}"))
    };
    let svm = device.svm_mem_capability();
    let c_version = device.opencl_c_version().unwrap_or_default();
    Ok(DeviceInfo {
        vendor: device
            .vendor()
            .map_err(|e| q("vendor", e))?
            .trim()
            .to_string(),
        name: device.name().map_err(|e| q("name", e))?.trim().to_string(),
        version: device
            .version()
            .map_err(|e| q("version", e))?
            .trim()
            .to_string(),
        driver: device
            .driver_version()
            .map_err(|e| q("driver version", e))?
            .trim()
            .to_string(),
        is_gpu: device
            .dev_type()
            .map(|t| t & CL_DEVICE_TYPE_GPU != 0)
            .unwrap_or(false),
        compute_units: device
            .max_compute_units()
            .map_err(|e| q("compute units", e))?,
        max_work_group_size: device
            .max_work_group_size()
            .map_err(|e| q("work-group size", e))?,
        global_mem_bytes: device.global_mem_size().unwrap_or(0),
        local_mem_bytes: device.local_mem_size().unwrap_or(0),
        max_constant_bytes: device.max_constant_buffer_size().unwrap_or(0),
        svm: SvmSupport {
            coarse_buffer: svm & CL_DEVICE_SVM_COARSE_GRAIN_BUFFER != 0,
            fine_buffer: svm & CL_DEVICE_SVM_FINE_GRAIN_BUFFER != 0,
            atomics: svm & CL_DEVICE_SVM_ATOMICS != 0,
        },
        opencl_c_2: c_version.contains("OpenCL C 2") || c_version.contains("OpenCL C 3"),
    })
}
