//! `--refactor-depthwise auto`: per depthwise layer the planner keeps native or takes a
//! diagonalwise refactorization, whichever the cost model says is faster (each form at its best
//! CPU/GPU split); the result computes what native does; a profile without grouped-convolution
//! predictors keeps every layer native with a note.
//!
//! The GPU parts run on PoCL (`cargo xtask test` installs it); without an OpenCL device the
//! tests that split fail.

use anyhow::{bail, Result};
use std::collections::BTreeMap;
use tandem_compiler::dwauto;
use tandem_compiler::ir::builder::GraphBuilder;
use tandem_compiler::ir::op::DepthwiseConv2d;
use tandem_compiler::ir::{Activation, Graph, Op, Padding};
use tandem_compiler::lower::{compile, compile_with_report, CompileOptions, Plan};
use tandem_compiler::passes::{self, RefactorDepthwise};
use tandem_compiler::planner::{Choice, CostModel};
use tandem_compiler::run::{compile_planned, PlanSource};
use tandem_models::{inputs::seeded_inputs, SEED};
use tandem_predictors::bundle::{shipped_dir, Executor};
use tandem_predictors::features::feature_names;
use tandem_predictors::forest::{Baseline, Forest};
use tandem_predictors::Profile;
use tandem_runtime::artifact::{Artifact, Kernel, Placement};
use tandem_runtime::gpu::device::GpuDevice;
use tandem_runtime::profile::LayerOp;
use tandem_runtime::rng::Rng;
use tandem_runtime::session::{Model, Session, SessionOptions};
use tandem_runtime::DType;
use tandem_tests::relative_error;

/// Three 3×3 depthwise layers over `[1, 12, 12, 32]` (strides 1, 2, 1; ReLU6; with bias).
fn chain() -> Graph {
    let c = 32;
    let mut rng = Rng::new(SEED);
    let mut b = GraphBuilder::new();
    let mut x = b.input("x", DType::F32, &[1, 12, 12, c]);
    for (i, stride) in [1, 2, 1].into_iter().enumerate() {
        let w = b.const_f32(&format!("w{i}"), &[1, 3, 3, c], &rng.uniform(9 * c, 1.0));
        let bias = b.const_f32(&format!("b{i}"), &[c], &rng.uniform(c, 0.5));
        x = b
            .op(
                Op::DepthwiseConv2d(DepthwiseConv2d {
                    padding: Padding::Same,
                    stride: [stride; 2],
                    dilation: [1; 2],
                    depth_multiplier: 1,
                    activation: Activation::Relu6,
                }),
                &[Some(x), Some(w), Some(bias)],
                1,
            )
            .expect("builds")[0];
    }
    b.output(x);
    b.finish("three depthwise layers")
}

fn prepared() -> Graph {
    let mut g = chain();
    passes::prepare(&mut g).expect("prepares");
    g
}

/// A cost model from a function of the layer: `Some(ms)` for the CPU alone; the GPU alone costs
/// twice that, and one split (half the channels each side) costs `split` × ms, so the best of a
/// form is `min(1, split) × ms`. `None`: cannot cost; `Err`: no predictor.
struct Fake<F: FnMut(&LayerOp) -> Result<Option<f64>>> {
    cost: F,
    split: f64,
}

impl<F: FnMut(&LayerOp) -> Result<Option<f64>>> CostModel for Fake<F> {
    fn split(&mut self, layer: &LayerOp, _threads: usize) -> Result<Option<Vec<Choice>>> {
        let c = layer.channels();
        let Some(ms) = (self.cost)(layer)? else {
            return Ok(None);
        };
        let one = |g: usize, placement, cpu_ms: f64, gpu_ms: f64, ms: f64| Choice {
            gpu_channels: g,
            placement,
            cpu_ms,
            gpu_ms,
            ms,
        };
        Ok(Some(vec![
            one(0, Placement::Cpu, ms, 0.0, ms),
            one(
                c / 2,
                Placement::Split {
                    gpu_channels: c / 2,
                },
                ms * self.split,
                ms * self.split,
                ms * self.split,
            ),
            one(c, Placement::Gpu, 0.0, 2.0 * ms, 2.0 * ms),
        ]))
    }

    fn sync_ms(&self) -> f64 {
        0.01
    }

    fn describe(&self) -> String {
        "fake".into()
    }
}

