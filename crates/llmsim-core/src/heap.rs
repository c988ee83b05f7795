//! A 4-ary min-heap: the priority queue under [`crate::EventQueue`].
//!
//! It pops the smallest element first, as `BinaryHeap<Reverse<T>>` does. For a total order the
//! sequence of popped values does not depend on the heap's layout (a pop always returns the
//! minimum, and equal values are indistinguishable), so swapping one for the other changes no
//! result. Four children per node halve the depth of a binary heap: a pop compares more
//! siblings, which sit in one or two cache lines, but moves through half as many levels. On the
//! 16k-GPU Llama-3 flow run it made the engine's queue faster; under the flow backend's drain,
//! delivery and arrival heaps it gained nothing (bench/README.md, branch `flow29c`).

/// A min-heap with four children per node.
#[derive(Clone, Debug)]
pub struct MinHeap4<T> {
    data: Vec<T>,
}

impl<T> Default for MinHeap4<T> {
    fn default() -> Self {
        MinHeap4 { data: Vec::new() }
    }
}

const D: usize = 4;

impl<T: Ord> MinHeap4<T> {
    /// An empty heap.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty heap with room for `n` elements.
    pub fn with_capacity(n: usize) -> Self {
        MinHeap4 {
            data: Vec::with_capacity(n),
        }
    }

    /// Elements held.
    #[inline]
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// No elements held.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// Drops every element (the allocation is kept).
    pub fn clear(&mut self) {
        self.data.clear();
    }

    /// The smallest element.
    #[inline]
    pub fn peek(&self) -> Option<&T> {
        self.data.first()
    }

    /// Adds `x`.
    #[inline]
    pub fn push(&mut self, x: T) {
        self.data.push(x);
        self.sift_up(self.data.len() - 1);
    }

    /// Removes and returns the smallest element.
    #[inline]
    pub fn pop(&mut self) -> Option<T> {
        if self.data.is_empty() {
            return None;
        }
        let top = self.data.swap_remove(0);
        if self.data.len() > 1 {
            self.sift_down_to_bottom(0);
        }
        Some(top)
    }

    /// Keeps only the elements for which `keep` is true.
    pub fn retain(&mut self, keep: impl FnMut(&T) -> bool) {
        self.data.retain(keep);
        self.heapify();
    }

    /// Adds every element of `items`: one by one when they are few, else by rebuilding the
    /// heap (Floyd's bottom-up construction, linear in the total).
    pub fn extend(&mut self, items: impl IntoIterator<Item = T>) {
        let before = self.data.len();
        self.data.extend(items);
        let added = self.data.len() - before;
        if added > 16 && added * 4 > before {
            self.heapify();
        } else {
            for i in before..self.data.len() {
                self.sift_up(i);
            }
        }
    }

    fn heapify(&mut self) {
        let n = self.data.len();
        if n < 2 {
            return;
        }
        for i in (0..=(n - 2) / D).rev() {
            self.sift_down(i);
        }
    }

    #[inline]
    fn sift_up(&mut self, mut pos: usize) {
        while pos > 0 {
            let parent = (pos - 1) / D;
            if self.data[parent] <= self.data[pos] {
                break;
            }
            self.data.swap(parent, pos);
            pos = parent;
        }
    }

    /// Moves the element at `pos` down along the smallest children to a leaf, then up to its
    /// place (Floyd's variant: the element that replaces a popped root came from the bottom and
    /// most likely belongs near it, so comparing it at every level on the way down is wasted).
    #[inline]
    fn sift_down_to_bottom(&mut self, mut pos: usize) {
        let n = self.data.len();
        loop {
            let first = D * pos + 1;
            if first >= n {
                break;
            }
            let min = self.min_child(first, n);
            self.data.swap(min, pos);
            pos = min;
        }
        self.sift_up(pos);
    }

    /// The smallest of the up to `D` children starting at `first` (`first < n`).
    #[inline]
    fn min_child(&self, first: usize, n: usize) -> usize {
        let end = (first + D).min(n);
        let mut min = first;
        for c in first + 1..end {
            // Which sibling is smallest is a coin toss: a branch on it was mispredicted about
            // every other time, and the engine's queue pops were a quarter of the 16k-GPU GPT-3
            // flow run; a conditional move costs the same every time.
            min = std::hint::select_unpredictable(self.data[c] < self.data[min], c, min);
        }
        min
    }

    #[inline]
    fn sift_down(&mut self, mut pos: usize) {
        let n = self.data.len();
        loop {
            let first = D * pos + 1;
            if first >= n {
                break;
            }
            let min = self.min_child(first, n);
            if self.data[min] >= self.data[pos] {
                break;
            }
            self.data.swap(min, pos);
            pos = min;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    proptest::proptest! {
        /// Any interleaving of pushes, pops, batch extends and retains pops the same values in
        /// the same order as the standard library's binary heap (keys with many ties).
        #[test]
        fn pops_as_binary_heap(ops in proptest::collection::vec((0u8..8, 0u32..40, 0usize..40), 0..400)) {
            let mut a = MinHeap4::new();
            let mut b = BinaryHeap::new();
            for (op, k, n) in ops {
                match op {
                    0..=3 => {
                        a.push((k, n));
                        b.push(Reverse((k, n)));
                    }
                    4 | 5 => proptest::prop_assert_eq!(a.pop(), b.pop().map(|r| r.0)),
                    6 => {
                        let items: Vec<(u32, usize)> = (0..n).map(|i| (k.wrapping_mul(i as u32 + 7) % 50, i)).collect();
                        a.extend(items.iter().copied());
                        b.extend(items.into_iter().map(Reverse));
                    }
                    _ => {
                        a.retain(|x| x.0 % 3 != k % 3);
                        b.retain(|x| x.0.0 % 3 != k % 3);
                    }
                }
                proptest::prop_assert_eq!(a.len(), b.len());
                proptest::prop_assert_eq!(a.peek().copied(), b.peek().map(|r| r.0));
            }
            while let Some(x) = b.pop() {
                proptest::prop_assert_eq!(a.pop(), Some(x.0));
            }
            proptest::prop_assert!(a.is_empty());
        }
    }
}
