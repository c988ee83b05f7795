//! Congestion control at the sender NIC, one file per algorithm: DCQCN (Mellanox timer
//! variant), HPCC, TIMELY and rate-based DCTCP, as `rdma-hw.cc` of the HPCC ns-3 code base
//! implements them. Rates are integer bit/s like ns-3's `DataRate`; products with a float
//! truncate as `DataRate * double` does.
//!
//! Each algorithm is a type implementing [`CongestionControl`]: its per-QP state, its reaction
//! to ACKs (with their ECN echo, INT words and timestamps) and timers, and what Wormhole needs
//! of it (moving its sequence marks over a fast-forward, its memo snapshot and restore). It sees
//! the engine only through [`CcHost`]. The `registry!` line at the bottom of this file lists the
//! algorithms: it makes [`CcMode`] (names, aliases, ns-3 `CC_MODE` numbers, header bytes), the
//! per-QP [`CcState`] enum and the dispatch, all static (a `match`, no trait objects).
//!
//! Adding an algorithm: a new file here with a type implementing `CongestionControl`, its `mod`
//! line and one entry in `registry!`; scenarios (`network.cc`), ns-3's `CC_MODE` and the schema
//! pick it up from the registry (regenerate `docs/reference` with `cargo run -p llmsim-cli --
//! schema --out docs/reference`). New tunables go in `PacketConfig` (and `ns3.rs`'s key table);
//! state a memo hit must carry over goes in `memo::CcSnap`, whose record format is shared.

mod dcqcn;
mod dctcp;
mod hpcc;
mod hpcc_pint;
pub(crate) mod int;
mod swift;
mod timely;

use super::config::PacketConfig;
use super::memo::CcSnap;
use super::tables::{Flow, MAX_HOPS, Pkt};

/// What a congestion-control algorithm may see and do of the engine: its flows, the
/// configuration, the clock, its timers and the NIC's pacing. The engine implements it; the
/// algorithms are generic over it (monomorphized: no dynamic dispatch).
pub(crate) trait CcHost {
    fn cfg(&self) -> &PacketConfig;
    /// Flow (QP) `f`.
    fn flow(&mut self, f: u32) -> &mut Flow;
    fn now_ns(&self) -> u64;
    /// The largest bandwidth-delay product of the fabric (HPCC's window without `HAS_WIN`).
    fn max_bdp(&self) -> u64;
    /// Arms timer `slot` (below `events::CC_TIMERS`) of flow `f`, `delay_ps` from now; re-arming
    /// does not cancel the one pending.
    fn schedule_timer(&mut self, f: u32, slot: usize, delay_ps: u64);
    /// Drops flow `f`'s pending timer `slot`.
    fn cancel_timer(&mut self, f: u32, slot: usize);
    /// `RdmaHw::ChangeRate`: sets flow `f`'s rate and shifts its next send time by the change
    /// in pacing gap.
    fn change_rate(&mut self, f: u32, new_rate: u64);
    /// The INT hop words packet slot `p` carries (when the algorithm sets `INT`).
    fn int_words(&self, p: u32) -> [u64; MAX_HOPS];
    /// The send time (ns) packet slot `p` carries (when the algorithm sets `SEND_TS`).
    fn send_ts(&self, p: u32) -> u64;
    /// Links on flow `f`'s data path.
    fn path_hops(&self, f: u32) -> u32;
}

