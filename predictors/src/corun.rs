//! Contention between the two sides of a split step.
//!
//! A session runs a split layer's CPU part and GPU part at the same time, on two cores that
//! share the last-level cache and the memory bus, so the step takes longer than the slower part
//! and the join timed apart (the predictors' figures): on the Intel Xeon host, 2–30% of the
//! faster part on MobileNetV2's split layers, most on the early, memory-bound ones.
//!
//! - [`measure`] (`tandem profile --corun`): per configuration, one split at a random GPU
//!   channel count `g` (a multiple of the kernel's vector width, `0 < g < C`), timed three ways
//!   in each of the plan's rounds — the CPU part `[0, C − g)`, the GPU part `[C − g, C)`, and
//!   the two side by side as a session runs them (`LayerBench::split`) — each the least of its
//!   round medians; the join once. One [`CorunRow`] per configuration and thread count.
//! - [`fit`] (`tandem train --corun`): per op kind and thread count, the median over its
//!   configurations of the excess `(split − max(cpu, gpu) − sync) / min(cpu, gpu)`: by how much
//!   the time both sides run stretches; and the same median per bin of the layer's arithmetic
//!   intensity ([`intensity`], FLOPs per byte of activations and weights; bins from
//!   [`INTENSITY_EDGES`]). The contention is the memory traffic of the two sides meeting: on the
//!   Intel Xeon host convolutions of 4–8 FLOPs per byte (a 1x1 convolution of 16 channels on
//!   112x112) stretched by 28%, those of 64 and more by 1%. Splits whose faster part is under
//!   [`MIN_PART_MS`] are left out: their excess is a few µs of timing noise over a small part
//!   (there, a median of −0.25 to −0.44, against +0.01 to +0.09 above it). A bin needs
//!   [`MIN_CONFIGS`] configurations; negative medians count as 0. The profile stores it
//!   ([`crate::Profile::contention`]) and its sweep charges a split
//!   `max + excess · min + sync`, the excess of the layer's bin (the op kind's without one).

use crate::dataset::{config_key, layer_of_key, quote, split_fields, DatasetError};
use crate::features::{Layer, OpKind};
use crate::measure::{
    cost, fnv, progress_before, working_set_bytes, Plan, ProfileRunError, Progress,
};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};
use tandem_runtime::gpu::dispatch::vector_width;
use tandem_runtime::profile::{median, Profiler, Timing};
use tandem_runtime::rng::Rng;

/// The columns of a co-run dataset, in order.
pub const HEADER: [&str; 10] = [
    "config",
    "device",
    "op",
    "channels",
    "gpu_channels",
    "threads",
    "cpu_ms",
    "gpu_ms",
    "sync_ms",
    "split_ms",
];

/// Mixed into the configuration's seed, so that the co-run split's channel count is drawn
/// apart from the dataset's channel points.
const CORUN_SALT: u64 = 0x636f_7275_6e00;

/// Configurations per op kind and thread count that [`fit`] needs before it states a factor.
pub const MIN_CONFIGS: usize = 8;

/// The shortest faster part, ms, of a split that [`fit`] takes.
pub const MIN_PART_MS: f64 = 0.05;

/// Lower edges of the arithmetic-intensity bins of [`fit`], FLOPs per byte: powers of two.
pub const INTENSITY_EDGES: [f64; 7] = [0.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0];

/// A layer's arithmetic intensity: its FLOPs per byte of input and output activations and
/// weights (`measure::working_set_bytes`).
pub fn intensity(layer: &Layer) -> f64 {
    cost(layer).0 / working_set_bytes(layer).max(1) as f64
}

/// The lower edge of the [`INTENSITY_EDGES`] bin of `intensity`.
fn intensity_bin(intensity: f64) -> f64 {
    INTENSITY_EDGES
        .iter()
        .copied()
        .rfind(|&e| intensity >= e)
        .unwrap_or(0.0)
}

/// One split measured apart and side by side (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct CorunRow {
    /// The configuration key (`dataset::config_key`: op kind and geometry).
    pub config: String,
    /// The layer the key names.
    pub layer: Layer,
    pub device: String,
    pub op: OpKind,
    pub channels: usize,
    pub gpu_channels: usize,
    pub threads: usize,
    /// The CPU part `[0, C − g)` alone, ms.
    pub cpu_ms: f64,
    /// The GPU part `[C − g, C)` alone, ms.
    pub gpu_ms: f64,
    /// The join of the polling protocol, ms.
    pub sync_ms: f64,
    /// Both parts side by side, the join included, ms.
    pub split_ms: f64,
}

