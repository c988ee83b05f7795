//! Division by a divisor fixed when a topology is built, as one multiply: routing rules divide
//! node ids by sizes (hosts per router, servers per segment, routers per group) several times
//! per hop, and a hardware 32-bit division costs tens of cycles where a 64 x 64 -> 128-bit
//! multiply costs a few.
//!
//! Method (Lemire, Kaser and Kurz, "Faster remainder by direct computation", Software: Practice
//! and Experience 49(6), 2019, Theorem 1): with `M = ceil(2^64 / d)`, `floor(a / d) =
//! floor(a * M / 2^64)` for every 32-bit `a` and every `d` in `2..2^32` (the theorem's
//! condition `F >= N + log2(d)` holds with `F = 64`, `N = 32`). `d = 1` (where `M` would be
//! `2^64`) is kept apart.

/// A 32-bit divisor with its precomputed reciprocal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Divisor {
    d: u32,
    /// `ceil(2^64 / d)`; 0 for `d = 1`.
    m: u64,
}

impl Divisor {
    /// Prepares division by `d`; `d = 0` is treated as 1 (callers divide by sizes of at least 1).
    pub const fn new(d: u32) -> Self {
        let d = if d == 0 { 1 } else { d };
        let m = if d == 1 { 0 } else { u64::MAX / d as u64 + 1 };
        Divisor { d, m }
    }

    /// The divisor.
    #[inline]
    pub const fn get(self) -> u32 {
        self.d
    }

    /// `a / d`.
    #[inline]
    pub const fn div(self, a: u32) -> u32 {
        if self.m == 0 {
            a
        } else {
            ((self.m as u128 * a as u128) >> 64) as u32
        }
    }

    /// `(a / d, a % d)`.
    #[inline]
    pub const fn div_rem(self, a: u32) -> (u32, u32) {
        let q = self.div(a);
        (q, a - q * self.d)
    }

    /// `a % d`.
    #[inline]
    pub const fn rem(self, a: u32) -> u32 {
        self.div_rem(a).1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equals_hardware_division() {
        let mut divisors: Vec<u32> = (1..=300).collect();
        for s in 1..32 {
            divisors.extend([(1u32 << s) - 1, 1 << s, (1u32 << s).wrapping_add(1)]);
        }
        divisors.extend([u32::MAX, u32::MAX - 1, 65_536 * 3, 1_000_003]);
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut values: Vec<u32> = vec![0, 1, 2, u32::MAX, u32::MAX - 1, 1 << 31, (1 << 31) - 1];
        for _ in 0..2000 {
            x = llmsim_core::mix64(x);
            values.push(x as u32);
            values.push((x >> 40) as u32);
        }
        for &d in &divisors {
            if d == 0 {
                continue;
            }
            let v = Divisor::new(d);
            for &a in values
                .iter()
                .chain(&[d, d.wrapping_sub(1), d.wrapping_mul(7), d.wrapping_mul(7).wrapping_sub(1)])
            {
                assert_eq!(v.div_rem(a), (a / d, a % d), "{a} / {d}");
            }
        }
    }
}
