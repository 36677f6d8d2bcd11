//! The machine's speed of the hour, read from the reference layer.
//!
//! On a shared host the whole machine runs several percent faster or slower from one hour to
//! the next (the second Xeon host: −4% to +8% against one profile over a dozen datasets, and
//! 7 points apart between two sets measured a quarter of an hour apart). No profile measured
//! earlier knows the hour's speed; the quiet gate's reference layer ([`crate::quiet`], each
//! row's `probe_ms`) does, in part. Across a host's datasets the level of the latencies
//! against one profile follows the reference layer's time with an *elasticity* below one:
//! over 14 datasets of the second Xeon host, its levels moved 0.50 times as much as the probe's
//! on the CPU side and 0.26 times on the GPU side, and the fit left 1.7% of their 2.2–2.5%
//! spread.
//!
//! A [`SpeedModel`] holds that fit per side (`tandem train` with several datasets, fitted
//! against the profile it trains): the probe time at which the predictions hold as trained,
//! the level there, and the elasticity. [`SideSpeed::factor`] scales a side's predictions for
//! a probe time measured now (`tandem compile --speed-probe`, or a dataset's own probes in
//! `tandem eval`).
//!
//! The executors of one side do not all move alike: on the Zen 4 EPYC host, a day whose GPU
//! side probe ran 46% slower left the compute-bound `conv_generic` 11% slower and the
//! memory-bound `depthwise_generic` and `conv_grouped` 33% slower. So the model also holds a
//! fit per executor, on the same datasets with the executor's own level
//! ([`DatasetSpeed::executors`]); an executor with one uses it ([`SpeedModel::factor_for`]),
//! the others their side's.
//!
//! Within one dataset the host drifts too, and each point's own probe records its moment:
//! [`point_elasticity`] fits how far one point's latency follows its own reading about its
//! dataset's (less than across datasets, a single reading being noisier than a dataset's
//! median), and [`at_median_probe`] brings every point of a training set to its median moment
//! by it (`tandem train --point-speed`), so that the drift does not reach the forests.
//!
//! Contracts:
//! - [`fit_side`] needs at least [`MIN_DATASETS`] datasets and a slope at least
//!   [`MIN_T`] standard errors above zero; otherwise the side has no model (`None`): a probe
//!   that does not track the levels must not move the predictions.
//! - The elasticity is at most [`MAX_ELASTICITY`]; a factor is finite and positive for a
//!   positive probe time.
//! - An executor's own fit takes only datasets where it has at least [`MIN_POINTS`] points,
//!   and follows the same rules as a side's.

use crate::bundle::{ProbeSpeed, Profile};
use crate::dataset::Row;
use crate::eval::{evaluate, machine_offset};
use crate::features::is_cpu;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Datasets a side's fit needs at least.
pub const MIN_DATASETS: usize = 4;
/// Standard errors the fitted elasticity must lie above zero.
pub const MIN_T: f64 = 2.0;
/// Points an executor needs in a dataset for that dataset's level of it to enter its own fit
/// (a median of fewer moves with the configurations drawn more than with the hour).
pub const MIN_POINTS: usize = 20;
/// The largest elasticity kept (a latency moving more than the reference layer itself would
/// be a fit on too few datasets).
pub const MAX_ELASTICITY: f64 = 1.5;

/// One side's speed model: `factor(p) = level · (p / probe_ms)^elasticity`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SideSpeed {
    /// The reference layer's time (ms) the fit is centred on: the geometric mean of the
    /// datasets' probe times.
    pub probe_ms: f64,
    /// The datasets' level against the profile at that probe time (a factor on the
    /// predictions; 1: as trained).
    pub level: f64,
    /// How much the level moves per unit of the probe's (both as logarithms).
    pub elasticity: f64,
    /// The datasets fitted.
    pub datasets: usize,
    /// The standard deviation of the datasets' levels (of their logarithm, in percent) before
    /// the fit, and what the fit left of it.
    pub spread_percent: f64,
    pub residual_percent: f64,
}

