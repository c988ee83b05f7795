//! The event encoding of the packet engine: an event is one `u64`, the kind in the low 4 bits,
//! then two 30-bit operands (`a`, `b`). Events are plain words so the timing wheel of
//! `queue.rs` stores and orders them without allocation; their tie order at one instant is the
//! order they were scheduled in, never the word's value.

// Event kinds. The packet and timer kinds come first (below `EV_START`): Wormhole lets those of no
// frozen partition through without a look.
/// A packet reaches the end of link `a` (a host, or a switch for a PFC frame); `b`: the packet.
pub(crate) const EV_ARRIVE: u64 = 0;
/// A packet reaches a switch, which will send it on its egress link `a`; `b`: the packet (its
/// `in_link` holds the link it came in on). Carrying the egress link in the event, chosen when
/// the packet left the previous node, lets the main loop prefetch the port before the event
/// runs and spares the path lookup on the arrival's chain of loads.
pub(crate) const EV_HOP: u64 = 1;
pub(crate) const EV_TXDONE: u64 = 2;
pub(crate) const EV_WAKE: u64 = 3;
/// Congestion-control timer `slot` (0..CC_TIMERS) of flow `a` fires; `b`: the timer's
/// generation when it was set (`Flow::timer_gen`): a stale timer is dropped.
pub(crate) const EV_CC_TIMER: u64 = 4;
/// Timer slots per flow for its congestion control (`EV_CC_TIMER + slot`).
pub(crate) const CC_TIMERS: usize = 3;
/// The last congestion-control timer kind.
pub(crate) const EV_CC_TIMER_LAST: u64 = EV_CC_TIMER + CC_TIMERS as u64 - 1;
pub(crate) const EV_START: u64 = 7;
pub(crate) const EV_SAMPLE: u64 = 8;
pub(crate) const EV_RESUME: u64 = 9;
/// TCP retransmission timer of flow `a` (`transport::tcp`); `b`: its generation when set.
pub(crate) const EV_RTO: u64 = 10;
/// TCP delayed-ACK timer of flow `a`'s receiver; `b`: its generation when set.
pub(crate) const EV_DELACK: u64 = 11;
/// A link failure (`b` 0: link `a` of the engine's fault list fails) or the progress check of
/// a flow it touched (`b` 1: watch `a`), `engine::fault`.
pub(crate) const EV_FAULT: u64 = 12;
pub(crate) const MASK30: u64 = (1 << 30) - 1;

#[inline]
pub(crate) fn ev(kind: u64, a: u32, b: u32) -> u64 {
    kind | (u64::from(a) << 4) | ((u64::from(b) & MASK30) << 34)
}

/// The kind of event `e`.
#[inline]
pub(crate) fn kind(e: u64) -> u64 {
    e & 0xF
}

/// Operand `a` of event `e`.
#[inline]
pub(crate) fn op_a(e: u64) -> u32 {
    ((e >> 4) & MASK30) as u32
}

/// Operand `b` of event `e`.
#[inline]
pub(crate) fn op_b(e: u64) -> u32 {
    ((e >> 34) & MASK30) as u32
}
