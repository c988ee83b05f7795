#![doc = include_str!("../README.md")]

pub mod error;
pub mod generators;
pub mod graph;
pub mod routing;

pub use error::TopoError;
pub use graph::{Link, LinkKind, LinkParams, NodeKind, ScaleUp, Topology, TopologyBuilder};
pub use routing::Routing;
