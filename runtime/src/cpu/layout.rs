//! Data movement: padding, concatenation, transposition, strided slicing and the depth/space
//! rearrangements.
//!
//! Contract: tensors are row-major (last dimension fastest) and every function is generic over the
//! element type, so the same code moves float32 and int32 tensors. Each writes every element of
//! `out` exactly once and never reads an element of `x` outside the region it copies.
//!
//! Precondition: every slice's length equals the product of its shape (for outputs, the shape the
//! function's documentation derives), and the per-dimension parameters have one entry per
//! dimension. Debug builds assert it; a release build whose precondition fails returns without
//! writing `out`. With the precondition met, no function panics.

/// Pads `x` (of `shape`) with `before[d]` and `after[d]` copies of `value` on each side of each
/// dimension `d`: `out` has shape `shape[d] + before[d] + after[d]`.
pub fn pad<T: Copy>(
    x: &[T],
    shape: &[usize],
    before: &[usize],
    after: &[usize],
    value: T,
    out: &mut [T],
) {
    let rank = shape.len();
    let ok = before.len() == rank
        && after.len() == rank
        && x.len() == shape.iter().product()
        && out.len() == (0..rank).map(|d| shape[d] + before[d] + after[d]).product();
    debug_assert!(
        ok,
        "pad: {shape:?} padded by {before:?} and {after:?} disagrees with the slice lengths"
    );
    if !ok || out.is_empty() {
        return;
    }
    if rank == 0 {
        out.copy_from_slice(x);
        return;
    }
    // Elements in one index of dimension d, for the input and for the output.
    let mut in_block = vec![1; rank];
    let mut out_block = vec![1; rank];
    for d in (0..rank - 1).rev() {
        in_block[d] = in_block[d + 1] * shape[d + 1];
        out_block[d] = out_block[d + 1] * (shape[d + 1] + before[d + 1] + after[d + 1]);
    }
    pad_dim(x, shape, before, &in_block, &out_block, value, out);
}

/// Pads the block of dimension `shape[0]` (the input block `x`) into the output block `out`.
fn pad_dim<T: Copy>(
    x: &[T],
    shape: &[usize],
    before: &[usize],
    in_block: &[usize],
    out_block: &[usize],
    value: T,
    out: &mut [T],
) {
    let (n, ib, ob) = (shape[0], in_block[0], out_block[0]);
    let start = before[0] * ob;
    let end = start + n * ob;
    out[..start].fill(value);
    out[end..].fill(value);
    if shape.len() == 1 {
        out[start..end].copy_from_slice(x);
        return;
    }
    for i in 0..n {
        let xi = &x[i * ib..(i + 1) * ib];
        let oi = &mut out[start + i * ob..start + (i + 1) * ob];
        pad_dim(
            xi,
            &shape[1..],
            &before[1..],
            &in_block[1..],
            &out_block[1..],
            value,
            oi,
        );
    }
}

/// Concatenates `inputs` (each a slice and its shape) along `axis`.
///
/// The shapes must have the same rank and agree on every dimension but `axis`; `out` has their
/// common shape with `axis` the sum of theirs.
pub fn concat<T: Copy>(inputs: &[(&[T], &[usize])], axis: usize, out: &mut [T]) {
    let Some(&(_, first)) = inputs.first() else {
        debug_assert!(out.is_empty(), "concat: no inputs for a non-empty output");
        return;
    };
    let rank = first.len();
    let ok = axis < rank
        && inputs.iter().all(|&(x, s)| {
            s.len() == rank
                && x.len() == s.iter().product()
                && (0..rank).all(|d| d == axis || s[d] == first[d])
        })
        && out.len() == inputs.iter().map(|(x, _)| x.len()).sum();
    debug_assert!(
        ok,
        "concat: input shapes disagree off axis {axis}, or a slice length differs from its shape"
    );
    if !ok || out.is_empty() {
        return;
    }
    let outer: usize = first[..axis].iter().product();
    let inners: Vec<usize> = inputs
        .iter()
        .map(|(_, s)| s[axis..].iter().product())
        .collect();
    let mut pos = 0;
    for o in 0..outer {
        for (&(x, _), &inner) in inputs.iter().zip(&inners) {
            out[pos..pos + inner].copy_from_slice(&x[o * inner..(o + 1) * inner]);
            pos += inner;
        }
    }
}

