//! 2-D max and average pooling over NHWC float32 tensors.
//!
//! Contract: output pixel `(oy, ox)` pools the input window whose top-left corner is
//! `(oy * stride[0] - pad[0], ox * stride[1] - pad[1])` and whose size is `filter`, clipped to the
//! input. Padding is never read: max pooling takes the maximum of the clipped window, and average
//! pooling divides the window's sum by the number of input elements inside it (TFLite's float
//! semantics). The fused activation is then applied to each output value.
//!
//! Precondition: `x.len()` and `out.len()` are the products of `in_shape` and `out_shape`, which
//! agree on batch and channels. Debug builds assert it; a release build whose precondition fails
//! returns without writing `out`. With the precondition met, no kernel panics, whatever the
//! filter, stride and padding.

use super::Activation;

/// Geometry and fused activation of a 2-D pooling, in `[h, w]` order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pool2d {
    /// Window size.
    pub filter: [usize; 2],
    /// Step between the windows of adjacent output pixels.
    pub stride: [usize; 2],
    /// Implicit padding before the first row and column (top, left); the caller derives it from
    /// SAME or VALID padding. Padding after the input is implied by the output size.
    pub pad: [usize; 2],
    /// Activation applied to every pooled value.
    pub activation: Activation,
}

/// Max pooling: the maximum over each clipped window, then the activation.
///
/// A window that lies entirely in the padding yields `f32::MIN` before the activation, as TFLite's
/// reference kernel does. NaN inputs are skipped, as C++ `std::max` skips them there.
pub fn max_pool2d(
    x: &[f32],
    in_shape: [usize; 4],
    out: &mut [f32],
    out_shape: [usize; 4],
    p: &Pool2d,
) {
    pool(
        x,
        in_shape,
        out,
        out_shape,
        p,
        f32::MIN,
        |m, v| if m < v { v } else { m },
        |m, _| m,
    );
}

/// Average pooling: the sum over each clipped window divided by the number of input elements in
/// it, then the activation.
///
/// A window that lies entirely in the padding (which TFLite rejects) yields 0 before the
/// activation.
pub fn avg_pool2d(
    x: &[f32],
    in_shape: [usize; 4],
    out: &mut [f32],
    out_shape: [usize; 4],
    p: &Pool2d,
) {
    pool(
        x,
        in_shape,
        out,
        out_shape,
        p,
        0.0,
        |s, v| s + v,
        |s, count| if count == 0 { 0.0 } else { s / count as f32 },
    );
}

/// The input range `[start, end)` of the window of output position `o` along one axis.
fn window(o: usize, stride: usize, pad: usize, filter: usize, size: usize) -> (usize, usize) {
    let origin = (o * stride) as i64 - pad as i64;
    let start = origin.max(0) as usize;
    let end = (origin + filter as i64).clamp(0, size as i64) as usize;
    (start.min(end), end)
}

