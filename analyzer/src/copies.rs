//! Copies between host and device memory, by direction and host memory kind (pageable,
//! pinned, unknown where the source did not record it): their count, time, bytes and achieved
//! rate, what of it lay inside steps, and which made the host wait. A synchronous copy from
//! pageable memory inside a step is flagged: the driver stages it through a pinned buffer of
//! its own, so it runs at pageable speed while the host waits, which pinned memory with
//! `non_blocking=True` avoids.

use fuseprof_store::{CopyKind, MemopKind, Store};
use serde::{Deserialize, Serialize};

use crate::ops::Names;
use crate::steps::{self, Window};
use crate::Result;

/// Above this many host copies the launching calls are not looked up one by one (the
/// `synchronous` counts are then absent).
const LOOKUP_MAX: usize = 200_000;

/// The run's host<->device copies.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HostCopies {
    /// Steps the per-step figures divide by (0: the run has no steps).
    pub steps: usize,
    /// One row per direction and host memory, `HtoD` first, then by time.
    pub rows: Vec<CopyRow>,
}

/// The copies of one direction from or to one kind of host memory.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CopyRow {
    /// `HtoD` or `DtoH`.
    pub direction: String,
    /// `pageable`, `pinned`, `managed`, `array`, or `unknown`.
    pub host_memory: String,
    pub count: u64,
    pub ns: i64,
    /// Bytes of the copies that recorded them.
    pub bytes: i64,
    /// `bytes` over the time of the copies that recorded bytes (0 without any).
    pub bytes_per_s: f64,
    /// The copies whose GPU start lies inside a step window, and their time.
    pub in_steps: u64,
    pub in_steps_ns: i64,
    /// `in_steps_ns` and `in_steps` per step (0 without steps).
    pub ns_per_step: f64,
    pub count_per_step: f64,
    /// Copies the host waited for (their launching call lasted through at least half of the
    /// copy, or was a synchronous `cudaMemcpy`), all and inside steps; absent where the
    /// launching calls were not looked up.
    pub synchronous: Option<u64>,
    pub synchronous_in_steps: Option<u64>,
    /// A synchronous pageable host-to-device copy lies inside a step.
    pub flagged: bool,
}

/// The host<->device copies of the run (or of `scope`, one step window).
pub(crate) fn host_copies(
    store: &mut Store,
    names: &Names,
    windows: &[Window],
    scope: Option<Window>,
) -> Result<HostCopies> {
    let mut copies = Vec::new();
    store.for_each_memop(|m| {
        let to_device = match m.copy_kind {
            Some(CopyKind::HtoD) => true,
            Some(CopyKind::DtoH) => false,
            _ => return,
        };
        if m.kind != MemopKind::Memcpy {
            return;
        }
        if scope.is_some_and(|w| m.start_ns < w.start_ns || m.start_ns >= w.end_ns) {
            return;
        }
        copies.push((m.start_ns, to_device, m));
    })?;
    copies.sort_by_key(|c| c.0);
    let lookup = copies.len() <= LOOKUP_MAX;
    let mut rows: Vec<CopyRow> = Vec::new();
    let mut timed: Vec<(i64, i64)> = Vec::new();
    let mut hint = 0;
    for (start_ns, to_device, m) in copies {
        let host = if to_device {
            m.src_memory
        } else {
            m.dst_memory
        };
        let direction = if to_device { "HtoD" } else { "DtoH" };
        let host_memory = host.map_or("unknown", |k| k.as_str());
        let i = match rows
            .iter()
            .position(|r| r.direction == direction && r.host_memory == host_memory)
        {
            Some(i) => i,
            None => {
                rows.push(CopyRow {
                    direction: direction.into(),
                    host_memory: host_memory.into(),
                    synchronous: lookup.then_some(0),
                    synchronous_in_steps: lookup.then_some(0),
                    ..Default::default()
                });
                timed.push((0, 0));
                rows.len() - 1
            }
        };
        let dur = (m.end_ns - start_ns).max(0);
        let in_step = steps::window_of(windows, start_ns, &mut hint).is_some();
        let sync = if lookup {
            let call = match m.correlation_id {
                Some(c) => store.launch_call(m.pid, c)?,
                None => None,
            };
            // A pageable copy's call returns once the driver has staged the last chunk, before
            // the last DMA ends: the host waited for the copy where the call lasted through at
            // least half of it.
            call.is_some_and(|(_, c)| {
                !names.get(c.name.0 as u32).contains("Async")
                    || (dur > 0 && 2 * (c.end_ns - start_ns) >= dur)
            })
        } else {
            false
        };
        let r = &mut rows[i];
        r.count += 1;
        r.ns += dur;
        if let Some(b) = m.bytes {
            r.bytes += b.max(0);
            timed[i].0 += b.max(0);
            timed[i].1 += dur;
        }
        if in_step {
            r.in_steps += 1;
            r.in_steps_ns += dur;
        }
        if sync {
            *r.synchronous.get_or_insert(0) += 1;
            if in_step {
                *r.synchronous_in_steps.get_or_insert(0) += 1;
            }
        }
    }
    let n = if scope.is_some() { 1 } else { windows.len() };
    for (r, &(bytes, ns)) in rows.iter_mut().zip(&timed) {
        r.bytes_per_s = if ns > 0 {
            (bytes as f64 / (ns as f64 * 1e-9)).round()
        } else {
            0.0
        };
        if n > 0 {
            r.ns_per_step = crate::round2(r.in_steps_ns as f64 / n as f64);
            r.count_per_step = crate::round2(r.in_steps as f64 / n as f64);
        }
        r.flagged = r.direction == "HtoD"
            && r.host_memory == "pageable"
            && r.synchronous_in_steps.unwrap_or(0) > 0;
    }
    rows.sort_by(|a, b| (&b.direction, b.ns).cmp(&(&a.direction, a.ns)));
    Ok(HostCopies { steps: n, rows })
}