impl CorunRow {
    /// `(split − max(cpu, gpu) − sync) / min(cpu, gpu)`; `None` when a part took no time.
    pub fn excess(&self) -> Option<f64> {
        let low = self.cpu_ms.min(self.gpu_ms);
        (low > 0.0).then(|| (self.split_ms - self.cpu_ms.max(self.gpu_ms) - self.sync_ms) / low)
    }

    fn csv(&self) -> String {
        format!(
            "{},{},{},{},{},{},{:.6},{:.6},{:.6},{:.6}",
            quote(&self.config),
            quote(&self.device),
            self.op.name(),
            self.channels,
            self.gpu_channels,
            self.threads,
            self.cpu_ms,
            self.gpu_ms,
            self.sync_ms,
            self.split_ms
        )
    }
}

/// A co-run dataset that cannot be read or written; the message names the file and line.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {message}")]
pub struct CorunError {
    pub path: String,
    pub message: String,
}

/// Reads a co-run dataset written by [`measure`] (gzip-compressed when the name ends in
/// `.gz`).
pub fn read(path: &Path) -> Result<Vec<CorunRow>, CorunError> {
    let err = |message: String| CorunError {
        path: path.display().to_string(),
        message,
    };
    let text = crate::dataset::read_text(path).map_err(|e| match e {
        DatasetError::Io { error, .. } => err(error.to_string()),
        DatasetError::Parse { message, .. } => err(message),
        other => err(other.to_string()),
    })?;
    let mut lines = text.lines();
    let header = lines.next().ok_or_else(|| err("empty file".into()))?;
    if header.split(',').collect::<Vec<_>>() != HEADER {
        return Err(err(format!(
            "line 1: header '{header}', a co-run dataset (`tandem profile --corun`) starts \
             with '{}'",
            HEADER.join(",")
        )));
    }
    let mut rows = Vec::new();
    for (i, line) in lines.enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let at = |m: String| err(format!("line {}: {m}", i + 2));
        let f = split_fields(line).map_err(at)?;
        if f.len() != HEADER.len() {
            return Err(at(format!("{} fields, expected {}", f.len(), HEADER.len())));
        }
        let count = |k: usize| -> Result<usize, CorunError> {
            f[k].parse()
                .map_err(|_| at(format!("{} '{}' is not a count", HEADER[k], f[k])))
        };
        let ms = |k: usize| -> Result<f64, CorunError> {
            f[k].parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| at(format!("{} '{}' is not a latency", HEADER[k], f[k])))
        };
        let op = OpKind::parse(&f[2]).ok_or_else(|| at(format!("unknown op '{}'", f[2])))?;
        let layer = layer_of_key(&f[0])
            .filter(|l| l.op == op && l.cout == count(3).unwrap_or(0))
            .ok_or_else(|| {
                at(format!(
                    "config '{}' is not a {} layer of {} channels",
                    f[0], f[2], f[3]
                ))
            })?;
        let row = CorunRow {
            config: f[0].clone(),
            layer,
            device: f[1].clone(),
            op,
            channels: count(3)?,
            gpu_channels: count(4)?,
            threads: count(5)?,
            cpu_ms: ms(6)?,
            gpu_ms: ms(7)?,
            sync_ms: ms(8)?,
            split_ms: ms(9)?,
        };
        if row.gpu_channels == 0 || row.gpu_channels >= row.channels || row.threads == 0 {
            return Err(at(format!(
                "{} GPU channels of {} with {} threads is not a split",
                row.gpu_channels, row.channels, row.threads
            )));
        }
        rows.push(row);
    }
    Ok(rows)
}

/// The contention of one op kind at one thread count (see the module docs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Contention {
    /// Median excess over the configurations: the share by which the time both sides run
    /// stretches (0 or more).
    pub excess: f64,
    /// Configurations it is the median of.
    pub configs: usize,
    /// The same per arithmetic-intensity bin with enough configurations, by lower edge.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub by_intensity: Vec<IntensityBin>,
}

