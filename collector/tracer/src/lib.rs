//! The library `fuseprof collect` injects into the program it traces.
//!
//! The CUDA driver loads it through `CUDA_INJECTION64_PATH` and calls [`InitializeInjection`];
//! NVTX loads it through `NVTX_INJECTION64_PATH` and calls [`InitializeInjectionNvtx2`], where
//! the library fills NVTX's callback tables itself. Both do nothing unless `FUSEPROF_SPOOL_DIR`
//! is set. Records go to a per-process spool file (see `spool.rs`) that a background thread
//! writes; the collector turns the spool files of a run into one store run.
//!
//! Hot paths (NVTX callbacks, CUPTI buffer callbacks) only append bytes to a buffer under a
//! short lock. Everything that can fail is caught: a panic never crosses an `extern "C"` edge.

mod cupti;
mod nvtx;
mod pmsampling;
#[path = "spool.rs"]
pub mod spool;

use std::cell::Cell;
use std::ffi::OsString;
use std::fs::File;
use std::io::Write;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU64, AtomicU8, Ordering};
use std::sync::{Mutex, Once};
use std::time::Duration;

use spool::{tag, Enc};

/// NVTX bytes waiting for the writer beyond this are dropped and counted.
const PENDING_LIMIT_BYTES: usize = 256 << 20;
/// How often the writer thread wakes up on its own.
const WRITER_PERIOD: Duration = Duration::from_millis(200);

/// One traced process's tracer. Replaced (never freed) in a forked child.
pub(crate) struct Tracer {
    pub pid: u32,
    spool_dir: PathBuf,
    /// Every record goes straight to the spool file (forked children; see `record`).
    write_through: bool,
    /// The spool file, opened on first write so that processes that record nothing leave none.
    file: Mutex<Option<File>>,
    /// Encoded records from NVTX and other host-side sources.
    pub pending: Mutex<Vec<u8>>,
    /// The buffer `pending` is swapped with at each drain (only the writer touches it).
    spare: Mutex<Vec<u8>>,
    /// Completed CUPTI buffers: (pointer, valid bytes), freed after decoding.
    pub cupti_buffers: Mutex<Vec<(usize, usize)>>,
    pub cupti_dropped: AtomicU64,
    pub nvtx_dropped: AtomicU64,
    writer_started: AtomicBool,
    /// Set when a flush was asked for from a place that cannot do it itself (a signal handler).
    flush_requested: AtomicU8,
    flush_seq_done: AtomicU64,
    flush_seq_asked: AtomicU64,
}

static TRACER: AtomicPtr<Tracer> = AtomicPtr::new(std::ptr::null_mut());
static INIT: Once = Once::new();
/// Woken by CUPTI buffer completion and by signal handlers (sem_post is async-signal-safe).
static mut WAKE: std::mem::MaybeUninit<libc::sem_t> = std::mem::MaybeUninit::uninit();
static WAKE_READY: AtomicBool = AtomicBool::new(false);

/// Capture modes from `FUSEPROF_CAPTURE`.
pub(crate) mod capture {
    pub const ALL: u8 = 0;
    pub const PROFILER_API: u8 = 1;
    pub const NVTX: u8 = 2;
}
pub(crate) static CAPTURE_MODE: AtomicU8 = AtomicU8::new(capture::ALL);
/// Whether records are being kept now (always true in mode ALL).
pub(crate) static CAPTURING: AtomicBool = AtomicBool::new(true);
pub(crate) static CAPTURE_NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();

thread_local! {
    static TID: Cell<u32> = const { Cell::new(0) };
}

/// The OS thread id of the caller, cached per thread.
pub(crate) fn tid() -> u32 {
    TID.with(|t| {
        let v = t.get();
        if v != 0 {
            return v;
        }
        // SAFETY: gettid has no preconditions.
        let v = unsafe { libc::gettid() } as u32;
        t.set(v);
        v
    })
}

