//! Text for people: durations with units, kernel names demangled and shortened.

/// A duration with a unit that keeps three significant digits: `850 ns`, `12.3 µs`, `4.56 ms`.
pub fn dur(ns: i64) -> String {
    let a = ns.unsigned_abs() as f64;
    let sign = if ns < 0 { "-" } else { "" };
    let (v, unit) = if a < 1e3 {
        (a, "ns")
    } else if a < 1e6 {
        (a / 1e3, "µs")
    } else if a < 1e9 {
        (a / 1e6, "ms")
    } else {
        (a / 1e9, "s")
    };
    if unit == "ns" || v >= 100.0 {
        format!("{sign}{v:.0} {unit}")
    } else if v >= 10.0 {
        format!("{sign}{v:.1} {unit}")
    } else {
        format!("{sign}{v:.2} {unit}")
    }
}

/// A tick spacing of 1, 2 or 5 times a power of ten at least `min_ns`.
pub fn nice_step(min_ns: f64) -> i64 {
    let mut p = 1i64;
    loop {
        for m in [1, 2, 5] {
            if (p * m) as f64 >= min_ns {
                return p * m;
            }
        }
        if p > i64::MAX / 100 {
            return p;
        }
        p *= 10;
    }
}

/// An axis label for `t` (relative to the run's start) in steps of `step`: `12.5 ms`.
pub fn tick(t: i64, step: i64) -> String {
    // The unit in which the step is at least 0.1: 500 µs steps read 0.5 ms, 1.0 ms, ...
    let (div, unit) = if step >= 100_000_000 {
        (1e9, "s")
    } else if step >= 100_000 {
        (1e6, "ms")
    } else if step >= 100 {
        (1e3, "µs")
    } else {
        (1.0, "ns")
    };
    let v = t as f64 / div;
    // Enough decimals to tell ticks apart.
    let decimals = {
        let s = step as f64 / div;
        if s >= 1.0 {
            0
        } else if s >= 0.1 {
            1
        } else {
            2
        }
    };
    format!("{v:.decimals$} {unit}")
}

/// A time far into a run, in seconds with the decimals that ticks `step` apart need:
/// `14595.020 s`.
pub fn at(t: i64, step: i64) -> String {
    let mut decimals = 0usize;
    let mut unit = 1_000_000_000i64;
    while unit > step.max(1) && decimals < 9 {
        unit /= 10;
        decimals += 1;
    }
    format!("{:.decimals$} s", t as f64 / 1e9)
}

/// The demangled name of a C++ symbol, or the name as it is.
pub fn demangle(name: &str) -> String {
    if name.starts_with("_Z") {
        if let Ok(sym) = cpp_demangle::Symbol::new(name) {
            if let Ok(s) = sym.demangle(&cpp_demangle::DemangleOptions::default()) {
                return s;
            }
        }
    }
    name.to_string()
}

/// A kernel name short enough for a label: demangled, without return type, template
/// arguments and parameters (`at::native::vectorized_elementwise_kernel`).
pub fn short_kernel(name: &str) -> String {
    let d = demangle(name);
    let mut out = String::new();
    let mut depth = 0i32;
    for c in d.chars() {
        match c {
            '<' => depth += 1,
            '>' => depth -= 1,
            '(' if depth == 0 => break,
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    let out = out.trim();
    let out = out.strip_prefix("void ").unwrap_or(out);
    if out.is_empty() {
        d
    } else {
        out.to_string()
    }
}

/// `s` cut to `width` characters, with `…` where cut.
pub fn fit(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        return s.to_string();
    }
    if width == 0 {
        return String::new();
    }
    let mut out: String = s.chars().take(width - 1).collect();
    out.push('…');
    out
}

/// A count with thousands separators.
pub fn count(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_names() {
        assert_eq!(dur(850), "850 ns");
        assert_eq!(dur(12_345), "12.3 µs");
        assert_eq!(dur(4_560_000), "4.56 ms");
        assert_eq!(dur(123_000_000_000), "123 s");
        assert_eq!(nice_step(13.0), 20);
        assert_eq!(nice_step(1_200.0), 2_000);
        assert_eq!(tick(12_500_000, 500_000), "12.5 ms");
        assert_eq!(count(1234567), "1,234,567");
        assert_eq!(at(14_595_020_000_000, 5_000_000), "14595.020 s");
        assert_eq!(
            short_kernel("_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEENS_6detail5ArrayIPcLi1EEEEEviT0_T1_"),
            "at::native::vectorized_elementwise_kernel"
        );
        assert_eq!(short_kernel("nvjet_tst_128x64"), "nvjet_tst_128x64");
        assert_eq!(fit("abcdef", 4), "abc…");
    }
}
