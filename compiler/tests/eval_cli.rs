//! `tandem eval`: the table, the JSON and the per-point CSV agree with the library's own
//! evaluation of the shipped profile on a shipped fresh dataset; a missing dataset is a clear
//! error. `tandem calibrate`: the calibrated profile has no offset left on its calibration data
//! where it applied a factor, and is unchanged elsewhere.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use tandem_predictors::dataset;
use tandem_predictors::eval::evaluate;
use tandem_predictors::Profile;

fn tandem() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tandem"))
}

/// `tandem ARGS…`, run to completion.
fn tandem_with<S: AsRef<OsStr>>(args: &[S]) -> Output {
    tandem().args(args).output().expect("runs")
}

/// `tandem ARGS…`, which must succeed (its stderr is shown if not).
fn tandem_ok<S: AsRef<OsStr>>(args: &[S]) -> Output {
    let out = tandem_with(args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn profiles() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../predictors/profiles")
}

#[test]
fn eval_json_and_points_match_the_library_evaluation() {
    let profile_path = profiles().join("pocl-1core.profile");
    let data_path = profiles().join("pocl-1core.fresh2.csv.gz");
    let dir = tempfile::tempdir().expect("tempdir");
    let points = dir.path().join("points.csv");
    let out = tandem_ok(&[
        OsStr::new("eval"),
        profile_path.as_os_str(),
        data_path.as_os_str(),
        OsStr::new("--json"),
        OsStr::new("--points"),
        points.as_os_str(),
    ]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");

    let profile = Profile::load(&profile_path).expect("shipped profile");
    let rows = dataset::read(&data_path).expect("shipped dataset");
    let expected = evaluate(&profile, &rows);
    assert!(expected.executors.len() >= 10);
    for (name, a) in &expected.executors {
        let j = &json["executors"][name];
        assert_eq!(j["n"].as_u64(), Some(a.n as u64), "{name}");
        assert!(
            (j["mape"].as_f64().expect("mape") - a.mape).abs() < 1e-9,
            "{name}"
        );
        assert!((j["within10"].as_f64().expect("within10") - a.within10).abs() < 1e-12);
        let offset = json["offset"][name].as_f64().expect("offset");
        assert!((offset - expected.offset[name]).abs() < 1e-9, "{name}");
        let adjusted = json["speed_adjusted"][name]["mape"]
            .as_f64()
            .expect("speed-adjusted mape");
        assert!(
            (adjusted - expected.speed_adjusted[name].mape).abs() < 1e-9,
            "{name}"
        );
    }
    // The machine offset is the median of the executors' offsets; scaling every prediction by
    // it leaves the median executor with (close to) no offset of its own.
    let machine = json["machine_offset"].as_f64().expect("machine_offset");
    assert!((machine - expected.machine_offset).abs() < 1e-9);
    let mut offsets: Vec<f64> = expected.offset.values().copied().collect();
    offsets.sort_by(f64::total_cmp);
    assert!(offsets[0] <= machine && machine <= offsets[offsets.len() - 1]);
    let factor = 1.0 + machine / 100.0;
    let profile_scaled: Vec<f64> = rows
        .iter()
        .zip(&expected.predicted)
        .filter(|(r, p)| p.is_some() && r.executor == "cpu_conv_t1")
        .map(|(r, p)| (p.expect("predicted") * factor - r.ms).abs() / r.ms)
        .collect();
    let recomputed = 100.0 * profile_scaled.iter().sum::<f64>() / profile_scaled.len() as f64;
    assert!((recomputed - expected.speed_adjusted["cpu_conv_t1"].mape).abs() < 1e-9);

    // One line per predicted row, in the dataset's order, with its prediction and error.
    let text = std::fs::read_to_string(&points).expect("points written");
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("config,executor,threads,c0,c1,ms,predicted_ms,error_percent")
    );
    let predicted: Vec<(&dataset::Row, f64)> = rows
        .iter()
        .zip(&expected.predicted)
        .filter_map(|(r, p)| p.map(|p| (r, p)))
        .collect();
    let lines: Vec<&str> = lines.collect();
    assert_eq!(lines.len(), predicted.len());
    let mut abs_error_sum = 0.0;
    for (line, (r, p)) in lines.iter().zip(&predicted) {
        let f: Vec<&str> = line.split(',').collect();
        assert_eq!(f.len(), 8, "{line}");
        assert_eq!((f[0], f[1]), (r.config.as_str(), r.executor.as_str()));
        assert_eq!(f[3].parse::<usize>().ok(), Some(r.c0));
        assert_eq!(f[4].parse::<usize>().ok(), Some(r.c1));
        let (ms, pred, err): (f64, f64, f64) = (
            f[5].parse().expect("ms"),
            f[6].parse().expect("predicted"),
            f[7].parse().expect("error"),
        );
        assert_eq!(ms, r.ms);
        assert!((pred - p).abs() <= 1e-12 * p.abs(), "{line}");
        assert!((err - 100.0 * (pred / ms - 1.0)).abs() < 1e-3, "{line}");
        abs_error_sum += err.abs();
    }
    // The points' errors average to the overall MAPE (weighted by points per executor).
    let n: usize = expected.executors.values().map(|a| a.n).sum();
    let mape: f64 = expected
        .executors
        .values()
        .map(|a| a.mape * a.n as f64)
        .sum::<f64>()
        / n as f64;
    assert!((abs_error_sum / n as f64 - mape).abs() < 1e-2);
    // So does the JSON's overall accuracy, and it counts the executors at the 5% target.
    assert_eq!(json["overall"]["n"].as_u64(), Some(n as u64));
    assert!((json["overall"]["mape"].as_f64().expect("overall mape") - mape).abs() < 1e-9);
    let at_target = expected
        .executors
        .values()
        .filter(|a| a.mape <= 5.0)
        .count();
    assert_eq!(json["at_target"]["target"].as_f64(), Some(5.0));
    assert_eq!(
        json["at_target"]["executors"].as_u64(),
        Some(at_target as u64)
    );
    assert_eq!(
        json["at_target"]["of"].as_u64(),
        Some(expected.executors.len() as u64)
    );

    // The table ends in the same overall row and names the executors over the target.
    let out = tandem_ok(&[
        OsStr::new("eval"),
        profile_path.as_os_str(),
        data_path.as_os_str(),
    ]);
    let table = String::from_utf8_lossy(&out.stdout);
    let row = format!("| all (points-weighted) | {n} | {mape:.2}% |");
    assert!(table.contains(&row), "{row} not in\n{table}");
    let line = format!(
        "{at_target} of {} executors at or under the 5% MAPE target",
        expected.executors.len()
    );
    assert!(table.contains(&line), "{line} not in\n{table}");
    let worst = expected
        .executors
        .iter()
        .max_by(|a, b| a.1.mape.total_cmp(&b.1.mape))
        .expect("executors");
    // This profile misses the target on a few executors of this dataset (4.9% overall).
    assert!(worst.1.mape > 5.0, "{worst:?}");
    let over = table
        .lines()
        .find(|l| l.contains("over it:"))
        .expect("the executors over the target are named");
    assert!(over.contains(worst.0.as_str()), "{over}");
}

#[test]
fn eval_warns_of_a_dataset_from_another_device() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("other.csv");
    let mut rows = dataset::read(&profiles().join("pocl-1core.fresh2.csv.gz")).expect("data");
    rows.truncate(40);
    for r in &mut rows {
        r.device = "Some Vendor Some GPU (driver 1.0)".into();
    }
    dataset::write(&data, &rows).expect("write");
    let profile = profiles().join("pocl-1core.profile");
    let out = tandem_ok(&[OsStr::new("eval"), profile.as_os_str(), data.as_os_str()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("warning") && stderr.contains("Some Vendor Some GPU"),
        "{stderr}"
    );
    // The shipped data of this device gives no such warning.
    let shipped = profiles().join("pocl-1core.fresh2.csv.gz");
    let quiet = tandem_ok(&[OsStr::new("eval"), profile.as_os_str(), shipped.as_os_str()]);
    assert!(!String::from_utf8_lossy(&quiet.stderr).contains("warning"));
}

#[test]
fn eval_of_a_missing_dataset_names_it() {
    let profile = profiles().join("pocl-1core.profile");
    let out = tandem_with(&[
        OsStr::new("eval"),
        profile.as_os_str(),
        OsStr::new("no/such/data.csv"),
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no/such/data.csv"), "{stderr}");
}

#[test]
fn a_pooled_eval_scores_against_the_geometric_mean_of_the_measurements() {
    let profile_path = profiles().join("pocl-1core-xeon2.profile");
    let first = profiles().join("pocl-1core-xeon2.fresh1.csv.gz");
    let again = profiles().join("pocl-1core-xeon2.fresh1-again.csv.gz");
    let out = tandem_ok(&[
        OsStr::new("eval"),
        profile_path.as_os_str(),
        first.as_os_str(),
        OsStr::new("--pool"),
        again.as_os_str(),
        OsStr::new("--json"),
    ]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("geometric mean of 2 measurements"),
        "{stderr}"
    );
    // These data are older than the reference layer's record, the profile's data are not:
    // nothing to scale by.
    assert!(json["probe"]["dataset"].is_null(), "{}", json["probe"]);
    assert!(json["probe"]["profile"]["gpu_ms"]
        .as_f64()
        .is_some_and(|ms| ms > 0.0));
    assert!(json["probe_scaled"]
        .as_object()
        .is_some_and(|o| o.is_empty()));
    // A fresh set that recorded it: each side's change, and every executor scaled by it.
    let recorded = profiles().join("pocl-1core-xeon2.fresh4.csv.gz");
    let j = eval_json(&profile_path, &recorded);
    for side in ["gpu", "cpu"] {
        let change = j["probe"]["change_percent"][side]
            .as_f64()
            .expect("a change");
        assert!(change.abs() < 50.0, "{side}: {change}");
    }
    let scaled = j["probe_scaled"]
        .as_object()
        .expect("probe-scaled accuracies");
    assert_eq!(
        scaled.len(),
        j["executors"].as_object().expect("executors").len()
    );

    // The library's evaluation of the points both runs have, each at the geometric mean.
    let a = dataset::read(&first).expect("shipped dataset");
    let b = dataset::read(&again).expect("shipped dataset");
    let pool = tandem_predictors::eval::pooled(&a, std::slice::from_ref(&b));
    assert!(
        pool.dropped > 0 && pool.rows.len() > 4000,
        "{}",
        pool.rows.len()
    );
    let expected = evaluate(&Profile::load(&profile_path).expect("profile"), &pool.rows);
    for (name, acc) in &expected.executors {
        let j = &json["executors"][name];
        assert_eq!(j["n"].as_u64(), Some(acc.n as u64), "{name}");
        assert!((j["mape"].as_f64().expect("mape") - acc.mape).abs() < 1e-9);
    }
    // Pooling with a run that shares no point with the dataset, or with a run of another
    // device, is an error naming what is wrong.
    let dir = tempfile::tempdir().expect("tempdir");
    let other = dir.path().join("other.csv");
    let pool_with = |rows: &[dataset::Row]| {
        dataset::write(&other, rows).expect("write");
        let out = tandem_with(&[
            OsStr::new("eval"),
            profile_path.as_os_str(),
            first.as_os_str(),
            OsStr::new("--pool"),
            other.as_os_str(),
        ]);
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let mut disjoint = b[..10].to_vec();
    for r in &mut disjoint {
        r.config = format!("{}-other", r.config);
    }
    let stderr = pool_with(&disjoint);
    assert!(
        stderr.contains("fresh1.csv.gz") && stderr.contains("--pool"),
        "{stderr}"
    );
    let mut elsewhere = b[..10].to_vec();
    for r in &mut elsewhere {
        r.device = "Some Vendor Some GPU (driver 1.0)".into();
    }
    let stderr = pool_with(&elsewhere);
    assert!(
        stderr.contains("other.csv") && stderr.contains("Some Vendor Some GPU"),
        "{stderr}"
    );
}

/// A dataset whose points were measured in several passes (`tandem profile --passes`, here
/// two runs written into one file) is scored by its pooled points: one per point, at the
/// geometric mean of its passes, as the library pools them.
#[test]
fn a_dataset_measured_in_passes_is_scored_by_its_pooled_points() {
    let profile_path = profiles().join("pocl-1core-xeon2.profile");
    let mut rows = dataset::read(&profiles().join("pocl-1core-xeon2.fresh1.csv.gz")).expect("data");
    let first_pass = rows.len();
    rows.extend(
        dataset::read(&profiles().join("pocl-1core-xeon2.fresh1-again.csv.gz")).expect("data"),
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let both = dir.path().join("both.csv");
    dataset::write(&both, &rows).expect("write");
    let stored = rows.len();
    let pooled = dataset::pool_repeats(rows);
    assert!(pooled.len() > first_pass / 2 && pooled.len() < stored);
    assert_eq!(dataset::read(&both).expect("read"), pooled);
    let out = tandem_ok(&[
        OsStr::new("eval"),
        profile_path.as_os_str(),
        both.as_os_str(),
        OsStr::new("--json"),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("{} points from {stored} rows", pooled.len())),
        "{stderr}"
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let expected = evaluate(&Profile::load(&profile_path).expect("profile"), &pooled);
    for (name, acc) in &expected.executors {
        let j = &json["executors"][name];
        assert_eq!(j["n"].as_u64(), Some(acc.n as u64), "{name}");
        assert!((j["mape"].as_f64().expect("mape") - acc.mape).abs() < 1e-9);
    }
}

/// `--min-mb` / `--max-mb` score exactly the points of layers within those working-set bounds,
/// as the library scores them; bounds no layer can meet, or that leave no point, are errors.
#[test]
fn eval_scores_only_the_points_within_the_working_set_bounds() {
    use tandem_predictors::measure::SizeBounds;
    let profile_path = profiles().join("pocl-1core-epyc-zen4.profile");
    let data_path = profiles().join("pocl-1core-epyc-zen4.fresh12.csv.gz");
    let profile = Profile::load(&profile_path).expect("profile");
    let rows = dataset::with_latency(
        dataset::read(&data_path).expect("dataset"),
        profile.provenance.latency,
        &data_path,
    )
    .expect("fastest repetitions");
    // fresh12 was measured before the CPU depthwise loop prefetched rows and before large GPU
    // depthwise parts launched channels-innermost: the rows of its large depthwise parts are
    // superseded, and eval leaves them out, saying how many.
    let mut stored = dataset::read_measurements(&data_path).expect("dataset");
    let superseded = dataset::drop_superseded(&mut stored);
    assert!(superseded > 10, "{superseded}");
    // `dataset::read` leaves them out too.
    assert!(rows.iter().all(dataset::is_current));
    for (min, max) in [("0", "8"), ("8", "0")] {
        let out = tandem_ok(&[
            "eval",
            profile_path.to_str().expect("path"),
            data_path.to_str().expect("path"),
            "--json",
            "--min-mb",
            min,
            "--max-mb",
            max,
        ]);
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        let sizes =
            SizeBounds::new(min.parse().expect("mb"), max.parse().expect("mb")).expect("bounds");
        let within: Vec<_> = rows
            .iter()
            .filter(|r| sizes.contains(&r.layer))
            .cloned()
            .collect();
        assert!(
            within.len() > 100 && within.len() < rows.len(),
            "{min}–{max} MB"
        );
        let expected = evaluate(&profile, &within);
        assert_eq!(
            json["overall"]["n"].as_u64(),
            Some(within.len() as u64),
            "{min}–{max} MB"
        );
        for (name, acc) in &expected.executors {
            let j = &json["executors"][name];
            assert_eq!(j["n"].as_u64(), Some(acc.n as u64), "{name}");
            assert!((j["mape"].as_f64().expect("mape") - acc.mape).abs() < 1e-9);
        }
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("working set"), "{stderr}");
        assert!(
            stderr.contains(&format!("left out {superseded} rows")),
            "{stderr}"
        );
    }
    for (bounds, says) in [
        (["--min-mb", "16", "--max-mb", "8"], "below --min-mb"),
        (["--min-mb", "100000", "--max-mb", "0"], "no point"),
    ] {
        let mut args = vec![
            "eval",
            profile_path.to_str().expect("path"),
            data_path.to_str().expect("path"),
        ];
        args.extend(bounds);
        let out = tandem_with(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains(says), "{stderr}");
    }
}

fn eval_json(profile: &Path, data: &Path) -> serde_json::Value {
    let out = tandem_ok(&[
        OsStr::new("eval"),
        profile.as_os_str(),
        data.as_os_str(),
        OsStr::new("--json"),
    ]);
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

#[test]
fn calibrate_removes_the_offsets_it_is_sure_of() {
    // The shipped fresh set as if the machine ran 10% faster that day.
    let profile = profiles().join("pocl-1core.profile");
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("faster.csv");
    let mut rows = dataset::read(&profiles().join("pocl-1core.fresh2.csv.gz")).expect("data");
    for r in &mut rows {
        r.ms *= 0.9;
    }
    dataset::write(&data, &rows).expect("write");
    let calibrated = dir.path().join("cal.profile");
    let out = tandem_ok(&[
        OsStr::new("calibrate"),
        profile.as_os_str(),
        data.as_os_str(),
        OsStr::new("-o"),
        calibrated.as_os_str(),
    ]);
    let table = String::from_utf8_lossy(&out.stdout);
    let cal = Profile::load(&calibrated).expect("a calibrated profile loads");
    let record = &cal.provenance.calibrations[0];
    assert_eq!(record.dataset, "faster.csv");
    let (before, after) = (eval_json(&profile, &data), eval_json(&calibrated, &data));
    let mut applied = 0;
    for (name, e) in &record.executors {
        let line = table
            .lines()
            .find(|l| l.starts_with(&format!("| {name} |")))
            .unwrap_or_else(|| panic!("{name} missing from:\n{table}"));
        let (b, a) = (&before["offset"][name], &after["offset"][name]);
        if e.applied {
            applied += 1;
            assert!(line.ends_with("| yes |"), "{line}");
            // The factor is a median over configurations, the offset one over points: the
            // two agree within a couple of percent, and the 10% is gone.
            let (a, b) = (a.as_f64().expect("offset"), b.as_f64().expect("offset"));
            assert!(
                a.abs() < 2.0 && a.abs() < b.abs() / 4.0,
                "{name}: {b} → {a}"
            );
            assert_eq!(cal.executors[name].scale, e.factor);
        } else {
            assert!(line.contains("| no: "), "{line}");
            assert_eq!(a, b, "{name}");
            assert_eq!(cal.executors[name].scale, 1.0);
        }
    }
    // Every executor with 20 configurations or more (the rare kernels have fewer).
    assert!(applied >= 8, "{table}");
}

/// `calibrate --add`: files pooled give the factors of one file holding all their rows, the
/// record names them all, and a file of another machine among them is named in the error.
#[test]
fn calibrate_pools_several_files() {
    let profile = profiles().join("pocl-1core.profile");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut rows = dataset::read(&profiles().join("pocl-1core.fresh2.csv.gz")).expect("data");
    for r in &mut rows {
        r.ms *= 0.9;
    }
    // Configurations alternate between the two halves, every point of one in the same half.
    let mut configs: Vec<&str> = rows.iter().map(|r| r.config.as_str()).collect();
    configs.sort_unstable();
    configs.dedup();
    let odd: std::collections::BTreeSet<&str> =
        configs.iter().copied().skip(1).step_by(2).collect();
    let (first, second): (Vec<_>, Vec<_>) = rows
        .iter()
        .cloned()
        .partition(|r| !odd.contains(r.config.as_str()));
    assert!(!first.is_empty() && !second.is_empty());
    let [whole, a, b] = ["whole.csv", "a.csv", "b.csv"].map(|n| dir.path().join(n));
    dataset::write(&whole, &rows).expect("write");
    dataset::write(&a, &first).expect("write");
    dataset::write(&b, &second).expect("write");
    let (one, pooled) = (
        dir.path().join("one.profile"),
        dir.path().join("pooled.profile"),
    );
    tandem_ok(&[
        OsStr::new("calibrate"),
        profile.as_os_str(),
        whole.as_os_str(),
        OsStr::new("-o"),
        one.as_os_str(),
    ]);
    tandem_ok(&[
        OsStr::new("calibrate"),
        profile.as_os_str(),
        a.as_os_str(),
        OsStr::new("--add"),
        b.as_os_str(),
        OsStr::new("-o"),
        pooled.as_os_str(),
    ]);
    let (one, pooled) = (
        Profile::load(&one).expect("loads"),
        Profile::load(&pooled).expect("loads"),
    );
    assert_eq!(pooled.provenance.calibrations[0].dataset, "a.csv + b.csv");
    assert_eq!(
        one.provenance.calibrations[0].executors,
        pooled.provenance.calibrations[0].executors
    );
    let scaled = pooled.executors.values().filter(|e| e.scale != 1.0).count();
    assert!(scaled >= 8, "{scaled} executors calibrated");
    for (name, e) in &one.executors {
        assert_eq!(e.scale, pooled.executors[name].scale, "{name}");
    }

    // The second file's 3rd row from another CPU: the error names that file and row.
    let mut other = second.clone();
    other[2].cpu = "Another CPU (64 cores)".into();
    let stranger = dir.path().join("stranger.csv");
    dataset::write(&stranger, &other).expect("write");
    let out = tandem_with(&[
        OsStr::new("calibrate"),
        profile.as_os_str(),
        a.as_os_str(),
        OsStr::new("--add"),
        stranger.as_os_str(),
        OsStr::new("-o"),
        dir.path().join("never.profile").as_os_str(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("stranger.csv")
            && stderr.contains("row 3 was measured")
            && stderr.contains("Another CPU"),
        "{stderr}"
    );
    assert!(!dir.path().join("never.profile").exists());
}

/// `--repeat`: the second measurement scored as a prediction of the first, per executor and
/// overall, as the library's `repeatability` computes it, beside the profile's own accuracy.
#[test]
fn a_repeated_measurement_gives_the_floor_per_executor_and_overall() {
    use tandem_predictors::eval::{overall, repeatability};
    let profile_path = profiles().join("pocl-1core-xeon2.profile");
    let first = profiles().join("pocl-1core-xeon2.fresh1.csv.gz");
    let again = profiles().join("pocl-1core-xeon2.fresh1-again.csv.gz");
    let args = [
        OsStr::new("eval"),
        profile_path.as_os_str(),
        first.as_os_str(),
        OsStr::new("--repeat"),
        again.as_os_str(),
    ];
    let out = tandem_ok(&[&args[..], &[OsStr::new("--json")]].concat());
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let floor = repeatability(
        &dataset::read(&first).expect("data"),
        &dataset::read(&again).expect("data"),
    );
    assert!(floor.len() >= 10, "{floor:?}");
    for (name, a) in &floor {
        let j = &json["repeatability"][name];
        assert_eq!(j["n"].as_u64(), Some(a.n as u64), "{name}");
        assert!((j["mape"].as_f64().expect("mape") - a.mape).abs() < 1e-9);
    }
    let all = overall(&floor);
    assert_eq!(
        json["repeatability_overall"]["n"].as_u64(),
        Some(all.n as u64)
    );
    assert!(
        (json["repeatability_overall"]["mape"]
            .as_f64()
            .expect("mape")
            - all.mape)
            .abs()
            < 1e-9
    );
    let at = floor.values().filter(|a| a.mape <= 5.0).count();
    assert_eq!(
        json["repeatability_at_target"]["executors"].as_u64(),
        Some(at as u64)
    );

    let table = String::from_utf8_lossy(&tandem_ok(&args).stdout).into_owned();
    let row = format!("| {:.2}% |", all.mape);
    let last = table
        .lines()
        .find(|l| l.starts_with("| all (points-weighted) |"))
        .expect("an overall row");
    assert!(
        last.ends_with(&format!("| {} {row} {:.1}% |", all.n, all.within10 * 100.0)),
        "{last}"
    );
    assert!(
        table.contains(&format!("{at} of {} executors' repeat MAPE", floor.len())),
        "{table}"
    );
}

/// `--repeat-passes`: a dataset measured in passes says by itself how far its passes lie apart,
/// its later passes scored as a prediction of its first: the same figures as `--repeat` with the
/// second pass as a file of its own. A dataset of one pass, or both flags at once, is refused.
#[test]
fn the_passes_of_one_dataset_give_the_same_floor_as_a_second_file() {
    let profile_path = profiles().join("pocl-1core-xeon2.profile");
    let first = profiles().join("pocl-1core-xeon2.fresh1.csv.gz");
    let again = profiles().join("pocl-1core-xeon2.fresh1-again.csv.gz");
    let mut rows = dataset::read(&first).expect("data");
    rows.extend(dataset::read(&again).expect("data"));
    let dir = tempfile::tempdir().expect("tempdir");
    let both = dir.path().join("both.csv");
    dataset::write(&both, &rows).expect("write");
    let json_of = |args: &[&OsStr]| -> serde_json::Value {
        let out = tandem_ok(&[&[OsStr::new("eval"), profile_path.as_os_str()], args].concat());
        serde_json::from_slice(&out.stdout).expect("one JSON object")
    };
    let two_files = json_of(&[
        first.as_os_str(),
        OsStr::new("--repeat"),
        again.as_os_str(),
        OsStr::new("--json"),
    ]);
    let passes = json_of(&[
        both.as_os_str(),
        OsStr::new("--repeat-passes"),
        OsStr::new("--json"),
    ]);
    let executors = two_files["repeatability"]
        .as_object()
        .expect("repeatability per executor");
    assert!(executors.len() >= 10, "{two_files}");
    for (name, a) in executors {
        let b = &passes["repeatability"][name];
        assert_eq!(a["n"], b["n"], "{name}");
        assert!(
            (a["mape"].as_f64().expect("mape") - b["mape"].as_f64().expect("mape")).abs() < 1e-9
        );
    }
    let table = String::from_utf8_lossy(
        &tandem_ok(&[
            OsStr::new("eval"),
            profile_path.as_os_str(),
            both.as_os_str(),
            OsStr::new("--repeat-passes"),
        ])
        .stdout,
    )
    .into_owned();
    assert!(
        table
            .contains("later passes pooled, scored as if they were a prediction of its first pass"),
        "{table}"
    );

    let once = tandem_with(&[
        OsStr::new("eval"),
        profile_path.as_os_str(),
        first.as_os_str(),
        OsStr::new("--repeat-passes"),
    ]);
    let stderr = String::from_utf8_lossy(&once.stderr);
    assert!(!once.status.success(), "{stderr}");
    assert!(
        stderr.contains("fresh1.csv.gz") && stderr.contains("was measured once"),
        "{stderr}"
    );
    let both_flags = tandem_with(&[
        OsStr::new("eval"),
        profile_path.as_os_str(),
        both.as_os_str(),
        OsStr::new("--repeat-passes"),
        OsStr::new("--repeat"),
        again.as_os_str(),
    ]);
    assert!(!both_flags.status.success());
    assert!(String::from_utf8_lossy(&both_flags.stderr).contains("cannot be used with"));
}

/// `tandem calibrate --speed-from`: the speed model is refitted against the calibrated
/// predictions on datasets of several hours; fewer than four, or one of another CPU, are
/// refused by name. Calibrating without it leaves no speed model, saying so.
#[test]
fn calibrate_refits_the_speed_model_against_the_calibrated_predictions() {
    use tandem_predictors::features::is_cpu;
    let profile_path = profiles().join("pocl-1core-xeon4.profile");
    let profile = Profile::load(&profile_path).expect("shipped profile");
    let rows = dataset::read(&profiles().join("pocl-1core-xeon4.fresh38.csv.gz")).expect("data");
    let predicted = evaluate(&profile, &rows).predicted;
    // Every point at 0.9 of its prediction, times `p^0.5` in an hour whose reference layer
    // takes `p` times its usual time (elasticity 0.5).
    let hour = |p: f64| -> Vec<dataset::Row> {
        rows.iter()
            .zip(&predicted)
            .filter_map(|(r, pred)| {
                let ms = pred.as_ref()? * 0.9 * p.sqrt();
                Some(dataset::Row {
                    ms,
                    least_ms: ms,
                    probe_ms: if is_cpu(&r.executor) { 0.2 } else { 0.95 } * p,
                    ..r.clone()
                })
            })
            .collect()
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let now = dir.path().join("now.csv");
    dataset::write(&now, &hour(1.0)).expect("write");
    let mut hours = Vec::new();
    for (i, p) in [0.9, 0.95, 1.05, 1.1].into_iter().enumerate() {
        let path = dir.path().join(format!("hour{i}.csv"));
        dataset::write(&path, &hour(p)).expect("write");
        hours.push(path);
    }
    let calibrate = |extra: &[&OsStr], out: &Path| {
        let mut args = vec![
            OsStr::new("calibrate"),
            profile_path.as_os_str(),
            now.as_os_str(),
            // Every executor with two configurations gets its factor, the rare kernels too.
            OsStr::new("--min-configs"),
            OsStr::new("2"),
            OsStr::new("-o"),
            out.as_os_str(),
        ];
        args.extend_from_slice(extra);
        tandem_with(&args)
    };
    let mut speed_from = Vec::new();
    for h in &hours {
        speed_from.extend([OsStr::new("--speed-from"), h.as_os_str()]);
    }
    let refit = dir.path().join("refit.profile");
    let out = calibrate(&speed_from, &refit);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("hour3.csv: GPU side probe"), "{stderr}");
    let fitted = Profile::load(&refit).expect("loads");
    for side in [fitted.speed.gpu, fitted.speed.cpu] {
        let s = side.expect("a model per side");
        assert!((s.elasticity - 0.5).abs() < 0.02, "{s:?}");
        // Against the calibrated predictions (already at 0.9), the hours' level is 1 at their
        // middle probe time.
        assert!((s.level - 1.0).abs() < 0.01, "{s:?}");
        assert_eq!(s.datasets, 4);
    }

    // Calibrated again without --speed-from: no speed model, and stderr says why.
    let again = dir.path().join("again.profile");
    let out = tandem_ok(&[
        OsStr::new("calibrate"),
        refit.as_os_str(),
        now.as_os_str(),
        OsStr::new("-o"),
        again.as_os_str(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("refit.profile is not kept") && stderr.contains("--speed-from"),
        "{stderr}"
    );
    assert!(Profile::load(&again).expect("loads").speed.is_empty());

    // Three hours are too few; an hour of another CPU is refused by name.
    let never = dir.path().join("never.profile");
    let out = calibrate(&speed_from[..6], &never);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("3 datasets, a speed model needs at least 4"),
        "{stderr}"
    );
    let mut other = hour(1.2);
    other[0].cpu = "Another CPU (64 cores)".into();
    let stranger = dir.path().join("stranger.csv");
    dataset::write(&stranger, &other).expect("write");
    let mut args = speed_from[..6].to_vec();
    args.extend([OsStr::new("--speed-from"), stranger.as_os_str()]);
    let out = calibrate(&args, &never);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("stranger.csv") && stderr.contains("Another CPU"),
        "{stderr}"
    );
    assert!(!never.exists());
}
