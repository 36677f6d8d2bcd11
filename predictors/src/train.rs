//! Training: one LightGBM forest per executor on the log of the latency, hyperparameters by a
//! small grid search with 3-fold cross-validation grouped by configuration, an 80/20 split by
//! configuration for validation (the shipped forest is then refit on every configuration with the
//! chosen hyperparameters), and two ablations per GPU executor: the same model without the
//! dispatch features, and one black-box model for the whole GPU (op features only, all
//! variants together; the paper's naive predictor).
//!
//! With base profiles ([`train_from`], `tandem train --base`, repeatable), measured on other
//! hosts, each executor is also trained as a correction of each base's predictor (trees on the
//! residuals of its log latency), and of these ways and the forest from scratch the cheapest to
//! evaluate within tolerance of the best cross-validated MAPE is taken ([`cheapest_way`]): a
//! profile for a new host from a short measurement of it.

use crate::bundle::{Accuracy, Executor, Profile, Provenance, FORMAT};
use crate::dataset::Row;
use crate::eval::accuracy;
use crate::features::{
    additive_columns, feature_names, is_cpu, is_grouped, kernel_count_names, row_features,
};
use crate::forest::{Additive, Baseline, Forest};
use lightgbm3::{Booster, Dataset};
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use tandem_runtime::gpu::device::DeviceInfo;

/// Why training failed.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    #[error("LightGBM: {0}")]
    LightGbm(String),
    #[error("{0}")]
    Data(String),
}

fn lgb(e: lightgbm3::Error) -> TrainError {
    TrainError::LightGbm(e.to_string())
}

/// Whether a configuration belongs to the held-out 20% (a stable hash of its key).
pub fn is_test_config(config: &str) -> bool {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in config.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h.is_multiple_of(5)
}

fn fold_of(config: &str, folds: u64) -> u64 {
    let mut h: u64 = 0x8422_2325_cbf2_9ce4;
    for b in config.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    (h >> 7) % folds
}

/// The loss the trees fit the log latency with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Objective {
    /// Squared error: the trees follow the mean of the log latency.
    L2,
    /// Absolute error: the trees follow its median, so that a minority of slow measurements
    /// (large layers in a phase of the shared cache) pulls them less.
    L1,
}

impl Objective {
    fn lightgbm(self) -> &'static str {
        match self {
            Objective::L2 => "regression",
            Objective::L1 => "regression_l1",
        }
    }
}

/// One grid point of the search.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Params {
    pub objective: Objective,
    pub num_leaves: u32,
    pub min_data_in_leaf: u32,
    pub learning_rate: f64,
    pub num_iterations: u32,
}

impl Params {
    fn json(&self, rows: usize) -> Value {
        json!({
            "objective": self.objective.lightgbm(),
            "num_leaves": self.num_leaves,
            "min_data_in_leaf": self.min_data_in_leaf.min((rows / 2).max(1) as u32),
            "learning_rate": self.learning_rate,
            "num_iterations": self.num_iterations,
            "min_data_in_bin": 1,
            "feature_pre_filter": false,
            "lambda_l2": 1.0,
            "num_threads": 1,
            "deterministic": true,
            "seed": 7,
            "verbosity": -1,
        })
    }

    fn map(&self) -> BTreeMap<String, Value> {
        match serde_json::to_value(self) {
            Ok(Value::Object(m)) => m.into_iter().collect(),
            _ => BTreeMap::new(),
        }
    }
}

/// The search grid: at most 200 trees, so that a sweep over every split of a layer stays near
/// 0.1 ms. Leaves are cheap there (a row descends `log2(leaves)` levels of a tree) and trees
/// are not, so the grid goes to 127 leaves but not past 200 trees. Each point with either
/// objective, the squared-error ones first.
pub fn grid() -> Vec<Params> {
    let mut out = Vec::new();
    for objective in [Objective::L2, Objective::L1] {
        for num_leaves in [7, 15, 31, 63, 127] {
            for min_data_in_leaf in [2, 5] {
                for (learning_rate, num_iterations) in [(0.2, 80), (0.1, 200)] {
                    out.push(Params {
                        objective,
                        num_leaves,
                        min_data_in_leaf,
                        learning_rate,
                        num_iterations,
                    });
                }
            }
        }
    }
    out
}

/// The search grid of a correction of another profile's predictor (`tandem train --base`):
/// [`grid`]'s points of 80 trees, since the corrected executor evaluates the base's trees and
/// these, and a correction of a predictor that already has the shape of the latencies needs
/// fewer trees than the predictor.
pub fn correction_grid() -> Vec<Params> {
    grid()
        .into_iter()
        .filter(|p| p.num_iterations <= 80)
        .collect()
}