/// One congestion-control algorithm: its per-QP state (`Self`) and its reactions.
pub(crate) trait CongestionControl: Clone + Sized {
    /// Its name in scenarios and reports (lowercase).
    const NAME: &'static str;
    /// Other names `CcMode::parse` accepts.
    const ALIASES: &'static [&'static str] = &[];
    /// ns-3's `CC_MODE` number.
    const NS3_MODE: u32;
    /// One line for the scenario reference.
    const DOC: &'static str;
    /// Bytes of the INT field data packets and ACKs carry (`IntHeader::GetStaticSize`).
    const INT_BYTES: u32 = 0;
    /// Switches stamp INT hop words on its data packets (HPCC).
    const INT: bool = false;
    /// Its data packets carry their send time (TIMELY).
    const SEND_TS: bool = false;
    /// Wormhole's steady-state window (samples) when a scenario gives none: 8, or what was
    /// measured for the algorithm (`llmsim_sim::default_window`).
    const FF_WINDOW: usize = 8;

    /// The `run.py` parameters of ns-3's HPCC code base at 100 Gbps for this algorithm, over
    /// the common defaults.
    fn ns3_defaults(_c: &mut PacketConfig) {}
    /// The state of a QP starting at line rate `line` (`RdmaQueuePair` constructor).
    fn new(cfg: &PacketConfig, line: u64) -> Self;
    /// An ACK or NACK `pk` (packet slot `p`) of flow `f` arrived at the sender.
    fn on_ack<H: CcHost>(h: &mut H, f: u32, p: u32, pk: &Pkt);
    /// Timer `slot` of flow `f` fired.
    fn on_timer<H: CcHost>(_h: &mut H, _f: u32, _slot: usize) {}
    /// Wormhole moved the flow `bytes` further and the clock `d_ns` later: its sequence marks
    /// and recorded times move with it.
    fn fast_forward(&mut self, _bytes: u64, _d_ns: u64) {}
    /// Writes its fields of a memo snapshot (the others keep their neutral values).
    fn snapshot(&self, _s: &mut CcSnap) {}
    /// Takes a converged flow's snapshot `s` (rates clamped to flow `f`'s line rate, already
    /// set from `s.rate`).
    fn restore<H: CcHost>(_h: &mut H, _f: u32, _s: &CcSnap) {}
    /// Whether flow `fl`, alone on its path, sees its rate settle within Wormhole's sampling
    /// window (DCQCN below line rate rises only at its rate-increase timer).
    fn settles_alone(_fl: &Flow) -> bool {
        true
    }
    /// Whether flow `fl`'s rate is on its way up to a target more than `theta` above it, a move
    /// that comes at a timer rather than with the ACKs (DCQCN's fast recovery), so that flat
    /// samples over Wormhole's window are no steady state.
    fn recovering(_fl: &Flow, _theta: f64) -> bool {
        false
    }
}

/// Truncating `DataRate * double`.
#[inline]
pub(crate) fn scale(rate: u64, f: f64) -> u64 {
    (rate as f64 * f) as u64
}

/// A snapshot with every algorithm's fields at their starting values for a flow at line rate
/// `line` (`rate`: the flow's current rate); each algorithm then writes its own.
fn neutral_snap(rate: u64, line: u64) -> CcSnap {
    CcSnap {
        rate,
        alpha: 1.0,
        target: line,
        first_cnp: true,
        cur_rate: line,
        u: 1.0,
        d_alpha: 1.0,
        ..CcSnap::default()
    }
}

