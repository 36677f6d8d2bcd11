//! Evaluation of a profile on a dataset: MAPE and the share within ±10% per executor.

use crate::bundle::{Accuracy, Profile};
use crate::dataset::Row;
use crate::features::row_features;
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

/// The result of [`evaluate`].
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluation {
    pub executors: BTreeMap<String, Accuracy>,
    /// Rows of executors the profile has no predictor for, by executor.
    pub unknown: BTreeMap<String, usize>,
}

/// Predicts every row with `profile` (features from the row, dispatch features as recorded at
/// measurement time) and scores the predictions per executor.
pub fn evaluate(profile: &Profile, rows: &[Row]) -> Evaluation {
    let mut pairs: BTreeMap<String, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    let mut unknown = BTreeMap::new();
    for r in rows {
        let Some(e) = profile.executors.get(&r.executor) else {
            *unknown.entry(r.executor.clone()).or_insert(0) += 1;
            continue;
        };
        let x = row_features(r, e.dispatch_features);
        let p = e.predict_ms(&x);
        let entry = pairs.entry(r.executor.clone()).or_default();
        entry.0.push(p);
        entry.1.push(r.ms);
    }
    Evaluation {
        executors: pairs
            .into_iter()
            .map(|(k, (p, m))| (k, accuracy(&p, &m)))
            .collect(),
        unknown,
    }
}

/// The measurement floor: the same points measured twice, `repeat` scored against `first` as
/// if it were a prediction (points matched by configuration, executor, threads and channel
/// range; unmatched points are ignored). No predictor can be expected to beat this MAPE on
/// `first`, since the measurement itself moves that much between runs.
pub fn repeatability(first: &[Row], repeat: &[Row]) -> BTreeMap<String, Accuracy> {
    type Key<'a> = (&'a str, &'a str, usize, usize, usize);
    let again: BTreeMap<Key<'_>, f64> = repeat
        .iter()
        .map(|r| {
            (
                (
                    r.config.as_str(),
                    r.executor.as_str(),
                    r.threads,
                    r.c0,
                    r.c1,
                ),
                r.ms,
            )
        })
        .collect();
    let mut pairs: BTreeMap<String, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    for r in first {
        let k = (
            r.config.as_str(),
            r.executor.as_str(),
            r.threads,
            r.c0,
            r.c1,
        );
        if let Some(&ms) = again.get(&k) {
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

/// `{"executors": {NAME: {"mape": …, "within10": …, "n": …}}}` (MAPE in percent).
pub fn to_json(e: &Evaluation) -> serde_json::Value {
    serde_json::json!({ "executors": accuracies_json(&e.executors) })
}

/// `{NAME: {"mape": …, "within10": …, "n": …}}`.
pub fn accuracies_json(accuracies: &BTreeMap<String, Accuracy>) -> serde_json::Value {
    let execs: serde_json::Map<String, serde_json::Value> = accuracies
        .iter()
        .map(|(k, a)| {
            (
                k.clone(),
                serde_json::json!({"mape": a.mape, "within10": a.within10, "n": a.n}),
            )
        })
        .collect();
    serde_json::Value::Object(execs)
}
