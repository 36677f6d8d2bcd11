//! A device profile: trained predictors for every executor of one device, with provenance.
//!
//! Stored as JSON (`*.profile`): `format` ([`FORMAT`]), `provenance`, `sync_ms`, per executor
//! its feature names and forest, and optionally the contention of split steps per op kind
//! ([`crate::corun`]). Predictions are latencies in milliseconds:
//! `exp(forest(features))`, since the forests are trained on the log of the latency.

use crate::calibrate::Calibration;
use crate::corun::{self, Contention};
use crate::features::{self, cpu_executor, Layer, OpKind};
use crate::forest::{Baseline, Forest};
use crate::speed::SpeedModel;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use tandem_runtime::gpu::device::DeviceInfo;
use tandem_runtime::gpu::dispatch::{vector_width, Variant};

/// The format tag of profiles this version reads and writes.
pub const FORMAT: &str = "tandem-profile/2";

/// Accuracy of one executor's predictor on held-out data.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Accuracy {
    /// Mean absolute percentage error, in percent.
    pub mape: f64,
    /// Share of predictions within ±10% of the measurement (0–1).
    pub within10: f64,
    /// Points evaluated.
    pub n: usize,
}

/// Where a profile comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    /// The OpenCL device the GPU executors were measured on.
    pub device: DeviceInfo,
    /// The CPU model (`/proc/cpuinfo`).
    pub cpu: String,
    /// The host's processor by vendor, family, model and stepping
    /// (`tandem_runtime::profile::host_signature`), where the dataset's device description
    /// recorded it: hosts whose OpenCL device and CPU model name read the same (PoCL on two
    /// generations of AMD EPYC, say) are told apart by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// How the device was set up (threads, pinning).
    pub setting: String,
    /// UTC date of training (`YYYY-MM-DD`).
    pub date: String,
    /// `tandem <version>` that trained it.
    pub tandem_version: String,
    /// The dataset's file name.
    pub dataset: String,
    /// Measured points and configurations in the dataset.
    pub samples: usize,
    pub configs: usize,
    /// Held-out (20% of configurations) accuracy per executor.
    pub validation: BTreeMap<String, Accuracy>,
    /// Calibrations to a later state of the device (`tandem calibrate`), oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calibrations: Vec<Calibration>,
    /// The co-run datasets the contention was fitted on (`tandem train --corun`), by file name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub corun_datasets: Vec<String>,
    /// The profile whose predictors this one's correct where that predicted better in
    /// cross-validation (`tandem train --base`): its file name, dataset and date. Each
    /// corrected executor's `params` name it too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
    /// The machine's speed while the training data were measured, by the quiet gate's
    /// reference layer (`None`: no row recorded it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe: Option<ProbeSpeed>,
    /// Which latency of a point the profile was trained on and predicts
    /// ([`crate::dataset::Latency`]); absent (median) in profiles trained before the choice.
    #[serde(default, skip_serializing_if = "is_median")]
    pub latency: crate::dataset::Latency,
    /// How long forests were distilled into short ones (`tandem flatten`), if they were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flattened: Option<crate::flatten::Flattening>,
}

fn is_median(l: &crate::dataset::Latency) -> bool {
    *l == crate::dataset::Latency::Median
}

/// The machine's speed while a dataset was measured: per side, the median of its rows'
/// `probe_ms` (the quiet gate's reference layer, [`crate::dataset::Row::probe_ms`]) and how
/// many rows recorded one. A host whose speed moves between days moves this with it, so two
/// datasets' probes say how much of their difference is the machine's.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct ProbeSpeed {
    pub gpu_ms: Option<f64>,
    pub gpu_rows: usize,
    pub cpu_ms: Option<f64>,
    pub cpu_rows: usize,
}