impl SideSpeed {
    /// The factor on this side's predictions when the reference layer takes `probe_ms`.
    pub fn factor(&self, probe_ms: f64) -> f64 {
        self.level * (probe_ms / self.probe_ms).powf(self.elasticity)
    }

    /// Whether the fields describe a usable model (finite, positive, elasticity in range).
    pub fn check(&self) -> Result<(), String> {
        let positive = |x: f64| x.is_finite() && x > 0.0;
        if !positive(self.probe_ms) || !positive(self.level) {
            return Err(format!(
                "probe_ms {} and level {} must be positive",
                self.probe_ms, self.level
            ));
        }
        if !(0.0..=MAX_ELASTICITY).contains(&self.elasticity) {
            return Err(format!(
                "elasticity {} is outside 0–{MAX_ELASTICITY}",
                self.elasticity
            ));
        }
        Ok(())
    }
}

/// The speed model of both sides (either may be missing) and of single executors.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct SpeedModel {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<SideSpeed>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<SideSpeed>,
    /// Executors with a fit of their own (its `probe_ms` is their side's reference layer's);
    /// the others follow their side's.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub executors: BTreeMap<String, SideSpeed>,
}

impl SpeedModel {
    /// The model of the CPU side (`cpu`) or the GPU side.
    pub fn side(&self, cpu: bool) -> Option<&SideSpeed> {
        if cpu {
            self.cpu.as_ref()
        } else {
            self.gpu.as_ref()
        }
    }

    /// Whether neither side nor any executor has a model.
    pub fn is_empty(&self) -> bool {
        self.gpu.is_none() && self.cpu.is_none() && self.executors.is_empty()
    }

    /// The model that scales `executor`'s predictions: its own, else its side's (`None`: the
    /// predictions stay as trained).
    pub fn model_for(&self, executor: &str) -> Option<&SideSpeed> {
        self.executors
            .get(executor)
            .or_else(|| self.side(is_cpu(executor)))
    }

    /// The factor on `executor`'s predictions when the reference layer takes `probe_ms` (GPU,
    /// CPU side) by [`SpeedModel::model_for`]; `None` without a model or a reading of its side.
    pub fn factor_for(&self, executor: &str, probe_ms: [Option<f64>; 2]) -> Option<f64> {
        let p = probe_ms[usize::from(is_cpu(executor))]?;
        Some(self.model_for(executor)?.factor(p))
    }

    /// Checks every model's fields ([`SideSpeed::check`]), naming the one that fails.
    pub fn check(&self) -> Result<(), String> {
        let sides = [("gpu", &self.gpu), ("cpu", &self.cpu)];
        for (side, s) in sides {
            if let Some(s) = s {
                s.check().map_err(|m| format!("speed.{side}: {m}"))?;
            }
        }
        for (name, s) in &self.executors {
            s.check()
                .map_err(|m| format!("speed.executors.{name}: {m}"))?;
        }
        Ok(())
    }
}

/// Fits one side's model on `(probe_ms, level)` per dataset: the least-squares line of
/// `ln(level)` on `ln(probe_ms)`. `None` with fewer than [`MIN_DATASETS`] datasets, when the
/// probe times do not vary, or when the slope is not [`MIN_T`] standard errors above zero.
pub fn fit_side(points: &[(f64, f64)]) -> Option<SideSpeed> {
    let logs: Vec<(f64, f64)> = points
        .iter()
        .filter(|(p, l)| p.is_finite() && *p > 0.0 && l.is_finite() && *l > 0.0)
        .map(|(p, l)| (p.ln(), l.ln()))
        .collect();
    let n = logs.len();
    if n < MIN_DATASETS {
        return None;
    }
    let nf = n as f64;
    let mx = logs.iter().map(|(x, _)| x).sum::<f64>() / nf;
    let my = logs.iter().map(|(_, y)| y).sum::<f64>() / nf;
    let sxx: f64 = logs.iter().map(|(x, _)| (x - mx).powi(2)).sum();
    let syy: f64 = logs.iter().map(|(_, y)| (y - my).powi(2)).sum();
    let sxy: f64 = logs.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
    let fit = tracking_slope([sxx, sxy, syy], nf - 2.0)?;
    Some(SideSpeed {
        probe_ms: mx.exp(),
        level: my.exp(),
        elasticity: fit.slope.min(MAX_ELASTICITY),
        datasets: n,
        spread_percent: 100.0 * (syy / nf).sqrt(),
        residual_percent: 100.0 * (fit.residual / nf).sqrt(),
    })
}

