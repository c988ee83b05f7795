//! Typed indices. Every id is a dense index into a `Vec` owned by whoever issued it.

macro_rules! id_type {
    ($(#[$m:meta])* $name:ident, $inner:ty) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub $inner);
        impl $name {
            /// The index into the issuer's `Vec`.
            #[inline]
            pub const fn idx(self) -> usize {
                self.0 as usize
            }
            /// The id of index `i`; panics past the id type's range (an internal bound, not user input).
            #[inline]
            pub fn from_idx(i: usize) -> Self {
                $name(<$inner>::try_from(i).expect(concat!(stringify!($name), " index overflow")))
            }
        }
        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}", self.0)
            }
        }
    };
}

id_type!(
    /// A vertex of the topology graph: a host (GPU + its NIC), a switch or an NVSwitch.
    NodeId, u32
);
id_type!(
    /// A directed link (one direction of a cable).
    LinkId, u32
);
id_type!(
    /// A point-to-point transfer handed to a network backend.
    TransferId, u64
);
