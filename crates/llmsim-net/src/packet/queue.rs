//! The packet engine's event queue, keyed by `(time, sequence)` so events at one time run in the
//! order they were scheduled, as in ns-3: a timing wheel of 1.024 ns buckets for the near future
//! (where almost every packet event lands) over a 4-ary heap for the rest. Events are plain
//! `u64` words; nothing is allocated per event once the buckets have grown.

use super::at::{Table, prefetch};

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

/// Min-heap of entries (the far-future part of [`EvQueue`]).
#[derive(Default)]
struct Heap {
    heap: Vec<Entry>,
}

impl Heap {
    #[inline]
    fn push(&mut self, e: Entry) {
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
    fn peek(&self) -> Option<&Entry> {
        self.heap.first()
    }

    fn pop(&mut self) -> Option<Entry> {
        let n = self.heap.len();
        if n == 0 {
            return None;
        }
        let top = self.heap[0];
        let last = self.heap[n - 1];
        self.heap.truncate(n - 1);
        if n > 1 {
            self.sift_down(0, last);
        }
        Some(top)
    }

    /// Puts `e` at position `i` (a hole), moving it down below any smaller child.
    #[inline]
    fn sift_down(&mut self, mut i: usize, e: Entry) {
        let n = self.heap.len();
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
            if self.heap[best].before(&e) {
                self.heap[i] = self.heap[best];
                i = best;
            } else {
                break;
            }
        }
        self.heap[i] = e;
    }

    /// Restores the heap order of arbitrary contents, bottom-up (O(n)).
    fn heapify(&mut self) {
        let n = self.heap.len();
        if n < 2 {
            return;
        }
        for i in (0..=(n - 2) / 4).rev() {
            let e = self.heap[i];
            self.sift_down(i, e);
        }
    }
}

/// Slot width of the timing wheel (ps) and number of slots: events within `SLOTS` slots (4.2 us)
/// of the current slot live in 1.024 ns buckets (O(1) push and pop), later ones in a heap that
/// feeds the wheel as time advances. Order is exactly `(time, sequence)`, whatever the width; a
/// power of two makes a time's slot a shift and its offset a mask.
const SLOT_PS: u64 = 1024;
const SLOTS: usize = 4096;
const WORDS: usize = SLOTS / 64;
/// A wheel entry keeps its time's offset within the slot (below `SLOT_PS`, 10 bits) above a
/// 54-bit sequence number in one key, whose order is the `(time, seq)` order: 16 bytes an entry
/// instead of 24, so more of the wheel's working set stays in cache.
const SEQ_BITS: u32 = 54;
const SEQ_MASK: u64 = (1 << SEQ_BITS) - 1;
const _: () = assert!(SLOT_PS <= 1 << (64 - SEQ_BITS));

#[derive(Clone, Copy)]
struct Slotted {
    key: u64,
    ev: u64,
}

impl Slotted {
    #[inline]
    fn pack(e: &Entry, abs: u64) -> Slotted {
        debug_assert!(e.seq <= SEQ_MASK && e.time / SLOT_PS == abs);
        Slotted {
            key: ((e.time - abs * SLOT_PS) << SEQ_BITS) | e.seq,
            ev: e.ev,
        }
    }

    #[inline]
    fn time(&self, abs: u64) -> u64 {
        abs * SLOT_PS + (self.key >> SEQ_BITS)
    }

    #[inline]
    fn unpack(&self, abs: u64) -> Entry {
        Entry {
            time: self.time(abs),
            seq: self.key & SEQ_MASK,
            ev: self.ev,
        }
    }
}

/// A slot's entries up to this many are put in order at its first pop by insertion instead of
/// `sort_unstable` (whose calls on a few entries took 17-19% of a 1,024-GPU packet run). A push
/// out of order into the sorted current slot is always inserted in place (`place`).
const INSERT_MAX: usize = 32;

/// Sorts a few entries by key (unique keys: the same order as any sort).
#[inline]
fn insertion_sort(v: &mut [Slotted]) {
    for i in 1..v.len() {
        let x = v[i];
        let mut j = i;
        while j > 0 && v[j - 1].key > x.key {
            v[j] = v[j - 1];
            j -= 1;
        }
        v[j] = x;
    }
}

