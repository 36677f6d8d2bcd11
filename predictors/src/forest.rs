//! A pure-Rust evaluator of LightGBM regression forests: what the compiler runs to predict
//! latencies, without LightGBM.
//!
//! [`Forest::from_lightgbm`] reads LightGBM's text model format (numerical splits only) and
//! [`Forest::predict`] returns the raw score, the sum of every tree's leaf, with LightGBM's own
//! decision rule (`x <= threshold` goes left; missing-value handling per the split's decision
//! type), so predictions equal LightGBM's (tests check within 1e-6).

use serde::{Deserialize, Serialize};

/// One regression tree in LightGBM's array form: internal nodes `0..leaves-1`; a child `< 0`
/// is leaf `!child`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tree {
    pub split_feature: Vec<u32>,
    pub threshold: Vec<f64>,
    /// LightGBM's decision type: bit 1 default-left, bits 2–3 missing type (0 none, 1 zero,
    /// 2 NaN).
    pub decision_type: Vec<u8>,
    pub left_child: Vec<i32>,
    pub right_child: Vec<i32>,
    pub leaf_value: Vec<f64>,
}

/// A forest: the raw score is the sum of the trees.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Forest {
    /// Features each row must have.
    pub num_features: usize,
    pub trees: Vec<Tree>,
}

const ZERO_THRESHOLD: f64 = 1e-35;

impl Tree {
    #[inline]
    fn leaf(&self, x: &[f64]) -> f64 {
        if self.split_feature.is_empty() {
            return self.leaf_value.first().copied().unwrap_or(0.0);
        }
        let mut node = 0i32;
        while node >= 0 {
            let i = node as usize;
            let mut v = x[self.split_feature[i] as usize];
            let dt = self.decision_type[i];
            let missing = (dt >> 2) & 3;
            if v.is_nan() && missing != 2 {
                v = 0.0;
            }
            let default_side =
                (missing == 1 && v.abs() <= ZERO_THRESHOLD) || (missing == 2 && v.is_nan());
            let left = if default_side {
                dt & 2 != 0
            } else {
                v <= self.threshold[i]
            };
            node = if left {
                self.left_child[i]
            } else {
                self.right_child[i]
            };
        }
        self.leaf_value[(!node) as usize]
    }

    /// Checks the arrays are consistent and every index in bounds.
    fn check(&self, num_features: usize) -> Result<(), String> {
        let internal = self.split_feature.len();
        if self.threshold.len() != internal
            || self.decision_type.len() != internal
            || self.left_child.len() != internal
            || self.right_child.len() != internal
        {
            return Err("node arrays differ in length".into());
        }
        if self.leaf_value.len() != internal + 1 {
            return Err(format!(
                "{} leaves for {internal} internal nodes",
                self.leaf_value.len()
            ));
        }
        for i in 0..internal {
            if self.split_feature[i] as usize >= num_features {
                return Err(format!(
                    "node {i} splits on feature {} of {num_features}",
                    self.split_feature[i]
                ));
            }
            if self.decision_type[i] & 1 != 0 {
                return Err(format!("node {i} is a categorical split (not supported)"));
            }
            for child in [self.left_child[i], self.right_child[i]] {
                let ok = if child >= 0 {
                    (child as usize) < internal && child as usize > i
                } else {
                    ((!child) as usize) < self.leaf_value.len()
                };
                if !ok {
                    return Err(format!("node {i} has child {child} out of range"));
                }
            }
        }
        Ok(())
    }
}

impl Forest {
    /// The raw score for one row of `num_features` features.
    #[inline]
    pub fn predict(&self, x: &[f64]) -> f64 {
        debug_assert!(x.len() >= self.num_features);
        self.trees.iter().map(|t| t.leaf(x)).sum()
    }

    /// Checks every tree (after loading from a file).
    pub fn check(&self) -> Result<(), String> {
        for (i, t) in self.trees.iter().enumerate() {
            t.check(self.num_features)
                .map_err(|e| format!("tree {i}: {e}"))?;
        }
        Ok(())
    }

