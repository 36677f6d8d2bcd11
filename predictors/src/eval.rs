//! Evaluation of a profile on a dataset: MAPE and the share within ±10% per executor.

use crate::bundle::{Accuracy, ProbeSpeed, Profile};
use crate::dataset::{PointKey, Row};
use crate::features::{is_cpu, row_features};
use std::collections::BTreeMap;

/// MAPE (percent) and the share within ±10% of predictions against measurements.
pub fn accuracy(predicted: &[f64], measured: &[f64]) -> Accuracy {
    let n = predicted.len().min(measured.len());
    if n == 0 {
        return Accuracy {
            mape: 0.0,
            within10: 0.0,
            n: 0,
        };
    }
    let mut sum = 0.0;
    let mut within = 0usize;
    for (p, m) in predicted.iter().zip(measured) {
        let e = (p - m).abs() / m.max(1e-9);
        sum += e;
        if e <= 0.10 {
            within += 1;
        }
    }
    Accuracy {
        mape: 100.0 * sum / n as f64,
        within10: within as f64 / n as f64,
        n,
    }
}

/// The MAPE (percent) every executor is to reach on a dataset measured after training (the
/// profiler issue's bar; the paper reports 2.4–11.5% on phones).
pub const TARGET_MAPE: f64 = 5.0;

/// The accuracy of every executor's points together: MAPE and the ±10% share weighted by the
/// executors' point counts (all zero for no points).
pub fn overall(accuracies: &BTreeMap<String, Accuracy>) -> Accuracy {
    let n: usize = accuracies.values().map(|a| a.n).sum();
    if n == 0 {
        return Accuracy {
            mape: 0.0,
            within10: 0.0,
            n: 0,
        };
    }
    let weighted = |of: fn(&Accuracy) -> f64| {
        accuracies.values().map(|a| of(a) * a.n as f64).sum::<f64>() / n as f64
    };
    Accuracy {
        mape: weighted(|a| a.mape),
        within10: weighted(|a| a.within10),
        n,
    }
}

/// How many of the executors in `accuracies` have a MAPE of at most `target` percent.
pub fn at_target(accuracies: &BTreeMap<String, Accuracy>, target: f64) -> usize {
    accuracies.values().filter(|a| a.mape <= target).count()
}

/// The result of [`evaluate`].
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluation {
    pub executors: BTreeMap<String, Accuracy>,
    /// Per executor, the median of measured / predicted, minus 1, in percent: how much slower
    /// (+) or faster (−) the dataset ran than predicted overall. An offset shared by most
    /// executors is the machine's own speed having moved between the two measurements (on a
    /// shared host, by a few percent between hours), which no profile measured earlier can know.
    pub offset: BTreeMap<String, f64>,
    /// The machine's speed against the profile's, in percent: the median of the executors'
    /// offsets ([`machine_offset`]). On a shared host the whole machine (CPU and GPU alike) runs
    /// a few percent faster or slower from one hour to the next.
    pub machine_offset: f64,
    /// Per executor, the accuracy of every prediction scaled by `1 + machine_offset / 100`:
    /// what is left when the dataset's one machine-wide speed factor is taken out (a diagnosis,
    /// fitted on the dataset itself; the plain [`Evaluation::executors`] is the accuracy).
    pub speed_adjusted: BTreeMap<String, Accuracy>,
    /// Rows of executors the profile has no predictor for, by executor.
    pub unknown: BTreeMap<String, usize>,
    /// The prediction (ms) of each row of the dataset, in its order (`None`: no predictor).
    pub predicted: Vec<Option<f64>>,
    /// The machine's speed while the dataset was measured (`None`: no row recorded it);
    /// against the profile's own ([`probe_change`]), how far the machine alone moved.
    pub probe: Option<ProbeSpeed>,
    /// [`probe_change`] of the profile's probe speed and [`Evaluation::probe`]: GPU, CPU side.
    pub probe_change: [Option<f64>; 2],
    /// Per executor whose side's probe both the profile and the dataset recorded, the
    /// accuracy of every prediction scaled by that side's probe change: the machine's speed
    /// taken out by the reference layer alone, not fitted on the dataset's latencies.
    pub probe_scaled: BTreeMap<String, Accuracy>,
    /// The factor of the profile's speed model ([`crate::speed`]) per side (GPU, CPU) at the
    /// dataset's reference-layer time: `None` where the profile has no model for the side or
    /// the dataset recorded no probe on it.
    pub speed_factor: [Option<f64>; 2],
    /// The factor of the profile's speed model per executor of the dataset at its side's
    /// reference-layer time ([`crate::speed::SpeedModel::factor_for`]: the executor's own
    /// model, else its side's); executors with neither are absent.
    pub executor_speed_factor: BTreeMap<String, f64>,
    /// Per executor with an [`Evaluation::executor_speed_factor`], the accuracy of its
    /// predictions scaled by it: the profile's predictions for the machine's speed of the hour
    /// as the reference layer read it (fitted on the profile's datasets, not on this one).
    pub speed_scaled: BTreeMap<String, Accuracy>,
    /// The same point by point: each prediction scaled by the executor's factor at the
    /// reference-layer time its own row recorded (its side's probe; the dataset's where the
    /// row has none), as `tandem compile --speed-probe` scales a plan by the probe read just
    /// before it. A dataset measured over half an hour in which the machine's speed moved is
    /// scored at each point's speed, not at the median's.
    pub point_speed_scaled: BTreeMap<String, Accuracy>,
}

