//! The quiet gate of `tandem profile`: measure only while the machine runs at its usual speed.
//!
//! On a shared machine a core can run 1.4–1.8x slower for seconds at a time (another tenant on
//! its sibling hyperthread or on the memory bus; no steal time shows it). Every point of a
//! configuration measured in such a phase comes out slow together, and no number of
//! repetitions within the configuration removes it: two profiling runs then disagree by
//! 6–12% on the GPU side. The gate times a fixed reference layer (the probe,
//! [`tandem_runtime::profile::probe_layer`]) on the same core before and after each round of a
//! configuration's points, and keeps a round only when both probes are within `slack` of the
//! probe's quiet time: the 10th percentile of the recent probe times (the least one is a lucky
//! outlier on a busy machine, and the typical one includes the slow phases).
//!
//! On the GPU side the probe has a second reading, the join (the CPU–GPU handoff of the
//! polling protocol, about 1 µs). On the AMD EPYC host it has slow phases of tens of seconds
//! (about 2.6 µs) that add some 3 µs to every short GPU part, which the reference layer, a
//! millisecond long, cannot show. The join is judged against its own quiet time and slack.
//!
//! Both sides may have a memory reading too ([`MemoryProbe`]: a stream over a buffer twice the
//! L3). The reference layer fits the L3, so it misses the phases in which other tenants load
//! the memory bus, which slow layers over about 8 MB by 1.3–2.7x for seconds and made two
//! profiling runs of such layers disagree by 9% per point on the AMD EPYC host.
//!
//! Contracts:
//! - [`QuietGate::record`] says whether a probe is quiet: each of its readings against the
//!   window of that reading, including it.
//! - [`QuietGate::wait`] probes (at least [`CALIBRATION`] times in all, to learn the quiet time)
//!   until a probe is quiet or `max_wait` has passed; it never blocks longer than `max_wait`
//!   plus one probe.
//! - [`drop_slow_join_gpu_rows`] leaves out, from a dataset, the GPU rows of configurations
//!   whose recorded join was slow (data measured before the join was gated).
//! - [`gated_rounds`] measures `rounds` quiet rounds of a set of points, at most twice as many
//!   attempts; a point's latency is the least of its quiet round medians, or, when no round was
//!   quiet, the least of all (counted in [`GateStats::noisy`]); its fastest repetition is the
//!   least of every round measured, discarded ones included (a slow phase only adds time, and
//!   on the AMD EPYC host a slow round still has fast moments); it also gives the median
//!   reference-layer time of the probes around those rounds, the machine's speed meanwhile.

use crate::dataset::Row;
use crate::features::is_cpu;
use std::collections::{HashSet, VecDeque};
use std::time::{Duration, Instant};
use tandem_runtime::profile::{MeasureOptions, Timing};

/// Probes the gate takes before it trusts its quiet time, `CALIBRATION_PAUSE` apart (about
/// 2 s: most slow phases are shorter). A run that starts in a longer slow phase keeps rounds
/// measured in it until the first quiet probe lowers the quiet time.
pub const CALIBRATION: usize = 12;
const CALIBRATION_PAUSE: Duration = Duration::from_millis(150);

/// Recent probe times the quiet time is the 10th percentile of (several minutes of profiling):
/// long enough to span a slow phase, short enough to follow a lasting change of the machine.
const WINDOW: usize = 2000;

/// Pause between probes while waiting for a quiet phase.
const PAUSE: Duration = Duration::from_millis(40);

/// The gate of one side (the GPU's core or the CPU's). A probe gives one or more readings
/// (the reference layer's time first; on the GPU side also the join, see
/// [`QuietGate::with_reading`]), each judged against its own recent history and slack.
#[derive(Debug, Clone)]
pub struct QuietGate {
    readings: Vec<Reading>,
    max_wait: Duration,
    /// Probes recorded so far (calibration counts them).
    probes: usize,
    /// The reference layer's time (the first reading) of the latest probe.
    last: Option<f64>,
}

/// One reading of a probe: its slack and its recent values.
#[derive(Debug, Clone)]
struct Reading {
    /// A value within `quiet value × (1 + slack)` is quiet; 0: never judged.
    slack: f64,
    history: VecDeque<f64>,
}