macro_rules! registry {
    ($($variant:ident => $ty:ty),* $(,)?) => {
        /// Congestion control run by every QP (`CC_MODE` in ns-3); the variants are the
        /// algorithms of `cc/`'s registry, and `None`.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum CcMode {
            $(#[doc = concat!("`", stringify!($ty), "`")] $variant,)*
            /// Line rate, no reaction (any other mode; still paced, windowed, lossless).
            None,
        }

        /// Per-QP congestion-control state: the configured algorithm's.
        #[derive(Clone, Default)]
        pub(crate) enum CcState {
            /// Before the QP starts, and under `CcMode::None`.
            #[default]
            None,
            $($variant($ty),)*
        }

        $(
            impl $ty {
                /// Its state in `cc` (built by `new`: the variant matches).
                #[inline]
                #[allow(dead_code, reason = "a stateless algorithm never reads its state")]
                fn state_of(cc: &mut CcState) -> &mut Self {
                    match cc {
                        CcState::$variant(s) => s,
                        _ => unreachable!(concat!("QP state is not ", stringify!($variant))),
                    }
                }
            }
        )*

        impl CcMode {
            /// Every registered algorithm (not `None`), in registry order.
            pub const ALL: &'static [CcMode] = &[$(CcMode::$variant,)*];
            /// Their names, in the same order.
            pub const NAMES: &'static [&'static str] = &[$(<$ty>::NAME,)*];

            /// ns-3's `CC_MODE` number.
            pub fn ns3_mode(self) -> u32 {
                match self {
                    $(CcMode::$variant => <$ty>::NS3_MODE,)*
                    CcMode::None => 0,
                }
            }
            /// The algorithm of ns-3's `CC_MODE` `m`, if registered.
            pub fn from_ns3_mode(m: u32) -> Option<CcMode> {
                CcMode::ALL.iter().copied().find(|c| c.ns3_mode() == m)
            }
            /// The algorithm's name in configs and reports.
            pub fn name(self) -> &'static str {
                match self {
                    $(CcMode::$variant => <$ty>::NAME,)*
                    CcMode::None => "none",
                }
            }
            /// One line describing the algorithm.
            pub fn doc(self) -> &'static str {
                match self {
                    $(CcMode::$variant => <$ty>::DOC,)*
                    CcMode::None => "Line rate, no reaction.",
                }
            }
            fn aliases(self) -> &'static [&'static str] {
                match self {
                    $(CcMode::$variant => <$ty>::ALIASES,)*
                    CcMode::None => &[],
                }
            }
            /// Parses a registered name or alias, or `none` (any case).
            pub fn parse(s: &str) -> Option<CcMode> {
                let s = s.to_ascii_lowercase();
                if s == "none" {
                    return Some(CcMode::None);
                }
                CcMode::ALL.iter().copied().find(|c| c.name() == s || c.aliases().contains(&s.as_str()))
            }
            /// Bytes of the INT field carried by data packets and ACKs (`IntHeader::GetStaticSize`).
            pub fn int_bytes(self) -> u32 {
                match self {
                    $(CcMode::$variant => <$ty>::INT_BYTES,)*
                    CcMode::None => 0,
                }
            }
            /// Switches stamp INT hop words on data packets.
            #[inline]
            pub(crate) fn uses_int(self) -> bool {
                match self {
                    $(CcMode::$variant => <$ty>::INT,)*
                    CcMode::None => false,
                }
            }
            /// Data packets carry their send time.
            #[inline]
            pub(crate) fn uses_send_ts(self) -> bool {
                match self {
                    $(CcMode::$variant => <$ty>::SEND_TS,)*
                    CcMode::None => false,
                }
            }
            /// Wormhole's default steady-state window (samples) under this algorithm.
            pub fn fast_forward_window(self) -> usize {
                match self {
                    $(CcMode::$variant => <$ty>::FF_WINDOW,)*
                    CcMode::None => 8,
                }
            }
            pub(crate) fn apply_ns3_defaults(self, c: &mut PacketConfig) {
                match self {
                    $(CcMode::$variant => <$ty>::ns3_defaults(c),)*
                    CcMode::None => {}
                }
            }
            /// The state of a QP starting at line rate `line`.
            pub(crate) fn new_state(self, cfg: &PacketConfig, line: u64) -> CcState {
                match self {
                    $(CcMode::$variant => CcState::$variant(<$ty>::new(cfg, line)),)*
                    CcMode::None => CcState::None,
                }
            }
        }

        /// An ACK or NACK `pk` (slot `p`) of flow `f` arrived at its sender.
        #[inline]
        pub(crate) fn on_ack<H: CcHost>(h: &mut H, f: u32, p: u32, pk: &Pkt) {
            match h.cfg().cc {
                $(CcMode::$variant => <$ty>::on_ack(h, f, p, pk),)*
                CcMode::None => {}
            }
        }

        /// Timer `slot` of flow `f` fired (and is current).
        pub(crate) fn on_timer<H: CcHost>(h: &mut H, f: u32, slot: usize) {
            match h.cfg().cc {
                $(CcMode::$variant => <$ty>::on_timer(h, f, slot),)*
                CcMode::None => {}
            }
        }

        /// Gives flow `f` the state of a converged flow's snapshot `s`: its rate, and its
        /// algorithm's fields (its sequence marks and INT records stay its own).
        pub(crate) fn restore<H: CcHost>(h: &mut H, f: u32, s: &CcSnap) {
            let fl = h.flow(f);
            fl.rate = s.rate.min(fl.max_rate);
            match h.cfg().cc {
                $(CcMode::$variant => <$ty>::restore(h, f, s),)*
                CcMode::None => {}
            }
        }

        /// Whether flow `fl` alone on its path settles within Wormhole's window.
        pub(crate) fn settles_alone(cc: CcMode, fl: &Flow) -> bool {
            match cc {
                $(CcMode::$variant => <$ty>::settles_alone(fl),)*
                CcMode::None => true,
            }
        }

        /// Whether flow `fl`'s algorithm is still raising its rate towards a target.
        pub(crate) fn recovering(cc: CcMode, fl: &Flow, theta: f64) -> bool {
            match cc {
                $(CcMode::$variant => <$ty>::recovering(fl, theta),)*
                CcMode::None => false,
            }
        }

        impl CcState {
            /// Wormhole moved the flow `bytes` further and the clock `d_ns` later.
            pub(crate) fn fast_forward(&mut self, bytes: u64, d_ns: u64) {
                match self {
                    $(CcState::$variant(s) => s.fast_forward(bytes, d_ns),)*
                    CcState::None => {}
                }
            }
        }

        /// Flow `fl`'s memo snapshot.
        pub(crate) fn snapshot(fl: &Flow) -> CcSnap {
            let mut s = if fl.started { neutral_snap(fl.rate, fl.max_rate) } else { CcSnap { rate: fl.rate, ..CcSnap::default() } };
            match &fl.cc {
                $(CcState::$variant(c) => c.snapshot(&mut s),)*
                CcState::None => {}
            }
            s
        }
    };
}