/// How much slower (+) or faster (−) the quiet gate's reference layer ran for `dataset`
/// than for the profile's training data, in percent, per side (GPU, CPU); `None` for a side
/// either lacks. To set beside the machine offset, which the layers themselves show.
pub fn probe_change(
    profile: Option<&ProbeSpeed>,
    dataset: Option<&ProbeSpeed>,
) -> [Option<f64>; 2] {
    let change = |a: Option<f64>, b: Option<f64>| Some(100.0 * (b? / a? - 1.0));
    match (profile, dataset) {
        (Some(p), Some(d)) => [change(p.gpu_ms, d.gpu_ms), change(p.cpu_ms, d.cpu_ms)],
        _ => [None, None],
    }
}

/// The median of `measured[i] / predicted[i]`, minus 1, in percent (0 for no points).
pub fn median_offset(predicted: &[f64], measured: &[f64]) -> f64 {
    let mut ratios: Vec<f64> = predicted
        .iter()
        .zip(measured)
        .map(|(p, m)| m / p.max(1e-12))
        .collect();
    if ratios.is_empty() {
        return 0.0;
    }
    100.0 * (tandem_runtime::profile::median(&mut ratios) - 1.0)
}

/// The median of the executors' `offsets` (percent; 0 for none): the part of the offsets that
/// the executors share, the machine's own speed, robust to a few executors that are off on
/// their own.
pub fn machine_offset(offsets: &BTreeMap<String, f64>) -> f64 {
    let mut v: Vec<f64> = offsets.values().copied().collect();
    if v.is_empty() {
        return 0.0;
    }
    tandem_runtime::profile::median(&mut v)
}

