//! Profiling on the OpenCL device (PoCL on the project's machines; `cargo xtask test` installs
//! it): rows carry what the runtime dispatched, which equals the compile-time features, and a
//! second run resumes instead of measuring again.

use std::time::Duration;
use tandem_predictors::dataset::{self, config_key};
use tandem_predictors::features::{self, gpu_features, record, Layer, OpKind};
use tandem_predictors::measure::{self, Limits, Plan};
use tandem_runtime::profile::{MeasureOptions, Profiler};

fn plan() -> Plan {
    Plan {
        ops: vec![OpKind::Conv, OpKind::Depthwise, OpKind::Linear],
        samples: 0,
        threads: vec![1, 2],
        budget: None,
        seed: 3,
        points: 3,
        rounds: 2,
        passes: 1,
        quiet_slack: 0.0,
        sync_slack: 0.0,
        memory_slack: 0.0,
        limits: Limits::default(),
        measure: MeasureOptions {
            warmup: 1,
            min_reps: 1,
            max_reps: 1,
            target_ms: 0.0,
            deadline: Duration::from_secs(60),
            gpu_from_idle: false,
        },
        setting: "test".into(),
    }
}

/// The OpenCL device's profiler; these tests need one (PoCL here), and fail without it.
fn profiler() -> Profiler {
    match Profiler::open(false) {
        Ok(p) => p,
        Err(e) => panic!("this test needs an OpenCL device (pocl-opencl-icd): {e}"),
    }
}

fn small_layers() -> Vec<Layer> {
    let limits = Limits {
        max_flops: 2e6,
        max_weights: 1 << 16,
    };
    measure::random_layers(
        &[OpKind::Conv, OpKind::Depthwise, OpKind::Linear],
        4,
        17,
        &limits,
    )
}

#[test]
fn profiling_records_the_dispatch_and_resumes() {
    let mut profiler = profiler();
    let dev = profiler.device().clone();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("d.csv");
    let layers = small_layers();
    let first = &layers[..3];
    let s = measure::run(&mut profiler, &out, first, &plan(), "cpu", |_| {}).expect("profiling");
    assert_eq!((s.measured, s.skipped), (3, 0));
    let rows = dataset::read(&out).expect("dataset");
    // Without the quiet gate there are no probes, so no speed is recorded.
    assert!(rows.iter().all(|r| r.probe_ms == 0.0));
    // Two rounds of one timed run each: every point's repetitions add up over the rounds.
    assert!(
        rows.iter().all(|r| r.reps == 2),
        "{:?}",
        rows.iter().map(|r| r.reps).collect::<Vec<_>>()
    );
    assert_eq!(rows.len(), s.rows);
    for l in first {
        let key = config_key(l);
        let mine: Vec<_> = rows.iter().filter(|r| r.config == key).collect();
        assert!(mine
            .iter()
            .any(|r| r.executor.starts_with("cpu_") && r.threads == 2));
        assert!(mine.iter().any(|r| r.threads == 0 && r.c1 - r.c0 == l.cout));
    }
    for r in rows.iter().filter(|r| r.threads == 0) {
        assert!(r.ms > 0.0 && r.sync_ms > 0.0);
        let (d, _) = gpu_features(&r.layer, r.c1 - r.c0, &dev);
        assert_eq!(features::gpu_variant(&r.layer, &d), r.variant);
        assert_eq!(r.executor, d.variant.name());
        assert_eq!(record(&d), r.dispatch, "{}", r.config);
    }

    // All four: the first three are skipped, only the new one is measured.
    let s = measure::run(&mut profiler, &out, &layers, &plan(), "cpu", |_| {}).expect("resume");
    assert_eq!((s.measured, s.skipped), (1, 3));
    let again = dataset::read(&out).expect("dataset");
    assert_eq!(again.len(), rows.len() + s.rows);
    let keys: std::collections::BTreeSet<_> = again.iter().map(|r| r.config.clone()).collect();
    assert_eq!(keys.len(), 4);

    // A zero budget measures nothing.
    let mut p = plan();
    p.budget = Some(Duration::ZERO);
    let more = measure::random_layers(&[OpKind::Linear], 1, 99, &Limits::default());
    let s = measure::run(&mut profiler, &out, &more, &p, "cpu", |_| {}).expect("budget");
    assert_eq!((s.measured, s.out_of_budget), (0, 1));
}

