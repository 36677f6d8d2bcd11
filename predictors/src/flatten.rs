//! Flattening a profile's long forests into short ones (`tandem flatten`), so that the
//! compile-time sweep stays fast.
//!
//! A corrected executor (`tandem train --base`) evaluates its base's trees and its own: the
//! corrections of a correction carry 280–360 trees, and a sweep over a layer's splits costs in
//! proportion (`cargo xtask bench predictors`: 0.12–0.15 ms per layer on the fourth Intel host,
//! against the 0.1 ms). Flattening *distils* such a forest: a new LightGBM forest of at
//! most `max_trees` trees is fit to the old forest's raw score (the log-latency sum of its
//! trees) on many feature rows, and replaces it; the executor's baseline and scale stay.
//!
//! The rows are what the compiler will ask about: the features of random configurations
//! (drawn as `tandem profile` draws them, without its size limits) at several channel counts
//! each, every one routed to
//! the executor that runs it (the CPU executor of its op kind and thread count, the GPU
//! executor its dispatch picks on the profile's device), and, where given, the rows of
//! datasets. Nothing is measured: the old forest is the teacher, so rows cost only features.
//! A kernel that few random layers dispatch to (the constant-weights convolution: small
//! inputs) gets further rounds of draws, up to [`MAX_EXTRA_ROUNDS`], until it has a row per
//! configuration drawn per op kind; an executor left under [`MIN_ROWS`] rows is refused.
//!
//! With `keep` (`--keep N`), each long forest's first N trees stay bit for bit and only the
//! trees after them are distilled, into `max_trees − N`: a correction's base trees carry most of
//! its prediction, so the student fits a small remainder and follows the old forest closer.
//!
//! Contracts:
//! - Only executors whose forest has more than `max_trees` trees change; the others, the
//!   baselines, scales, contention and speed model are copied as they are.
//! - A flattened executor's predictions follow the old ones within the fidelity reported per
//!   executor (median and 99th percentile of `|student / teacher − 1|` on rows held out of the
//!   fit, in percent); the provenance records the flattening and its fidelity.
//! - Deterministic in `seed` (LightGBM runs deterministic).

#[cfg(feature = "lightgbm")]
pub use fit::{flatten, FlattenOptions};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// How a profile was flattened (recorded in its provenance).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Flattening {
    /// The most trees a flattened forest has.
    pub max_trees: u32,
    /// Random configurations drawn per op kind.
    pub configs_per_op: usize,
    pub seed: u64,
    /// Further rounds of as many random draws, taken only for the rows of long executors that
    /// the first round left with fewer rows than `configs_per_op` (kernels that few random
    /// layers dispatch to).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub extra_rounds: u64,
    /// Dataset files whose rows joined the random ones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub datasets: Vec<String>,
    /// Each long forest's first trees kept as they were; only the trees after them were
    /// distilled, into `max_trees − keep`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub keep: u32,
    /// Per flattened executor.
    pub executors: BTreeMap<String, FlattenedExecutor>,
}

fn is_zero<T: Default + PartialEq>(n: &T) -> bool {
    *n == T::default()
}

/// The fewest feature rows a flattened forest is fit on.
pub const MIN_ROWS: usize = 100;

/// Random configurations drawn per op kind by default (`--configs`). The student follows its
/// teacher closer with more rows: Z10's CPU forests, held out, median 1.9% at 3000 (the default
/// until 2026-12-07) and 1.6% at 30000, at about 40 s and 1.3 GB for four long forests.
pub const DEFAULT_CONFIGS_PER_OP: usize = 30000;

/// The most further rounds of random draws taken for long executors short of rows (fewer than
/// the configurations drawn per op kind, and at least [`MIN_ROWS`]).
pub const MAX_EXTRA_ROUNDS: u64 = 16;

/// One flattened executor: its trees before and after, and how closely it follows the old
/// forest on rows held out of the fit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlattenedExecutor {
    pub trees_before: usize,
    pub trees_after: usize,
    /// Rows the new forest was fit on.
    pub rows: usize,
    /// Median of `|new / old − 1|` over the held-out rows, percent.
    pub median_error: f64,
    /// 99th percentile of the same, percent.
    pub p99_error: f64,
    /// Held-out rows.
    pub held_out: usize,
}

/// The distillation itself (LightGBM: feature `lightgbm`).
#[cfg(feature = "lightgbm")]
mod fit {
    use super::{FlattenedExecutor, Flattening, MAX_EXTRA_ROUNDS, MIN_ROWS};
    use crate::bundle::Profile;
    use crate::dataset::Row;
    use crate::features::{
        cpu_executor, cpu_features, gpu_executor, gpu_features, row_features, Layer, OpKind,
    };
    use crate::forest::Forest;
    use crate::measure::{channel_points, random_layers, Limits};
    use crate::train::TrainError;
    use lightgbm3::{Booster, Dataset};
    use serde_json::json;
    use std::collections::BTreeMap;
    use tandem_runtime::rng::Rng;

