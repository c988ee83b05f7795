//! The packet engine's per-id tables and what they hold: packets (a slab, linked into queues
//! through `Pkt::next`), egress ports (one per directed link), ingress accounts (one per link
//! into a switch), switch buffers, NICs and flows (QPs). Each row is laid out in cache lines by
//! use; the layout assertions below keep it so.

use super::at::prefetch;
use super::cc::CcState;
use super::events::CC_TIMERS;

pub(crate) const NQ: usize = 8;
pub(crate) const MAX_HOPS: usize = 5;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Kind {
    Data,
    Ack,
    Nack,
    /// A UET data packet a switch cut to its header (`transport::uet`): no payload.
    Trim,
    /// A PFC PAUSE frame for class `pg`.
    Pause,
    /// A PFC RESUME frame for class `pg`.
    Resume,
}

impl Kind {
    #[inline]
    pub fn is_pfc(self) -> bool {
        matches!(self, Kind::Pause | Kind::Resume)
    }
}

/// One packet in flight or queued: 32 bytes, aligned, so a packet never straddles two cache
/// lines and two share one. A data packet's payload is its size less the engine's header bytes;
/// TIMELY's send timestamp lives apart (`PacketEngine::ts`), as HPCC's INT words do.
#[derive(Clone, Copy)]
#[repr(C, align(32))]
pub(crate) struct Pkt {
    /// Data: first byte. ACK/NACK: next expected byte.
    pub seq: u64,
    pub flow: u32,
    /// Offset of the packet's path in `PacketEngine::paths` (the flow's data or ACK path), so a
    /// switch routes it without touching the flow.
    pub path: u32,
    /// The next packet in the same queue (`NIL`: none).
    pub next: u32,
    /// The link the packet entered the current switch on.
    pub in_link: u32,
    /// Wire bytes (`PacketEngine::new` checks that a full packet fits).
    pub size: u16,
    pub kind: Kind,
    /// Priority group (data, ACK) or the paused class (PFC).
    pub pg: u8,
    pub ecn: bool,
    pub cnp: bool,
    pub nhop: u8,
    /// Links crossed so far.
    pub hop: u8,
}

const _: () = assert!(std::mem::size_of::<Pkt>() == 32);

pub(crate) const NIL: u32 = u32::MAX;

/// A port samples its queue length into `Port::qlen_hist` at every `QLEN_SAMPLE`th dequeue.
pub(crate) const QLEN_SAMPLE: u8 = 8;
// `Port::dequeues` counts modulo 256: the sampling period must divide it.
const _: () = assert!(256 % QLEN_SAMPLE as u32 == 0);

/// A FIFO of packets linked through `Pkt::next`: a queue costs two words and pushing or popping
/// touches only the packets themselves (which the engine reads anyway), not a separate buffer.
#[derive(Clone, Copy)]
pub(crate) struct PktList {
    pub(crate) head: u32,
    tail: u32,
}

impl Default for PktList {
    fn default() -> Self {
        PktList { head: NIL, tail: NIL }
    }
}

impl PktList {
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.head == NIL
    }

    #[inline]
    pub fn push_back(&mut self, pkts: &mut [Pkt], p: u32) {
        pkts[p as usize].next = NIL;
        if self.head == NIL {
            self.head = p;
        } else {
            pkts[self.tail as usize].next = p;
        }
        self.tail = p;
    }

    #[inline]
    pub fn pop_front(&mut self, pkts: &[Pkt]) -> Option<u32> {
        if self.head == NIL {
            return None;
        }
        let p = self.head;
        self.head = pkts[p as usize].next;
        Some(p)
    }

    /// The queued packets, front to back.
    pub fn iter<'a>(&self, pkts: &'a [Pkt]) -> impl Iterator<Item = u32> + 'a {
        std::iter::successors((self.head != NIL).then_some(self.head), move |&p| {
            let n = pkts[p as usize].next;
            (n != NIL).then_some(n)
        })
    }
}

