//! Calibration of a profile to the device's speed today: per executor, one factor from a short
//! recent measurement.
//!
//! A shared machine's speed moves by a few percent between hours and days (other tenants, the
//! host's own state), and a profile trained on earlier measurements carries that day's speed.
//! [`calibrate`] predicts every point of a recent dataset and, per executor, takes the log of
//! measured / predicted, averaged per configuration (a configuration's points share its model
//! error, so configurations, not points, are the independent samples). The factor is the
//! exponential of the median over configurations. It is applied only when it is significant:
//! at least `min_configs` configurations, and the factor at least two standard errors of that
//! median away from 1. Otherwise the factor would add its own noise instead of removing the
//! drift. The forests are not touched.

use crate::bundle::Profile;
use crate::dataset::Row;
use crate::eval::evaluate;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Configurations an executor needs in the calibration dataset for its factor to be applied.
pub const DEFAULT_MIN_CONFIGS: usize = 20;

/// One calibration of a profile, recorded in its provenance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// The calibration dataset's file name (several joined by ` + `, pooled).
    pub dataset: String,
    /// UTC date of the calibration (`YYYY-MM-DD`).
    pub date: String,
    pub min_configs: usize,
    /// Per executor of the profile that has points in the dataset.
    pub executors: BTreeMap<String, ExecutorCalibration>,
}

/// What the calibration found for one executor.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ExecutorCalibration {
    /// Points and configurations of the executor in the calibration dataset.
    pub points: usize,
    pub configs: usize,
    /// Measured / predicted (before this calibration): the exponential of the median over
    /// configurations of their mean log ratio.
    pub factor: f64,
    /// Standard error of that median, in log units (about a relative error); none for a single
    /// configuration.
    pub standard_error: Option<f64>,
    /// Whether the factor was applied: enough configurations, and significant.
    pub applied: bool,
}

/// Why a dataset cannot calibrate a profile.
#[derive(Debug, thiserror::Error)]
pub enum CalibrationError {
    #[error("the dataset has no rows")]
    Empty,
    #[error(
        "row {row} was measured on '{device}' with '{cpu}'; the profile is for '{profile_device}' with '{profile_cpu}'"
    )]
    OtherDevice {
        row: usize,
        device: String,
        cpu: String,
        profile_device: String,
        profile_cpu: String,
    },
    #[error("row {row}: latency {ms} ms is not a positive finite number")]
    BadLatency { row: usize, ms: f64 },
    #[error("none of the dataset's executors is in the profile (it has {0})")]
    NoExecutor(String),
}

/// Whether `rows` can calibrate `profile`: some rows, every one measured on the profile's device
/// and CPU, with a positive finite latency. Errors number the rows from 1. [`calibrate`] checks
/// this itself; a caller pooling several files checks each first, to name the file.
pub fn check_rows(profile: &Profile, rows: &[Row]) -> Result<(), CalibrationError> {
    if rows.is_empty() {
        return Err(CalibrationError::Empty);
    }
    let (device, cpu) = (profile.device().label(), &profile.provenance.cpu);
    for (i, r) in rows.iter().enumerate() {
        if r.device != device || &r.cpu != cpu {
            return Err(CalibrationError::OtherDevice {
                row: i + 1,
                device: r.device.clone(),
                cpu: r.cpu.clone(),
                profile_device: device,
                profile_cpu: cpu.clone(),
            });
        }
        if !(r.ms.is_finite() && r.ms > 0.0) {
            return Err(CalibrationError::BadLatency {
                row: i + 1,
                ms: r.ms,
            });
        }
    }
    Ok(())
}

