//! GPU descriptions: the driver facts the delegate reads (spec §2), how the delegate classifies a
//! device from its name, and the JSON format for GPUs that are not built in (`docs/dispatch.md`).

use super::target::{Precision, StorageType};
use anyhow::{anyhow, bail, Context, Result};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// GPU vendor as the delegate classifies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Vendor {
    /// Qualcomm Adreno.
    Adreno,
    /// Arm Mali.
    Mali,
    /// Imagination PowerVR.
    #[serde(rename = "powervr")]
    PowerVr,
    Nvidia,
    Intel,
    /// AMD, including Samsung Xclipse.
    Amd,
    Apple,
    /// Anything the delegate does not recognise.
    Other,
}

impl Vendor {
    /// The vendor the delegate infers from a description string ("device_name vendor_name
    /// opencl_c_version"): case-insensitive substring keys tried in sorted key order, first hit
    /// wins.
    pub fn detect(description: &str) -> Vendor {
        const KEYS: [(&str, Vendor); 12] = [
            ("adreno", Vendor::Adreno),
            ("advanced micro devices", Vendor::Amd),
            ("amd", Vendor::Amd),
            ("apple", Vendor::Apple),
            ("intel", Vendor::Intel),
            ("mali", Vendor::Mali),
            ("nvidia", Vendor::Nvidia),
            ("power", Vendor::PowerVr),
            ("powervr", Vendor::PowerVr),
            ("qualcomm", Vendor::Adreno),
            ("radeon", Vendor::Amd),
            ("xclipse", Vendor::Amd),
        ];
        let d = description.to_lowercase();
        KEYS.iter()
            .find(|(key, _)| d.contains(key))
            .map_or(Vendor::Other, |&(_, v)| v)
    }

    /// Display name.
    pub fn label(self) -> &'static str {
        match self {
            Vendor::Adreno => "Adreno",
            Vendor::Mali => "Mali",
            Vendor::PowerVr => "PowerVR",
            Vendor::Nvidia => "NVIDIA",
            Vendor::Intel => "Intel",
            Vendor::Amd => "AMD",
            Vendor::Apple => "Apple",
            Vendor::Other => "other",
        }
    }
}

/// Adreno generation as the delegate classifies it. Only the models the delegate lists are known;
/// any other number (8xx, 710, 720, 732, 642L, ...) is [`AdrenoGen::Unknown`] and takes the
/// "else" branches of every rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum AdrenoGen {
    A3xx,
    A4xx,
    A5xx,
    A6xx,
    A7xx,
    Unknown,
}

/// The Adreno models the delegate knows, by 3-digit number.
const ADRENO_MODELS: [u32; 36] = [
    304, 305, 306, 308, 320, 330, 405, 418, 420, 430, 504, 505, 506, 508, 509, 510, 512, 530, 540,
    605, 610, 612, 615, 616, 618, 620, 630, 640, 650, 660, 675, 680, 685, 730, 740, 750,
];

/// An Adreno model: the matched number (if any) and its generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct AdrenoModel {
    pub number: Option<u32>,
    pub generation: AdrenoGen,
}

impl AdrenoModel {
    /// Substring match of the known 3-digit model numbers in `description`, in ascending order.
    pub fn detect(description: &str) -> AdrenoModel {
        let number = ADRENO_MODELS
            .iter()
            .copied()
            .find(|n| description.contains(&n.to_string()));
        let generation = match number.map(|n| n / 100) {
            Some(3) => AdrenoGen::A3xx,
            Some(4) => AdrenoGen::A4xx,
            Some(5) => AdrenoGen::A5xx,
            Some(6) => AdrenoGen::A6xx,
            Some(7) => AdrenoGen::A7xx,
            _ => AdrenoGen::Unknown,
        };
        AdrenoModel { number, generation }
    }

    /// 6xx or 7xx: the "6xx or higher" tests of the delegate (storage choice).
    pub fn is_6xx_or_7xx(self) -> bool {
        matches!(self.generation, AdrenoGen::A6xx | AdrenoGen::A7xx)
    }

    /// Wave size (`full` for F16): 128/64 on 6xx and 7xx, 64/32 on 4xx and 5xx, 32/16 otherwise.
    pub fn wave_size(self, full: bool) -> usize {
        let (f, h) = match self.generation {
            AdrenoGen::A6xx | AdrenoGen::A7xx => (128, 64),
            AdrenoGen::A4xx | AdrenoGen::A5xx => (64, 32),
            AdrenoGen::A3xx | AdrenoGen::Unknown => (32, 16),
        };
        if full {
            f
        } else {
            h
        }
    }
}

