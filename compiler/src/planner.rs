//! The split planner: where each lowered step runs, and how many output channels of each conv,
//! depthwise and fully-connected step go to the GPU.
//!
//! Contracts:
//! - Every splittable step (a kernel with output channels, [`split_channels`]) gets candidates
//!   `g = 0, w, 2w, …, C` GPU channels (`w` the GPU kernel's vector width; `0` is CPU only and
//!   `C` GPU only), each with a cost `max(cpu(C − g), gpu(g)) + sync` (sync only when both
//!   devices run; a profile with contention adds `excess · min(cpu, gpu)`,
//!   `tandem_predictors::corun`). Costs come from a [`CostModel`]: the device profile's predictors
//!   ([`Predicted`]) or measurements on this device ([`Measured`], the papers' grid search).
//! - Every other step runs whole on one device. Its cost is an estimate from the bytes it reads
//!   and writes ([`MoveCost`]; there is no predictor for element-wise ops); only steps whose work
//!   is proportional to their bytes (element-wise, pooling, reshapes, concatenation, …) are
//!   offered the GPU, the others (transposed convolutions, batched matmuls, …) stay on the CPU.
//! - Placements are chosen over the whole execution order by a dynamic program ([`solve`]) whose
//!   state is which device holds the last step's output (CPU, GPU, or both after a split). A step
//!   on one device after a step on the other pays one sync; a split step after a single-device
//!   step pays one sync (the other device waits for its input) on top of its own join. The plan
//!   ends with the host reading the outputs: a last step on the GPU pays one sync. This is exact
//!   for chains; for branching graphs it charges transitions along the execution order, an
//!   approximation of the real data dependencies (`tandem_runtime::sync::dependencies`).

use anyhow::{bail, Context, Result};
use serde::Serialize;
use tandem_predictors::bundle::{split_step, ProfileError};
use tandem_predictors::{Layer, Profile};
use tandem_runtime::artifact::{Kernel, Placement, Step, TensorDesc};
use tandem_runtime::gpu::dispatch::vector_width;
use tandem_runtime::gpu::launch::split_channels;
use tandem_runtime::profile::{LayerOp, MeasureOptions, Profiler};

/// One way to run a step, with its costs in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Choice {
    /// GPU output channels (splittable steps), or 0 (CPU) / 1 (GPU) for the others.
    pub gpu_channels: usize,
    #[serde(skip)]
    pub placement: Placement,
    /// Latency of the CPU part (0 when the CPU has no part).
    pub cpu_ms: f64,
    /// Latency of the GPU part (0 when the GPU has no part).
    pub gpu_ms: f64,
    /// Cost of the step alone: `max(cpu, gpu)`, plus the join's sync for a split.
    pub ms: f64,
}

/// The choices of one step.
#[derive(Debug, Clone, PartialEq)]
pub struct StepChoices {
    pub choices: Vec<Choice>,
    /// Whether the costs are the bytes-based estimate rather than predictions or measurements.
    pub estimated: bool,
}

/// Which device holds the output of the previous step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Holder {
    Cpu = 0,
    Gpu = 1,
    Both = 2,
}

fn holder_after(p: Placement) -> Holder {
    match p {
        Placement::Cpu => Holder::Cpu,
        Placement::Gpu => Holder::Gpu,
        Placement::Split { .. } => Holder::Both,
    }
}

/// The sync paid to start a step placed at `p` after a step whose output `prev` holds.
fn transition(prev: Holder, p: Placement, sync_ms: f64) -> f64 {
    match (prev, p) {
        (Holder::Gpu, Placement::Cpu) | (Holder::Cpu, Placement::Gpu) => sync_ms,
        (Holder::Cpu | Holder::Gpu, Placement::Split { .. }) => sync_ms,
        _ => 0.0,
    }
}

/// The best choice per step and the total cost (steps plus transitions).
#[derive(Debug, Clone, PartialEq)]
pub struct Solution {
    /// Index into each step's `choices`.
    pub chosen: Vec<usize>,
    pub total_ms: f64,
}