/// Host timestamp in ns on CLOCK_REALTIME, which CUPTI also uses on Linux; the measured offset
/// to cuptiGetTimestamp is spooled (tag CLOCK) so the collector can line the two up exactly.
pub(crate) fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The tracer, if this process is being traced.
pub(crate) fn tracer() -> Option<&'static Tracer> {
    let p = TRACER.load(Ordering::Acquire);
    // SAFETY: a published tracer is leaked and never freed.
    unsafe { p.as_ref() }
}

/// Sets the tracer up once per process; `None` when `FUSEPROF_SPOOL_DIR` is unset.
pub(crate) fn init() -> Option<&'static Tracer> {
    INIT.call_once(|| {
        let Some(dir) = std::env::var_os(spool::ENV_SPOOL_DIR) else {
            return;
        };
        if dir.is_empty() {
            return;
        }
        match std::env::var(spool::ENV_CAPTURE).as_deref() {
            Ok("cudaProfilerApi") => {
                CAPTURE_MODE.store(capture::PROFILER_API, Ordering::Relaxed);
                CAPTURING.store(false, Ordering::Relaxed);
            }
            Ok(s) if s.starts_with("nvtx:") => {
                let _ = CAPTURE_NAME.set(s["nvtx:".len()..].to_string());
                CAPTURE_MODE.store(capture::NVTX, Ordering::Relaxed);
                CAPTURING.store(false, Ordering::Relaxed);
            }
            _ => {}
        }
        // SAFETY: WAKE is initialised once here, before any sem_post can see WAKE_READY.
        unsafe {
            libc::sem_init(std::ptr::addr_of_mut!(WAKE).cast(), 0, 0);
        }
        WAKE_READY.store(true, Ordering::Release);
        TEST_GATE.store(
            cupti::env_flag("FUSEPROF_TEST_FLUSH_WAITS_FOR_PROGRAM"),
            Ordering::Relaxed,
        );
        TEST_FLUSH_DELAY_MS.store(
            std::env::var("FUSEPROF_TEST_SIGNAL_FLUSH_DELAY_MS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
            Ordering::Relaxed,
        );
        install(PathBuf::from(dir), false);
        install_signal_handlers();
        // SAFETY: the handlers are plain extern "C" functions without arguments.
        unsafe {
            libc::pthread_atfork(None, None, Some(after_fork_child));
            libc::atexit(at_exit);
        }
    });
    tracer()
}

fn install(spool_dir: PathBuf, write_through: bool) {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as u32;
    let t = Box::leak(Box::new(Tracer {
        pid,
        spool_dir,
        write_through,
        file: Mutex::new(None),
        pending: Mutex::new(Vec::with_capacity(1 << 20)),
        spare: Mutex::new(Vec::with_capacity(1 << 20)),
        cupti_buffers: Mutex::new(Vec::new()),
        cupti_dropped: AtomicU64::new(0),
        nvtx_dropped: AtomicU64::new(0),
        writer_started: AtomicBool::new(false),
        flush_requested: AtomicU8::new(0),
        flush_seq_done: AtomicU64::new(0),
        flush_seq_asked: AtomicU64::new(0),
    }));
    TRACER.store(t, Ordering::Release);
    t.record(|e| write_process(e, pid, 0));
    if write_through {
        t.record(|e| {
            let at = e.begin(tag::WRITE_THROUGH);
            e.end(at);
        });
    }
}