/// Mali architecture generation as the delegate classifies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum MaliGen {
    Midgard,
    BifrostGen1,
    BifrostGen2,
    BifrostGen3,
    ValhallGen1,
    ValhallGen2,
    ValhallGen3,
    ValhallGen4,
    /// Any name that matches none of the keys: RecommendedBlock is always 1.
    Unknown,
}

impl MaliGen {
    pub fn is_midgard(self) -> bool {
        self == MaliGen::Midgard
    }

    pub fn is_bifrost(self) -> bool {
        matches!(
            self,
            MaliGen::BifrostGen1 | MaliGen::BifrostGen2 | MaliGen::BifrostGen3
        )
    }

    pub fn is_valhall(self) -> bool {
        matches!(
            self,
            MaliGen::ValhallGen1
                | MaliGen::ValhallGen2
                | MaliGen::ValhallGen3
                | MaliGen::ValhallGen4
        )
    }
}

/// Mali model keys, longest first so "g710" is not taken for "g71". Any other name (G615, G720,
/// ...) either hits a shorter key ("g720" hits "g72") or is unknown, as in the delegate.
const MALI_MODELS: [(&str, MaliGen); 27] = [
    ("g310", MaliGen::ValhallGen3),
    ("g510", MaliGen::ValhallGen3),
    ("g610", MaliGen::ValhallGen3),
    ("g710", MaliGen::ValhallGen3),
    ("g715", MaliGen::ValhallGen4),
    ("t604", MaliGen::Midgard),
    ("t622", MaliGen::Midgard),
    ("t624", MaliGen::Midgard),
    ("t628", MaliGen::Midgard),
    ("t658", MaliGen::Midgard),
    ("t678", MaliGen::Midgard),
    ("t720", MaliGen::Midgard),
    ("t760", MaliGen::Midgard),
    ("t820", MaliGen::Midgard),
    ("t830", MaliGen::Midgard),
    ("t860", MaliGen::Midgard),
    ("t880", MaliGen::Midgard),
    ("g31", MaliGen::BifrostGen1),
    ("g51", MaliGen::BifrostGen1),
    ("g71", MaliGen::BifrostGen1),
    ("g52", MaliGen::BifrostGen2),
    ("g72", MaliGen::BifrostGen2),
    ("g76", MaliGen::BifrostGen3),
    ("g57", MaliGen::ValhallGen1),
    ("g77", MaliGen::ValhallGen1),
    ("g68", MaliGen::ValhallGen2),
    ("g78", MaliGen::ValhallGen2),
];

/// A Mali model: the matched key (upper-cased, e.g. "G76") and its generation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MaliModel {
    pub key: Option<String>,
    pub generation: MaliGen,
}

impl MaliModel {
    /// Substring match of the model keys in the lower-cased `description`.
    pub fn detect(description: &str) -> MaliModel {
        let d = description.to_lowercase();
        match MALI_MODELS.iter().find(|(key, _)| d.contains(key)) {
            Some((key, generation)) => MaliModel {
                key: Some(key.to_uppercase()),
                generation: *generation,
            },
            None => MaliModel {
                key: None,
                generation: MaliGen::Unknown,
            },
        }
    }
}

fn yes() -> bool {
    true
}

fn default_opencl_version() -> String {
    "2.0".to_string()
}

fn default_image_size() -> usize {
    16384
}

