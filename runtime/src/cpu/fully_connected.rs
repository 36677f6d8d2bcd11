//! FULLY_CONNECTED: `out = in · Wᵀ + bias` over an output-unit range, weights in TFLite's
//! `[units, depth]` layout.

use super::gemm::{matmul, MatRef};
use super::shared::SharedOut;
use super::simd::Isa;
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
    let isa = Isa::detect();
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
            dots(isa, input, &weights[u0 * depth..u1 * depth], dst);
            for (u, o) in (u0..u1).zip(dst.iter_mut()) {
                *o = activation.apply(*o + bias.map_or(0.0, |b| b[u]));
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

/// `out[u] = x · w[u·d .. (u+1)·d]` for every `u < out.len()`, where `d = x.len()`: one input
/// vector against consecutive rows of a row-major weight matrix, with the best kernel for `isa`
/// (which must be supported).
fn dots(isa: Isa, x: &[f32], w: &[f32], out: &mut [f32]) {
    let d = x.len();
    debug_assert_eq!(w.len(), out.len() * d);
    if d == 0 {
        out.fill(0.0);
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512 {
        // SAFETY: AVX-512F is supported, and `w` holds `out.len()` rows of `d` values.
        unsafe { x86::dots_avx512(x, w, out) };
        return;
    }
    let _ = isa;
    for (o, row) in out.iter_mut().zip(w.chunks_exact(d)) {
        *o = dot(x, row);
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// Weight rows streamed together: four independent read streams and accumulator chains.
    const ROWS: usize = 4;

    /// [`super::dots`] with AVX-512: [`ROWS`] rows at a time, 16 values per step, the last step
    /// masked.
    ///
    /// # Safety
    /// The CPU must support AVX-512F; `w` must hold `out.len()` rows of `x.len()` values.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn dots_avx512(x: &[f32], w: &[f32], out: &mut [f32]) {
        let groups = out.len() / ROWS;
        for g in 0..groups {
            // SAFETY: rows `g·ROWS .. g·ROWS + ROWS` are inside `w`.
            let sums = unsafe { rows_avx512::<ROWS>(x, w.as_ptr().add(g * ROWS * x.len())) };
            out[g * ROWS..(g + 1) * ROWS].copy_from_slice(&sums);
        }
        for (u, o) in out.iter_mut().enumerate().skip(groups * ROWS) {
            // SAFETY: row `u` is inside `w`.
            *o = unsafe { rows_avx512::<1>(x, w.as_ptr().add(u * x.len())) }[0];
        }
    }

    /// The dot products of `x` with the `N` rows of `x.len()` values starting at `w`.
    ///
    /// # Safety
    /// The CPU must support AVX-512F; the `N` rows must be readable.
    #[inline(always)]
    unsafe fn rows_avx512<const N: usize>(x: &[f32], w: *const f32) -> [f32; N] {
        let d = x.len();
        let (full, rest) = (d / 16, d % 16);
        let mut acc = [_mm512_setzero_ps(); N];
        for i in 0..full {
            let xv = _mm512_loadu_ps(x.as_ptr().add(16 * i));
            for (j, acc) in acc.iter_mut().enumerate() {
                *acc = _mm512_fmadd_ps(xv, _mm512_loadu_ps(w.add(j * d + 16 * i)), *acc);
            }
        }
        if rest > 0 {
            let tail = ((1u32 << rest) - 1) as u16;
            let xv = _mm512_maskz_loadu_ps(tail, x.as_ptr().add(16 * full));
            for (j, acc) in acc.iter_mut().enumerate() {
                let wv = _mm512_maskz_loadu_ps(tail, w.add(j * d + 16 * full));
                *acc = _mm512_fmadd_ps(xv, wv, *acc);
            }
        }
        acc.map(|acc| _mm512_reduce_add_ps(acc))
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
    fn every_isa_computes_the_dot_products() {
        let mut rng = Rng(5);
        for isa in Isa::ALL.into_iter().filter(|isa| isa.is_supported()) {
            for (units, depth) in [(1, 1), (3, 15), (4, 16), (9, 17), (13, 1280), (5, 0)] {
                let x = rng.values(depth);
                let w = rng.values(units * depth);
                let mut got = vec![f32::NAN; units];
                dots(isa, &x, &w, &mut got);
                for (u, &got) in got.iter().enumerate() {
                    let row = &w[u * depth..(u + 1) * depth];
                    let want: f32 = x.iter().zip(row).map(|(a, b)| a * b).sum();
                    let scale: f32 = x.iter().zip(row).map(|(a, b)| (a * b).abs()).sum();
                    assert!(
                        (got - want).abs() <= 1e-5 * scale.max(1.0),
                        "{isa:?} {units}×{depth} unit {u}: {got} vs {want}"
                    );
                }
            }
        }
    }

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
