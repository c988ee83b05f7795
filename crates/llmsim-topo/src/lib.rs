#![doc = include_str!("../README.md")]

pub mod bcube;
pub mod clos;
pub mod dragonfly;
pub mod error;
pub mod family;
pub mod fastdiv;
pub mod full_mesh;
pub mod generators;
pub mod graph;
pub mod grid;
pub mod link_spec;
pub mod names;
pub mod ns3;
pub mod rail_only;
pub mod routing;
pub mod spec;
pub mod summary;
pub mod three_tier;
pub mod torus;

pub use error::TopoError;
pub use family::{FamilySpec, RoutingRule};
pub use graph::{Hop, Link, LinkKind, LinkParams, NodeKind, ScaleUp, Topology, TopologyBuilder};
pub use routing::Routing;
pub use spec::{LinkSpec, TopologySpec};
pub use summary::{CostProxies, TopologySummary};