impl Pkt {
    pub(crate) fn empty() -> Self {
        Pkt {
            kind: Kind::Data,
            pg: 0,
            ecn: false,
            cnp: false,
            nhop: 0,
            size: 0,
            flow: 0,
            seq: 0,
            in_link: u32::MAX,
            hop: 0,
            path: 0,
            next: NIL,
        }
    }
}

/// One of a port's 8 priority queues: its packets and their bytes, side by side, so an enqueue
/// or dequeue touches one cache line of the port for both.
#[derive(Clone, Copy, Default)]
pub(crate) struct PortQueue {
    pub list: PktList,
    pub bytes: u64,
}

/// An egress port: one per directed link. Laid out in 64-byte lines by use: the first holds what
/// every transmission and every event on the port reads (state, the link's ends and delay), the
/// next two the queues (0-3, the control queue and the usual data classes, then 4-7), the last
/// the statistics' buffers. What follows from the link's rate alone (serialization times, ECN
/// thresholds, the INT rate index) is in the engine's small per-rate table (`PacketEngine::rates`),
/// so a dequeue reads the port's first two lines and no third.
#[repr(C, align(64))]
pub(crate) struct Port {
    pub total: u64,
    pub busy: bool,
    pub txdone_pending: bool,
    /// Bit `q` set while the peer's PFC pauses queue `q`.
    pub paused: u8,
    pub rrlast: u8,
    /// Bit `q` set when queue `q` holds a packet (the round robin reads it, not the queues).
    pub nonempty: u8,
    /// Dequeues, modulo 256 (the queue-length histogram samples every `QLEN_SAMPLE`th).
    pub dequeues: u8,
    /// The link rate's entry in `PacketEngine::rates`.
    pub rate: u16,
    pub max_qlen: u64,
    /// Switch ports: when the current transmission ends, and the sequence number reserved for
    /// its TxDone event, which is only pushed once something waits for the port.
    pub busy_until: u64,
    pub txdone_seq: u64,
    pub tx_bytes: u64,
    /// The link's sending and receiving nodes and its propagation delay (ps), kept here (the
    /// engine has no other copy) so an event on the port loads one cache line for them.
    pub src: u32,
    pub dst: u32,
    pub delay: u64,
    pub queues: [PortQueue; NQ],
    /// Histogram of the port's queued bytes at every 8th dequeue, in 1 KB buckets.
    pub qlen_hist: Vec<u32>,
    /// Bytes put on the wire per utilization bin (when `PacketEngine::set_util_bin` is on), from bin
    /// `util_first` (the port's first transmission) on.
    pub util: Vec<u64>,
    pub util_first: u64,
}

const _: () = assert!(std::mem::offset_of!(Port, queues) == 64);
const _: () = assert!(std::mem::size_of::<Port>() == 256);

/// What a port's transmissions and ECN marking need of its link rate, one entry per distinct
/// rate (a fabric has a handful, so the table stays in the first-level cache).
#[derive(Clone, Copy)]
pub(crate) struct RateInfo {
    /// The rate itself (`PacketEngine::link_rate` of every link with this entry: the per-link table
    /// serves the set-up and Wormhole, this copy the per-packet paths beside the times below).
    pub bps: u64,
    /// Serialization times (ps) of the two common packet sizes at this rate (a full data
    /// packet, an ACK), so `transmit` skips ns-3's floating-point formula for them.
    pub tx_cache: [(u32, u64); 2],
    /// ECN marking thresholds of switch ports of this rate (`u64::MAX`: none).
    pub kmin: u64,
    pub kmax: u64,
    pub pmax: f64,
    /// The rate's index in HPCC's INT rate table (`cc::int_rate_index`).
    pub int_rate: u8,
}

impl Port {
    /// Appends packet `p` (`size` bytes) to queue `q`.
    #[inline]
    pub fn enqueue(&mut self, pkts: &mut [Pkt], q: usize, p: u32, size: u64) {
        let qu = &mut self.queues[q];
        qu.list.push_back(pkts, p);
        qu.bytes += size;
        self.total += size;
        self.nonempty |= 1 << q;
    }

