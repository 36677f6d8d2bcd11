//! Work-group picking with fast tuning (spec §9) and the grid → group count → NDRange step
//! (§9.4). Plain functions of the grid and the device limits.

use super::gpu::{AdrenoGen, Gpu, Vendor};

/// (x, y, z).
pub type Dim3 = [usize; 3];

/// Largest divisor of `n` that is at most `max` (1 when `n` is 0).
pub fn largest_divisor_at_most(n: usize, max: usize) -> usize {
    (1..=max.min(n).max(1))
        .rev()
        .find(|&d| n.is_multiple_of(d))
        .unwrap_or(1)
}

/// The conv picker (`GetWorkGroupConv`): used by ConvGeneric when its work group is not fixed.
/// Depends on `kernel_max_wg` only when it is below 256.
pub fn conv_work_group(grid: Dim3, gpu: &Gpu, kernel_max_wg: usize) -> Dim3 {
    let grid = grid.map(|g| g.max(1));
    let mut max_z = 16;
    if gpu.vendor == Vendor::Adreno {
        max_z = if gpu.adreno_gen() == AdrenoGen::A3xx {
            16
        } else {
            64
        };
    }
    max_z = max_z.min(gpu.max_work_item_sizes()[2]).max(1);
    let wz = largest_divisor_at_most(grid[2], max_z);
    let xy = (256.min(kernel_max_wg) / wz).max(1);
    let wx = grid[0].min(xy);
    let mut wy = (xy / wx).min(grid[1]).max(1);
    if wy == grid[1] && grid[1].is_multiple_of(2) {
        wy = grid[1] / 2;
    }
    [wx, wy, wz]
}

/// z size of the generic picker: 8, 4 or 2 when they divide `z`, else its largest (odd) divisor
/// up to 8.
fn divisor_with_priority(z: usize) -> usize {
    match z {
        _ if z.is_multiple_of(8) => 8,
        _ if z.is_multiple_of(4) => 4,
        _ if z.is_multiple_of(2) => 2,
        _ => largest_divisor_at_most(z, 8),
    }
}

/// The generic picker (`GetWorkGroup`): ConvConstants, depthwise, element-wise, pooling and most
/// other kernels. No 256 cap: it depends directly on `kernel_max_wg`.
pub fn generic_work_group(grid: Dim3, kernel_max_wg: usize) -> Dim3 {
    let grid = grid.map(|g| g.max(1));
    let wz = divisor_with_priority(grid[2]);
    let xy = (kernel_max_wg / wz).max(1);
    let wx = grid[0].div_ceil(2).min(xy);
    let wy = (xy / wx).min(grid[1]).max(1);
    [wx, wy, wz]
}

/// The first candidate whose product is at most `kernel_max_wg` (the Winograd transforms).
pub fn first_fitting(candidates: &[Dim3], kernel_max_wg: usize) -> Dim3 {
    candidates
        .iter()
        .copied()
        .find(|c| c.iter().product::<usize>() <= kernel_max_wg)
        .unwrap_or([1, 1, 1])
}

/// Work-group counts after the launch-order permutation: `n = ceil(grid / wg)` over the first
/// `grid_dimension` dimensions (1 beyond), then `count[i] = n[order[i]]`.
pub fn groups_count(grid: Dim3, wg: Dim3, grid_dimension: usize, order: Dim3) -> Dim3 {
    let mut n = [1; 3];
    for i in 0..grid_dimension.min(3) {
        n[i] = grid[i].max(1).div_ceil(wg[i].max(1));
    }
    let mut count = [1; 3];
    for i in 0..grid_dimension.min(3) {
        count[i] = n[order[i].min(2)];
    }
    count
}

/// The launched NDRange: `global[i] = count[i] * wg[i]` (the work group itself is not permuted).
pub fn global_size(count: Dim3, wg: Dim3) -> Dim3 {
    [count[0] * wg[0], count[1] * wg[1], count[2] * wg[2]]
}
