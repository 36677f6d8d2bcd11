//! Spatial resizing of NHWC float32 tensors, bilinear and nearest-neighbour, with TFLite's
//! `align_corners` and `half_pixel_centers` semantics.
//!
//! Contract, per spatial axis with input size `in` and output size `out` (all arithmetic in
//! float32, as TFLite computes it):
//!
//! - `scale = (in - 1) / (out - 1)` when `align_corners` and `out > 1`, else `in / out`.
//! - Bilinear: output index `o` samples source coordinate `s = (o + 0.5) * scale - 0.5` with
//!   `half_pixel_centers`, else `s = o * scale`; it blends input rows `lo = max(floor(s), 0)` and
//!   `hi = min(ceil(s), in - 1)` with weights `1 - (s - lo)` and `s - lo`. A negative `s`
//!   (half-pixel centres near the border) thus reads row 0 with weights summing to 1. The two axes
//!   combine into four corner weights, accumulated in the order (lo, lo), (hi, lo), (lo, hi),
//!   (hi, hi) of (y, x).
//! - Nearest: output index `o` reads input index `round((o + offset) * scale)` with
//!   `align_corners` (rounding half away from zero), else `floor((o + offset) * scale)`, where
//!   `offset` is 0.5 with `half_pixel_centers` and 0 otherwise; the index is clamped to
//!   `[0, in - 1]`. (Unlike bilinear, no 0.5 is subtracted after scaling.)
//!
//! TFLite rejects `align_corners` together with `half_pixel_centers`; these kernels apply both
//! formulas and clamp every index to the input. An input with no pixels gives an all-zero output.
//!
//! Precondition: `x.len()` and `out.len()` are the products of `in_shape` and `out_shape`, which
//! agree on batch and channels. Debug builds assert it; a release build whose precondition fails
//! returns without writing `out`. With the precondition met, no kernel panics.

/// Bilinear resize of `x` (`[n, h, w, c]`) to `out` (`[n, out_h, out_w, c]`); see the module
/// documentation for the exact sampling formulas.
pub fn resize_bilinear(
    x: &[f32],
    in_shape: [usize; 4],
    out: &mut [f32],
    out_shape: [usize; 4],
    align_corners: bool,
    half_pixel_centers: bool,
) {
    if !prepare("resize_bilinear", x, in_shape, out, out_shape) {
        return;
    }
    let [n, h, w, c] = in_shape;
    let [_, oh, ow, _] = out_shape;
    let ys: Vec<Tap> = (0..oh)
        .map(|o| Tap::new(o, h, oh, align_corners, half_pixel_centers))
        .collect();
    let xs: Vec<Tap> = (0..ow)
        .map(|o| Tap::new(o, w, ow, align_corners, half_pixel_centers))
        .collect();
    let pixel = |b: usize, y: usize, x_: usize| {
        let start = ((b * h + y) * w + x_) * c;
        &x[start..start + c]
    };
    let mut pixels = out.chunks_exact_mut(c);
    for b in 0..n {
        for ty in &ys {
            for tx in &xs {
                let Some(o) = pixels.next() else { return };
                let w00 = (1.0 - ty.frac) * (1.0 - tx.frac);
                let w10 = ty.frac * (1.0 - tx.frac);
                let w01 = (1.0 - ty.frac) * tx.frac;
                let w11 = ty.frac * tx.frac;
                let (p00, p10) = (pixel(b, ty.lo, tx.lo), pixel(b, ty.hi, tx.lo));
                let (p01, p11) = (pixel(b, ty.lo, tx.hi), pixel(b, ty.hi, tx.hi));
                for (k, o) in o.iter_mut().enumerate() {
                    *o = p00[k] * w00 + p10[k] * w10 + p01[k] * w01 + p11[k] * w11;
                }
            }
        }
    }
}