/// Rows record the loop or launch that ran them: a CPU depthwise part whose input reaches the
/// runtime's prefetch threshold says `prefetch_rows`, a smaller one nothing; a GPU one its grid
/// order; and readers keep them all.
#[test]
fn rows_record_the_depthwise_loop_and_launch_that_ran_them() {
    use tandem_predictors::features::cpu_variant;
    let mut profiler = profiler();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("d.csv");
    // 160 × 160 pixels: 4 bytes × 25600 per channel, so 82 channels of 96 reach 8 MiB.
    let large = measure::spatial(OpKind::Depthwise, 160, 160, 96, 96, 3, 1);
    let small = measure::spatial(OpKind::Depthwise, 24, 24, 32, 32, 3, 1);
    let mut p = plan();
    p.ops = vec![OpKind::Depthwise];
    p.threads = vec![1];
    p.points = 4;
    measure::run(&mut profiler, &out, &[large, small], &p, "cpu", |_| {}).expect("profiling");
    let rows = dataset::read(&out).expect("dataset");
    let cpu: Vec<_> = rows.iter().filter(|r| r.threads == 1).collect();
    assert_eq!(
        cpu.len(),
        dataset::read_measurements(&out)
            .expect("rows")
            .iter()
            .filter(|r| r.threads == 1)
            .count()
    );
    for r in &cpu {
        assert_eq!(
            r.variant,
            cpu_variant(&r.layer, r.c0, r.c1),
            "{} {}..{}",
            r.config,
            r.c0,
            r.c1
        );
    }
    assert!(cpu
        .iter()
        .any(|r| r.variant == "prefetch_rows" && r.c1 == 96));
    assert!(cpu.iter().any(|r| r.variant.is_empty()));
    // GPU rows record the grid order: 41 channels of the large layer reach 4 MiB, from where
    // its parts launch channels-innermost.
    let gpu: Vec<_> = rows.iter().filter(|r| r.threads == 0).collect();
    for r in &gpu {
        let order = if features::gpu_channels_inner(&r.layer, r.c0, r.c1) {
            "/channels_inner"
        } else {
            "/channels_outer"
        };
        assert_eq!(
            r.variant,
            format!("{}{order}", r.executor),
            "{} {}..{}",
            r.config,
            r.c0,
            r.c1
        );
    }
    assert!(gpu
        .iter()
        .any(|r| r.variant.ends_with("/channels_inner") && r.c1 - r.c0 == 96));
    assert!(gpu
        .iter()
        .any(|r| r.variant.ends_with("/channels_outer") && r.layer.h == 24));
}

/// With `passes`, every configuration is measured that many times: the file keeps each pass's
/// rows, readers pool a point's passes into one row, and a run with more passes measures only
/// the passes still missing.
#[test]
fn passes_measure_each_configuration_again_and_readers_pool_them() {
    let mut profiler = profiler();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("d.csv");
    let layers = &small_layers()[..2];
    let mut p = plan();
    p.threads = vec![1];
    p.passes = 2;
    let s = measure::run(&mut profiler, &out, layers, &p, "cpu", |_| {}).expect("profiling");
    assert_eq!((s.measured, s.skipped), (4, 0));
    let stored = dataset::read_measurements(&out).expect("dataset");
    assert_eq!(stored.len(), s.rows);
    let pooled = dataset::read(&out).expect("dataset");
    assert_eq!(2 * pooled.len(), stored.len());
    for r in &pooled {
        let passes: Vec<f64> = stored
            .iter()
            .filter(|m| m.point_key() == r.point_key())
            .map(|m| m.ms)
            .collect();
        assert_eq!(passes.len(), 2, "{r:?}");
        let geomean = (passes[0] * passes[1]).sqrt();
        assert!((r.ms - geomean).abs() <= 1e-9 * geomean, "{r:?} {passes:?}");
        // Two rounds of one timed run each, in each of two passes.
        assert_eq!(r.reps, 4, "{r:?}");
    }
    let counts = dataset::passes_per_config(&stored);
    assert!(layers.iter().all(|l| counts[config_key(l).as_str()] == 2));

    // A third pass: one more measurement of each configuration, then nothing left.
    p.passes = 3;
    let s = measure::run(&mut profiler, &out, layers, &p, "cpu", |_| {}).expect("third pass");
    assert_eq!((s.measured, s.skipped), (2, 0));
    let s = measure::run(&mut profiler, &out, layers, &p, "cpu", |_| {}).expect("resume");
    assert_eq!((s.measured, s.skipped), (0, 2));
    let stored = dataset::read_measurements(&out).expect("dataset");
    assert_eq!(
        3 * dataset::read(&out).expect("dataset").len(),
        stored.len()
    );
}