/// Predicts every row with `profile` (features from the row, dispatch features as recorded at
/// measurement time) and scores the predictions per executor.
pub fn evaluate(profile: &Profile, rows: &[Row]) -> Evaluation {
    let mut pairs: BTreeMap<String, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    // Per executor, each point's own reference-layer time (0: not recorded).
    let mut point_probes: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut unknown = BTreeMap::new();
    let mut predicted = Vec::with_capacity(rows.len());
    for r in rows {
        let Some(e) = profile.executors.get(&r.executor) else {
            *unknown.entry(r.executor.clone()).or_insert(0) += 1;
            predicted.push(None);
            continue;
        };
        let x = row_features(r, e.dispatch_features);
        let p = e.predict_ms(&x[..e.features.len().min(x.len())]);
        predicted.push(Some(p));
        let entry = pairs.entry(r.executor.clone()).or_default();
        entry.0.push(p);
        entry.1.push(r.ms);
        point_probes
            .entry(r.executor.clone())
            .or_default()
            .push(r.probe_ms);
    }
    let offset: BTreeMap<String, f64> = pairs
        .iter()
        .map(|(k, (p, m))| (k.clone(), median_offset(p, m)))
        .collect();
    let machine = machine_offset(&offset);
    let factor = 1.0 + machine / 100.0;
    let probe = ProbeSpeed::of(rows);
    let change = probe_change(profile.provenance.probe.as_ref(), probe.as_ref());
    let [gpu_change, cpu_change] = change;
    let probe_scaled = pairs
        .iter()
        .filter_map(|(k, (p, m))| {
            let change = if is_cpu(k) { cpu_change } else { gpu_change }?;
            let scaled: Vec<f64> = p.iter().map(|p| p * (1.0 + change / 100.0)).collect();
            Some((k.clone(), accuracy(&scaled, m)))
        })
        .collect();
    let probe_ms = probe.unwrap_or_default();
    let speed_factor = [
        profile
            .speed
            .gpu
            .zip(probe_ms.gpu_ms)
            .map(|(s, p)| s.factor(p)),
        profile
            .speed
            .cpu
            .zip(probe_ms.cpu_ms)
            .map(|(s, p)| s.factor(p)),
    ];
    let executor_speed_factor: BTreeMap<String, f64> = pairs
        .keys()
        .filter_map(|k| {
            let f = profile
                .speed
                .factor_for(k, [probe_ms.gpu_ms, probe_ms.cpu_ms])?;
            Some((k.clone(), f))
        })
        .collect();
    let speed_scaled = pairs
        .iter()
        .filter_map(|(k, (p, m))| {
            let f = executor_speed_factor.get(k)?;
            let scaled: Vec<f64> = p.iter().map(|p| p * f).collect();
            Some((k.clone(), accuracy(&scaled, m)))
        })
        .collect();
    let point_speed_scaled = pairs
        .iter()
        .filter_map(|(k, (p, m))| {
            let cpu = is_cpu(k);
            let scaled: Option<Vec<f64>> = p
                .iter()
                .zip(&point_probes[k])
                .map(|(p, &own)| {
                    let mut at = [probe_ms.gpu_ms, probe_ms.cpu_ms];
                    if own > 0.0 {
                        at[usize::from(cpu)] = Some(own);
                    }
                    Some(p * profile.speed.factor_for(k, at)?)
                })
                .collect();
            Some((k.clone(), accuracy(&scaled?, m)))
        })
        .collect();
    Evaluation {
        executors: pairs
            .iter()
            .map(|(k, (p, m))| (k.clone(), accuracy(p, m)))
            .collect(),
        speed_adjusted: pairs
            .iter()
            .map(|(k, (p, m))| {
                let scaled: Vec<f64> = p.iter().map(|p| p * factor).collect();
                (k.clone(), accuracy(&scaled, m))
            })
            .collect(),
        offset,
        machine_offset: machine,
        unknown,
        predicted,
        probe,
        probe_change: change,
        probe_scaled,
        speed_factor,
        executor_speed_factor,
        speed_scaled,
        point_speed_scaled,
    }
}

/// The measurement floor: the same points measured twice, `repeat` scored against `first` as
/// if it were a prediction (points matched by configuration, executor, threads and channel
/// range; unmatched points are ignored). No predictor can be expected to beat this MAPE on
/// `first`, since the measurement itself moves that much between runs.
pub fn repeatability(first: &[Row], repeat: &[Row]) -> BTreeMap<String, Accuracy> {
    let again: BTreeMap<PointKey<'_>, f64> = repeat.iter().map(|r| (r.point_key(), r.ms)).collect();
    let mut pairs: BTreeMap<String, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    for r in first {
        if let Some(&ms) = again.get(&r.point_key()) {
            let entry = pairs.entry(r.executor.clone()).or_default();
            entry.0.push(ms);
            entry.1.push(r.ms);
        }
    }
    pairs
        .into_iter()
        .map(|(k, (p, m))| (k, accuracy(&p, &m)))
        .collect()
}

/// Several measurements of the same points pooled into one ([`pooled`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Pooled {
    /// The points of the first measurement that every other one has too, in its order, each
    /// with the geometric mean of its latencies and its repetitions summed.
    pub rows: Vec<Row>,
    /// Points of the first measurement left out because another measurement lacks them.
    pub dropped: usize,
}