/// A trained LightGBM booster with its pure-Rust forest and the baseline it corrects.
pub struct Trained {
    pub booster: Booster,
    pub forest: Forest,
    pub baseline: Baseline,
}

impl Trained {
    /// Predicted latencies (ms).
    pub fn predict_ms(&self, x: &[Vec<f64>]) -> Vec<f64> {
        self.predict_ms_from(x, &[])
    }

    /// Predicted latencies (ms) of a model trained with [`fit_from`] on a prior: `prior[i]` is
    /// row `i`'s log latency by the predictor it corrects (empty: none).
    pub fn predict_ms_from(&self, x: &[Vec<f64>], prior: &[f64]) -> Vec<f64> {
        x.iter()
            .enumerate()
            .map(|(i, r)| {
                let p = prior.get(i).copied().unwrap_or(0.0);
                (p + self.baseline.eval(r) + self.forest.predict(r)).exp()
            })
            .collect()
    }
}

/// Training rows per baseline column below which the baseline keeps FLOPs alone: a few
/// configurations cannot pin down four exponents.
const ROWS_PER_BASELINE_COLUMN: usize = 20;

/// The baseline columns for `rows` rows of `n` features: [`crate::features::BASELINE_FEATURES`]
/// (when the row has the op features), or FLOPs alone for small training sets.
pub fn baseline_cols(n: usize, rows: usize) -> Vec<usize> {
    use crate::features::{BASELINE_FEATURES, OP_FEATURES};
    if n < OP_FEATURES.len() {
        return vec![];
    }
    let wanted = if rows >= ROWS_PER_BASELINE_COLUMN * BASELINE_FEATURES.len() {
        &BASELINE_FEATURES[..]
    } else {
        &BASELINE_FEATURES[..1]
    };
    wanted
        .iter()
        .filter_map(|b| OP_FEATURES.iter().position(|f| f == b))
        .collect()
}

/// Trains on feature rows `x` (all the same length) and latencies `ms`, on the log-linear
/// baseline.
pub fn fit(x: &[Vec<f64>], ms: &[f64], params: &Params) -> Result<Trained, TrainError> {
    fit_from(x, ms, &[], params, &[])
}

/// [`fit`] of the residuals of a prior: `prior[i]` is row `i`'s log latency by the predictor
/// the new one corrects (an empty `prior`: none), and the baseline and trees fit
/// `ln(ms) − prior` (the baseline a constant: the prior has the trend). Without a prior, a
/// non-empty `additive` (columns of `x`, [`crate::features::additive_columns`]) makes the
/// baseline an additive cost model over them ([`crate::forest::Additive`]) instead of the
/// log-linear trend. Predict with [`Trained::predict_ms_from`].
pub fn fit_from(
    x: &[Vec<f64>],
    ms: &[f64],
    prior: &[f64],
    params: &Params,
    additive: &[usize],
) -> Result<Trained, TrainError> {
    let nf = x.first().map_or(0, Vec::len);
    if x.is_empty() || nf == 0 {
        return Err(TrainError::Data("no training rows".into()));
    }
    if !prior.is_empty() && prior.len() != x.len() {
        return Err(TrainError::Data(format!(
            "{} prior values for {} rows",
            prior.len(),
            x.len()
        )));
    }
    let flat: Vec<f64> = x.iter().flatten().copied().collect();
    let logs: Vec<f64> = ms
        .iter()
        .enumerate()
        .map(|(i, v)| v.max(1e-6).ln() - prior.get(i).copied().unwrap_or(0.0))
        .collect();
    // A correction keeps the trend of the predictor it corrects: its baseline is a constant.
    let baseline = if !prior.is_empty() {
        Baseline::fit(x, &logs, &[])
    } else if additive.is_empty() {
        Baseline::fit(x, &logs, &baseline_cols(nf, x.len()))
    } else {
        if let Some(&c) = additive.iter().find(|&&c| c >= nf) {
            return Err(TrainError::Data(format!(
                "additive baseline column {c} of {nf} features"
            )));
        }
        Baseline::of_additive(Additive::fit(x, ms, additive))
    };
    let labels: Vec<f32> = x
        .iter()
        .zip(&logs)
        .map(|(r, l)| (l - baseline.eval(r)) as f32)
        .collect();
    let ds = Dataset::from_slice(&flat, &labels, nf as i32, true).map_err(lgb)?;
    let booster = Booster::train(ds, &params.json(x.len())).map_err(lgb)?;
    let text = booster.save_string().map_err(lgb)?;
    let forest = Forest::from_lightgbm(&text).map_err(TrainError::LightGbm)?;
    Ok(Trained {
        booster,
        forest,
        baseline,
    })
}