/// Group size of a grouped/dense conv layer (`None` for depthwise).
fn group_in(layer: &LayerOp) -> Option<usize> {
    match layer {
        LayerOp::Conv(p) => Some(p.group_in()),
        _ => None,
    }
}

fn stride(layer: &LayerOp) -> usize {
    match layer {
        LayerOp::Conv(p) => p.stride[0],
        LayerOp::Depthwise(p) => p.stride[0],
        LayerOp::Linear(_) => 1,
    }
}

#[test]
fn auto_takes_a_refactorized_form_only_where_the_cost_model_says_it_is_faster() {
    let graph = prepared();
    // Native costs 1 ms; G = 8 costs 0.5 ms on the stride-2 layer only, 3 ms elsewhere; other G
    // cost 2 ms, G = C 9 ms.
    let mut costs = Fake {
        cost: |l: &LayerOp| {
            Ok(Some(match group_in(l) {
                None => 1.0,
                Some(8) if stride(l) == 2 => 0.5,
                Some(8) => 3.0,
                Some(32) => 9.0,
                Some(_) => 2.0,
            }))
        },
        split: 2.0,
    };
    let d = dwauto::choose(&graph, &mut costs, 1).expect("chooses");
    let chosen: Vec<&str> = d.layers.iter().map(|l| l.chosen.as_str()).collect();
    assert_eq!(chosen, ["native", "G=8", "native"]);
    assert_eq!(d.refactorized(), 1);
    assert!(d.notes.is_empty(), "{:?}", d.notes);
    for l in &d.layers {
        assert_eq!(l.channels, 32);
        let forms: Vec<&str> = l.alternatives.iter().map(|a| a.form.as_str()).collect();
        assert_eq!(forms, ["native", "G=4", "G=8", "G=16", "G=C"]);
    }

    // A split that halves every form's cost: each alternative is costed at its best split.
    let mut costs = Fake {
        cost: |l: &LayerOp| Ok(Some(if group_in(l).is_some() { 1.5 } else { 1.0 })),
        split: 0.5,
    };
    let d = dwauto::choose(&graph, &mut costs, 1).expect("chooses");
    for l in &d.layers {
        assert_eq!(l.chosen, "native");
        assert_eq!(l.alternatives[0].ms, Some(0.5));
        assert_eq!(l.alternatives[0].gpu_channels, 16);
        assert_eq!(l.alternatives[1].ms, Some(0.75));
    }

    // Every grouped form cheaper than native: the cheapest (first on ties) wins everywhere, and
    // the rewrite turns each layer into the chosen grouped convolution.
    let mut costs = Fake {
        cost: |l: &LayerOp| {
            Ok(Some(match group_in(l) {
                None => 1.0,
                Some(16) => 0.25,
                Some(_) => 0.5,
            }))
        },
        split: 2.0,
    };
    let d = dwauto::choose(&graph, &mut costs, 1).expect("chooses");
    assert!(d.layers.iter().all(|l| l.chosen == "G=16"));
    let mut rewritten = graph.clone();
    assert_eq!(
        dwauto::apply_forms(&mut rewritten, &d.forms()).expect("rewrites"),
        3
    );
    let a = compile(
        rewritten,
        &CompileOptions {
            refactor_depthwise: RefactorDepthwise::Off,
            ..CompileOptions::cpu(1, "t")
        },
    )
    .expect("compiles");
    let groups: Vec<usize> = a
        .steps
        .iter()
        .filter_map(|s| match &s.kernel {
            Kernel::Conv2d(p) => Some(p.group_in()),
            _ => None,
        })
        .collect();
    assert_eq!(groups, [16, 16, 16]);
}

#[test]
fn alternatives_without_a_predictor_leave_the_layer_native_with_a_note() {
    let graph = prepared();
    let mut costs = Fake {
        cost: |l: &LayerOp| match group_in(l) {
            None => Ok(Some(1.0)),
            Some(32) => Ok(Some(5.0)),
            Some(_) => bail!("the profile has no predictor for executor 'cpu_gconv_t1'"),
        },
        split: 2.0,
    };
    let d = dwauto::choose(&graph, &mut costs, 1).expect("a missing predictor is not an error");
    assert!(d.layers.iter().all(|l| l.chosen == "native"));
    assert_eq!(d.refactorized(), 0);
    assert_eq!(d.notes.len(), 1, "{:?}", d.notes);
    assert!(d.notes[0].contains("cpu_gconv_t1"), "{}", d.notes[0]);
    let g4 = &d.layers[0].alternatives[1];
    assert_eq!((g4.form.as_str(), g4.ms), ("G=4", None));
    assert!(g4.unavailable.is_some());
}

