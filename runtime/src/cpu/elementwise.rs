//! Element-wise kernels: broadcasting binary arithmetic, unary activations, PReLU and softmax.
//!
//! Contract, shared by every function here:
//!
//! - Tensors are float32, row-major (last dimension fastest). A shape `&[]` is a scalar holding
//!   one element.
//! - Broadcasting follows numpy, as TFLite does: shapes are aligned on their last dimension, and a
//!   dimension of size 1 (or a missing leading dimension) is repeated to the output's size.
//! - Precondition: every slice's length equals the product of its shape, and every input shape
//!   broadcasts to the output shape. Debug builds assert it; a release build whose precondition
//!   fails returns without writing `out`. With the precondition met, no kernel panics.
//! - Results follow TFLite's float reference kernels: a fused clamp activation is
//!   `min(max(v, lo), hi)` (a NaN stays NaN), logistic is `1 / (1 + exp(-x))`, hard swish is
//!   `x * relu6(x + 3) / 6`, leaky ReLU and PReLU scale the negative side, softmax subtracts the
//!   row maximum before scaling by `beta`.

use serde::{Deserialize, Serialize};

use super::Activation;

/// A binary arithmetic operator, `a op b`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum BinaryOp {
    /// `a + b`.
    Add,
    /// `a - b`.
    Sub,
    /// `a * b`.
    Mul,
    /// `a / b` (IEEE division: a zero divisor gives an infinity or NaN).
    Div,
}

/// A unary element-wise operator.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum UnaryOp {
    /// `1 / (1 + exp(-x))`.
    Logistic,
    /// `tanh(x)`.
    Tanh,
    /// `max(x, 0)`.
    Relu,
    /// `min(max(x, 0), 6)`.
    Relu6,
    /// `min(max(x, -1), 1)`.
    ReluN1To1,
    /// `x * relu6(x + 3) / 6`.
    HardSwish,
    /// `x` for `x > 0`, `alpha * x` otherwise.
    LeakyRelu(f32),
}

/// `out = act(a op b)` with numpy broadcasting of `a` and `b` to `out_shape`.
///
/// Same-shape operands, a scalar operand, and operands broadcast along whole leading or trailing
/// blocks of dimensions (a per-channel vector, a per-pixel value) run as contiguous row loops;
/// any other broadcast is correct but walks more rows.
///
/// Precondition (see the module documentation): `a.len()`, `b.len()` and `out.len()` are the
/// products of their shapes, and both input shapes broadcast to `out_shape`.
#[allow(clippy::too_many_arguments)]
pub fn binary(
    op: BinaryOp,
    a: &[f32],
    a_shape: &[usize],
    b: &[f32],
    b_shape: &[usize],
    out: &mut [f32],
    out_shape: &[usize],
    act: Activation,
) {
    let ok = broadcast_ok(a, a_shape, out_shape)
        && broadcast_ok(b, b_shape, out_shape)
        && out.len() == product(out_shape);
    debug_assert!(
        ok,
        "binary: {a_shape:?} and {b_shape:?} vs {out_shape:?}: bad broadcast or length"
    );
    if !ok {
        return;
    }
    if act == Activation::None {
        binary_then(op, a, a_shape, b, b_shape, out, out_shape, |v| v);
    } else if let Some((lo, hi)) = act.clamp_range() {
        binary_then(op, a, a_shape, b, b_shape, out, out_shape, move |v| {
            clamp(v, lo, hi)
        });
    } else {
        binary_then(op, a, a_shape, b, b_shape, out, out_shape, move |v| {
            act.apply(v)
        });
    }
}