/// A GPU as described to the emulator: the driver facts the delegate reads plus the delegate
/// options that matter here. This is the JSON format of `tandem dispatch --gpu FILE.json`
/// (documented field by field in `docs/dispatch.md`); built-in GPUs are values of it too.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuSpec {
    /// Label in reports.
    pub name: String,
    /// CL_DEVICE_NAME (plus vendor name and OpenCL C version, if known), from which the delegate
    /// derives vendor and model by substring. Defaults to `name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_name: Option<String>,
    /// Overrides the vendor inferred from `device_name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor: Option<Vendor>,
    /// CL_DEVICE_MAX_COMPUTE_UNITS as the driver reports it.
    pub compute_units: usize,
    /// CL_DEVICE_MAX_WORK_GROUP_SIZE.
    pub max_work_group_size: usize,
    /// CL_DEVICE_MAX_WORK_ITEM_SIZES; defaults to `max_work_group_size` in every dimension.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_work_item_sizes: Option<[usize; 3]>,
    /// CL_KERNEL_WORK_GROUP_SIZE assumed for every kernel (it cannot be known offline); defaults
    /// to `max_work_group_size`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_max_work_group_size: Option<usize>,
    /// OpenCL version of the device, "major.minor".
    #[serde(default = "default_opencl_version")]
    pub opencl_version: String,
    /// Whether the delegate treats the device as fp16-capable (cl_khr_fp16, minus the PowerVR
    /// Rogue GE8xxx quirk). Without it, F16 and F32_F16 are raised to F32.
    #[serde(default = "yes")]
    pub fp16: bool,
    /// Image support (CL_DEVICE_IMAGE_SUPPORT).
    #[serde(default = "yes")]
    pub images: bool,
    /// "image2d from buffer" as the delegate defines it: non-zero pitch and base-address
    /// alignment, and CL 2.0–2.2 or `cl_khr_image2d_from_buffer` listed.
    #[serde(default = "yes")]
    pub image2d_from_buffer: bool,
    /// CL_DEVICE_LOCAL_MEM_TYPE is CL_LOCAL (dedicated local memory).
    #[serde(default = "yes")]
    pub local_memory_dedicated: bool,
    /// CL_DEVICE_PREFERRED_WORK_GROUP_SIZE_MULTIPLE (OpenCL 3.0+); PowerVR ConvGeneric uses it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preferred_work_group_size_multiple: Option<usize>,
    /// CL_DEVICE_IMAGE2D_MAX_WIDTH.
    #[serde(default = "default_image_size")]
    pub image2d_max_width: usize,
    /// CL_DEVICE_IMAGE2D_MAX_HEIGHT.
    #[serde(default = "default_image_size")]
    pub image2d_max_height: usize,
    /// Supported sub-group sizes (Intel only); empty when sub-groups are unavailable.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sub_group_sizes: Vec<usize>,
    /// Delegate precision when `--precision` is not given: "f32" (the delegate's default
    /// options), "f16" (precision loss allowed) or "f32_f16".
    #[serde(default)]
    pub precision: Precision,
    /// Overrides the model-wide storage type the delegate would choose (§4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<StorageType>,
    /// Free text: where the numbers come from, assumptions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notes: Option<String>,
}

/// Every field of [`GpuSpec`], for error messages.
pub const GPU_SPEC_FIELDS: [&str; 19] = [
    "name",
    "device_name",
    "vendor",
    "compute_units",
    "max_work_group_size",
    "max_work_item_sizes",
    "kernel_max_work_group_size",
    "opencl_version",
    "fp16",
    "images",
    "image2d_from_buffer",
    "local_memory_dedicated",
    "preferred_work_group_size_multiple",
    "image2d_max_width",
    "image2d_max_height",
    "sub_group_sizes",
    "precision",
    "storage",
    "notes",
];

