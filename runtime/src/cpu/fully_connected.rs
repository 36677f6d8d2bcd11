//! FULLY_CONNECTED: `out = in · Wᵀ + bias` over an output-unit range, weights in TFLite's
//! `[units, depth]` layout.

use super::gemm::{matmul, MatRef};
use super::shared::SharedOut;
use super::threads::ThreadPool;
use super::Activation;
use serde::{Deserialize, Serialize};

/// Shape of a fully-connected layer: `rows` input vectors of `depth` features to `units` outputs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FullyConnectedParams {
    pub rows: usize,
    pub depth: usize,
    pub units: usize,
    pub activation: Activation,
}

/// Units per task when one row is split across threads (keeps each task's weights streaming).
const UNITS_PER_TASK: usize = 64;

/// Rows per task when there are several.
const ROWS_PER_TASK: usize = 16;

/// Computes output units `[c0, c1)` of every row into `out` (`rows × units`).
///
/// Preconditions: slice lengths match the shapes; `c0 <= c1 <= units`.
#[allow(clippy::too_many_arguments)]
pub fn fully_connected(
    input: &[f32],
    weights: &[f32],
    bias: Option<&[f32]>,
    out: &mut [f32],
    p: &FullyConnectedParams,
    c0: usize,
    c1: usize,
    pool: &ThreadPool,
) {
    let FullyConnectedParams {
        rows,
        depth,
        units,
        activation,
    } = *p;
    debug_assert_eq!(input.len(), rows * depth);
    debug_assert_eq!(weights.len(), units * depth);
    if c0 >= c1 || rows == 0 {
        return;
    }
    let shared = SharedOut::new(out);
    let fill_bias = |row: &mut [f32], u0: usize, u1: usize| match bias {
        Some(bias) => row.copy_from_slice(&bias[u0..u1]),
        None => row.fill(0.0),
    };
    if rows == 1 {
        // One vector: split the units across tasks; each streams its own rows of weights.
        pool.run((c1 - c0).div_ceil(UNITS_PER_TASK), &|t| {
            let u0 = c0 + t * UNITS_PER_TASK;
            let u1 = (u0 + UNITS_PER_TASK).min(c1);
            // SAFETY: each task owns units [u0, u1) of the single row.
            let dst = unsafe { shared.range(u0, u1 - u0) };
            fill_bias(dst, u0, u1);
            for (o, u) in dst.iter_mut().zip(u0..u1) {
                *o = activation.apply(*o + dot(input, &weights[u * depth..(u + 1) * depth]));
            }
        });
    } else {
        // Several vectors: split the rows across tasks, one GEMM each over the unit range.
        let tasks = rows.div_ceil(ROWS_PER_TASK);
        pool.run(tasks, &|t| {
            let r0 = t * ROWS_PER_TASK;
            let n = ROWS_PER_TASK.min(rows - r0);
            // SAFETY: each task owns rows [r0, r0 + n).
            let dst = unsafe { shared.range(r0 * units, n * units) };
            for r in 0..n {
                fill_bias(&mut dst[r * units + c0..r * units + c1], c0, c1);
            }
            let lhs = MatRef::rows(&input[r0 * depth..], n, depth, depth);
            let rhs = MatRef {
                data: &weights[c0 * depth..],
                rows: depth,
                cols: c1 - c0,
                row_stride: 1,
                col_stride: depth,
            };
            matmul(&mut dst[c0..], units, lhs, rhs, true);
            for r in 0..n {
                activation.apply_slice(&mut dst[r * units + c0..r * units + c1]);
            }
        });
    }
}

/// Dot product with eight independent accumulators (vectorises; fixed summation order).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let tail: f32 = ra.iter().zip(rb).map(|(x, y)| x * y).sum();
    acc.iter().sum::<f32>() + tail
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::elementwise::tests::Rng;

    #[test]
    fn matches_reference_for_single_and_many_rows_and_ranges() {
        let mut rng = Rng(99);
        let pool = ThreadPool::new(2);
        for case in 0..40 {
            let p = FullyConnectedParams {
                rows: [1, 1, 3, 17][rng.below(4)],
                depth: 1 + rng.below(300),
                units: 1 + rng.below(200),
                activation: [Activation::None, Activation::Relu, Activation::Tanh][case % 3],
            };
            let input = rng.values(p.rows * p.depth);
            let weights = rng.values(p.units * p.depth);
            let bias = rng.values(p.units);
            let split = rng.below(p.units + 1);
            let mut got = vec![f32::NAN; p.rows * p.units];
            fully_connected(&input, &weights, Some(&bias), &mut got, &p, 0, split, &pool);
            fully_connected(
                &input,
                &weights,
                Some(&bias),
                &mut got,
                &p,
                split,
                p.units,
                &pool,
            );
            for r in 0..p.rows {
                for u in 0..p.units {
                    let want: f32 = bias[u]
                        + (0..p.depth)
                            .map(|k| input[r * p.depth + k] * weights[u * p.depth + k])
                            .sum::<f32>();
                    let want = p.activation.apply(want);
                    let a = got[r * p.units + u];
                    assert!(
                        (a - want).abs() <= 1e-4 * want.abs().max(1.0),
                        "case {case} {p:?}: {a} vs {want}"
                    );
                }
            }
        }
    }
}
