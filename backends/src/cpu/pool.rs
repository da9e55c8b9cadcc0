//! A spinning worker pool for the fast backend's data-parallel kernels.
//!
//! Why not rayon here: a decode step is ~200 small parallel regions (one per
//! matmul), each a few tens of microseconds long. Waking a sleeping rayon
//! worker through the kernel costs about as much as the work itself, so two
//! threads were barely faster than one. These workers spin on an epoch
//! counter between regions (a few hundred nanoseconds to start a region) and
//! park only after `SPIN_BEFORE_PARK` without work, so an idle session costs
//! no CPU. The calling thread takes tasks too.
//!
//! `unsafe` lives here for one reason: a region's closure borrows the
//! caller's stack, and workers see it through a lifetime-erased pointer.
//! `run` does not return until every worker has finished the region, so the
//! borrow outlives every use.

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const SPIN_BEFORE_PARK: Duration = Duration::from_millis(5);
/// Pure spins before a waiting thread starts yielding its core (~10 µs).
const YIELD_AFTER_SPINS: u32 = 4096;

type Task<'a> = dyn Fn(usize) + Sync + 'a;

struct Shared {
    /// Incremented to publish a region.
    epoch: AtomicU64,
    /// The region's closure (a `*const &Task`), valid while `pending > 0`.
    job: AtomicPtr<()>,
    n_tasks: AtomicUsize,
    next_task: AtomicUsize,
    /// Workers that have not yet finished the current region.
    pending: AtomicUsize,
    quit: AtomicBool,
    /// A task panicked in a worker: re-raised by `run`.
    panicked: AtomicBool,
    parked: Mutex<Vec<std::thread::Thread>>,
}

pub struct SpinPool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    /// One region at a time.
    region: Mutex<()>,
}

impl SpinPool {
    /// A pool running regions on `threads` threads: the caller and
    /// `threads - 1` workers.
    pub fn new(threads: usize) -> SpinPool {
        let shared = Arc::new(Shared {
            epoch: AtomicU64::new(0),
            job: AtomicPtr::new(std::ptr::null_mut()),
            n_tasks: AtomicUsize::new(0),
            next_task: AtomicUsize::new(0),
            pending: AtomicUsize::new(0),
            quit: AtomicBool::new(false),
            panicked: AtomicBool::new(false),
            parked: Mutex::new(Vec::new()),
        });
        let workers = (1..threads.max(1))
            .map(|i| {
                let shared = shared.clone();
                std::thread::Builder::new().name(format!("graphc-cpu-{i}")).spawn(move || worker(&shared)).expect("spawn a kernel worker thread")
            })
            .collect();
        SpinPool { shared, workers, region: Mutex::new(()) }
    }

    pub fn threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// Run `f(0) .. f(n_tasks - 1)` across the pool; returns when all are done.
    pub fn run(&self, n_tasks: usize, f: &Task<'_>) {
        if self.workers.is_empty() || n_tasks <= 1 {
            (0..n_tasks).for_each(f);
            return;
        }
        let _one_region = self.region.lock().unwrap_or_else(|e| e.into_inner());
        let s = &*self.shared;
        let job: *const &Task<'_> = &f;
        s.job.store(job as *mut (), Ordering::Relaxed);
        s.n_tasks.store(n_tasks, Ordering::Relaxed);
        s.next_task.store(0, Ordering::Relaxed);
        s.pending.store(self.workers.len(), Ordering::Relaxed);
        s.epoch.fetch_add(1, Ordering::Release);
        for t in s.parked.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
            t.unpark();
        }
        take_tasks(s, f);
        let mut spins = 0u32;
        while s.pending.load(Ordering::Acquire) != 0 {
            // A worker still in a task may have been preempted (a machine
            // busier than its cores): after a short spin, yield the core to it.
            spins = spins.saturating_add(1);
            if spins < YIELD_AFTER_SPINS {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        s.job.store(std::ptr::null_mut(), Ordering::Relaxed);
        if s.panicked.swap(false, Ordering::Relaxed) {
            panic!("a kernel task panicked on a worker thread");
        }
    }
}

fn take_tasks(s: &Shared, f: &Task<'_>) {
    let n = s.n_tasks.load(Ordering::Relaxed);
    loop {
        let t = s.next_task.fetch_add(1, Ordering::Relaxed);
        if t >= n {
            return;
        }
        f(t);
    }
}

fn worker(s: &Shared) {
    // Epoch 0 is "no region yet": a region published before this thread
    // started must still be seen as new (reading the epoch here would race).
    let mut seen = 0;
    let mut idle_since = Instant::now();
    let mut spins = 0u32;
    loop {
        let epoch = s.epoch.load(Ordering::Acquire);
        if s.quit.load(Ordering::Acquire) {
            return;
        }
        if epoch == seen {
            spins = spins.wrapping_add(1);
            // Reading the clock costs more than a spin: look every 4096 spins.
            if !spins.is_multiple_of(4096) || idle_since.elapsed() < SPIN_BEFORE_PARK {
                if spins < YIELD_AFTER_SPINS {
                    std::hint::spin_loop();
                } else {
                    // Still spinning, but giving the core away when others want it.
                    std::thread::yield_now();
                }
            } else {
                // Register, then re-check the epoch so a region published in
                // between is not missed (its publisher unparks us).
                s.parked.lock().unwrap_or_else(|e| e.into_inner()).push(std::thread::current());
                if s.epoch.load(Ordering::Acquire) == seen && !s.quit.load(Ordering::Acquire) {
                    std::thread::park_timeout(Duration::from_millis(100));
                }
                idle_since = Instant::now();
            }
            continue;
        }
        seen = epoch;
        spins = 0;
        // SAFETY: `job` was stored before the epoch was published (Release /
        // Acquire above) and stays valid until `pending` reaches zero, which
        // needs this worker's decrement below.
        let f: &Task<'_> = unsafe { *(s.job.load(Ordering::Relaxed) as *const &Task<'_>) };
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| take_tasks(s, f))).is_err() {
            s.panicked.store(true, Ordering::Relaxed);
        }
        s.pending.fetch_sub(1, Ordering::Release);
        idle_since = Instant::now();
    }
}