fn check_as<T: DeserializeOwned>(v: &serde_json::Value) -> std::result::Result<(), String> {
    serde_json::from_value::<T>(v.clone())
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Checks one field's value on its own, so errors can name the field.
fn check_field(key: &str, v: &serde_json::Value) -> std::result::Result<(), String> {
    match key {
        "name" | "device_name" | "opencl_version" | "notes" => check_as::<String>(v),
        "vendor" => check_as::<Vendor>(v),
        "max_work_item_sizes" => check_as::<[usize; 3]>(v),
        "fp16" | "images" | "image2d_from_buffer" | "local_memory_dedicated" => check_as::<bool>(v),
        "sub_group_sizes" => check_as::<Vec<usize>>(v),
        "precision" => check_as::<Precision>(v),
        "storage" => check_as::<StorageType>(v),
        _ => check_as::<usize>(v).map_err(|e| format!("{e} (a non-negative integer)")),
    }
}

impl GpuSpec {
    /// Parses and validates a JSON description. Errors name the offending field.
    pub fn from_json(text: &str) -> Result<GpuSpec> {
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| anyhow!("not valid JSON: {e}"))?;
        let obj = value
            .as_object()
            .ok_or_else(|| anyhow!("a GPU description must be a JSON object"))?;
        for (key, v) in obj {
            if !GPU_SPEC_FIELDS.contains(&key.as_str()) {
                bail!(
                    "unknown field `{key}`; the known fields are: {}",
                    GPU_SPEC_FIELDS.join(", ")
                );
            }
            check_field(key, v).map_err(|e| anyhow!("field `{key}`: {e}"))?;
        }
        let spec: GpuSpec = serde_json::from_value(value).map_err(|e| anyhow!("{e}"))?;
        spec.validate()?;
        Ok(spec)
    }

    /// Checks ranges the format cannot express, naming the field.
    pub fn validate(&self) -> Result<()> {
        if self.name.trim().is_empty() {
            bail!("field `name`: must not be empty");
        }
        let positive = [
            ("compute_units", Some(self.compute_units)),
            ("max_work_group_size", Some(self.max_work_group_size)),
            (
                "kernel_max_work_group_size",
                self.kernel_max_work_group_size,
            ),
            (
                "preferred_work_group_size_multiple",
                self.preferred_work_group_size_multiple,
            ),
            ("image2d_max_width", Some(self.image2d_max_width)),
            ("image2d_max_height", Some(self.image2d_max_height)),
        ];
        for (field, v) in positive {
            if v == Some(0) {
                bail!("field `{field}`: must be at least 1");
            }
        }
        if let Some(k) = self.kernel_max_work_group_size {
            if k > self.max_work_group_size {
                bail!(
                    "field `kernel_max_work_group_size`: {k} exceeds max_work_group_size {}",
                    self.max_work_group_size
                );
            }
        }
        if let Some(sizes) = self.max_work_item_sizes {
            if sizes.contains(&0) {
                bail!("field `max_work_item_sizes`: every size must be at least 1");
            }
        }
        if self.sub_group_sizes.contains(&0) {
            bail!("field `sub_group_sizes`: every size must be at least 1");
        }
        parse_version(&self.opencl_version).map_err(|e| anyhow!("field `opencl_version`: {e}"))?;
        Ok(())
    }
}

fn parse_version(s: &str) -> std::result::Result<(u32, u32), String> {
    let bad = || format!("expected \"major.minor\" such as \"3.0\", got {s:?}");
    let (major, minor) = s.trim().split_once('.').ok_or_else(bad)?;
    Ok((
        major.parse().map_err(|_| bad())?,
        minor.parse().map_err(|_| bad())?,
    ))
}

/// A described GPU with the delegate's classification resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct Gpu {
    pub spec: GpuSpec,
    pub vendor: Vendor,
    /// Set when the vendor is Adreno.
    pub adreno: Option<AdrenoModel>,
    /// Set when the vendor is Mali.
    pub mali: Option<MaliModel>,
    /// OpenCL (major, minor).
    pub opencl: (u32, u32),
}

impl Gpu {
    /// Validates `spec` and classifies the device as the delegate would.
    pub fn new(spec: GpuSpec) -> Result<Gpu> {
        spec.validate()?;
        let description = spec
            .device_name
            .clone()
            .unwrap_or_else(|| spec.name.clone());
        let vendor = spec.vendor.unwrap_or_else(|| Vendor::detect(&description));
        let opencl = parse_version(&spec.opencl_version)
            .map_err(|e| anyhow!("field `opencl_version`: {e}"))?;
        Ok(Gpu {
            adreno: (vendor == Vendor::Adreno).then(|| AdrenoModel::detect(&description)),
            mali: (vendor == Vendor::Mali).then(|| MaliModel::detect(&description)),
            vendor,
            opencl,
            spec,
        })
    }

    /// Parses a JSON description (see [`GpuSpec::from_json`]).
    pub fn from_json(text: &str) -> Result<Gpu> {
        Gpu::new(GpuSpec::from_json(text)?)
    }

    /// A built-in GPU by name (see [`super::builtin`]); the error lists the known names.
    pub fn builtin(name: &str) -> Result<Gpu> {
        match super::builtin::find(name) {
            Some(spec) => Gpu::new(spec),
            None => bail!(
                "unknown GPU `{name}`; built-in GPUs are: {} (or give the path of a JSON description)",
                super::builtin::ids().join(", ")
            ),
        }
    }