/// A least-squares slope of `y` on `x` with its standard error and residual sum of squares.
struct Slope {
    slope: f64,
    se: f64,
    residual: f64,
}

/// The slope from the centred sums `[Σx², Σxy, Σy²]` with `freedom` residual degrees of
/// freedom: `None` when `x` does not vary or the slope is not [`MIN_T`] standard errors above
/// zero (the latencies do not track the probe). Uncapped: callers cap at [`MAX_ELASTICITY`].
fn tracking_slope([sxx, sxy, syy]: [f64; 3], freedom: f64) -> Option<Slope> {
    if sxx <= 1e-12 {
        return None;
    }
    let slope = sxy / sxx;
    let residual = (syy - slope * sxy).max(0.0);
    let se = (residual / freedom.max(1.0) / sxx).sqrt();
    (slope > 0.0 && slope >= MIN_T * se).then_some(Slope {
        slope,
        se,
        residual,
    })
}

/// One dataset's speed against a profile, per side (GPU, CPU): its reference layer's time
/// ([`ProbeSpeed`]) and its level (the median over the side's executors of their median
/// measured / predicted, as a factor; `tandem eval`'s offsets). `None` where it lacks either.
/// Also each executor's own level, for those with at least [`MIN_POINTS`] points.
#[derive(Debug, Clone, PartialEq)]
pub struct DatasetSpeed {
    pub probe_ms: [Option<f64>; 2],
    pub level: [Option<f64>; 2],
    pub executors: BTreeMap<String, f64>,
}

impl DatasetSpeed {
    /// The speed of the dataset `rows` against `profile`.
    pub fn of(profile: &Profile, rows: &[Row]) -> DatasetSpeed {
        let e = evaluate(profile, rows);
        let level = |cpu: bool| {
            let side: BTreeMap<String, f64> = e
                .offset
                .iter()
                .filter(|(k, _)| is_cpu(k) == cpu)
                .map(|(k, &v)| (k.clone(), v))
                .collect();
            (!side.is_empty()).then(|| 1.0 + machine_offset(&side) / 100.0)
        };
        let probe = ProbeSpeed::of(rows).unwrap_or_default();
        let executors = e
            .offset
            .iter()
            .filter(|(k, _)| e.executors.get(*k).is_some_and(|a| a.n >= MIN_POINTS))
            .map(|(k, &v)| (k.clone(), 1.0 + v / 100.0))
            .collect();
        DatasetSpeed {
            probe_ms: [probe.gpu_ms, probe.cpu_ms],
            level: [level(false), level(true)],
            executors,
        }
    }
}

/// The speed model of `profile` fitted on datasets of one host measured at different hours
/// ([`DatasetSpeed`] each, against that profile), per side and per executor by [`fit_side`].
pub fn fit(datasets: &[DatasetSpeed]) -> SpeedModel {
    let side = |i: usize| {
        let points: Vec<(f64, f64)> = datasets
            .iter()
            .filter_map(|d| Some((d.probe_ms[i]?, d.level[i]?)))
            .collect();
        fit_side(&points)
    };
    let names: std::collections::BTreeSet<&String> =
        datasets.iter().flat_map(|d| d.executors.keys()).collect();
    let executors = names
        .into_iter()
        .filter_map(|name| {
            let i = usize::from(is_cpu(name));
            let points: Vec<(f64, f64)> = datasets
                .iter()
                .filter_map(|d| Some((d.probe_ms[i]?, *d.executors.get(name)?)))
                .collect();
            Some((name.clone(), fit_side(&points)?))
        })
        .collect();
    SpeedModel {
        gpu: side(0),
        cpu: side(1),
        executors,
    }
}

