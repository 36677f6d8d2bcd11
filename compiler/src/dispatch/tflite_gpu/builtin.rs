//! Built-in GPU descriptions.
//!
//! Assumptions common to all of them:
//! - `compute_units` is CL_DEVICE_MAX_COMPUTE_UNITS as the OpenCL driver reports it. For Adreno
//!   the values equal the delegate's own per-model table (640 = 2, 650/660 = 3, 730 = 4,
//!   740 = 6), which the spec's worked examples use; for Mali it is the shader-core count of the
//!   named configuration (MPn), which is what the Mali driver reports.
//! - `kernel_max_work_group_size` (CL_KERNEL_WORK_GROUP_SIZE, unknowable offline) is taken equal
//!   to the device maximum, the spec's default guess.
//! - Adreno 6xx/7xx: 1024 work items per group and per dimension, 16384² images, OpenCL 2.0 on
//!   6xx and 3.0 on 7xx with image2d-from-buffer usable (so TEXTURE_2D storage), dedicated local
//!   memory.
//! - Mali: no dedicated local memory (CL_GLOBAL), 65536² images, TEXTURE_2D storage; work-group
//!   limit 384 on Bifrost (G76), 512 on Valhall gen 2 (G78) and 1024 on Valhall gen 3 (G710).
//! - PowerVR: dedicated local memory, 8192² images, 512 work items per group.
//!
//! All built-ins default to the delegate's default precision (F32); `--precision` overrides it.

use super::gpu::{GpuSpec, Vendor};
use super::target::Precision;

fn base(name: &str, device_name: &str, compute_units: usize, max_wg: usize) -> GpuSpec {
    GpuSpec {
        name: name.to_string(),
        device_name: Some(device_name.to_string()),
        vendor: None,
        compute_units,
        max_work_group_size: max_wg,
        max_work_item_sizes: Some([max_wg; 3]),
        kernel_max_work_group_size: None,
        opencl_version: "2.0".to_string(),
        fp16: true,
        images: true,
        image2d_from_buffer: true,
        local_memory_dedicated: true,
        preferred_work_group_size_multiple: None,
        image2d_max_width: 16384,
        image2d_max_height: 16384,
        sub_group_sizes: Vec::new(),
        precision: Precision::F32,
        storage: None,
        notes: None,
    }
}

fn adreno(number: u32, soc: &str, compute_units: usize, opencl: &str) -> GpuSpec {
    GpuSpec {
        opencl_version: opencl.to_string(),
        notes: Some(format!(
            "{soc}; compute units as the OpenCL driver reports them (equal to the delegate's table)"
        )),
        ..base(
            &format!("Adreno {number}"),
            &format!("QUALCOMM Adreno(TM) {number}"),
            compute_units,
            1024,
        )
    }
}

fn mali(model: &str, cores: usize, max_wg: usize, opencl: &str, soc: &str) -> GpuSpec {
    GpuSpec {
        opencl_version: opencl.to_string(),
        local_memory_dedicated: false,
        image2d_max_width: 65536,
        image2d_max_height: 65536,
        notes: Some(format!(
            "{soc}; compute units = {cores} shader cores (MP{cores}); work-group limit {max_wg} assumed for the generation"
        )),
        ..base(
            &format!("Mali-{model} MP{cores}"),
            &format!("Mali-{model} MP{cores}"),
            cores,
            max_wg,
        )
    }
}

/// PowerVR Rogue GE8320 (MediaTek Helio P35/G35 class): OpenCL 1.2, 2 compute units. The
/// delegate disables fp16 on Rogue GE8xxx, so every precision runs as F32.
fn powervr_ge8320() -> GpuSpec {
    GpuSpec {
        vendor: Some(Vendor::PowerVr),
        opencl_version: "1.2".to_string(),
        fp16: false,
        image2d_from_buffer: false,
        image2d_max_width: 8192,
        image2d_max_height: 8192,
        notes: Some(
            "Helio P35/G35 class; fp16 disabled by the delegate for Rogue GE8xxx; compute units, \
             work-group and image limits assumed"
                .to_string(),
        ),
        ..base("PowerVR GE8320", "PowerVR Rogue GE8320", 2, 512)
    }
}

