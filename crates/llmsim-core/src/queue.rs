//! A deterministic event queue: earliest time first, ties in insertion order.

use std::cmp::Ordering;

use crate::SimTime;
use crate::heap::MinHeap4;

struct Entry<E> {
    time: SimTime,
    seq: u64,
    event: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, o: &Self) -> bool {
        self.time == o.time && self.seq == o.seq
    }
}
impl<E> Eq for Entry<E> {}
impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl<E> Ord for Entry<E> {
    fn cmp(&self, o: &Self) -> Ordering {
        (self.time, self.seq).cmp(&(o.time, o.seq))
    }
}

/// Min-heap of `(time, event)`. Two events at the same time pop in the order they were pushed,
/// so a run is reproducible whatever the heap's internal layout.
pub struct EventQueue<E> {
    heap: MinHeap4<Entry<E>>,
    seq: u64,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E> EventQueue<E> {
    /// An empty queue.
    pub fn new() -> Self {
        EventQueue {
            heap: MinHeap4::new(),
            seq: 0,
        }
    }
    /// An empty queue with room for `n` events.
    pub fn with_capacity(n: usize) -> Self {
        EventQueue {
            heap: MinHeap4::with_capacity(n),
            seq: 0,
        }
    }
    /// Schedules `event` at `time`; events at equal times pop in push order.
    #[inline]
    pub fn push(&mut self, time: SimTime, event: E) {
        self.heap.push(Entry {
            time,
            seq: self.seq,
            event,
        });
        self.seq += 1;
    }
    /// The time of the earliest event.
    #[inline]
    pub fn peek_time(&self) -> Option<SimTime> {
        self.heap.peek().map(|e| e.time)
    }
    /// Removes and returns the earliest event.
    #[inline]
    pub fn pop(&mut self) -> Option<(SimTime, E)> {
        self.heap.pop().map(|e| (e.time, e.event))
    }
    /// Pops the earliest event if it is at or before `t`.
    #[inline]
    pub fn pop_until(&mut self, t: SimTime) -> Option<(SimTime, E)> {
        if self.peek_time()? <= t { self.pop() } else { None }
    }
    /// Events queued.
    pub fn len(&self) -> usize {
        self.heap.len()
    }
    /// No events queued.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
    /// Drops every event (the push-order counter keeps counting).
    pub fn clear(&mut self) {
        self.heap.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_in_time_then_insertion_order() {
        let mut q = EventQueue::new();
        q.push(SimTime(5), 'a');
        q.push(SimTime(1), 'b');
        q.push(SimTime(5), 'c');
        q.push(SimTime(3), 'd');
        let order: Vec<char> = std::iter::from_fn(|| q.pop().map(|x| x.1)).collect();
        assert_eq!(order, vec!['b', 'd', 'a', 'c']);
    }

    proptest::proptest! {
        #[test]
        fn output_is_sorted_and_complete(ts in proptest::collection::vec(0u64..100, 0..200)) {
            let mut q = EventQueue::new();
            for (i, t) in ts.iter().enumerate() {
                q.push(SimTime(*t), i);
            }
            let mut out = Vec::new();
            while let Some(x) = q.pop() {
                out.push(x);
            }
            proptest::prop_assert_eq!(out.len(), ts.len());
            for w in out.windows(2) {
                proptest::prop_assert!((w[0].0, w[0].1) < (w[1].0, w[1].1));
            }
        }
    }
}