impl Reading {
    fn new(slack: f64) -> Reading {
        Reading {
            slack: slack.max(0.0),
            history: VecDeque::new(),
        }
    }

    /// The 10th percentile of the recent window (`None` before any value).
    fn quiet(&self) -> Option<f64> {
        tenth_percentile(&mut self.history.iter().copied().collect::<Vec<_>>())
    }

    /// Adds a value; whether it is quiet (always, for a reading that is not judged).
    fn record(&mut self, value: f64) -> bool {
        if self.history.len() == WINDOW {
            self.history.pop_front();
        }
        self.history.push_back(value);
        self.slack == 0.0
            || self
                .quiet()
                .is_some_and(|q| value <= q * (1.0 + self.slack))
    }
}

/// The 10th percentile of `v` (the value at index `(n − 1) / 10` in order; `None` when empty):
/// the quiet time of a reading, robust to a lucky outlier and to slow phases.
fn tenth_percentile(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let k = (v.len() - 1) / 10;
    Some(*v.select_nth_unstable_by(k, f64::total_cmp).1)
}

/// A slow handoff phase adds about twice the join's excess to a GPU part (two handoffs: the
/// CPU's flag to the GPU's wait kernel, the GPU's signal back); a part at least this many
/// times that addition long is changed by under 1% and kept.
const SHORT_PART_FACTOR: f64 = 100.0;

/// Leaves out the short GPU parts of every configuration whose join (`sync_ms`, one per
/// configuration) exceeds the 10th percentile of the configurations' joins (the quiet join) by
/// more than `slack` (a fraction): configurations measured in a slow phase of the CPU–GPU
/// handoff, which adds about twice the join's excess to every GPU part (the gate's second
/// reading, for data measured without it or whose rounds found no quiet phase). A part is
/// short when that addition is over 1% of it (`SHORT_PART_FACTOR`); longer parts and CPU
/// rows stay. Returns how many configurations lost rows.
pub fn drop_slow_join_gpu_rows(rows: &mut Vec<Row>, slack: f64) -> usize {
    let mut seen = HashSet::new();
    let mut joins: Vec<f64> = rows
        .iter()
        .filter(|r| seen.insert(r.config.as_str()))
        .map(|r| r.sync_ms)
        .collect();
    let Some(quiet) = tenth_percentile(&mut joins) else {
        return 0;
    };
    let limit = quiet * (1.0 + slack.max(0.0));
    let mut slow = HashSet::new();
    rows.retain(|r| {
        let added = 2.0 * (r.sync_ms - quiet);
        let drop = !is_cpu(&r.executor) && r.sync_ms > limit && r.ms < SHORT_PART_FACTOR * added;
        if drop {
            slow.insert(r.config.clone());
        }
        !drop
    });
    slow.len()
}

/// Bytes [`MemoryProbe`] streams: twice the last-level cache of the AMD EPYC (32 MB), so that
/// every pass there comes from memory. The fourth Intel Xeon host's 260 MiB L3 holds part of
/// it: one core summed 64 MB at 17–25 GB/s and 1 GB at 10–12 GB/s (2026-12-07), so there the
/// reading is of other tenants' pressure on the shared L3 as much as on memory.
pub const MEMORY_PROBE_BYTES: usize = 64 << 20;

/// The gates' memory reading: the time to stream [`MEMORY_PROBE_BYTES`] from memory on the
/// calling core. On a shared host the memory bus is shared with other tenants, whose traffic
/// slows every layer whose data does not fit the cache (over about 8 MB here) by 1.3–2.7x for
/// seconds at a time, while the reference layer, which fits the L3, runs at its usual speed.
pub struct MemoryProbe {
    words: Vec<u64>,
}

impl MemoryProbe {
    /// Allocates and fills the buffer (so that its pages exist before the first reading).
    pub fn new() -> MemoryProbe {
        MemoryProbe {
            words: (0..MEMORY_PROBE_BYTES as u64 / 8).collect(),
        }
    }

    /// One pass over the buffer, in milliseconds.
    pub fn time_ms(&self) -> f64 {
        let start = Instant::now();
        std::hint::black_box(stream_sum(std::hint::black_box(&self.words)));
        start.elapsed().as_secs_f64() * 1e3
    }
}