    /// What to flatten and with how many rows.
    #[derive(Debug, Clone)]
    pub struct FlattenOptions {
        pub max_trees: u32,
        /// Each long forest's first `keep` trees stay as they are (a correction's base trees
        /// carry most of its prediction); only the trees after them are distilled, into
        /// `max_trees − keep`. 0: the whole forest is distilled.
        pub keep: u32,
        /// Random configurations per op kind.
        pub configs_per_op: usize,
        /// Channel counts per configuration.
        pub points: usize,
        pub seed: u64,
    }

    impl Default for FlattenOptions {
        fn default() -> Self {
            FlattenOptions {
                max_trees: 200,
                keep: 0,
                configs_per_op: super::DEFAULT_CONFIGS_PER_OP,
                points: 8,
                seed: 1,
            }
        }
    }

    /// Feature rows per executor name.
    type RowsByExecutor = BTreeMap<String, Vec<Vec<f64>>>;

    /// The profile with every forest over `opts.max_trees` trees distilled into one of at most
    /// that many; `datasets` are `(file name, rows)` whose rows join the random ones. Errors name
    /// the executor.
    pub fn flatten(
        profile: &Profile,
        datasets: &[(String, Vec<Row>)],
        opts: &FlattenOptions,
    ) -> Result<(Profile, Flattening), TrainError> {
        if opts.max_trees == 0 {
            return Err(TrainError::Data("--max-trees must be at least 1".into()));
        }
        if opts.keep >= opts.max_trees {
            return Err(TrainError::Data(format!(
                "--keep ({}) must be below --max-trees ({}): the trees after the kept ones are \
                 distilled into the difference",
                opts.keep, opts.max_trees
            )));
        }
        let long: Vec<&String> = profile
            .executors
            .iter()
            .filter(|(_, e)| e.forest.trees.len() > opts.max_trees as usize)
            .map(|(name, _)| name)
            .collect();
        let mut flattening = Flattening {
            max_trees: opts.max_trees,
            configs_per_op: opts.configs_per_op,
            seed: opts.seed,
            extra_rounds: 0,
            datasets: datasets.iter().map(|(n, _)| n.clone()).collect(),
            keep: opts.keep,
            executors: BTreeMap::new(),
        };
        let mut out = profile.clone();
        // Rows are drawn only when some forest is long.
        let mut rows = RowsByExecutor::new();
        if !long.is_empty() {
            rows = random_rows(profile, opts, 0);
            for (_, data) in datasets {
                for r in data {
                    if profile.executors.contains_key(&r.executor) {
                        rows.entry(r.executor.clone())
                            .or_default()
                            .push(row_features(r, true));
                    }
                }
            }
        }
        // Kernels that few random layers dispatch to get further rounds of draws, whose rows
        // go to them alone (the other executors' rows stay those of the first round), until
        // they have a row per configuration drawn per op kind: a forest of many trees is not
        // followed from a hundred rows.
        let wanted = opts.configs_per_op.max(MIN_ROWS);
        while flattening.extra_rounds < MAX_EXTRA_ROUNDS {
            let short: Vec<&String> = long
                .iter()
                .copied()
                .filter(|name| usable_rows(profile, &rows, name).len() < wanted)
                .collect();
            if short.is_empty() {
                break;
            }
            flattening.extra_rounds += 1;
            for (name, more) in random_rows(profile, opts, flattening.extra_rounds) {
                if short.contains(&&name) {
                    rows.entry(name).or_default().extend(more);
                }
            }
        }
        for name in long {
            let e = &profile.executors[name];
            let x = usable_rows(profile, &rows, name);
            if x.len() < MIN_ROWS {
                return Err(TrainError::Data(format!(
                    "{name}: only {} feature rows to flatten on after {} rounds of {} random \
                     configurations per op kind (at least {MIN_ROWS} needed: raise --configs, or \
                     add a dataset that has the executor with --data)",
                    x.len(),
                    1 + flattening.extra_rounds,
                    opts.configs_per_op
                )));
            }
            // The kept trees' scores cancel between teacher and student: distilling the
            // rest alone fits the same target, and the report measures the whole forest.
            let keep = opts.keep as usize;
            let nf = e.forest.num_features;
            let kept = Forest::new(nf, e.forest.trees[..keep].to_vec());
            let rest = Forest::new(nf, e.forest.trees[keep..].to_vec());
            let (student, mut report) = distil(&rest, &x, opts.max_trees - opts.keep, opts.seed)
                .map_err(|err| TrainError::Data(format!("{name}: {err}")))?;
            let forest = kept
                .followed_by(&student)
                .ok_or_else(|| TrainError::Data(format!("{name}: the student reads other rows")))?;
            report.trees_before = e.forest.trees.len();
            report.trees_after = forest.trees.len();
            if let Some(slot) = out.executors.get_mut(name) {
                slot.forest = forest;
            }
            flattening.executors.insert(name.clone(), report);
        }
        out.provenance.flattened = Some(flattening.clone());
        Ok((out, flattening))
    }