/// Permutes dimensions: output dimension `d` is input dimension `perm[d]`, so `out` has shape
/// `shape[perm[d]]`. `perm` must be a permutation of `0..shape.len()`.
pub fn transpose<T: Copy>(x: &[T], shape: &[usize], perm: &[usize], out: &mut [T]) {
    let rank = shape.len();
    let mut seen = vec![false; rank];
    let is_perm = perm.len() == rank
        && perm
            .iter()
            .all(|&p| p < rank && !std::mem::replace(&mut seen[p], true));
    let ok = is_perm && x.len() == shape.iter().product() && out.len() == x.len();
    debug_assert!(
        ok,
        "transpose: {perm:?} is not a permutation of {shape:?}, or a slice length differs"
    );
    if !ok {
        return;
    }
    let strides = strides(shape);
    let dims: Vec<(usize, isize)> = perm
        .iter()
        .map(|&p| (shape[p], strides[p] as isize))
        .collect();
    gather(x, 0, &dims, out);
}

/// Strided slice, fully resolved: output index `i` along dimension `d` reads input index
/// `begin[d] + i * stride[d]`, for `i < count[d]`. `out` has shape `count`.
///
/// Strides may be negative or zero. Every index read must lie inside `shape` (checked when
/// `count[d] > 0` for every `d`); SLICE, SPLIT and STRIDED_SLICE (after the caller resolves masks
/// and negative indices) all map onto this.
pub fn strided_slice<T: Copy>(
    x: &[T],
    shape: &[usize],
    begin: &[usize],
    stride: &[isize],
    count: &[usize],
    out: &mut [T],
) {
    let rank = shape.len();
    let ok = begin.len() == rank
        && stride.len() == rank
        && count.len() == rank
        && x.len() == shape.iter().product()
        && out.len() == count.iter().product();
    debug_assert!(
        ok,
        "strided_slice: parameters do not have rank {rank}, or a slice length differs"
    );
    if !ok || out.is_empty() {
        return;
    }
    let in_range = (0..rank).all(|d| {
        let last = begin[d] as i128 + (count[d] as i128 - 1) * stride[d] as i128;
        begin[d] < shape[d] && (0..shape[d] as i128).contains(&last)
    });
    debug_assert!(
        in_range,
        "strided_slice: begin {begin:?}, stride {stride:?}, count {count:?} read outside {shape:?}"
    );
    if !in_range {
        return;
    }
    let strides = strides(shape);
    let base: usize = (0..rank).map(|d| begin[d] * strides[d]).sum();
    let dims: Vec<(usize, isize)> = (0..rank)
        .map(|d| (count[d], stride[d] * strides[d] as isize))
        .collect();
    gather(x, base as isize, &dims, out);
}

/// Depth to space with TFLite's DCR order: input `[n, h, w, c]` becomes
/// `[n, h * block, w * block, c / block²]`, and output pixel `(y * block + by, x * block + bx)`
/// channel `k` reads input pixel `(y, x)` channel `(by * block + bx) * (c / block²) + k`.
///
/// `block` must be at least 1 and divide `c` twice (`c % block² == 0`); `out.len() == x.len()`.
pub fn depth_to_space<T: Copy>(x: &[T], in_shape: [usize; 4], block: usize, out: &mut [T]) {
    let [n, h, w, c] = in_shape;
    let bb = block * block;
    let ok =
        block >= 1 && c % bb == 0 && x.len() == in_shape.iter().product() && out.len() == x.len();
    debug_assert!(
        ok,
        "depth_to_space: block {block} does not fit {in_shape:?}, or a slice length differs"
    );
    if !ok {
        return;
    }
    let co = c / bb;
    // Output index (n, y, by, x, bx, k) in row-major order, with the input strides of each part.
    let dims = [
        (n, h * w * c),
        (h, w * c),
        (block, block * co),
        (w, c),
        (block, co),
        (co, 1),
    ];
    gather(x, 0, &dims.map(|(n, s)| (n, s as isize)), out);
}