impl Default for MemoryProbe {
    fn default() -> Self {
        MemoryProbe::new()
    }
}

/// The wrapping sum of `words`, in eight independent lanes (vectorised: bound by memory).
fn stream_sum(words: &[u64]) -> u64 {
    let mut lanes = [0u64; 8];
    let chunks = words.chunks_exact(8);
    let tail = chunks.remainder();
    for chunk in chunks {
        for (lane, &w) in lanes.iter_mut().zip(chunk) {
            *lane = lane.wrapping_add(w);
        }
    }
    lanes
        .iter()
        .chain(tail)
        .fold(0u64, |acc, &w| acc.wrapping_add(w))
}

/// What the gates did over a profiling run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GateStats {
    /// Rounds measured in a slow phase and not kept.
    pub discarded: usize,
    /// Sides of configurations (GPU, CPU) with no quiet round: their least round is kept.
    pub noisy: usize,
    /// Time spent waiting for quiet phases (probes included).
    pub waited: Duration,
}

impl QuietGate {
    /// A gate on the reference layer's time with relative `slack` (e.g. 0.06; 0 turns the
    /// gate off) that waits at most `max_wait`.
    pub fn new(slack: f64, max_wait: Duration) -> QuietGate {
        QuietGate {
            readings: vec![Reading::new(slack)],
            max_wait,
            probes: 0,
            last: None,
        }
    }

    /// Judges a further reading of each probe (the probe's next value) with its own `slack`
    /// (0: recorded, never judged). [`QuietGate::wait`] and [`gated_rounds`] use the gate, and
    /// so this reading, only while the gate is on.
    pub fn with_reading(mut self, slack: f64) -> QuietGate {
        self.readings.push(Reading::new(slack));
        self
    }

    /// Whether the gate is on.
    pub fn enabled(&self) -> bool {
        self.readings[0].slack > 0.0
    }

    /// A reading's quiet value: the 10th percentile of its recent window (`None` before any
    /// probe, or for a reading the gate lacks).
    pub fn quiet(&self, reading: usize) -> Option<f64> {
        self.readings.get(reading).and_then(Reading::quiet)
    }

    /// Adds a probe's readings (one value per reading, in order); whether every reading is
    /// quiet. A probe with fewer values leaves the missing readings unjudged, extra values are
    /// ignored (a debug build asserts the count).
    pub fn record(&mut self, probe: &[f64]) -> bool {
        debug_assert_eq!(probe.len(), self.readings.len(), "one value per reading");
        self.probes += 1;
        self.last = probe.first().copied();
        // Every reading records its value, also after an earlier one was slow: each history
        // must hold every probe.
        let mut quiet = true;
        for (r, &v) in self.readings.iter_mut().zip(probe) {
            quiet &= r.record(v);
        }
        quiet
    }

    /// Probes until a probe is quiet (after calibrating) or `max_wait` has passed; whether the
    /// machine is quiet now. A failing probe's error is returned.
    pub fn wait<E>(
        &mut self,
        stats: &mut GateStats,
        mut probe: impl FnMut() -> Result<Vec<f64>, E>,
    ) -> Result<bool, E> {
        let start = Instant::now();
        while self.probes + 1 < CALIBRATION {
            self.record(&probe()?);
            std::thread::sleep(CALIBRATION_PAUSE);
        }
        let quiet = loop {
            if self.record(&probe()?) {
                break true;
            }
            if start.elapsed() >= self.max_wait {
                break false;
            }
            std::thread::sleep(PAUSE);
        };
        stats.waited += start.elapsed();
        Ok(quiet)
    }
}

/// Elementwise: the least median, the repetitions summed.
fn fold(acc: &mut Option<Vec<Timing>>, round: &[Timing]) {
    match acc {
        None => *acc = Some(round.to_vec()),
        Some(a) => {
            for (x, t) in a.iter_mut().zip(round) {
                x.median_ms = x.median_ms.min(t.median_ms);
                x.least_ms = x.least_ms.min(t.least_ms);
                x.reps += t.reps;
            }
        }
    }
}

