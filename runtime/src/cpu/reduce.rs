//! Reductions over float32 tensors.
//!
//! Contract: a reduction over `axes` of a row-major tensor of `shape` writes one value per index of
//! the kept dimensions, in row-major order of those dimensions; this order is the same whether the
//! caller's output shape keeps the reduced dimensions (as size 1) or drops them. Sums accumulate in
//! float32 in the input's row-major order, as TFLite's float reference kernel does.
//!
//! Precondition: `x.len()` is the product of `shape`, every axis is below `shape.len()`, and
//! `out.len()` is the product of the kept dimensions. Debug builds assert it; a release build whose
//! precondition fails returns without writing `out`. With the precondition met, no kernel panics.

/// Mean over `axes`: the sum of the reduced elements divided by their count.
///
/// `axes` may come in any order; a repeated axis counts once. Reducing NHWC over H and W
/// (`axes` `[1, 2]` of a rank-4 shape) is a dedicated loop over contiguous channel rows. An empty
/// reduced extent (a reduced dimension of size 0) gives NaN (0 / 0).
pub fn mean(x: &[f32], shape: &[usize], axes: &[usize], out: &mut [f32]) {
    let rank = shape.len();
    let ok = x.len() == shape.iter().product() && axes.iter().all(|&a| a < rank);
    debug_assert!(
        ok,
        "mean: axes {axes:?} out of range for shape {shape:?}, or input length differs"
    );
    if !ok {
        return;
    }
    let reduced = |d: usize| axes.contains(&d);
    let kept: usize = (0..rank)
        .filter(|&d| !reduced(d))
        .map(|d| shape[d])
        .product();
    let count: usize = (0..rank)
        .filter(|&d| reduced(d))
        .map(|d| shape[d])
        .product();
    debug_assert_eq!(
        out.len(),
        kept,
        "mean: output length differs from the kept dimensions of {shape:?}"
    );
    if out.len() != kept || out.is_empty() {
        return;
    }

    out.fill(0.0);
    if count == 0 {
        // Nothing to sum: every mean is 0 / 0.
    } else if rank == 4 && reduced(1) && reduced(2) && !reduced(0) && !reduced(3) {
        let [_, h, w, c] = [shape[0], shape[1], shape[2], shape[3]];
        for (o, image) in out.chunks_exact_mut(c).zip(x.chunks_exact(h * w * c)) {
            for px in image.chunks_exact(c) {
                for (acc, &v) in o.iter_mut().zip(px) {
                    *acc += v;
                }
            }
        }
    } else {
        sum_generic(x, shape, &reduced, out);
    }
    let count = count as f32;
    for o in out.iter_mut() {
        *o /= count;
    }
}

/// Adds every element of `x` into `out` at its kept index, in row-major order of `x`.
fn sum_generic(x: &[f32], shape: &[usize], reduced: &dyn Fn(usize) -> bool, out: &mut [f32]) {
    // Merge adjacent dimensions that are both kept or both reduced, dropping size-1 ones: the
    // input is then rows of one contiguous inner loop, each added element-wise to an output row
    // (kept inner dimension) or summed into one output element (reduced inner dimension).
    let mut dims: Vec<(usize, bool)> = Vec::with_capacity(shape.len());
    for (d, &n) in shape.iter().enumerate() {
        if n == 1 {
            continue;
        }
        match dims.last_mut() {
            Some(last) if last.1 == reduced(d) => last.0 *= n,
            _ => dims.push((n, reduced(d))),
        }
    }
    if dims.is_empty() {
        dims.push((1, false));
    }
    let mut out_strides = vec![0; dims.len()];
    let mut stride = 1;
    for (i, &(n, red)) in dims.iter().enumerate().rev() {
        if !red {
            out_strides[i] = stride;
            stride *= n;
        }
    }

    let outer = dims.len() - 1;
    let (inner, inner_reduced) = dims[outer];
    let mut index = vec![0; outer];
    let mut o = 0;
    for row in x.chunks_exact(inner) {
        if inner_reduced {
            let mut acc = out[o];
            for &v in row {
                acc += v;
            }
            out[o] = acc;
        } else {
            for (acc, &v) in out[o..o + inner].iter_mut().zip(row) {
                *acc += v;
            }
        }
        for d in (0..outer).rev() {
            index[d] += 1;
            o += out_strides[d];
            if index[d] < dims[d].0 {
                break;
            }
            index[d] = 0;
            o -= out_strides[d] * dims[d].0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::elementwise::tests::{ravel, unravel, Rng};

    /// The mean from the definition: every input element added to its output in row-major order.
    fn reference(x: &[f32], shape: &[usize], axes: &[usize]) -> Vec<f32> {
        let kept: Vec<usize> = (0..shape.len())
            .map(|d| if axes.contains(&d) { 1 } else { shape[d] })
            .collect();
        let count: usize = (0..shape.len())
            .filter(|d| axes.contains(d))
            .map(|d| shape[d])
            .product();
        let mut out = vec![0.0f32; kept.iter().product()];
        for (i, &v) in x.iter().enumerate() {
            let mut idx = unravel(i, shape);
            for &a in axes {
                idx[a] = 0;
            }
            out[ravel(&idx, &kept)] += v;
        }
        out.iter().map(|&s| s / count as f32).collect()
    }

    #[test]
    fn mean_matches_reference_on_random_axes() {
        let mut rng = Rng(0xa11ce);
        for _ in 0..400 {
            let rank = rng.range(1, 5);
            let shape: Vec<usize> = (0..rank).map(|_| rng.range(1, 6)).collect();
            let mut axes = rng.permutation(rank);
            axes.truncate(rng.range(0, rank));
            let x = rng.values(shape.iter().product());
            let want = reference(&x, &shape, &axes);
            let mut out = vec![f32::NAN; want.len()];
            mean(&x, &shape, &axes, &mut out);
            assert_eq!(out, want, "{shape:?} over {axes:?}");
        }
    }

    #[test]
    fn spatial_mean_of_nhwc_matches_reference() {
        let mut rng = Rng(0xa11cf);
        for _ in 0..50 {
            let shape = [
                rng.range(1, 3),
                rng.range(1, 9),
                rng.range(1, 9),
                rng.range(1, 17),
            ];
            let x = rng.values(shape.iter().product());
            let want = reference(&x, &shape, &[1, 2]);
            for axes in [[1, 2], [2, 1]] {
                let mut out = vec![f32::NAN; want.len()];
                mean(&x, &shape, &axes, &mut out);
                assert_eq!(out, want, "{shape:?} over {axes:?}");
            }
        }
    }

    #[test]
    fn mean_edge_cases() {
        let x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let mut out = [0.0; 6];
        mean(&x, &[2, 3], &[], &mut out);
        assert_eq!(out, x);
        let mut out = [0.0; 1];
        mean(&x, &[2, 3], &[1, 0], &mut out);
        assert_eq!(out, [3.5]);
        let mut out = [0.0; 2];
        mean(&x, &[2, 3], &[1, 1], &mut out);
        assert_eq!(out, [2.0, 5.0]);
        mean(&[], &[2, 0], &[1], &mut out);
        assert!(out.iter().all(|v| v.is_nan()));
        let mut out = [0.0; 3];
        mean(&[], &[0, 3], &[0], &mut out);
        assert!(out.iter().all(|v| v.is_nan()));
        mean(&[], &[1, 0, 2, 3], &[1, 2], &mut out);
        assert!(out.iter().all(|v| v.is_nan()));
    }
}