/// Space to depth, the inverse of [`depth_to_space`]: input `[n, h, w, c]` becomes
/// `[n, h / block, w / block, c * block²]`, and output pixel `(y, x)` channel
/// `(by * block + bx) * c + k` reads input pixel `(y * block + by, x * block + bx)` channel `k`.
///
/// `block` must be at least 1 and divide `h` and `w`; `out.len() == x.len()`.
pub fn space_to_depth<T: Copy>(x: &[T], in_shape: [usize; 4], block: usize, out: &mut [T]) {
    let [n, h, w, c] = in_shape;
    let ok = block >= 1
        && h % block == 0
        && w % block == 0
        && x.len() == in_shape.iter().product()
        && out.len() == x.len();
    debug_assert!(
        ok,
        "space_to_depth: block {block} does not fit {in_shape:?}, or a slice length differs"
    );
    if !ok {
        return;
    }
    // Output index (n, y, x, by, bx, k) in row-major order, with the input strides of each part.
    let dims = [
        (n, h * w * c),
        (h / block, block * w * c),
        (w / block, block * c),
        (block, w * c),
        (block, c),
        (c, 1),
    ];
    gather(x, 0, &dims.map(|(n, s)| (n, s as isize)), out);
}

/// Row-major strides of `shape`.
fn strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * shape[d + 1];
    }
    strides
}

/// Copies into `out`, in row-major order of `dims` (each a count and an input step), the elements
/// `x[base + Σ i_d * step_d]`. Every such index must lie inside `x` and `out.len()` must be the
/// product of the counts.
fn gather<T: Copy>(x: &[T], base: isize, dims: &[(usize, isize)], out: &mut [T]) {
    if out.is_empty() {
        return;
    }
    // Drop size-1 dimensions and merge a dimension into the next when they walk the input as one
    // (step = next step * next count): the inner loop then covers the longest contiguous run.
    let mut merged: Vec<(usize, isize)> = Vec::with_capacity(dims.len());
    for &(n, step) in dims.iter().filter(|&&(n, _)| n != 1) {
        match merged.last_mut() {
            Some(last) if last.1 == step * n as isize => *last = (last.0 * n, step),
            _ => merged.push((n, step)),
        }
    }
    if merged.is_empty() {
        merged.push((1, 1));
    }
    // When the second-to-last dimension is the one contiguous in the input and the last is not,
    // each pair of them is a 2-D transpose, copied in square blocks so that both the reads and the
    // writes stay within a few cache lines.
    let (inner, step) = merged[merged.len() - 1];
    let blocked = merged.len() >= 2 && merged[merged.len() - 2].1 == 1 && step != 1;
    let outer = merged.len() - if blocked { 2 } else { 1 };
    let tile = if blocked {
        merged[outer].0 * inner
    } else {
        inner
    };
    let mut index = vec![0; outer];
    let mut offset = base;
    for chunk in out.chunks_exact_mut(tile) {
        if blocked {
            transpose_block(x, offset, step, inner, chunk);
        } else if step == 1 {
            let start = offset as usize;
            chunk.copy_from_slice(&x[start..start + inner]);
        } else {
            let mut i = offset;
            for o in chunk.iter_mut() {
                *o = x[i as usize];
                i += step;
            }
        }
        for d in (0..outer).rev() {
            index[d] += 1;
            offset += merged[d].1;
            if index[d] < merged[d].0 {
                break;
            }
            index[d] = 0;
            offset -= merged[d].1 * merged[d].0 as isize;
        }
    }
}

