//! Cross-device ordering of a plan's steps.
//!
//! The CPU runs its steps (and the CPU parts of split steps) in order on the host; the GPU runs
//! its steps in order in its queue. A step on one device must wait for the latest earlier step on
//! the other device whose arena memory conflicts with it: it reads what that step wrote (RAW),
//! writes what that step read (WAR; the memory plan reuses arena space) or writes what it wrote
//! (WAW). Because each device completes its steps in order, waiting for that one step covers
//! every earlier one too.
//!
//! With polling, each device publishes "finished step i" as `i + 1` in an SVM word
//! (`memory::CPU_DONE`, `memory::GPU_DONE`) and the other spins until the word reaches its
//! target; every CPU spin has a deadline, after which it raises `memory::ABORT` so that kernels
//! spinning on the GPU give up too.

use crate::artifact::{Artifact, Storage};
use std::ops::Range;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Instant;

/// For every step, what it waits for on the other device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dependencies {
    /// Step `j`'s GPU part first waits until the CPU finished step `k`.
    pub gpu_waits_for_cpu: Vec<Option<usize>>,
    /// Step `j`'s CPU part first waits until the GPU finished step `k`.
    pub cpu_waits_for_gpu: Vec<Option<usize>>,
    /// The GPU publishes its completion of step `i` (some CPU part waits for it).
    pub gpu_signals: Vec<bool>,
}

impl Dependencies {
    /// Number of cross-device waits in one run.
    pub fn waits(&self) -> usize {
        self.gpu_waits_for_cpu.iter().flatten().count()
            + self.cpu_waits_for_gpu.iter().flatten().count()
    }
}

/// Arena byte ranges a step reads and writes.
fn ranges(a: &Artifact, tensors: impl Iterator<Item = usize>) -> Vec<Range<usize>> {
    tensors
        .filter_map(|t| {
            let d = &a.tensors[t];
            match d.storage {
                Storage::Arena { offset } if d.bytes() > 0 => Some(offset..offset + d.bytes()),
                _ => None,
            }
        })
        .collect()
}

fn overlap(a: &[Range<usize>], b: &[Range<usize>]) -> bool {
    a.iter()
        .any(|x| b.iter().any(|y| x.start < y.end && y.start < x.end))
}

/// The cross-device waits of `artifact`'s plan.
pub fn dependencies(a: &Artifact) -> Dependencies {
    let n = a.steps.len();
    let reads: Vec<_> = a
        .steps
        .iter()
        .map(|s| ranges(a, s.inputs.iter().flatten().copied()))
        .collect();
    let writes: Vec<_> = a
        .steps
        .iter()
        .map(|s| ranges(a, s.outputs.iter().copied()))
        .collect();
    let conflict = |i: usize, j: usize| {
        overlap(&writes[i], &reads[j])
            || overlap(&writes[i], &writes[j])
            || overlap(&reads[i], &writes[j])
    };
    let mut deps = Dependencies {
        gpu_waits_for_cpu: vec![None; n],
        cpu_waits_for_gpu: vec![None; n],
        gpu_signals: vec![false; n],
    };
    for j in 0..n {
        let pj = a.steps[j].placement;
        if pj.uses_gpu() {
            deps.gpu_waits_for_cpu[j] = (0..j)
                .rev()
                .find(|&i| a.steps[i].placement.uses_cpu() && conflict(i, j));
        }
        if pj.uses_cpu() {
            let k = (0..j)
                .rev()
                .find(|&i| a.steps[i].placement.uses_gpu() && conflict(i, j));
            if let Some(k) = k {
                deps.gpu_signals[k] = true;
            }
            deps.cpu_waits_for_gpu[j] = k;
        }
    }
    deps
}

/// How a CPU spin ended badly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpinError {
    Deadline,
    Aborted,
}