fn write_process(e: &mut Enc, pid: u32, cupti_version: u32) {
    let at = e.begin(tag::PROCESS);
    e.u32(pid);
    // SAFETY: getppid has no preconditions.
    e.u32(unsafe { libc::getppid() } as u32);
    e.u32(cupti_version);
    e.u8(0);
    e.i64(now_ns() as i64);
    e.u64(now_ns());
    let exe = std::fs::read_link("/proc/self/exe")
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    e.str(&exe);
    let cmdline = std::fs::read("/proc/self/cmdline").unwrap_or_default();
    let args: Vec<String> = cmdline
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| {
            OsString::from_vec(a.to_vec())
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    e.str(&args.join(" "));
    // The GPUs the process may see: when each process of a job sees only its own GPU (as
    // device 0), the collector names devices by the machine's ordinals from this.
    e.str(&std::env::var("CUDA_VISIBLE_DEVICES").unwrap_or_default());
    e.end(at);
}

impl Tracer {
    /// Appends one encoded record to the pending buffer. Drops (and counts) it when the writer
    /// has fallen too far behind, so memory stays bounded.
    pub fn record(&'static self, f: impl FnOnce(&mut Enc)) {
        if self.write_through {
            // One write per record, no writer thread: a forked child (a DataLoader worker)
            // usually leaves through _exit, which runs no exit handler.
            let Ok(mut file) = self.file.lock() else {
                return;
            };
            let mut buf = Vec::with_capacity(128);
            f(&mut Enc(&mut buf));
            if file.is_none() {
                *file = self.open_spool();
            }
            if let Some(fh) = file.as_mut() {
                let _ = fh.write_all(&buf);
            }
            return;
        }
        self.ensure_writer();
        let Ok(mut buf) = self.pending.lock() else {
            return;
        };
        if buf.len() > PENDING_LIMIT_BYTES {
            self.nvtx_dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        f(&mut Enc(&mut buf));
    }

    fn ensure_writer(&'static self) {
        if self.writer_started.load(Ordering::Relaxed)
            || self.writer_started.swap(true, Ordering::AcqRel)
        {
            return;
        }
        let _ = std::thread::Builder::new()
            .name("fuseprof-spool".into())
            .spawn(move || writer_loop(self));
    }

    /// Writes everything gathered so far: completed CUPTI buffers and pending records.
    pub fn drain(&self) {
        self.drain_some(true);
    }

    /// Writes the pending host records, and the completed CUPTI buffers when `cupti` is set
    /// (left for later with `FUSEPROF_CUPTI_DEFER`, see `writer_loop`).
    fn drain_some(&self, cupti: bool) {
        let Ok(mut file) = self.file.lock() else {
            return;
        };
        let mut out = Vec::new();
        let buffers = match self.cupti_buffers.lock() {
            Ok(mut b) if cupti => std::mem::take(&mut *b),
            _ => Vec::new(),
        };
        for (ptr, valid) in buffers {
            cupti::decode_buffer(ptr as *mut u8, valid, &mut out);
            cupti::free_buffer(ptr as *mut u8);
        }
        // The host records are swapped out, not copied, so the program's threads wait on the
        // lock only for a pointer swap, and keep writing into memory that is already faulted
        // in. Order between the two parts does not matter for meaning: the strings and domains
        // records define are looked up by the reader only after the whole file is read.
        let mut host = self
            .spare
            .lock()
            .map(|mut s| std::mem::take(&mut *s))
            .unwrap_or_default();
        host.clear();
        if let Ok(mut p) = self.pending.lock() {
            std::mem::swap(&mut *p, &mut host);
        }
        if !out.is_empty() || !host.is_empty() {
            if file.is_none() {
                *file = self.open_spool();
            }
            if let Some(f) = file.as_mut() {
                let _ = f.write_all(&out);
                let _ = f.write_all(&host);
            }
        }
        host.clear();
        if let Ok(mut s) = self.spare.lock() {
            *s = host;
        }
    }

    fn open_spool(&self) -> Option<File> {
        let name = format!(
            "{}{}-{}{}",
            spool::FILE_PREFIX,
            self.pid,
            now_ns(),
            spool::FILE_SUFFIX
        );
        let mut f = File::create(self.spool_dir.join(name)).ok()?;
        let mut head = Vec::with_capacity(12);
        head.extend_from_slice(spool::MAGIC);
        head.extend_from_slice(&spool::VERSION.to_le_bytes());
        f.write_all(&head).ok()?;
        Some(f)
    }

    fn cupti_held(&self) -> usize {
        self.cupti_buffers.lock().map_or(0, |b| b.len())
    }

    /// Marks a complete flush as wanted; the writer thread does it. Returns its sequence number.
    pub fn ask_flush(&self, reason: u8) -> u64 {
        self.flush_requested.store(reason, Ordering::Relaxed);
        self.flush_seq_asked.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// A complete flush: CUPTI's buffers, then everything pending, then a FLUSHED marker.
    pub fn flush_all(&self, reason: u8) {
        self.test_gate_wait();
        cupti::flush_all();
        let dropped_cupti = self.cupti_dropped.load(Ordering::Relaxed);
        let dropped_nvtx = self.nvtx_dropped.load(Ordering::Relaxed);
        if let Ok(mut buf) = self.pending.lock() {
            let mut e = Enc(&mut buf);
            let at = e.begin(tag::DROPPED);
            e.u64(dropped_cupti);
            e.u64(dropped_nvtx);
            e.end(at);
            let at = e.begin(tag::FLUSHED);
            e.u64(now_ns());
            e.u8(reason);
            e.end(at);
        }
        self.drain();
    }
}

/// Wakes the writer thread. Async-signal-safe.
pub(crate) fn wake_writer() {
    if WAKE_READY.load(Ordering::Acquire) {
        // SAFETY: WAKE was initialised before WAKE_READY was set.
        unsafe {
            libc::sem_post(std::ptr::addr_of_mut!(WAKE).cast());
        }
    }
}

fn writer_loop(t: &'static Tracer) {
    // Signals go to the program's threads, never to this one: the handler waits for it.
    // SAFETY: plain signal-mask calls on this thread.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
    loop {
        let r = std::panic::catch_unwind(|| {
            wait_wake(WRITER_PERIOD);
            let asked = t.flush_seq_asked.load(Ordering::Acquire);
            if asked > t.flush_seq_done.load(Ordering::Acquire) {
                let reason = t.flush_requested.load(Ordering::Relaxed);
                let signalled = PENDING_SIGNAL.load(Ordering::Acquire) != 0;
                if signalled {
                    arm_signal_watchdog();
                }
                // What is already gathered goes to disk first: if the CUPTI flush below blocks
                // (a signal can interrupt a thread inside CUDA), that much is safe.
                t.drain();
                t.flush_all(reason);
                t.flush_seq_done.store(asked, Ordering::Release);
                if signalled {
                    finish_pending_signal();
                }
            } else {
                t.drain_some(!defer_cupti() || t.cupti_held() >= DEFER_MAX_BUFFERS);
            }
            cupti::top_up_pool();
        });
        if r.is_err() {
            return;
        }
        // A forked child gets a new tracer; this thread belongs to the old one.
        if !std::ptr::eq(TRACER.load(Ordering::Acquire), t) {
            return;
        }
    }
}

/// `FUSEPROF_CUPTI_DEFER=1` (a diagnostic): the writer decodes CUPTI's buffers only at a
/// flush, or once this many wait, as the PyTorch profiler keeps them until it stops.
const DEFER_MAX_BUFFERS: usize = 32;

fn defer_cupti() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| cupti::env_flag("FUSEPROF_CUPTI_DEFER"))
}

fn wait_wake(period: Duration) {
    let deadline_ns = now_ns() + period.as_nanos() as u64;
    let ts = libc::timespec {
        tv_sec: (deadline_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (deadline_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: WAKE is initialised (the writer starts only after init).
    unsafe {
        libc::sem_timedwait(std::ptr::addr_of_mut!(WAKE).cast(), &ts);
    }
}

extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(|| {
        if let Some(t) = tracer() {
            // The counters' last samples, before the final flush writes them.
            pmsampling::finish();
            t.flush_all(spool::flush_reason::EXIT);
        }
    });
}

extern "C" fn after_fork_child() {
    let _ = std::panic::catch_unwind(|| {
        let Some(old) = tracer() else { return };
        // The parent's locks may be held by threads that do not exist here: leave the old
        // tracer alone (leaked) and start a fresh one for this process. CUDA cannot be used in
        // a forked child, so CUPTI stays off; NVTX keeps working.
        cupti::forget_after_fork();
        install(old.spool_dir.clone(), true);
        nvtx::reemit_definitions();
    });
}

// ---- signals ------------------------------------------------------------------------------

/// The signals the tracer handles: SIGINT and SIGTERM (ends asked for), then the crash signals.
const SIGNALS: [libc::c_int; 7] = [
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGFPE,
    libc::SIGILL,
    libc::SIGABRT,
];
/// The program's action for each of SIGNALS before ours (leaked, never freed), for chaining.
static OLD_ACTIONS: [AtomicPtr<libc::sigaction>; 7] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; 7];
static CRASHING: AtomicBool = AtomicBool::new(false);
/// How long a crashing thread waits for the writer's flush before the crash goes on.
const CRASH_FLUSH_LIMIT: Duration = Duration::from_secs(2);
/// The signal whose default action (termination) waits for the writer thread's final flush.
static PENDING_SIGNAL: AtomicI32 = AtomicI32::new(0);
/// When PENDING_SIGNAL arrived (ns, CLOCK_REALTIME).
static PENDING_SIGNAL_AT_NS: AtomicU64 = AtomicU64::new(0);
/// A repeat of the pending signal within this is the same request delivered twice; a later one
/// means "now".
const DUPLICATE_SIGNAL_WINDOW: Duration = Duration::from_millis(500);
/// How long the writer may take over that flush before the signal's default action runs anyway.
const SIGNAL_FLUSH_LIMIT: Duration = Duration::from_secs(10);

fn install_signal_handlers() {
    for (i, &sig) in SIGNALS.iter().enumerate() {
        let crash = sig != libc::SIGINT && sig != libc::SIGTERM;
        // SAFETY: sigaction with valid pointers; the old action is kept (leaked) for chaining.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 {
                continue;
            }
            if !crash && old.sa_sigaction == libc::SIG_IGN {
                continue; // the program ignores it: so do we
            }
            let mut new: libc::sigaction = std::mem::zeroed();
            new.sa_sigaction = if crash {
                on_crash as *const () as usize
            } else {
                on_signal as *const () as usize
            };
            // SA_ONSTACK: a stack overflow's SIGSEGV runs on the program's alternate stack, if
            // it has one. SA_RESETHAND is not used: chaining needs the old action.
            new.sa_flags = libc::SA_SIGINFO
                | if crash {
                    libc::SA_ONSTACK
                } else {
                    libc::SA_RESTART
                };
            libc::sigemptyset(&mut new.sa_mask);
            OLD_ACTIONS[i].store(Box::into_raw(Box::new(old)), Ordering::Release);
            libc::sigaction(sig, &new, std::ptr::null_mut());
        }
    }
}