/// Points a side needs, over all datasets, for [`point_elasticity`] to fit it.
pub const MIN_POINT_FIT: usize = 200;

/// How much one point's latency moves with its own reference-layer time about its dataset's
/// (one side): the elasticity within datasets, pooled over them and their executors.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PointElasticity {
    pub elasticity: f64,
    /// Its standard error.
    pub se: f64,
    /// The points fitted, over how many datasets.
    pub points: usize,
    pub datasets: usize,
}

/// The within-dataset elasticity per side (GPU, CPU) of the datasets `datasets` against
/// `profile`: the least-squares slope of `ln(measured / predicted)` on `ln(probe_ms)`, both
/// taken about their mean in each dataset and executor, so that neither the hour of a dataset
/// nor the bias of an executor enters it. Within one dataset a point's probe is one short
/// reading, noisier than a dataset's median of hundreds, so this slope lies below the
/// elasticity across datasets ([`fit_side`]): it is how far one reading should move one point.
///
/// A side gets `None` with fewer than [`MIN_POINT_FIT`] points with a probe and a prediction,
/// or a slope not [`MIN_T`] standard errors above zero; the elasticity is at most
/// [`MAX_ELASTICITY`].
pub fn point_elasticity(profile: &Profile, datasets: &[&[Row]]) -> [Option<PointElasticity>; 2] {
    // Per side: sums of the centred products, points, (dataset, executor) groups, datasets.
    let mut sums = [[0.0f64; 3]; 2];
    let mut counts = [[0usize; 3]; 2];
    for rows in datasets {
        let predicted = evaluate(profile, rows).predicted;
        let mut groups: BTreeMap<&str, Vec<(f64, f64)>> = BTreeMap::new();
        for (r, p) in rows.iter().zip(predicted) {
            let Some(p) = p.filter(|&p| p > 0.0 && p.is_finite()) else {
                continue;
            };
            if r.probe_ms > 0.0 && r.ms > 0.0 {
                groups
                    .entry(r.executor.as_str())
                    .or_default()
                    .push((r.probe_ms.ln(), (r.ms / p).ln()));
            }
        }
        let mut seen = [false; 2];
        for (executor, points) in groups {
            let side = usize::from(is_cpu(executor));
            let n = points.len() as f64;
            let mx = points.iter().map(|(x, _)| x).sum::<f64>() / n;
            let my = points.iter().map(|(_, y)| y).sum::<f64>() / n;
            for (x, y) in &points {
                sums[side][0] += (x - mx) * (x - mx);
                sums[side][1] += (x - mx) * (y - my);
                sums[side][2] += (y - my) * (y - my);
            }
            counts[side][0] += points.len();
            counts[side][1] += 1;
            seen[side] = true;
        }
        for side in 0..2 {
            counts[side][2] += usize::from(seen[side]);
        }
    }
    std::array::from_fn(|side| {
        let [points, groups, datasets] = counts[side];
        if points < MIN_POINT_FIT {
            return None;
        }
        // Each (dataset, executor) group spent a degree of freedom on its mean.
        let freedom = points.saturating_sub(groups + 1) as f64;
        let fit = tracking_slope(sums[side], freedom)?;
        Some(PointElasticity {
            elasticity: fit.slope.min(MAX_ELASTICITY),
            se: fit.se,
            points,
            datasets,
        })
    })
}