/// The profile with each executor's predictions scaled by its calibration factor from `rows`
/// (a dataset measured recently on the profile's device and CPU) where that factor is
/// significant, and the calibration, which is also appended to the profile's provenance.
/// Calibrating twice composes: the second factor is measured against the first calibration's
/// predictions. The calibrated profile has no speed model ([`crate::speed`]): the profile's
/// was fitted against the predictions before the factors, and scaling by both would count the
/// hour's speed twice (refit it on the calibrated profile, `tandem calibrate --speed-from`).
pub fn calibrate(
    profile: &Profile,
    rows: &[Row],
    dataset_name: &str,
    date: &str,
    min_configs: usize,
) -> Result<(Profile, Calibration), CalibrationError> {
    check_rows(profile, rows)?;
    let predicted = evaluate(profile, rows).predicted;
    // Per executor, per configuration: the log ratios of its points.
    let mut logs: BTreeMap<&str, BTreeMap<&str, Vec<f64>>> = BTreeMap::new();
    for (r, p) in rows.iter().zip(&predicted) {
        if let Some(p) = p {
            logs.entry(r.executor.as_str())
                .or_default()
                .entry(r.config.as_str())
                .or_default()
                .push((r.ms / p).ln());
        }
    }
    if logs.is_empty() {
        let names: Vec<&str> = profile.executors.keys().map(String::as_str).collect();
        return Err(CalibrationError::NoExecutor(names.join(", ")));
    }
    let mut calibrated = profile.clone();
    let mut executors = BTreeMap::new();
    for (name, by_config) in logs {
        let points = by_config.values().map(Vec::len).sum();
        let means: Vec<f64> = by_config
            .values()
            .map(|l| l.iter().sum::<f64>() / l.len() as f64)
            .collect();
        let (log_factor, standard_error) = median_with_error(&means);
        let applied = means.len() >= min_configs
            && standard_error.is_some_and(|se| log_factor.abs() >= 2.0 * se);
        let factor = log_factor.exp();
        if applied {
            if let Some(e) = calibrated.executors.get_mut(name) {
                e.scale *= factor;
            }
        }
        executors.insert(
            name.to_string(),
            ExecutorCalibration {
                points,
                configs: means.len(),
                factor,
                standard_error,
                applied,
            },
        );
    }
    let calibration = Calibration {
        dataset: dataset_name.to_string(),
        date: date.to_string(),
        min_configs,
        executors,
    };
    calibrated.speed = Default::default();
    calibrated.provenance.calibrations.push(calibration.clone());
    Ok((calibrated, calibration))
}