/// What [`gated_rounds`] measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Rounds {
    /// Per point, the least of its quiet round medians (of all rounds when none was quiet),
    /// the least single repetition of every round measured (the discarded ones too), and the
    /// repetitions of the rounds kept, summed.
    pub times: Vec<Timing>,
    /// The median of the reference layer's times in the probes before and after the rounds
    /// kept (of every round when none was quiet): the machine's speed while the points were
    /// measured, recorded with them (`probe_ms`). `None` with the gate off (no probes).
    pub probe_ms: Option<f64>,
}

/// Measures `rounds` rounds of a set of points with `round` (one timing per point, in a fixed
/// order), each round between two probes of `gate` (`probe` gives the gate's readings: the
/// reference layer's time on the same side first). See the module docs. The first attempt uses `measure`'s warm-up, later ones at
/// most one run (kernels are compiled and caches warm by then).
pub fn gated_rounds<B, E>(
    bench: &mut B,
    gate: &mut QuietGate,
    rounds: usize,
    measure: &MeasureOptions,
    stats: &mut GateStats,
    mut round: impl FnMut(&mut B, &MeasureOptions) -> Result<Vec<Timing>, E>,
    mut probe: impl FnMut(&mut B) -> Result<Vec<f64>, E>,
) -> Result<Rounds, E> {
    let rounds = rounds.max(1);
    let attempts = if gate.enabled() { 2 * rounds } else { rounds };
    let (mut quiet, mut all) = (None, None);
    let (mut quiet_probes, mut all_probes) = (Vec::new(), Vec::new());
    let mut kept = 0;
    for attempt in 0..attempts {
        if kept == rounds {
            break;
        }
        let before = !gate.enabled() || gate.wait(stats, || probe(bench))?;
        // The gate records probes only while on, so `last` is `None` with it off.
        let probe_before = gate.last;
        let options = MeasureOptions {
            warmup: if attempt == 0 {
                measure.warmup
            } else {
                measure.warmup.min(1)
            },
            ..*measure
        };
        let times = round(bench, &options)?;
        let after = !gate.enabled() || gate.record(&probe(bench)?);
        let probes = [probe_before, gate.last];
        fold(&mut all, &times);
        all_probes.extend(probes.iter().flatten());
        if before && after {
            fold(&mut quiet, &times);
            quiet_probes.extend(probes.iter().flatten());
            kept += 1;
        } else {
            stats.discarded += 1;
        }
    }
    if quiet.is_none() {
        stats.noisy += 1;
    }
    let mut probes = if quiet.is_some() {
        quiet_probes
    } else {
        all_probes
    };
    // A slow phase only ever adds time, so the fastest repetition is taken over every round
    // measured, the discarded ones too: more chances to catch the machine quiet.
    let times = match (quiet, all) {
        (Some(mut kept), Some(every)) => {
            for (k, e) in kept.iter_mut().zip(&every) {
                k.least_ms = e.least_ms;
            }
            kept
        }
        (quiet, all) => quiet.or(all).unwrap_or_default(),
    };
    Ok(Rounds {
        times,
        probe_ms: (!probes.is_empty()).then(|| tandem_runtime::profile::median(&mut probes)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ms: f64) -> Timing {
        Timing {
            median_ms: ms,
            least_ms: ms,
            reps: 1,
        }
    }

    #[test]
    fn the_memory_probe_sums_every_word() {
        let words: Vec<u64> = (0..1003u64)
            .map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15))
            .collect();
        let naive = words.iter().fold(0u64, |a, &w| a.wrapping_add(w));
        assert_eq!(stream_sum(&words), naive);
        assert_eq!(stream_sum(&words[..5]), words[..5].iter().sum::<u64>());
        assert_eq!(stream_sum(&[]), 0);
        let probe = MemoryProbe::new();
        assert_eq!(probe.words.len() * 8, MEMORY_PROBE_BYTES);
        let t = probe.time_ms();
        assert!(t.is_finite() && t > 0.0, "{t}");
    }

    #[test]
    fn rounds_fold_to_the_least_median_the_fastest_repetition_and_all_repetitions() {
        let timing = |median_ms, least_ms, reps| Timing {
            median_ms,
            least_ms,
            reps,
        };
        let mut acc = None;
        fold(&mut acc, &[timing(2.0, 1.5, 3), timing(5.0, 4.0, 3)]);
        fold(&mut acc, &[timing(2.5, 1.2, 4), timing(4.0, 4.5, 3)]);
        assert_eq!(acc, Some(vec![timing(2.0, 1.2, 7), timing(4.0, 4.0, 6)]));
    }

    #[test]
    fn a_probe_is_quiet_within_the_slack_of_the_tenth_percentile_of_recent_probes() {
        let mut g = QuietGate::new(0.06, Duration::ZERO);
        assert!(g.record(&[1.0]));
        assert!(g.record(&[1.05]));
        assert!(!g.record(&[1.07]));
        assert!(g.record(&[0.9]));
        assert!(!g.record(&[1.0]));
        assert_eq!(g.quiet(0), Some(0.9));
        // With 20 probes the quiet time is the second least: one lucky probe does not set it.
        for _ in 0..14 {
            g.record(&[1.3]);
        }
        g.record(&[0.5]);
        assert_eq!(g.readings[0].history.len(), 20);
        assert_eq!(g.quiet(0), Some(0.9));
        assert!(g.record(&[0.95]));
        assert!(!g.record(&[1.02]));
    }

    /// Two gated rounds of a fake bench (probes 1.0 quiet, 1.5 slow) whose probes numbered
    /// `slow` (counted from 0, calibration included) fall in a slow phase; a round measures
    /// `slow_round` when its first probe was slow, `quiet_round` otherwise.
    fn two_rounds_with_a_slow_phase(
        slow: std::ops::Range<usize>,
        quiet_round: Vec<Timing>,
        slow_round: Vec<Timing>,
    ) -> (Rounds, GateStats) {
        let mut g = QuietGate::new(0.06, Duration::from_secs(5));
        let mut stats = GateStats::default();
        let mut probes = 0usize;
        let rounds = gated_rounds(
            &mut probes,
            &mut g,
            2,
            &MeasureOptions::default(),
            &mut stats,
            |p, _| {
                Ok::<_, ()>(if slow.contains(p) {
                    slow_round.clone()
                } else {
                    quiet_round.clone()
                })
            },
            |p| {
                *p += 1;
                Ok(vec![if slow.contains(&(*p - 1)) { 1.5 } else { 1.0 }])
            },
        )
        .expect("the fake bench never fails");
        (rounds, stats)
    }

    #[test]
    fn rounds_in_a_slow_phase_are_discarded_and_remeasured() {
        // The machine: quiet while the gate calibrates and for its first probe, slow for the
        // next two probes, quiet after; a round measures 2 points, 3x slower when slow.
        let (times, stats) = two_rounds_with_a_slow_phase(
            CALIBRATION..CALIBRATION + 2,
            vec![t(1.0), t(2.0)],
            vec![t(3.0), t(6.0)],
        );
        // The probes around the two quiet rounds ran at the quiet speed.
        assert_eq!(times.probe_ms, Some(1.0));
        let times = times.times;
        assert_eq!(
            times.iter().map(|t| t.median_ms).collect::<Vec<_>>(),
            [1.0, 2.0]
        );
        assert_eq!(times[0].reps, 2, "two quiet rounds kept");
        assert_eq!(stats.discarded, 1, "{stats:?}");
        assert_eq!(stats.noisy, 0);
    }

    #[test]
    fn the_fastest_repetition_counts_every_round_the_discarded_ones_too() {
        // The second round falls in a slow phase and is discarded; its median is slow but one
        // of its repetitions caught a fast moment.
        let timing = |median_ms, least_ms| Timing {
            median_ms,
            least_ms,
            reps: 3,
        };
        let (rounds, stats) = two_rounds_with_a_slow_phase(
            CALIBRATION + 2..CALIBRATION + 4,
            vec![timing(1.0, 0.9), timing(2.0, 1.9)],
            vec![timing(3.0, 0.8), timing(6.0, 2.5)],
        );
        assert_eq!(stats.discarded, 1, "{stats:?}");
        assert_eq!(
            rounds.times,
            [timing(1.0, 0.8), timing(2.0, 1.9)].map(|t| Timing { reps: 6, ..t }),
            "medians and repetitions of the kept rounds, the fastest repetition of all"
        );
    }

    #[test]
    fn without_a_quiet_round_the_least_of_all_is_kept_and_counted() {
        let mut g = QuietGate::new(0.06, Duration::from_millis(1));
        let mut stats = GateStats::default();
        // After calibration, probes alternate quiet and slow: every round has a slow probe
        // after it.
        let mut n = 0usize;
        let mut k = 0usize;
        let times = gated_rounds(
            &mut n,
            &mut g,
            2,
            &MeasureOptions::default(),
            &mut stats,
            |_, _| {
                k += 1;
                Ok::<_, ()>(vec![t(5.0 - k as f64)])
            },
            |n| {
                *n += 1;
                Ok(vec![if *n <= CALIBRATION || *n % 2 == 0 {
                    1.0
                } else {
                    2.0
                }])
            },
        )
        .expect("the fake bench never fails");
        assert_eq!(stats.noisy, 1, "{stats:?}");
        assert_eq!(stats.discarded, 4, "{stats:?}");
        assert_eq!(
            times.times[0].median_ms, 1.0,
            "the least of the four attempts"
        );
        // Without a quiet round, the speed is that of every probe around the rounds.
        let speed = times.probe_ms.expect("probed");
        assert!((1.0..=2.0).contains(&speed), "{speed}");
    }

    #[test]
    fn a_slow_second_reading_alone_makes_a_probe_slow() {
        let mut g = QuietGate::new(0.06, Duration::ZERO).with_reading(0.6);
        for _ in 0..20 {
            assert!(g.record(&[1.0, 0.001]));
        }
        assert_eq!(g.quiet(1), Some(0.001));
        assert!(
            g.record(&[1.0, 0.0015]),
            "within 60% of the join's quiet time"
        );
        assert!(!g.record(&[1.0, 0.0026]), "a slow join with a quiet layer");
        assert!(!g.record(&[1.2, 0.001]), "a slow layer with a quiet join");
        assert_eq!(
            g.readings[0].history.len(),
            g.readings[1].history.len(),
            "every reading records every probe"
        );
        // A reading with slack 0 is recorded and never judged.
        let mut off = QuietGate::new(0.06, Duration::ZERO).with_reading(0.0);
        off.record(&[1.0, 0.001]);
        assert!(off.record(&[1.0, 0.01]));
        assert_eq!(off.quiet(1), Some(0.001));
        assert_eq!(off.quiet(2), None);
    }

    #[test]
    fn rounds_during_a_slow_join_phase_are_discarded_and_remeasured() {
        let mut g = QuietGate::new(0.06, Duration::from_secs(5)).with_reading(0.6);
        let mut stats = GateStats::default();
        // The join is slow for two probes after calibration; the reference layer never is.
        let mut probes = 0usize;
        let slow = |p: usize| (CALIBRATION..CALIBRATION + 2).contains(&p);
        let times = gated_rounds(
            &mut probes,
            &mut g,
            1,
            &MeasureOptions::default(),
            &mut stats,
            |p, _| Ok::<_, ()>(vec![t(if slow(*p) { 0.005 } else { 0.002 })]),
            |p| {
                *p += 1;
                Ok(vec![1.0, if slow(*p - 1) { 0.0026 } else { 0.001 }])
            },
        )
        .expect("the fake bench never fails");
        assert_eq!(times.times[0].median_ms, 0.002, "{stats:?}");
        assert_eq!(times.times[0].reps, 1, "one quiet round kept");
        assert_eq!(
            times.probe_ms,
            Some(1.0),
            "the reference layer's time, not the join's"
        );
        assert_eq!(stats.discarded, 1, "{stats:?}");
    }

    #[test]
    fn an_off_gate_measures_exactly_the_rounds_and_never_probes() {
        let mut g = QuietGate::new(0.0, Duration::from_secs(1));
        let mut stats = GateStats::default();
        let times = gated_rounds(
            &mut (),
            &mut g,
            3,
            &MeasureOptions::default(),
            &mut stats,
            |_, _| Ok::<_, ()>(vec![t(1.0)]),
            |_| panic!("probed with the gate off"),
        )
        .expect("the fake bench never fails");
        assert_eq!(times.times[0].reps, 3);
        assert_eq!(times.probe_ms, None, "no probes, no speed");
        assert_eq!(stats, GateStats::default());
    }
}