/// Minimises the sum of step costs and transition syncs over the execution order (see the
/// module docs). The inputs start visible to both devices. Errors when a step has no choice or
/// a cost is not a finite non-negative number.
pub fn solve(steps: &[StepChoices], sync_ms: f64) -> Result<Solution> {
    const INF: f64 = f64::INFINITY;
    // best[h]: least cost of the steps so far with their last output held by h.
    let mut best = [INF, INF, 0.0];
    // back[s][h] = (choice, previous holder).
    let mut back: Vec<[(usize, usize); 3]> = Vec::with_capacity(steps.len());
    for (s, step) in steps.iter().enumerate() {
        if step.choices.is_empty() {
            bail!("step {s} has no placement to choose from");
        }
        let mut next = [INF; 3];
        let mut from = [(usize::MAX, usize::MAX); 3];
        for (i, c) in step.choices.iter().enumerate() {
            if !(c.ms.is_finite() && c.ms >= 0.0) {
                bail!("step {s}: choice {i} has cost {} ms", c.ms);
            }
            let h = holder_after(c.placement) as usize;
            for (prev, &cost) in best.iter().enumerate() {
                if cost == INF {
                    continue;
                }
                let holder = [Holder::Cpu, Holder::Gpu, Holder::Both][prev];
                let total = cost + transition(holder, c.placement, sync_ms) + c.ms;
                if total < next[h] {
                    next[h] = total;
                    from[h] = (i, prev);
                }
            }
        }
        best = next;
        back.push(from);
    }
    // The host reads the outputs: a GPU-held result costs one more sync.
    let finals = [best[0], best[1] + sync_ms, best[2]];
    let (mut h, total_ms) = finals
        .iter()
        .copied()
        .enumerate()
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .unwrap_or((2, 0.0));
    let mut chosen = vec![0; steps.len()];
    for s in (0..steps.len()).rev() {
        let (i, prev) = back[s][h];
        chosen[s] = i;
        h = prev;
    }
    Ok(Solution { chosen, total_ms })
}

/// Costs of running steps: the predictors or the device itself.
pub trait CostModel {
    /// Every candidate split of a splittable step with `c` output channels (including 0 and C),
    /// or `None` when this model cannot cost the layer (the planner then keeps it on the CPU).
    fn split(&mut self, layer: &LayerOp, threads: usize) -> Result<Option<Vec<Choice>>>;
    /// Join overhead of one cross-device sync, ms.
    fn sync_ms(&self) -> f64;
    /// What the costs are, for reports (`predicted (profile …)`, `measured`).
    fn describe(&self) -> String;
}

/// The placement of `g` GPU channels of a splittable step with `c` channels.
fn split_placement(g: usize, c: usize) -> Placement {
    if g == 0 {
        Placement::Cpu
    } else if g >= c {
        Placement::Gpu
    } else {
        Placement::Split { gpu_channels: g }
    }
}

/// The candidate GPU channel counts of `layer`: multiples of the kernel's vector width, and C;
/// coarsened (multiples of the width) to at most `max` candidates when `max > 1`.
pub fn candidates(layer: &LayerOp, max: usize) -> Vec<usize> {
    let c = layer.channels();
    // `max` candidates are `max - 1` steps (0 and C both count).
    let step = split_step(c, vector_width(layer.gpu_op()), max.saturating_sub(1));
    let mut out: Vec<usize> = (0..c).step_by(step).collect();
    out.push(c);
    out
}

/// Costs from a device profile's predictors.
pub struct Predicted<'p> {
    pub profile: &'p Profile,
    /// Where the profile came from, for reports.
    pub source: String,
}

