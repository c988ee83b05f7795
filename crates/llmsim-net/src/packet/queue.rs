//! The packet engine's event queue: a 4-ary min-heap of 24-byte entries keyed by
//! `(time, sequence)`, so events at one time run in the order they were scheduled, as in ns-3.
//! Events are plain `u64` words; nothing is allocated per event once the heap has grown.

#[derive(Clone, Copy)]
struct Entry {
    time: u64,
    seq: u64,
    ev: u64,
}

impl Entry {
    #[inline]
    fn before(&self, o: &Entry) -> bool {
        (self.time, self.seq) < (o.time, o.seq)
    }
}

#[derive(Default)]
pub(crate) struct EvQueue {
    heap: Vec<Entry>,
    seq: u64,
}

impl EvQueue {
    #[inline]
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    #[inline]
    pub fn push(&mut self, time: u64, ev: u64) {
        let e = Entry { time, seq: self.seq, ev };
        self.seq += 1;
        let mut i = self.heap.len();
        self.heap.push(e);
        while i > 0 {
            let p = (i - 1) / 4;
            if e.before(&self.heap[p]) {
                self.heap[i] = self.heap[p];
                i = p;
            } else {
                break;
            }
        }
        self.heap[i] = e;
    }

    #[inline]
    pub fn peek_time(&self) -> Option<u64> {
        self.heap.first().map(|e| e.time)
    }

    #[inline]
    pub fn pop(&mut self) -> Option<(u64, u64)> {
        let n = self.heap.len();
        if n == 0 {
            return None;
        }
        let top = self.heap[0];
        let last = self.heap[n - 1];
        self.heap.truncate(n - 1);
        let n = n - 1;
        if n > 0 {
            let mut i = 0;
            loop {
                let c0 = 4 * i + 1;
                if c0 >= n {
                    break;
                }
                let mut best = c0;
                let end = (c0 + 4).min(n);
                for c in c0 + 1..end {
                    if self.heap[c].before(&self.heap[best]) {
                        best = c;
                    }
                }
                if self.heap[best].before(&last) {
                    self.heap[i] = self.heap[best];
                    i = best;
                } else {
                    break;
                }
            }
            self.heap[i] = last;
        }
        Some((top.time, top.ev))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_in_time_then_insertion_order() {
        let mut q = EvQueue::default();
        let mut rng = llmsim_core::SimRng::seed(7);
        let mut want = Vec::new();
        for i in 0..2000u64 {
            let t = rng.below(50);
            q.push(t, i);
            want.push((t, i));
        }
        want.sort();
        let got: Vec<(u64, u64)> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(got, want);
    }
}