/// Nearest-neighbour resize of `x` (`[n, h, w, c]`) to `out` (`[n, out_h, out_w, c]`); see the
/// module documentation for the exact index formulas.
pub fn resize_nearest(
    x: &[f32],
    in_shape: [usize; 4],
    out: &mut [f32],
    out_shape: [usize; 4],
    align_corners: bool,
    half_pixel_centers: bool,
) {
    if !prepare("resize_nearest", x, in_shape, out, out_shape) {
        return;
    }
    let [n, h, w, c] = in_shape;
    let [_, oh, ow, _] = out_shape;
    let ys: Vec<usize> = (0..oh)
        .map(|o| nearest(o, h, oh, align_corners, half_pixel_centers))
        .collect();
    let xs: Vec<usize> = (0..ow)
        .map(|o| nearest(o, w, ow, align_corners, half_pixel_centers))
        .collect();
    let mut pixels = out.chunks_exact_mut(c);
    for b in 0..n {
        for &y in &ys {
            for &x_ in &xs {
                let Some(o) = pixels.next() else { return };
                let start = ((b * h + y) * w + x_) * c;
                o.copy_from_slice(&x[start..start + c]);
            }
        }
    }
}

/// Checks the precondition and handles the degenerate cases; `true` when the caller should
/// compute (input and output both non-empty).
fn prepare(
    name: &str,
    x: &[f32],
    in_shape: [usize; 4],
    out: &mut [f32],
    out_shape: [usize; 4],
) -> bool {
    let ok = in_shape[0] == out_shape[0]
        && in_shape[3] == out_shape[3]
        && x.len() == in_shape.iter().product()
        && out.len() == out_shape.iter().product();
    debug_assert!(
        ok,
        "{name}: {in_shape:?} -> {out_shape:?}: shapes or lengths disagree"
    );
    if !ok || out.is_empty() {
        return false;
    }
    if x.is_empty() {
        out.fill(0.0);
        return false;
    }
    true
}

/// The ratio of input to output coordinates along one axis.
fn scale(in_size: usize, out_size: usize, align_corners: bool) -> f32 {
    if align_corners && out_size > 1 {
        (in_size - 1) as f32 / (out_size - 1) as f32
    } else {
        in_size as f32 / out_size as f32
    }
}

/// The two input rows (or columns) an output index blends, and the weight of the upper one.
struct Tap {
    lo: usize,
    hi: usize,
    frac: f32,
}

impl Tap {
    fn new(
        o: usize,
        in_size: usize,
        out_size: usize,
        align_corners: bool,
        half_pixel_centers: bool,
    ) -> Tap {
        let scale = scale(in_size, out_size, align_corners);
        let s = if half_pixel_centers {
            (o as f32 + 0.5) * scale - 0.5
        } else {
            o as f32 * scale
        };
        let last = in_size as i64 - 1;
        let lo = (s.floor() as i64).clamp(0, last);
        let hi = (s.ceil() as i64).clamp(0, last);
        Tap {
            lo: lo as usize,
            hi: hi as usize,
            frac: s - lo as f32,
        }
    }
}