impl CostModel for Predicted<'_> {
    fn split(&mut self, layer: &LayerOp, threads: usize) -> Result<Option<Vec<Choice>>> {
        let Ok(l) = Layer::from_op(layer) else {
            return Ok(None);
        };
        let c = layer.channels();
        // Grouped convolutions have executors of their own (`cpu_gconv_tN`, `conv_grouped`);
        // profiles measured before them cannot cost these layers, which then stay on the CPU
        // as before (and `--refactor-depthwise auto` keeps the depthwise form, with a note).
        let grouped = l.op == tandem_predictors::features::OpKind::GroupedConv;
        if grouped && !tandem_predictors::bundle::has_cpu(self.profile, l.op, threads) {
            return Ok(None);
        }
        match self.profile.sweep(&l, threads) {
            Ok(all) => Ok(Some(
                all.into_iter()
                    .map(|k| Choice {
                        gpu_channels: k.gpu_channels,
                        placement: split_placement(k.gpu_channels, c),
                        cpu_ms: k.cpu_ms,
                        gpu_ms: k.gpu_ms,
                        ms: k.total_ms,
                    })
                    .collect(),
            )),
            Err(ProfileError::NoExecutor(e))
                if e.starts_with("cpu_") && !e.starts_with("cpu_gconv_") =>
            {
                bail!(
                "the profile {} has no CPU predictor '{e}': it was not measured with {threads} \
                 CPU threads (plan for the thread count it was measured with)",
                    self.source
                )
            }
            Err(ProfileError::NoExecutor(_)) if grouped => Ok(None),
            Err(e) => Err(e).with_context(|| format!("predicting {} ({})", layer.kind(), c)),
        }
    }

    fn sync_ms(&self) -> f64 {
        self.profile.sync_ms()
    }

    fn describe(&self) -> String {
        let contention: Vec<String> = self
            .profile
            .contention
            .iter()
            .map(|(k, c)| format!("{k} {:.1}%", 100.0 * c.excess))
            .collect();
        if contention.is_empty() {
            format!("predicted ({})", self.source)
        } else {
            format!(
                "predicted ({}; split contention {})",
                self.source,
                contention.join(", ")
            )
        }
    }
}

/// Costs measured on this machine's OpenCL device and CPU (the papers' grid search): each
/// candidate's GPU part and CPU part timed apart by [`Profiler`] (the `cpu_ms` and `gpu_ms`
/// of its [`Choice`]); a split's cost is the split step itself, both parts timed side by side
/// as a session runs them, the join included (`LayerBench::split`), so that it holds the
/// contention of the two sides; a single device's cost is its part.
pub struct Measured {
    pub profiler: Profiler,
    pub options: MeasureOptions,
    /// At most this many candidates per layer (the grid is coarsened; 0: every multiple of the
    /// vector width).
    pub max_candidates: usize,
    sync_ms: f64,
    seed: u64,
}

impl Measured {
    /// Measures the sync overhead once with `options`.
    pub fn new(
        mut profiler: Profiler,
        options: MeasureOptions,
        max_candidates: usize,
    ) -> Result<Measured> {
        let sync_ms = profiler
            .sync(&options)
            .context("measuring the sync overhead")?
            .median_ms;
        Ok(Measured {
            profiler,
            options,
            max_candidates,
            sync_ms,
            seed: 1,
        })
    }
}

impl CostModel for Measured {
    fn split(&mut self, layer: &LayerOp, threads: usize) -> Result<Option<Vec<Choice>>> {
        let c = layer.channels();
        let grid = candidates(layer, self.max_candidates);
        self.seed += 1;
        let options = self.options;
        let mut bench = self
            .profiler
            .layer(layer, &grid, self.seed)
            .with_context(|| format!("preparing {} with {c} channels", layer.kind()))?;
        let mut out = Vec::with_capacity(grid.len());
        for &g in &grid {
            let gpu_ms = if g == 0 {
                0.0
            } else {
                bench
                    .gpu(g, &options)
                    .with_context(|| format!("measuring {g} GPU channels"))?
                    .1
                    .median_ms
            };
            let cpu_ms = if g == c {
                0.0
            } else {
                bench.cpu(c - g, threads, &options).median_ms
            };
            let ms = if g > 0 && g < c {
                bench
                    .split(g, threads, &options)
                    .with_context(|| format!("measuring a split at {g} GPU channels"))?
                    .median_ms
            } else {
                cpu_ms.max(gpu_ms)
            };
            out.push(Choice {
                gpu_channels: g,
                placement: split_placement(g, c),
                cpu_ms,
                gpu_ms,
                ms,
            });
        }
        Ok(Some(out))
    }

    fn sync_ms(&self) -> f64 {
        self.sync_ms
    }