fn executor(name: &str, cols: Vec<usize>, coef: Vec<f64>) -> Executor {
    let features = feature_names(name, true);
    Executor {
        forest: Forest::new(features.len(), vec![]),
        features,
        dispatch_features: true,
        kernel_counts: !tandem_predictors::features::kernel_count_names(name).is_empty(),
        params: BTreeMap::new(),
        baseline: Baseline {
            cols,
            coef,
            additive: None,
        },
        scale: 1.0,
    }
}

/// The shipped profile with chosen executors replaced: `linear` ones cost `k · (channels + 1)`
/// ms, `constant` ones `ms` whatever the layer.
fn profile_with(linear: &[(&str, f64)], constant: &[(&str, f64)]) -> Profile {
    let mut p = Profile::load(&shipped_dir().join("pocl-1core.profile")).expect("shipped profile");
    for &(name, k) in linear {
        // Feature 9 is the part's channel count.
        p.executors
            .insert(name.into(), executor(name, vec![9], vec![k.ln(), 1.0]));
    }
    for &(name, ms) in constant {
        p.executors
            .insert(name.into(), executor(name, vec![], vec![ms.ln()]));
    }
    p.sync_ms = 1e-4;
    p
}

fn run(artifact: Artifact, graph: &Graph) -> Vec<Vec<f32>> {
    let model = Model::from_artifact(artifact);
    let mut s = Session::with_options(
        &model,
        SessionOptions {
            threads: 1,
            ..SessionOptions::default()
        },
    )
    .expect("session");
    s.run(&seeded_inputs(graph, SEED))
        .expect("runs")
        .iter()
        .map(|o| o.to_f32().expect("f32"))
        .collect()
}

#[test]
fn auto_with_a_profile_chooses_per_layer_and_matches_off_on_cpu_and_split() {
    let gpu = GpuDevice::open()
        .unwrap_or_else(|e| panic!("an OpenCL device is needed (pocl-opencl-icd): {e}"))
        .info;
    let graph = chain();
    let dense = [
        "cpu_conv_t1",
        "conv_generic",
        "conv_winograd",
        "conv_constants",
    ];
    let native = ["cpu_dwconv_t1", "depthwise_3x3", "depthwise_generic"];
    let grouped = ["conv_grouped", "conv_constants_grouped"];
    let compile_auto = |profile: Profile| {
        compile_with_report(
            graph.clone(),
            &CompileOptions {
                plan: Plan::Predicted {
                    profile: std::sync::Arc::new(profile),
                    source: "test".into(),
                },
                gpu: Some(gpu.clone()),
                refactor_depthwise: RefactorDepthwise::Auto,
                ..CompileOptions::cpu(1, "t")
            },
        )
        .expect("compiles")
    };

    // Grouped convolutions predicted cheap (linear in the channels, same on both devices, so
    // that a split halves them), native and dense slow: every layer takes G = 4 (the first of
    // the equally cheap grouped forms) and is split.
    let mut linear: Vec<(&str, f64)> = grouped.iter().map(|&n| (n, 1e-3)).collect();
    linear.push(("cpu_gconv_t1", 1e-3));
    let slow: Vec<(&str, f64)> = native.iter().chain(&dense).map(|&n| (n, 10.0)).collect();
    let (auto, report) = compile_auto(profile_with(&linear, &slow));
    let report = report.expect("a plan report");
    let chosen: Vec<&str> = report.depthwise.iter().map(|l| l.chosen.as_str()).collect();
    assert_eq!(chosen, ["G=4", "G=4", "G=4"], "{}", report.table());
    assert!(report.table().contains("depthwise forms"));
    let splits = auto
        .steps
        .iter()
        .filter(|s| {
            matches!(&s.kernel, Kernel::Conv2d(p) if p.group_in() == 4)
                && matches!(s.placement, Placement::Split { .. })
        })
        .count();
    assert_eq!(splits, 3, "{}", report.table());

    // The same outputs as native (off), on the CPU alone and with the planned GPU split.
    let off = compile(
        graph.clone(),
        &CompileOptions {
            refactor_depthwise: RefactorDepthwise::Off,
            ..CompileOptions::cpu(1, "t")
        },
    )
    .expect("compiles");
    let want = run(off, &graph);
    let forms = dwauto::forms_of(&report.depthwise);
    let cpu_auto = compile(
        graph.clone(),
        &CompileOptions {
            depthwise_forms: Some(forms),
            ..CompileOptions::cpu(1, "t")
        },
    )
    .expect("compiles");
    for got in [run(cpu_auto, &graph), run(auto, &graph)] {
        for (g, w) in got.iter().zip(&want) {
            let err = relative_error(g, w);
            assert!(err <= 1e-5, "auto differs from off by {err:e}");
        }
    }

    // Native predicted cheap, grouped slow: every layer stays native.
    let cheap: Vec<(&str, f64)> = native.iter().map(|&n| (n, 1e-4)).collect();
    let mut slow: Vec<(&str, f64)> = grouped.iter().map(|&n| (n, 5.0)).collect();
    slow.push(("cpu_gconv_t1", 5.0));
    slow.extend(dense.iter().map(|&n| (n, 5.0)));
    slow.extend(cheap);
    let (auto, report) = compile_auto(profile_with(&[], &slow));
    let report = report.expect("a plan report");
    assert!(report.depthwise.iter().all(|l| l.chosen == "native"));
    assert_eq!(
        auto.steps
            .iter()
            .filter(|s| matches!(s.kernel, Kernel::DepthwiseConv2d(_)))
            .count(),
        3
    );
}