/// Brings every point of one dataset's `rows` to its side's median reference-layer time
/// ([`ProbeSpeed::of`]): `ms × (median / probe_ms)^elasticity`, the elasticity of its side
/// (GPU, CPU; [`point_elasticity`]). Points without a probe, and a side without an
/// elasticity, stay as measured. What is left of the dataset's speed is its hour's, which a
/// machine offset takes out. Returns how many points moved and the median of their moves
/// (the absolute change, in percent).
pub fn at_median_probe(rows: &mut [Row], elasticity: [Option<f64>; 2]) -> (usize, f64) {
    let Some(median) = ProbeSpeed::of(rows) else {
        return (0, 0.0);
    };
    let median = [median.gpu_ms, median.cpu_ms];
    let mut moves = Vec::new();
    for r in rows.iter_mut() {
        let side = usize::from(is_cpu(&r.executor));
        let (Some(b), Some(m)) = (elasticity[side], median[side]) else {
            continue;
        };
        if r.probe_ms > 0.0 {
            let factor = (m / r.probe_ms).powf(b);
            r.ms *= factor;
            moves.push(100.0 * (factor - 1.0).abs());
        }
    }
    let n = moves.len();
    let typical = if n == 0 {
        0.0
    } else {
        tandem_runtime::profile::median(&mut moves)
    };
    (n, typical)
}

/// Times the reference layer takes on each side now, each [`NOW_PROBES`] times.
pub const NOW_PROBES: usize = 24;
/// The slack of `tandem profile`'s quiet gate by default (8%): a dataset's probe times are
/// those of its quiet rounds, so a reading now keeps the probes within this of their quiet
/// time too.
pub const NOW_SLACK: f64 = 0.08;

/// The median of the probe times within [`NOW_SLACK`] of their 10th percentile (their quiet
/// time, as the quiet gate takes it): the reading a dataset's rows would have recorded. 0 for
/// none.
pub fn quiet_median(times: &[f64]) -> f64 {
    let mut v: Vec<f64> = times.iter().copied().filter(|t| t.is_finite()).collect();
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let quiet = v[(v.len() - 1) / 10];
    let mut kept: Vec<f64> = v
        .into_iter()
        .filter(|&t| t <= quiet * (1.0 + NOW_SLACK))
        .collect();
    tandem_runtime::profile::median(&mut kept)
}

/// The reference layer's time on this machine now, per side (GPU, CPU side on one thread),
/// by [`quiet_median`] of [`NOW_PROBES`] alternating readings (a few seconds).
pub fn probe_now(
    profiler: &mut tandem_runtime::profile::Profiler,
) -> Result<[f64; 2], tandem_runtime::gpu::GpuError> {
    let op = tandem_runtime::profile::probe_layer();
    let mut bench = profiler.layer_with_probe(&op, &[op.channels()], 1)?;
    let (mut gpu, mut cpu) = (Vec::new(), Vec::new());
    for _ in 0..NOW_PROBES {
        gpu.push(bench.probe_gpu()?);
        cpu.push(bench.probe_cpu()?);
    }
    Ok([quiet_median(&gpu), quiet_median(&cpu)])
}