impl ProbeSpeed {
    /// The speed of `rows` (`None` when no row recorded a probe).
    pub fn of(rows: &[crate::dataset::Row]) -> Option<ProbeSpeed> {
        let side = |cpu: bool| {
            let mut v: Vec<f64> = rows
                .iter()
                .filter(|r| features::is_cpu(&r.executor) == cpu && r.probe_ms > 0.0)
                .map(|r| r.probe_ms)
                .collect();
            let n = v.len();
            ((n > 0).then(|| tandem_runtime::profile::median(&mut v)), n)
        };
        let ((gpu_ms, gpu_rows), (cpu_ms, cpu_rows)) = (side(false), side(true));
        (gpu_rows + cpu_rows > 0).then_some(ProbeSpeed {
            gpu_ms,
            gpu_rows,
            cpu_ms,
            cpu_rows,
        })
    }
}

/// One executor's predictor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Executor {
    pub features: Vec<String>,
    /// Whether the GPU dispatch features are part of `features`.
    pub dispatch_features: bool,
    /// Whether the kernel's loop-trip counts follow the dispatch features in `features`
    /// ([`features::kernel_count_names`]; false in profiles trained before them).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub kernel_counts: bool,
    /// LightGBM parameters the forest was trained with (from the search).
    pub params: BTreeMap<String, serde_json::Value>,
    pub forest: Forest,
    /// The log-linear trend the forest corrects.
    pub baseline: Baseline,
    /// Calibration factor the predictions are multiplied by (1 unless calibrated).
    #[serde(default = "unit_scale", skip_serializing_if = "is_unit_scale")]
    pub scale: f64,
}

fn unit_scale() -> f64 {
    1.0
}

fn is_unit_scale(s: &f64) -> bool {
    *s == 1.0
}

impl Executor {
    /// Predicted latency (ms) for one feature row: `scale · exp(baseline(x) + forest(x))`.
    #[inline]
    pub fn predict_ms(&self, x: &[f64]) -> f64 {
        self.scale * (self.baseline.eval(x) + self.forest.predict(x)).exp()
    }

    /// The log of [`Executor::predict_ms`]: `ln(scale) + baseline(x) + forest(x)`, what a
    /// training on another host's measurements corrects (`tandem train --base`).
    pub fn predict_log_ms(&self, x: &[f64]) -> f64 {
        self.scale.ln() + self.baseline.eval(x) + self.forest.predict(x)
    }

    /// This executor followed by a correction trained on its residuals (`baseline` and
    /// `forest` fit to `ln(ms) − predict_log_ms(x)`): one executor predicting
    /// `exp(predict_log_ms(x) + baseline(x) + forest(x))`, with unit scale. `None` when the
    /// correction reads rows of another length, or both carry an additive cost model.
    pub fn corrected_by(&self, baseline: &Baseline, forest: &Forest) -> Option<(Baseline, Forest)> {
        Some((
            self.baseline.plus(baseline, self.scale.ln())?,
            self.forest.followed_by(forest)?,
        ))
    }

    /// [`Executor::predict_ms`] of many rows at once (equal results; faster, since each tree
    /// stays in cache while it scores every row).
    pub fn predict_ms_batch(&self, rows: &[&[f64]]) -> Vec<f64> {
        let mut raw = self.forest.predict_batch(rows);
        for (r, x) in raw.iter_mut().zip(rows) {
            *r = self.scale * (*r + self.baseline.eval(x)).exp();
        }
        raw
    }
}

/// A device profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    pub format: String,
    pub provenance: Provenance,
    /// Median join overhead of the polling protocol, milliseconds.
    pub sync_ms: f64,
    pub executors: BTreeMap<String, Executor>,
    /// Contention of split steps per op kind and thread count (`conv_t1`, …; `tandem train
    /// --corun`, [`crate::corun`]). Empty in profiles trained without it, whose sweeps charge
    /// none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub contention: BTreeMap<String, Contention>,
    /// How each side's latencies follow the machine's speed of the hour, read from the
    /// reference layer ([`crate::speed`]; `tandem train` with several datasets). Empty in
    /// profiles trained without it: their predictions do not move with a probe.
    #[serde(default, skip_serializing_if = "SpeedModel::is_empty")]
    pub speed: SpeedModel,
}

