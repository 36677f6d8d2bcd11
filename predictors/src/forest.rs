//! A pure-Rust evaluator of LightGBM regression forests: what the compiler runs to predict
//! latencies, without LightGBM.
//!
//! [`Forest::from_lightgbm`] reads LightGBM's text model format (numerical splits only) and
//! [`Forest::predict`] returns the raw score, the sum of every tree's leaf, with LightGBM's own
//! decision rule (`x <= threshold` goes left; missing-value handling per the split's decision
//! type), so predictions equal LightGBM's (tests check within 1e-6).

use serde::{Deserialize, Serialize};
use std::sync::OnceLock;

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
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Forest {
    /// Features each row must have.
    pub num_features: usize,
    pub trees: Vec<Tree>,
    /// The trees laid out for evaluation, built at the first prediction.
    #[serde(skip)]
    flat: OnceLock<FlatForest>,
}

impl PartialEq for Forest {
    fn eq(&self, other: &Forest) -> bool {
        self.num_features == other.num_features && self.trees == other.trees
    }
}

/// One entry of [`FlatForest`]: an internal node, or a leaf (`feature == LEAF`). Each tree's
/// entries are in depth-first order, left subtree first, so a node's left child is the entry
/// after it and only the right child is stored: 16 bytes an entry, and a walk down left
/// branches reads consecutive memory.
#[derive(Debug, Clone, Copy)]
struct Entry {
    /// The split's threshold, or the leaf's value.
    value: f64,
    /// The right child's entry (internal nodes).
    right: u32,
    /// The feature split on, or [`LEAF`].
    feature: u16,
    /// The split's decision type (see [`Tree::decision_type`]).
    decision: u8,
}

/// [`Entry::feature`] of a leaf. Checked forests read fewer features ([`MAX_FEATURES`]).
const LEAF: u16 = u16::MAX;

/// The most features a forest may read: feature indices must fit an [`Entry`] beside
/// [`LEAF`].
pub const MAX_FEATURES: usize = LEAF as usize;

/// Every tree's entries in one array, so that a prediction walks contiguous memory: sweeping
/// a layer's splits predicts a few hundred rows.
#[derive(Debug, Clone, Default)]
struct FlatForest {
    /// Each tree's root entry.
    roots: Vec<u32>,
    entries: Vec<Entry>,
}

impl FlatForest {
    /// Lays out checked trees ([`Tree::check`]).
    fn new(trees: &[Tree]) -> FlatForest {
        let mut f = FlatForest::default();
        for t in trees {
            f.roots.push(f.entries.len() as u32);
            if t.split_feature.is_empty() {
                f.push_leaf(t.leaf_value.first().copied().unwrap_or(0.0));
            } else {
                f.push_subtree(t, 0);
            }
        }
        f
    }

    fn push_leaf(&mut self, value: f64) {
        self.entries.push(Entry {
            value,
            right: 0,
            feature: LEAF,
            decision: 0,
        });
    }

    /// Appends `child` of `t` (a node index, or `!leaf`) and everything under it, depth first.
    fn push_subtree(&mut self, t: &Tree, child: i32) {
        if child < 0 {
            self.push_leaf(t.leaf_value[(!child) as usize]);
            return;
        }
        let i = child as usize;
        let at = self.entries.len();
        self.entries.push(Entry {
            value: t.threshold[i],
            right: 0,
            feature: t.split_feature[i] as u16,
            decision: t.decision_type[i],
        });
        self.push_subtree(t, t.left_child[i]);
        self.entries[at].right = self.entries.len() as u32;
        self.push_subtree(t, t.right_child[i]);
    }

    #[inline]
    fn predict(&self, x: &[f64]) -> f64 {
        self.roots.iter().map(|&root| self.leaf(root, x)).sum()
    }

    /// The leaf value `x` reaches from `root`.
    #[inline]
    fn leaf(&self, root: u32, x: &[f64]) -> f64 {
        let mut at = root as usize;
        loop {
            let e = &self.entries[at];
            if e.feature == LEAF {
                return e.value;
            }
            at = if goes_left(e.decision, e.value, x[e.feature as usize]) {
                at + 1
            } else {
                e.right as usize
            };
        }
    }