/// The program's action for `sig` before ours.
fn old_action(sig: libc::c_int) -> Option<&'static libc::sigaction> {
    let i = SIGNALS.iter().position(|&s| s == sig)?;
    // SAFETY: the slot holds a leaked Box (or null), never freed.
    unsafe { OLD_ACTIONS[i].load(Ordering::Acquire).as_ref() }
}

/// Puts `sig`'s default action back. Async-signal-safe.
fn restore_default(sig: libc::c_int) {
    // SAFETY: a zeroed sigaction with SIG_DFL and an empty mask is valid.
    unsafe {
        let mut dfl: libc::sigaction = std::mem::zeroed();
        dfl.sa_sigaction = libc::SIG_DFL;
        libc::sigemptyset(&mut dfl.sa_mask);
        libc::sigaction(sig, &dfl, std::ptr::null_mut());
    }
}

/// Runs the program's previous action for `sig`: its own handler, or the default one (put
/// back, and the signal raised again: it is blocked while our handler runs and fires when it
/// returns).
fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let Some(old) = old_action(sig) else { return };
    let h = old.sa_sigaction;
    if h == libc::SIG_DFL || h == libc::SIG_IGN {
        restore_default(sig);
        // SAFETY: raise is async-signal-safe.
        unsafe { libc::raise(sig) };
        return;
    }
    // SAFETY: calling the program's own handler the way it was installed (h is a function of
    // the kind its sa_flags say), with this signal's info and context.
    unsafe {
        if old.sa_flags & libc::SA_SIGINFO != 0 {
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                std::mem::transmute(h);
            f(sig, info, ctx);
        } else {
            let f: extern "C" fn(libc::c_int) = std::mem::transmute(h);
            f(sig);
        }
    }
}