/// Why a profile could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("{path}: {message}")]
    File { path: PathBuf, message: String },
    #[error("the profile has no predictor for executor '{0}' (not measured on this device)")]
    NoExecutor(String),
}

/// One candidate split of a layer: `gpu` channels on the GPU, the rest on the CPU.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate {
    pub gpu_channels: usize,
    /// Predicted GPU latency of `[C − g, C)` (0 when `g = 0`), ms.
    pub gpu_ms: f64,
    /// Predicted CPU latency of `[0, C − g)` (0 when `g = C`), ms.
    pub cpu_ms: f64,
    /// When both run: `max(cpu, gpu) + excess · min(cpu, gpu) + sync`, the excess the
    /// profile's contention for the layer's op kind and thread count (0 without one);
    /// otherwise the one side's latency. ms.
    pub total_ms: f64,
}

impl Profile {
    /// Loads and checks a profile; errors name the file and what is wrong.
    pub fn load(path: &Path) -> Result<Profile, ProfileError> {
        let err = |message: String| ProfileError::File {
            path: path.to_path_buf(),
            message,
        };
        let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
        Self::parse(&text).map_err(err)
    }

    /// Parses and checks profile JSON.
    pub fn parse(text: &str) -> Result<Profile, String> {
        let p: Profile = serde_json::from_str(text).map_err(|e| {
            format!(
                "not a tandem profile: {e} (line {}, column {})",
                e.line(),
                e.column()
            )
        })?;
        if p.format != FORMAT {
            return Err(format!(
                "field 'format': '{}', this tandem reads '{FORMAT}'",
                p.format
            ));
        }
        for (name, e) in &p.executors {
            if e.forest.num_features != e.features.len() {
                return Err(format!(
                    "executors.{name}: the forest reads {} features, {} are named",
                    e.forest.num_features,
                    e.features.len()
                ));
            }
            let mut expected = features::feature_names(name, e.dispatch_features);
            if e.dispatch_features && !e.kernel_counts {
                let counts = features::kernel_count_names(name).len();
                expected.truncate(expected.len() - counts);
            }
            if e.features != expected {
                return Err(format!(
                    "executors.{name}.features: {:?}, this tandem computes {:?} (a profile \
                     trained by another tandem version: train it again with this one)",
                    e.features, expected
                ));
            }
            e.forest
                .check()
                .map_err(|m| format!("executors.{name}.forest: {m}"))?;
            e.baseline
                .check(e.features.len())
                .map_err(|m| format!("executors.{name}.baseline: {m}"))?;
            if !(e.scale.is_finite() && e.scale > 0.0) {
                return Err(format!(
                    "executors.{name}.scale: {} is not a positive factor",
                    e.scale
                ));
            }
        }
        if !p.sync_ms.is_finite() || p.sync_ms < 0.0 {
            return Err(format!("field 'sync_ms': {} is not a latency", p.sync_ms));
        }
        for (key, c) in &p.contention {
            c.check().map_err(|m| format!("contention.{key}: {m}"))?;
        }
        p.speed.check()?;
        Ok(p)
    }

    /// Writes the profile as pretty JSON.
    pub fn save(&self, path: &Path) -> Result<(), ProfileError> {
        let err = |message: String| ProfileError::File {
            path: path.to_path_buf(),
            message,
        };
        let text = serde_json::to_string(self).map_err(|e| err(e.to_string()))?;
        std::fs::write(path, text + "\n").map_err(|e| err(e.to_string()))
    }

    /// The device the profile was measured on.
    pub fn device(&self) -> &DeviceInfo {
        &self.provenance.device
    }

    /// Measured join overhead, ms.
    pub fn sync_ms(&self) -> f64 {
        self.sync_ms
    }