/// LightGBM's own raw predictions for `x`.
pub fn lightgbm_predict(booster: &Booster, x: &[Vec<f64>]) -> Result<Vec<f64>, TrainError> {
    let nf = x.first().map_or(0, Vec::len);
    let flat: Vec<f64> = x.iter().flatten().copied().collect();
    booster.predict(&flat, nf as i32, true).map_err(lgb)
}

/// How much worse (relative) than the best cross-validated MAPE a cheaper forest may be and
/// still be chosen: 2% of the MAPE (5.0% against 4.9%), well inside the folds' own spread.
pub const CHEAPER_TOLERANCE: f64 = 0.02;

/// The cost of evaluating a forest, in tree levels a row descends: trees times
/// `log2(leaves + 1)`. On this host a sweep with 63-leaf forests took 1.2 times as long as with
/// 31-leaf ones, and with twice the trees 1.75 times (`cargo xtask bench predictors`).
pub fn evaluation_cost(p: &Params) -> u64 {
    u64::from(p.num_iterations) * u64::from((p.num_leaves + 1).ilog2())
}

/// The search's choice among `(cv MAPE, params)`: the cheapest forest to evaluate
/// ([`evaluation_cost`]; the planner sweeps every split of every layer through it) whose MAPE
/// is within [`CHEAPER_TOLERANCE`] of the best, the lower MAPE among equally cheap ones.
pub fn cheapest_within_tolerance(scored: &[(f64, Params)]) -> Option<(f64, Params)> {
    let best = scored.iter().map(|(m, _)| *m).reduce(f64::min)?;
    scored
        .iter()
        .filter(|(m, _)| *m <= best * (1.0 + CHEAPER_TOLERANCE))
        .min_by(|(ma, pa), (mb, pb)| {
            evaluation_cost(pa)
                .cmp(&evaluation_cost(pb))
                .then(ma.total_cmp(mb))
        })
        .copied()
}

/// How much worse than the best cross-validated MAPE a cheaper way to predict an executor
/// (the forest from scratch or a correction of one of the bases, [`train_from`]) may be and
/// still be chosen: 5% of the MAPE (6.3% against 6.0%). Wider than [`CHEAPER_TOLERANCE`]
/// because the ways differ more in cost (a base brings up to 280 trees of its own) and their
/// ranking is noise at this size: on the fourth Xeon host, the same executor's corrections of
/// two bases ranked 4% apart one way on one session's data and 2% the other way on the next.
pub const CHEAPER_WAY_TOLERANCE: f64 = 0.05;

/// One way to predict an executor, scored by cross-validation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Way {
    /// Cross-validated MAPE, percent.
    pub mape: f64,
    /// Tree levels a row descends ([`evaluation_cost`]; a correction's includes its base's).
    pub cost: u64,
    /// The base corrected (an index into the bases that have this executor), or `None` for
    /// the forest from scratch.
    pub base: Option<usize>,
    pub params: Params,
}

/// The way [`train_from`] takes: the cheapest to evaluate whose MAPE is within
/// [`CHEAPER_WAY_TOLERANCE`] of the best, the lower MAPE among equally cheap ones, the earlier
/// on a tie (the forest from scratch comes first, then the bases in the order given).
pub fn cheapest_way(ways: &[Way]) -> Option<Way> {
    let best = ways.iter().map(|w| w.mape).reduce(f64::min)?;
    ways.iter()
        .filter(|w| w.mape <= best * (1.0 + CHEAPER_WAY_TOLERANCE))
        .min_by(|a, b| a.cost.cmp(&b.cost).then(a.mape.total_cmp(&b.mape)))
        .copied()
}