/// MobileNetV2 planned with `auto` from `profile`.
fn mobilenet_v2_auto(profile: std::path::PathBuf) -> tandem_compiler::planner::PlanReport {
    let gpu = GpuDevice::open()
        .unwrap_or_else(|e| panic!("an OpenCL device is needed (pocl-opencl-icd): {e}"))
        .info;
    let model = tandem_models::by_name("mobilenet_v2").expect("zoo model");
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("mobilenet_v2.tflite");
    std::fs::write(&path, model.tflite().expect("builds")).expect("writes");
    let base = CompileOptions {
        refactor_depthwise: RefactorDepthwise::Auto,
        ..CompileOptions::cpu(1, "t")
    };
    let planned =
        compile_planned(&path, &base, &PlanSource::Profile(profile), Some(gpu)).expect("plans");
    planned.report.expect("a plan report")
}

#[test]
fn the_shipped_profile_costs_every_form_and_auto_keeps_the_cheapest() {
    let report = mobilenet_v2_auto(shipped_dir().join("pocl-1core.profile"));
    assert_eq!(report.depthwise.len(), 17);
    for l in &report.depthwise {
        let costs: Vec<(&str, f64)> = l
            .alternatives
            .iter()
            .map(|a| (a.form.as_str(), a.ms.expect("every form has predictors")))
            .collect();
        assert!(costs.len() >= 4, "{costs:?}");
        let cheapest = costs
            .iter()
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map(|c| c.0)
            .expect("forms");
        assert_eq!(l.chosen, cheapest, "{costs:?}");
    }
    assert!(
        !report
            .notes
            .iter()
            .any(|n| n.contains("could not be costed")),
        "{:?}",
        report.notes
    );
}

#[test]
fn a_profile_without_grouped_predictors_keeps_depthwise_native_with_a_note() {
    let mut profile =
        Profile::load(&shipped_dir().join("pocl-1core.profile")).expect("shipped profile");
    profile
        .executors
        .retain(|name, _| !name.contains("gconv") && !name.contains("grouped"));
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("no-gconv.profile");
    profile.save(&path).expect("saves");
    let report = mobilenet_v2_auto(path);
    assert_eq!(report.depthwise.len(), 17);
    for l in &report.depthwise {
        // Only the dense G = C form has predictors in this profile.
        assert!(l.chosen == "native" || l.chosen == "G=C", "{}", l.chosen);
        assert!(l
            .alternatives
            .iter()
            .filter(|a| a.form != "native" && a.form != "G=C")
            .all(|a| a.ms.is_none()));
    }
    assert!(
        report
            .notes
            .iter()
            .any(|n| n.contains("could not be costed")),
        "{:?}",
        report.notes
    );
    assert!(report.table().contains("note: "));
}
