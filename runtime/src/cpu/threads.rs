//! A small pool of pinned worker threads that run data-parallel tasks.
//!
//! [`ThreadPool::run`] hands task indices `0..tasks` to the workers and the calling thread, and
//! returns once every task has finished. Workers are pinned to cores 1, 2, … (wrapping), so the
//! calling thread plus `threads - 1` workers use `threads` cores.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A task body: called once per task index, from any thread of the pool.
type Task<'a> = dyn Fn(usize) + Sync + 'a;

struct Job {
    /// Lifetime-erased pointer to the caller's closure; valid until `remaining` reaches zero,
    /// because [`ThreadPool::run`] does not return before that.
    body: *const Task<'static>,
    tasks: usize,
    next: AtomicUsize,
    remaining: AtomicUsize,
}

// SAFETY: the closure behind `body` is `Sync`, and `run` keeps it alive while workers use it.
unsafe impl Send for Job {}
unsafe impl Sync for Job {}

impl Job {
    /// Runs tasks until none are left; returns after this thread's last one.
    fn work(&self) {
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if i >= self.tasks {
                return;
            }
            // SAFETY: see the field's comment.
            unsafe { (*self.body)(i) };
            self.remaining.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    done: Condvar,
}

/// How long the caller polls for its workers' last tasks before sleeping on a condition
/// variable (a wake-up through the kernel costs tens of microseconds). Workers do not spin
/// between jobs: on a shared machine that slowed whole runs down.
const SPIN: Duration = Duration::from_micros(50);

/// Below this many floating-point operations a kernel runs its tasks on the calling thread: waking
/// a worker and waiting for it costs more than the work saves (≈ 20 µs per parallel step).
/// Zero in this crate's unit tests, so that their small shapes still exercise the parallel paths.
#[cfg(not(test))]
pub const SERIAL_FLOPS: usize = 4_000_000;
#[cfg(test)]
pub const SERIAL_FLOPS: usize = 0;

#[derive(Default)]
struct State {
    job: Option<Arc<Job>>,
    generation: u64,
    shutdown: bool,
}

/// A fixed set of pinned threads (the caller counts as one).
pub struct ThreadPool {
    threads: usize,
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
}

impl ThreadPool {
    /// A pool using `threads` threads in all (at least 1): the caller plus `threads - 1` pinned
    /// workers.
    pub fn new(threads: usize) -> Self {
        let threads = threads.max(1);
        let shared = Arc::new(Shared::default());
        let cores = core_affinity::get_core_ids().unwrap_or_default();
        let workers = (1..threads)
            .map(|i| {
                let shared = Arc::clone(&shared);
                let core = (!cores.is_empty()).then(|| cores[i % cores.len()]);
                std::thread::Builder::new()
                    .name(format!("tandem-cpu-{i}"))
                    .spawn(move || {
                        if let Some(core) = core {
                            core_affinity::set_for_current(core);
                        }
                        worker_loop(&shared);
                    })
                    .expect("spawning a CPU worker thread")
            })
            .collect();
        ThreadPool {
            threads,
            shared,
            workers,
        }
    }

    /// Number of threads, the caller included.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Like [`ThreadPool::run`], but on the calling thread alone when the whole job is only
    /// `flops` operations, fewer than [`SERIAL_FLOPS`].
    pub fn run_sized(&self, tasks: usize, flops: usize, body: &(dyn Fn(usize) + Sync)) {
        #[allow(clippy::absurd_extreme_comparisons)] // SERIAL_FLOPS is 0 in unit tests
        let small = flops < SERIAL_FLOPS;
        if small {
            (0..tasks).for_each(body);
        } else {
            self.run(tasks, body);
        }
    }

    /// Runs `body(i)` for every `i` in `0..tasks` across the pool; returns when all are done.
    pub fn run(&self, tasks: usize, body: &(dyn Fn(usize) + Sync)) {
        if tasks == 0 {
            return;
        }
        if self.threads == 1 || tasks == 1 {
            (0..tasks).for_each(body);
            return;
        }
        // SAFETY: the erased closure is only used by `Job::work`, and this function waits below
        // until every task has run before `body` goes out of scope.
        let body: *const Task<'static> = unsafe { std::mem::transmute(body as *const Task<'_>) };
        let job = Arc::new(Job {
            body,
            tasks,
            next: AtomicUsize::new(0),
            remaining: AtomicUsize::new(tasks),
        });
        {
            let mut state = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
            state.job = Some(Arc::clone(&job));
            state.generation += 1;
        }
        self.shared.wake.notify_all();
        job.work();
        spin_while(|| job.remaining.load(Ordering::Acquire) != 0);
        let mut state = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
        while job.remaining.load(Ordering::Acquire) != 0 {
            state = self
                .shared
                .done
                .wait(state)
                .unwrap_or_else(|e| e.into_inner());
        }
        state.job = None;
    }
}

/// Spins while `busy()` holds, for at most [`SPIN`].
fn spin_while(busy: impl Fn() -> bool) {
    let start = Instant::now();
    let mut polls = 0u32;
    while busy() {
        polls = polls.wrapping_add(1);
        if polls.is_multiple_of(64) && start.elapsed() >= SPIN {
            return;
        }
        std::hint::spin_loop();
    }
}

fn worker_loop(shared: &Shared) {
    let mut seen = 0u64;
    loop {
        let job = {
            let mut state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                if state.shutdown {
                    return;
                }
                if state.generation != seen {
                    seen = state.generation;
                    if let Some(job) = state.job.clone() {
                        break job;
                    }
                }
                state = shared.wake.wait(state).unwrap_or_else(|e| e.into_inner());
            }
        };
        job.work();
        if job.remaining.load(Ordering::Acquire) == 0 {
            let _guard = shared.state.lock().unwrap_or_else(|e| e.into_inner());
            shared.done.notify_all();
        }
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        self.shared
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .shutdown = true;
        self.shared.wake.notify_all();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_every_task_exactly_once() {
        for threads in [1, 2, 3] {
            let pool = ThreadPool::new(threads);
            for tasks in [0, 1, 5, 100] {
                let hits: Vec<AtomicUsize> = (0..tasks).map(|_| AtomicUsize::new(0)).collect();
                pool.run(tasks, &|i| {
                    hits[i].fetch_add(1, Ordering::Relaxed);
                });
                assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
            }
        }
    }

    #[test]
    fn borrows_caller_data_safely_across_many_runs() {
        let pool = ThreadPool::new(2);
        let mut out = vec![0usize; 64];
        for round in 0..200 {
            let cells: Vec<AtomicUsize> = (0..64).map(|_| AtomicUsize::new(0)).collect();
            pool.run(64, &|i| cells[i].store(i * round, Ordering::Relaxed));
            for (o, c) in out.iter_mut().zip(&cells) {
                *o = c.load(Ordering::Relaxed);
            }
            assert_eq!(out[63], 63 * round);
        }
    }
}