/// With the quiet gate on, both sides calibrate on the probe layer and every point is the
/// least of its kept rounds: as many repetitions as quiet rounds (two here when no round was
/// discarded); at most twice the rounds are attempted.
#[test]
fn the_quiet_gate_probes_both_sides_and_keeps_quiet_rounds() {
    let mut profiler = profiler();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("d.csv");
    let layers = &small_layers()[..2];
    // The probe exists only where asked for (the planner's oracle does not pay for it).
    let op = layers[0].to_op();
    {
        let mut bench = profiler.layer(&op, &[layers[0].cout], 1).expect("bench");
        let err = bench
            .probe_gpu()
            .expect_err("no probe without layer_with_probe");
        assert!(err.to_string().contains("layer_with_probe"), "{err}");
        assert!(bench.probe_cpu().is_err());
    }
    {
        let mut bench = profiler
            .layer_with_probe(&op, &[layers[0].cout], 1)
            .expect("bench");
        assert!(bench.probe_gpu().expect("GPU probe") > 0.0);
        assert!(bench.probe_cpu().expect("CPU probe") > 0.0);
    }
    let mut p = plan();
    p.threads = vec![1];
    p.quiet_slack = 0.25;
    p.sync_slack = 0.6;
    // Both sides' probes also stream 64 MB from memory (three readings on the GPU side, two on
    // the CPU side; a debug build checks each probe gives its gate one value per reading).
    p.memory_slack = 0.15;
    let s = measure::run(&mut profiler, &out, layers, &p, "cpu", |_| {}).expect("profiling");
    assert_eq!(s.measured, 2);
    // Calibration alone is 2 x 12 probes, 150 ms apart.
    assert!(s.gate.waited >= Duration::from_secs(3), "{:?}", s.gate);
    let rows = dataset::read(&out).expect("dataset");
    assert_eq!(rows.len(), s.rows);
    for r in &rows {
        assert!(r.ms > 0.0, "{r:?}");
        // Each row records the speed of its side's reference layer while it was measured:
        // both sides are timed on one core each, a fraction of a millisecond to some.
        assert!(r.probe_ms > 0.0 && r.probe_ms < 1000.0, "{r:?}");
        if s.gate.discarded == 0 {
            assert_eq!(r.reps, 2, "{r:?} {:?}", s.gate);
        } else {
            assert!((1..=4).contains(&r.reps), "{r:?} {:?}", s.gate);
        }
    }
}

/// Grouped convolutions (refactorized depthwise layers) are profiled with executors of their
/// own, `cpu_gconv_tN` and `conv_grouped`, and training makes predictors for them.
#[cfg(feature = "lightgbm")]
#[test]
fn grouped_convolutions_get_their_own_executors_and_predictors() {
    use tandem_predictors::features::{cpu_executor, gpu_executor, is_grouped};
    use tandem_predictors::train::{self, DeviceMeta};
    let mut profiler = profiler();
    let dev = profiler.device().clone();
    // Small depthwise geometries, each refactorized with every valid G < C.
    let limits = Limits {
        max_flops: 4e6,
        max_weights: 1 << 16,
    };
    let mut layers = Vec::new();
    for (h, c, stride) in [
        (8usize, 32usize, 1usize),
        (9, 16, 2),
        (6, 32, 2),
        (7, 24, 1),
        (10, 16, 1),
    ] {
        let (oh, pad) = if stride == 1 {
            (h, 1)
        } else {
            (h.div_ceil(2), usize::from(h % 2 == 1))
        };
        let dw = Layer {
            op: OpKind::Depthwise,
            n: 1,
            h,
            w: h,
            cin: c,
            oh,
            ow: oh,
            cout: c,
            kh: 3,
            kw: 3,
            stride,
            pad_t: pad,
            pad_l: pad,
            groups: 1,
        };
        let v = measure::grouped_variants(&dw, false);
        assert!(v
            .iter()
            .all(|l| l.op == OpKind::GroupedConv && c / l.groups < c));
        layers.extend(v);
    }
    // The random sampler draws gconv layers the same way.
    let random = measure::random_layers(&[OpKind::GroupedConv], 6, 5, &limits);
    assert_eq!(random.len(), 6);
    assert!(random
        .iter()
        .all(|l| l.op == OpKind::GroupedConv && l.groups > 1 && l.cin % l.groups == 0));
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("g.csv");
    let mut p = plan();
    p.ops = vec![OpKind::GroupedConv];
    p.threads = vec![1];
    let s = measure::run(&mut profiler, &out, &layers, &p, "cpu", |_| {}).expect("profiling");
    assert_eq!(s.measured, layers.len());
    let rows = dataset::read(&out).expect("dataset");
    assert!(rows.iter().all(|r| r.layer.op == OpKind::GroupedConv));
    let cpu = cpu_executor(OpKind::GroupedConv, 1);
    assert_eq!(cpu, "cpu_gconv_t1");
    assert!(rows.iter().any(|r| r.executor == cpu));
    assert!(rows.iter().any(|r| r.executor == "conv_grouped"));
    for r in rows.iter().filter(|r| r.threads == 0) {
        let (d, _) = gpu_features(&r.layer, r.c1 - r.c0, &dev);
        assert_eq!(r.executor, gpu_executor(r.layer.op, d.variant));
        assert!(is_grouped(&r.executor));
        assert_eq!(record(&d), r.dispatch, "{}", r.config);
    }

    let (profile, report) = train::train(
        &rows,
        DeviceMeta {
            device: dev.clone(),
            cpu: "cpu".into(),
            host: None,
            setting: "test".into(),
        },
        "g.csv",
        |_| {},
    )
    .expect("training");
    for name in [cpu.as_str(), "conv_grouped"] {
        assert!(profile.executors.contains_key(name), "{name}");
        assert!(report.executors.contains_key(name), "{name}");
    }
    // The saved profile loads (feature names checked) and predicts grouped layers.
    let path = dir.path().join("g.profile");
    profile.save(&path).expect("saves");
    let back = tandem_predictors::Profile::load(&path).expect("loads");
    let l = &layers[0];
    let best = back.best_split(l, 1).expect("predicts");
    assert!(best.total_ms.is_finite() && best.total_ms > 0.0);
    assert!(back.predict_cpu(l, l.cout, 1).expect("cpu") > 0.0);
    assert!(back.predict_gpu(l, l.cout).expect("gpu") > 0.0);
}

