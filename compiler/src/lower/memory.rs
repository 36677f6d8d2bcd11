//! The memory plan: arena offsets from tensor lifetimes.
//!
//! Two tensors may share arena bytes only if their lifetimes (first step that writes, last step
//! that reads, inclusive) do not overlap. Tensors are placed largest first at the lowest offset
//! that clashes with no placed tensor of overlapping lifetime (greedy by size), aligned to
//! [`ARENA_ALIGN`].

use tandem_runtime::artifact::ARENA_ALIGN;

/// A tensor to place: bytes and inclusive lifetime in step indices.
#[derive(Debug, Clone, Copy)]
pub struct Interval {
    pub bytes: usize,
    pub first: usize,
    pub last: usize,
}

/// Offsets for each interval (same order) and the arena size.
pub fn plan(intervals: &[Interval]) -> (Vec<usize>, usize) {
    let mut order: Vec<usize> = (0..intervals.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(intervals[i].bytes), intervals[i].first));
    let mut offsets = vec![0; intervals.len()];
    let mut placed: Vec<usize> = Vec::new();
    let mut arena = 0;
    for i in order {
        let me = intervals[i];
        let size = me.bytes.div_ceil(ARENA_ALIGN) * ARENA_ALIGN;
        let mut clashes: Vec<(usize, usize)> = placed
            .iter()
            .filter(|&&j| intervals[j].first <= me.last && me.first <= intervals[j].last)
            .map(|&j| {
                (
                    offsets[j],
                    offsets[j] + intervals[j].bytes.div_ceil(ARENA_ALIGN) * ARENA_ALIGN,
                )
            })
            .collect();
        clashes.sort_unstable();
        let mut offset = 0;
        for (start, end) in clashes {
            if offset + size <= start {
                break;
            }
            offset = offset.max(end);
        }
        offsets[i] = offset;
        arena = arena.max(offset + size);
        placed.push(i);
    }
    (offsets, arena)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_tensors_never_share_bytes_and_dead_ones_do() {
        let mut state = 17u64;
        for _ in 0..50 {
            let intervals: Vec<Interval> = (0..30)
                .map(|_| {
                    state = state
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let first = (state >> 33) as usize % 20;
                    Interval {
                        bytes: 1 + (state >> 20) as usize % 5000,
                        first,
                        last: first + (state >> 45) as usize % 6,
                    }
                })
                .collect();
            let (offsets, arena) = plan(&intervals);
            for i in 0..intervals.len() {
                assert_eq!(offsets[i] % ARENA_ALIGN, 0);
                assert!(offsets[i] + intervals[i].bytes <= arena);
                for j in 0..i {
                    let live = intervals[i].first <= intervals[j].last
                        && intervals[j].first <= intervals[i].last;
                    let disjoint = offsets[i] + intervals[i].bytes <= offsets[j]
                        || offsets[j] + intervals[j].bytes <= offsets[i];
                    assert!(!live || disjoint, "{i} and {j} overlap while both live");
                }
            }
            let total: usize = intervals
                .iter()
                .map(|i| i.bytes.div_ceil(ARENA_ALIGN) * ARENA_ALIGN)
                .sum();
            assert!(arena < total, "the plan reuses nothing");
        }
    }
}