/// The input index that output index `o` copies along one axis.
fn nearest(
    o: usize,
    in_size: usize,
    out_size: usize,
    align_corners: bool,
    half_pixel_centers: bool,
) -> usize {
    let offset = if half_pixel_centers { 0.5 } else { 0.0 };
    let s = (o as f32 + offset) * scale(in_size, out_size, align_corners);
    let i = if align_corners { s.round() } else { s.floor() };
    (i as i64).clamp(0, in_size as i64 - 1) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::elementwise::tests::Rng;

    /// TFLite's reference bilinear resize, one output element at a time, in its evaluation order.
    fn reference_bilinear(
        x: &[f32],
        in_shape: [usize; 4],
        out_shape: [usize; 4],
        ac: bool,
        hp: bool,
    ) -> Vec<f32> {
        let [n, h, w, c] = in_shape;
        let [_, oh, ow, _] = out_shape;
        let coord = |o: usize, size: usize, out_size: usize| {
            let scale = if ac && out_size > 1 {
                (size - 1) as f32 / (out_size - 1) as f32
            } else {
                size as f32 / out_size as f32
            };
            let s = if hp {
                (o as f32 + 0.5) * scale - 0.5
            } else {
                o as f32 * scale
            };
            let lo = (s.floor() as i64).max(0) as usize;
            let hi = (s.ceil() as i64).min(size as i64 - 1) as usize;
            (s, lo, hi)
        };
        let at = |b: usize, y: usize, x_: usize, k: usize| x[((b * h + y) * w + x_) * c + k];
        let mut out = Vec::new();
        for b in 0..n {
            for oy in 0..oh {
                let (sy, y0, y1) = coord(oy, h, oh);
                let dy = sy - y0 as f32;
                for ox in 0..ow {
                    let (sx, x0, x1) = coord(ox, w, ow);
                    let dx = sx - x0 as f32;
                    for k in 0..c {
                        out.push(
                            at(b, y0, x0, k) * (1.0 - dy) * (1.0 - dx)
                                + at(b, y1, x0, k) * dy * (1.0 - dx)
                                + at(b, y0, x1, k) * (1.0 - dy) * dx
                                + at(b, y1, x1, k) * dy * dx,
                        );
                    }
                }
            }
        }
        out
    }

    /// TFLite's reference nearest-neighbour resize, one output element at a time.
    fn reference_nearest(
        x: &[f32],
        in_shape: [usize; 4],
        out_shape: [usize; 4],
        ac: bool,
        hp: bool,
    ) -> Vec<f32> {
        let [n, h, w, c] = in_shape;
        let [_, oh, ow, _] = out_shape;
        let index = |o: usize, size: usize, out_size: usize| {
            let scale = if ac && out_size > 1 {
                (size - 1) as f32 / (out_size - 1) as f32
            } else {
                size as f32 / out_size as f32
            };
            let offset = if hp { 0.5 } else { 0.0 };
            let v = (o as f32 + offset) * scale;
            let i = if ac {
                v.round() as i64
            } else {
                v.floor() as i64
            };
            let i = i.min(size as i64 - 1);
            (if hp { i.max(0) } else { i }) as usize
        };
        let mut out = Vec::new();
        for b in 0..n {
            for oy in 0..oh {
                for ox in 0..ow {
                    for k in 0..c {
                        out.push(x[((b * h + index(oy, h, oh)) * w + index(ox, w, ow)) * c + k]);
                    }
                }
            }
        }
        out
    }

    const FLAGS: [(bool, bool); 3] = [(false, false), (true, false), (false, true)];

    #[test]
    fn resizes_match_reference_on_random_shapes() {
        let mut rng = Rng(0x7e51);
        for _ in 0..300 {
            let in_shape = [
                rng.range(1, 2),
                rng.range(1, 7),
                rng.range(1, 7),
                rng.range(1, 4),
            ];
            let out_shape = [in_shape[0], rng.range(1, 13), rng.range(1, 13), in_shape[3]];
            let x = rng.values(in_shape.iter().product());
            let mut out = vec![f32::NAN; out_shape.iter().product()];
            for (ac, hp) in FLAGS {
                resize_bilinear(&x, in_shape, &mut out, out_shape, ac, hp);
                let want = reference_bilinear(&x, in_shape, out_shape, ac, hp);
                for (&y, &r) in out.iter().zip(&want) {
                    assert!(
                        (y - r).abs() < 1e-6,
                        "bilinear {in_shape:?} -> {out_shape:?} ac {ac} hp {hp}: {y} vs {r}"
                    );
                }
                resize_nearest(&x, in_shape, &mut out, out_shape, ac, hp);
                let want = reference_nearest(&x, in_shape, out_shape, ac, hp);
                assert_eq!(
                    out, want,
                    "nearest {in_shape:?} -> {out_shape:?} ac {ac} hp {hp}"
                );
            }
        }
    }

    /// Outputs of the TFLite interpreter (builtin reference kernels, TensorFlow 2.21) for a 2x3
    /// upscale to 3x5 and a 4x5 downscale to 3x2, for each accepted flag combination.
    #[test]
    fn resizes_match_tflite_outputs() {
        let up: Vec<f32> = [1, 4, 2, 8, 3, 7].iter().map(|&v| v as f32).collect();
        let down: Vec<f32> = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4]
            .iter()
            .map(|&v| v as f32)
            .collect();
        /// Input, input shape, output shape, flags, bilinear output, nearest output.
        type Golden<'a> = (
            &'a [f32],
            [usize; 4],
            [usize; 4],
            (bool, bool),
            &'a [f32],
            &'a [f32],
        );
        #[rustfmt::skip]
        let cases: [Golden; 6] = [
            (&up, [1, 2, 3, 1], [1, 3, 5, 1], FLAGS[0],
             &[1.0, 2.8, 3.6, 2.4, 2.0, 5.666667, 4.266666, 3.7333336, 4.9333334, 5.3333335,
               8.0, 5.0, 3.8, 6.2, 7.0],
             &[1.0, 1.0, 4.0, 4.0, 2.0, 1.0, 1.0, 4.0, 4.0, 2.0, 8.0, 8.0, 3.0, 3.0, 7.0]),
            (&up, [1, 2, 3, 1], [1, 3, 5, 1], FLAGS[1],
             &[1.0, 2.5, 4.0, 3.0, 2.0, 4.5, 4.0, 3.5, 4.0, 4.5, 8.0, 5.5, 3.0, 5.0, 7.0],
             &[1.0, 4.0, 4.0, 2.0, 2.0, 8.0, 3.0, 3.0, 7.0, 7.0, 8.0, 3.0, 3.0, 7.0, 7.0]),
            (&up, [1, 2, 3, 1], [1, 3, 5, 1], FLAGS[2],
             &[1.0, 2.2, 4.0, 2.8, 2.0, 4.5, 4.1, 3.5, 4.1, 4.5, 8.0, 6.0, 3.0, 5.4, 7.0],
             &[1.0, 1.0, 4.0, 2.0, 2.0, 8.0, 8.0, 3.0, 7.0, 7.0, 8.0, 8.0, 3.0, 7.0, 7.0]),
            (&down, [1, 4, 5, 1], [1, 3, 2, 1], FLAGS[0],
             &[3.0, 2.5, 7.6666665, 6.333333, 3.6666665, 6.333333],
             &[3.0, 4.0, 9.0, 6.0, 5.0, 9.0]),
            (&down, [1, 4, 5, 1], [1, 3, 2, 1], FLAGS[1],
             &[3.0, 5.0, 7.0, 6.0, 3.0, 4.0],
             &[3.0, 5.0, 5.0, 9.0, 3.0, 4.0]),
            (&down, [1, 4, 5, 1], [1, 3, 2, 1], FLAGS[2],
             &[1.875, 2.4166665, 5.5, 6.0, 3.0833325, 7.083333],
             &[1.0, 1.0, 8.0, 7.0, 2.0, 8.0]),
        ];
        for (x, in_shape, out_shape, (ac, hp), bilinear, nearest) in cases {
            let mut out = vec![f32::NAN; out_shape.iter().product()];
            resize_bilinear(x, in_shape, &mut out, out_shape, ac, hp);
            for (&y, &t) in out.iter().zip(bilinear) {
                assert!(
                    (y - t).abs() < 1e-5,
                    "bilinear {in_shape:?} -> {out_shape:?} ac {ac} hp {hp}: {out:?}"
                );
            }
            resize_nearest(x, in_shape, &mut out, out_shape, ac, hp);
            assert_eq!(
                out, nearest,
                "nearest {in_shape:?} -> {out_shape:?} ac {ac} hp {hp}"
            );
        }
    }

    #[test]
    fn same_size_resize_is_a_copy() {
        let mut rng = Rng(0x7e52);
        let shape = [2, 5, 3, 4];
        let x = rng.values(shape.iter().product());
        let mut out = vec![0.0; x.len()];
        for (ac, hp) in FLAGS {
            resize_bilinear(&x, shape, &mut out, shape, ac, hp);
            assert_eq!(out, x, "bilinear ac {ac} hp {hp}");
            resize_nearest(&x, shape, &mut out, shape, ac, hp);
            assert_eq!(out, x, "nearest ac {ac} hp {hp}");
        }
    }

    #[test]
    fn degenerate_flags_and_shapes_do_not_panic() {
        let x: Vec<f32> = (0..4).map(|v| v as f32).collect();
        let mut out = [f32::NAN; 2];
        // Both flags at once (rejected by TFLite) would sample past the last row without clamping.
        resize_bilinear(&x, [1, 4, 1, 1], &mut out, [1, 2, 1, 1], true, true);
        assert!(out.iter().all(|v| v.is_finite()));
        resize_nearest(&x, [1, 4, 1, 1], &mut out, [1, 2, 1, 1], true, true);
        assert!(out.iter().all(|v| (0.0..4.0).contains(v)));
        resize_bilinear(&[], [1, 0, 3, 1], &mut out, [1, 2, 1, 1], false, false);
        assert_eq!(out, [0.0; 2]);
        resize_nearest(&x, [1, 2, 2, 1], &mut [], [1, 0, 5, 1], true, false);
        let mut out = [0.0; 3];
        resize_bilinear(&[5.0], [1, 1, 1, 1], &mut out, [1, 1, 3, 1], true, false);
        assert_eq!(out, [5.0; 3]);
    }
}
