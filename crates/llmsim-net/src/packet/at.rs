//! [`Table`]: the packet engine's per-id tables (ports, ingress accounts, switch buffers, NICs,
//! flows, packets), indexed without a bounds check.
//!
//! The engine indexes these tables only with ids it made itself: links of its topology, nodes,
//! hosts, flows it added, packets of its slab. A table only grows, so an id that was in range
//! stays in range for the engine's life. No id from outside the crate reaches a table
//! unchecked: every public entry point that takes an id (`PacketEngine::flow_result`, `flow_done`,
//! `flow_bytes_acked`, `ns3_id`, `ns3_ifindex`, ...) checks it against the table's length first
//! and answers `None` (or an error) when it is out of range; a topology is checked when it is
//! built (every link's ends are nodes of it). `Table` is crate-private, so that invariant is the
//! crate's to keep, and this is the one module of the workspace allowed `unsafe` code. On the per-event paths the bounds checks, and the
//! reloads of each table's length they force after every store, cost ~10% of an event's
//! instructions and ~8% of its time (fat320 DCQCN, paired runs); so `table[id]` skips them in
//! release builds. Debug builds, the test suite's, still check every access.

use std::ops::{Deref, DerefMut, Index, IndexMut};

/// A growable table indexed by ids in range (see the module doc). Dereferences to a slice, so
/// it can be iterated and measured but never shrinks.
pub(crate) struct Table<T>(Vec<T>);

impl<T> Table<T> {
    /// A table of `v`'s elements. Every later `table[i]` in the crate must have
    /// `i < table.len()` (see the module doc): ids the engine made, or ids checked against the
    /// table's length at a public entry point.
    pub(crate) fn new(v: Vec<T>) -> Self {
        Table(v)
    }

    #[inline]
    pub(crate) fn push(&mut self, x: T) {
        self.0.push(x);
    }
}

impl<T> Deref for Table<T> {
    type Target = [T];
    #[inline(always)]
    fn deref(&self) -> &[T] {
        &self.0
    }
}

impl<T> DerefMut for Table<T> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.0
    }
}

impl<T> Index<usize> for Table<T> {
    type Output = T;
    #[inline(always)]
    fn index(&self, i: usize) -> &T {
        debug_assert!(i < self.0.len(), "id {i} out of a table of {}", self.0.len());
        // SAFETY: the crate invariant of the module doc: `i` is an id the engine made, or one a
        // public entry point checked, and tables never shrink, so `i < self.0.len()`.
        unsafe { self.0.get_unchecked(i) }
    }
}

impl<T> IndexMut<usize> for Table<T> {
    #[inline(always)]
    fn index_mut(&mut self, i: usize) -> &mut T {
        debug_assert!(i < self.0.len(), "id {i} out of a table of {}", self.0.len());
        // SAFETY: as in `index`: `i < self.0.len()` by the crate invariant of the module doc.
        unsafe { self.0.get_unchecked_mut(i) }
    }
}

/// Asks the CPU to start loading the cache line at `p` (x86_64 `prefetcht0`; nothing elsewhere).
/// A hint: it never faults, whatever `p` points at, and changes no result.
#[inline(always)]
pub(crate) fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `prefetcht0` never faults or writes memory, for any address; SSE is part of the
    // x86_64 baseline.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
