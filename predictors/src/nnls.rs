//! Non-negative least squares (Lawson and Hanson's active-set method): the `a ≥ 0` that
//! minimises `|X a − y|²`. The additive cost models under the GPU executors' forests are fitted
//! with it ([`crate::forest::Additive`]): every count a kernel executes costs time, never saves
//! it, so a negative coefficient would only be the fit bending to noise.
//!
//! The problems here are small (a few columns, thousands of rows), so the method works on the
//! normal equations `XᵀX` and `Xᵀy`, with each column scaled to unit norm first.

/// The non-negative least-squares solution of `x a ≈ y` (`x` row-major, every row as long as
/// the first). Columns that are zero throughout get a zero coefficient. Empty for no columns.
pub fn solve(x: &[Vec<f64>], y: &[f64]) -> Vec<f64> {
    let k = x.first().map_or(0, Vec::len);
    if k == 0 {
        return Vec::new();
    }
    // Column norms, so that counts of 1e9 and a constant of 1 weigh alike.
    let mut norm = vec![0.0f64; k];
    for row in x {
        for (n, v) in norm.iter_mut().zip(row) {
            *n += v * v;
        }
    }
    let norm: Vec<f64> = norm.into_iter().map(f64::sqrt).collect();
    let mut gram = vec![vec![0.0f64; k]; k];
    let mut xty = vec![0.0f64; k];
    for (row, &t) in x.iter().zip(y) {
        let z: Vec<f64> = row
            .iter()
            .zip(&norm)
            .map(|(v, n)| if *n > 0.0 { v / n } else { 0.0 })
            .collect();
        for i in 0..k {
            xty[i] += z[i] * t;
            for j in 0..k {
                gram[i][j] += z[i] * z[j];
            }
        }
    }
    let scaled = solve_normal(&gram, &xty);
    scaled
        .iter()
        .zip(&norm)
        .map(|(a, n)| if *n > 0.0 { a / n } else { 0.0 })
        .collect()
}

/// Lawson–Hanson on the normal equations: `gram = XᵀX`, `xty = Xᵀy`.
fn solve_normal(gram: &[Vec<f64>], xty: &[f64]) -> Vec<f64> {
    let k = xty.len();
    let scale = xty.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1e-300);
    let tol = 1e-12 * scale * k as f64;
    let mut a = vec![0.0f64; k];
    let mut passive = vec![false; k];
    // The gradient of −½|Xa − y|²: Xᵀy − XᵀX a.
    let gradient = |a: &[f64]| -> Vec<f64> {
        (0..k)
            .map(|i| xty[i] - (0..k).map(|j| gram[i][j] * a[j]).sum::<f64>())
            .collect()
    };
    for _ in 0..3 * k + 10 {
        let w = gradient(&a);
        let Some(j) = (0..k)
            .filter(|&j| !passive[j] && w[j] > tol && gram[j][j] > 0.0)
            .max_by(|&p, &q| w[p].total_cmp(&w[q]))
        else {
            break;
        };
        passive[j] = true;
        // Inner loop: the unconstrained solution on the passive set, stepping back to the
        // feasible region (and dropping the columns that reach zero) while it is not positive.
        for _ in 0..3 * k + 10 {
            let s = solve_on(gram, xty, &passive);
            if (0..k).all(|i| !passive[i] || s[i] > 0.0) {
                a = s;
                break;
            }
            let alpha = (0..k)
                .filter(|&i| passive[i] && s[i] <= 0.0)
                .map(|i| a[i] / (a[i] - s[i]))
                .fold(1.0f64, f64::min);
            for i in 0..k {
                a[i] += alpha * (s[i] - a[i]);
                if passive[i] && a[i] <= 1e-15 {
                    passive[i] = false;
                    a[i] = 0.0;
                }
            }
        }
    }
    a
}

/// The least-squares solution on the columns marked `on` (zero elsewhere), from the normal
/// equations (with a tiny ridge).
fn solve_on(gram: &[Vec<f64>], xty: &[f64], on: &[bool]) -> Vec<f64> {
    let idx: Vec<usize> = (0..on.len()).filter(|&i| on[i]).collect();
    let mut a: Vec<Vec<f64>> = idx
        .iter()
        .map(|&i| {
            let mut row: Vec<f64> = idx.iter().map(|&j| gram[i][j]).collect();
            row.push(xty[i]);
            row
        })
        .collect();
    for (i, row) in a.iter_mut().enumerate() {
        row[i] += 1e-12 * (1.0 + row[i]);
    }
    let s = gauss_jordan(a, 1e-300);
    let mut out = vec![0.0; on.len()];
    for (&i, v) in idx.iter().zip(s) {
        out[i] = v;
    }
    out
}