    /// Raw scores of many rows, tree by tree: each tree's entries stay in cache for every row.
    /// The rows go down each tree together. While they are a run of consecutive rows and the
    /// split's feature is equal in every row (in a sweep over a layer's splits, its geometry)
    /// or rises or falls along the batch (the channel count, FLOPs, bytes), the left ones are
    /// a prefix or a suffix of the run, found by counting ([`FlatForest::descend_run`]); on
    /// other features the rows are partitioned into index lists
    /// ([`FlatForest::descend_list`]). Same leaves, added in the same order: the same scores
    /// as one row at a time.
    fn predict_batch(&self, rows: &[&[f64]]) -> Vec<f64> {
        let n = rows.len();
        let mut out = vec![0.0; n];
        let Some(first) = rows.first() else {
            return out;
        };
        let features = first.len();
        let mut columns = vec![0.0; features * n];
        for (i, x) in rows.iter().enumerate() {
            for (f, &v) in x.iter().enumerate() {
                columns[f * n + i] = v;
            }
        }
        let batch = Batch {
            rows: n,
            shapes: columns.chunks(n).map(Shape::of).collect(),
            columns,
        };
        let mut lists = Lists {
            order: vec![0; n],
            spare: vec![0; n],
        };
        for (t, &root) in self.roots.iter().enumerate() {
            if let Some(&ahead) = self.roots.get(t + PREFETCH_TREES) {
                prefetch(&self.entries[ahead as usize]);
            }
            self.descend_run(root as usize, 0, n, &batch, &mut out, &mut lists);
        }
        out
    }

    /// Sends the rows `lo..hi` down from entry `at`, adding each one's leaf value to its score.
    fn descend_run(
        &self,
        mut at: usize,
        mut lo: usize,
        mut hi: usize,
        batch: &Batch,
        out: &mut [f64],
        lists: &mut Lists,
    ) {
        loop {
            let e = &self.entries[at];
            if e.feature == LEAF {
                out[lo..hi].iter_mut().for_each(|o| *o += e.value);
                return;
            }
            let f = e.feature as usize;
            let shape = batch.shapes[f];
            let values = &batch.column(f)[lo..hi];
            if shape.kind == Kind::Shared || values.len() == 1 {
                at = if goes_left(e.decision, e.value, values[0]) {
                    at + 1
                } else {
                    e.right as usize
                };
                continue;
            }
            if shape.kind == Kind::Mixed || !plain(e.decision, shape) {
                // The rows split in no order: index lists from here on.
                let order = &mut lists.order[..hi - lo];
                for (slot, row) in order.iter_mut().zip(lo as u32..) {
                    *slot = row;
                }
                self.descend_list(at, order, &mut lists.spare, batch, out);
                return;
            }
            // Few rows: a branch-free count; many (a wide layer's sweep): a binary search.
            let k = if values.len() <= 64 {
                count_at_most(values, e.value)
            } else if shape.kind == Kind::Rising {
                values.partition_point(|&v| v <= e.value)
            } else {
                values.len() - values.partition_point(|&v| v > e.value)
            };
            let ((l0, l1), (r0, r1)) = if shape.kind == Kind::Rising {
                ((lo, lo + k), (lo + k, hi))
            } else {
                ((hi - k, hi), (lo, hi - k))
            };
            // Both sides: the left one first (recursion), then on down the right.
            if l0 < l1 && r0 < r1 {
                self.descend_run(at + 1, l0, l1, batch, out, lists);
            }
            (at, lo, hi) = if r0 < r1 {
                (e.right as usize, r0, r1)
            } else {
                (at + 1, l0, l1)
            };
        }
    }

    /// Sends the rows `order` (indices into the batch, in increasing order) down from entry
    /// `at`, adding each one's leaf value to its score. `spare` is scratch space at least as
    /// long as `order`.
    fn descend_list(
        &self,
        mut at: usize,
        mut order: &mut [u32],
        spare: &mut [u32],
        batch: &Batch,
        out: &mut [f64],
    ) {
        loop {
            let e = &self.entries[at];
            if e.feature == LEAF {
                order.iter().for_each(|&i| out[i as usize] += e.value);
                return;
            }
            let column = batch.column(e.feature as usize);
            let shape = batch.shapes[e.feature as usize];
            let value = |i: u32| column[i as usize];
            let goes = |i: u32| goes_left(e.decision, e.value, value(i));
            // The left rows: a prefix or a suffix of `order` (monotone feature), or the front
            // of `order` after a stable partition.
            let (left, right): (&mut [u32], &mut [u32]) =
                if shape.kind == Kind::Shared || order.len() == 1 {
                    at = if goes(order[0]) {
                        at + 1
                    } else {
                        e.right as usize
                    };
                    continue;
                } else if plain(e.decision, shape) && shape.kind == Kind::Rising {
                    let k = order
                        .iter()
                        .map(|&i| usize::from(value(i) <= e.value))
                        .sum();
                    std::mem::take(&mut order).split_at_mut(k)
                } else if plain(e.decision, shape) && shape.kind == Kind::Falling {
                    let k = order.iter().map(|&i| usize::from(value(i) > e.value)).sum();
                    let (r, l) = std::mem::take(&mut order).split_at_mut(k);
                    (l, r)
                } else {
                    let (mut nl, mut nr) = (0, 0);
                    for j in 0..order.len() {
                        let i = order[j];
                        if goes(i) {
                            order[nl] = i;
                            nl += 1;
                        } else {
                            spare[nr] = i;
                            nr += 1;
                        }
                    }
                    order[nl..].copy_from_slice(&spare[..nr]);
                    std::mem::take(&mut order).split_at_mut(nl)
                };
            if !left.is_empty() {
                self.descend_list(at + 1, left, spare, batch, out);
            }
            if right.is_empty() {
                return;
            }
            order = right;
            at = e.right as usize;
        }
    }
}