    /// `--gpu`: a path to a JSON description when such a file exists or the argument ends in
    /// `.json`, else a built-in name.
    pub fn resolve(name_or_path: &str) -> Result<Gpu> {
        let path = Path::new(name_or_path);
        if path.is_file() || name_or_path.to_lowercase().ends_with(".json") {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read GPU description {}", path.display()))?;
            return Gpu::from_json(&text)
                .with_context(|| format!("invalid GPU description {}", path.display()));
        }
        Gpu::builtin(name_or_path)
    }

    pub fn name(&self) -> &str {
        &self.spec.name
    }

    pub fn compute_units(&self) -> usize {
        self.spec.compute_units
    }

    pub fn is_adreno(&self) -> bool {
        self.vendor == Vendor::Adreno
    }

    pub fn is_mali(&self) -> bool {
        self.vendor == Vendor::Mali
    }

    /// The Adreno generation ([`AdrenoGen::Unknown`] for other vendors too).
    pub fn adreno_gen(&self) -> AdrenoGen {
        self.adreno.map_or(AdrenoGen::Unknown, |a| a.generation)
    }

    /// The Mali generation ([`MaliGen::Unknown`] for other vendors too).
    pub fn mali_gen(&self) -> MaliGen {
        self.mali
            .as_ref()
            .map_or(MaliGen::Unknown, |m| m.generation)
    }

    /// Per-dimension work-item limits.
    pub fn max_work_item_sizes(&self) -> [usize; 3] {
        self.spec
            .max_work_item_sizes
            .unwrap_or([self.spec.max_work_group_size; 3])
    }

    /// The CL_KERNEL_WORK_GROUP_SIZE assumed for every kernel.
    pub fn kernel_max_work_group_size(&self) -> usize {
        self.spec
            .kernel_max_work_group_size
            .unwrap_or(self.spec.max_work_group_size)
    }

    fn cl_at_least(&self, major: u32, minor: u32) -> bool {
        self.opencl >= (major, minor)
    }

    /// Whether the delegate may use `storage` on this device (`IsGpuSupportsStorageType`).
    pub fn supports_storage(&self, storage: StorageType) -> bool {
        let images_12 = self.cl_at_least(1, 2) && self.spec.images;
        match storage {
            StorageType::Buffer => true,
            StorageType::Texture2d | StorageType::SingleTexture2d => {
                self.vendor != Vendor::Amd && self.spec.images
            }
            StorageType::TextureArray => images_12,
            StorageType::ImageBuffer => {
                images_12 && matches!(self.vendor, Vendor::Adreno | Vendor::Amd | Vendor::Nvidia)
            }
        }
    }

    /// The model-wide storage of latency-first options (`GetFastestStorageType`, §4), falling
    /// back to BUFFER when unsupported; `storage` in the description overrides it.
    pub fn model_storage(&self) -> StorageType {
        if let Some(s) = self.spec.storage {
            return s;
        }
        let preferred = match self.vendor {
            Vendor::Adreno => {
                let known = self.adreno.is_some_and(|a| a.is_6xx_or_7xx());
                if known && !self.spec.image2d_from_buffer {
                    StorageType::TextureArray
                } else {
                    StorageType::Texture2d
                }
            }
            Vendor::Mali | Vendor::PowerVr => StorageType::Texture2d,
            Vendor::Nvidia | Vendor::Amd => {
                if self.cl_at_least(1, 2) && self.spec.images {
                    StorageType::ImageBuffer
                } else {
                    StorageType::Buffer
                }
            }
            Vendor::Intel | Vendor::Apple | Vendor::Other => StorageType::Buffer,
        };
        if self.supports_storage(preferred) {
            preferred
        } else {
            StorageType::Buffer
        }
    }

    /// How the delegate classes this GPU, e.g. "Adreno 6xx (640)", "Adreno kUnknown",
    /// "Mali BifrostGen3 (G76)".
    pub fn class(&self) -> String {
        match self.vendor {
            Vendor::Adreno => match self.adreno {
                Some(AdrenoModel {
                    number: Some(n),
                    generation,
                }) if generation != AdrenoGen::Unknown => {
                    format!("Adreno {}xx ({n})", n / 100)
                }
                _ => "Adreno kUnknown".to_string(),
            },
            Vendor::Mali => match &self.mali {
                Some(MaliModel {
                    key: Some(key),
                    generation,
                }) => format!("Mali {generation:?} ({key})"),
                _ => "Mali unknown model".to_string(),
            },
            other => other.label().to_string(),
        }
    }
}