/// `out = op(x)`, element by element.
///
/// Precondition: `x.len() == out.len()`.
pub fn unary(op: UnaryOp, x: &[f32], out: &mut [f32]) {
    debug_assert_eq!(x.len(), out.len(), "unary: input and output lengths differ");
    if x.len() != out.len() {
        return;
    }
    match op {
        UnaryOp::Logistic => map(x, out, |v| 1.0 / (1.0 + (-v).exp())),
        UnaryOp::Tanh => map(x, out, f32::tanh),
        UnaryOp::Relu => map(x, out, |v| if v < 0.0 { 0.0 } else { v }),
        UnaryOp::Relu6 => map(x, out, |v| clamp(v, 0.0, 6.0)),
        UnaryOp::ReluN1To1 => map(x, out, |v| clamp(v, -1.0, 1.0)),
        UnaryOp::HardSwish => map(x, out, |v| v * clamp(v + 3.0, 0.0, 6.0) / 6.0),
        UnaryOp::LeakyRelu(alpha) => map(x, out, move |v| if v > 0.0 { v } else { v * alpha }),
    }
}

/// Parametric ReLU: `out = x` where `x >= 0`, `x * alpha` elsewhere, with `alpha` broadcast to
/// `x_shape` (typically one slope per channel).
///
/// Precondition: `x.len()` and `out.len()` equal the product of `x_shape`, `alpha.len()` the
/// product of `alpha_shape`, and `alpha_shape` broadcasts to `x_shape`.
pub fn prelu(x: &[f32], x_shape: &[usize], alpha: &[f32], alpha_shape: &[usize], out: &mut [f32]) {
    let ok = broadcast_ok(x, x_shape, x_shape)
        && broadcast_ok(alpha, alpha_shape, x_shape)
        && out.len() == x.len();
    debug_assert!(
        ok,
        "prelu: alpha {alpha_shape:?} vs {x_shape:?}: bad broadcast or length"
    );
    if !ok {
        return;
    }
    broadcast_apply(x, x_shape, alpha, alpha_shape, out, x_shape, |v, a| {
        if v >= 0.0 {
            v
        } else {
            v * a
        }
    });
}

/// Softmax over the last axis: each row of `depth` elements becomes
/// `exp((x - max) * beta) / sum(exp((x - max) * beta))`, where `max` is the row's maximum.
///
/// Precondition: `x.len() == out.len()` and is a multiple of `depth`. `depth == 0` means an empty
/// tensor (nothing is written).
pub fn softmax(x: &[f32], out: &mut [f32], depth: usize, beta: f32) {
    let ok = x.len() == out.len() && (x.is_empty() || x.len().checked_rem(depth) == Some(0));
    debug_assert!(
        ok,
        "softmax: lengths {} and {} are not equal multiples of depth {depth}",
        x.len(),
        out.len()
    );
    if !ok || depth == 0 {
        return;
    }
    for (row, o) in x.chunks_exact(depth).zip(out.chunks_exact_mut(depth)) {
        let max = row
            .iter()
            .fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m });
        let mut sum = 0.0f32;
        for (o, &v) in o.iter_mut().zip(row) {
            let e = ((v - max) * beta).exp();
            *o = e;
            sum += e;
        }
        for o in o.iter_mut() {
            *o /= sum;
        }
    }
}

/// `min(max(v, lo), hi)` with C++ `std::min`/`std::max` semantics, as TFLite clamps: a NaN `v`
/// stays NaN, and an infinite bound is the identity.
#[inline(always)]
fn clamp(v: f32, lo: f32, hi: f32) -> f32 {
    let v = if v < lo { lo } else { v };
    if hi < v {
        hi
    } else {
        v
    }
}

#[inline(always)]
fn map(x: &[f32], out: &mut [f32], f: impl Fn(f32) -> f32) {
    for (o, &v) in out.iter_mut().zip(x) {
        *o = f(v);
    }
}

/// Monomorphises the broadcast loops for `op` followed by `post` (the activation).
#[allow(clippy::too_many_arguments)]
fn binary_then(
    op: BinaryOp,
    a: &[f32],
    a_shape: &[usize],
    b: &[f32],
    b_shape: &[usize],
    out: &mut [f32],
    out_shape: &[usize],
    post: impl Fn(f32) -> f32 + Copy,
) {
    match op {
        BinaryOp::Add => broadcast_apply(a, a_shape, b, b_shape, out, out_shape, move |x, y| {
            post(x + y)
        }),
        BinaryOp::Sub => broadcast_apply(a, a_shape, b, b_shape, out, out_shape, move |x, y| {
            post(x - y)
        }),
        BinaryOp::Mul => broadcast_apply(a, a_shape, b, b_shape, out, out_shape, move |x, y| {
            post(x * y)
        }),
        BinaryOp::Div => broadcast_apply(a, a_shape, b, b_shape, out, out_shape, move |x, y| {
            post(x / y)
        }),
    }
}

