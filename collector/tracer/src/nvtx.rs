//! NVTX injection: the library fills NVTX's callback tables with its own functions, which
//! append compact records to the tracer's pending buffer.
//!
//! Layouts and ids follow nvtx3's `nvtxDetail/nvtxTypes.h` (module CORE = 1, CORE2 = 5) and
//! `nvToolsExt.h` (`nvtxEventAttributes_v2`, 48 bytes).

use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::spool::{msg, tag, Enc};
use crate::{capture, now_ns, tid, tracer, CAPTURE_MODE, CAPTURE_NAME, CAPTURING};

pub type GetExportTable = Option<unsafe extern "C" fn(export_table_id: u32) -> *const c_void>;

#[repr(C)]
struct ExportTableCallbacks {
    struct_size: usize,
    get_module_function_table: Option<
        unsafe extern "C" fn(
            module: u32,
            out_table: *mut *mut *mut *const c_void,
            out_size: *mut u32,
        ) -> c_int,
    >,
}

const ETID_CALLBACKS: u32 = 1;
const MODULE_CORE: u32 = 1;
const MODULE_CORE2: u32 = 5;

const MESSAGE_ASCII: i32 = 1;
const MESSAGE_UNICODE: i32 = 2;
const MESSAGE_REGISTERED: i32 = 3;
const COLOR_ARGB: i32 = 1;
/// sizeof(nvtxEventAttributes_v2): the fields read below all lie inside it.
const ATTR_V2_SIZE: u16 = 48;

/// What an `nvtxDomainHandle_t` or `nvtxStringHandle_t` from this library points to.
#[repr(C)]
struct Handle {
    id: u64,
    /// For registered strings: the text (NUL-terminated, leaked with the handle).
    text: *const c_char,
}

static NEXT_HANDLE: AtomicU64 = AtomicU64::new(1);
static NEXT_RANGE: AtomicU64 = AtomicU64::new(1);
static DOMAINS: Mutex<Option<HashMap<String, usize>>> = Mutex::new(None);
static STRINGS: Mutex<Option<HashMap<(u64, String), usize>>> = Mutex::new(None);

/// Where the `--capture nvtx:NAME` window opened: (thread, depth) for push/pop, or range id.
static CAPTURE_TID: AtomicU32 = AtomicU32::new(0);
static CAPTURE_DEPTH: AtomicU32 = AtomicU32::new(u32::MAX);
static CAPTURE_RANGE: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static DEPTH: Cell<i32> = const { Cell::new(0) };
}

/// Fills the CORE and CORE2 tables of one NVTX instance. Returns 1 on success.
///
/// # Safety
/// `get` must be NVTX's export-table accessor.
pub unsafe fn install(get: GetExportTable) -> c_int {
    let Some(get) = get else { return 0 };
    // SAFETY: NVTX returns a pointer to its static callbacks table, or null.
    let cb = unsafe { get(ETID_CALLBACKS) } as *const ExportTableCallbacks;
    // SAFETY: checked for null; the struct is NVTX's own.
    let Some(cb) = (unsafe { cb.as_ref() }) else {
        return 0;
    };
    let Some(get_table) = cb.get_module_function_table else {
        return 0;
    };
    let core: [(usize, *const c_void); 15] = [
        (1, mark_ex as *const c_void),
        (2, mark_a as *const c_void),
        (3, mark_w as *const c_void),
        (4, range_start_ex as *const c_void),
        (5, range_start_a as *const c_void),
        (6, range_start_w as *const c_void),
        (7, range_end as *const c_void),
        (8, range_push_ex as *const c_void),
        (9, range_push_a as *const c_void),
        (10, range_push_w as *const c_void),
        (11, range_pop as *const c_void),
        (12, name_category_a as *const c_void),
        (13, name_category_w as *const c_void),
        (14, name_os_thread_a as *const c_void),
        (15, name_os_thread_w as *const c_void),
    ];
    let core2: [(usize, *const c_void); 15] = [
        (1, domain_mark_ex as *const c_void),
        (2, domain_range_start_ex as *const c_void),
        (3, domain_range_end as *const c_void),
        (4, domain_range_push_ex as *const c_void),
        (5, domain_range_pop as *const c_void),
        (6, domain_resource_create as *const c_void),
        (7, domain_resource_destroy as *const c_void),
        (8, domain_name_category_a as *const c_void),
        (9, domain_name_category_w as *const c_void),
        (10, domain_register_string_a as *const c_void),
        (11, domain_register_string_w as *const c_void),
        (12, domain_create_a as *const c_void),
        (13, domain_create_w as *const c_void),
        (14, domain_destroy as *const c_void),
        (15, initialize as *const c_void),
    ];
    for (module, entries) in [(MODULE_CORE, &core[..]), (MODULE_CORE2, &core2[..])] {
        let mut table: *mut *mut *const c_void = std::ptr::null_mut();
        let mut size: u32 = 0;
        // SAFETY: out pointers are valid; NVTX fills them with its table for `module`.
        if unsafe { get_table(module, &mut table, &mut size) } == 0 || table.is_null() {
            return 0;
        }
        for &(slot, f) in entries {
            if slot >= size as usize {
                continue;
            }
            // SAFETY: slot < size; each entry points to one of NVTX's function-pointer slots.
            unsafe {
                let p = *table.add(slot);
                if !p.is_null() {
                    *p = f;
                }
            }
        }
    }
    1
}