/// The tracer, when its writer thread runs (nothing to flush otherwise).
fn tracer_with_writer() -> Option<&'static Tracer> {
    tracer().filter(|t| t.writer_started.load(Ordering::Acquire))
}

/// SIGINT / SIGTERM. The flush must not run inside the handler: the signal usually interrupts a
/// thread inside a CUDA call, holding locks that CUPTI's flush needs, so a flush waited for here
/// blocks until its timeout (seen on the device: a Swin-T loop sent SIGTERM kept nothing). So:
/// - the program's own handler (Python's for SIGINT): ask the writer for a flush and call it;
///   the program decides how to end, and its exit runs the exit flush;
/// - the default action (terminate): ask the writer for a flush and return, so the interrupted
///   thread leaves CUDA; the writer flushes, puts the default action back and raises the signal
///   again (`finish_pending_signal`). A second signal while that runs terminates at once.
extern "C" fn on_signal(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let Some(old) = old_action(sig) else { return };
    let t = tracer_with_writer();
    if old.sa_sigaction == libc::SIG_DFL && t.is_some() {
        // clock_gettime is async-signal-safe. The first arrival's time is set before the
        // signal, so that a concurrent repeat reads it.
        let now = now_ns();
        let _ = PENDING_SIGNAL_AT_NS.compare_exchange(0, now, Ordering::AcqRel, Ordering::Acquire);
        match PENDING_SIGNAL.compare_exchange(0, sig, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {}
            // The same signal again at once is one request delivered twice: `timeout` and a
            // shell signal the whole process group, and `collect` passes the signal on too.
            Err(first)
                if first == sig
                    && now.saturating_sub(PENDING_SIGNAL_AT_NS.load(Ordering::Acquire))
                        < DUPLICATE_SIGNAL_WINDOW.as_nanos() as u64 =>
            {
                return;
            }
            Err(_) => {
                chain(sig, info, ctx); // a second signal: the default action now
                return;
            }
        }
    }
    if let Some(t) = t {
        t.ask_flush(spool::flush_reason::SIGNAL);
        wake_writer();
        if old.sa_sigaction == libc::SIG_DFL {
            return; // the writer ends the process after its flush
        }
    }
    chain(sig, info, ctx);
}