/// Entries in one chunk of slot storage: 4 of 16 bytes, one cache line.
const K: usize = 4;
/// `EvQueue::tail` of a slot with no chunk; the end of the free list.
const EMPTY: u32 = u32::MAX;

/// A chunk of a slot's entries: one cache line.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Chunk([Slotted; K]);
const _: () = assert!(K < 8 && std::mem::size_of::<Chunk>() == 64);

/// `repr(C)` keeps `len` and `seq` apart: adjacent, the compiler fused the two increments of a
/// push into one 16-byte load and store, and that load, after a pop's 8-byte store to `len`,
/// cannot be forwarded from the store buffer (a stall of every push on x86).
///
/// Storage: a slot's entries are a list of chunks (`head[i]`, then `next[c]` of each chunk),
/// filled in push order; `tail[i]` is the last chunk's number times 8 plus its fill (1..=K),
/// or `EMPTY`. Chunks come from a free list, to whose front the wheel returns a slot's chunks
/// as it reaches the slot, so a push writes to a line the wheel read moments before. A fixed
/// place per slot (the arena of `0de13ba`, 2 MB for 4,096 slots) was a line last touched one
/// turn of the wheel (4 us) ago: a write miss on most pushes. The current slot's entries are
/// moved to `cur` when the wheel reaches it.
#[repr(C)]
pub(crate) struct EvQueue {
    len: usize,
    /// Indexed by chunk numbers from `grow` only (unchecked in release builds: a push's bounds
    /// checks were ~7 instructions).
    chunks: Table<Chunk>,
    /// The next chunk of a slot's list, or of the free list.
    next: Table<u32>,
    /// The first free chunk (`EMPTY`: none).
    free: u32,
    head: Box<[u32; SLOTS]>,
    tail: Box<[u32; SLOTS]>,
    /// The current slot's entries (those pushed for the current slot go here too).
    cur: Vec<Slotted>,
    bits: Box<[u64; WORDS]>,
    /// Absolute slot number (`time / SLOT_PS`) of the current slot.
    base: u64,
    /// Entries of `cur` before this index have been popped.
    pos: usize,
    far: Heap,
    seq: u64,
    /// Sequence number of the event popped last.
    cur_seq: u64,
    /// The current slot's remaining entries are in order.
    sorted: bool,
}

impl Default for EvQueue {
    fn default() -> Self {
        EvQueue {
            // Unchecked tables (`at.rs`): both are indexed only with chunk numbers `grow`
            // returned (it pushes to both), kept in `head`, `tail`, `next` and `free`; neither
            // table shrinks.
            chunks: Table::new(Vec::new()),
            next: Table::new(Vec::new()),
            free: EMPTY,
            head: Box::new([0; SLOTS]),
            tail: Box::new([EMPTY; SLOTS]),
            cur: Vec::new(),
            bits: Box::new([0; WORDS]),
            base: 0,
            pos: 0,
            sorted: true,
            far: Heap::default(),
            len: 0,
            seq: 0,
            cur_seq: 0,
        }
    }
}