// ---- recording ------------------------------------------------------------------------------

/// The text of an event's message, for capture matching.
enum Message<'a> {
    None,
    Text(&'a [u8]),
    Wide(*const libc::wchar_t),
    Registered(&'a Handle),
}

/// Reads an `nvtxEventAttributes_t`: (category, color, message).
///
/// # Safety
/// `attr` must be null or point to an NVTX event attributes struct.
unsafe fn read_attr<'a>(attr: *const u8) -> (u32, Option<u32>, Message<'a>) {
    if attr.is_null() {
        return (0, None, Message::None);
    }
    // SAFETY: the caller guarantees the struct; `size` says how much of it is there.
    unsafe {
        let size = (attr.add(2) as *const u16).read_unaligned();
        if size < ATTR_V2_SIZE {
            return (0, None, Message::None);
        }
        let category = (attr.add(4) as *const u32).read_unaligned();
        let color_type = (attr.add(8) as *const i32).read_unaligned();
        let color = (attr.add(12) as *const u32).read_unaligned();
        let message_type = (attr.add(32) as *const i32).read_unaligned();
        let message = (attr.add(40) as *const *const c_void).read_unaligned();
        let color = (color_type == COLOR_ARGB).then_some(color);
        let m = match message_type {
            _ if message.is_null() => Message::None,
            MESSAGE_ASCII => Message::Text(CStr::from_ptr(message as *const c_char).to_bytes()),
            MESSAGE_UNICODE => Message::Wide(message as *const libc::wchar_t),
            MESSAGE_REGISTERED => Message::Registered(&*(message as *const Handle)),
            _ => Message::None,
        };
        (category, color, m)
    }
}

fn message_matches(m: &Message, name: &str) -> bool {
    match m {
        Message::Text(b) => *b == name.as_bytes(),
        Message::Registered(h) if !h.text.is_null() => {
            // SAFETY: registered texts are leaked NUL-terminated copies.
            unsafe { CStr::from_ptr(h.text) }.to_bytes() == name.as_bytes()
        }
        Message::Wide(w) => wide_to_string(*w) == name,
        _ => false,
    }
}

fn wide_to_string(w: *const libc::wchar_t) -> String {
    let mut s = String::new();
    let mut i = 0;
    loop {
        // SAFETY: NVTX passes a NUL-terminated wide string.
        let c = unsafe { *w.add(i) };
        if c == 0 || i > 1 << 16 {
            break;
        }
        s.push(char::from_u32(c as u32).unwrap_or('\u{fffd}'));
        i += 1;
    }
    s
}

fn enc_attrs(e: &mut Enc, category: u32, color: Option<u32>, m: &Message) {
    e.u32(category);
    e.u8(color.is_some() as u8);
    e.u32(color.unwrap_or(0));
    match m {
        Message::None => e.u8(msg::NONE),
        Message::Text(b) => {
            e.u8(msg::TEXT);
            e.bytes(b);
        }
        Message::Wide(w) => {
            e.u8(msg::TEXT);
            e.str(&wide_to_string(*w));
        }
        Message::Registered(h) => {
            e.u8(msg::REGISTERED);
            e.u64(h.id);
        }
    }
}

fn domain_id(d: *const c_void) -> u64 {
    // SAFETY: non-null domain handles come from domain_create_a and point to a leaked Handle.
    unsafe { (d as *const Handle).as_ref() }.map_or(0, |h| h.id)
}

fn capturing() -> bool {
    CAPTURING.load(Ordering::Relaxed)
}