/// Mean MAPE over 3 folds grouped by configuration (`None` when too few configurations), of
/// models fit on the residuals of `prior` or on the `additive` baseline ([`fit_from`]).
fn cv_mape(
    rows: &[&Row],
    x: &[Vec<f64>],
    prior: &[f64],
    params: &Params,
    additive: &[usize],
) -> Result<Option<f64>, TrainError> {
    let folds = 3;
    let mut total = 0.0;
    let mut counted = 0;
    let prior_of = |i: usize| prior.get(i).copied();
    for f in 0..folds {
        let (mut tx, mut ty, mut tp, mut vx, mut vy, mut vp) =
            (vec![], vec![], vec![], vec![], vec![], vec![]);
        for (i, (r, xi)) in rows.iter().zip(x).enumerate() {
            let (xs, ys, ps) = if fold_of(&r.config, folds) == f {
                (&mut vx, &mut vy, &mut vp)
            } else {
                (&mut tx, &mut ty, &mut tp)
            };
            xs.push(xi.clone());
            ys.push(r.ms);
            ps.extend(prior_of(i));
        }
        if tx.len() < 4 || vx.is_empty() {
            continue;
        }
        let t = fit_from(&tx, &ty, &tp, params, additive)?;
        total += accuracy(&t.predict_ms_from(&vx, &vp), &vy).mape;
        counted += 1;
    }
    Ok((counted > 0).then(|| total / counted as f64))
}

/// Cross-validated MAPE of every grid point that has enough configurations, in grid order,
/// computed on `threads` threads (each fit is single-threaded and deterministic, so the result
/// does not depend on their number). `rows` and the feature rows `x` correspond.
pub fn search(
    rows: &[&Row],
    x: &[Vec<f64>],
    threads: usize,
) -> Result<Vec<(f64, Params)>, TrainError> {
    search_from(rows, x, &[], &grid(), threads, &[])
}

/// [`search`] over the grid `points` of models fit on the residuals of `prior` or on the
/// `additive` baseline ([`fit_from`]; both empty: the log-linear one).
pub fn search_from(
    rows: &[&Row],
    x: &[Vec<f64>],
    prior: &[f64],
    points: &[Params],
    threads: usize,
    additive: &[usize],
) -> Result<Vec<(f64, Params)>, TrainError> {
    let threads = threads.clamp(1, points.len());
    // Thread t scores points t, t + threads, …, a share of the cheap and of the costly ones
    // (the grid orders them by objective and size); it returns (grid index, MAPE) pairs.
    type Part = Result<Vec<(usize, Option<f64>)>, TrainError>;
    let parts: Vec<Part> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                scope.spawn(move || {
                    (t..points.len())
                        .step_by(threads)
                        .map(|i| Ok((i, cv_mape(rows, x, prior, &points[i], additive)?)))
                        .collect()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(TrainError::Data("a search thread panicked".into())))
            })
            .collect()
    });
    let mut scored = Vec::new();
    for part in parts {
        scored.extend(part?);
    }
    scored.sort_by_key(|(i, _)| *i);
    Ok(scored
        .into_iter()
        .filter_map(|(i, m)| m.map(|m| (m, points[i])))
        .collect())
}

/// The report of one executor.
#[derive(Debug, Clone, Serialize)]
pub struct ExecutorReport {
    pub train_rows: usize,
    pub test_rows: usize,
    /// Rows the shipped forest is fit on: the training and the held-out ones.
    pub shipped_rows: usize,
    pub configs: usize,
    pub params: Params,
    pub cv_mape: Option<f64>,
    /// With `--base`: the base profile when the shipped forest corrects its predictor (that
    /// way was the cheapest within tolerance of the best, [`cheapest_way`]), else `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub corrects: Option<String>,
    /// With `--base`, for an executor a base has: the cross-validated MAPE of the forest
    /// trained from scratch and of the best correction (`cv_mape` is the chosen way's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cv_mape_from_scratch: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cv_mape_corrected: Option<f64>,
    /// With `--base`: every way that cross-validated, in the order weighed (from scratch
    /// first, then the bases as given), with its cost; the chosen one is [`cheapest_way`]'s.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ways: Vec<WayReport>,
    /// With several bases: each base's correction's cross-validated MAPE, by the base's name
    /// (bases without a predictor of these features are absent).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub cv_mape_corrections: BTreeMap<String, f64>,
    /// Held-out accuracy with every feature.
    pub validation: Accuracy,
    /// Held-out accuracy without the dispatch features (GPU executors).
    pub without_dispatch: Option<Accuracy>,
    /// Held-out accuracy with the dispatch features but without the kernel's loop-trip counts
    /// (a forest from scratch on the log-linear baseline; GPU executors with counts): what the
    /// counts buy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub without_counts: Option<Accuracy>,
    /// Held-out accuracy of one black-box GPU model (op features, all variants), on this
    /// executor's held-out rows (GPU executors).
    pub black_box_gpu: Option<Accuracy>,
}

/// One way to predict an executor as the report gives it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WayReport {
    /// The base it corrects, or `None` for the forest from scratch.
    pub corrects: Option<String>,
    /// Cross-validated MAPE, percent.
    pub cv_mape: f64,
    /// Tree levels a row descends ([`Way::cost`]).
    pub tree_levels: u64,
}