    /// Takes the head of queue `q`, if any, with its size.
    #[inline]
    pub fn dequeue(&mut self, pkts: &[Pkt], q: usize) -> Option<(u32, u64)> {
        let qu = &mut self.queues[q];
        let p = qu.list.pop_front(pkts)?;
        let size = u64::from(pkts[p as usize].size);
        qu.bytes -= size;
        self.total -= size;
        if qu.list.is_empty() {
            self.nonempty &= !(1 << q);
        } else {
            // The next packet out of this queue (at the port's next TxDone, most likely): its
            // line was last touched when it was queued. A hint only.
            prefetch(pkts.as_ptr().wrapping_add(qu.list.head as usize));
        }
        Some((p, size))
    }

    #[inline]
    pub fn has(&self, q: usize) -> bool {
        self.nonempty & (1 << q) != 0
    }
}

/// Ingress accounting of a switch for one incoming link (`SwitchMmu`, per port and priority),
/// in one 64-byte line: every admission, dequeue and PFC check of a packet reads one line. The
/// counters are `u32`, as ns-3's are (`PacketEngine::new` checks that the buffer and the headroom
/// fit). Class 0, the control class, is never accounted: its pair holds the link's headroom and
/// its threshold shift and pause bits instead.
#[derive(Clone, Copy, Default, PartialEq, Debug)]
#[repr(C, align(64))]
pub(crate) struct Ingress {
    /// `w[q]`, q in 1..=7: bytes and headroom bytes held of class `q`. `w[0]`: the headroom, and
    /// the PFC threshold shift with (from bit 8) bit `q` set while we pause the upstream
    /// sender of class `q`.
    pub(crate) w: [[u32; 2]; NQ],
}

const _: () = assert!(std::mem::size_of::<Ingress>() == 64);

impl Ingress {
    pub(crate) fn new(headroom: u32, shift: u8) -> Self {
        let mut w = [[0; 2]; NQ];
        w[0] = [headroom, u32::from(shift)];
        Ingress { w }
    }
    #[inline]
    pub(crate) fn headroom(&self) -> u64 {
        u64::from(self.w[0][0])
    }
    #[inline]
    pub(crate) fn shift(&self) -> u32 {
        self.w[0][1] & 0xFF
    }
    #[inline]
    pub(crate) fn bytes(&self, q: usize) -> u64 {
        debug_assert!(q != 0 && q < NQ);
        u64::from(self.w[q & (NQ - 1)][0])
    }
    #[inline]
    pub(crate) fn hdrm(&self, q: usize) -> u64 {
        debug_assert!(q != 0 && q < NQ);
        u64::from(self.w[q & (NQ - 1)][1])
    }
    /// Adds `d` (two's complement for a decrease) to the bytes (`k` 0) or headroom bytes (1).
    #[inline]
    pub(crate) fn add(&mut self, q: usize, k: usize, d: u64) {
        debug_assert!(q != 0 && q < NQ);
        let c = &mut self.w[q & (NQ - 1)][k & 1];
        *c = c.wrapping_add(d as u32);
    }
    #[inline]
    pub(crate) fn paused(&self, q: usize) -> bool {
        self.w[0][1] & (1 << (8 + q)) != 0
    }
    #[inline]
    pub(crate) fn set_paused(&mut self, q: usize, on: bool) {
        if on {
            self.w[0][1] |= 1 << (8 + q);
        } else {
            self.w[0][1] &= !(1 << (8 + q));
        }
    }
}

#[derive(Clone, Default)]
pub(crate) struct SwitchBuf {
    pub shared_used: u64,
    /// The buffer less every port's headroom and reserve (`SwitchMmu::GetPfcThreshold`'s
    /// constant part; saturating at 0).
    pub free_base: u64,
    /// Lossy switches with per-port tail drop: each egress port's share of the buffer.
    pub port_cap: u64,
}

