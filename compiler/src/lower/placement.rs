//! Placing the lowered steps on the CPU, the GPU, or both (split by output channel), and adding
//! the GPU layouts of their weights.

use super::Lowering;
use anyhow::{anyhow, bail, ensure, Context, Result};
use std::sync::Arc;
use tandem_predictors::Profile;
use tandem_runtime::artifact::{Kernel, Placement, Storage};
use tandem_runtime::gpu::dispatch::{vector_width, GpuOp};
use tandem_runtime::gpu::launch::{decide, split_channels};
use tandem_runtime::gpu::layout::gpu_constants;

/// Which device runs each step: hand-made plans, or the planner's ([`crate::planner`]).
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Plan {
    /// Every step on the CPU.
    #[default]
    CpuOnly,
    /// Every step on the GPU.
    GpuOnly,
    /// Every splittable step gets `round(F·C)` GPU channels (rounded to the kernel's vector
    /// width; 0 means CPU, C means GPU); every other step runs on the CPU.
    SplitFraction(f64),
    /// `(node, GPU channels)` for single nodes (node index as in `tandem inspect`); every other
    /// step runs on the CPU.
    Nodes(Vec<(usize, usize)>),
    /// The planner's plan from a device profile's predictions (`source` names the profile in
    /// reports).
    Predicted {
        profile: Arc<Profile>,
        source: String,
    },
    /// One placement per lowered step, in execution order (a plan made earlier, e.g. by the
    /// planner in oracle mode over a CPU-only compilation of the same model and options).
    Steps(Vec<Placement>),
}

impl Plan {
    /// Parses `NODE=G,NODE=G,…`.
    pub fn parse_nodes(text: &str) -> Result<Plan> {
        let mut nodes = Vec::new();
        for part in text.split(',').filter(|p| !p.trim().is_empty()) {
            let (node, g) = part
                .split_once('=')
                .ok_or_else(|| anyhow!("'{part}' is not NODE=GPU_CHANNELS"))?;
            let node: usize = node
                .trim()
                .trim_start_matches('#')
                .parse()
                .with_context(|| format!("node '{node}' in '{part}' is not a number"))?;
            let g: usize = g
                .trim()
                .parse()
                .with_context(|| format!("GPU channels '{g}' in '{part}' is not a number"))?;
            nodes.push((node, g));
        }
        ensure!(!nodes.is_empty(), "--split needs at least one NODE=G");
        Ok(Plan::Nodes(nodes))
    }
}

/// The placement of a step with `channels` output channels (`None`: not splittable) given
/// `gpu` requested GPU channels.
fn placement_for(channels: Option<usize>, gpu: usize) -> Placement {
    match channels {
        Some(c) if gpu >= c => Placement::Gpu,
        Some(_) if gpu == 0 => Placement::Cpu,
        Some(_) => Placement::Split { gpu_channels: gpu },
        None if gpu > 0 => Placement::Gpu,
        None => Placement::Cpu,
    }
}

/// `round(f · c)` rounded to a multiple of `width`, within `[0, c]`.
pub fn fraction_channels(f: f64, c: usize, width: usize) -> usize {
    let g = (f.clamp(0.0, 1.0) * c as f64).round() as usize;
    let w = width.max(1);
    let rounded = ((g as f64 / w as f64).round() as usize) * w;
    rounded.min(c)
}

