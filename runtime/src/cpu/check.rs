//! Load-time checks that a step's operands fit its kernel, so that running it cannot index out of
//! bounds. Each error says which operand and why.

use crate::artifact::{Kernel, TensorDesc};

/// Element count, saturating (absurd shapes from a corrupt artifact then fail the size checks
/// instead of overflowing).
fn elements(shape: &[usize]) -> usize {
    shape.iter().fold(1usize, |acc, &d| acc.saturating_mul(d))
}

/// Whether `shape` broadcasts (numpy-style) to `target`.
pub fn broadcasts_to(shape: &[usize], target: &[usize]) -> bool {
    shape.len() <= target.len()
        && shape
            .iter()
            .rev()
            .zip(target.iter().rev())
            .all(|(&s, &t)| s == t || s == 1)
}

fn arity(inputs: &[Option<&TensorDesc>], required: usize, optional: usize) -> Result<(), String> {
    if inputs.len() < required || inputs.len() > required + optional {
        return Err(format!(
            "takes {required}{} operands, got {}",
            if optional > 0 {
                format!("–{}", required + optional)
            } else {
                String::new()
            },
            inputs.len()
        ));
    }
    if let Some(missing) = inputs[..required].iter().position(Option::is_none) {
        return Err(format!("operand {missing} is missing"));
    }
    Ok(())
}

fn want(what: &str, got: usize, expected: usize) -> Result<(), String> {
    if got == expected {
        Ok(())
    } else {
        Err(format!("{what} has {got} elements, expected {expected}"))
    }
}