    fn executor(&self, name: &str) -> Result<&Executor, ProfileError> {
        self.executors
            .get(name)
            .ok_or_else(|| ProfileError::NoExecutor(name.to_string()))
    }

    /// The contention excess of a split of `layer` with `threads` CPU threads: the fitted
    /// share of its op kind and arithmetic intensity ([`crate::corun::fit`]), 0 when the
    /// profile has none for its op kind.
    pub fn contention_excess(&self, layer: &Layer, threads: usize) -> f64 {
        self.contention
            .get(&corun::key(layer.op, threads))
            .map_or(0.0, |c| c.excess_at(corun::intensity(layer)))
    }

    /// Predicted latency (ms) of one executor for a feature row, which may run past the
    /// executor's features (counts a profile trained before them does not read: left out).
    pub fn predict_features(&self, executor: &str, x: &[f64]) -> Result<f64, ProfileError> {
        let e = self.executor(executor)?;
        Ok(e.predict_ms(&x[..e.features.len().min(x.len())]))
    }

    /// Predicted GPU latency (ms) of output channels `[C − g, C)` of `layer` (0 for `g = 0`).
    pub fn predict_gpu(&self, layer: &Layer, g: usize) -> Result<f64, ProfileError> {
        if g == 0 {
            return Ok(0.0);
        }
        let (d, x) = features::gpu_features(layer, g, self.device());
        let e = self.executor(&features::gpu_executor(layer.op, d.variant))?;
        Ok(e.predict_ms(&x[..e.features.len()]))
    }

    /// Predicted CPU latency (ms) of output channels `[0, c)` of `layer` with `threads` threads
    /// (0 for `c = 0`).
    pub fn predict_cpu(
        &self,
        layer: &Layer,
        c: usize,
        threads: usize,
    ) -> Result<f64, ProfileError> {
        if c == 0 {
            return Ok(0.0);
        }
        let x = features::cpu_features(layer, c, threads);
        self.predict_features(&cpu_executor(layer.op, threads), &x)
    }

    /// Every candidate split of `layer`: GPU channel counts 0, s, 2s, …, C (s the
    /// [`split_step`] of the GPU kernel's vector width within [`MAX_SWEEP_STEPS`]; C itself
    /// always included), each with its predicted latencies.
    pub fn sweep(&self, layer: &Layer, threads: usize) -> Result<Vec<Candidate>, ProfileError> {
        let c = layer.cout;
        let op = layer.to_op();
        let step = split_step(c, vector_width(op.gpu_op()), MAX_SWEEP_STEPS);
        let cpu = self.executor(&cpu_executor(layer.op, threads))?;
        let mut counts = vec![0];
        while counts[counts.len() - 1] < c {
            counts.push((counts[counts.len() - 1] + step).min(c));
        }
        // Features of every candidate first, then each executor scores its rows in one batch.
        let cpu_rows: Vec<Vec<f64>> = counts
            .iter()
            .filter(|&&g| g < c)
            .map(|&g| features::cpu_features(layer, c - g, threads))
            .collect();
        let n = cpu.features.len();
        let cpu_ms = cpu.predict_ms_batch(&cpu_rows.iter().map(|x| &x[..n]).collect::<Vec<_>>());
        // Candidates by the GPU variant they dispatch to (a few per layer).
        let mut gpu_rows: Vec<(Variant, Vec<usize>, Vec<Vec<f64>>)> = Vec::new();
        for (i, &g) in counts.iter().enumerate().filter(|(_, &g)| g > 0) {
            let (d, x) = features::gpu_features(layer, g, self.device());
            let at = match gpu_rows.iter().position(|(v, ..)| *v == d.variant) {
                Some(at) => at,
                None => {
                    gpu_rows.push((d.variant, Vec::new(), Vec::new()));
                    gpu_rows.len() - 1
                }
            };
            gpu_rows[at].1.push(i);
            gpu_rows[at].2.push(x);
        }
        let mut gpu_ms = vec![0.0; counts.len()];
        for (variant, at, rows) in &gpu_rows {
            let e = self.executor(&features::gpu_executor(layer.op, *variant))?;
            let n = e.features.len();
            let rows: Vec<&[f64]> = rows.iter().map(|x| &x[..n]).collect();
            for (&i, ms) in at.iter().zip(e.predict_ms_batch(&rows)) {
                gpu_ms[i] = ms;
            }
        }
        let excess = self.contention_excess(layer, threads);
        let out = counts
            .iter()
            .enumerate()
            .map(|(i, &g)| {
                let cpu_ms = if g < c { cpu_ms[i] } else { 0.0 };
                let both = g > 0 && g < c;
                let extra = if both {
                    excess * gpu_ms[i].min(cpu_ms) + self.sync_ms
                } else {
                    0.0
                };
                Candidate {
                    gpu_channels: g,
                    gpu_ms: gpu_ms[i],
                    cpu_ms,
                    total_ms: gpu_ms[i].max(cpu_ms) + extra,
                }
            })
            .collect();
        Ok(out)
    }