/// Spins until `word >= target`, giving up at `deadline` or when `abort` is set. Busy-waits for
/// the first few thousand polls (the expected case: microseconds), then yields the core between
/// polls so that an oversubscribed machine still makes progress.
pub fn spin_until(
    word: &AtomicI32,
    target: i32,
    abort: &AtomicI32,
    deadline: Instant,
) -> Result<(), SpinError> {
    let mut polls = 0u32;
    loop {
        if word.load(Ordering::Acquire) >= target {
            return Ok(());
        }
        if abort.load(Ordering::Acquire) != 0 {
            return Err(SpinError::Aborted);
        }
        polls = polls.wrapping_add(1);
        if polls.is_multiple_of(1024) && Instant::now() >= deadline {
            return Err(SpinError::Deadline);
        }
        if polls < 20_000 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::artifact::{Kernel, Placement, Step, TensorDesc};
    use crate::DType;

    fn tensor(offset: usize) -> TensorDesc {
        TensorDesc {
            name: format!("t{offset}"),
            dtype: DType::F32,
            shape: vec![16],
            storage: Storage::Arena { offset },
        }
    }

    fn step(input: usize, output: usize, placement: Placement) -> Step {
        Step {
            name: "copy".into(),
            kernel: Kernel::Copy,
            inputs: vec![Some(input)],
            outputs: vec![output],
            placement,
            gpu_operands: vec![],
        }
    }

    fn artifact(steps: Vec<Step>, offsets: &[usize]) -> Artifact {
        Artifact {
            producer: String::new(),
            model: String::new(),
            tensors: offsets.iter().map(|&o| tensor(o)).collect(),
            weights: vec![],
            weights_len: 0,
            arena_bytes: 1024,
            inputs: vec![0],
            outputs: vec![],
            steps,
            threads: 1,
            gpu: None,
        }
    }

    #[test]
    fn waits_follow_data_and_reuse() {
        // t0 -> [CPU] t1 -> [GPU] t2 -> [GPU] t3 -> [CPU] t4, where t4 reuses t1's memory.
        let a = artifact(
            vec![
                step(0, 1, Placement::Cpu),
                step(1, 2, Placement::Gpu),
                step(2, 3, Placement::Gpu),
                step(3, 4, Placement::Cpu),
            ],
            &[0, 64, 128, 192, 64],
        );
        let d = dependencies(&a);
        assert_eq!(d.gpu_waits_for_cpu, vec![None, Some(0), None, None]);
        assert_eq!(d.cpu_waits_for_gpu, vec![None, None, None, Some(2)]);
        assert_eq!(d.gpu_signals, vec![false, false, true, false]);
    }

    #[test]
    fn a_cpu_step_overwriting_what_the_gpu_reads_waits_for_it() {
        // [GPU] reads t0 (offset 0); a later CPU step writes t3, which reuses offset 0 (WAR).
        let a = artifact(
            vec![step(0, 1, Placement::Gpu), step(2, 3, Placement::Cpu)],
            &[0, 64, 128, 0],
        );
        let d = dependencies(&a);
        assert_eq!(d.cpu_waits_for_gpu, vec![None, Some(0)]);
    }

    #[test]
    fn independent_steps_do_not_wait() {
        let a = artifact(
            vec![step(0, 1, Placement::Cpu), step(2, 3, Placement::Gpu)],
            &[0, 64, 128, 192],
        );
        assert_eq!(dependencies(&a).waits(), 0);
    }

    #[test]
    fn spins_end_on_target_abort_or_deadline() {
        let word = AtomicI32::new(5);
        let abort = AtomicI32::new(0);
        let soon = Instant::now() + std::time::Duration::from_millis(20);
        assert_eq!(spin_until(&word, 5, &abort, soon), Ok(()));
        assert_eq!(spin_until(&word, 6, &abort, soon), Err(SpinError::Deadline));
        abort.store(1, Ordering::Release);
        assert_eq!(
            spin_until(
                &word,
                6,
                &abort,
                Instant::now() + std::time::Duration::from_secs(60)
            ),
            Err(SpinError::Aborted)
        );
    }
}