    /// `name`'s rows of `rows` cut to the features its forest reads (rows with fewer are left
    /// out).
    fn usable_rows(profile: &Profile, rows: &RowsByExecutor, name: &str) -> Vec<Vec<f64>> {
        let n = profile.executors[name].features.len();
        rows.get(name)
            .map(|v| {
                v.iter()
                    .filter(|r| r.len() >= n)
                    .map(|r| r[..n].to_vec())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Feature rows of random configurations of every op kind, at `opts.points` channel counts
    /// each, by the executor that runs them (the CPU ones at each thread count the profile has).
    /// Round 0 is the first draw; each further round draws other configurations.
    fn random_rows(profile: &Profile, opts: &FlattenOptions, round: u64) -> RowsByExecutor {
        let mut threads: Vec<usize> = profile
            .executors
            .keys()
            .filter(|name| name.starts_with("cpu_"))
            .filter_map(|name| name.rsplit_once("_t").and_then(|(_, t)| t.parse().ok()))
            .collect();
        threads.sort_unstable();
        threads.dedup();
        let mut rng = Rng::new((opts.seed ^ 0x5eed_f1a7).wrapping_add(round));
        let mut out = RowsByExecutor::new();
        let ops = [
            OpKind::Conv,
            OpKind::Depthwise,
            OpKind::GroupedConv,
            OpKind::Linear,
        ];
        for (i, &op) in ops.iter().enumerate() {
            let layers = random_layers(
                &[op],
                opts.configs_per_op,
                opts.seed.wrapping_add(round * ops.len() as u64 + i as u64),
                // Without the profiler's size limits: the compiler also asks about layers
                // larger than any it measures (VGG16's), where the old forest extrapolates.
                &Limits {
                    max_flops: f64::INFINITY,
                    max_weights: usize::MAX,
                },
            );
            for layer in &layers {
                add_layer_rows(profile, layer, &threads, opts.points, &mut rng, &mut out);
            }
        }
        out
    }

    /// The rows of `layer` at `points` channel counts: its GPU part of each count and its CPU part
    /// at each thread count.
    fn add_layer_rows(
        profile: &Profile,
        layer: &Layer,
        threads: &[usize],
        points: usize,
        rng: &mut Rng,
        out: &mut RowsByExecutor,
    ) {
        for c in channel_points(layer.cout, 1, points, rng) {
            let (d, x) = gpu_features(layer, c, profile.device());
            out.entry(gpu_executor(layer.op, d.variant))
                .or_default()
                .push(x);
            for &t in threads {
                out.entry(cpu_executor(layer.op, t))
                    .or_default()
                    .push(cpu_features(layer, c, t));
            }
        }
    }

    /// A forest of at most `trees` trees fit to `teacher`'s raw scores on the rows `x` (every
    /// tenth held out), and how closely it follows them there.
    fn distil(
        teacher: &Forest,
        x: &[Vec<f64>],
        trees: u32,
        seed: u64,
    ) -> Result<(Forest, FlattenedExecutor), TrainError> {
        let target: Vec<f64> = x.iter().map(|r| teacher.predict(r)).collect();
        let held = |i: usize| i % 10 == 9;
        let fit_x: Vec<&Vec<f64>> = x
            .iter()
            .enumerate()
            .filter(|(i, _)| !held(*i))
            .map(|(_, r)| r)
            .collect();
        let fit_y: Vec<f32> = target
            .iter()
            .enumerate()
            .filter(|(i, _)| !held(*i))
            .map(|(_, &t)| t as f32)
            .collect();
        let nf = x[0].len();
        let flat: Vec<f64> = fit_x.iter().flat_map(|r| r.iter().copied()).collect();
        let ds = Dataset::from_slice(&flat, &fit_y, nf as i32, true)
            .map_err(|e| TrainError::LightGbm(e.to_string()))?;
        let params = json!({
            "objective": "regression",
            "num_leaves": 127,
            "min_data_in_leaf": 2,
            "learning_rate": 0.2,
            "num_iterations": trees,
            "max_bin": 1023,
            "min_data_in_bin": 1,
            "feature_pre_filter": false,
            "lambda_l2": 0.0,
            "num_threads": std::thread::available_parallelism().map_or(1, |n| n.get()),
            "deterministic": true,
            "seed": seed,
            "verbosity": -1,
        });
        let booster =
            Booster::train(ds, &params).map_err(|e| TrainError::LightGbm(e.to_string()))?;
        let text = booster
            .save_string()
            .map_err(|e| TrainError::LightGbm(e.to_string()))?;
        let student = Forest::from_lightgbm(&text).map_err(TrainError::LightGbm)?;
        let mut errors: Vec<f64> = x
            .iter()
            .zip(&target)
            .enumerate()
            .filter(|(i, _)| held(*i))
            .map(|(_, (r, &t))| ((student.predict(r) - t).exp() - 1.0).abs() * 100.0)
            .collect();
        errors.sort_by(f64::total_cmp);
        let at = |q: f64| errors[((errors.len() - 1) as f64 * q).round() as usize];
        let report = FlattenedExecutor {
            trees_before: teacher.trees.len(),
            trees_after: student.trees.len(),
            rows: fit_y.len(),
            median_error: at(0.5),
            p99_error: at(0.99),
            held_out: errors.len(),
        };
        Ok((student, report))
    }
}