/// DCQCN, the default of ns-3's HPCC code base and of scenarios.
impl Default for CcMode {
    fn default() -> Self {
        CcMode::Dcqcn
    }
}

/// By its registry name (`dcqcn`).
impl serde::Serialize for CcMode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// A registered algorithm by name or alias (any case); `none` comes only from an ns-3
/// `config.txt`, not from a scenario or command line.
impl<'de> serde::Deserialize<'de> for CcMode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        match CcMode::parse(&name) {
            Some(c) if c != CcMode::None => Ok(c),
            _ => Err(serde::de::Error::unknown_variant(&name, CcMode::NAMES)),
        }
    }
}

/// The registered names, each with its description.
impl schemars::JsonSchema for CcMode {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "CcMode".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let one_of: Vec<schemars::Schema> = CcMode::ALL
            .iter()
            .map(|c| schemars::json_schema!({"const": c.name(), "description": c.doc(), "type": "string"}))
            .collect();
        schemars::json_schema!({
            "description": "Congestion control run by every QP (`CC_MODE` in ns-3): one of the packet engine's registered algorithms.",
            "oneOf": one_of
        })
    }
}

/// `--cc` on the command line: the registered algorithms (not `none`).
#[cfg(feature = "clap")]
impl clap::ValueEnum for CcMode {
    fn value_variants<'a>() -> &'a [Self] {
        CcMode::ALL
    }
    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        match self {
            CcMode::None => None,
            c => Some(clap::builder::PossibleValue::new(c.name()).help(c.doc())),
        }
    }
}

// The registry: one line per algorithm, `Variant => file::Type`.
registry! {
    Dcqcn => dcqcn::Dcqcn,
    Hpcc => hpcc::Hpcc,
    Timely => timely::Timely,
    Dctcp => dctcp::Dctcp,
    Swift => swift::Swift,
    HpccPint => hpcc_pint::HpccPint,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The registry's names, aliases and ns-3 modes are unique and parse back to their
    /// algorithm; header and packet-metadata flags agree (INT words need INT bytes).
    #[test]
    fn registry_is_consistent() {
        let mut names: Vec<&str> = CcMode::ALL
            .iter()
            .flat_map(|c| std::iter::once(c.name()).chain(c.aliases().iter().copied()))
            .collect();
        let n = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), n, "a name or alias is registered twice");
        assert_eq!(CcMode::NAMES, CcMode::ALL.iter().map(|c| c.name()).collect::<Vec<_>>().as_slice());
        for &c in CcMode::ALL {
            assert_eq!(CcMode::parse(c.name()), Some(c));
            assert_eq!(CcMode::parse(&c.name().to_uppercase()), Some(c));
            for a in c.aliases() {
                assert_eq!(CcMode::parse(a), Some(c));
            }
            assert_eq!(CcMode::from_ns3_mode(c.ns3_mode()), Some(c), "ns-3 CC_MODE {} twice", c.ns3_mode());
            assert!(c.ns3_mode() != 0, "CC_MODE 0 is `none`");
            assert!(!c.uses_int() || c.int_bytes() > 0);
            assert!(!c.doc().is_empty());
            assert!(c.fast_forward_window() > 0);
        }
        assert_eq!(CcMode::parse("none"), Some(CcMode::None));
        assert_eq!(CcMode::parse("cubic"), None);
    }
}