    /// The best candidate of [`Profile::sweep`].
    pub fn best_split(&self, layer: &Layer, threads: usize) -> Result<Candidate, ProfileError> {
        let all = self.sweep(layer, threads)?;
        all.into_iter()
            .min_by(|a, b| a.total_ms.total_cmp(&b.total_ms))
            .ok_or_else(|| ProfileError::NoExecutor("(no candidates)".into()))
    }
}

/// The most steps a sweep takes across a layer's channels ([`split_step`]).
pub const MAX_SWEEP_STEPS: usize = 256;

/// The step between candidate GPU channel counts of a layer of `channels` output channels whose
/// GPU kernel computes `width` channels per vector: `width`, or the smallest multiple of it
/// that crosses the layer in at most `max_steps` steps (`max_steps = 0`: no limit). Sweeps
/// use [`MAX_SWEEP_STEPS`]: a finer step moves under 0.4% of the layer's work between the two
/// sides, far below the predictors' 3–5% error, and costs sweep time on the widest layers
/// (4096 channels: 1025 candidates in steps of 4, 257 in steps of 16).
pub fn split_step(channels: usize, width: usize, max_steps: usize) -> usize {
    let width = width.max(1);
    if max_steps == 0 {
        return width;
    }
    width.max(channels.div_ceil(max_steps).div_ceil(width) * width)
}

/// Whether `layer`'s kind is one this profile has a CPU predictor for at `threads`.
pub fn has_cpu(profile: &Profile, op: OpKind, threads: usize) -> bool {
    profile.executors.contains_key(&cpu_executor(op, threads))
}

/// The profiles shipped with tandem (`predictors/profiles/*.profile`).
pub fn shipped_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("profiles")
}

/// A profile file and the machine it was measured on, as read from its provenance.
#[derive(Debug, Clone, PartialEq)]
pub struct MeasuredOn {
    pub path: PathBuf,
    pub device: DeviceInfo,
    /// [`Provenance::host`].
    pub host: Option<String>,
}

/// The shipped profile measured on a device like `device` ([`DeviceInfo::same_device`]) on the
/// host `host` (`tandem_runtime::profile::host_signature`; see [`pick_host`] for how one of
/// several is chosen). Only the profiles directly in [`shipped_dir`] are candidates: `bases/`
/// keeps earlier profiles of a host, and `explicit/` profiles that are used only when named
/// (`--profile`, see [`explicit_for`]), such as one whose plans measured slower than the CPU
/// alone on its own host.
pub fn default_for(device: &DeviceInfo, host: Option<&str>) -> Option<PathBuf> {
    pick_host(device, host, &profiles_of_device(&shipped_dir(), device))
}