/// Both GPU timings (from an awake queue, the default, and `gpu_from_idle`) time every
/// requested repetition of the same dispatch, one after the other on one queue: the awake
/// timing's wait kernel is released every time, so the queue is free for the next part and
/// for a join.
#[test]
fn gpu_parts_time_from_an_awake_or_an_idle_queue() {
    let mut profiler = profiler();
    let dev = profiler.device().clone();
    let layer = &small_layers()[0];
    let op = layer.to_op();
    let g = layer.cout;
    let mut bench = profiler.layer(&op, &[g], 1).expect("bench");
    let awake = MeasureOptions {
        warmup: 1,
        min_reps: 5,
        max_reps: 5,
        target_ms: 0.0,
        deadline: Duration::from_secs(60),
        gpu_from_idle: false,
    };
    let idle = MeasureOptions {
        gpu_from_idle: true,
        ..awake
    };
    for options in [awake, idle, awake] {
        let (d, t) = bench.gpu(g, &options).expect("GPU part");
        assert_eq!(t.reps, 5, "{options:?}");
        assert!(t.median_ms > 0.0 && t.median_ms.is_finite(), "{t:?}");
        let (expected, _) = gpu_features(layer, g, &dev);
        assert_eq!(d.variant, expected.variant);
    }
    let join = bench.sync(&awake).expect("a join after both timings");
    assert!(join.median_ms > 0.0);
}

/// A split timed as a session runs it writes every output channel, the CPU's `[0, C − g)` and
/// the GPU's `[C − g, C)`, equal to the CPU alone; a split with no channel on one side is
/// refused.
#[test]
fn a_split_runs_both_parts_side_by_side() {
    let mut profiler = profiler();
    let once = MeasureOptions {
        warmup: 0,
        min_reps: 1,
        max_reps: 1,
        target_ms: 0.0,
        deadline: Duration::from_secs(60),
        gpu_from_idle: false,
    };
    let layers = small_layers();
    let mut checked = 0;
    for layer in layers.iter().filter(|l| l.cout >= 16) {
        let op = layer.to_op();
        let c = layer.cout;
        let g = c / 2 / 8 * 8;
        if g == 0 {
            continue;
        }
        let mut bench = profiler.layer(&op, &[g], 1).expect("bench");
        bench.cpu(c, 1, &once);
        let expected = bench.output().to_vec();
        bench.output().fill(f32::NAN);
        let t = bench.split(g, 1, &once).expect("split");
        assert!(t.median_ms > 0.0 && t.median_ms.is_finite(), "{t:?}");
        let got = bench.output().to_vec();
        for (i, (a, b)) in got.iter().zip(&expected).enumerate() {
            assert!(
                (a - b).abs() <= 1e-4 * (1.0 + b.abs()),
                "{:?} {g} of {c} GPU channels: output {i} (channel {}) is {a}, expected {b}",
                layer.op,
                i % c
            );
        }
        for bad in [0, c] {
            let err = bench.split(bad, 1, &once).expect_err("not a split");
            assert!(err.to_string().contains("needs 0 < GPU channels"), "{err}");
        }
        checked += 1;
    }
    assert!(
        checked >= 2,
        "only {checked} layers with 16+ channels were drawn"
    );
}