/// Pools each clipped window channel by channel: `acc = fold(acc, v)` from `init` over the window
/// in row-major order, then `finish(acc, count)` and the activation.
#[allow(clippy::too_many_arguments)]
fn pool(
    x: &[f32],
    in_shape: [usize; 4],
    out: &mut [f32],
    out_shape: [usize; 4],
    p: &Pool2d,
    init: f32,
    fold: impl Fn(f32, f32) -> f32,
    finish: impl Fn(f32, usize) -> f32,
) {
    let [n, h, w, c] = in_shape;
    let [on, oh, ow, oc] = out_shape;
    let ok = n == on
        && c == oc
        && x.len() == in_shape.iter().product()
        && out.len() == out_shape.iter().product();
    debug_assert!(
        ok,
        "pool: {in_shape:?} -> {out_shape:?}: shapes or lengths disagree"
    );
    if !ok || out.is_empty() {
        return;
    }
    let clamp = p.activation.clamp_range();
    let mut pixels = out.chunks_exact_mut(c);
    for b in 0..n {
        for oy in 0..oh {
            let (y0, y1) = window(oy, p.stride[0], p.pad[0], p.filter[0], h);
            for ox in 0..ow {
                let (x0, x1) = window(ox, p.stride[1], p.pad[1], p.filter[1], w);
                let Some(o) = pixels.next() else { return };
                o.fill(init);
                for iy in y0..y1 {
                    let start = ((b * h + iy) * w + x0) * c;
                    for px in x[start..start + (x1 - x0) * c].chunks_exact(c) {
                        for (acc, &v) in o.iter_mut().zip(px) {
                            *acc = fold(*acc, v);
                        }
                    }
                }
                let count = (y1 - y0) * (x1 - x0);
                for acc in o.iter_mut() {
                    let v = finish(*acc, count);
                    *acc = match clamp {
                        Some((lo, hi)) => {
                            let v = if v < lo { lo } else { v };
                            if hi < v {
                                hi
                            } else {
                                v
                            }
                        }
                        None => p.activation.apply(v),
                    };
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::elementwise::tests::Rng;

    /// Pooling from the definition, one output element at a time.
    fn reference(
        x: &[f32],
        in_shape: [usize; 4],
        out_shape: [usize; 4],
        p: &Pool2d,
        max: bool,
    ) -> Vec<f32> {
        let [n, h, w, c] = in_shape;
        let [_, oh, ow, _] = out_shape;
        let mut out = Vec::with_capacity(out_shape.iter().product());
        for b in 0..n {
            for oy in 0..oh {
                for ox in 0..ow {
                    for ch in 0..c {
                        let (mut m, mut sum, mut count) = (f32::MIN, 0.0f32, 0usize);
                        for fy in 0..p.filter[0] {
                            for fx in 0..p.filter[1] {
                                let iy = (oy * p.stride[0] + fy) as isize - p.pad[0] as isize;
                                let ix = (ox * p.stride[1] + fx) as isize - p.pad[1] as isize;
                                if iy < 0 || ix < 0 || iy >= h as isize || ix >= w as isize {
                                    continue;
                                }
                                let v = x[((b * h + iy as usize) * w + ix as usize) * c + ch];
                                m = m.max(v);
                                sum += v;
                                count += 1;
                            }
                        }
                        let v = if max {
                            m
                        } else if count == 0 {
                            0.0
                        } else {
                            sum / count as f32
                        };
                        out.push(p.activation.apply(v));
                    }
                }
            }
        }
        out
    }

    /// Output size and (top or left) padding of TFLite's SAME and VALID schemes along one axis.
    fn geometry(size: usize, filter: usize, stride: usize, same: bool) -> Option<(usize, usize)> {
        if same {
            let out = size.div_ceil(stride);
            let total = ((out - 1) * stride + filter).saturating_sub(size);
            Some((out, total / 2))
        } else {
            (size >= filter).then(|| ((size - filter) / stride + 1, 0))
        }
    }

    #[test]
    fn pools_match_reference_on_random_shapes() {
        let mut rng = Rng(0x9001);
        let acts = [
            Activation::None,
            Activation::Relu,
            Activation::Relu6,
            Activation::ReluN1To1,
            Activation::Tanh,
        ];
        let mut checked = 0;
        while checked < 300 {
            let in_shape = [
                rng.range(1, 2),
                rng.range(1, 9),
                rng.range(1, 9),
                rng.range(1, 5),
            ];
            let filter = [rng.range(1, 4), rng.range(1, 4)];
            let stride = [rng.range(1, 3), rng.range(1, 3)];
            let same = rng.below(2) == 0;
            let (Some((oh, pt)), Some((ow, pl))) = (
                geometry(in_shape[1], filter[0], stride[0], same),
                geometry(in_shape[2], filter[1], stride[1], same),
            ) else {
                continue;
            };
            let out_shape = [in_shape[0], oh, ow, in_shape[3]];
            let p = Pool2d {
                filter,
                stride,
                pad: [pt, pl],
                activation: acts[rng.below(acts.len())],
            };
            let x: Vec<f32> = rng
                .values(in_shape.iter().product())
                .iter()
                .map(|v| v * 8.0)
                .collect();
            let mut out = vec![f32::NAN; out_shape.iter().product()];
            max_pool2d(&x, in_shape, &mut out, out_shape, &p);
            assert_eq!(
                out,
                reference(&x, in_shape, out_shape, &p, true),
                "max {in_shape:?} {p:?}"
            );
            avg_pool2d(&x, in_shape, &mut out, out_shape, &p);
            assert_eq!(
                out,
                reference(&x, in_shape, out_shape, &p, false),
                "avg {in_shape:?} {p:?}"
            );
            checked += 1;
        }
    }

    #[test]
    fn average_counts_only_elements_inside_the_input() {
        let x: Vec<f32> = (1..=9).map(|v| v as f32).collect();
        let p = Pool2d {
            filter: [3, 3],
            stride: [1, 1],
            pad: [1, 1],
            activation: Activation::None,
        };
        let mut out = [0.0; 9];
        avg_pool2d(&x, [1, 3, 3, 1], &mut out, [1, 3, 3, 1], &p);
        assert_eq!(out, [3.0, 3.5, 4.0, 4.5, 5.0, 5.5, 6.0, 6.5, 7.0]);
        max_pool2d(&x, [1, 3, 3, 1], &mut out, [1, 3, 3, 1], &p);
        assert_eq!(out, [5.0, 6.0, 6.0, 8.0, 9.0, 9.0, 8.0, 9.0, 9.0]);
    }

    #[test]
    fn windows_outside_the_input_do_not_panic() {
        let p = Pool2d {
            filter: [2, 2],
            stride: [3, 3],
            pad: [5, 0],
            activation: Activation::Relu6,
        };
        let mut out = [1.0; 4];
        avg_pool2d(&[1.0, 2.0], [1, 1, 1, 2], &mut out, [1, 2, 1, 2], &p);
        assert_eq!(out, [0.0; 4]);
        let p = Pool2d {
            activation: Activation::None,
            ..p
        };
        max_pool2d(&[1.0, 2.0], [1, 1, 1, 2], &mut out, [1, 2, 1, 2], &p);
        assert_eq!(out, [f32::MIN; 4]);
        max_pool2d(&[], [1, 0, 3, 2], &mut out, [1, 2, 1, 2], &p);
        assert_eq!(out, [f32::MIN; 4]);
    }
}