/// `out[i * cols + j] = x[base + i + j * step]` for every row `i` of `out` and `j < cols`.
fn transpose_block<T: Copy>(x: &[T], base: isize, step: isize, cols: usize, out: &mut [T]) {
    const BLOCK: usize = 16;
    let rows = out.len() / cols;
    for i0 in (0..rows).step_by(BLOCK) {
        for j0 in (0..cols).step_by(BLOCK) {
            let j1 = (j0 + BLOCK).min(cols);
            for i in i0..(i0 + BLOCK).min(rows) {
                let mut src = base + i as isize + j0 as isize * step;
                for o in &mut out[i * cols + j0..i * cols + j1] {
                    *o = x[src as usize];
                    src += step;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::elementwise::tests::{ravel, unravel, Rng};

    fn random_shape(rng: &mut Rng, rank: usize, max: usize) -> Vec<usize> {
        (0..rank).map(|_| rng.range(1, max)).collect()
    }

    fn iota(n: usize) -> Vec<i32> {
        (0..n as i32).collect()
    }

    #[test]
    fn pad_matches_reference() {
        let mut rng = Rng(0x1a1);
        for _ in 0..300 {
            let rank = rng.range(0, 5);
            let shape = random_shape(&mut rng, rank, 4);
            let before: Vec<usize> = (0..rank).map(|_| rng.range(0, 2)).collect();
            let after: Vec<usize> = (0..rank).map(|_| rng.range(0, 2)).collect();
            let out_shape: Vec<usize> =
                (0..rank).map(|d| shape[d] + before[d] + after[d]).collect();
            let x = iota(shape.iter().product());
            let mut out = vec![-7; out_shape.iter().product()];
            pad(&x, &shape, &before, &after, -1, &mut out);
            for (i, &v) in out.iter().enumerate() {
                let idx = unravel(i, &out_shape);
                let inside =
                    (0..rank).all(|d| idx[d] >= before[d] && idx[d] < before[d] + shape[d]);
                let want = if inside {
                    let src: Vec<usize> = (0..rank).map(|d| idx[d] - before[d]).collect();
                    x[ravel(&src, &shape)]
                } else {
                    -1
                };
                assert_eq!(v, want, "{shape:?} {before:?} {after:?} at {idx:?}");
            }
        }
        let mut out = [0.0f32; 6];
        pad(&[], &[0, 2], &[1, 0], &[2, 0], 1.5, &mut out);
        assert_eq!(out, [1.5; 6]);
        pad(&[], &[2, 0], &[0, 1], &[0, 2], 2.5, &mut out);
        assert_eq!(out, [2.5; 6]);
    }

    #[test]
    fn concat_matches_reference() {
        let mut rng = Rng(0x1a2);
        for _ in 0..300 {
            let rank = rng.range(1, 4);
            let axis = rng.below(rank);
            let base = random_shape(&mut rng, rank, 4);
            let shapes: Vec<Vec<usize>> = (0..rng.range(1, 4))
                .map(|_| {
                    let mut s = base.clone();
                    s[axis] = rng.range(0, 3);
                    s
                })
                .collect();
            let mut next = 0;
            let data: Vec<Vec<f32>> = shapes
                .iter()
                .map(|s| {
                    let n: usize = s.iter().product();
                    next += n;
                    (next - n..next).map(|v| v as f32).collect()
                })
                .collect();
            let inputs: Vec<(&[f32], &[usize])> = data
                .iter()
                .zip(&shapes)
                .map(|(x, s)| (&x[..], &s[..]))
                .collect();
            let mut out_shape = base.clone();
            out_shape[axis] = shapes.iter().map(|s| s[axis]).sum();
            let mut out = vec![f32::NAN; out_shape.iter().product()];
            concat(&inputs, axis, &mut out);
            for (i, &v) in out.iter().enumerate() {
                let mut idx = unravel(i, &out_shape);
                let mut k = 0;
                while idx[axis] >= shapes[k][axis] {
                    idx[axis] -= shapes[k][axis];
                    k += 1;
                }
                assert_eq!(
                    v,
                    data[k][ravel(&idx, &shapes[k])],
                    "{shapes:?} along {axis}"
                );
            }
        }
    }

    fn check_transpose(shape: &[usize], perm: &[usize]) {
        let rank = shape.len();
        let out_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
        let x = iota(shape.iter().product());
        let mut out = vec![-1; x.len()];
        transpose(&x, shape, perm, &mut out);
        for (i, &v) in out.iter().enumerate() {
            let idx = unravel(i, &out_shape);
            let mut src = vec![0; rank];
            for d in 0..rank {
                src[perm[d]] = idx[d];
            }
            assert_eq!(v, x[ravel(&src, shape)], "{shape:?} by {perm:?}");
        }
    }

    #[test]
    fn transpose_matches_reference() {
        let mut rng = Rng(0x1a3);
        for _ in 0..300 {
            let rank = rng.range(0, 5);
            let shape = random_shape(&mut rng, rank, 5);
            check_transpose(&shape, &rng.permutation(rank));
        }
        // Several blocks of the blocked 2-D path, with partial blocks at both edges.
        check_transpose(&[33, 50], &[1, 0]);
        check_transpose(&[1, 37, 19, 21], &[0, 3, 1, 2]);
        check_transpose(&[2, 17, 3, 40], &[0, 3, 2, 1]);
        check_transpose(&[3, 20, 18], &[2, 0, 1]);
    }

    #[test]
    fn strided_slice_matches_reference() {
        let mut rng = Rng(0x1a4);
        for _ in 0..400 {
            let rank = rng.range(0, 5);
            let shape = random_shape(&mut rng, rank, 6);
            let mut begin = vec![0; rank];
            let mut stride = vec![0; rank];
            let mut count = vec![0; rank];
            for d in 0..rank {
                let s = rng.range(1, 3) as isize;
                stride[d] = if rng.below(3) == 0 { -s } else { s };
                begin[d] = rng.below(shape[d]);
                let room = if stride[d] > 0 {
                    shape[d] - 1 - begin[d]
                } else {
                    begin[d]
                };
                let max = room / s as usize + 1;
                count[d] = if rng.below(10) == 0 {
                    0
                } else {
                    rng.range(1, max)
                };
            }
            let x = iota(shape.iter().product());
            let mut out = vec![-1; count.iter().product()];
            strided_slice(&x, &shape, &begin, &stride, &count, &mut out);
            for (i, &v) in out.iter().enumerate() {
                let idx = unravel(i, &count);
                let src: Vec<usize> = (0..rank)
                    .map(|d| (begin[d] as isize + idx[d] as isize * stride[d]) as usize)
                    .collect();
                assert_eq!(
                    v,
                    x[ravel(&src, &shape)],
                    "{shape:?} {begin:?} {stride:?} {count:?}"
                );
            }
        }
        let mut out = [0; 3];
        strided_slice(&[1, 2], &[2], &[1], &[0], &[3], &mut out);
        assert_eq!(out, [2, 2, 2]);
    }

    #[test]
    #[cfg_attr(debug_assertions, should_panic)]
    fn strided_slice_rejects_reads_outside_the_input() {
        let mut out = [0; 3];
        strided_slice(&[1, 2, 3], &[3], &[1], &[-1], &[3], &mut out);
        assert_eq!(out, [0; 3]);
    }

    /// TFLite's depth-to-space from its definition, one output element at a time.
    fn reference_depth_to_space(x: &[i32], [n, h, w, c]: [usize; 4], block: usize) -> Vec<i32> {
        let co = c / (block * block);
        let out_shape = [n, h * block, w * block, co];
        (0..x.len())
            .map(|i| {
                let idx = unravel(i, &out_shape);
                let (b, oy, ox, k) = (idx[0], idx[1], idx[2], idx[3]);
                let ic = k + ((oy % block) * block + ox % block) * co;
                x[ravel(&[b, oy / block, ox / block, ic], &[n, h, w, c])]
            })
            .collect()
    }

    #[test]
    fn depth_and_space_rearrangements_match_reference() {
        let mut rng = Rng(0x1a5);
        for _ in 0..200 {
            let block = rng.range(1, 3);
            let in_shape = [
                rng.range(1, 2),
                rng.range(1, 4),
                rng.range(1, 4),
                rng.range(1, 3) * block * block,
            ];
            let x = iota(in_shape.iter().product());
            let mut out = vec![-1; x.len()];
            depth_to_space(&x, in_shape, block, &mut out);
            assert_eq!(
                out,
                reference_depth_to_space(&x, in_shape, block),
                "{in_shape:?} block {block}"
            );

            let [n, h, w, c] = in_shape;
            let spatial = [n, h * block, w * block, c / (block * block)];
            let mut back = vec![-1; x.len()];
            space_to_depth(&out, spatial, block, &mut back);
            assert_eq!(back, x, "{spatial:?} block {block}");
        }
        let x = iota(8);
        let mut out = vec![0; 8];
        space_to_depth(&x, [1, 2, 2, 2], 2, &mut out);
        assert_eq!(out, [0, 1, 2, 3, 4, 5, 6, 7]);
        space_to_depth(&x, [1, 2, 4, 1], 2, &mut out);
        assert_eq!(out, [0, 1, 4, 5, 2, 3, 6, 7]);
    }
}