fn is_capture_start(m: &Message) -> bool {
    CAPTURE_MODE.load(Ordering::Relaxed) == capture::NVTX
        && !capturing()
        && CAPTURE_NAME.get().is_some_and(|n| message_matches(m, n))
}

fn push(domain: u64, attr: (u32, Option<u32>, Message)) -> c_int {
    let depth = DEPTH.with(|d| {
        let v = d.get();
        d.set(v + 1);
        v
    });
    let Some(t) = tracer() else { return depth };
    if is_capture_start(&attr.2) {
        CAPTURE_TID.store(tid(), Ordering::Relaxed);
        CAPTURE_DEPTH.store(depth as u32, Ordering::Relaxed);
        crate::cupti::capture(true);
    }
    if !capturing() {
        return depth;
    }
    let ts = now_ns();
    let tid = tid();
    t.record(|e| {
        let at = e.begin(tag::NVTX_PUSH);
        e.u32(tid);
        e.u64(ts);
        e.u64(domain);
        enc_attrs(e, attr.0, attr.1, &attr.2);
        e.end(at);
    });
    depth
}

fn pop(domain: u64) -> c_int {
    let ts = now_ns();
    let depth = DEPTH.with(|d| {
        let v = (d.get() - 1).max(0);
        d.set(v);
        v
    });
    let Some(t) = tracer() else { return depth };
    if !capturing() {
        return depth;
    }
    let tid = tid();
    t.record(|e| {
        let at = e.begin(tag::NVTX_POP);
        e.u32(tid);
        e.u64(ts);
        e.u64(domain);
        e.end(at);
    });
    if CAPTURE_MODE.load(Ordering::Relaxed) == capture::NVTX
        && CAPTURE_TID.load(Ordering::Relaxed) == tid
        && CAPTURE_DEPTH.load(Ordering::Relaxed) == depth as u32
    {
        CAPTURE_DEPTH.store(u32::MAX, Ordering::Relaxed);
        crate::cupti::capture(false);
    }
    depth
}

fn start(domain: u64, attr: (u32, Option<u32>, Message)) -> u64 {
    let id = NEXT_RANGE.fetch_add(1, Ordering::Relaxed);
    let Some(t) = tracer() else { return id };
    if is_capture_start(&attr.2) {
        CAPTURE_RANGE.store(id, Ordering::Relaxed);
        crate::cupti::capture(true);
    }
    if !capturing() {
        return id;
    }
    let ts = now_ns();
    let tid = tid();
    t.record(|e| {
        let at = e.begin(tag::NVTX_START);
        e.u64(id);
        e.u32(tid);
        e.u64(ts);
        e.u64(domain);
        enc_attrs(e, attr.0, attr.1, &attr.2);
        e.end(at);
    });
    id
}

fn end(id: u64) {
    let ts = now_ns();
    let Some(t) = tracer() else { return };
    if !capturing() {
        return;
    }
    let tid = tid();
    t.record(|e| {
        let at = e.begin(tag::NVTX_END);
        e.u64(id);
        e.u32(tid);
        e.u64(ts);
        e.end(at);
    });
    if CAPTURE_MODE.load(Ordering::Relaxed) == capture::NVTX
        && CAPTURE_RANGE.load(Ordering::Relaxed) == id
    {
        CAPTURE_RANGE.store(0, Ordering::Relaxed);
        crate::cupti::capture(false);
    }
}

fn mark(domain: u64, attr: (u32, Option<u32>, Message)) {
    let ts = now_ns();
    let Some(t) = tracer() else { return };
    if !capturing() {
        return;
    }
    let tid = tid();
    t.record(|e| {
        let at = e.begin(tag::NVTX_MARK);
        e.u32(tid);
        e.u64(ts);
        e.u64(domain);
        enc_attrs(e, attr.0, attr.1, &attr.2);
        e.end(at);
    });
}

fn name_category(domain: u64, category: u32, name: &str) {
    if let Some(t) = tracer() {
        t.record(|e| {
            let at = e.begin(tag::NVTX_CATEGORY);
            e.u64(domain);
            e.u32(category);
            e.str(name);
            e.end(at);
        });
    }
}

fn name_thread(os_tid: u32, name: &str) {
    if let Some(t) = tracer() {
        t.record(|e| {
            let at = e.begin(tag::THREAD_NAME);
            e.u32(os_tid);
            e.str(name);
            e.end(at);
        });
    }
}

/// Runs `f`, returning `default` if it panics: no unwinding into NVTX's C callers.
fn guard<T>(default: T, f: impl FnOnce() -> T) -> T {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(default)
}