/// Pools `first` with `others`, measurements of the same points taken at other times (e.g.
/// `tandem profile` run again with the same seed). On a shared machine a configuration's
/// points move together by several percent from one run to the next, so one measurement's
/// latency is itself off by that much; the geometric mean of `k` independent runs is off by
/// about `1/√k` of it. The geometric mean keeps the scale of a single run in log space (what
/// the predictors fit), unlike the least of them. Points are matched as in [`repeatability`];
/// a point some measurement lacks is dropped, so that every pooled point has all of them.
pub fn pooled(first: &[Row], others: &[Vec<Row>]) -> Pooled {
    let others: Vec<BTreeMap<PointKey<'_>, &Row>> = others
        .iter()
        .map(|rows| rows.iter().map(|r| (r.point_key(), r)).collect())
        .collect();
    let mut rows = Vec::with_capacity(first.len());
    let mut dropped = 0;
    for r in first {
        let key = r.point_key();
        let Some(again) = others
            .iter()
            .map(|o| o.get(&key).copied())
            .collect::<Option<Vec<&Row>>>()
        else {
            dropped += 1;
            continue;
        };
        let p = r.pooled_with(&again);
        rows.push(p);
    }
    Pooled { rows, dropped }
}

/// `{"executors": {NAME: {"mape": …, "within10": …, "n": …}}, "offset": {NAME: …},
/// "machine_offset": …, "speed_adjusted": {NAME: {"mape": …, …}}}` (MAPE and offsets in
/// percent).
pub fn to_json(e: &Evaluation) -> serde_json::Value {
    serde_json::json!({
        "executors": accuracies_json(&e.executors),
        "overall": accuracy_json(&overall(&e.executors)),
        "at_target": at_target_json(&e.executors),
        "offset": e.offset,
        "machine_offset": e.machine_offset,
        "speed_adjusted": accuracies_json(&e.speed_adjusted),
        "probe_scaled": accuracies_json(&e.probe_scaled),
        "speed_model": {
            "factor": {"gpu": e.speed_factor[0], "cpu": e.speed_factor[1]},
            "executor_factor": e.executor_speed_factor,
            "executors": accuracies_json(&e.speed_scaled),
            "per_point": {
                "executors": accuracies_json(&e.point_speed_scaled),
                "overall": accuracy_json(&overall(&e.point_speed_scaled)),
                "at_target": at_target_json(&e.point_speed_scaled),
            },
        },
    })
}

/// `{NAME: {"mape": …, "within10": …, "n": …}}`.
pub fn accuracies_json(accuracies: &BTreeMap<String, Accuracy>) -> serde_json::Value {
    let execs: serde_json::Map<String, serde_json::Value> = accuracies
        .iter()
        .map(|(k, a)| (k.clone(), accuracy_json(a)))
        .collect();
    serde_json::Value::Object(execs)
}

/// `{"mape": …, "within10": …, "n": …}`.
pub fn accuracy_json(a: &Accuracy) -> serde_json::Value {
    serde_json::json!({"mape": a.mape, "within10": a.within10, "n": a.n})
}