/// Solves the square system whose augmented rows are `a` (`k` rows of `k + 1`: the matrix, then
/// the right-hand side) by Gauss–Jordan elimination with partial pivoting. An unknown whose
/// pivot is smaller than `singular` in magnitude (a column the others already explain) gets 0.
pub(crate) fn gauss_jordan(mut a: Vec<Vec<f64>>, singular: f64) -> Vec<f64> {
    let k = a.len();
    for col in 0..k {
        let pivot = (col..k)
            .max_by(|&p, &q| a[p][col].abs().total_cmp(&a[q][col].abs()))
            .unwrap_or(col);
        a.swap(col, pivot);
        let d = a[col][col];
        if d.abs() < singular {
            continue;
        }
        let pivot_row = a[col].clone();
        for (r, row) in a.iter_mut().enumerate() {
            if r != col {
                let f = row[col] / d;
                for (x, p) in row.iter_mut().zip(&pivot_row).skip(col) {
                    *x -= f * p;
                }
            }
        }
    }
    (0..k)
        .map(|i| {
            if a[i][i].abs() < singular {
                0.0
            } else {
                a[i][k] / a[i][i]
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tandem_runtime::rng::Rng;

    fn residual(x: &[Vec<f64>], y: &[f64], a: &[f64]) -> f64 {
        x.iter()
            .zip(y)
            .map(|(r, t)| {
                let p: f64 = r.iter().zip(a).map(|(v, c)| v * c).sum();
                (p - t) * (p - t)
            })
            .sum()
    }

    /// The naive reference: unconstrained least squares on every subset of the columns, the
    /// best whose coefficients are all non-negative.
    fn by_every_subset(x: &[Vec<f64>], y: &[f64]) -> Vec<f64> {
        let k = x[0].len();
        let mut gram = vec![vec![0.0; k]; k];
        let mut xty = vec![0.0; k];
        for (r, t) in x.iter().zip(y) {
            for i in 0..k {
                xty[i] += r[i] * t;
                for j in 0..k {
                    gram[i][j] += r[i] * r[j];
                }
            }
        }
        let mut best = (residual(x, y, &vec![0.0; k]), vec![0.0; k]);
        for mask in 1u32..(1 << k) {
            let on: Vec<bool> = (0..k).map(|i| mask & (1 << i) != 0).collect();
            let s = solve_on(&gram, &xty, &on);
            if s.iter().all(|&v| v >= 0.0) {
                let r = residual(x, y, &s);
                if r < best.0 {
                    best = (r, s);
                }
            }
        }
        best.1
    }

    fn uniform(rng: &mut Rng) -> f64 {
        (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    #[test]
    fn recovers_non_negative_coefficients_of_exact_data_of_any_scale() {
        let mut rng = Rng::new(3);
        // Columns of very different magnitude, as kernel counts and a constant are.
        let truth = [2.5e-7, 0.0, 1.3e-5, 0.002];
        let x: Vec<Vec<f64>> = (0..200)
            .map(|_| {
                vec![
                    1e9 * uniform(&mut rng),
                    1e6 * uniform(&mut rng),
                    1e5 * uniform(&mut rng),
                    1.0,
                ]
            })
            .collect();
        let y: Vec<f64> = x
            .iter()
            .map(|r| r.iter().zip(&truth).map(|(v, c)| v * c).sum())
            .collect();
        let a = solve(&x, &y);
        for (got, want) in a.iter().zip(truth) {
            assert!((got - want).abs() <= 1e-6 * want.abs().max(1e-12), "{a:?}");
        }
    }

    #[test]
    fn matches_the_best_non_negative_subset_fit() {
        let mut rng = Rng::new(5);
        for trial in 0..200 {
            let k = 1 + trial % 6;
            let m = k + 3 + (rng.next_u64() % 30) as usize;
            let x: Vec<Vec<f64>> = (0..m)
                .map(|_| (0..k).map(|_| uniform(&mut rng) * 10.0 - 2.0).collect())
                .collect();
            // Some true coefficients negative, so that constraints bind.
            let truth: Vec<f64> = (0..k).map(|_| uniform(&mut rng) * 4.0 - 2.0).collect();
            let y: Vec<f64> = x
                .iter()
                .map(|r| {
                    r.iter().zip(&truth).map(|(v, c)| v * c).sum::<f64>() + uniform(&mut rng) - 0.5
                })
                .collect();
            let a = solve(&x, &y);
            assert!(a.iter().all(|&v| v >= 0.0), "{a:?}");
            let reference = by_every_subset(&x, &y);
            let (r, r0) = (residual(&x, &y, &a), residual(&x, &y, &reference));
            assert!(
                r <= r0 * (1.0 + 1e-9) + 1e-12,
                "trial {trial}: {r} against {r0}"
            );
        }
    }

    #[test]
    fn zero_columns_and_no_columns() {
        let x = vec![vec![0.0, 1.0], vec![0.0, 2.0]];
        let a = solve(&x, &[2.0, 4.0]);
        assert_eq!(a[0], 0.0);
        assert!((a[1] - 2.0).abs() < 1e-9, "{a:?}");
        assert!(solve(&[], &[]).is_empty());
        // A target no non-negative combination approaches: all zero.
        assert_eq!(solve(&[vec![1.0], vec![2.0]], &[-1.0, -2.0]), vec![0.0]);
    }
}