fn product(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// The size of `shape`'s dimension that lines up with dimension `d` of a rank-`rank` output
/// (1 where `shape` has no such dimension).
fn aligned_dim(shape: &[usize], rank: usize, d: usize) -> usize {
    (d + shape.len()).checked_sub(rank).map_or(1, |i| shape[i])
}

/// Whether `data` holds `shape` and `shape` broadcasts to `out_shape`.
fn broadcast_ok(data: &[f32], shape: &[usize], out_shape: &[usize]) -> bool {
    let extra = shape.len().saturating_sub(out_shape.len());
    data.len() == product(shape)
        && shape[..extra].iter().all(|&n| n == 1)
        && (0..out_shape.len()).all(|d| {
            let n = aligned_dim(shape, out_shape.len(), d);
            n == 1 || n == out_shape[d]
        })
}

/// `out[i] = f(a[ia], b[ib])` over the broadcast of `a` and `b` to `out_shape` (shapes already
/// validated).
fn broadcast_apply(
    a: &[f32],
    a_shape: &[usize],
    b: &[f32],
    b_shape: &[usize],
    out: &mut [f32],
    out_shape: &[usize],
    f: impl Fn(f32, f32) -> f32 + Copy,
) {
    if out.is_empty() {
        return;
    }
    if a.len() == out.len() && b.len() == out.len() {
        row(out, a, 1, b, 1, f);
        return;
    }
    if b.len() == 1 && a.len() == out.len() {
        row(out, a, 1, b, 0, f);
        return;
    }
    if a.len() == 1 && b.len() == out.len() {
        row(out, a, 0, b, 1, f);
        return;
    }

    // Merge runs of adjacent output dimensions in which each operand is either wholly present or
    // wholly broadcast: a per-channel vector becomes [rows, C] with `a` strided (C, 1) and `b`
    // strided (0, 1), so every case reduces to rows of one contiguous inner loop.
    let rank = out_shape.len();
    let mut dims: Vec<(usize, bool, bool)> = Vec::with_capacity(rank);
    for (d, &n) in out_shape.iter().enumerate() {
        if n == 1 {
            continue;
        }
        let a_bc = aligned_dim(a_shape, rank, d) == 1;
        let b_bc = aligned_dim(b_shape, rank, d) == 1;
        match dims.last_mut() {
            Some(last) if last.1 == a_bc && last.2 == b_bc => last.0 *= n,
            _ => dims.push((n, a_bc, b_bc)),
        }
    }
    if dims.is_empty() {
        dims.push((1, false, false));
    }
    let mut a_strides = vec![0; dims.len()];
    let mut b_strides = vec![0; dims.len()];
    let (mut sa, mut sb) = (1, 1);
    for (i, &(n, a_bc, b_bc)) in dims.iter().enumerate().rev() {
        if !a_bc {
            a_strides[i] = sa;
            sa *= n;
        }
        if !b_bc {
            b_strides[i] = sb;
            sb *= n;
        }
    }

    let outer = dims.len() - 1;
    let inner = dims[outer].0;
    let mut index = vec![0; outer];
    let (mut ia, mut ib) = (0, 0);
    for o in out.chunks_exact_mut(inner) {
        row(o, &a[ia..], a_strides[outer], &b[ib..], b_strides[outer], f);
        for d in (0..outer).rev() {
            index[d] += 1;
            ia += a_strides[d];
            ib += b_strides[d];
            if index[d] < dims[d].0 {
                break;
            }
            index[d] = 0;
            ia -= a_strides[d] * dims[d].0;
            ib -= b_strides[d] * dims[d].0;
        }
    }
}

/// One contiguous output row: each operand steps by 1 or stays on its first element (step 0).
#[inline(always)]
fn row(
    out: &mut [f32],
    a: &[f32],
    a_step: usize,
    b: &[f32],
    b_step: usize,
    f: impl Fn(f32, f32) -> f32,
) {
    let n = out.len();
    match (a_step, b_step) {
        (0, 0) => out.fill(f(a[0], b[0])),
        (0, _) => {
            let x = a[0];
            for (o, &y) in out.iter_mut().zip(&b[..n]) {
                *o = f(x, y);
            }
        }
        (_, 0) => {
            let y = b[0];
            for (o, &x) in out.iter_mut().zip(&a[..n]) {
                *o = f(x, y);
            }
        }
        _ => {
            for ((o, &x), &y) in out.iter_mut().zip(&a[..n]).zip(&b[..n]) {
                *o = f(x, y);
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A seeded xorshift64 generator for random test cases.
    pub(crate) struct Rng(pub u64);

    impl Rng {
        pub fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        /// Uniform in `0..n` (`n > 0`).
        pub fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }

        /// Uniform in `lo..=hi`.
        pub fn range(&mut self, lo: usize, hi: usize) -> usize {
            lo + self.below(hi - lo + 1)
        }

        /// `n` values in [-1, 1] on a 1/1000 grid.
        pub fn values(&mut self, n: usize) -> Vec<f32> {
            (0..n)
                .map(|_| (self.next() % 2001) as f32 / 1000.0 - 1.0)
                .collect()
        }

        /// A random permutation of `0..n`.
        pub fn permutation(&mut self, n: usize) -> Vec<usize> {
            let mut p: Vec<usize> = (0..n).collect();
            for i in (1..n).rev() {
                p.swap(i, self.below(i + 1));
            }
            p
        }
    }

    /// Row-major multi-index of flat index `i` in `shape`.
    pub(crate) fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
        let mut idx = vec![0; shape.len()];
        for d in (0..shape.len()).rev() {
            idx[d] = i % shape[d];
            i /= shape[d];
        }
        idx
    }

    /// Flat row-major index of `idx` in `shape`.
    pub(crate) fn ravel(idx: &[usize], shape: &[usize]) -> usize {
        idx.iter().zip(shape).fold(0, |acc, (&i, &n)| acc * n + i)
    }

    fn same(x: f32, y: f32) -> bool {
        x == y || x.is_nan() && y.is_nan()
    }

    /// Element `out_idx` of the broadcast of (`data`, `shape`) to an output of rank `rank`.
    fn broadcast_read(data: &[f32], shape: &[usize], out_idx: &[usize]) -> f32 {
        let rank = out_idx.len();
        let idx: Vec<usize> = (0..shape.len())
            .map(|i| {
                let d = (i + rank).checked_sub(shape.len());
                match d {
                    Some(d) if shape[i] != 1 => out_idx[d],
                    _ => 0,
                }
            })
            .collect();
        data[ravel(&idx, shape)]
    }

    fn reference_binary(
        op: BinaryOp,
        a: &[f32],
        a_shape: &[usize],
        b: &[f32],
        b_shape: &[usize],
        out_shape: &[usize],
        act: Activation,
    ) -> Vec<f32> {
        (0..product(out_shape))
            .map(|i| {
                let idx = unravel(i, out_shape);
                let (x, y) = (
                    broadcast_read(a, a_shape, &idx),
                    broadcast_read(b, b_shape, &idx),
                );
                let v = match op {
                    BinaryOp::Add => x + y,
                    BinaryOp::Sub => x - y,
                    BinaryOp::Mul => x * y,
                    BinaryOp::Div => x / y,
                };
                act.apply(v)
            })
            .collect()
    }

    /// A shape that broadcasts to `out_shape`: random rank (sometimes with an extra leading 1),
    /// each dimension either the output's or 1.
    fn broadcastable(rng: &mut Rng, out_shape: &[usize]) -> Vec<usize> {
        let rank = out_shape.len();
        let r = rng.range(0, rank + 1);
        (0..r)
            .map(|i| match (i + rank).checked_sub(r) {
                Some(d) if rng.below(2) == 0 => out_shape[d],
                _ => 1,
            })
            .collect()
    }

    const OPS: [BinaryOp; 4] = [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div];
    const ACTS: [Activation; 5] = [
        Activation::None,
        Activation::Relu,
        Activation::ReluN1To1,
        Activation::Relu6,
        Activation::Tanh,
    ];

    fn check_binary(rng: &mut Rng, a_shape: &[usize], b_shape: &[usize], out_shape: &[usize]) {
        let a = rng.values(product(a_shape));
        let b = rng.values(product(b_shape));
        for op in OPS {
            for act in ACTS {
                let mut out = vec![f32::NAN; product(out_shape)];
                binary(op, &a, a_shape, &b, b_shape, &mut out, out_shape, act);
                let want = reference_binary(op, &a, a_shape, &b, b_shape, out_shape, act);
                assert!(
                    out.iter().zip(&want).all(|(&x, &y)| same(x, y)),
                    "{op:?} {act:?} {a_shape:?} {b_shape:?} -> {out_shape:?}"
                );
            }
        }
    }

    #[test]
    fn binary_matches_reference_on_random_broadcasts() {
        let mut rng = Rng(0x5eed_0001);
        for _ in 0..300 {
            let rank = rng.range(0, 5);
            let out_shape: Vec<usize> = (0..rank).map(|_| rng.range(1, 5)).collect();
            let a_shape = broadcastable(&mut rng, &out_shape);
            let b_shape = broadcastable(&mut rng, &out_shape);
            check_binary(&mut rng, &a_shape, &b_shape, &out_shape);
        }
    }

    #[test]
    fn binary_fast_paths_keep_operand_order() {
        let mut rng = Rng(0x5eed_0002);
        let full = [2, 3, 5, 7];
        for (a_shape, b_shape) in [
            (&full[..], &full[..]),
            (&full[..], &[][..]),
            (&[1][..], &full[..]),
            (&full[..], &[7][..]),
            (&[1, 1, 7][..], &full[..]),
            (&full[..], &[2, 3, 5, 1][..]),
            (&[2, 1, 1, 7][..], &full[..]),
            (&[2, 3, 5, 1][..], &[1, 1, 1, 7][..]),
        ] {
            check_binary(&mut rng, a_shape, b_shape, &full);
        }
        check_binary(&mut rng, &[], &[], &[]);
        check_binary(&mut rng, &[0, 3], &[3], &[0, 3]);
    }

    #[test]
    fn binary_divides_a_by_b_with_a_scalar() {
        let mut out = [0.0; 3];
        binary(
            BinaryOp::Div,
            &[6.0],
            &[],
            &[1.0, 2.0, 3.0],
            &[3],
            &mut out,
            &[3],
            Activation::None,
        );
        assert_eq!(out, [6.0, 3.0, 2.0]);
        binary(
            BinaryOp::Sub,
            &[1.0, 2.0, 3.0],
            &[1, 3],
            &[10.0],
            &[1],
            &mut out,
            &[1, 3],
            Activation::Relu6,
        );
        assert_eq!(out, [0.0, 0.0, 0.0]);
        binary(
            BinaryOp::Sub,
            &[10.0],
            &[1],
            &[1.0, 2.0, 3.0],
            &[1, 3],
            &mut out,
            &[1, 3],
            Activation::Relu6,
        );
        assert_eq!(out, [6.0, 6.0, 6.0]);
    }

    #[test]
    #[cfg_attr(debug_assertions, should_panic)]
    fn binary_rejects_shapes_that_do_not_broadcast() {
        let mut out = [7.0; 6];
        binary(
            BinaryOp::Add,
            &[0.0; 6],
            &[2, 3],
            &[0.0; 2],
            &[2],
            &mut out,
            &[2, 3],
            Activation::None,
        );
        assert_eq!(out, [7.0; 6]);
    }

    #[test]
    fn unary_ops_match_their_definitions() {
        let xs: Vec<f32> = (-80..=80)
            .map(|i| i as f32 / 8.0)
            .chain([-100.0, 100.0, f32::NAN])
            .collect();
        type Case = (UnaryOp, fn(f32) -> f32);
        let cases: [Case; 7] = [
            (UnaryOp::Logistic, |x| 1.0 / (1.0 + (-x).exp())),
            (UnaryOp::Tanh, f32::tanh),
            (UnaryOp::Relu, |x| if x.is_nan() { x } else { x.max(0.0) }),
            (UnaryOp::Relu6, |x| {
                if x.is_nan() {
                    x
                } else {
                    x.clamp(0.0, 6.0)
                }
            }),
            (UnaryOp::ReluN1To1, |x| {
                if x.is_nan() {
                    x
                } else {
                    x.clamp(-1.0, 1.0)
                }
            }),
            (UnaryOp::HardSwish, |x| x * (x + 3.0).clamp(0.0, 6.0) / 6.0),
            (
                UnaryOp::LeakyRelu(0.2),
                |x| if x > 0.0 { x } else { 0.2 * x },
            ),
        ];
        for (op, f) in cases {
            let mut out = vec![0.0; xs.len()];
            unary(op, &xs, &mut out);
            for (&x, &y) in xs.iter().zip(&out) {
                assert!(same(y, f(x)), "{op:?}({x}) = {y}, want {}", f(x));
            }
        }
        let mut out = [0.0; 5];
        unary(UnaryOp::HardSwish, &[-4.0, -3.0, 0.0, 1.0, 3.0], &mut out);
        assert_eq!(out, [0.0, 0.0, 0.0, 1.0 * 4.0 / 6.0, 3.0]);
        unary(
            UnaryOp::Logistic,
            &[-200.0, 0.0, 200.0, -1.0, 1.0],
            &mut out,
        );
        assert_eq!(&out[..3], &[0.0, 0.5, 1.0]);
        assert!((out[3] + out[4] - 1.0).abs() < 1e-6);
    }

    #[test]
    fn prelu_matches_reference() {
        let mut rng = Rng(0x5eed_0003);
        for _ in 0..200 {
            let rank = rng.range(1, 4);
            let x_shape: Vec<usize> = (0..rank).map(|_| rng.range(1, 6)).collect();
            let alpha_shape = match rng.below(4) {
                0 => vec![x_shape[rank - 1]],
                1 => vec![1],
                2 => x_shape.clone(),
                _ => broadcastable(&mut rng, &x_shape),
            };
            let x = rng.values(product(&x_shape));
            let alpha = rng.values(product(&alpha_shape));
            let mut out = vec![f32::NAN; x.len()];
            prelu(&x, &x_shape, &alpha, &alpha_shape, &mut out);
            for (i, &y) in out.iter().enumerate() {
                let idx = unravel(i, &x_shape);
                let (v, a) = (x[i], broadcast_read(&alpha, &alpha_shape, &idx));
                assert_eq!(
                    y,
                    if v >= 0.0 { v } else { v * a },
                    "{x_shape:?} {alpha_shape:?} at {idx:?}"
                );
            }
        }
    }

    #[test]
    fn softmax_matches_reference() {
        let mut rng = Rng(0x5eed_0004);
        for _ in 0..100 {
            let depth = rng.range(1, 40);
            let rows = rng.range(1, 5);
            let beta = [1.0, 0.5, 2.0, 0.1][rng.below(4)];
            let x: Vec<f32> = rng.values(rows * depth).iter().map(|v| v * 20.0).collect();
            let mut out = vec![0.0; x.len()];
            softmax(&x, &mut out, depth, beta);
            for (row, o) in x.chunks(depth).zip(out.chunks(depth)) {
                let max = row.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64));
                let e: Vec<f64> = row
                    .iter()
                    .map(|&v| ((v as f64 - max) * beta as f64).exp())
                    .collect();
                let sum: f64 = e.iter().sum();
                for (&y, &e) in o.iter().zip(&e) {
                    assert!(
                        (y as f64 - e / sum).abs() < 1e-6,
                        "depth {depth} beta {beta}: {y} vs {}",
                        e / sum
                    );
                }
            }
        }
        let mut out = [0.0; 3];
        softmax(&[1000.0, 1000.0, -1000.0], &mut out, 3, 1.0);
        assert_eq!(out, [0.5, 0.5, 0.0]);
        softmax(&[], &mut [], 0, 1.0);
    }
}