    fn describe(&self) -> String {
        format!(
            "measured on {} (grid search, ≤{} candidates per layer)",
            self.profiler.device().label(),
            if self.max_candidates == 0 {
                "all".to_string()
            } else {
                self.max_candidates.to_string()
            }
        )
    }
}

/// The bytes-based cost of steps without a predictor: `bytes / bandwidth` on each device, plus
/// a launch cost on the GPU. The defaults are rough figures for one core of this class of
/// machine (CPU ≈ 4 GB/s for a streaming element-wise kernel; PoCL's one-thread GPU ≈ 2 GB/s
/// plus 20 µs per launch); they matter only in deciding whether a transition pays off.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MoveCost {
    pub cpu_bytes_per_ms: f64,
    pub gpu_bytes_per_ms: f64,
    pub gpu_launch_ms: f64,
}

impl Default for MoveCost {
    fn default() -> Self {
        MoveCost {
            cpu_bytes_per_ms: 4e6,
            gpu_bytes_per_ms: 2e6,
            gpu_launch_ms: 0.02,
        }
    }
}

/// Bytes a step reads (activations and constants) and writes.
fn step_bytes(step: &Step, tensors: &[TensorDesc]) -> f64 {
    step.inputs
        .iter()
        .flatten()
        .chain(&step.outputs)
        .filter_map(|&t| tensors.get(t))
        .map(|t| t.elements() as f64 * 4.0)
        .sum()
}

/// Whether a non-splittable kernel's work is proportional to the bytes it moves (so the
/// bytes-based estimate holds and the GPU may take it).
fn bytes_bound(kernel: &Kernel) -> bool {
    !matches!(
        kernel,
        Kernel::TransposeConv(_) | Kernel::BatchMatMul(_) | Kernel::Conv2d(_)
    ) && split_channels(kernel).is_none()
}

/// One row of the plan table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// Step index in execution order.
    pub step: usize,
    /// Step name (`CONV_2D #12`: operator and node index as in `tandem inspect`).
    pub name: String,
    /// Output shape.
    pub shape: Vec<usize>,
    /// Output channels a split divides (`None`: not splittable).
    pub channels: Option<usize>,
    /// `cpu`, `gpu` or `split`.
    pub device: String,
    pub gpu_channels: usize,
    /// Cost of the whole step on the CPU alone and on the GPU alone.
    pub cpu_ms: f64,
    pub gpu_ms: f64,
    /// Cost of the chosen placement (for a split: max of the parts plus the join).
    pub planned_ms: f64,
    /// `min(cpu, gpu) / planned`.
    pub speedup: f64,
    /// Whether the costs are the bytes-based estimate.
    pub estimated: bool,
}

/// A whole plan with its predicted (or measured) totals.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanReport {
    /// Where the costs come from.
    pub costs: String,
    pub threads: usize,
    pub sync_ms: f64,
    pub rows: Vec<Row>,
    /// Sum over steps, everything on the CPU.
    pub cpu_only_ms: f64,
    /// Sum over steps, everything on the GPU (plus the final sync).
    pub gpu_only_ms: f64,
    /// The plan's cost, transitions included.
    pub plan_ms: f64,
    /// Device transitions the plan pays along the execution order.
    pub transitions: usize,
    /// The form each depthwise layer got under `--refactor-depthwise auto` (empty otherwise).
    pub depthwise: Vec<crate::dwauto::DepthwiseLayer>,
    /// Remarks on the plan (e.g. alternatives that could not be costed).
    pub notes: Vec<String>,
}

impl PlanReport {
    /// The placement of every step, in execution order.
    pub fn placements(&self) -> Vec<Placement> {
        self.rows
            .iter()
            .map(|r| match (r.device.as_str(), r.channels) {
                ("gpu", _) => Placement::Gpu,
                ("split", Some(_)) => Placement::Split {
                    gpu_channels: r.gpu_channels,
                },
                _ => Placement::Cpu,
            })
            .collect()
    }

    /// Predicted speedup of the plan over the better single device.
    pub fn speedup(&self) -> f64 {
        self.cpu_only_ms.min(self.gpu_only_ms) / self.plan_ms.max(1e-12)
    }