impl Lowering<'_> {
    /// Sets every step's placement from `options.plan` and adds GPU operands.
    pub(super) fn place(&mut self, options: &super::CompileOptions) -> Result<()> {
        if options.plan == Plan::CpuOnly {
            return Ok(());
        }
        let device = options
            .gpu
            .clone()
            .context("a plan that uses the GPU needs the GPU's description")?;
        let planned: Option<Vec<Placement>> = match &options.plan {
            Plan::Predicted { profile, source } => {
                let mut costs = crate::planner::Predicted {
                    profile,
                    source: source.clone(),
                };
                let report = crate::planner::plan(
                    &self.steps,
                    &self.tensors,
                    &mut costs,
                    options.threads.max(1),
                )?;
                let placements = report.placements();
                self.report = Some(report);
                Some(placements)
            }
            Plan::Steps(p) => {
                ensure!(
                    p.len() == self.steps.len(),
                    "the plan places {} steps, the model lowers to {}",
                    p.len(),
                    self.steps.len()
                );
                Some(p.clone())
            }
            _ => None,
        };
        if let Plan::Nodes(nodes) = &options.plan {
            for (node, _) in nodes {
                ensure!(
                    self.step_nodes.iter().any(|n| n.index() == *node),
                    "--split names node {node}, which is not an operator of the model"
                );
            }
        }
        for s in 0..self.steps.len() {
            let kernel = &self.steps[s].kernel;
            let channels = split_channels(kernel);
            let node = self.step_nodes[s];
            let placement = match &options.plan {
                Plan::Predicted { .. } | Plan::Steps(_) => {
                    let p = planned.as_ref().map_or(Placement::Cpu, |p| p[s]);
                    if let (Placement::Split { gpu_channels }, Some(c)) = (p, channels) {
                        ensure!(
                            gpu_channels > 0 && gpu_channels < c,
                            "{}: a split of {gpu_channels} GPU channels out of {c}",
                            self.steps[s].name
                        );
                    } else if let (Placement::Split { .. }, None) = (p, channels) {
                        bail!("{} cannot be split by channel", self.steps[s].name);
                    }
                    p
                }
                Plan::CpuOnly => Placement::Cpu,
                Plan::GpuOnly => Placement::Gpu,
                Plan::SplitFraction(f) => match channels {
                    Some(c) => {
                        let width = match kernel {
                            Kernel::Conv2d(p) => vector_width(GpuOp::Conv(p)),
                            _ => 8,
                        };
                        placement_for(Some(c), fraction_channels(*f, c, width))
                    }
                    None => Placement::Cpu,
                },
                Plan::Nodes(nodes) => match nodes.iter().find(|(n, _)| *n == node.index()) {
                    Some(&(_, g)) => {
                        if channels.is_none() && g > 0 {
                            bail!(
                                "--split {}={g}: {} is not split by channel; give 0 (CPU) or \
                                 use --gpu-only",
                                node.index(),
                                self.steps[s].name
                            );
                        }
                        placement_for(channels, g)
                    }
                    None => Placement::Cpu,
                },
            };
            self.steps[s].placement = placement;
            if placement.uses_gpu() {
                let operands = self
                    .gpu_operands(s, &device)
                    .with_context(|| format!("GPU operands of {}", self.steps[s].name))?;
                self.steps[s].gpu_operands = operands;
            }
        }
        Ok(())
    }

    /// The GPU operands of step `s`: activations as on the CPU, weights in the GPU layout.
    fn gpu_operands(
        &mut self,
        s: usize,
        device: &tandem_runtime::gpu::device::DeviceInfo,
    ) -> Result<Vec<Option<usize>>> {
        let step = &self.steps[s];
        let mut operands = step.inputs.clone();
        let channels = split_channels(&step.kernel).unwrap_or(0);
        let range = step.placement.gpu_range(channels);
        let variant = decide(&step.kernel, range, device).variant;
        let node = self.step_nodes[s];
        let kernel = step.kernel.clone();
        let name = step.name.clone();
        // TFLite-layout weights: repacked kernels go back to the graph; the others are stored
        // as they are.
        let weights = match &kernel {
            Kernel::Conv2d(_) | Kernel::TransposeConv(_) => self.weights(node, 1)?,
            Kernel::DepthwiseConv2d(_) | Kernel::FullyConnected(_) => {
                self.constant_values(step.inputs.get(1).copied().flatten(), "weights")?
            }
            _ => return Ok(operands),
        };
        let bias = match step.inputs.get(2).copied().flatten() {
            Some(t) => Some(self.constant_values(Some(t), "bias")?),
            None => None,
        };
        let (w, b) = gpu_constants(&kernel, variant, &weights, bias.as_deref())
            .ok_or_else(|| anyhow!("no GPU layout for {name}"))?;
        operands[1] = Some(self.packed(format!("{name} GPU weights"), vec![w.len()], &w));
        if operands.len() < 3 {
            operands.resize(3, None);
        }
        operands[2] = b.map(|b| self.packed(format!("{name} GPU bias"), vec![b.len()], &b));
        Ok(operands)
    }

    /// The values of an artifact constant.
    fn constant_values(&self, t: Option<usize>, what: &str) -> Result<Vec<f32>> {
        let t = t.ok_or_else(|| anyhow!("{what} missing"))?;
        let desc = &self.tensors[t];
        match desc.storage {
            Storage::Constant { offset } => {
                Ok(self.weights[offset..offset + desc.elements()].to_vec())
            }
            Storage::Arena { .. } => bail!(
                "{what} '{}' is computed at run time; the GPU kernels need constant {what}",
                desc.name
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fractions_round_to_the_vector_width() {
        assert_eq!(fraction_channels(0.5, 64, 8), 32);
        assert_eq!(fraction_channels(0.3, 64, 8), 16); // 19.2 → 19 → 2.4 blocks → 16
        assert_eq!(fraction_channels(0.0, 64, 8), 0);
        assert_eq!(fraction_channels(1.0, 1000, 8), 1000);
        assert_eq!(fraction_channels(0.99, 10, 8), 8);
        assert_eq!(fraction_channels(0.5, 3, 1), 2);
    }

    #[test]
    fn node_lists_parse_and_reject_garbage() {
        assert_eq!(
            Plan::parse_nodes("3=16, #7=0").ok(),
            Some(Plan::Nodes(vec![(3, 16), (7, 0)]))
        );
        for bad in ["", "3", "a=1", "3=x"] {
            assert!(Plan::parse_nodes(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn placements_follow_the_channel_count() {
        assert_eq!(placement_for(Some(64), 0), Placement::Cpu);
        assert_eq!(placement_for(Some(64), 64), Placement::Gpu);
        assert_eq!(
            placement_for(Some(64), 24),
            Placement::Split { gpu_channels: 24 }
        );
        assert_eq!(placement_for(None, 0), Placement::Cpu);
    }
}