/// `{"target": TARGET_MAPE, "executors": k, "of": n}`: how many executors meet the target.
pub fn at_target_json(accuracies: &BTreeMap<String, Accuracy>) -> serde_json::Value {
    serde_json::json!({
        "target": TARGET_MAPE,
        "executors": at_target(accuracies, TARGET_MAPE),
        "of": accuracies.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_offset_is_the_median_ratio_in_percent() {
        // Ratios 1.1, 1.1, 1.0: median 1.1.
        let off = median_offset(&[1.0, 2.0, 3.0], &[1.1, 2.2, 3.0]);
        assert!((off - 10.0).abs() < 1e-9, "{off}");
        // Even count: the mean of the middle two (0.9 and 1.0).
        let off = median_offset(&[1.0, 1.0, 1.0, 1.0], &[0.5, 0.9, 1.0, 2.0]);
        assert!((off + 5.0).abs() < 1e-9, "{off}");
        assert_eq!(median_offset(&[], &[]), 0.0);
    }

    #[test]
    fn the_machine_offset_is_the_median_of_the_executors_offsets() {
        let offsets: BTreeMap<String, f64> = [("a", 4.0), ("b", 5.0), ("c", 6.0), ("d", -20.0)]
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect();
        // One executor far off on its own does not move it: median of -20, 4, 5, 6 is 4.5.
        assert!((machine_offset(&offsets) - 4.5).abs() < 1e-12);
        assert_eq!(machine_offset(&BTreeMap::new()), 0.0);
    }

    #[test]
    fn the_overall_accuracy_weights_executors_by_their_points() {
        let acc = |mape: f64, within10: f64, n: usize| Accuracy { mape, within10, n };
        let execs: BTreeMap<String, Accuracy> = [
            ("a".to_string(), acc(2.0, 1.0, 30)),
            ("b".to_string(), acc(12.0, 0.5, 10)),
            ("c".to_string(), acc(5.0, 0.8, 0)),
        ]
        .into_iter()
        .collect();
        let all = overall(&execs);
        // (2 · 30 + 12 · 10) / 40 = 4.5; (1 · 30 + 0.5 · 10) / 40 = 0.875.
        assert_eq!(all.n, 40);
        assert!((all.mape - 4.5).abs() < 1e-12, "{all:?}");
        assert!((all.within10 - 0.875).abs() < 1e-12, "{all:?}");
        // At the target counts: 2% and exactly 5% do, 12% does not.
        assert_eq!(at_target(&execs, TARGET_MAPE), 2);
        assert_eq!(at_target(&execs, 1.0), 0);
        assert_eq!(overall(&BTreeMap::new()).n, 0);
        let j = at_target_json(&execs);
        assert_eq!(
            (j["executors"].as_u64(), j["of"].as_u64()),
            (Some(2), Some(3))
        );
    }

    fn point(config: &str, c1: usize, ms: f64) -> Row {
        crate::dataset::test_point(config, c1, ms, 0.0)
    }

    #[test]
    fn pooled_points_take_the_geometric_mean_of_every_measurement() {
        let first = vec![point("a", 8, 1.0), point("a", 16, 2.0), point("b", 8, 4.0)];
        let second = vec![point("b", 8, 1.0), point("a", 8, 4.0), point("a", 16, 2.0)];
        // The third run lacks point ("a", 16): it is dropped.
        let third = vec![point("a", 8, 2.0), point("b", 8, 2.0), point("c", 8, 9.0)];
        let p = pooled(&first, &[second, third]);
        assert_eq!(p.dropped, 1);
        let got: Vec<(&str, usize, f64, usize)> = p
            .rows
            .iter()
            .map(|r| (r.config.as_str(), r.c1, r.ms, r.reps))
            .collect();
        assert_eq!(got.len(), 2);
        // (1 · 4 · 2)^(1/3) = 2 and (4 · 1 · 2)^(1/3) = 2, in the first measurement's order.
        assert_eq!((got[0].0, got[0].1, got[0].3), ("a", 8, 9));
        assert!((got[0].2 - 2.0).abs() < 1e-12, "{got:?}");
        assert_eq!((got[1].0, got[1].1), ("b", 8));
        assert!((got[1].2 - 2.0).abs() < 1e-12, "{got:?}");
        // Pooling with nothing else is the first measurement, exactly.
        let odd = vec![point("a", 8, 0.123_456_789)];
        assert_eq!(pooled(&odd, &[]).rows, odd);
    }

    #[test]
    fn the_probe_change_is_per_side_and_needs_both_speeds() {
        let then = ProbeSpeed {
            gpu_ms: Some(1.0),
            gpu_rows: 10,
            cpu_ms: Some(0.2),
            cpu_rows: 10,
        };
        let now = ProbeSpeed {
            gpu_ms: Some(1.1),
            cpu_ms: None,
            ..then
        };
        let [gpu, cpu] = probe_change(Some(&then), Some(&now));
        assert!((gpu.expect("both recorded") - 10.0).abs() < 1e-9);
        assert_eq!(cpu, None, "the dataset lacks the CPU side");
        assert_eq!(probe_change(None, Some(&now)), [None, None]);
        assert_eq!(probe_change(Some(&then), None), [None, None]);
    }
}