/// How many trees ahead [`FlatForest::predict_batch`] asks for a root's cache line.
const PREFETCH_TREES: usize = 4;

/// Asks the CPU to bring `entry`'s cache line in (a hint; no effect on results).
#[inline]
fn prefetch(entry: &Entry) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch reads no memory architecturally; the pointer is a valid reference.
    unsafe {
        std::arch::x86_64::_mm_prefetch(
            (entry as *const Entry).cast::<i8>(),
            std::arch::x86_64::_MM_HINT_T0,
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = entry;
}

/// Whether `v <= threshold` alone decides a split of `decision` type on a feature of `shape`:
/// no value of the batch takes a missing-value side (NaN makes a feature [`Kind::Mixed`]).
#[inline]
fn plain(decision: u8, shape: Shape) -> bool {
    (decision >> 2) & 3 != 1 || !shape.zero
}

/// How many of `values` are `<= threshold`: a branch-free count, faster than a binary search
/// over the few dozen rows of a sweep.
#[inline]
fn count_at_most(values: &[f64], threshold: f64) -> usize {
    values.iter().map(|&v| usize::from(v <= threshold)).sum()
}

/// Scratch index lists for [`FlatForest::descend_list`], one slot per row of the batch.
struct Lists {
    order: Vec<u32>,
    spare: Vec<u32>,
}

/// The rows of a batch, feature by feature, and how each feature varies along them.
struct Batch {
    rows: usize,
    /// Feature `f` of row `i` at `f * rows + i`.
    columns: Vec<f64>,
    shapes: Vec<Shape>,
}

impl Batch {
    /// Feature `f` of every row.
    #[inline]
    fn column(&self, f: usize) -> &[f64] {
        &self.columns[f * self.rows..(f + 1) * self.rows]
    }
}

/// How a feature's values run along a batch's rows.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    /// Bit-equal in every row.
    Shared,
    /// Non-decreasing (no NaN): `v <= t` holds on a prefix.
    Rising,
    /// Non-increasing (no NaN): `v <= t` holds on a suffix.
    Falling,
    Mixed,
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct Shape {
    kind: Kind,
    /// Some value is zero for LightGBM's zero-as-missing rule (`|v| <= 1e-35`).
    zero: bool,
}

impl Shape {
    /// The shape of one feature's values along a batch (one pass).
    fn of(values: &[f64]) -> Shape {
        let first = values.first().copied().unwrap_or(0.0);
        let (mut shared, mut up, mut down) = (true, true, true);
        let (mut zero, mut nan) = (false, false);
        let mut prev = first;
        for &v in values {
            shared &= v.to_bits() == first.to_bits();
            up &= prev <= v;
            down &= prev >= v;
            zero |= v.abs() <= ZERO_THRESHOLD;
            nan |= v.is_nan();
            prev = v;
        }
        let kind = match (shared, nan, up, down) {
            (true, ..) => Kind::Shared,
            (_, true, ..) => Kind::Mixed,
            (_, _, true, _) => Kind::Rising,
            (_, _, _, true) => Kind::Falling,
            _ => Kind::Mixed,
        };
        Shape { kind, zero }
    }
}

/// LightGBM's decision rule for a numerical split.
#[inline]
fn goes_left(decision: u8, threshold: f64, value: f64) -> bool {
    let missing = (decision >> 2) & 3;
    let v = if value.is_nan() && missing != 2 {
        0.0
    } else {
        value
    };
    let default_side = (missing == 1 && v.abs() <= ZERO_THRESHOLD) || (missing == 2 && v.is_nan());
    if default_side {
        decision & 2 != 0
    } else {
        v <= threshold
    }
}

const ZERO_THRESHOLD: f64 = 1e-35;

impl Tree {
    #[cfg(test)]
    fn leaf(&self, x: &[f64]) -> f64 {
        if self.split_feature.is_empty() {
            return self.leaf_value.first().copied().unwrap_or(0.0);
        }
        let mut node = 0i32;
        while node >= 0 {
            let i = node as usize;
            let v = x[self.split_feature[i] as usize];
            node = if goes_left(self.decision_type[i], self.threshold[i], v) {
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
    /// The cost of evaluating the forest, in tree levels a row descends: over the trees,
    /// `log2(leaves + 1)` rounded down (as `train::evaluation_cost` counts a forest by its
    /// parameters).
    pub fn evaluation_cost(&self) -> u64 {
        self.trees
            .iter()
            .map(|t| u64::from((t.leaf_value.len() as u32 + 1).ilog2()))
            .sum()
    }

    /// A forest of `trees` reading rows of `num_features` features (unchecked: see
    /// [`Forest::check`]).
    pub fn new(num_features: usize, trees: Vec<Tree>) -> Forest {
        Forest {
            num_features,
            trees,
            flat: OnceLock::new(),
        }
    }

    /// The raw score for one row of `num_features` features.
    #[inline]
    pub fn predict(&self, x: &[f64]) -> f64 {
        debug_assert!(x.len() >= self.num_features);
        self.flat
            .get_or_init(|| FlatForest::new(&self.trees))
            .predict(x)
    }

    /// [`Forest::predict`] of many rows (the same sums, added tree by tree in the same order).
    pub fn predict_batch(&self, rows: &[&[f64]]) -> Vec<f64> {
        debug_assert!(rows.iter().all(|x| x.len() >= self.num_features));
        self.flat
            .get_or_init(|| FlatForest::new(&self.trees))
            .predict_batch(rows)
    }

    /// The forest whose raw score is this one's plus `then`'s: this forest's trees followed by
    /// `then`'s (boosting sums trees, so a forest trained on this one's residuals continues it).
    /// `None` when the two read rows of different lengths.
    pub fn followed_by(&self, then: &Forest) -> Option<Forest> {
        (self.num_features == then.num_features).then(|| {
            Forest::new(
                self.num_features,
                self.trees.iter().chain(&then.trees).cloned().collect(),
            )
        })
    }

    /// Checks every tree (after loading from a file).
    pub fn check(&self) -> Result<(), String> {
        if self.num_features > MAX_FEATURES {
            return Err(format!(
                "the forest reads {} features, at most {MAX_FEATURES} are supported",
                self.num_features
            ));
        }
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
            flat: OnceLock::new(),
        };
        forest.check()?;
        Ok(forest)
    }
}

/// The baseline the forest corrects: `c0 + Σ ci · ln(1 + x[col_i])`, fitted by least squares
/// on the log latency, plus, for the GPU executors, the log of an additive cost model over the
/// kernel's loop-trip counts ([`Additive`]). Trees cannot extrapolate; the baseline carries the
/// trend in FLOPs, bytes and work, so the forest only learns the (white-box) deviations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Baseline {
    pub cols: Vec<usize>,
    /// Intercept, then one coefficient per column.
    pub coef: Vec<f64>,
    /// An additive cost model under the log-linear terms (absent in profiles trained before
    /// it, and for the CPU executors).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additive: Option<Additive>,
}

/// An additive cost model: `a0 + Σ aj · x[col_j]` milliseconds, every `a ≥ 0` (each count a
/// kernel executes costs time), fitted by non-negative least squares on the relative error
/// ([`crate::nnls`]). The GPU executors' columns are their kernel's loop-trip counts and the
/// bytes the part moves ([`crate::kernel_counts`], [`crate::features::additive_columns`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Additive {
    pub cols: Vec<usize>,
    /// Intercept (the launch's fixed cost), then one cost per unit of each column, in ms.
    pub coef: Vec<f64>,
}

impl Additive {
    /// The least latency the model predicts, ms (a row of zero counts with a zero intercept
    /// would otherwise have no logarithm).
    pub const FLOOR_MS: f64 = 1e-6;

    /// The modelled latency of one row, ms (at least [`Additive::FLOOR_MS`]).
    #[inline]
    pub fn ms(&self, x: &[f64]) -> f64 {
        let mut s = self.coef.first().copied().unwrap_or(0.0);
        for (c, &col) in self.coef.iter().skip(1).zip(&self.cols) {
            s += c * x[col].max(0.0);
        }
        s.max(Self::FLOOR_MS)
    }

    /// The non-negative costs of the columns `cols` (and an intercept) that fit the latencies
    /// `ms` of the rows `x` best in relative terms: each row is weighted by `1 / ms`, so that a
    /// 10 µs part counts as much as a 10 ms one.
    pub fn fit(x: &[Vec<f64>], ms: &[f64], cols: &[usize]) -> Additive {
        let weighted: Vec<Vec<f64>> = x
            .iter()
            .zip(ms)
            .map(|(row, &t)| {
                let w = 1.0 / t.max(Self::FLOOR_MS);
                std::iter::once(w)
                    .chain(cols.iter().map(|&c| row[c].max(0.0) * w))
                    .collect()
            })
            .collect();
        let ones = vec![1.0; x.len()];
        Additive {
            cols: cols.to_vec(),
            coef: crate::nnls::solve(&weighted, &ones),
        }
    }

    fn check(&self, num_features: usize) -> Result<(), String> {
        if self.coef.len() != self.cols.len() + 1 {
            return Err("baseline.additive: coefficient count does not match its columns".into());
        }
        if let Some(c) = self.coef.iter().find(|c| !(c.is_finite() && **c >= 0.0)) {
            return Err(format!(
                "baseline.additive: cost {c} is not a non-negative number"
            ));
        }
        match self.cols.iter().find(|&&c| c >= num_features) {
            Some(c) => Err(format!(
                "baseline.additive reads feature {c} of {num_features}"
            )),
            None => Ok(()),
        }
    }
}

impl Baseline {
    /// The baseline's log latency for one row.
    #[inline]
    pub fn eval(&self, x: &[f64]) -> f64 {
        let mut s = self.coef.first().copied().unwrap_or(0.0);
        for (c, &col) in self.coef.iter().skip(1).zip(&self.cols) {
            s += c * x[col].max(0.0).ln_1p();
        }
        match &self.additive {
            Some(a) => s + a.ms(x).ln(),
            None => s,
        }
    }

    /// The additive cost model `additive` alone (no log-linear terms).
    pub fn of_additive(additive: Additive) -> Baseline {
        Baseline {
            cols: Vec::new(),
            coef: vec![0.0],
            additive: Some(additive),
        }
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
        let coef = crate::nnls::gauss_jordan(a, 1e-12);
        Baseline {
            cols: cols.to_vec(),
            coef,
            additive: None,
        }
    }

    /// The baseline whose log latency is this one's plus `other`'s plus `offset` (the union of
    /// their columns, coefficients of a shared column added; the additive model of whichever
    /// has one). `None` when both have an additive model: the log of a sum of two sums is
    /// not a baseline of this form.
    pub fn plus(&self, other: &Baseline, offset: f64) -> Option<Baseline> {
        let additive = match (&self.additive, &other.additive) {
            (Some(_), Some(_)) => return None,
            (a, b) => a.clone().or_else(|| b.clone()),
        };
        let mut cols = self.cols.clone();
        let mut coef = self.coef.clone();
        if coef.is_empty() {
            coef.push(0.0);
        }
        coef[0] += other.coef.first().copied().unwrap_or(0.0) + offset;
        for (&col, &c) in other.cols.iter().zip(other.coef.iter().skip(1)) {
            match cols.iter().position(|&k| k == col) {
                Some(i) => coef[i + 1] += c,
                None => {
                    cols.push(col);
                    coef.push(c);
                }
            }
        }
        Some(Baseline {
            cols,
            coef,
            additive,
        })
    }

    /// Checks the columns are in range for `num_features`.
    pub fn check(&self, num_features: usize) -> Result<(), String> {
        if self.coef.len() != self.cols.len() + 1 {
            return Err("baseline: coefficient count does not match its columns".into());
        }
        if let Some(a) = &self.additive {
            a.check(num_features)?;
        }
        match self.cols.iter().find(|&&c| c >= num_features) {
            Some(c) => Err(format!("baseline reads feature {c} of {num_features}")),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(features: &[u32], thresholds: &[f64], decisions: &[u8], kids: &[(i32, i32)]) -> Tree {
        Tree {
            split_feature: features.to_vec(),
            threshold: thresholds.to_vec(),
            decision_type: decisions.to_vec(),
            left_child: kids.iter().map(|k| k.0).collect(),
            right_child: kids.iter().map(|k| k.1).collect(),
            leaf_value: (0..=features.len()).map(|i| 0.5 + i as f64).collect(),
        }
    }

    #[test]
    fn the_flat_layout_predicts_what_the_trees_do() {
        let trees = vec![
            // x0 <= 1 ? (x1 <= 0 [missing zero, default left] ? leaf 0 : leaf 1) : leaf 2
            tree(&[0, 1], &[1.0, 0.0], &[0, 0b0110], &[(1, !2), (!0, !1)]),
            // a single leaf
            Tree {
                split_feature: vec![],
                threshold: vec![],
                decision_type: vec![],
                left_child: vec![],
                right_child: vec![],
                leaf_value: vec![-3.0],
            },
            // x1 <= 5 [missing NaN, default right] ? leaf 0 : leaf 1
            tree(&[1], &[5.0], &[0b1000], &[(!0, !1)]),
        ];
        let forest = Forest {
            num_features: 2,
            trees,
            flat: OnceLock::new(),
        };
        forest.check().expect("a consistent forest");
        for x in [
            [0.0, 0.0],
            [0.0, 7.0],
            [2.0, -1.0],
            [1.0, f64::NAN],
            [f64::NAN, 5.0],
            [0.5, 1e-40],
        ] {
            let by_tree: f64 = forest.trees.iter().map(|t| t.leaf(&x)).sum();
            assert_eq!(forest.predict(&x), by_tree, "row {x:?}");
            let batch = forest.predict_batch(&[&x, &[9.0, 9.0]]);
            assert_eq!(
                batch[0].to_bits(),
                by_tree.to_bits(),
                "row {x:?} in a batch"
            );
        }
        // Spot values: row [0, 7]: tree 0 -> x1 = 7 > 0 -> leaf 1 (1.5); -3; tree 2 -> leaf 1 (1.5).
        assert_eq!(forest.predict(&[0.0, 7.0]), 1.5 - 3.0 + 1.5);
        // Row [1, NaN]: tree 0 -> NaN is missing, default left -> leaf 0 (0.5); tree 2 -> NaN
        // goes to the default side, right -> leaf 1 (1.5).
        assert_eq!(forest.predict(&[1.0, f64::NAN]), 0.5 - 3.0 + 1.5);
        // Tree levels, log2(leaves + 1) rounded down: 3 leaves 2, 1 leaf 1, 2 leaves 1.
        assert_eq!(forest.evaluation_cost(), 4);
    }

    /// A batch whose rows share some features (a sweep's layer geometry) and have others
    /// rising or falling (its channel counts) scores each row exactly as alone, whichever
    /// features are shared or monotone, with zeros and NaN.
    #[test]
    fn a_batch_with_shared_features_scores_each_row_as_alone() {
        let mut rng = tandem_runtime::rng::Rng::new(5);
        let mut draw = |n: u64| (rng.next_u64() % n) as f64;
        // Random trees of depth 3 over 4 features, on values 0..8, thresholds on and between them.
        let trees: Vec<Tree> = (0..40)
            .map(|_| {
                let features: Vec<u32> = (0..7).map(|_| draw(4) as u32).collect();
                let thresholds: Vec<f64> = (0..7).map(|_| draw(16) / 2.0).collect();
                let decisions: Vec<u8> = (0..7)
                    .map(|_| [0, 0b0110, 0b0100, 0b1000][draw(4) as usize])
                    .collect();
                // Node i has children 2i+1, 2i+2 (nodes 1..=6); nodes 3..=6 have leaves.
                let kids: Vec<(i32, i32)> = (0..7)
                    .map(|i| {
                        if i < 3 {
                            (2 * i + 1, 2 * i + 2)
                        } else {
                            (!(2 * (i - 3)), !(2 * (i - 3) + 1))
                        }
                    })
                    .collect();
                let mut t = tree(&features, &thresholds, &decisions, &kids);
                t.leaf_value = (0..8).map(|_| draw(1000) / 7.0 - 70.0).collect();
                t
            })
            .collect();
        let forest = Forest {
            num_features: 4,
            trees,
            flat: OnceLock::new(),
        };
        forest.check().expect("a consistent forest");
        // Each feature shared, random (NaN in row 5), rising or falling: every mix of 4.
        for pattern in 0..256u32 {
            let columns: Vec<Vec<f64>> = (0..4)
                .map(|f| {
                    let base = draw(9);
                    let mut column: Vec<f64> = (0..12).map(|_| draw(9)).collect();
                    match (pattern >> (2 * f)) & 3 {
                        0 => column.fill(base),
                        1 => column[5] = f64::NAN,
                        2 => column.sort_by(f64::total_cmp),
                        _ => column.sort_by(|a, b| b.total_cmp(a)),
                    }
                    column
                })
                .collect();
            let rows: Vec<Vec<f64>> = (0..12)
                .map(|r| columns.iter().map(|c| c[r]).collect())
                .collect();
            let refs: Vec<&[f64]> = rows.iter().map(Vec::as_slice).collect();
            for (x, b) in rows.iter().zip(forest.predict_batch(&refs)) {
                let alone: f64 = forest.trees.iter().map(|t| t.leaf(x)).sum();
                assert_eq!(
                    b.to_bits(),
                    alone.to_bits(),
                    "pattern {pattern:08b}, row {x:?}"
                );
            }
        }
    }

    /// A random tree of `leaves` leaves and any shape (LightGBM's numbering: a node's
    /// children come after it), splitting on features `0..features` at thresholds among the
    /// values `0..8`.
    fn random_tree(draw: &mut impl FnMut(u64) -> f64, leaves: usize, features: u64) -> Tree {
        let mut t = Tree {
            split_feature: vec![],
            threshold: vec![],
            decision_type: vec![],
            left_child: vec![],
            right_child: vec![],
            leaf_value: (0..leaves).map(|_| draw(1000) / 7.0 - 70.0).collect(),
        };
        // Grow by splitting a random open slot (a child still to be filled) into a node.
        // `open` holds (parent node, is the left child).
        let mut open: Vec<(Option<usize>, bool)> = vec![(None, true)];
        while t.split_feature.len() + 1 < leaves {
            let (parent, left) = open.swap_remove(draw(open.len() as u64) as usize);
            let node = t.split_feature.len();
            t.split_feature.push(draw(features) as u32);
            t.threshold.push(draw(16) / 2.0);
            t.decision_type
                .push([0, 0b0110, 0b0100, 0b1000][draw(4) as usize]);
            t.left_child.push(0);
            t.right_child.push(0);
            match (parent, left) {
                (Some(p), true) => t.left_child[p] = node as i32,
                (Some(p), false) => t.right_child[p] = node as i32,
                (None, _) => {}
            }
            open.push((Some(node), true));
            open.push((Some(node), false));
        }
        // The remaining slots are the leaves.
        for (leaf, (parent, left)) in open.into_iter().enumerate() {
            if let Some(p) = parent {
                if left {
                    t.left_child[p] = !(leaf as i32);
                } else {
                    t.right_child[p] = !(leaf as i32);
                }
            }
        }
        t
    }

    /// Deep, unbalanced trees of up to 130 leaves (LightGBM's usual shapes; the shipped
    /// profiles' reach 127), batches of 1 to 300 rows: every row of a batch scores bit for bit
    /// as alone, and as the flat layout's walk of the row alone.
    #[test]
    fn deep_trees_score_a_batch_as_each_row_alone() {
        let mut rng = tandem_runtime::rng::Rng::new(11);
        let mut draw = move |n: u64| (rng.next_u64() % n.max(1)) as f64;
        let features = 6;
        let trees: Vec<Tree> = (0..60)
            .map(|i| random_tree(&mut draw, 1 + (i * 11) % 130, features))
            .collect();
        let forest = Forest::new(features as usize, trees);
        forest.check().expect("a consistent forest");
        for round in 0..200u32 {
            let n = 1 + draw(if round % 4 == 0 { 300 } else { 70 }) as usize;
            let columns: Vec<Vec<f64>> = (0..features)
                .map(|_| {
                    let base = draw(9);
                    let mut column: Vec<f64> = (0..n).map(|_| draw(17) / 2.0).collect();
                    match draw(5) as u32 {
                        0 => column.fill(base),
                        1 => column[draw(n as u64) as usize] = f64::NAN,
                        2 => column.sort_by(f64::total_cmp),
                        3 => column.sort_by(|a, b| b.total_cmp(a)),
                        _ => {}
                    }
                    column
                })
                .collect();
            let rows: Vec<Vec<f64>> = (0..n)
                .map(|r| columns.iter().map(|c| c[r]).collect())
                .collect();
            let refs: Vec<&[f64]> = rows.iter().map(Vec::as_slice).collect();
            for (x, b) in rows.iter().zip(forest.predict_batch(&refs)) {
                // The naive walk of each tree, not the flat layout's.
                let alone: f64 = forest.trees.iter().map(|t| t.leaf(x)).sum();
                assert_eq!(b.to_bits(), alone.to_bits(), "round {round}, row {x:?}");
                assert_eq!(
                    forest.predict(x).to_bits(),
                    alone.to_bits(),
                    "round {round}"
                );
            }
        }
    }

    /// Feature indices share an entry with the leaf marker: a forest reading more features
    /// than that is refused with a message, never laid out wrong.
    #[test]
    fn a_forest_reading_too_many_features_is_refused() {
        let ok = Forest::new(MAX_FEATURES, vec![tree(&[0], &[1.0], &[0], &[(!0, !1)])]);
        assert!(ok.check().is_ok());
        let wide = Forest::new(MAX_FEATURES + 1, ok.trees.clone());
        let err = wide.check().expect_err("too many features");
        assert!(err.contains("65536 features"), "{err}");
    }

    #[test]
    fn composed_forests_and_baselines_add_their_parts() {
        let a = Forest::new(2, vec![tree(&[0], &[1.0], &[0], &[(!0, !1)])]);
        let b = Forest::new(2, vec![tree(&[1], &[0.0], &[0], &[(!0, !1)]); 2]);
        let ab = a.followed_by(&b).expect("same row length");
        assert_eq!(ab.trees.len(), 3);
        for x in [[0.0, 0.0], [2.0, -1.0], [2.0, 3.0]] {
            assert_eq!(ab.predict(&x), a.predict(&x) + b.predict(&x), "row {x:?}");
        }
        assert!(a.followed_by(&Forest::new(3, vec![])).is_none());

        let p = Baseline {
            cols: vec![0, 2],
            coef: vec![0.5, 1.0, -0.25],
            additive: Some(Additive {
                cols: vec![1],
                coef: vec![0.01, 2e-6],
            }),
        };
        let q = Baseline {
            cols: vec![2, 1],
            coef: vec![-1.0, 0.5, 2.0],
            additive: None,
        };
        let pq = p.plus(&q, 0.125).expect("one additive model");
        assert_eq!(pq.cols, vec![0, 2, 1]);
        pq.check(3).expect("columns in range");
        for x in [[0.0, 0.0, 0.0], [3.0, 1e6, 7.5], [1e9, 2.0, 0.5]] {
            let want = p.eval(&x) + q.eval(&x) + 0.125;
            assert!((pq.eval(&x) - want).abs() < 1e-12, "row {x:?}");
        }
        // An empty baseline (no intercept yet) takes the other's terms.
        let empty = Baseline {
            cols: vec![],
            coef: vec![],
            additive: None,
        };
        assert_eq!(
            empty.plus(&q, 0.0).map(|b| b.eval(&[1.0, 2.0, 3.0])),
            Some(q.eval(&[1.0, 2.0, 3.0]))
        );
        // Two additive models do not add up to one.
        assert!(p.plus(&p, 0.0).is_none());
    }

    #[test]
    fn an_additive_baseline_recovers_costs_and_is_checked() {
        // Two counts and a launch cost, rows of very different latency.
        let x: Vec<Vec<f64>> = (0..60)
            .map(|i| {
                let i = f64::from(i);
                vec![7.0, 1e4 * (1.0 + i * i), 300.0 * (i % 7.0)]
            })
            .collect();
        let ms: Vec<f64> = x
            .iter()
            .map(|r| 0.002 + 3e-7 * r[1] + 1e-6 * r[2])
            .collect();
        let a = Additive::fit(&x, &ms, &[1, 2]);
        for (got, want) in a.coef.iter().zip([0.002, 3e-7, 1e-6]) {
            assert!((got - want).abs() <= 1e-9 * want.max(1e-3), "{a:?}");
        }
        let b = Baseline::of_additive(a);
        b.check(3).expect("in range, non-negative");
        for (r, t) in x.iter().zip(&ms) {
            assert!((b.eval(r) - t.ln()).abs() < 1e-9);
        }
        // A negative cost, or a column past the row, is refused.
        let mut bad = b.clone();
        if let Some(a) = bad.additive.as_mut() {
            a.coef[1] = -1e-7;
        }
        assert!(bad.check(3).is_err_and(|e| e.contains("non-negative")));
        assert!(b
            .check(2)
            .is_err_and(|e| e.contains("reads feature 2 of 2")));
    }
}