    /// The readable table: every step with its split and costs, then totals.
    pub fn table(&self) -> String {
        let mut s = format!(
            "plan: costs {}, {} CPU thread(s), sync {:.1} µs\n",
            self.costs,
            self.threads,
            self.sync_ms * 1e3
        );
        s.push_str(&format!(
            "{:<28} {:<20} {:>11} {:>10} {:>10} {:>10} {:>8}\n",
            "node", "shape", "split", "CPU ms", "GPU ms", "plan ms", "speedup"
        ));
        for r in &self.rows {
            let split = match (r.device.as_str(), r.channels) {
                ("split", Some(c)) => format!("{}/{c} GPU", r.gpu_channels),
                (d, _) => d.to_uppercase(),
            };
            let mark = if r.estimated { "~" } else { " " };
            s.push_str(&format!(
                "{:<28} {:<20} {:>11} {:>9.3}{mark} {:>9.3}{mark} {:>9.3}{mark} {:>7.2}x\n",
                truncate(&r.name, 28),
                truncate(&format!("{:?}", r.shape), 20),
                split,
                r.cpu_ms,
                r.gpu_ms,
                r.planned_ms,
                r.speedup
            ));
        }
        let splits = self.rows.iter().filter(|r| r.device == "split").count();
        s.push_str(&format!(
            "total: CPU only {:.3} ms, GPU only {:.3} ms, plan {:.3} ms ({} split steps, {} \
             transitions): predicted speedup {:.2}x over the best single device\n\
             (~: bytes-based estimate, no predictor)\n",
            self.cpu_only_ms,
            self.gpu_only_ms,
            self.plan_ms,
            splits,
            self.transitions,
            self.speedup()
        ));
        s.push_str(&crate::dwauto::table(&self.depthwise));
        for n in &self.notes {
            s.push_str(&format!("note: {n}\n"));
        }
        s
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        s.chars().take(n - 1).chain(['…']).collect()
    }
}

/// The choices of every step (splittable ones from `costs`, the others from `moves`).
pub fn step_choices(
    steps: &[Step],
    tensors: &[TensorDesc],
    costs: &mut dyn CostModel,
    moves: &MoveCost,
    threads: usize,
) -> Result<Vec<StepChoices>> {
    let mut out = Vec::with_capacity(steps.len());
    for step in steps {
        let bytes = step_bytes(step, tensors);
        let cpu_est = bytes / moves.cpu_bytes_per_ms;
        let split = match LayerOp::from_kernel(&step.kernel) {
            Some(layer) => costs
                .split(&layer, threads)
                .with_context(|| format!("costing {}", step.name))?,
            None => None,
        };
        let choices = match split {
            Some(choices) => StepChoices {
                choices,
                estimated: false,
            },
            None => {
                let mut choices = vec![Choice {
                    gpu_channels: 0,
                    placement: Placement::Cpu,
                    cpu_ms: cpu_est,
                    gpu_ms: 0.0,
                    ms: cpu_est,
                }];
                if bytes_bound(&step.kernel) {
                    let gpu = moves.gpu_launch_ms + bytes / moves.gpu_bytes_per_ms;
                    choices.push(Choice {
                        gpu_channels: 1,
                        placement: Placement::Gpu,
                        cpu_ms: 0.0,
                        gpu_ms: gpu,
                        ms: gpu,
                    });
                }
                StepChoices {
                    choices,
                    estimated: true,
                }
            }
        };
        out.push(choices);
    }
    Ok(out)
}