/// The contention of the layers of one arithmetic-intensity bin.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct IntensityBin {
    /// The bin's lower edge (one of [`INTENSITY_EDGES`]), FLOPs per byte.
    pub from: f64,
    pub excess: f64,
    pub configs: usize,
}

impl Contention {
    /// The excess of a layer of arithmetic intensity `intensity`: its bin's, or the op kind's
    /// when the bin had too few configurations.
    pub fn excess_at(&self, intensity: f64) -> f64 {
        let from = intensity_bin(intensity);
        self.by_intensity
            .iter()
            .find(|b| b.from == from)
            .map_or(self.excess, |b| b.excess)
    }

    /// Why a stored contention is unusable, if it is.
    pub fn check(&self) -> Result<(), String> {
        let share = |v: f64| v.is_finite() && v >= 0.0;
        if !share(self.excess) {
            return Err(format!(
                "excess {} is not a non-negative share",
                self.excess
            ));
        }
        for b in &self.by_intensity {
            if !share(b.excess) || !INTENSITY_EDGES.contains(&b.from) {
                return Err(format!(
                    "by_intensity: bin from {} with excess {} (bins start at {:?}; shares are \
                     non-negative)",
                    b.from, b.excess, INTENSITY_EDGES
                ));
            }
        }
        Ok(())
    }
}

/// The key of an op kind at a thread count in [`fit`]'s map: `conv_t1`, `dwconv_t2`, ….
pub fn key(op: OpKind, threads: usize) -> String {
    format!("{}_t{threads}", op.name())
}

/// Per op kind and thread count with at least [`MIN_CONFIGS`] configurations whose faster
/// part takes [`MIN_PART_MS`] or more, their median excess (negative medians count as 0: side
/// by side is never faster than apart).
pub fn fit(rows: &[CorunRow]) -> BTreeMap<String, Contention> {
    // Per key: (intensity bin, excess) of every usable split.
    let mut by_key: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for r in rows
        .iter()
        .filter(|r| r.cpu_ms.min(r.gpu_ms) >= MIN_PART_MS)
    {
        if let Some(e) = r.excess() {
            let bin = intensity_bin(intensity(&r.layer));
            by_key
                .entry(key(r.op, r.threads))
                .or_default()
                .push((bin, e));
        }
    }
    by_key
        .into_iter()
        .filter(|(_, v)| v.len() >= MIN_CONFIGS)
        .map(|(k, v)| {
            let mut all: Vec<f64> = v.iter().map(|&(_, e)| e).collect();
            let by_intensity = INTENSITY_EDGES
                .iter()
                .filter_map(|&from| {
                    let mut these: Vec<f64> = v
                        .iter()
                        .filter(|&&(b, _)| b == from)
                        .map(|&(_, e)| e)
                        .collect();
                    (these.len() >= MIN_CONFIGS).then(|| IntensityBin {
                        from,
                        configs: these.len(),
                        excess: median(&mut these).max(0.0),
                    })
                })
                .collect();
            let contention = Contention {
                configs: all.len(),
                excess: median(&mut all).max(0.0),
                by_intensity,
            };
            (k, contention)
        })
        .collect()
}

/// What a co-run profiling run did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CorunSummary {
    pub measured: usize,
    /// Configurations already in the file.
    pub skipped: usize,
    /// Configurations too narrow to split (fewer than two vector widths of channels).
    pub unsplittable: usize,
    pub out_of_budget: usize,
}