impl Profile {
    /// This profile at the machine's speed when the reference layer takes `probe_ms` (GPU,
    /// CPU side): each executor's predictions scaled by its factor
    /// ([`SpeedModel::factor_for`]: its own model's, else its side's). Returns the sides'
    /// factors too (1 for a side without a model) and each executor's.
    pub fn at_probe_speed(&self, probe_ms: [f64; 2]) -> (Profile, [f64; 2], BTreeMap<String, f64>) {
        let factor = |side: Option<&SideSpeed>, p: f64| side.map_or(1.0, |s| s.factor(p));
        let factors = [
            factor(self.speed.gpu.as_ref(), probe_ms[0]),
            factor(self.speed.cpu.as_ref(), probe_ms[1]),
        ];
        let mut p = self.clone();
        let mut each = BTreeMap::new();
        for (name, e) in &mut p.executors {
            let f = self
                .speed
                .factor_for(name, probe_ms.map(Some))
                .unwrap_or(1.0);
            e.scale *= f;
            each.insert(name.clone(), f);
        }
        (p, factors, each)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Levels that follow the probe with elasticity 0.5 around level 1.02 at probe 0.18 ms,
    /// with a little scatter.
    fn hours() -> Vec<(f64, f64)> {
        [0.17, 0.175, 0.18, 0.185, 0.19, 0.195]
            .iter()
            .zip([0.004, -0.003, 0.002, -0.004, 0.003, -0.002])
            .map(|(&p, e): (&f64, f64)| (p, 1.02 * (p / 0.18f64).powf(0.5) * (1.0 + e)))
            .collect()
    }

    #[test]
    fn the_fit_recovers_the_elasticity_and_the_level() {
        let s = fit_side(&hours()).expect("a model");
        assert!((s.elasticity - 0.5).abs() < 0.1, "{s:?}");
        assert!((s.factor(0.18) / 1.02 - 1.0).abs() < 0.005, "{s:?}");
        assert!(s.residual_percent < 0.5 * s.spread_percent, "{s:?}");
        assert_eq!(s.datasets, 6);
        s.check().expect("usable");
        // Faster hour, smaller factor; by the elasticity.
        let ratio = s.factor(0.171) / s.factor(0.19);
        assert!((ratio - (0.171f64 / 0.19).powf(s.elasticity)).abs() < 1e-12);
    }

    #[test]
    fn no_model_without_enough_datasets_or_a_tracking_probe() {
        assert!(fit_side(&hours()[..3]).is_none());
        // Levels that do not follow the probe.
        let flat: Vec<(f64, f64)> = hours()
            .iter()
            .zip([1.0, 1.03, 0.98, 1.02, 0.99, 1.01])
            .map(|(&(p, _), l)| (p, l))
            .collect();
        assert!(fit_side(&flat).is_none());
        // One probe time for all.
        let same: Vec<(f64, f64)> = hours().iter().map(|&(_, l)| (0.18, l)).collect();
        assert!(fit_side(&same).is_none());
        // A level that falls as the probe slows is no speed reading either.
        let inverse: Vec<(f64, f64)> = hours().iter().map(|&(p, l)| (p, 1.0 / l)).collect();
        assert!(fit_side(&inverse).is_none());
    }

    /// Datasets whose GPU side's reference layer moves ±10%, with the side's level following
    /// it by 0.5, `conv_generic` by 0.25 and `depthwise_generic` by 1.0; `conv_winograd` has
    /// enough points in only three of them.
    fn executor_hours() -> Vec<DatasetSpeed> {
        [0.9f64, 0.95, 1.0, 1.05, 1.1]
            .iter()
            .zip([0.002, -0.003, 0.001, -0.002, 0.003])
            .enumerate()
            .map(|(i, (&p, e))| {
                let mut executors = BTreeMap::from([
                    ("conv_generic".to_string(), p.powf(0.25) * (1.0 + e)),
                    ("depthwise_generic".to_string(), p * (1.0 - e)),
                ]);
                if i < 3 {
                    executors.insert("conv_winograd".into(), 1.3);
                }
                DatasetSpeed {
                    probe_ms: [Some(0.6 * p), None],
                    level: [Some(p.powf(0.5) * (1.0 + e)), None],
                    executors,
                }
            })
            .collect()
    }

    #[test]
    fn executors_get_their_own_elasticity_and_the_others_their_sides() {
        let model = fit(&executor_hours());
        let side = model.gpu.expect("a GPU side model");
        assert!((side.elasticity - 0.5).abs() < 0.05, "{side:?}");
        assert!(model.cpu.is_none());
        let own = |name: &str| model.executors.get(name).expect(name).elasticity;
        assert!((own("conv_generic") - 0.25).abs() < 0.05, "{model:?}");
        assert!((own("depthwise_generic") - 1.0).abs() < 0.05, "{model:?}");
        // Three datasets are too few for a fit of its own.
        assert!(!model.executors.contains_key("conv_winograd"));
        model.check().expect("usable");

        // 10% slower than the centre: each by its own elasticity, the rest by the side's.
        let probe = [Some(0.6 * 1.1), None];
        let f = |name: &str| model.factor_for(name, probe).expect(name);
        assert!((f("conv_generic") - 1.1f64.powf(0.25)).abs() < 0.01);
        assert!((f("depthwise_generic") - 1.1).abs() < 0.01);
        assert!((f("conv_winograd") - side.factor(0.66)).abs() < 1e-12);
        // No model on the CPU side and no reading: no factor.
        assert_eq!(
            model.factor_for("cpu_conv_t1", [Some(0.66), Some(0.2)]),
            None
        );
        assert_eq!(model.factor_for("conv_generic", [None, Some(0.2)]), None);

        // A bad executor model is named by the check.
        let mut bad = model.clone();
        bad.executors.get_mut("conv_generic").expect("fit").level = -1.0;
        let err = bad.check().expect_err("refused");
        assert!(err.contains("speed.executors.conv_generic"), "{err}");
    }

    #[test]
    fn a_speed_model_without_executors_reads_as_before() {
        let side = fit_side(&hours()).expect("a model");
        let json = serde_json::to_string(&SpeedModel {
            cpu: Some(side),
            ..Default::default()
        })
        .expect("json");
        assert!(!json.contains("executors"), "{json}");
        let back: SpeedModel = serde_json::from_str(&json).expect("parse");
        assert!(back.executors.is_empty());
        assert_eq!(back.cpu, Some(side));
        assert!(!back.is_empty());
    }

    #[test]
    fn a_reading_now_is_the_median_of_its_quiet_probes() {
        // Quiet near 1.0; a slow phase at 1.3 and 1.5 is left out.
        let mut t = vec![1.0, 1.02, 1.01, 1.05, 1.03, 1.3, 1.5, 1.04, 0.99, 1.06];
        assert!(
            (quiet_median(&t) - 1.025).abs() < 1e-9,
            "{}",
            quiet_median(&t)
        );
        t.push(f64::NAN);
        assert!((quiet_median(&t) - 1.025).abs() < 1e-9);
        assert_eq!(quiet_median(&[]), 0.0);
    }

    /// The shipped profile's predictions of a shipped dataset, re-measured in `hours` (a
    /// level each) with each point's reference layer `1 ± 8%` of its side's base in a cycle
    /// of five and its latency following it by `elasticity`; `conv_generic` 20% over its
    /// prediction throughout (an executor's bias), and every third configuration `wobble`
    /// slower (the shape no probe knows).
    fn drifting_hours(hours: &[f64], elasticity: f64, wobble: f64) -> (Profile, Vec<Vec<Row>>) {
        let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("profiles");
        let profile = Profile::load(&dir.join("pocl-1core.profile")).expect("shipped profile");
        let rows = crate::dataset::read(&dir.join("pocl-1core.fresh2.csv.gz")).expect("data");
        let predicted = evaluate(&profile, &rows).predicted;
        let sets = hours
            .iter()
            .map(|&level| {
                let mut k = 0;
                rows.iter()
                    .zip(&predicted)
                    .enumerate()
                    .filter_map(|(i, (r, p))| {
                        if i > 0 && rows[i - 1].config != r.config {
                            k += 1;
                        }
                        let drift: f64 = [0.92, 0.96, 1.0, 1.04, 1.08][i % 5];
                        let base = if is_cpu(&r.executor) { 0.18 } else { 0.9 };
                        let bias = if r.executor == "conv_generic" {
                            1.2
                        } else {
                            1.0
                        };
                        let shape = if k % 3 == 0 { wobble } else { 1.0 };
                        Some(Row {
                            ms: (*p)? * level * bias * shape * drift.powf(elasticity),
                            probe_ms: base * level * drift,
                            ..r.clone()
                        })
                    })
                    .collect()
            })
            .collect();
        (profile, sets)
    }

    #[test]
    fn a_points_own_probe_moves_it_by_the_within_dataset_elasticity() {
        let (profile, sets) = drifting_hours(&[0.9, 1.0, 1.15], 0.6, 1.05);
        let views: Vec<&[Row]> = sets.iter().map(Vec::as_slice).collect();
        let [gpu, cpu] = point_elasticity(&profile, &views);
        for side in [gpu, cpu] {
            let s = side.expect("a fit per side");
            // The hours' levels and conv_generic's bias are taken out before the fit.
            assert!((s.elasticity - 0.6).abs() < 0.02, "{s:?}");
            assert_eq!(s.datasets, 3);
            assert!(s.points >= MIN_POINT_FIT && s.se < 0.05, "{s:?}");
        }

        // Brought to its median probe, a dataset keeps its hour and its shape, not the drift.
        let mut rows = sets[2].clone();
        let before = rows.clone();
        let (moved, typical) = at_median_probe(&mut rows, [Some(0.6), Some(0.6)]);
        assert_eq!(moved, rows.len());
        assert!(typical > 1.0 && typical < 5.0, "{typical}");
        let predicted = evaluate(&profile, &rows).predicted;
        for (r, p) in rows.iter().zip(predicted) {
            let ratio = r.ms / p.expect("a prediction");
            let bias = if r.executor == "conv_generic" {
                1.2
            } else {
                1.0
            };
            let left = ratio / (1.15 * bias);
            assert!(
                (left - 1.0).abs() < 1e-6 || (left - 1.05).abs() < 1e-6,
                "{}: {ratio}",
                r.config
            );
        }
        // A side without an elasticity stays as measured.
        let mut gpu_only = before.clone();
        let (moved, _) = at_median_probe(&mut gpu_only, [Some(0.6), None]);
        let gpu_rows = before.iter().filter(|r| !is_cpu(&r.executor)).count();
        assert_eq!(moved, gpu_rows);
        let changed = |cpu: bool| {
            gpu_only
                .iter()
                .zip(&before)
                .filter(|(a, b)| is_cpu(&a.executor) == cpu && a.ms != b.ms)
                .count()
        };
        assert_eq!(changed(true), 0);
        // (Those at the median probe itself keep their latency.)
        assert!(changed(false) > gpu_rows / 2, "{}", changed(false));
    }

    #[test]
    fn no_point_elasticity_where_the_probe_does_not_track_the_points() {
        // Latencies that ignore their probes: no fit on either side.
        let (profile, sets) = drifting_hours(&[0.9, 1.0, 1.15], 0.0, 1.05);
        let views: Vec<&[Row]> = sets.iter().map(Vec::as_slice).collect();
        assert_eq!(point_elasticity(&profile, &views), [None, None]);
        // Too few points.
        let (profile, sets) = drifting_hours(&[1.0], 0.6, 1.0);
        let few: Vec<&[Row]> = vec![&sets[0][..MIN_POINT_FIT / 4]];
        assert_eq!(point_elasticity(&profile, &few), [None, None]);
        // Rows without a probe do not move, nor count.
        let mut none: Vec<Row> = sets[0]
            .iter()
            .map(|r| Row {
                probe_ms: 0.0,
                ..r.clone()
            })
            .collect();
        assert_eq!(at_median_probe(&mut none, [Some(0.6), Some(0.6)]), (0, 0.0));
        assert_eq!(point_elasticity(&profile, &[&none[..]]), [None, None]);
    }

    #[test]
    fn the_check_refuses_unusable_fields() {
        let s = fit_side(&hours()).expect("a model");
        for bad in [
            SideSpeed {
                elasticity: 2.0,
                ..s
            },
            SideSpeed {
                level: f64::NAN,
                ..s
            },
            SideSpeed { probe_ms: 0.0, ..s },
        ] {
            assert!(bad.check().is_err(), "{bad:?}");
        }
    }
}