fn cstr<'a>(p: *const c_char) -> &'a [u8] {
    if p.is_null() {
        return b"";
    }
    // SAFETY: NVTX passes NUL-terminated strings.
    unsafe { CStr::from_ptr(p) }.to_bytes()
}

// ---- the callbacks NVTX calls -----------------------------------------------------------------

unsafe extern "C" fn mark_ex(attr: *const u8) {
    // SAFETY: NVTX passes an attributes struct.
    guard((), || mark(0, unsafe { read_attr(attr) }))
}
unsafe extern "C" fn mark_a(s: *const c_char) {
    guard((), || mark(0, (0, None, Message::Text(cstr(s)))))
}
unsafe extern "C" fn mark_w(s: *const libc::wchar_t) {
    guard((), || mark(0, (0, None, Message::Wide(s))))
}
unsafe extern "C" fn range_start_ex(attr: *const u8) -> u64 {
    // SAFETY: NVTX passes an attributes struct.
    guard(0, || start(0, unsafe { read_attr(attr) }))
}
unsafe extern "C" fn range_start_a(s: *const c_char) -> u64 {
    guard(0, || start(0, (0, None, Message::Text(cstr(s)))))
}
unsafe extern "C" fn range_start_w(s: *const libc::wchar_t) -> u64 {
    guard(0, || start(0, (0, None, Message::Wide(s))))
}
unsafe extern "C" fn range_end(id: u64) {
    guard((), || end(id))
}
unsafe extern "C" fn range_push_ex(attr: *const u8) -> c_int {
    // SAFETY: NVTX passes an attributes struct.
    guard(-1, || push(0, unsafe { read_attr(attr) }))
}
unsafe extern "C" fn range_push_a(s: *const c_char) -> c_int {
    guard(-1, || push(0, (0, None, Message::Text(cstr(s)))))
}
unsafe extern "C" fn range_push_w(s: *const libc::wchar_t) -> c_int {
    guard(-1, || push(0, (0, None, Message::Wide(s))))
}
unsafe extern "C" fn range_pop() -> c_int {
    guard(-1, || pop(0))
}

/// A push from fuseprof's own PyTorch op observer (`collector/python/fuseprof_ops.cpp`): the
/// same record as an NVTX push in the default domain, without NVTX's dispatch or a `strlen`.
pub(crate) fn direct_push(text: &[u8]) -> c_int {
    guard(-1, || push(0, (0, None, Message::Text(text))))
}