/// Measures `configs` as the module docs say and appends one row per configuration and
/// thread count to `out` (created with its header when missing; configurations already in it
/// are skipped; a file of another device is refused).
pub fn measure(
    profiler: &mut Profiler,
    out: &Path,
    configs: &[Layer],
    plan: &Plan,
    mut progress: impl FnMut(&Progress),
) -> Result<CorunSummary, ProfileRunError> {
    let device = profiler.device().label();
    let io_err = |error| {
        ProfileRunError::Dataset(DatasetError::Io {
            path: out.to_path_buf(),
            error,
        })
    };
    let nonempty = std::fs::metadata(out).is_ok_and(|m| m.len() > 0);
    let existing = if nonempty { read(out)? } else { Vec::new() };
    if let Some(r) = existing.iter().find(|r| r.device != device) {
        return Err(ProfileRunError::OtherDevice {
            path: out.display().to_string(),
            found: r.device.clone(),
            this: device,
        });
    }
    let done: HashSet<&str> = existing.iter().map(|r| r.config.as_str()).collect();
    let todo: Vec<&Layer> = configs
        .iter()
        .filter(|l| !done.contains(config_key(l).as_str()))
        .collect();
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(out)
        .map_err(io_err)?;
    if !nonempty {
        writeln!(file, "{}", HEADER.join(",")).map_err(io_err)?;
    }
    let mut summary = CorunSummary {
        measured: 0,
        skipped: configs.len() - todo.len(),
        unsplittable: 0,
        out_of_budget: 0,
    };
    let start = Instant::now();
    let options = plan.measure;
    let sync_options = tandem_runtime::profile::MeasureOptions {
        min_reps: 15,
        max_reps: 31,
        target_ms: 0.0,
        ..options
    };
    for (i, layer) in todo.iter().enumerate() {
        let key = config_key(layer);
        let Some(line) = progress_before(start, i, todo.len(), plan.budget, summary.skipped, &key)
        else {
            summary.out_of_budget = todo.len() - i;
            break;
        };
        progress(&line);
        let op = layer.to_op();
        let c = layer.cout;
        let width = vector_width(op.gpu_op());
        if c < 2 * width {
            summary.unsplittable += 1;
            continue;
        }
        // 0 < g < C: one of the (C − 1) / width multiples of the width below C.
        let mut rng = Rng::new(plan.seed ^ fnv(&key) ^ CORUN_SALT);
        let g = width * (1 + (rng.next_u64() % ((c - 1) / width) as u64) as usize);
        let gpu_err = |source| ProfileRunError::Gpu {
            config: key.clone(),
            source,
        };
        let mut bench = profiler.layer(&op, &[g], 1).map_err(gpu_err)?;
        let sync = bench.sync(&sync_options).map_err(gpu_err)?.median_ms;
        for &t in &plan.threads {
            let least = |v: &[Timing]| v.iter().map(|t| t.median_ms).fold(f64::INFINITY, f64::min);
            let (mut cpu, mut gpu, mut split) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..plan.rounds.max(1) {
                cpu.push(bench.cpu(c - g, t, &options));
                gpu.push(bench.gpu(g, &options).map_err(gpu_err)?.1);
                split.push(bench.split(g, t, &options).map_err(gpu_err)?);
            }
            let row = CorunRow {
                config: key.clone(),
                layer: (*layer).clone(),
                device: device.clone(),
                op: layer.op,
                channels: c,
                gpu_channels: g,
                threads: t,
                cpu_ms: least(&cpu),
                gpu_ms: least(&gpu),
                sync_ms: sync,
                split_ms: least(&split),
            };
            writeln!(file, "{}", row.csv()).map_err(io_err)?;
        }
        file.flush().map_err(io_err)?;
        summary.measured += 1;
    }
    progress(&Progress {
        done: summary.skipped + summary.measured + summary.unsplittable,
        total: configs.len(),
        skipped: summary.skipped,
        elapsed: start.elapsed(),
        eta: Duration::ZERO,
        current: "done".into(),
        unit: "configs",
    });
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 1x1 convolution of 16 channels on 112x112 (about 7 FLOPs per byte), a 3x3 one of 256
    /// channels on 14x14 (about 84), a depthwise and a fully-connected layer.
    const LOW: &str = "conv:1x112x112x16:112x112x96:k1x1:s1:p0x0";
    const HIGH: &str = "conv:1x14x14x256:14x14x256:k3x3:s1:p1x1";
    const DEPTHWISE: &str = "dwconv:1x56x56x144:56x56x144:k3x3:s1:p1x1";
    const LINEAR: &str = "linear:1x70x1x1375:70x1x1592:k1x1:s1:p0x0";

    fn row(key: &str, cpu: f64, gpu: f64, split: f64) -> CorunRow {
        let layer = layer_of_key(key).expect("a configuration key");
        CorunRow {
            config: key.to_string(),
            device: "dev, with a comma".into(),
            op: layer.op,
            channels: layer.cout,
            gpu_channels: 8,
            threads: 1,
            layer,
            cpu_ms: cpu,
            gpu_ms: gpu,
            sync_ms: 0.01,
            split_ms: split,
        }
    }

    #[test]
    fn the_excess_is_the_stretch_of_the_overlapped_time() {
        // max 1.0 + sync 0.01 + 0.2 · min 0.5.
        let e = row(HIGH, 1.0, 0.5, 1.11).excess().expect("excess");
        assert!((e - 0.2).abs() < 1e-12, "{e}");
        assert_eq!(row(HIGH, 0.0, 0.5, 0.6).excess(), None);
    }

    #[test]
    fn intensity_bins_follow_flops_per_byte() {
        let low = intensity(&layer_of_key(LOW).expect("key"));
        let high = intensity(&layer_of_key(HIGH).expect("key"));
        assert!((4.0..8.0).contains(&low), "{low}");
        assert!(high >= 64.0, "{high}");
        assert_eq!(intensity_bin(low), 4.0);
        assert_eq!(intensity_bin(high), 64.0);
        assert_eq!(intensity_bin(0.5), 0.0);
    }

    #[test]
    fn fit_takes_medians_per_op_and_intensity_and_never_goes_below_zero() {
        // Conv: 9 low-intensity splits stretched 0.10 … 0.50 (median 0.30), 9 high-intensity
        // ones faster side by side than apart (noise), 3 more high ones too few for a bin.
        let mut rows: Vec<CorunRow> = (0..9)
            .map(|i| row(LOW, 1.0, 1.0, 1.11 + 0.05 * i as f64))
            .collect();
        rows.extend((0..9).map(|i| row(HIGH, 1.0, 1.0, 0.9 + 0.01 * i as f64)));
        // Depthwise: too few to state a factor once the short parts are left out.
        rows.extend((0..3).map(|_| row(DEPTHWISE, 1.0, 1.0, 1.5)));
        rows.extend((0..9).map(|_| row(DEPTHWISE, 1.0, 0.04, 1.0)));
        rows.extend((0..8).map(|_| row(LINEAR, 0.5, 0.5, 0.505)));
        let fit = fit(&rows);
        let conv = &fit["conv_t1"];
        assert_eq!(conv.configs, 18);
        let bins: Vec<(f64, usize)> = conv
            .by_intensity
            .iter()
            .map(|b| (b.from, b.configs))
            .collect();
        assert_eq!(bins, vec![(4.0, 9), (64.0, 9)]);
        assert!((conv.by_intensity[0].excess - 0.3).abs() < 1e-9, "{conv:?}");
        assert_eq!(conv.by_intensity[1].excess, 0.0);
        // Its bin's excess for a layer with one, the op kind's for a layer without.
        assert!((conv.excess_at(6.0) - 0.3).abs() < 1e-9);
        assert_eq!(conv.excess_at(70.0), 0.0);
        assert_eq!(conv.excess_at(20.0), conv.excess);
        assert!(!fit.contains_key("dwconv_t1"));
        assert_eq!(fit["linear_t1"].excess, 0.0);
        assert!(conv.check().is_ok());
        let mut bad = conv.clone();
        bad.by_intensity[0].from = 3.0;
        assert!(bad
            .check()
            .expect_err("a bin from 3")
            .contains("bin from 3"));
    }

    #[test]
    fn rows_round_trip_and_bad_files_name_the_line() {
        let dir = std::env::temp_dir().join(format!("tandem-corun-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("c.csv");
        let r = row(LINEAR, 0.25, 0.125, 0.3);
        std::fs::write(&path, format!("{}\n{}\n", HEADER.join(","), r.csv())).expect("write");
        assert_eq!(read(&path).expect("read"), vec![r.clone()]);
        let not_a_split = r.csv().replace(",1592,8,", ",1592,1592,");
        let other_layer = r.csv().replace(",linear,", ",conv,");
        for (bad, says) in [
            (not_a_split, "is not a split"),
            (other_layer, "is not a conv layer of 1592 channels"),
        ] {
            std::fs::write(&path, format!("{}\n{bad}\n", HEADER.join(","))).expect("write");
            let e = read(&path).expect_err("bad row").to_string();
            assert!(e.contains("line 2") && e.contains(says), "{e}");
        }
        std::fs::write(&path, "config,ms\n").expect("write");
        let e = read(&path).expect_err("header").to_string();
        assert!(
            e.contains("line 1") && e.contains("tandem profile --corun"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).ok();
    }
}
