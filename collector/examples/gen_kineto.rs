//! Writes a large PyTorch-profiler trace by repeating a real one's steps, for the import
//! benchmark: each copy is shifted past the previous one in time, and its correlation,
//! External id and flow ids are renumbered so that launches still pair with their kernels.
//!
//! The ids of a real trace grow by one per op or launch, so a trace of ten million events
//! holds ids of seven or eight digits, and CUPTI's correlation ids are 32-bit. The source's ids
//! are therefore ranked (each distinct value its place among them, so equal ids stay equal and
//! their order is kept) and copy `c` numbers them from `lowest + c * distinct`: the ids go on
//! from the source's lowest as a longer capture's would, instead of multiplying its highest by
//! the copy count.
//!
//! cargo run --release -p fuseprof-collector --example gen_kineto -- SOURCE.json.gz COPIES OUT.json

use std::io::{BufWriter, Read, Write};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, source, copies, out] = &args[..] else {
        return Err("usage: gen_kineto SOURCE.json[.gz] COPIES OUT.json".into());
    };
    let copies: i64 = copies.parse()?;
    let mut raw = Vec::new();
    std::fs::File::open(source)?.read_to_end(&mut raw)?;
    if raw.starts_with(&[0x1f, 0x8b]) {
        let mut j = Vec::new();
        flate2::read::GzDecoder::new(&raw[..]).read_to_end(&mut j)?;
        raw = j;
    }
    let mut v: serde_json::Value = serde_json::from_slice(&raw)?;
    let events = v["traceEvents"].take();
    let events = events.as_array().ok_or("no traceEvents")?;
    let (mut lo, mut hi) = (f64::MAX, f64::MIN);
    let mut ids = Vec::new();
    for e in events {
        if let Some(ts) = e["ts"].as_f64() {
            lo = lo.min(ts);
            hi = hi.max(ts + e["dur"].as_f64().unwrap_or(0.0));
        }
        for k in ["correlation", "External id"] {
            ids.extend(e["args"][k].as_i64());
        }
        ids.extend(e["id"].as_i64());
    }
    ids.sort_unstable();
    ids.dedup();
    let lowest = ids.first().copied().unwrap_or(0);
    let distinct = ids.len() as i64;
    // An id's number in copy `c`.
    let renumber = |x: i64, c: i64| {
        let rank = ids.binary_search(&x).expect("every id was ranked") as i64;
        lowest + c * distinct + rank
    };
    let span = (hi - lo).ceil() + 1.0;
    let mut w = BufWriter::with_capacity(1 << 20, std::fs::File::create(out)?);
    write!(w, "{{\"schemaVersion\":1,\"traceEvents\":[")?;
    let mut first = true;
    let mut n = 0u64;
    for c in 0..copies {
        for e in events {
            if c > 0 && e["ph"] == "M" {
                continue;
            }
            let mut e = e.clone();
            if let Some(ts) = e["ts"].as_f64() {
                e["ts"] = serde_json::json!(ts + span * c as f64);
            }
            for k in ["correlation", "External id"] {
                if let Some(x) = e["args"][k].as_i64() {
                    e["args"][k] = renumber(x, c).into();
                }
            }
            if let Some(x) = e["id"].as_i64() {
                e["id"] = renumber(x, c).into();
            }
            if !first {
                w.write_all(b",\n")?;
            }
            first = false;
            serde_json::to_writer(&mut w, &e)?;
            n += 1;
        }
    }
    writeln!(w, "]}}")?;
    w.flush()?;
    eprintln!("wrote {n} events to {out}");
    Ok(())
}