/// The training report (`--report-json`).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub dataset: String,
    pub samples: usize,
    pub configs: usize,
    pub sync_ms: f64,
    pub executors: BTreeMap<String, ExecutorReport>,
}

/// What the trainer knows about the measured device besides the rows.
pub struct DeviceMeta {
    pub device: DeviceInfo,
    pub cpu: String,
    /// The host's processor signature ([`crate::bundle::Provenance::host`]), where recorded.
    pub host: Option<String>,
    pub setting: String,
}

/// A profile whose predictors a training may correct instead of starting from scratch
/// (`tandem train --base`): one measured on another host of the same kind, whose forests
/// already have the shape of the latencies, so that a short measurement on this host suffices.
pub struct Base<'a> {
    pub profile: &'a Profile,
    /// How the profile is named in the new one's provenance and report (its file name).
    pub name: String,
}

/// The predictor of executor `name` in `base` that a correction can start from: its own when it
/// reads the features `full`, or, when it reads them but the kernel's loop-trip counts (the
/// first `without_counts`; a profile trained before them), the same trees reading the leading
/// features of the longer rows, so that a correction may use the counts. `None` otherwise.
fn base_predictor(
    base: &Profile,
    name: &str,
    full: &[String],
    without_counts: usize,
) -> Option<Executor> {
    let e = base.executors.get(name)?;
    if e.features == full {
        Some(e.clone())
    } else if e.features.len() == without_counts && full.starts_with(&e.features) {
        Some(Executor {
            features: full.to_vec(),
            kernel_counts: true,
            forest: Forest::new(full.len(), e.forest.trees.clone()),
            ..e.clone()
        })
    } else {
        None
    }
}

/// Trains a profile on `rows` (progress lines go to `log`), from scratch.
pub fn train(
    rows: &[Row],
    meta: DeviceMeta,
    dataset_name: &str,
    log: impl FnMut(&str),
) -> Result<(Profile, Report), TrainError> {
    train_from(rows, meta, dataset_name, &[], log)
}