/// Plans `steps` (an artifact's steps in execution order, over its `tensors`) with `costs`.
pub fn plan(
    steps: &[Step],
    tensors: &[TensorDesc],
    costs: &mut dyn CostModel,
    threads: usize,
) -> Result<PlanReport> {
    let choices = step_choices(steps, tensors, costs, &MoveCost::default(), threads)?;
    let sync = costs.sync_ms();
    let solution = solve(&choices, sync)?;
    let mut rows = Vec::with_capacity(steps.len());
    let (mut cpu_total, mut gpu_total) = (0.0, 0.0);
    let mut prev = Holder::Both;
    let mut transitions = 0;
    for (s, (step, sc)) in steps.iter().zip(&choices).enumerate() {
        let chosen = sc.choices[solution.chosen[s]];
        let cpu = sc
            .choices
            .iter()
            .find(|c| c.placement == Placement::Cpu)
            .map(|c| c.ms);
        let gpu = sc
            .choices
            .iter()
            .find(|c| c.placement == Placement::Gpu)
            .map(|c| c.ms);
        // A step that cannot run on the GPU counts at its CPU cost in the GPU-only total.
        let cpu_ms = cpu.unwrap_or(f64::INFINITY);
        let gpu_ms = gpu.unwrap_or(cpu_ms);
        cpu_total += cpu_ms;
        gpu_total += gpu_ms;
        if transition(prev, chosen.placement, 1.0) > 0.0 {
            transitions += 1;
        }
        prev = holder_after(chosen.placement);
        let device = match chosen.placement {
            Placement::Cpu => "cpu",
            Placement::Gpu => "gpu",
            Placement::Split { .. } => "split",
        };
        rows.push(Row {
            step: s,
            name: step.name.clone(),
            shape: step
                .outputs
                .first()
                .and_then(|&t| tensors.get(t))
                .map(|t| t.shape.clone())
                .unwrap_or_default(),
            channels: split_channels(&step.kernel).filter(|_| !sc.estimated),
            device: device.into(),
            gpu_channels: match chosen.placement {
                Placement::Split { gpu_channels } => gpu_channels,
                Placement::Gpu => split_channels(&step.kernel).unwrap_or(0),
                Placement::Cpu => 0,
            },
            cpu_ms,
            gpu_ms,
            planned_ms: chosen.ms,
            speedup: cpu_ms.min(gpu_ms) / chosen.ms.max(1e-12),
            estimated: sc.estimated,
        });
    }
    if prev == Holder::Gpu {
        transitions += 1;
    }
    Ok(PlanReport {
        costs: costs.describe(),
        threads,
        sync_ms: sync,
        rows,
        cpu_only_ms: cpu_total,
        gpu_only_ms: gpu_total + sync,
        plan_ms: solution.total_ms,
        transitions,
        depthwise: Vec::new(),
        notes: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn single(cpu: f64, gpu: f64) -> StepChoices {
        StepChoices {
            choices: vec![
                Choice {
                    gpu_channels: 0,
                    placement: Placement::Cpu,
                    cpu_ms: cpu,
                    gpu_ms: 0.0,
                    ms: cpu,
                },
                Choice {
                    gpu_channels: 1,
                    placement: Placement::Gpu,
                    cpu_ms: 0.0,
                    gpu_ms: gpu,
                    ms: gpu,
                },
            ],
            estimated: true,
        }
    }

    fn split(c: usize, cpu_per_ch: f64, gpu_per_ch: f64, sync: f64) -> StepChoices {
        let choices = (0..=c)
            .step_by(8)
            .map(|g| {
                let (cm, gm) = ((c - g) as f64 * cpu_per_ch, g as f64 * gpu_per_ch);
                Choice {
                    gpu_channels: g,
                    placement: split_placement(g, c),
                    cpu_ms: cm,
                    gpu_ms: gm,
                    ms: cm.max(gm) + if g > 0 && g < c { sync } else { 0.0 },
                }
            })
            .collect();
        StepChoices {
            choices,
            estimated: false,
        }
    }

    /// Every assignment, scored with the same transition rules: the DP must match it.
    fn brute(steps: &[StepChoices], sync: f64) -> f64 {
        fn go(steps: &[StepChoices], sync: f64, prev: Holder) -> f64 {
            match steps.split_first() {
                None => {
                    if prev == Holder::Gpu {
                        sync
                    } else {
                        0.0
                    }
                }
                Some((first, rest)) => first
                    .choices
                    .iter()
                    .map(|c| {
                        transition(prev, c.placement, sync)
                            + c.ms
                            + go(rest, sync, holder_after(c.placement))
                    })
                    .fold(f64::INFINITY, f64::min),
            }
        }
        go(steps, sync, Holder::Both)
    }

    #[test]
    fn a_cheap_gpu_op_between_cpu_steps_stays_on_the_cpu_when_transitions_cost_more() {
        // GPU saves 0.5 ms on the middle op, but going there and back costs 2 × 1 ms.
        let steps = [single(1.0, 9.0), single(2.0, 1.5), single(1.0, 9.0)];
        let sol = solve(&steps, 1.0).expect("solves");
        assert_eq!(sol.chosen, vec![0, 0, 0]);
        assert!((sol.total_ms - 4.0).abs() < 1e-12);
        // With cheap transitions the detour pays: 1 + 0.1 + 1.5 + 0.1 + 1.
        let sol = solve(&steps, 0.1).expect("solves");
        assert_eq!(sol.chosen, vec![0, 1, 0]);
        assert!((sol.total_ms - 3.7).abs() < 1e-12);
    }

    #[test]
    fn a_split_balances_the_two_devices() {
        // CPU 1 ms/channel-block, GPU 3x slower: the optimum gives the GPU about a quarter.
        let steps = [split(64, 0.1, 0.3, 0.01)];
        let sol = solve(&steps, 0.01).expect("solves");
        let c = steps[0].choices[sol.chosen[0]];
        assert_eq!(c.gpu_channels, 16); // CPU 4.8, GPU 4.8
        assert!((sol.total_ms - (4.8 + 0.01)).abs() < 1e-9);
    }

    #[test]
    fn the_dynamic_program_equals_exhaustive_search() {
        let mut rng = tandem_runtime::rng::Rng::new(42);
        for case in 0..40 {
            let n = 1 + case % 6;
            let steps: Vec<StepChoices> = (0..n)
                .map(|i| {
                    let r: Vec<f64> = rng.uniform(3, 1.0).into_iter().map(f64::from).collect();
                    if i % 2 == 0 {
                        split(32, 0.05 + r[0].abs() * 0.1, 0.1 + r[1].abs() * 0.3, 0.02)
                    } else {
                        single(r[0].abs() + 0.01, r[1].abs() * 2.0 + 0.01)
                    }
                })
                .collect();
            let sync = 0.05 * (case % 4) as f64;
            let sol = solve(&steps, sync).expect("solves");
            let exact = brute(&steps, sync);
            assert!(
                (sol.total_ms - exact).abs() < 1e-9,
                "case {case}: dp {} brute {exact}",
                sol.total_ms
            );
            // The chosen assignment costs what the DP says.
            let mut prev = Holder::Both;
            let mut total = 0.0;
            for (s, &i) in steps.iter().zip(&sol.chosen) {
                let c = s.choices[i];
                total += transition(prev, c.placement, sync) + c.ms;
                prev = holder_after(c.placement);
            }
            if prev == Holder::Gpu {
                total += sync;
            }
            assert!((total - sol.total_ms).abs() < 1e-9);
        }
    }

    #[test]
    fn bad_costs_are_errors() {
        let mut s = single(1.0, 1.0);
        s.choices[1].ms = f64::NAN;
        assert!(solve(&[s], 0.0).is_err());
        let empty = StepChoices {
            choices: vec![],
            estimated: true,
        };
        assert!(solve(&[empty], 0.0).is_err());
        assert_eq!(solve(&[], 0.0).expect("solves").chosen, Vec::<usize>::new());
    }

    #[test]
    fn candidates_step_by_the_vector_width_and_include_both_ends() {
        use tandem_runtime::cpu::fully_connected::FullyConnectedParams;
        let fc = LayerOp::Linear(FullyConnectedParams {
            rows: 1,
            depth: 16,
            units: 36,
            activation: tandem_runtime::cpu::activation::Activation::None,
        });
        assert_eq!(candidates(&fc, 0), vec![0, 8, 16, 24, 32, 36]);
        let coarse = candidates(&fc, 4);
        assert!(coarse.len() <= 4, "{coarse:?}");
        assert_eq!((coarse[0], *coarse.last().expect("candidates")), (0, 36));
        assert!(coarse.iter().all(|g| g % 8 == 0 || *g == 36));
    }
}