/// A crash signal: the crashing thread cannot go on, so it waits here (bounded) while the writer
/// thread writes everything gathered so far, then the program's previous action runs (a fault
/// re-executes the faulting instruction once this returns, now with the default action). If the
/// flush blocks (the thread crashed inside CUDA holding CUPTI's locks), the host records and
/// completed CUPTI buffers are on disk already (the writer drains them first) and the wait ends
/// after CRASH_FLUSH_LIMIT.
extern "C" fn on_crash(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    if !CRASHING.swap(true, Ordering::AcqRel) {
        request_flush_and_wait(spool::flush_reason::CRASH, CRASH_FLUSH_LIMIT);
    }
    chain(sig, info, ctx);
}

/// Asks the writer thread for a complete flush and waits for it up to `timeout`.
/// Async-signal-safe: atomics, sem_post and nanosleep only.
fn request_flush_and_wait(reason: u8, timeout: Duration) {
    let Some(t) = tracer_with_writer() else {
        return;
    };
    let seq = t.ask_flush(reason);
    wake_writer();
    let step = libc::timespec {
        tv_sec: 0,
        tv_nsec: 2_000_000,
    };
    let mut waited = Duration::ZERO;
    while t.flush_seq_done.load(Ordering::Acquire) < seq && waited < timeout {
        // SAFETY: nanosleep with a valid timespec.
        unsafe { libc::nanosleep(&step, std::ptr::null_mut()) };
        waited += Duration::from_millis(2);
    }
}

/// Called by the writer thread after a flush: when a terminating signal waits for it, put the
/// signal's default action back and raise it for the process (the writer blocks it, so another
/// thread takes it and the process ends).
fn finish_pending_signal() {
    let sig = PENDING_SIGNAL.load(Ordering::Acquire);
    if sig == 0 {
        return;
    }
    restore_default(sig);
    // SAFETY: sends the signal to this process.
    unsafe { libc::kill(libc::getpid(), sig) };
}