/// [`train`], and with `bases`, per executor and base that has it with the same features,
/// also a correction of the base's predictor: a forest on the residuals of its log latency
/// over [`correction_grid`]. Cross-validation on this dataset scores every way, and
/// [`cheapest_way`] chooses among them by cost within tolerance of the best, and the shipped
/// executor is the chosen base's followed by the correction ([`Executor::corrected_by`]) or
/// the forest from scratch. Hosts differ by side: a base of a host of the same CPU maker may
/// predict the CPU side best and one of the latest kernels the GPU side.
pub fn train_from(
    rows: &[Row],
    meta: DeviceMeta,
    dataset_name: &str,
    bases: &[Base],
    mut log: impl FnMut(&str),
) -> Result<(Profile, Report), TrainError> {
    if rows.is_empty() {
        return Err(TrainError::Data(format!("{dataset_name} has no rows")));
    }
    let mut by_exec: BTreeMap<&str, Vec<&Row>> = BTreeMap::new();
    for r in rows {
        by_exec.entry(r.executor.as_str()).or_default().push(r);
    }
    let configs: BTreeSet<&str> = rows.iter().map(|r| r.config.as_str()).collect();
    let mut sync: Vec<f64> = {
        let mut seen = BTreeMap::new();
        for r in rows {
            seen.entry(r.config.as_str()).or_insert(r.sync_ms);
        }
        seen.into_values().collect()
    };
    let sync_ms = tandem_runtime::profile::median(&mut sync);

    // The black-box GPU model: op features only, every GPU row, trained once (grouped
    // convolutions, whose rows carry extra features, are left out of it).
    let gpu_rows: Vec<&Row> = rows
        .iter()
        .filter(|r| !is_cpu(&r.executor) && !is_grouped(&r.executor))
        .collect();
    let black_box = {
        let train: Vec<&Row> = gpu_rows
            .iter()
            .copied()
            .filter(|r| !is_test_config(&r.config))
            .collect();
        if train.len() >= 4 {
            let x: Vec<Vec<f64>> = train.iter().map(|r| row_features(r, false)).collect();
            let y: Vec<f64> = train.iter().map(|r| r.ms).collect();
            Some(fit(&x, &y, &grid()[5])?)
        } else {
            None
        }
    };

    let mut executors = BTreeMap::new();
    let mut reports = BTreeMap::new();
    let mut validation = BTreeMap::new();
    for (name, exec_rows) in by_exec {
        let gpu = !is_cpu(name);
        let (train_rows, test_rows): (Vec<&Row>, Vec<&Row>) = exec_rows
            .iter()
            .copied()
            .partition(|r| !is_test_config(&r.config));
        if train_rows.len() < 4 {
            log(&format!(
                "{name}: only {} training rows; skipped (measure more configurations)",
                train_rows.len()
            ));
            continue;
        }
        let x: Vec<Vec<f64>> = train_rows.iter().map(|r| row_features(r, true)).collect();
        let y: Vec<f64> = train_rows.iter().map(|r| r.ms).collect();
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        // The GPU executors' baseline: the cost of their kernel's loop-trip counts.
        let additive = additive_columns(name, true);
        let scored = search_from(&train_rows, &x, &[], &grid(), cores, &additive)?;
        let (mut cv, mut params) = match cheapest_within_tolerance(&scored) {
            Some((m, p)) => (Some(m), p),
            None => (None, grid()[5]),
        };
        let full = feature_names(name, true);
        let without_counts = full.len() - kernel_count_names(name).len();
        let mut base_execs: Vec<(&Base, Executor)> = Vec::new();
        for b in bases {
            match base_predictor(b.profile, name, &full, without_counts) {
                Some(e) => base_execs.push((b, e)),
                None => log(&format!(
                    "{name}: {} has no predictor of these features; not corrected",
                    b.name
                )),
            }
        }
        let (mut cv_from_scratch, mut cv_corrected) = (None, None);
        let mut cv_corrections = BTreeMap::new();
        // Every way to predict this executor that cross-validated: the forest from scratch
        // (no base) and each base's correction, whose cost includes the base's trees.
        let mut ways: Vec<Way> = Vec::new();
        if let Some(c) = cv {
            ways.push(Way {
                mape: c,
                cost: evaluation_cost(&params),
                base: None,
                params,
            });
        }
        // Each base's log latency of the training rows.
        let mut priors: Vec<Vec<f64>> = Vec::with_capacity(base_execs.len());
        for (i, (b, e)) in base_execs.iter().enumerate() {
            let prior: Vec<f64> = x.iter().map(|r| e.predict_log_ms(r)).collect();
            let scored = search_from(&train_rows, &x, &prior, &correction_grid(), cores, &[])?;
            priors.push(prior);
            if let Some((m, p)) = cheapest_within_tolerance(&scored) {
                log(&format!(
                    "{name}: cv MAPE correcting {} {m:.2}%, from scratch {}",
                    b.name,
                    cv.map_or("-".into(), |c| format!("{c:.2}%"))
                ));
                if bases.len() > 1 {
                    cv_corrections.insert(b.name.clone(), m);
                }
                if cv_corrected.is_none_or(|bm| m < bm) {
                    (cv_from_scratch, cv_corrected) = (cv, Some(m));
                }
                ways.push(Way {
                    mape: m,
                    cost: e.forest.evaluation_cost() + evaluation_cost(&p),
                    base: Some(i),
                    params: p,
                });
            }
        }
        let way_reports: Vec<WayReport> = if base_execs.is_empty() {
            Vec::new()
        } else {
            ways.iter()
                .map(|w| WayReport {
                    corrects: w.base.map(|i| base_execs[i].0.name.clone()),
                    cv_mape: w.mape,
                    tree_levels: w.cost,
                })
                .collect()
        };
        let mut chosen: Option<&(&Base, Executor)> = None;
        // The chosen base's log latency of the training rows (empty without a correction).
        let mut train_prior = Vec::new();
        if let Some(way) = cheapest_way(&ways) {
            if !base_execs.is_empty() {
                log(&format!(
                    "{name}: chosen {} ({:.2}%, {} tree levels)",
                    way.base.map_or("from scratch".into(), |i| format!(
                        "correcting {}",
                        base_execs[i].0.name
                    )),
                    way.mape,
                    way.cost
                ));
            }
            (cv, params) = (Some(way.mape), way.params);
            if let Some(i) = way.base {
                chosen = Some(&base_execs[i]);
                train_prior = std::mem::take(&mut priors[i]);
            }
        }
        let corrects = chosen.map(|(b, _)| b.name.clone());
        let base_exec = chosen.map(|(_, e)| e);
        // The same for other rows (empty without the correction).
        let prior = |x: &[Vec<f64>]| -> Vec<f64> {
            match base_exec {
                Some(e) => x.iter().map(|r| e.predict_log_ms(r)).collect(),
                None => Vec::new(),
            }
        };
        let trained = fit_from(&x, &y, &train_prior, &params, &additive)?;
        let tx: Vec<Vec<f64>> = test_rows.iter().map(|r| row_features(r, true)).collect();
        let ty: Vec<f64> = test_rows.iter().map(|r| r.ms).collect();
        let acc = accuracy(&trained.predict_ms_from(&tx, &prior(&tx)), &ty);
        let no_counts = if without_counts < full.len() {
            let cut = |x: &[Vec<f64>]| -> Vec<Vec<f64>> {
                x.iter().map(|r| r[..without_counts].to_vec()).collect()
            };
            let t = fit(&cut(&x), &y, &params)?;
            Some(accuracy(&t.predict_ms(&cut(&tx)), &ty))
        } else {
            None
        };
        let (without_dispatch, bb) = if gpu {
            let x0: Vec<Vec<f64>> = train_rows.iter().map(|r| row_features(r, false)).collect();
            let t0 = fit(&x0, &y, &params)?;
            let tx0: Vec<Vec<f64>> = test_rows.iter().map(|r| row_features(r, false)).collect();
            let a0 = accuracy(&t0.predict_ms(&tx0), &ty);
            let abb = black_box
                .as_ref()
                .filter(|_| !is_grouped(name))
                .map(|f| accuracy(&f.predict_ms(&tx0), &ty));
            (Some(a0), abb)
        } else {
            (None, None)
        };
        let nconf = exec_rows
            .iter()
            .map(|r| r.config.as_str())
            .collect::<BTreeSet<_>>()
            .len();
        log(&format!(
            "{name}: {} train / {} test rows, {nconf} configs; cv MAPE {}; held-out MAPE {:.2}%, \
             within ±10% {:.1}%{}",
            train_rows.len(),
            test_rows.len(),
            cv.map_or("-".into(), |m| format!("{m:.2}%")),
            acc.mape,
            acc.within10 * 100.0,
            without_dispatch.map_or(String::new(), |a| format!(
                "; without dispatch features {:.2}%",
                a.mape
            )) + &no_counts.map_or(String::new(), |a| format!(
                "; without the kernel's loop-trip counts {:.2}%",
                a.mape
            ))
        ));
        // The shipped forest: the same hyperparameters refit on every configuration, the
        // held-out ones included (more configurations is what lowers the error most; the
        // validation figures above are those of the same recipe on 80% of them).
        let shipped = if test_rows.is_empty() {
            trained
        } else {
            let ax: Vec<Vec<f64>> = exec_rows.iter().map(|r| row_features(r, true)).collect();
            let ay: Vec<f64> = exec_rows.iter().map(|r| r.ms).collect();
            fit_from(&ax, &ay, &prior(&ax), &params, &additive)?
        };
        let mut param_map = params.map();
        let (baseline, forest) = match (base_exec, &corrects) {
            (Some(e), Some(b)) => {
                param_map.insert("corrects".into(), json!(b));
                param_map.insert("base_trees".into(), json!(e.forest.trees.len()));
                e.corrected_by(&shipped.baseline, &shipped.forest)
                    .ok_or_else(|| {
                        TrainError::Data(format!("{name}: the base's forest reads other rows"))
                    })?
            }
            _ => (shipped.baseline, shipped.forest),
        };
        validation.insert(name.to_string(), acc);
        reports.insert(
            name.to_string(),
            ExecutorReport {
                train_rows: train_rows.len(),
                test_rows: test_rows.len(),
                shipped_rows: exec_rows.len(),
                configs: nconf,
                params,
                cv_mape: cv,
                corrects,
                cv_mape_from_scratch: cv_from_scratch,
                cv_mape_corrected: cv_corrected,
                cv_mape_corrections: cv_corrections,
                ways: way_reports,
                validation: acc,
                without_dispatch,
                without_counts: no_counts,
                black_box_gpu: bb,
            },
        );
        executors.insert(
            name.to_string(),
            Executor {
                scale: 1.0,
                kernel_counts: full.len() > without_counts,
                features: full,
                dispatch_features: true,
                params: param_map,
                forest,
                baseline,
            },
        );
    }
    let profile = Profile {
        format: FORMAT.to_string(),
        provenance: Provenance {
            device: meta.device,
            cpu: meta.cpu,
            host: meta.host,
            setting: meta.setting,
            date: crate::bundle::today(),
            calibrations: Vec::new(),
            corun_datasets: Vec::new(),
            base: (!bases.is_empty()).then(|| {
                bases
                    .iter()
                    .map(|b| {
                        let p = &b.profile.provenance;
                        format!("{} (dataset {}, trained {})", b.name, p.dataset, p.date)
                    })
                    .collect::<Vec<_>>()
                    .join("; ")
            }),
            tandem_version: format!("tandem {}", env!("CARGO_PKG_VERSION")),
            probe: crate::bundle::ProbeSpeed::of(rows),
            latency: Default::default(),
            flattened: None,
            dataset: dataset_name.to_string(),
            samples: rows.len(),
            configs: configs.len(),
            validation,
        },
        sync_ms,
        executors,
        contention: BTreeMap::new(),
        speed: Default::default(),
    };
    let report = Report {
        dataset: dataset_name.to_string(),
        samples: rows.len(),
        configs: configs.len(),
        sync_ms,
        executors: reports,
    };
    Ok((profile, report))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(num_leaves: u32, num_iterations: u32) -> Params {
        Params {
            objective: Objective::L2,
            num_leaves,
            min_data_in_leaf: 2,
            learning_rate: 0.1,
            num_iterations,
        }
    }

    #[test]
    fn the_search_takes_the_cheapest_forest_within_the_tolerance_of_the_best() {
        let scored = [
            (5.00, p(31, 200)),
            (5.08, p(15, 80)),
            (5.09, p(7, 80)),
            (6.00, p(7, 80)),
        ];
        // 5.08 and 5.09 are within 2% of 5.00; 7 x 80 is the cheapest of them.
        assert_eq!(cheapest_within_tolerance(&scored), Some((5.09, p(7, 80))));
        // Leaves cost their depth: 127 x 200 (7 levels a tree) is cheaper than 31 x 400 (5).
        let scored = [(5.00, p(127, 200)), (5.01, p(31, 400))];
        assert_eq!(
            cheapest_within_tolerance(&scored),
            Some((5.00, p(127, 200)))
        );
        assert_eq!(evaluation_cost(&p(63, 200)), 1200);
        // The grid trades trees for leaves: never past 200 trees, up to 127 leaves.
        assert!(grid().iter().all(|g| g.num_iterations <= 200));
        assert_eq!(grid().iter().map(|g| g.num_leaves).max(), Some(127));
        // Both objectives, at the same points.
        let (l2, l1): (Vec<Params>, Vec<Params>) = grid()
            .into_iter()
            .partition(|g| g.objective == Objective::L2);
        assert_eq!(l2.len(), l1.len());
        assert!(l2.iter().zip(&l1).all(|(a, b)| Params {
            objective: Objective::L1,
            ..*a
        } == *b));
        let scored = [(5.00, p(31, 200)), (5.20, p(7, 80))];
        assert_eq!(cheapest_within_tolerance(&scored), Some((5.00, p(31, 200))));
        // Equally cheap: the lower MAPE.
        let scored = [(5.05, p(15, 80)), (5.01, p(15, 80)), (5.0, p(31, 200))];
        assert_eq!(cheapest_within_tolerance(&scored), Some((5.01, p(15, 80))));
        assert_eq!(cheapest_within_tolerance(&[]), None);
    }

    #[test]
    fn the_cheapest_way_within_five_percent_of_the_best_is_taken() {
        let w = |mape: f64, cost: u64, base: Option<usize>| Way {
            mape,
            cost,
            base,
            params: p(7, 80),
        };
        // A correction of a costly base (1680 levels) against one of a cheap base (720) 2.2%
        // worse, and the forest from scratch 17% worse: the cheap base's correction.
        let ways = [
            w(7.02, 240, None),
            w(6.00, 1680, Some(0)),
            w(6.13, 720, Some(2)),
        ];
        assert_eq!(cheapest_way(&ways), Some(ways[2]));
        // Outside the tolerance (6.31 > 6.00 x 1.05) the cheaper way is not taken.
        let ways = [w(6.00, 1680, Some(0)), w(6.31, 720, Some(1))];
        assert_eq!(cheapest_way(&ways), Some(ways[0]));
        // The forest from scratch when it is the cheapest within the tolerance, even if a
        // correction is a little better.
        let ways = [w(5.10, 240, None), w(5.00, 720, Some(0))];
        assert_eq!(cheapest_way(&ways), Some(ways[0]));
        // Equally cheap: the lower MAPE; then the earlier.
        let ways = [w(5.10, 720, Some(0)), w(5.00, 720, Some(1))];
        assert_eq!(cheapest_way(&ways), Some(ways[1]));
        let ways = [w(5.00, 720, None), w(5.00, 720, Some(1))];
        assert_eq!(cheapest_way(&ways), Some(ways[0]));
        assert_eq!(cheapest_way(&[]), None);
    }
}