    /// Reads LightGBM's text model (`Booster::save_string`).
    pub fn from_lightgbm(model: &str) -> Result<Forest, String> {
        let mut num_features = None;
        let mut trees = Vec::new();
        let mut current: Option<Vec<(&str, &str)>> = None;
        let finish = |kv: Vec<(&str, &str)>, trees: &mut Vec<Tree>| -> Result<(), String> {
            let get = |key: &str| kv.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
            let n = trees.len();
            let list = |key: &str| -> Vec<&str> {
                get(key)
                    .map(|v| v.split_whitespace().collect())
                    .unwrap_or_default()
            };
            let parse_all = |key: &str| -> Result<Vec<f64>, String> {
                list(key)
                    .iter()
                    .map(|s| {
                        s.parse::<f64>()
                            .map_err(|_| format!("tree {n}: {key}: '{s}' is not a number"))
                    })
                    .collect()
            };
            let ints = |key: &str| -> Result<Vec<i64>, String> {
                list(key)
                    .iter()
                    .map(|s| {
                        s.parse::<i64>()
                            .map_err(|_| format!("tree {n}: {key}: '{s}' is not an integer"))
                    })
                    .collect()
            };
            let leaves: usize = get("num_leaves")
                .ok_or(format!("tree {n}: no num_leaves"))?
                .trim()
                .parse()
                .map_err(|_| format!("tree {n}: bad num_leaves"))?;
            if get("num_cat").is_some_and(|v| v.trim() != "0") {
                return Err(format!("tree {n}: categorical splits are not supported"));
            }
            let leaf_value = parse_all("leaf_value")?;
            let tree = if leaves <= 1 {
                Tree {
                    split_feature: vec![],
                    threshold: vec![],
                    decision_type: vec![],
                    left_child: vec![],
                    right_child: vec![],
                    leaf_value,
                }
            } else {
                Tree {
                    split_feature: ints("split_feature")?
                        .into_iter()
                        .map(|v| v as u32)
                        .collect(),
                    threshold: parse_all("threshold")?,
                    decision_type: ints("decision_type")?
                        .into_iter()
                        .map(|v| v as u8)
                        .collect(),
                    left_child: ints("left_child")?.into_iter().map(|v| v as i32).collect(),
                    right_child: ints("right_child")?.into_iter().map(|v| v as i32).collect(),
                    leaf_value,
                }
            };
            trees.push(tree);
            Ok(())
        };
        for line in model.lines() {
            let line = line.trim();
            if line.starts_with("Tree=") {
                if let Some(kv) = current.take() {
                    finish(kv, &mut trees)?;
                }
                current = Some(Vec::new());
                continue;
            }
            if line == "end of trees" {
                if let Some(kv) = current.take() {
                    finish(kv, &mut trees)?;
                }
                break;
            }
            if let Some((k, v)) = line.split_once('=') {
                match current.as_mut() {
                    Some(kv) => kv.push((k, v)),
                    None if k == "max_feature_idx" => {
                        let m: usize = v
                            .trim()
                            .parse()
                            .map_err(|_| format!("bad max_feature_idx '{v}'"))?;
                        num_features = Some(m + 1);
                    }
                    None => {}
                }
            }
        }
        if let Some(kv) = current.take() {
            finish(kv, &mut trees)?;
        }
        let forest = Forest {
            num_features: num_features.ok_or("no max_feature_idx: not a LightGBM model")?,
            trees,
        };
        forest.check()?;
        Ok(forest)
    }
}

/// A log-linear baseline the forest corrects: `c0 + Σ ci · ln(1 + x[col_i])`, fitted by least
/// squares on the log latency. Trees cannot extrapolate; the baseline carries the trend in
/// FLOPs, bytes and work groups, so the forest only learns the (white-box) deviations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Baseline {
    pub cols: Vec<usize>,
    /// Intercept, then one coefficient per column.
    pub coef: Vec<f64>,
}

impl Baseline {
    /// The baseline's log latency for one row.
    #[inline]
    pub fn eval(&self, x: &[f64]) -> f64 {
        let mut s = self.coef.first().copied().unwrap_or(0.0);
        for (c, &col) in self.coef.iter().skip(1).zip(&self.cols) {
            s += c * x[col].max(0.0).ln_1p();
        }
        s
    }

    /// Least squares (with a tiny ridge) of `y` on the log columns `cols` of `x`.
    pub fn fit(x: &[Vec<f64>], y: &[f64], cols: &[usize]) -> Baseline {
        let k = cols.len() + 1;
        let mut a = vec![vec![0.0f64; k + 1]; k];
        for (row, &t) in x.iter().zip(y) {
            let mut v = Vec::with_capacity(k);
            v.push(1.0);
            v.extend(cols.iter().map(|&c| row[c].max(0.0).ln_1p()));
            for i in 0..k {
                for j in 0..k {
                    a[i][j] += v[i] * v[j];
                }
                a[i][k] += v[i] * t;
            }
        }
        for (i, r) in a.iter_mut().enumerate().skip(1) {
            r[i] += 1e-6 * (1.0 + r[i]);
        }
        // Gaussian elimination with partial pivoting.
        for col in 0..k {
            let pivot = (col..k)
                .max_by(|&p, &q| a[p][col].abs().total_cmp(&a[q][col].abs()))
                .unwrap_or(col);
            a.swap(col, pivot);
            let d = a[col][col];
            if d.abs() < 1e-12 {
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
        let coef = (0..k)
            .map(|i| {
                if a[i][i].abs() < 1e-12 {
                    0.0
                } else {
                    a[i][k] / a[i][i]
                }
            })
            .collect();
        Baseline {
            cols: cols.to_vec(),
            coef,
        }
    }

    /// Checks the columns are in range for `num_features`.
    pub fn check(&self, num_features: usize) -> Result<(), String> {
        if self.coef.len() != self.cols.len() + 1 {
            return Err("baseline: coefficient count does not match its columns".into());
        }
        match self.cols.iter().find(|&&c| c >= num_features) {
            Some(c) => Err(format!("baseline reads feature {c} of {num_features}")),
            None => Ok(()),
        }
    }
}