impl Drop for SpinPool {
    fn drop(&mut self) {
        self.shared.quit.store(true, Ordering::Release);
        for t in self.shared.parked.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
            t.unpark();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

/// `f(i, chunk_i)` for each `chunk`-sized piece of `out`, across `pool`.
pub fn for_each_chunk_mut<T: Send>(pool: &SpinPool, out: &mut [T], chunk: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    let chunk = chunk.max(1);
    let len = out.len();
    let base = SendPtr(out.as_mut_ptr());
    pool.run(len.div_ceil(chunk), &|i| {
        let start = i * chunk;
        let end = (start + chunk).min(len);
        // SAFETY: task `i` alone touches `start..end`; the ranges of distinct
        // tasks are disjoint and inside `out`, which `run` outlives.
        let piece = unsafe { std::slice::from_raw_parts_mut(base.get().add(start), end - start) };
        f(i, piece);
    });
}

/// `f(i, piece_i)` across `pool`, where piece `i` of `out` starts at
/// `starts[i]` and ends where the next starts (the last at `out.len()`);
/// `starts` must begin at 0 and increase.
pub fn for_each_range_mut<T: Send>(pool: &SpinPool, out: &mut [T], starts: &[usize], f: impl Fn(usize, &mut [T]) + Sync) {
    assert!(starts.first().is_none_or(|&s| s == 0) && starts.windows(2).all(|w| w[0] <= w[1]));
    assert!(starts.last().is_none_or(|&s| s <= out.len()));
    let len = out.len();
    let base = SendPtr(out.as_mut_ptr());
    pool.run(starts.len(), &|i| {
        let (start, end) = (starts[i], starts.get(i + 1).copied().unwrap_or(len));
        // SAFETY: the pieces `starts[i]..starts[i+1]` are disjoint (the
        // starts increase, asserted) and inside `out`, which `run` outlives.
        let piece = unsafe { std::slice::from_raw_parts_mut(base.get().add(start), end - start) };
        f(i, piece);
    });
}

/// A task's columns of a row-major `[rows][row_len]` matrix being built by
/// `collect_column_blocks`: task `t` owns columns `t*width .. (t+1)*width`
/// of every row and writes its rows in order, each in full.
pub struct ColumnBlock<'a, T> {
    base: &'a SendPtr<T>,
    rows: usize,
    row_len: usize,
    first: usize,
    width: usize,
    /// Rows written so far (the next row to write).
    written: usize,
}

impl<T: Copy> ColumnBlock<'_, T> {
    /// This block's columns.
    pub fn columns(&self) -> std::ops::Range<usize> {
        self.first..self.first + self.width
    }

    /// Write the block's part of the next row: `values` holds exactly the
    /// block's width.
    pub fn push_row(&mut self, values: &[T]) {
        assert!(self.written < self.rows && values.len() == self.width, "row {} / {} values: outside the block", self.written, values.len());
        // SAFETY: row `written`, columns `first .. first + width` are inside
        // the matrix's allocation (asserted; `first + width <= row_len`) and
        // owned by this block alone (the blocks' column ranges are
        // disjoint); `collect_column_blocks` outlives every block.
        unsafe { std::ptr::copy_nonoverlapping(values.as_ptr(), self.base.get().add(self.written * self.row_len + self.first), values.len()) };
        self.written += 1;
    }
}

/// A row-major `[rows][row_len]` matrix whose column blocks (`width`
/// columns each, the last may be narrower) are written by `f(t, block_t)`
/// across `pool`. The matrix is not zeroed first (an output the size of a
/// prefill's activations cost as much to clear as to compute its
/// layer norm): every block must write all its rows, which is checked
/// before the elements are read (a block that does not is a panic).
pub fn collect_column_blocks<T: Send + Copy>(
    pool: &SpinPool,
    rows: usize,
    row_len: usize,
    width: usize,
    f: impl Fn(usize, &mut ColumnBlock<'_, T>) + Sync,
) -> Vec<T> {
    let width = width.max(1);
    let mut out: Vec<T> = Vec::with_capacity(rows * row_len);
    let base = SendPtr(out.as_mut_ptr());
    let complete = AtomicUsize::new(0);
    let blocks = row_len.div_ceil(width);
    pool.run(blocks, &|t| {
        let first = t * width;
        let mut block = ColumnBlock { base: &base, rows, row_len, first, width: width.min(row_len - first), written: 0 };
        f(t, &mut block);
        assert_eq!(block.written, rows, "column block {t} wrote {} of its {rows} rows", block.written);
        complete.fetch_add(1, Ordering::Relaxed);
    });
    assert_eq!(complete.load(Ordering::Relaxed), blocks, "a column block did not finish");
    // SAFETY: every block wrote each of the `rows` rows across its full
    // width (asserted per block above, and every block ran to the end),
    // and the blocks' columns tile `0..row_len`: all `rows * row_len`
    // elements are initialized.
    unsafe { out.set_len(rows * row_len) };
    out
}

struct SendPtr<T>(*mut T);
// SAFETY: used only to hand disjoint sub-slices to tasks (see above).
unsafe impl<T: Send> Sync for SendPtr<T> {}
impl<T> SendPtr<T> {
    fn get(&self) -> *mut T {
        self.0
    }
}
