//! Element types the kernels take, and host-side conversions used by references and tests.

use crate::error::{invalid, Result};

/// A 16-bit floating-point element type. Every kernel comes in both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    F16,
    BF16,
}

impl DType {
    /// The code the C ABI and the Python module use: 0 = fp16, 1 = bf16.
    pub fn from_code(code: i32) -> Result<Self> {
        match code {
            0 => Ok(Self::F16),
            1 => Ok(Self::BF16),
            other => Err(invalid(format!(
                "dtype code {other} is not 0 (fp16) or 1 (bf16)"
            ))),
        }
    }

    pub fn code(self) -> i32 {
        match self {
            Self::F16 => 0,
            Self::BF16 => 1,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::F16 => "f16",
            Self::BF16 => "bf16",
        }
    }

    /// Bytes per element (both are 2).
    pub fn size_bytes(self) -> usize {
        2
    }

    /// Round an f32 to this type and back, as a kernel storing the value would.
    pub fn round(self, x: f32) -> f32 {
        match self {
            Self::F16 => f16_bits_to_f32(f32_to_f16_bits(x)),
            Self::BF16 => bf16_bits_to_f32(f32_to_bf16_bits(x)),
        }
    }
}

/// f32 -> bf16 bits, round to nearest even (NaN stays NaN).
pub fn f32_to_bf16_bits(x: f32) -> u16 {
    let b = x.to_bits();
    if x.is_nan() {
        return ((b >> 16) | 0x40) as u16;
    }
    let rounding = 0x7fff + ((b >> 16) & 1);
    ((b.wrapping_add(rounding)) >> 16) as u16
}

pub fn bf16_bits_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// f32 -> IEEE binary16 bits, round to nearest even, with subnormals and overflow to infinity.
pub fn f32_to_f16_bits(x: f32) -> u16 {
    let b = x.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let exp = ((b >> 23) & 0xff) as i32;
    let man = b & 0x7f_ffff;
    if exp == 0xff {
        return sign | 0x7c00 | if man != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    if e <= 0 {
        if e < -10 {
            return sign;
        }
        // Subnormal: shift the full mantissa (with its hidden bit) into place, round to even.
        let m = man | 0x80_0000;
        let shift = (14 - e) as u32;
        let half = 1u32 << (shift - 1);
        let rest = m & ((1u32 << shift) - 1);
        let mut r = m >> shift;
        if rest > half || (rest == half && (r & 1) == 1) {
            r += 1;
        }
        return sign | r as u16;
    }
    let mut r = ((e as u32) << 10) | (man >> 13);
    let rest = man & 0x1fff;
    if rest > 0x1000 || (rest == 0x1000 && (r & 1) == 1) {
        r += 1; // may carry into the exponent, which is the right rounding (up to infinity)
    }
    sign | r as u16
}

pub fn f16_bits_to_f32(h: u16) -> f32 {
    let sign = ((h as u32) & 0x8000) << 16;
    let exp = ((h >> 10) & 0x1f) as u32;
    let man = (h & 0x3ff) as u32;
    let bits = if exp == 0 {
        if man == 0 {
            sign
        } else {
            // Subnormal: value = man * 2^-24.
            let v = man as f32 * 2f32.powi(-24);
            return if sign != 0 { -v } else { v };
        }
    } else if exp == 0x1f {
        sign | 0x7f80_0000 | (man << 13)
    } else {
        sign | ((exp + 127 - 15) << 23) | (man << 13)
    };
    f32::from_bits(bits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_round_trips_known_values() {
        for (x, bits) in [
            (1.0f32, 0x3c00u16),
            (-2.0, 0xc000),
            (65504.0, 0x7bff),
            (0.000_060_975_55, 0x03ff), // largest subnormal
            (5.960_464_5e-8, 0x0001),   // smallest subnormal
            (0.0, 0x0000),
        ] {
            assert_eq!(f32_to_f16_bits(x), bits, "{x}");
            assert_eq!(f16_bits_to_f32(bits), x, "{bits:#x}");
        }
        assert_eq!(f32_to_f16_bits(1e6), 0x7c00);
        assert!(f16_bits_to_f32(f32_to_f16_bits(f32::NAN)).is_nan());
    }

    #[test]
    fn f16_rounds_to_nearest_even() {
        // 1 + 2^-11 lies halfway between 1 and 1 + 2^-10: ties go to the even mantissa (1.0).
        assert_eq!(f32_to_f16_bits(1.0 + 2f32.powi(-11)), 0x3c00);
        // 1 + 3 * 2^-11 is halfway between 1 + 2^-10 (odd) and 1 + 2^-9 (even).
        assert_eq!(f32_to_f16_bits(1.0 + 3.0 * 2f32.powi(-11)), 0x3c02);
    }

    #[test]
    fn bf16_round_trips_and_rounds() {
        assert_eq!(f32_to_bf16_bits(1.0), 0x3f80);
        assert_eq!(bf16_bits_to_f32(0x3f80), 1.0);
        // 1 + 2^-8 is a tie between 1.0 and 1 + 2^-7: goes to even (1.0).
        assert_eq!(f32_to_bf16_bits(1.0 + 2f32.powi(-8)), 0x3f80);
        assert_eq!(DType::BF16.round(3.0), 3.0);
        assert!((DType::F16.round(0.1) - 0.1).abs() < 1e-4);
    }

    #[test]
    fn dtype_codes_round_trip_and_reject_unknown() {
        for d in [DType::F16, DType::BF16] {
            assert_eq!(DType::from_code(d.code()).unwrap(), d);
        }
        assert!(DType::from_code(7).is_err());
    }
}
