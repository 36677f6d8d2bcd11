//! Dispatch features for latency predictors: one operator's dispatch as a fixed list of named
//! numbers, labelled with the dispatch they come from, so that a dataset measured with the stock
//! TFLite GPU delegate (`"tflite_gpu"`) and one measured with tandem's own runtime (`"tandem"`)
//! can be told apart in one table.

use super::tflite_gpu::{Kernel, KernelDispatch, OpDispatch};
use serde::Serialize;

/// Which dispatch logic produced the features.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum DispatchSource {
    /// The stock TFLite GPU delegate, emulated by [`super::tflite_gpu`].
    #[serde(rename = "tflite_gpu")]
    TfliteGpu,
    /// tandem's own runtime (`runtime::gpu::dispatch`).
    #[serde(rename = "tandem")]
    Tandem,
}

impl DispatchSource {
    /// The label stored in the [`SOURCE_COLUMN`] column.
    pub fn label(self) -> &'static str {
        match self {
            DispatchSource::TfliteGpu => "tflite_gpu",
            DispatchSource::Tandem => "tandem",
        }
    }
}

/// Name of the (string) column that holds [`DispatchSource::label`].
pub const SOURCE_COLUMN: &str = "dispatch_source";

/// Names of the numeric features, in order. `variant` is [`super::tflite_gpu::Variant::id`];
/// `kernel` is [`Kernel::id`] of the main kernel (the ConvGeneric of Winograd, the first conv of
/// a split grouped conv, else the first kernel), whose block, work group, group counts, grid and
/// launched threads follow; `all_*` sum over every kernel of the op. Ops without kernels (fused,
/// folded, not delegated) have variant 0 and zeros.
pub const FEATURE_NAMES: [&str; 24] = [
    "variant",
    "kernels",
    "exact",
    "kernel",
    "block_x",
    "block_y",
    "block_z",
    "block_s",
    "src_loop",
    "wg_x",
    "wg_y",
    "wg_z",
    "wg_size",
    "groups_x",
    "groups_y",
    "groups_z",
    "groups",
    "grid_x",
    "grid_y",
    "grid_z",
    "grid",
    "threads",
    "all_groups",
    "all_threads",
];

/// One operator's dispatch features.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DispatchFeatures {
    pub source: DispatchSource,
    /// Values in [`FEATURE_NAMES`] order.
    pub values: [f64; 24],
}

impl DispatchFeatures {
    /// (name, value) pairs in order.
    pub fn named(&self) -> impl Iterator<Item = (&'static str, f64)> + '_ {
        FEATURE_NAMES
            .iter()
            .copied()
            .zip(self.values.iter().copied())
    }

    /// The value of feature `name`.
    pub fn get(&self, name: &str) -> Option<f64> {
        FEATURE_NAMES
            .iter()
            .position(|&n| n == name)
            .map(|i| self.values[i])
    }
}

/// The kernel whose parameters stand for the op.
fn main_kernel(kernels: &[KernelDispatch]) -> Option<&KernelDispatch> {
    let heavy = [
        Kernel::ConvGeneric,
        Kernel::ConvConstants,
        Kernel::DepthwiseConv3x3,
        Kernel::DepthwiseConv,
        Kernel::FullyConnected,
    ];
    kernels
        .iter()
        .find(|k| heavy.contains(&k.name))
        .or_else(|| kernels.first())
}

/// Features of one operator's emulated stock-delegate dispatch.
pub fn tflite_gpu_features(op: &OpDispatch) -> DispatchFeatures {
    let mut values = [0.0; 24];
    values[0] = f64::from(op.variant.id());
    values[1] = op.kernels.len() as f64;
    if let Some(k) = main_kernel(&op.kernels) {
        let block = k.block.unwrap_or([1, 1, 1, 1]);
        let f = |v: usize| v as f64;
        values[2] = if op.kernels.iter().all(|k| k.exact) {
            1.0
        } else {
            0.0
        };
        values[3] = f64::from(k.name.id());
        for (i, b) in block.iter().enumerate() {
            values[4 + i] = f(*b);
        }
        values[8] = f(k.conv.map_or(1, |c| c.src_loop));
        for i in 0..3 {
            values[9 + i] = f(k.work_group[i]);
            values[13 + i] = f(k.groups[i]);
            values[17 + i] = f(k.grid[i]);
        }
        values[12] = f(k.work_group_size());
        values[16] = f(k.total_groups());
        values[20] = f(k.grid.iter().product());
        values[21] = f(k.total_threads());
        values[22] = op.kernels.iter().map(|k| f(k.total_groups())).sum();
        values[23] = op.kernels.iter().map(|k| f(k.total_threads())).sum();
    }
    DispatchFeatures {
        source: DispatchSource::TfliteGpu,
        values,
    }
}