impl EvQueue {
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Takes the next sequence number for an event that may be pushed later with
    /// [`EvQueue::push_seq`]: it then runs exactly where it would have, had it been pushed now.
    #[inline]
    pub fn reserve_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq - 1
    }

    #[inline]
    pub fn push_seq(&mut self, time: u64, seq: u64, ev: u64) {
        self.len += 1;
        self.place(Entry { time, seq, ev });
    }

    /// Sequence number of the event popped last.
    #[inline]
    pub fn cur_seq(&self) -> u64 {
        self.cur_seq
    }

    #[inline]
    pub fn push(&mut self, time: u64, ev: u64) {
        let e = Entry { time, seq: self.seq, ev };
        self.seq += 1;
        self.len += 1;
        self.place(e);
    }

    #[inline(always)]
    fn place(&mut self, e: Entry) {
        let mut abs = e.time / SLOT_PS;
        if abs < self.base {
            self.rebase(abs);
        }
        abs = abs.max(self.base);
        if abs >= self.base + SLOTS as u64 {
            self.far.push(e);
            return;
        }
        let w = Slotted::pack(&e, abs);
        if abs == self.base {
            if self.sorted && self.cur.len() > self.pos && w.key < self.cur[self.cur.len() - 1].key {
                // Keys are unique (they hold the sequence number), so inserting in place gives
                // the order a sort would. Always in place, whatever the remainder's length: a
                // binary search and one shift of 16-byte entries, where marking the slot
                // unsorted made the next pop sort the whole remainder again, once per such
                // push (quadratic in a dense slot: issue 29's 4,096-GPU run spent 57% of its
                // time in that sort, measured in bench/README.md).
                let at = self.pos + self.cur[self.pos..].partition_point(|x| x.key < w.key);
                self.cur.insert(at, w);
                return;
            }
            self.cur.push(w);
            return;
        }
        let i = (abs % SLOTS as u64) as usize;
        self.slot_push(i, w);
    }

    /// A free chunk (the one freed last: its line was read moments ago).
    #[inline(always)]
    fn chunk(&mut self) -> u32 {
        let c = self.free;
        if c == EMPTY {
            return self.grow();
        }
        self.free = self.next[c as usize];
        c
    }

    #[cold]
    fn grow(&mut self) -> u32 {
        let c = self.chunks.len();
        assert!(c < (EMPTY >> 3) as usize, "event queue: {c} chunks");
        self.chunks.push(Chunk([Slotted { key: 0, ev: 0 }; K]));
        self.next.push(EMPTY);
        c as u32
    }

    /// Appends `w` to (non-current) slot `i`.
    #[inline(always)]
    fn slot_push(&mut self, i: usize, w: Slotted) {
        let t = self.tail[i];
        let (c, n) = if t == EMPTY {
            let c = self.chunk();
            self.head[i] = c;
            self.bits[i / 64] |= 1 << (i % 64);
            (c, 0)
        } else if (t & 7) as usize == K {
            let c = self.chunk();
            self.next[(t >> 3) as usize] = c;
            (c, 0)
        } else {
            (t >> 3, (t & 7) as usize)
        };
        self.chunks[c as usize].0[n] = w;
        self.tail[i] = (c << 3) | (n as u32 + 1);
    }

    /// The chunks of (non-current) slot `i`, each as the slice of its entries, in push order.
    fn slot_chunks(&self, i: usize) -> impl Iterator<Item = &[Slotted]> + '_ {
        let t = self.tail[i];
        let mut c = (t != EMPTY).then(|| self.head[i]);
        std::iter::from_fn(move || {
            let cc = c?;
            let last = cc == t >> 3;
            let n = if last { (t & 7) as usize } else { K };
            c = (!last).then(|| self.next[cc as usize]);
            Some(&self.chunks[cc as usize].0[..n])
        })
    }

    /// The entries of (non-current) slot `i`, in the order they were pushed.
    fn slot_iter(&self, i: usize) -> impl Iterator<Item = &Slotted> + '_ {
        self.slot_chunks(i).flatten()
    }

    /// Empties slot `i` into `out` (in push order), frees its chunks and clears its bit.
    fn slot_take(&mut self, i: usize, out: &mut Vec<Slotted>) {
        let t = self.tail[i];
        if t == EMPTY {
            return;
        }
        let first = self.head[i];
        let mut c = first;
        // Whole chunks (a fixed-size copy), then the last one's unfilled entries cut off.
        while c != t >> 3 {
            out.extend_from_slice(&self.chunks[c as usize].0);
            c = self.next[c as usize];
        }
        out.extend_from_slice(&self.chunks[c as usize].0);
        out.truncate(out.len() - (K - (t & 7) as usize));
        // The slot's chunks go to the front of the free list, its first chunk first.
        self.next[c as usize] = self.free;
        self.free = first;
        self.tail[i] = EMPTY;
        self.bits[i / 64] &= !(1 << (i % 64));
    }

    /// Refills empty slot `i` with `entries` (in order), setting its bit if any.
    fn slot_put(&mut self, i: usize, entries: &[Slotted]) {
        debug_assert!(self.tail[i] == EMPTY);
        for &w in entries {
            self.slot_push(i, w);
        }
    }

    /// Moves the wheel's window back to start at slot `abs` (an event before the current slot:
    /// the wheel had run ahead to the next pending event, and an event is now pushed before it).
    /// Entries beyond the new window go to the heap; the order of events is unchanged.
    #[cold]
    fn rebase(&mut self, abs: u64) {
        let cur = (self.base % SLOTS as u64) as usize;
        // The current slot's remaining entries go back to its slot (empty while it is current).
        let mut rest = std::mem::take(&mut self.cur);
        rest.drain(..self.pos);
        self.slot_put(cur, &rest);
        rest.clear();
        self.cur = rest;
        self.pos = 0;
        let mut tmp = Vec::new();
        let limit = abs + SLOTS as u64;
        for i in 0..SLOTS {
            if self.bits[i / 64] & (1 << (i % 64)) == 0 {
                continue;
            }
            let slot_abs = self.base + ((i + SLOTS - cur) % SLOTS) as u64;
            if slot_abs < limit {
                continue;
            }
            tmp.clear();
            self.slot_take(i, &mut tmp);
            for e in &tmp {
                self.far.push(e.unpack(slot_abs));
            }
        }
        self.base = abs;
        // The new current slot: its index held only entries past the new window (now in the
        // heap), so it starts empty.
        let new = (abs % SLOTS as u64) as usize;
        debug_assert!(self.tail[new] == EMPTY);
        self.bits[new / 64] &= !(1 << (new % 64));
        self.sorted = false;
    }

    /// Absolute number of the first non-empty wheel slot after the current one (`cur` is its index).
    fn next_slot(&self, cur: usize) -> Option<u64> {
        for k in 1..=WORDS + 1 {
            let w = (cur / 64 + k - 1) % WORDS;
            let mut word = self.bits[w];
            if k == 1 {
                word &= if cur % 64 == 63 { 0 } else { !0u64 << (cur % 64 + 1) };
            }
            if k == WORDS + 1 {
                word &= if cur.is_multiple_of(64) { 0 } else { (1u64 << (cur % 64)) - 1 };
            }
            if word != 0 {
                let i = w * 64 + word.trailing_zeros() as usize;
                let d = (i + SLOTS - cur) % SLOTS;
                return Some(self.base + d as u64);
            }
        }
        None
    }

    /// Moves to the next non-empty slot; false when nothing is left.
    fn advance(&mut self) -> bool {
        let cur = (self.base % SLOTS as u64) as usize;
        self.cur.clear();
        self.pos = 0;
        self.sorted = false;
        let next = self.next_slot(cur);
        let target = match (next, self.far.peek()) {
            (Some(n), Some(f)) => n.min(f.time / SLOT_PS),
            (Some(n), None) => n,
            (None, Some(f)) => f.time / SLOT_PS,
            (None, None) => return false,
        };
        self.base = target;
        let i = (target % SLOTS as u64) as usize;
        let mut cur_buf = std::mem::take(&mut self.cur);
        self.slot_take(i, &mut cur_buf);
        self.cur = cur_buf;
        // The slots run in order and each was last written ~1 us of simulated time ago (long
        // out of cache): start loading the next slot's entries, so they are not a miss when the
        // wheel gets there. A hint only.
        let n = ((target + 1) % SLOTS as u64) as usize;
        let t = self.tail[n];
        if t != EMPTY {
            // Its first, second and last chunks (one list step; most slots have three or fewer).
            let h = self.head[n];
            prefetch(self.chunks.as_ptr().wrapping_add(h as usize));
            prefetch(self.chunks.as_ptr().wrapping_add((t >> 3) as usize));
            if h != t >> 3 {
                prefetch(self.chunks.as_ptr().wrapping_add(self.next[h as usize] as usize));
            }
        }
        while let Some(f) = self.far.peek() {
            if f.time / SLOT_PS >= self.base + SLOTS as u64 {
                break;
            }
            let e = self.far.pop().expect("peeked");
            self.place(e);
        }
        true
    }

    #[inline]
    fn ready(&mut self) -> bool {
        loop {
            if self.pos < self.cur.len() {
                if !self.sorted {
                    let rest = &mut self.cur[self.pos..];
                    if rest.len() <= INSERT_MAX {
                        insertion_sort(rest);
                    } else if !rest.is_sorted_by_key(|e| e.key) {
                        rest.sort_unstable_by_key(|e| e.key);
                    }
                    self.sorted = true;
                }
                return true;
            }
            if self.len == 0 || !self.advance() {
                return false;
            }
        }
    }

    /// Time of the earliest event, without reordering anything.
    pub fn peek_time(&self) -> Option<u64> {
        let cur = (self.base % SLOTS as u64) as usize;
        if self.pos < self.cur.len() {
            let base = self.base;
            return if self.sorted {
                Some(self.cur[self.pos].time(base))
            } else {
                self.cur[self.pos..].iter().map(|e| e.time(base)).min()
            };
        }
        let wheel = self
            .next_slot(cur)
            .and_then(|abs| self.slot_iter((abs % SLOTS as u64) as usize).map(|e| e.time(abs)).min());
        match (wheel, self.far.peek().map(|e| e.time)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Removes every pending event for which `take(ev)` holds and appends it to `out` as
    /// `(time, seq, ev)`; the others keep their order. O(pending events, plus the wheel's
    /// occupancy bitmap): for rare operations (Wormhole's freeze of a partition).
    pub fn extract(&mut self, mut take: impl FnMut(u64) -> bool, out: &mut Vec<(u64, u64, u64)>) {
        let cur = (self.base % SLOTS as u64) as usize;
        let before = out.len();
        let mut tmp = Vec::new();
        // Only the current slot and the non-empty ones (their bits are set), in slot order.
        for wi in 0..WORDS {
            let mut word = self.bits[wi];
            if wi == cur / 64 {
                word |= 1 << (cur % 64);
            }
            while word != 0 {
                let i = wi * 64 + word.trailing_zeros() as usize;
                word &= word - 1;
                let slot_abs = self.base + ((i + SLOTS - cur) % SLOTS) as u64;
                if i == cur {
                    Self::extract_from(&mut self.cur, self.pos, slot_abs, &mut take, out);
                    continue;
                }
                tmp.clear();
                self.slot_take(i, &mut tmp);
                Self::extract_from(&mut tmp, 0, slot_abs, &mut take, out);
                self.slot_put(i, &tmp);
            }
        }
        let in_wheel = out.len();
        let far = &mut self.far.heap;
        let mut w = 0;
        for r in 0..far.len() {
            let e = far[r];
            if take(e.ev) {
                out.push((e.time, e.seq, e.ev));
            } else {
                far[w] = e;
                w += 1;
            }
        }
        far.truncate(w);
        if out.len() > in_wheel {
            self.far.heapify();
        }
        self.len -= out.len() - before;
    }

    /// Moves the entries of `slot` (absolute slot `slot_abs`) from index `start` on for which
    /// `take(ev)` holds to `out`; the others keep their order.
    fn extract_from(
        slot: &mut Vec<Slotted>,
        start: usize,
        slot_abs: u64,
        take: &mut impl FnMut(u64) -> bool,
        out: &mut Vec<(u64, u64, u64)>,
    ) {
        let mut w = start;
        for r in start..slot.len() {
            let e = slot[r];
            if take(e.ev) {
                let e = e.unpack(slot_abs);
                out.push((e.time, e.seq, e.ev));
            } else {
                slot[w] = e;
                w += 1;
            }
        }
        slot.truncate(w);
    }

    /// The event that will pop next, when it is already known without reordering (it is in the
    /// current slot, in order): a hint for prefetching its data, nothing more.
    #[inline]
    pub fn peek_next_ev(&self) -> Option<u64> {
        (self.sorted && self.pos < self.cur.len()).then(|| self.cur[self.pos].ev)
    }

    /// Pops the earliest event if it is at or before `t`.
    #[inline]
    pub fn pop_until(&mut self, t: u64) -> Option<(u64, u64)> {
        if !self.ready() {
            return None;
        }
        let e = self.cur[self.pos].unpack(self.base);
        if e.time > t {
            return None;
        }
        self.pos += 1;
        self.len -= 1;
        self.cur_seq = e.seq;
        Some((e.time, e.ev))
    }

    #[inline]
    #[cfg(test)]
    pub fn pop(&mut self) -> Option<(u64, u64)> {
        if !self.ready() {
            return None;
        }
        let e = self.cur[self.pos].unpack(self.base);
        self.pos += 1;
        self.len -= 1;
        Some((e.time, e.ev))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extract_removes_only_matching_events_and_keeps_order() {
        let mut q = EvQueue::default();
        let mut rng = llmsim_core::SimRng::seed(3);
        let mut all = Vec::new();
        for i in 0..2000u64 {
            let t = rng.below(20_000_000);
            q.push(t, i);
            all.push((t, i));
        }
        // Pop a few so the current slot is part-consumed.
        all.sort();
        for &x in &all[..100] {
            assert_eq!(q.pop(), Some(x));
        }
        let mut out = Vec::new();
        q.extract(|e| e % 3 == 0, &mut out);
        let rest: Vec<_> = all[100..].iter().copied().filter(|&(_, e)| e % 3 != 0).collect();
        assert_eq!(out.len(), all[100..].len() - rest.len());
        assert!(out.iter().all(|&(_, _, e)| e % 3 == 0));
        let mut got = Vec::new();
        while let Some(x) = q.pop() {
            got.push(x);
        }
        assert_eq!(got, rest);
    }

    #[test]
    fn pushes_into_the_current_slot_between_pops_keep_the_order() {
        // Pushes into the slot being popped, out of order, with remainders below and above
        // INSERT_MAX (all inserted in place; the first pop of a slot sorts it by insertion or
        // by `sort_unstable`): popped as a (time, seq) order gives them.
        let mut rng = llmsim_core::SimRng::seed(29);
        for burst in [3u64, 20, 31, 32, 33, 200] {
            let mut q = EvQueue::default();
            let mut reference: std::collections::BTreeSet<(u64, u64, u64)> = Default::default();
            let mut seq = 0u64;
            let mut now = 0u64;
            let mut push = |q: &mut EvQueue, t: u64, reference: &mut std::collections::BTreeSet<_>| {
                q.push(t, seq);
                reference.insert((t, seq, seq));
                seq += 1;
            };
            for _ in 0..burst {
                push(&mut q, rng.below(SLOT_PS), &mut reference);
            }
            let mut got = Vec::new();
            for step in 0..5_000u64 {
                if step % 3 != 2
                    && let Some((t, e)) = q.pop()
                {
                    now = t;
                    got.push((t, e));
                }
                // Mostly within the current slot, at or after `now`, often before its last entry.
                let slot_end = (now / SLOT_PS + 1) * SLOT_PS;
                let t = if rng.below(4) == 0 {
                    now + rng.below(4 * SLOT_PS)
                } else {
                    now + rng.below(slot_end - now)
                };
                push(&mut q, t, &mut reference);
            }
            while let Some(x) = q.pop() {
                got.push(x);
            }
            let want: Vec<(u64, u64)> = reference.into_iter().map(|(t, _, e)| (t, e)).collect();
            assert_eq!(got, want, "burst {burst}");
        }
    }

    #[test]
    fn events_pushed_before_a_wheel_that_ran_ahead_keep_their_order() {
        // pop_until stops at `t` but leaves the wheel on the next pending event's slot; pushes
        // between `t` and that slot (and beyond the window) must still come out in order.
        let mut rng = llmsim_core::SimRng::seed(5);
        for round in 0..20 {
            let mut q = EvQueue::default();
            let mut reference: std::collections::BTreeSet<(u64, u64)> = Default::default();
            let mut seq = 0u64;
            let far = 1_000_000 + rng.below(10_000_000);
            q.push(far, seq);
            reference.insert((far, seq));
            seq += 1;
            assert_eq!(q.pop_until(500_000), None);
            for _ in 0..500 {
                let t = 500_000 + rng.below(if round % 2 == 0 { 20_000_000 } else { far - 500_000 });
                q.push(t, seq);
                reference.insert((t, seq));
                seq += 1;
            }
            let mut got = Vec::new();
            while let Some(x) = q.pop() {
                got.push(x);
            }
            let want: Vec<(u64, u64)> = reference.into_iter().collect();
            assert_eq!(got, want, "round {round}");
        }
    }

    #[test]
    fn an_event_pushed_late_with_a_reserved_sequence_runs_where_it_was_reserved() {
        // The deferred TxDone: its sequence number is taken when the transmission starts and the
        // event is pushed only later, possibly after events at the same time were pushed.
        let mut rng = llmsim_core::SimRng::seed(13);
        let mut q = EvQueue::default();
        let mut reference: std::collections::BTreeSet<(u64, u64, u64)> = Default::default();
        let mut pending: Vec<(u64, u64, u64)> = Vec::new();
        let mut now = 0u64;
        for i in 0..20_000u64 {
            match rng.below(4) {
                0 => {
                    let t = now + 1000 * rng.below(3);
                    let seq = q.reserve_seq();
                    pending.push((t, seq, i));
                }
                1 if !pending.is_empty() => {
                    let (t, seq, e) = pending.swap_remove(rng.below(pending.len() as u64) as usize);
                    let t = t.max(now);
                    q.push_seq(t, seq, e);
                    reference.insert((t, seq, e));
                }
                2 if !reference.is_empty() => {
                    let (t, _, e) = reference.pop_first().expect("non-empty");
                    assert_eq!(q.pop(), Some((t, e)));
                    now = t;
                }
                _ => {
                    let t = now + 1000 * rng.below(3) + rng.below(2);
                    let seq = q.seq;
                    q.push(t, i);
                    reference.insert((t, seq, i));
                }
            }
        }
        for (t, _, e) in reference {
            assert_eq!(q.pop(), Some((t, e)));
        }
    }

    #[test]
    fn slots_of_many_chunks_keep_every_event_in_order() {
        // Many events in a few future slots (lists of many chunks, some of them partly
        // filled), through an extract (which refills slots from recycled chunks), a rebase (a
        // push before the current slot) and pops: all come out, in (time, sequence) order.
        let mut rng = llmsim_core::SimRng::seed(17);
        let mut q = EvQueue::default();
        let mut reference: std::collections::BTreeSet<(u64, u64, u64)> = Default::default();
        let mut seq = 0u64;
        let mut push = |q: &mut EvQueue, r: &mut std::collections::BTreeSet<(u64, u64, u64)>, t: u64| {
            q.push(t, seq);
            r.insert((t, seq, seq));
            seq += 1;
        };
        push(&mut q, &mut reference, 5_000_000);
        // The wheel runs ahead to 5 us; everything below is pushed before its current slot.
        assert_eq!(q.pop_until(1_000), None);
        for _ in 0..(8 * K + 1) {
            for slot in [2_000u64, 2_001, 3_000, 5_000 + SLOTS as u64] {
                let t = slot * SLOT_PS + rng.below(SLOT_PS);
                push(&mut q, &mut reference, t);
            }
        }
        let mut out = Vec::new();
        q.extract(|e| e % 5 == 0, &mut out);
        assert!(out.iter().all(|&(_, _, e)| e % 5 == 0));
        let mut taken: Vec<(u64, u64, u64)> = reference.iter().copied().filter(|&(_, _, e)| e % 5 == 0).collect();
        reference.retain(|&(_, _, e)| e % 5 != 0);
        let mut got = out.clone();
        got.sort_unstable();
        taken.sort_unstable();
        assert_eq!(got, taken);
        assert_eq!(q.len(), reference.len());
        for (t, _, e) in reference {
            assert_eq!(q.pop(), Some((t, e)));
        }
        assert_eq!(q.pop(), None);
    }

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

    #[test]
    fn matches_a_sorted_reference_when_pushing_while_popping() {
        // Mixed horizons (same slot, wheel, far heap), pushes relative to the current time.
        let mut q = EvQueue::default();
        let mut rng = llmsim_core::SimRng::seed(11);
        let mut reference: std::collections::BTreeSet<(u64, u64)> = Default::default();
        let mut seq = 0u64;
        let mut now = 0u64;
        for _ in 0..20_000 {
            if rng.below(3) > 0 || reference.is_empty() {
                let d = match rng.below(4) {
                    0 => rng.below(1000),
                    1 => rng.below(50_000),
                    2 => rng.below(20_000_000),
                    _ => 0,
                };
                q.push(now + d, seq);
                reference.insert((now + d, seq));
                seq += 1;
            } else {
                let want = reference.pop_first().expect("non-empty");
                assert_eq!(q.peek_time(), Some(want.0));
                let got = q.pop().expect("non-empty");
                assert_eq!(got, want);
                now = got.0;
            }
            assert_eq!(q.len(), reference.len());
        }
        while let Some(want) = reference.pop_first() {
            assert_eq!(q.pop(), Some(want));
        }
        assert_eq!(q.pop(), None);
    }
}