/// PowerVR B-Series BXM-8-256 (MediaTek Dimensity 930 class): OpenCL 3.0, fp16 capable. The
/// preferred work-group multiple is not known, so ConvGeneric's work group falls back to
/// (32,1,1) as on OpenCL < 3.0.
fn powervr_bxm_8_256() -> GpuSpec {
    GpuSpec {
        vendor: Some(Vendor::PowerVr),
        opencl_version: "3.0".to_string(),
        image2d_max_width: 8192,
        image2d_max_height: 8192,
        notes: Some(
            "Dimensity 930 class; single core; work-group and image limits assumed; preferred \
             work-group multiple unknown"
                .to_string(),
        ),
        ..base("PowerVR BXM-8-256", "PowerVR B-Series BXM-8-256", 1, 512)
    }
}

/// A built-in: its id (what `--gpu` takes), other accepted names, and its description.
pub struct Builtin {
    pub id: &'static str,
    pub aliases: &'static [&'static str],
    pub spec: fn() -> GpuSpec,
}

/// Every built-in GPU.
pub const BUILTINS: [Builtin; 10] = [
    Builtin {
        id: "adreno-640",
        aliases: &["a640", "snapdragon-855"],
        spec: || adreno(640, "Snapdragon 855", 2, "2.0"),
    },
    Builtin {
        id: "adreno-650",
        aliases: &["a650", "snapdragon-865"],
        spec: || adreno(650, "Snapdragon 865", 3, "2.0"),
    },
    Builtin {
        id: "adreno-660",
        aliases: &["a660", "snapdragon-888"],
        spec: || adreno(660, "Snapdragon 888", 3, "2.0"),
    },
    Builtin {
        id: "adreno-730",
        aliases: &["a730", "snapdragon-8-gen-1"],
        spec: || adreno(730, "Snapdragon 8 Gen 1", 4, "3.0"),
    },
    Builtin {
        id: "adreno-740",
        aliases: &["a740", "snapdragon-8-gen-2"],
        spec: || adreno(740, "Snapdragon 8 Gen 2", 6, "3.0"),
    },
    Builtin {
        id: "mali-g76-mp10",
        aliases: &["mali-g76", "g76"],
        spec: || mali("G76", 10, 384, "2.0", "Kirin 980"),
    },
    Builtin {
        id: "mali-g78-mp20",
        aliases: &["mali-g78", "g78"],
        spec: || mali("G78", 20, 512, "2.1", "Google Tensor (G1)"),
    },
    Builtin {
        id: "mali-g710-mp7",
        aliases: &["mali-g710", "g710"],
        spec: || mali("G710", 7, 1024, "3.0", "Google Tensor G2"),
    },
    Builtin {
        id: "powervr-ge8320",
        aliases: &["ge8320"],
        spec: powervr_ge8320,
    },
    Builtin {
        id: "powervr-bxm-8-256",
        aliases: &["bxm-8-256"],
        spec: powervr_bxm_8_256,
    },
];

/// Lower-case alphanumerics only, so "Adreno 640", "adreno-640" and "ADRENO640" are equal.
fn normalize(s: &str) -> String {
    s.chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// The built-in called `name` (its id, an alias or its display name, ignoring case and
/// punctuation).
pub fn find(name: &str) -> Option<GpuSpec> {
    let wanted = normalize(name);
    if wanted.is_empty() {
        return None;
    }
    BUILTINS.iter().find_map(|b| {
        let spec = (b.spec)();
        let hit = normalize(b.id) == wanted
            || normalize(&spec.name) == wanted
            || b.aliases.iter().any(|a| normalize(a) == wanted);
        hit.then_some(spec)
    })
}

/// Ids of every built-in, in table order.
pub fn ids() -> Vec<&'static str> {
    BUILTINS.iter().map(|b| b.id).collect()
}