/// The pop that matches [`direct_push`] (it shares the thread's push/pop stack with NVTX).
pub(crate) fn direct_pop() -> c_int {
    guard(-1, || pop(0))
}
unsafe extern "C" fn name_category_a(category: u32, name: *const c_char) {
    guard((), || {
        name_category(0, category, &String::from_utf8_lossy(cstr(name)))
    })
}
unsafe extern "C" fn name_category_w(category: u32, name: *const libc::wchar_t) {
    guard((), || name_category(0, category, &wide_to_string(name)))
}
unsafe extern "C" fn domain_name_category_w(
    d: *const c_void,
    category: u32,
    name: *const libc::wchar_t,
) {
    guard((), || {
        name_category(domain_id(d), category, &wide_to_string(name))
    })
}
unsafe extern "C" fn name_os_thread_a(os_tid: u32, name: *const c_char) {
    guard((), || {
        name_thread(os_tid, &String::from_utf8_lossy(cstr(name)))
    })
}
unsafe extern "C" fn name_os_thread_w(os_tid: u32, name: *const libc::wchar_t) {
    guard((), || name_thread(os_tid, &wide_to_string(name)))
}
unsafe extern "C" fn domain_mark_ex(d: *const c_void, attr: *const u8) {
    // SAFETY: NVTX passes an attributes struct.
    guard((), || mark(domain_id(d), unsafe { read_attr(attr) }))
}
unsafe extern "C" fn domain_range_start_ex(d: *const c_void, attr: *const u8) -> u64 {
    // SAFETY: NVTX passes an attributes struct.
    guard(0, || start(domain_id(d), unsafe { read_attr(attr) }))
}
unsafe extern "C" fn domain_range_end(_d: *const c_void, id: u64) {
    guard((), || end(id))
}
unsafe extern "C" fn domain_range_push_ex(d: *const c_void, attr: *const u8) -> c_int {
    // SAFETY: NVTX passes an attributes struct.
    guard(-1, || push(domain_id(d), unsafe { read_attr(attr) }))
}
unsafe extern "C" fn domain_range_pop(d: *const c_void) -> c_int {
    guard(-1, || pop(domain_id(d)))
}
unsafe extern "C" fn domain_resource_create(
    _d: *const c_void,
    _attr: *const c_void,
) -> *mut c_void {
    std::ptr::null_mut()
}
unsafe extern "C" fn domain_resource_destroy(_r: *mut c_void) {}
unsafe extern "C" fn domain_name_category_a(d: *const c_void, category: u32, name: *const c_char) {
    guard((), || {
        name_category(domain_id(d), category, &String::from_utf8_lossy(cstr(name)))
    })
}
unsafe extern "C" fn domain_register_string_a(d: *const c_void, s: *const c_char) -> *const c_void {
    guard(std::ptr::null(), || {
        register_string(d, String::from_utf8_lossy(cstr(s)).into_owned())
    })
}
unsafe extern "C" fn domain_register_string_w(
    d: *const c_void,
    s: *const libc::wchar_t,
) -> *const c_void {
    guard(std::ptr::null(), || register_string(d, wide_to_string(s)))
}
fn register_string(d: *const c_void, text: String) -> *const c_void {
    {
        let domain = domain_id(d);
        let mut map = STRINGS.lock().unwrap_or_else(|e| e.into_inner());
        let map = map.get_or_insert_with(HashMap::new);
        if let Some(&h) = map.get(&(domain, text.clone())) {
            return h as *const c_void;
        }
        let id = NEXT_HANDLE.fetch_add(1, Ordering::Relaxed);
        let c = std::ffi::CString::new(text.clone()).unwrap_or_default();
        let h = Box::into_raw(Box::new(Handle {
            id,
            text: c.into_raw(),
        }));
        map.insert((domain, text.clone()), h as usize);
        if let Some(t) = tracer() {
            t.record(|e| {
                let at = e.begin(tag::NVTX_STRING);
                e.u64(id);
                e.u64(domain);
                e.str(&text);
                e.end(at);
            });
        }
        h as *const c_void
    }
}
unsafe extern "C" fn domain_create_a(name: *const c_char) -> *const c_void {
    guard(std::ptr::null(), || {
        create_domain(String::from_utf8_lossy(cstr(name)).into_owned())
    })
}
unsafe extern "C" fn domain_create_w(name: *const libc::wchar_t) -> *const c_void {
    guard(std::ptr::null(), || create_domain(wide_to_string(name)))
}
fn create_domain(name: String) -> *const c_void {
    {
        let mut map = DOMAINS.lock().unwrap_or_else(|e| e.into_inner());
        let map = map.get_or_insert_with(HashMap::new);
        if let Some(&h) = map.get(&name) {
            return h as *const c_void;
        }
        let id = NEXT_HANDLE.fetch_add(1, Ordering::Relaxed);
        let h = Box::into_raw(Box::new(Handle {
            id,
            text: std::ptr::null(),
        }));
        map.insert(name.clone(), h as usize);
        if let Some(t) = tracer() {
            t.record(|e| {
                let at = e.begin(tag::NVTX_DOMAIN);
                e.u64(id);
                e.str(&name);
                e.end(at);
            });
        }
        h as *const c_void
    }
}
unsafe extern "C" fn domain_destroy(_d: *const c_void) {}
unsafe extern "C" fn initialize(_reserved: *const c_void) {}

/// Writes the domain and registered-string definitions again, into a forked child's new
/// spool, so that its events can name them. Skips a map whose lock a vanished thread held.
pub fn reemit_definitions() {
    let Some(t) = tracer() else { return };
    if let Ok(map) = DOMAINS.try_lock() {
        for (name, &h) in map.iter().flat_map(|m| m.iter()) {
            // SAFETY: the map holds leaked handles.
            let id = unsafe { &*(h as *const Handle) }.id;
            t.record(|e| {
                let at = e.begin(tag::NVTX_DOMAIN);
                e.u64(id);
                e.str(name);
                e.end(at);
            });
        }
    }
    if let Ok(map) = STRINGS.try_lock() {
        for ((domain, text), &h) in map.iter().flat_map(|m| m.iter()) {
            // SAFETY: the map holds leaked handles.
            let id = unsafe { &*(h as *const Handle) }.id;
            t.record(|e| {
                let at = e.begin(tag::NVTX_STRING);
                e.u64(id);
                e.u64(*domain);
                e.str(text);
                e.end(at);
            });
        }
    }
}
