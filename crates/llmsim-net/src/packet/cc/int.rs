//! HPCC's in-band network telemetry: the 64-bit hop word a switch stamps on a data packet at
//! its dequeue (`IntHop` of the HPCC ns-3 code base) and its fields.

// INT hop word (`IntHop`): line-rate index 3 bits, time 24 bits (ns), bytes 20 bits (units of
// 128 * INT_MULTI), queue length 17 bits (units of 80 * INT_MULTI).
const TIME_BITS: u32 = 24;
const BYTES_BITS: u32 = 20;
const QLEN_BITS: u32 = 17;
const BYTE_UNIT: u64 = 128;
const QLEN_UNIT: u64 = 80;
/// ns-3's table (25/50/100/200/400G); llmsim adds 800G and 1.6T in the unused slots.
const LINE_RATES: [u64; 8] = [
    25_000_000_000,
    50_000_000_000,
    100_000_000_000,
    200_000_000_000,
    400_000_000_000,
    800_000_000_000,
    1_600_000_000_000,
    0,
];

#[inline]
pub(crate) fn mask(bits: u32) -> u64 {
    (1u64 << bits) - 1
}

/// An INT hop word with its time field moved `d_ns` later (modulo its 24 bits, as it wraps).
#[inline]
pub(crate) fn shift_int_time(word: u64, d_ns: u64) -> u64 {
    let m = mask(TIME_BITS) << 37;
    let t = (((word >> 37) & mask(TIME_BITS)) + d_ns) & mask(TIME_BITS);
    (word & !m) | t << 37
}

/// The index of line rate `rate` (bit/s) in the INT rate table; 0 (25G) for a rate not in it,
/// as ns-3's `IntHop::Set` leaves the field.
pub(crate) fn int_rate_index(rate: u64) -> u8 {
    LINE_RATES.iter().position(|&r| r == rate).unwrap_or(0) as u8
}

/// `IntHop::Set`, for a port whose rate has table index `rate_idx` (`int_rate_index`).
/// `INT_MULTI` 1 and 4 (the HPCC runs' value) pass `int_hop_any` a literal multiplier: inlined,
/// its divisors are constants, which the compiler turns into a shift and a multiply; the same
/// quotients as two 64-bit divisions.
#[inline]
pub(crate) fn int_hop(now_ns: u64, tx_bytes: u64, qlen: u64, rate_idx: u8, multi: u32) -> u64 {
    match multi {
        4 => int_hop_any(now_ns, tx_bytes, qlen, rate_idx, 4),
        0 | 1 => int_hop_any(now_ns, tx_bytes, qlen, rate_idx, 1),
        m => int_hop_any(now_ns, tx_bytes, qlen, rate_idx, u64::from(m)),
    }
}

#[inline(always)]
fn int_hop_any(now_ns: u64, tx_bytes: u64, qlen: u64, rate_idx: u8, m: u64) -> u64 {
    let idx = u64::from(rate_idx & 7);
    let time = now_ns & mask(TIME_BITS);
    let bytes = (tx_bytes / (BYTE_UNIT * m)) & mask(BYTES_BITS);
    let q = (qlen / (QLEN_UNIT * m)) & mask(QLEN_BITS);
    idx << 61 | time << 37 | bytes << 17 | q
}

#[inline]
pub(crate) fn hop_time(h: u64) -> u64 {
    (h >> 37) & mask(TIME_BITS)
}
#[inline]
pub(crate) fn hop_bytes(h: u64) -> u64 {
    (h >> 17) & mask(BYTES_BITS)
}
#[inline]
pub(crate) fn hop_qlen(h: u64, multi: u64) -> u64 {
    (h & mask(QLEN_BITS)) * QLEN_UNIT * multi
}
#[inline]
pub(crate) fn hop_rate(h: u64) -> u64 {
    LINE_RATES[(h >> 61) as usize]
}
#[inline]
pub(crate) fn time_delta(h: u64, last: u64) -> u64 {
    hop_time(h).wrapping_sub(hop_time(last)) & mask(TIME_BITS)
}
#[inline]
pub(crate) fn bytes_delta(h: u64, last: u64, multi: u64) -> u64 {
    let (b, l) = (hop_bytes(h), hop_bytes(last));
    let d = if b >= l { b - l } else { b + (1 << BYTES_BITS) - l };
    d * BYTE_UNIT * multi
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int_hop_round_trips_and_wraps() {
        let a = int_hop(1_000, 128 * 4 * 10, 80 * 4 * 3, int_rate_index(100_000_000_000), 4);
        let b = int_hop(1_000 + 500, 128 * 4 * 25, 80 * 4 * 7, int_rate_index(100_000_000_000), 4);
        assert_eq!(time_delta(b, a), 500);
        assert_eq!(bytes_delta(b, a, 4), 15 * 128 * 4);
        assert_eq!(hop_qlen(b, 4), 7 * 80 * 4);
        assert_eq!(hop_rate(b), 100_000_000_000);
        // 24-bit time wraps.
        let c = int_hop((1 << 24) + 10, 0, 0, int_rate_index(400_000_000_000), 1);
        let d = int_hop((1 << 24) - 10, 0, 0, int_rate_index(400_000_000_000), 1);
        assert_eq!(time_delta(c, d), 20);
    }

    proptest::proptest! {
        /// The copies of `int_hop` with constant divisors give the fields the plain divisions
        /// give, for every `INT_MULTI`.
        #[test]
        fn int_hop_fields_are_the_quotients(now in 0u64..1 << 40, tx in 0u64..1 << 44, qlen in 0u64..1 << 30, multi in 0u32..9) {
            let h = int_hop(now, tx, qlen, int_rate_index(100_000_000_000), multi);
            let m = u64::from(multi.max(1));
            proptest::prop_assert_eq!(hop_time(h), now & mask(TIME_BITS));
            proptest::prop_assert_eq!(hop_bytes(h), (tx / (128 * m)) & mask(BYTES_BITS));
            proptest::prop_assert_eq!(h & mask(QLEN_BITS), (qlen / (80 * m)) & mask(QLEN_BITS));
            proptest::prop_assert_eq!(hop_rate(h), 100_000_000_000);
        }
    }
}