/// The median of `values` and its standard error, `1.2533 · sd / √n` (the median of a normal
/// sample); no error for fewer than two values.
pub fn median_with_error(values: &[f64]) -> (f64, Option<f64>) {
    let n = values.len();
    let median = tandem_runtime::profile::median(&mut values.to_vec());
    if n < 2 {
        return (median, None);
    }
    let mean = values.iter().sum::<f64>() / n as f64;
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    (median, Some(1.2533 * var.sqrt() / (n as f64).sqrt()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset;
    use std::path::PathBuf;

    fn shipped() -> (Profile, Vec<Row>) {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("profiles");
        let profile = Profile::load(&dir.join("pocl-1core.profile")).expect("shipped profile");
        let rows = dataset::read(&dir.join("pocl-1core.fresh2.csv.gz")).expect("shipped data");
        (profile, rows)
    }

    /// `rows` re-measured as `offset` times the profile's prediction, times a wobble of
    /// configuration `k` (a dataset's rows come configuration by configuration): `1/w`, 1 and
    /// `w` in turn, so that each executor's median configuration sits at the offset.
    fn scaled(profile: &Profile, rows: &[Row], offset: f64, w: f64) -> Vec<Row> {
        let predicted = evaluate(profile, rows).predicted;
        let mut k = 0;
        rows.iter()
            .enumerate()
            .zip(predicted)
            .map(|((i, r), p)| {
                if i > 0 && rows[i - 1].config != r.config {
                    k += 1;
                }
                let wobble = [1.0 / w, 1.0, w][k % 3];
                Row {
                    ms: p.expect("shipped executors") * offset * wobble,
                    ..r.clone()
                }
            })
            .collect()
    }

    #[test]
    fn a_uniformly_slower_device_is_calibrated_to_its_speed() {
        let (profile, rows) = shipped();
        // 5% slower, with a ±2% wobble per configuration.
        let slower = scaled(&profile, &rows, 1.05, 1.02);
        let (calibrated, c) = calibrate(
            &profile,
            &slower,
            "slower.csv",
            "2026-11-30",
            DEFAULT_MIN_CONFIGS,
        )
        .expect("calibrates");
        for (name, e) in &c.executors {
            let expected_applied = e.configs >= DEFAULT_MIN_CONFIGS;
            assert_eq!(e.applied, expected_applied, "{name}: {e:?}");
            let scale = calibrated.executors[name].scale;
            if e.applied {
                assert!((e.factor / 1.05 - 1.0).abs() < 1e-9, "{name}: {e:?}");
                assert_eq!(scale, e.factor);
            } else {
                assert_eq!(scale, 1.0, "{name}");
            }
        }
        assert!(c.executors.values().filter(|e| e.applied).count() >= 8);
        assert!(
            c.executors.values().any(|e| !e.applied),
            "rare kernels stay"
        );
        assert_eq!(calibrated.provenance.calibrations, vec![c.clone()]);

        // The calibrated profile survives a save and load, and calibrating again composes:
        // the same data now needs no further factor.
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("cal.profile");
        calibrated.save(&path).expect("save");
        let loaded = Profile::load(&path).expect("load");
        assert_eq!(loaded, calibrated);
        let (twice, c2) =
            calibrate(&loaded, &slower, "slower.csv", "2026-11-30", 20).expect("calibrates again");
        for (name, e) in &c2.executors {
            if c.executors[name].applied {
                assert!((e.factor - 1.0).abs() < 1e-9, "{name}: {e:?}");
                assert!(!e.applied, "{name}");
            }
            assert_eq!(twice.executors[name].scale, loaded.executors[name].scale);
        }
        assert_eq!(twice.provenance.calibrations.len(), 2);
    }

    #[test]
    fn a_factor_within_its_noise_is_not_applied() {
        let (profile, rows) = shipped();
        // 0.5% slower, with a ±6% wobble per configuration: not significant.
        let noisy = scaled(&profile, &rows, 1.005, 1.06);
        let (calibrated, c) =
            calibrate(&profile, &noisy, "noisy.csv", "2026-11-30", 20).expect("calibrates");
        assert!(c.executors.values().all(|e| !e.applied), "{c:?}");
        assert_eq!(calibrated.executors, profile.executors);
    }

    #[test]
    fn another_device_or_a_bad_latency_is_refused_naming_the_row() {
        let (profile, rows) = shipped();
        let mut other = rows[..50].to_vec();
        other[7].device = "another GPU".into();
        let e = calibrate(&profile, &other, "x.csv", "2026-11-30", 20).expect_err("another device");
        assert!(e.to_string().contains("row 8"), "{e}");
        assert!(e.to_string().contains("another GPU"), "{e}");
        let mut bad = rows[..50].to_vec();
        bad[3].ms = 0.0;
        let e = calibrate(&profile, &bad, "x.csv", "2026-11-30", 20).expect_err("a zero latency");
        assert!(e.to_string().contains("row 4"), "{e}");
        assert!(matches!(
            calibrate(&profile, &[], "x.csv", "2026-11-30", 20),
            Err(CalibrationError::Empty)
        ));
    }

    #[test]
    fn a_profile_with_a_bad_scale_is_refused() {
        let (profile, _) = shipped();
        let mut json = serde_json::to_value(&profile).expect("json");
        json["executors"]["fully_connected"]["scale"] = serde_json::json!(-1.0);
        let e = Profile::parse(&json.to_string()).expect_err("a negative scale");
        assert!(e.contains("executors.fully_connected.scale"), "{e}");
    }

    #[test]
    fn median_and_its_standard_error() {
        assert_eq!(median_with_error(&[]), (0.0, None));
        assert_eq!(median_with_error(&[2.0]), (2.0, None));
        let (m, se) = median_with_error(&[1.0, 3.0, 2.0, 4.0]);
        assert_eq!(m, 2.5);
        // sd of 1..4 is sqrt(5/3); 1.2533 * sd / 2.
        let expected = 1.2533 * (5.0f64 / 3.0).sqrt() / 2.0;
        assert!((se.expect("two or more") - expected).abs() < 1e-12);
    }
}
