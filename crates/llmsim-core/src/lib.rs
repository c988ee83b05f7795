#![doc = include_str!("../README.md")]

pub mod csr;
pub mod error;
pub mod heap;
pub mod ids;
pub mod queue;
pub mod radix;
pub mod rng;
pub mod schema;
pub mod units;
pub mod vocab;

pub use error::{FieldError, UnitError, parse_field};
pub use heap::MinHeap4;
pub use ids::{LinkId, NodeId, TransferId};
pub use queue::EventQueue;
pub use radix::RadixQueue;
pub use rng::{SimRng, mix64};
pub use units::{Bandwidth, Bytes, Power, SimTime};
pub use vocab::{CollectiveOp, GpuArch};
