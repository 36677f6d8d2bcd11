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
//!   the time both sides run stretches. Splits whose faster part is under [`MIN_PART_MS`] are
//!   left out: their excess is a few µs of timing noise over a small part (on the Intel Xeon
//!   host their median was −0.25 to −0.44, against +0.01 to +0.08 above it). Negative medians
//!   count as 0. The profile stores it
//!   ([`crate::Profile::contention`]) and its sweep charges a split `max + excess · min + sync`.

use crate::dataset::{config_key, quote, split_fields, DatasetError};
use crate::features::{Layer, OpKind};
use crate::measure::{fnv, Plan, ProfileRunError, Progress};
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

/// One split measured apart and side by side (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct CorunRow {
    /// The configuration key (`dataset::config_key`: op kind and geometry).
    pub config: String,
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
        DatasetError::Io { source, .. } => err(source.to_string()),
        DatasetError::Parse { message, .. } => err(message),
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
        let row = CorunRow {
            config: f[0].clone(),
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
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Contention {
    /// Median excess over the configurations: the share by which the time both sides run
    /// stretches (0 or more).
    pub excess: f64,
    /// Configurations it is the median of.
    pub configs: usize,
}

/// The key of an op kind at a thread count in [`fit`]'s map: `conv_t1`, `dwconv_t2`, ….
pub fn key(op: OpKind, threads: usize) -> String {
    format!("{}_t{threads}", op.name())
}

/// Per op kind and thread count with at least [`MIN_CONFIGS`] configurations whose faster
/// part takes [`MIN_PART_MS`] or more, their median excess (negative medians count as 0: side
/// by side is never faster than apart).
pub fn fit(rows: &[CorunRow]) -> BTreeMap<String, Contention> {
    let mut by_key: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for r in rows
        .iter()
        .filter(|r| r.cpu_ms.min(r.gpu_ms) >= MIN_PART_MS)
    {
        if let Some(e) = r.excess() {
            by_key.entry(key(r.op, r.threads)).or_default().push(e);
        }
    }
    by_key
        .into_iter()
        .filter(|(_, v)| v.len() >= MIN_CONFIGS)
        .map(|(k, mut v)| {
            let configs = v.len();
            let excess = median(&mut v).max(0.0);
            (k, Contention { excess, configs })
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
    let io_err = |source| {
        ProfileRunError::Dataset(DatasetError::Io {
            path: out.to_path_buf(),
            source,
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
        let elapsed = start.elapsed();
        if plan.budget.is_some_and(|b| elapsed >= b) {
            summary.out_of_budget = todo.len() - i;
            break;
        }
        let key = config_key(layer);
        let per = if i > 0 {
            elapsed / i as u32
        } else {
            Duration::ZERO
        };
        let mut eta = per * (todo.len() - i) as u32;
        if let Some(b) = plan.budget {
            eta = eta.min(b.saturating_sub(elapsed));
        }
        progress(&Progress {
            done: summary.skipped + i,
            total: configs.len(),
            skipped: summary.skipped,
            elapsed,
            eta,
            current: key.clone(),
        });
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
    });
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(op: OpKind, cpu: f64, gpu: f64, split: f64) -> CorunRow {
        CorunRow {
            config: format!("{}:{cpu}:{gpu}:{split}", op.name()),
            device: "dev".into(),
            op,
            channels: 64,
            gpu_channels: 16,
            threads: 1,
            cpu_ms: cpu,
            gpu_ms: gpu,
            sync_ms: 0.01,
            split_ms: split,
        }
    }

    #[test]
    fn the_excess_is_the_stretch_of_the_overlapped_time() {
        // max 1.0 + sync 0.01 + 0.2 · min 0.5.
        let e = row(OpKind::Conv, 1.0, 0.5, 1.11).excess().expect("excess");
        assert!((e - 0.2).abs() < 1e-12, "{e}");
        assert_eq!(row(OpKind::Conv, 0.0, 0.5, 0.6).excess(), None);
    }

    #[test]
    fn fit_takes_the_median_per_op_and_thread_count_and_never_goes_below_zero() {
        let mut rows: Vec<CorunRow> = (0..9)
            .map(|i| row(OpKind::Depthwise, 1.0, 1.0, 1.01 + 0.05 * i as f64))
            .collect();
        // Conv: faster side by side than apart (noise) on most.
        rows.extend((0..8).map(|i| row(OpKind::Conv, 1.0, 1.0, 0.9 + 0.01 * i as f64)));
        // Linear: too few to state a factor once the short parts are left out.
        rows.extend((0..3).map(|_| row(OpKind::Linear, 1.0, 1.0, 1.5)));
        rows.extend((0..9).map(|_| row(OpKind::Linear, 1.0, 0.04, 1.0)));
        let fit = fit(&rows);
        let dw = fit["dwconv_t1"];
        assert_eq!(dw.configs, 9);
        assert!((dw.excess - 0.2).abs() < 1e-9, "{dw:?}");
        assert_eq!(fit["conv_t1"].excess, 0.0);
        assert!(!fit.contains_key("linear_t1"));
    }

    #[test]
    fn rows_round_trip_and_bad_files_name_the_line() {
        let dir = std::env::temp_dir().join(format!("tandem-corun-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("c.csv");
        let r = row(OpKind::Linear, 0.25, 0.125, 0.3);
        std::fs::write(&path, format!("{}\n{}\n", HEADER.join(","), r.csv())).expect("write");
        assert_eq!(read(&path).expect("read"), vec![r.clone()]);
        let bad = r.csv().replace(",16,", ",64,");
        std::fs::write(&path, format!("{}\n{bad}\n", HEADER.join(","))).expect("write");
        let e = read(&path).expect_err("no split").to_string();
        assert!(e.contains("line 2") && e.contains("is not a split"), "{e}");
        std::fs::write(&path, "config,ms\n").expect("write");
        let e = read(&path).expect_err("header").to_string();
        assert!(
            e.contains("line 1") && e.contains("tandem profile --corun"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).ok();
    }
}