/// A host's NIC (`RdmaEgressQueue` + the host side of `QbbNetDevice`), in one 64-byte line:
/// every host event reads it.
#[repr(align(64))]
pub(crate) struct Nic {
    pub link: u32,
    pub ackq: PktList,
    pub qps: Vec<u32>,
    pub rrlast: u32,
    /// The pending wake-up (`m_nextSend`), if any, and its generation.
    pub next_send: Option<u64>,
    pub wake_gen: u32,
    pub ns3_ip: u32,
}

const _: () = assert!(std::mem::size_of::<Nic>() == 64);

/// A QP: sender and receiver state of one flow, in 64-byte lines by use: the first holds what the
/// NIC's round robin reads for every QP it scans and what sending a packet updates, the second
/// the rest of a packet's sending and its receipt (an ACK's path included), so a data packet's
/// departure and arrival each read two lines; then congestion control and the cold fields.
/// Aligned to 128 bytes, so the first two lines are one pair of the L2 adjacent-line prefetcher
/// (at 64-byte alignment a 320-byte row put every other flow's second line in the next pair:
/// 25% slower on bench/ns3_speed.sh's 320-host run).
#[repr(C, align(128))]
pub(crate) struct Flow {
    pub size: u64,
    pub snd_nxt: u64,
    pub snd_una: u64,
    pub rate: u64,
    pub max_rate: u64,
    pub win: u64,
    pub next_avail: u64,
    pub pg: u8,
    pub done: bool,
    /// Offsets of the data path (src -> dst) and the ACK path (dst -> src) in `PacketEngine::paths`.
    pub path_data: u32,
    /// Highest `snd_nxt` reached (bytes below it sent again are retransmissions).
    pub max_sent: u64,
    pub last_pkt_size: u32,
    pub path_ack: u32,
    // receiver
    pub rx_expected: u64,
    pub rx_milestone: u64,
    pub nack_timer: u64,
    pub last_nack: u64,
    pub src: u32,
    pub dst: u32,
    pub base_rtt_ns: u64,
    pub cc: CcState,
    pub timer_gen: [u32; CC_TIMERS],
    pub start: u64,
    pub sport: u16,
    pub dport: u16,
    pub tag: u64,
    pub hash: u64,
    pub started: bool,
    /// Equal-cost data paths the flow has (`lb.rs`; 1 under ECMP), concatenated from
    /// `path_data`, and the one the next packet takes (spray, flowlet).
    pub npaths: u8,
    pub path_idx: u8,
    pub finish: u64,
    /// When the flow last made a data packet, plus one (ps; 0: none yet; flowlet balancing).
    pub last_tx: u64,
}

const _: () = assert!(std::mem::offset_of!(Flow, path_data) == 60);
const _: () = assert!(std::mem::offset_of!(Flow, max_sent) == 64);
const _: () = assert!(std::mem::offset_of!(Flow, cc) == 128);
const _: () = assert!(std::mem::size_of::<Flow>() == 384);

impl Flow {
    #[inline]
    pub fn bytes_left(&self) -> u64 {
        self.size.saturating_sub(self.snd_nxt)
    }
    #[inline]
    pub fn finished(&self) -> bool {
        self.snd_una >= self.size
    }
    /// `RdmaQueuePair::GetWin`.
    #[inline]
    pub fn window(&self, var_win: bool) -> u64 {
        if self.win == 0 {
            return 0;
        }
        if var_win {
            // The same integer quotient; in u64 when the product fits (always, for windows and
            // rates of real fabrics), which spares a 128-bit division on every QP the round
            // robin looks at.
            let m = self.max_rate.max(1);
            let w = match self.win.checked_mul(self.rate) {
                Some(p) => p / m,
                None => (u128::from(self.win) * u128::from(self.rate) / u128::from(m)) as u64,
            };
            w.max(1)
        } else {
            self.win
        }
    }
    #[inline]
    pub fn win_bound(&self, var_win: bool) -> bool {
        let w = self.window(var_win);
        w != 0 && self.snd_nxt - self.snd_una >= w
    }
}