/// The shipped profile in `explicit/` measured on a device like `device` (chosen as
/// [`default_for`] chooses), which is never a default: for telling the user that one exists.
pub fn explicit_for(device: &DeviceInfo, host: Option<&str>) -> Option<PathBuf> {
    pick_host(
        device,
        host,
        &profiles_of_device(&shipped_dir().join("explicit"), device),
    )
}

/// The `.profile` files directly in `dir` (sorted by path) measured on a device like `device`,
/// each with what it was measured on; none when `dir` cannot be read.
fn profiles_of_device(dir: &Path, device: &DeviceInfo) -> Vec<MeasuredOn> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "profile"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .filter_map(|path| {
            let (device_of, host) = measured_on(&path)?;
            device_of.same_device(device).then_some(MeasuredOn {
                path,
                device: device_of,
                host,
            })
        })
        .collect()
}

/// The device and host a profile file was measured on, read without building its forests (a
/// shipped profile is megabytes of trees; `tandem compile` looks at each to pick one). `None`
/// when the file has no readable `provenance.device`; loading it then says what is wrong.
fn measured_on(path: &Path) -> Option<(DeviceInfo, Option<String>)> {
    #[derive(Deserialize)]
    struct Head {
        provenance: HeadProvenance,
    }
    #[derive(Deserialize)]
    struct HeadProvenance {
        device: DeviceInfo,
        #[serde(default)]
        host: Option<String>,
    }
    let text = std::fs::read_to_string(path).ok()?;
    serde_json::from_str::<Head>(&text)
        .ok()
        .map(|h| (h.provenance.device, h.provenance.host))
}

/// Of profiles of the same OpenCL device, the one measured on the host most like this one
/// (`device` as this host's OpenCL reports it, `host` its processor signature): those measured
/// on this very host (the same [`Provenance::host`]) if any, else those not known to be of
/// another host (no recorded signature, or this host's is unknown), else all; of that pool the
/// one whose device reported the nearest global memory size by ratio, the first on a tie.
///
/// A device's description does not tell hosts apart (PoCL names the CPU as KVM shows it): two
/// generations of AMD EPYC with AVX-512 both give `pthread-skylake-avx512-AMD EPYC`, at 2.5x
/// different speeds. The memory it reports does, roughly: 22 GB on the Intel Xeon host of
/// `pocl-1core.profile`, 8.1–9.8 GB (it moved between sessions) on the one of
/// `pocl-1core-xeon2.profile`, 4.6–7.3 GB on the one of `pocl-1core-xeon3.profile`, 4.5–6.1 GB
/// within one session on the Zen 4 EPYC; so profiles that record their host are matched on it
/// first, a profile whose recorded signature differs is known to be of another host and is
/// taken only when nothing else is left, and memory decides within the pool. (The fourth Intel
/// Xeon host reports 23.2 GB, the first 22 GB: memory alone would give the first host the
/// fourth's profile.)
pub fn pick_host(
    device: &DeviceInfo,
    host: Option<&str>,
    candidates: &[MeasuredOn],
) -> Option<PathBuf> {
    let distance = |d: &DeviceInfo| {
        let ratio = d.global_mem_bytes.max(1) as f64 / device.global_mem_bytes.max(1) as f64;
        ratio.ln().abs()
    };
    let this_host = |c: &&MeasuredOn| host.is_some() && c.host.as_deref() == host;
    let not_another_host = |c: &&MeasuredOn| host.is_none() || c.host.is_none();
    let nearest = |pool: &mut dyn Iterator<Item = &MeasuredOn>| {
        pool.min_by(|a, b| distance(&a.device).total_cmp(&distance(&b.device)))
            .map(|c| c.path.clone())
    };
    nearest(&mut candidates.iter().filter(this_host))
        .or_else(|| nearest(&mut candidates.iter().filter(not_another_host)))
        .or_else(|| nearest(&mut candidates.iter()))
}

/// Today's UTC date, `YYYY-MM-DD`.
pub fn today() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    // Days to civil date (Howard Hinnant's algorithm).
    let z = secs.div_euclid(86_400) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}