/// Checks operand counts, element counts and shapes of one step against its kernel.
pub fn check_kernel(
    kernel: &Kernel,
    inputs: &[Option<&TensorDesc>],
    outputs: &[&TensorDesc],
) -> Result<(), String> {
    let input = |i: usize| inputs.get(i).copied().flatten();
    let shape = |i: usize| input(i).map(|t| t.shape.as_slice()).unwrap_or(&[]);
    let size = |i: usize| input(i).map_or(0, |t| t.elements());
    let single_output = || -> Result<&TensorDesc, String> {
        match outputs {
            [o] => Ok(*o),
            _ => Err(format!("has {} outputs, expected 1", outputs.len())),
        }
    };
    let out = single_output()?;
    let bias = |channels: usize| -> Result<(), String> {
        match input(2) {
            Some(b) => want("bias", b.elements(), channels),
            None => Ok(()),
        }
    };
    match kernel {
        Kernel::Conv2d(p) => {
            arity(inputs, 2, 1)?;
            p.validate()?;
            want("input", size(0), elements(&p.input))?;
            want("packed weights", size(1), p.packed_len())?;
            bias(p.output[3])?;
            want("output", out.elements(), elements(&p.output))
        }
        Kernel::DepthwiseConv2d(p) => {
            arity(inputs, 2, 1)?;
            p.validate()?;
            want("input", size(0), elements(&p.input))?;
            want("weights", size(1), p.kernel[0] * p.kernel[1] * p.output[3])?;
            bias(p.output[3])?;
            want("output", out.elements(), elements(&p.output))
        }
        Kernel::FullyConnected(p) => {
            arity(inputs, 2, 1)?;
            want("input", size(0), p.rows * p.depth)?;
            want("weights", size(1), p.units * p.depth)?;
            bias(p.units)?;
            want("output", out.elements(), p.rows * p.units)
        }
        Kernel::TransposeConv(p) => {
            arity(inputs, 2, 1)?;
            p.validate()?;
            want("input", size(0), elements(&p.input))?;
            want(
                "packed weights",
                size(1),
                p.output[3] * p.kernel[0] * p.kernel[1] * p.input[3],
            )?;
            bias(p.output[3])?;
            want("output", out.elements(), elements(&p.output))
        }
        Kernel::BatchMatMul(p) => {
            arity(inputs, 2, 0)?;
            p.validate()?;
            want("lhs", size(0), elements(&p.lhs))?;
            want("rhs", size(1), elements(&p.rhs))?;
            let (a, b, o) = (&p.lhs, &p.rhs, &p.out);
            let batch = |s: &[usize]| s[..s.len() - 2].to_vec();
            if !broadcasts_to(&batch(a), &batch(o)) || !broadcasts_to(&batch(b), &batch(o)) {
                return Err(format!(
                    "batch dims of {a:?} and {b:?} do not broadcast to {o:?}"
                ));
            }
            let m = if p.adj_lhs {
                a[a.len() - 1]
            } else {
                a[a.len() - 2]
            };
            let n = if p.adj_rhs {
                b[b.len() - 2]
            } else {
                b[b.len() - 1]
            };
            if o[o.len() - 2] != m || o[o.len() - 1] != n {
                return Err(format!("output {o:?} is not {m}×{n} matrices"));
            }
            want("output", out.elements(), elements(o))
        }
        Kernel::Binary { .. } => {
            arity(inputs, 2, 0)?;
            for i in 0..2 {
                if !broadcasts_to(shape(i), &out.shape) {
                    return Err(format!(
                        "operand {i} {:?} does not broadcast to the output {:?}",
                        shape(i),
                        out.shape
                    ));
                }
            }
            Ok(())
        }
        Kernel::Unary(_) | Kernel::Copy => {
            arity(inputs, 1, 0)?;
            want("output", out.elements(), size(0))
        }
        Kernel::Softmax { .. } => {
            arity(inputs, 1, 0)?;
            if out.shape.is_empty() {
                return Err("softmax needs rank ≥ 1".into());
            }
            want("output", out.elements(), size(0))
        }
        Kernel::Prelu => {
            arity(inputs, 2, 0)?;
            if !broadcasts_to(shape(1), shape(0)) {
                return Err(format!(
                    "alpha {:?} does not broadcast to the input {:?}",
                    shape(1),
                    shape(0)
                ));
            }
            want("output", out.elements(), size(0))
        }
        Kernel::MaxPool2d(p) | Kernel::AvgPool2d(p) => {
            arity(inputs, 1, 0)?;
            let (i, o) = (shape(0), out.shape.as_slice());
            if i.len() != 4 || o.len() != 4 || i[0] != o[0] || i[3] != o[3] {
                return Err(format!(
                    "pooling {i:?} → {o:?} is not NHWC with equal N and C"
                ));
            }
            if p.filter.contains(&0) || p.stride.contains(&0) {
                return Err("zero filter or stride".into());
            }
            Ok(())
        }
        Kernel::Mean { axes } => {
            arity(inputs, 1, 0)?;
            let s = shape(0);
            if axes.iter().any(|&a| a >= s.len()) {
                return Err(format!("axes {axes:?} out of range for {s:?}"));
            }
            let kept: usize = s
                .iter()
                .enumerate()
                .filter(|(d, _)| !axes.contains(d))
                .map(|(_, &v)| v)
                .product();
            want("output", out.elements(), kept)
        }
        Kernel::Pad { before, after, .. } => {
            arity(inputs, 1, 0)?;
            let s = shape(0);
            if before.len() != s.len() || after.len() != s.len() {
                return Err(format!(
                    "padding for rank {} given for {:?}",
                    before.len(),
                    s
                ));
            }
            let padded: Vec<usize> = s
                .iter()
                .zip(before)
                .zip(after)
                .map(|((d, b), a)| d + b + a)
                .collect();
            if padded != out.shape {
                return Err(format!(
                    "padded shape {padded:?} differs from the output {:?}",
                    out.shape
                ));
            }
            Ok(())
        }
        Kernel::Concat { axis } => {
            if inputs.is_empty() || inputs.iter().any(Option::is_none) {
                return Err("needs at least one operand, none missing".into());
            }
            let o = &out.shape;
            if *axis >= o.len() {
                return Err(format!("axis {axis} out of range for {o:?}"));
            }
            let mut total = 0;
            for i in 0..inputs.len() {
                let s = shape(i);
                if s.len() != o.len()
                    || s.iter()
                        .zip(o)
                        .enumerate()
                        .any(|(d, (a, b))| d != *axis && a != b)
                {
                    return Err(format!(
                        "operand {i} {s:?} does not fit the output {o:?} outside axis {axis}"
                    ));
                }
                total += s[*axis];
            }
            want("output along the axis", o[*axis], total)
        }
        Kernel::Transpose { perm } => {
            arity(inputs, 1, 0)?;
            let s = shape(0);
            let mut seen = vec![false; s.len()];
            if perm.len() != s.len()
                || perm
                    .iter()
                    .any(|&p| p >= s.len() || std::mem::replace(&mut seen[p], true))
            {
                return Err(format!("{perm:?} is not a permutation of {} axes", s.len()));
            }
            let permuted: Vec<usize> = perm.iter().map(|&p| s[p]).collect();
            want("output", out.elements(), elements(&permuted))
        }
        Kernel::StridedSlice {
            begin,
            stride,
            count,
        } => {
            arity(inputs, 1, 0)?;
            let s = shape(0);
            if begin.len() != s.len() || stride.len() != s.len() || count.len() != s.len() {
                return Err(format!("slice parameters do not have rank {}", s.len()));
            }
            for d in 0..s.len() {
                if count[d] == 0 {
                    continue;
                }
                let last = begin[d] as isize + (count[d] as isize - 1) * stride[d];
                if begin[d] >= s[d] || last < 0 || last as usize >= s[d] {
                    return Err(format!(
                        "dimension {d}: indices {}..{last} leave 0..{}",
                        begin[d], s[d]
                    ));
                }
            }
            want("output", out.elements(), elements(count))
        }
        Kernel::DepthToSpace { block } | Kernel::SpaceToDepth { block } => {
            arity(inputs, 1, 0)?;
            let (i, o) = (shape(0), out.shape.as_slice());
            let b = *block;
            let ok = i.len() == 4
                && o.len() == 4
                && b > 0
                && match kernel {
                    Kernel::DepthToSpace { .. } => {
                        o == [i[0], i[1] * b, i[2] * b, i[3] / (b * b)] && i[3] % (b * b) == 0
                    }
                    _ => i == [o[0], o[1] * b, o[2] * b, o[3] / (b * b)] && o[3] % (b * b) == 0,
                };
            if ok {
                Ok(())
            } else {
                Err(format!("{i:?} → {o:?} is not a block-{b} rearrangement"))
            }
        }
        Kernel::ResizeBilinear { .. } | Kernel::ResizeNearest { .. } => {
            arity(inputs, 1, 0)?;
            let (i, o) = (shape(0), out.shape.as_slice());
            if i.len() != 4
                || o.len() != 4
                || i[0] != o[0]
                || i[3] != o[3]
                || (elements(o) > 0 && (i[1] == 0 || i[2] == 0))
            {
                return Err(format!(
                    "resize {i:?} → {o:?} is not NHWC with equal N and C"
                ));
            }
            Ok(())
        }
    }
}