/// Started by the writer before the flush a terminating signal waits for: if that flush blocks
/// (CUPTI waiting on a thread that never leaves CUDA), the signal's default action runs anyway.
fn arm_signal_watchdog() {
    let _ = std::thread::Builder::new()
        .name("fuseprof-sigwatch".into())
        .spawn(|| {
            std::thread::sleep(SIGNAL_FLUSH_LIMIT);
            finish_pending_signal();
        });
}

/// Test hook (`FUSEPROF_TEST_FLUSH_WAITS_FOR_PROGRAM=1`, read at start): a flush for a pending
/// signal waits, up to 5 s, until a program thread has recorded something after the writer's
/// drain. This is how CUPTI's flush behaves when the signal interrupted a thread inside CUDA (it
/// needs that thread's locks), which a test without a GPU cannot otherwise reproduce.
static TEST_GATE: AtomicBool = AtomicBool::new(false);

/// Test hook (`FUSEPROF_TEST_SIGNAL_FLUSH_DELAY_MS=N`): a flush for a pending signal takes N ms
/// longer, as a flush of full CUPTI buffers can.
static TEST_FLUSH_DELAY_MS: AtomicU64 = AtomicU64::new(0);

impl Tracer {
    fn test_gate_wait(&self) {
        if PENDING_SIGNAL.load(Ordering::Acquire) == 0 {
            return;
        }
        std::thread::sleep(Duration::from_millis(
            TEST_FLUSH_DELAY_MS.load(Ordering::Relaxed),
        ));
        if !TEST_GATE.load(Ordering::Relaxed) {
            return;
        }
        let start = std::time::Instant::now();
        while self.pending.lock().map(|p| p.is_empty()).unwrap_or(false)
            && start.elapsed() < Duration::from_secs(5)
        {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

// ---- entry points -------------------------------------------------------------------------

/// Called by the CUDA driver during `cuInit` when `CUDA_INJECTION64_PATH` names this library.
#[no_mangle]
pub extern "C" fn InitializeInjection() -> libc::c_int {
    std::panic::catch_unwind(|| {
        if let Some(t) = init() {
            cupti::start(t);
        }
    })
    .map(|_| 1)
    .unwrap_or(0)
}

/// Called by NVTX on first use when `NVTX_INJECTION64_PATH` names this library. Each copy of
/// NVTX in the process (PyTorch, cuDNN, the program's own) calls it once with its own tables.
///
/// # Safety
/// `get_export_table` must be NVTX's export-table accessor.
#[no_mangle]
pub unsafe extern "C" fn InitializeInjectionNvtx2(
    get_export_table: nvtx::GetExportTable,
) -> libc::c_int {
    std::panic::catch_unwind(|| {
        if init().is_none() {
            return 0;
        }
        // SAFETY: forwarded from NVTX's own call.
        unsafe { nvtx::install(get_export_table) }
    })
    .unwrap_or(0)
}

/// Pushes a range named by `len` bytes at `text` on the calling thread, as an NVTX push in the
/// default domain would. Called by fuseprof's PyTorch op observer, which finds this library
/// through `NVTX_INJECTION64_PATH`; returns the depth before the push, or -1.
///
/// # Safety
/// `text` must point to `len` readable bytes (it need not be NUL-terminated).
#[no_mangle]
pub unsafe extern "C" fn fuseprof_range_push(text: *const libc::c_char, len: usize) -> libc::c_int {
    if init().is_none() {
        return -1;
    }
    let bytes = if text.is_null() {
        &[][..]
    } else {
        // SAFETY: the caller passes `len` readable bytes.
        unsafe { std::slice::from_raw_parts(text.cast::<u8>(), len) }
    };
    nvtx::direct_push(bytes)
}

/// Pops the innermost range pushed on the calling thread (by NVTX or `fuseprof_range_push`).
#[no_mangle]
pub extern "C" fn fuseprof_range_pop() -> libc::c_int {
    nvtx::direct_pop()
}
